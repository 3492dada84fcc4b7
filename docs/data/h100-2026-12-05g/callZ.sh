#!/usr/bin/env bash
# Device call Z (for the next session; rebuild first: scripts/cuda-build.sh, the kernel_source
# example into benches/cuda/src, the tar into device-pack/): what this session could not run.
# 1. The model, graph and conformance tests on `Backend::branches` (the MLA layer's second
#    layout and the side piece after the main chain, never run on a GPU; call X ran the first
#    form), and conformance again with GLINT_CUDA_MLA_TILE64=all (mla_attention_mma64_* on
#    every f16 / bf16 attention case).
# 2. The MLA kernel bench at 67 and 2048 keys (bf16 tiles of 16 keys against 64).
# 3. tg64 with the fork on and off at depth 0 and 16k (f32); 16k and 64k with bf16 + fp8 caches,
#    GLINT_CUDA_MLA_TILE64=1 against the default, and the split sweep of the 16-key kernel.
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
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_MLA -DKERNEL_SOURCE='"src/mla.cu"' -o /tmp/kb_mla kernel_bench.cu > /tmp/kbm.txt 2>&1 ) &
run_test() {  # log name, binary, args...
  local n=$1; shift
  echo "=== $n" >> $OUT/tests.log
  B "$@" >> $OUT/tests.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/tests.log | tail -1)" >> $OUT/ct.txt
}
for f in device-bin/tests/glm5-model--* device-bin/tests/glint-cuda--graphs device-bin/tests/glint-cuda--conformance device-bin/tests/glint-cuda--glint_cuda; do
  n=$(basename $f); a=(); case $n in glm5-model--*) a=(::cuda);; esac
  run_test "$n" "$f" "${a[@]}"
done
run_test conformance-tile64 env GLINT_CUDA_MLA_TILE64=all device-bin/tests/glint-cuda--conformance
run_test batched_step-tile64 env GLINT_CUDA_MLA_TILE64=all device-bin/tests/glm5-model--batched_step ::cuda
t tests
wait; { cat /tmp/kbm.txt; KB_KEYS=67,2048 B /tmp/kb_mla; } > $OUT/kb-mla.txt 2>&1; t kb
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for fk in 1 0; do for f in s34 s32; do
    echo "== $f d0 fork=$fk"; tg GLINT_CUDA_FORK=$fk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2
  done; done
  for fk in 1 0; do for f in s34 s32; do
    echo "== $f d16384 f32 fork=$fk"; tg GLINT_CUDA_FORK=$fk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1
  done; done
  for d in 16384 65536; do for k in GLINT_CUDA_MLA_TILE64=0 GLINT_CUDA_MLA_TILE64=1; do for f in s34 s32; do
    echo "== $f d$d $k $BF"; tg $k $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r 1 $BF
  done; done; done
  for sk in 64 128; do for f in s34 s32; do
    echo "== $f d16384 GLINT_CUDA_MLA_SPLIT_KEYS=$sk $BF"; tg GLINT_CUDA_MLA_SPLIT_KEYS=$sk $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $BF
  done; done; } > $OUT/bench.txt 2>&1; t bench
