#!/usr/bin/env bash
# Device call Y2 (call Y cut to the device time left): the MLA layer's chains as
# `Backend::branches` (below top_k keys the latent rows and indexer keys beside the whole query
# path; with a selection, the indexer's keys and head weights beside q_lora, then its scores
# and top-k beside the query rest). The model and graph tests and the conformance suite; tg64
# with the fork on and off at depth 0 and 16k (f32), 16k with bf16 + fp8 caches at 32 (the
# default) and 128 keys a split of the tensor-core attention, 64k with bf16 + fp8.
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
for f in device-bin/tests/glm5-model--* device-bin/tests/glint-cuda--graphs device-bin/tests/glint-cuda--conformance device-bin/tests/glint-cuda--glint_cuda; do
  n=$(basename $f); a=(); case $n in glm5-model--*) a=(::cuda);; esac
  echo "=== $n" >> $OUT/tests.log
  B $f "${a[@]}" >> $OUT/tests.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/tests.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for fk in 1 0; do for f in s34 s32; do
    echo "== $f d0 fork=$fk"; tg GLINT_CUDA_FORK=$fk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2
  done; done
  for fk in 1 0; do for f in s34 s32; do
    echo "== $f d16384 f32 fork=$fk"; tg GLINT_CUDA_FORK=$fk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1
  done; done
  for sk in 32 128; do for f in s34 s32; do
    echo "== $f d16384 split_keys=$sk $BF"; tg GLINT_CUDA_MLA_SPLIT_KEYS=$sk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $BF
  done; done
  for f in s34 s32; do
    echo "== $f d65536 $BF"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 65536 -b 1 -r 1 $BF
  done; } > $OUT/bench.txt 2>&1; t bench
