#!/usr/bin/env bash
# Device call P: the short-context MLA plan as the default: conformance, batched_step, tg64 of the
# 3 + 2 file at depth 0 and 16384.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-150}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 8 ] && timeout $(( $(left) - 3 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name --format=csv,noheader; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
for n in glint-cuda--conformance glm5-model--batched_step; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait; t synth
{ for d in 0 16384 0; do echo "== s32 d$d"; B $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r 2 | grep tg64; done; } > $OUT/bench.txt 2>&1; t bench
