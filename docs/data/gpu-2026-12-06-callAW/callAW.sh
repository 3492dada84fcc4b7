#!/usr/bin/env bash
# Device call AW (a short call: the session's device time ran low): mla_attention_mma64x64 with its query loads unrolled, the next tile's pool
# rows found while a tile's keys copy, division-free key copies and the score fragments loaded a
# step ahead. (1) the conformance suite with GLINT_CUDA_MLA_H64=all; (2) a 512-token prefill
# step's per-kernel profile with and without the kernel (bf16 caches); (3) pp512 of the 3 + 4 file,
# H64 on/off, both product paths, one round; (4) Nsight Compute's full set on one launch of it.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
mkdir -p $R/tests
GLINT_CUDA_MLA_H64=all B device-bin/tests/glint-cuda--conformance > $R/tests/conformance-h64all.log 2>&1; t "conformance H64=all rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
for h in default 0; do
  GLINT_CUDA_MLA_H64=$h OUT=$R/profile-h64-$h PROFILE_PROMPT=512 PROFILE_ARGS="$BF" NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile h64=$h rc=$?"
done
wait $s2; t synth
{ for r in 1; do for g in 128 0; do for h in 1 0; do
    echo "== s34 gemm_min=$g h64=$h"; GLINT_CUDA_MLA_H64=$([ $h = 0 ] && echo 0 || echo default) GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; done; } > $R/ab.txt 2>&1; t ab
rm -f /tmp/s34.gguf
OUT=$R/stalls KERNELS='mla_attention_mma64x64_bf16' COUNT=1 PROFILE_ARGS="$BF" B bash scripts/cuda-stalls.sh > /dev/null 2>&1; t "stalls rc=$?"
