#!/usr/bin/env bash
# Device call U (the session's last device time, ~200 s): mla_attention_mma_{f16,bf16} through
# conformance (every attention case with f16 and bf16 caches) and batched_step, the MLA kernel
# bench (f32 CUDA cores against bf16 tensor cores, 67 and 2048 keys), then 16k decode with
# bf16 latent rows + fp8 index keys against GLINT_CUDA_MLA_MMA=0, and depth 0 with bf16.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-200}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 3 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
SY=$!
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_MLA -DKERNEL_SOURCE='"src/mla.cu"' -o /tmp/kb_mla kernel_bench.cu > /tmp/kbm.txt 2>&1 ) &
B device-bin/tests/glint-cuda--conformance > $OUT/conformance.log 2>&1; echo "conformance rc=$? $(grep '^test result' $OUT/conformance.log | tail -1)" >> $OUT/ct.txt
B device-bin/tests/glm5-model--batched_step ::cuda > $OUT/batched_step.log 2>&1; echo "batched_step rc=$? $(grep '^test result' $OUT/batched_step.log | tail -1)" >> $OUT/ct.txt; t tests
wait; { cat /tmp/kbm.txt; KB_KEYS=67,2048 B /tmp/kb_mla; } > $OUT/kb-mla.txt 2>&1; t kb
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for k in "" "GLINT_CUDA_MLA_MMA=0"; do for f in s34 s32; do echo "== $f d16384 $BF $k"; tg $k $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 $BF; done; done
  for k in "" "GLINT_CUDA_MLA_MMA=0"; do for f in s34 s32; do echo "== $f d0 $BF $k"; tg $k $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 1 $BF; done; done; } > $OUT/bench.txt 2>&1; t bench
