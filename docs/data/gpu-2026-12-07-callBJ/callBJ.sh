#!/usr/bin/env bash
# Not run yet (written 2026-12-07, eleventh session, when its device time was spent): the next
# call after the 128-key indexer blocks became the default (`f9af653`). Build the binaries at the
# head (scripts/cuda-build.sh, then tar -cJf device-pack/bin.tar.xz device-bin) and run from the
# repository root with device-pack/ carried: bash callBJ.sh 560
# (1) every CUDA test binary (compile and quant_types included: call BI left them out);
# (2) the per-MoE-layer anchor at depth 0, 16,384 and 65,536 (tg64 of the 3 + 4 and 3 + 2 files,
# one MoE layer = the difference / 2), with 128 keys a score block and with 64
# (`GLINT_CUDA_IDX_KT=64`), two alternating rounds; (3) pp512 on the default path.
source scripts/device-call-lib.sh "${1:-560}"
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
anchor_files
DEPTHS=0,16384,65536 knob_rounds 60 GLINT_CUDA_IDX_KT=128 GLINT_CUDA_IDX_KT=64 > $R/anchor.txt 2>&1; t anchor
for m in 34 32; do
  B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
done > $R/pp512.txt 2>&1; t pp512
