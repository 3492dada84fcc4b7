#!/usr/bin/env bash
# Device call M (at the HEAD of stop 40): the static-shared-memory fix on a GPU (conformance's 4,096-key
# top-k, the model tests), then the per-MoE-layer anchor (3+4 minus 3+2 at depth 0 and 16k), the
# top-k kernels side by side at 16k, the indexer/top-k kernel bench, quant_types last.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; echo "s34 $(( $(date +%s)-S ))s" >> $OUT/log
  $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; echo "s32 $(( $(date +%s)-S ))s" >> $OUT/log ) &
SY=$!
( cd benches/cuda; for a in 2 1; do
    nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DTOPK_AGG=$a -DBENCH_INDEXER -DKERNEL_SOURCE='"src/indexer.cu"' -o /tmp/kb_topk$a kernel_bench.cu > /tmp/kbt$a.txt 2>&1
  done ) &
for n in glint-cuda--conformance glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait $SY; t synth
{ for f in s34 s32 s34 s32; do
    echo "== $f depth 0"; B $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 | grep -E "probe|tg64"
  done
  for run in "s34 " "s32 " "s34 GLINT_CUDA_TOPK=rows" "s32 GLINT_CUDA_TOPK=rows"; do
    set -- $run; f=$1; shift
    echo "== $f 16k ${*:-defaults}"; B env "$@" $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 | grep -E "probe|tg64|rror"
  done; } > $OUT/bench.txt 2>&1; t bench
wait
{ for a in 2 1; do echo "== TOPK_AGG=$a"; cat /tmp/kbt$a.txt; B /tmp/kb_topk$a; done; } > $OUT/kb-topk.txt 2>&1; t topk
B device-bin/tests/glint-cuda--quant_types > $OUT/quant_types.log 2>&1; echo "glint-cuda--quant_types rc=$? $(grep '^test result' $OUT/quant_types.log | tail -1)" >> $OUT/ct.txt; t quant_types
