#!/usr/bin/env bash
# Device call Q (next session; rebuild device-bin first: scripts/cuda-build.sh, kernel_source, tar):
# the commits not yet run on a GPU: rms_norm_q8_k (quant_types' normed products, the model tests),
# top_k_rows_s's parallel histogram sum (conformance, the top-k kernel bench), then the anchor
# (3+4 minus 3+2 at depth 0 and 16k) with GLINT_CUDA_NORMQ=0 beside the defaults.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-560}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
SY=$!
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_INDEXER -DKERNEL_SOURCE='"src/indexer.cu"' -o /tmp/kb_topk kernel_bench.cu > /tmp/kbt.txt 2>&1 ) &
for n in glint-cuda--conformance glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--indexer_topk glm5-model--tp; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done
B device-bin/tests/glint-cuda--quant_types normed > $OUT/qt-normed.log 2>&1; echo "quant_types normed rc=$? $(grep '^test result' $OUT/qt-normed.log | tail -1)" >> $OUT/ct.txt; t tests
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
{ for f in s34 s32 s34 s32; do echo "== $f d0"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2; done
  for f in s34 s32; do echo "== $f d0 GLINT_CUDA_NORMQ=0"; tg GLINT_CUDA_NORMQ=0 $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2; done
  for f in s34 s32; do echo "== $f 16k"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1; done
  # llama.cpp's default cache type (f16), and bf16 latent rows with fp8 indexer keys.
  for c in "--cache-type f16" "--cache-type bf16 --cache-type-index fp8"; do for f in s34 s32; do
    echo "== $f 16k $c"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $c; done; done; } > $OUT/bench.txt 2>&1; t bench
wait; { cat /tmp/kbt.txt; B /tmp/kb_topk; } > $OUT/kb-topk.txt 2>&1; t topk
B device-bin/tests/glint-cuda--quant_types > $OUT/quant_types.log 2>&1; echo "quant_types rc=$? $(grep '^test result' $OUT/quant_types.log | tail -1)" >> $OUT/ct.txt; t quant_types
