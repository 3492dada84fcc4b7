#!/usr/bin/env bash
# Device call L (at 9a62a28): the static-shared-memory fix: conformance (top_k at 4096 keys),
# then tg16 at depth 16384 on a small real-geometry file with top_k_rows_s and with the old kernel.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-110}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 8 ] && timeout $(( $(left) - 3 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name --format=csv,noheader; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/t.gguf --dense 1 --moe 1 --experts 16 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
B device-bin/tests/glint-cuda--conformance > $OUT/conformance.log 2>&1; echo "conformance rc=$? $(grep '^test result' $OUT/conformance.log)" >> $OUT/log
wait; t synth
for env in "" "GLINT_CUDA_TOPK=rows" ""; do
  echo "== 16k ${env:-defaults}" >> $OUT/bench.txt
  B env $env $G bench -m /tmp/t.gguf --device cuda -p 0 -n 32 -d 16384 -b 1 -r 1 2>&1 | grep -E "tg|rror" >> $OUT/bench.txt
done; t bench
