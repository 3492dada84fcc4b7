#!/usr/bin/env bash
# Device call AP: four-element float quantizers, the fused GLU quantizer back for the expert
# down projection with the cuBLAS path on. (1) pp512 of the 3 + 2 file, cuBLAS path off and
# on, and of the 3 + 4 file with it on (bf16 caches, fp8 indexer keys); (2) quant_types (F16
# and BF16 weights read the changed quantizers), batched_step and forward_fixture ::cuda,
# conformance.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-300}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
# The test binary compiles the kernels meanwhile (cached for the benches).
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
{ for r in "32 0" "32 128" "34 128"; do set -- $r
    echo "== s$1 gemm_min=$2"; GLINT_CUDA_GEMM_MIN=$2 B $G bench -m /tmp/s$1.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; } > $R/ab.txt 2>&1; t ab
for m in batched_step forward_fixture; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
B device-bin/tests/glint-cuda--conformance > $R/tests/conformance.log 2>&1; t "conformance rc=$?"
