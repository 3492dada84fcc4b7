#!/usr/bin/env bash
# Device call T: call S again after the fixes to the cluster top-k (remote reads issued together)
# and the tensor-core scores (the query loaded in one round): tests (conformance also with
# GLINT_CUDA_TOPK=shared), the indexer kernel bench, 16k and 64k decode against the one-block
# top-k and the register-tile scores.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
SY=$!
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_INDEXER -DKERNEL_SOURCE='"src/indexer.cu"' -o /tmp/kb_idx kernel_bench.cu > /tmp/kbi.txt 2>&1 ) &
B device-bin/tests/glint-cuda--conformance > $OUT/conformance.log 2>&1; echo "conformance rc=$? $(grep '^test result' $OUT/conformance.log | tail -1)" >> $OUT/ct.txt
GLINT_CUDA_TOPK=shared B device-bin/tests/glint-cuda--conformance > $OUT/conformance-shared.log 2>&1; echo "conformance TOPK=shared rc=$? $(grep '^test result' $OUT/conformance-shared.log | tail -1)" >> $OUT/ct.txt
for n in glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait; { cat /tmp/kbi.txt; B /tmp/kb_idx; } > $OUT/kb-idx.txt 2>&1; t kb
tg() { B env "$@" | grep -E "tg64"; }
pair() { local d=$1; shift; for f in s34 s32; do echo "== $f d$d $*"; tg "$@" $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r $([ $d = 0 ] && echo 2 || echo 1); done; }
BF="--cache-type bf16 --cache-type-index fp8"
{ pair 0; pair 16384; pair 16384 GLINT_CUDA_TOPK=shared
  for f in s34 s32; do echo "== $f d16384 $BF"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $BF; done
  for f in s34 s32; do echo "== $f d16384 $BF GLINT_CUDA_IDX_MMA=0"; tg GLINT_CUDA_IDX_MMA=0 $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $BF; done
  pair 0
  for f in s34 s32; do echo "== $f d65536 $BF"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 65536 -b 1 -r 1 $BF; done
  pair 65536; pair 65536 GLINT_CUDA_TOPK=shared; } > $OUT/bench.txt 2>&1; t bench
