#!/usr/bin/env bash
# Device call AX: the 64-head attention kernel templated on its warp count (branch
# wip/mla-h64-16warps rebased on main). (1) the conformance suite with GLINT_CUDA_MLA_H64=all under
# 8 warps (the template's instance) and 16 warps; batched_step ::cuda with 16 warps; (2) a
# 512-token prefill step's per-kernel profile with 8 and 16 warps (bf16 caches); (3) pp512 of the
# 3 + 4 file, warps 8/16/h64 off, both product paths, two rounds; (4) Nsight's full set on one
# launch of the 16-warp kernel.
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
for w in 8 16; do
  GLINT_CUDA_MLA_H64_WARPS=$w GLINT_CUDA_MLA_H64=all B device-bin/tests/glint-cuda--conformance > $R/tests/conformance-h64all-w$w.log 2>&1; t "conformance H64=all w$w rc=$?"
done
GLINT_CUDA_MLA_H64_WARPS=16 GLINT_CUDA_MLA_H64=all B device-bin/tests/glm5-model--batched_step cuda > $R/tests/batched-w16.log 2>&1; t "batched_step w16 rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
for w in 8 16; do
  GLINT_CUDA_MLA_H64_WARPS=$w OUT=$R/profile-w$w PROFILE_PROMPT=512 PROFILE_ARGS="$BF" NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile w$w rc=$?"
done
wait $s2; t synth
{ for r in 1 2; do for g in 128 0; do for w in 8 16 off; do
    echo "== s34 gemm_min=$g w=$w"; GLINT_CUDA_MLA_H64=$([ $w = off ] && echo 0 || echo all) GLINT_CUDA_MLA_H64_WARPS=$w GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; done; } > $R/ab.txt 2>&1; t ab
rm -f /tmp/s34.gguf
GLINT_CUDA_MLA_H64_WARPS=16 OUT=$R/stalls KERNELS='mla_attention_mma64x64_w16_bf16' COUNT=1 PROFILE_ARGS="$BF" B bash scripts/cuda-stalls.sh > /dev/null 2>&1; t "stalls rc=$?"
