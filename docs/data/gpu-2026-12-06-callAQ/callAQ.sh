#!/usr/bin/env bash
# Device call AQ: mmq_k4 with 3 and 4 buffers (GLINT_CUDA_MMQ_STAGES) and Q6_K on the wide
# tiles (mmq_q6_k_wide*, GLINT_CUDA_MMQ_WIDE_Q6K=0 the old kernel). (1) quant_types (every
# type's products and groupings against the CPU backend and the one-token kernels' bits),
# then its product and grouping tests with 3 and 4 stages; batched_step ::cuda; (2) pp512 of
# the 3 + 4 and 3 + 2 files, bf16 caches + fp8 indexer keys, cuBLAS path on (GEMM_MIN=128)
# and off, alternating settings; (3) the per-kernel profile of a 512-token step of the 1
# dense + 2 MoE file (layer 2's expert down is Q6_K), cuBLAS path on.
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
( PROFILE_MOE=2 bash scripts/profile-file.sh > /dev/null 2>&1 ) & s3=$!
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
wait $s1 $s2 $s3; t synth
B device-bin/tests/glm5-model--batched_step ::cuda > $R/tests/batched_step.log 2>&1; t "batched_step rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
ab() { # file gemm_min q6k_wide stages
  echo "== s$1 gemm_min=$2 q6k_wide=$3 stages=$4"
  GLINT_CUDA_MMQ_WIDE_Q6K=$3 GLINT_CUDA_MMQ_STAGES=$4 GLINT_CUDA_GEMM_MIN=$2 B $G bench -m /tmp/s$1.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
}
{ for m in 34 32 34; do
    ab $m 128 0 2; ab $m 128 1 2; ab $m 128 1 3; ab $m 128 1 4
    [ $m = 34 ] && { ab $m 0 0 2; ab $m 0 1 2; ab $m 0 1 3; }
  done; } > $R/ab.txt 2>&1; t ab
for s in 3 4; do
  GLINT_CUDA_MMQ_STAGES=$s B device-bin/tests/glint-cuda--quant_types every_weight_type grouping > $R/tests/quant_types-s$s.log 2>&1; t "quant_types s$s rc=$?"
done
GLINT_CUDA_MMQ_STAGES=3 B device-bin/tests/glm5-model--batched_step ::cuda > $R/tests/batched_step-s3.log 2>&1; t "batched_step s3 rc=$?"
[ $(left) -gt 60 ] && PROFILE_MOE=2 GLINT_CUDA_MMQ_STAGES=3 GLINT_CUDA_GEMM_MIN=128 PROFILE_ARGS="$BF" OUT=$R/profile PROFILE_PROMPT=512 B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile rc=$?"
