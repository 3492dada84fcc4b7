#!/usr/bin/env bash
# Device call AO, d7ac88e: per-head products on cuBLAS as one strided batch, and the Q4_K/
# Q5_K/Q6_K decode forming a sub-block's scale once for 8 elements. (1) pp512 of the 3 + 2
# and 3 + 4 files (bf16 caches, fp8 indexer keys) with GLINT_CUDA_GEMM_MIN=128 against the
# default (off), alternating; (2) quant_types (the new per-head test; the decode of every
# type), batched_step (prompt_gemm::cuda, whose F32 fixture has per-head weights; the default
# path's batch invariance), forward_fixture and graphs; (3) the per-kernel profile of a
# 512-token step, cuBLAS on, bf16 caches.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
wait $s1 $s2; t synth
GLINT_CUDA_GEMM_MIN=128 B $G bench -m /tmp/s32.gguf --device cuda -p 512 -n 0 -r 1 > $R/warm.txt 2>&1; t "warm rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
{ for m in 32 32 34; do for g in 0 128; do
    echo "== s$m gemm_min=$g"; GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; } > $R/ab.txt 2>&1; t ab
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
for m in batched_step forward_fixture; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
B device-bin/tests/glint-cuda--graphs > $R/tests/graphs.log 2>&1; t "graphs rc=$?"
[ $(left) -gt 60 ] && GLINT_CUDA_GEMM_MIN=128 PROFILE_ARGS="$BF" OUT=$R/profile PROFILE_PROMPT=512 B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile rc=$?"
