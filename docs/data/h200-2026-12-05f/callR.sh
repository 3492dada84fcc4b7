#!/usr/bin/env bash
# Device call R: the four commits of stop 40 not yet run on a GPU (rms_norm_q8_k, top_k_rows_s's
# histogram sum, IndexerParams::w_scale, mla_attention_parts) through the tests, then the anchor
# (3+4 minus 3+2) with the weight prefetch before the PDL wait (GLINT_CUDA_PREFETCH, bytes a
# block) at 0 / default 16384 / 65536 / 262144, GLINT_CUDA_NORMQ=0, 16k with f32 / f16 /
# bf16 + fp8 caches, the top-k kernel bench, all of quant_types.
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
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_INDEXER -DKERNEL_SOURCE='"src/indexer.cu"' -o /tmp/kb_topk kernel_bench.cu > /tmp/kbt.txt 2>&1 ) &
for n in glint-cuda--conformance glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done
B device-bin/tests/glint-cuda--quant_types normed > $OUT/qt-normed.log 2>&1; echo "quant_types normed rc=$? $(grep '^test result' $OUT/qt-normed.log | tail -1)" >> $OUT/ct.txt; t tests
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
pair() { local d=$1; shift; for f in s34 s32; do echo "== $f d$d $*"; tg "$@" $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r $([ $d = 0 ] && echo 2 || echo 1); done; }
{ pair 0; pair 0 GLINT_CUDA_PREFETCH=0; pair 0 GLINT_CUDA_PREFETCH=65536; pair 0 GLINT_CUDA_PREFETCH=262144
  pair 0 GLINT_CUDA_NORMQ=0; pair 0; pair 0 GLINT_CUDA_PREFETCH=0
  pair 16384; pair 16384 GLINT_CUDA_PREFETCH=0
  # llama.cpp's default cache type (f16), and bf16 latent rows with fp8 indexer keys.
  for c in "--cache-type f16" "--cache-type bf16 --cache-type-index fp8"; do for f in s34 s32; do
    echo "== $f 16k $c"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $c; done; done; } > $OUT/bench.txt 2>&1; t bench
wait; { cat /tmp/kbt.txt; B /tmp/kb_topk; } > $OUT/kb-topk.txt 2>&1; t topk
B device-bin/tests/glint-cuda--quant_types > $OUT/quant_types.log 2>&1; echo "quant_types rc=$? $(grep '^test result' $OUT/quant_types.log | tail -1)" >> $OUT/ct.txt; t quant_types
