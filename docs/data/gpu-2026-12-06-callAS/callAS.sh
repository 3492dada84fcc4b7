#!/usr/bin/env bash
# Device call AS: the tests that reach the attention plan with 64-key tiles on every list of a
# prompt-sized step (conformance, the model tests' ::cuda, graphs), pp512 of both files with
# the new default (default path and cuBLAS path), and the decode anchor (tg64, one sequence,
# depth 0) to show the one-token path unchanged.
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
B device-bin/tests/glint-cuda--conformance > $R/tests/conformance.log 2>&1; t "conformance rc=$?"
for m in batched_step forward_fixture llamacpp_quantized indexer_topk tp; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
B device-bin/tests/glint-cuda--graphs > $R/tests/graphs.log 2>&1; t "graphs rc=$?"
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
{ for m in 34 32; do for g in 0 128; do
    echo "== s$m gemm_min=$g"; GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done
  for m in 34 32 34 32; do echo "== s$m tg64"; B $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"; done
} > $R/bench.txt 2>&1; t bench
