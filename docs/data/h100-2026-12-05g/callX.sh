#!/usr/bin/env bash
# Device call X: the fork (Backend::concurrently on a second stream). Every CUDA test binary
# but the kernel-compile and quant-type ones (kernels unchanged since call V), one log; then
# tg64 with the fork on and off (GLINT_CUDA_FORK=0) at depth 0 and 16k, f32 and bf16 + fp8,
# and the fork at 64k.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } >> $OUT/log
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
SY=$!
for f in device-bin/tests/*; do
  n=$(basename $f); a=(); case $n in glm5-model--*) a=(::cuda);; glint-cuda--compile|glint-cuda--quant_types) continue;; esac
  echo "=== $n" >> $OUT/tests.log
  B $f "${a[@]}" >> $OUT/tests.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/tests.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for d in 0 16384; do for c in "" "$BF"; do for fk in 1 0; do for f in s34 s32; do
    [ $d = 0 ] && [ -n "$c" ] && continue
    echo "== $f d$d fork=$fk $c"; tg GLINT_CUDA_FORK=$fk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r $([ $d = 0 ] && echo 2 || echo 1) $c
  done; done; done; done
  for c in "" "$BF"; do for f in s34 s32; do
    echo "== $f d65536 fork=1 $c"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 65536 -b 1 -r 1 $c
  done; done; } > $OUT/bench.txt 2>&1; t bench
