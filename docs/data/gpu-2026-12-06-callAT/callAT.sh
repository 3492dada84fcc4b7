#!/usr/bin/env bash
# Device call AT: the `_fit` expert kernels (tiles of up to 32 pairs, each on 16 or 32
# places). (1) quant_types (its grouping cases, ~12 pairs an expert, run both passes against
# the CPU backend and the one-token bits); (2) pp512 of the 3 + 4 and 3 + 2 files, bf16 caches
# + fp8 indexer keys, GLINT_CUDA_MMQ_FIT=1/0 alternating, cuBLAS path on and off;
# (3) batched_step and forward_fixture ::cuda.
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
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
{ for m in 34 32 34; do for g in 128 0; do for f in 1 0; do
    [ $m = 32 ] && [ $g = 0 ] && continue
    echo "== s$m gemm_min=$g fit=$f"; GLINT_CUDA_MMQ_FIT=$f GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; done; } > $R/ab.txt 2>&1; t ab
for m in batched_step forward_fixture; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
