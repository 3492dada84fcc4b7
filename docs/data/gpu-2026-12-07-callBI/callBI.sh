#!/usr/bin/env bash
# Device call BI (binaries `118ab70`): the tensor-core indexer scores with 128 keys a block
# (`GLINT_CUDA_IDX_KT=128`) against 64 (the default, whose kernel became the template's 64-key
# instance). (1) The CUDA tests that run the indexer (glint-cuda conformance and graphs,
# glm5-model's ::cuda tests, glint-tp) by default and with 128 keys a block; quant_types and
# the NVRTC compile test are left out of the binaries (unchanged products; every kernel
# compiled here for sm_80 and sm_90a). (2) Decode on the 1 dense + 1 MoE file at 16k and 64k
# under both settings, two alternating rounds. Run from the repository root with device-pack/
# carried: bash callBI.sh 230
source scripts/device-call-lib.sh "${1:-230}"
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
GLINT_CUDA_IDX_KT=128 OUT=$R/tests128 B bash scripts/cuda-tests.sh > $R/tests128.txt 2>&1; t "tests128 rc=$?"
f=$(scripts/profile-file.sh)
BF="--cache-type bf16 --cache-type-index fp8"
{ for r in 1 2; do
  for kt in 64 128; do
    [ $(left) -gt 25 ] || break 2
    echo "== round $r kt $kt"
    GLINT_CUDA_IDX_KT=$kt B device-bin/glint bench -m $f --device cuda -p 0 -n 32 -d 16384,65536 -b 1 -r 2 $BF 2>&1 | grep -E "tg32|rror|panic"
  done
done; } > $R/ab.txt 2>&1; t ab
