#!/usr/bin/env bash
# Device call AB: GLINT_CUDA_WARM=MIB (a side-stream L2 prefetch of attn_output's first MIB while
# the main stream runs the attention) against none, in the same call: depth 0 (-r 3) and 16k
# with bf16 + fp8 caches (-r 2), 3 + 4 and 3 + 2 files; forward_fixture, indexer_topk and graphs
# with it on first (a hint must not change a result).
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-330}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } >> $OUT/log
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
for f in device-bin/tests/glm5-model--forward_fixture device-bin/tests/glm5-model--indexer_topk device-bin/tests/glint-cuda--graphs; do
  n=$(basename $f); a=(); case $n in glm5-model--*) a=(::cuda);; esac
  echo "=== $n" >> $OUT/tests.log
  GLINT_CUDA_WARM=24 B $f "${a[@]}" >> $OUT/tests.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/tests.log | tail -1)" >> $OUT/ct.txt
done
wait; t tests
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for w in 0 24 0 24 12; do for f in s34 s32; do
    echo "== $f d0 GLINT_CUDA_WARM=$w"; tg GLINT_CUDA_WARM=$w $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 3
  done; done
  for w in 0 24; do for f in s34 s32; do
    echo "== $f d16384 GLINT_CUDA_WARM=$w $BF"; tg GLINT_CUDA_WARM=$w $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 2 $BF
  done; done; } > $OUT/bench.txt 2>&1; t bench
