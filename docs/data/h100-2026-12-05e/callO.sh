#!/usr/bin/env bash
# Device call O: moe_route's register path (conformance: GLM-5's 256 experts and 300), the float4 F32
# products (quant_types, last; GLINT_CUDA_F32X4=0 beside the default), the MLA plan's
# knobs swept in the kernel bench (67 keys, 2048 selected of 2048 and of 16384) and end to end
# (tg at depth 0 and 16k, 3 dense + 2 MoE), and the per-MoE-layer anchor (3+4 vs 3+2).
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-560}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; echo "s32 $(( $(date +%s)-S ))s" >> $OUT/log
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; echo "s34 $(( $(date +%s)-S ))s" >> $OUT/log ) &
SY=$!
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_MLA -DKERNEL_SOURCE='"src/mla.cu"' -o /tmp/kb_mla kernel_bench.cu > /tmp/kbm.txt 2>&1 ) &
for n in glint-cuda--conformance glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
{ cat /tmp/kbm.txt; for h in 16 8; do for sk in 16 32 64; do for bl in 4 8; do
  echo "== HEADS=$h SPLIT_KEYS=$sk BLOCKS=$bl"; KB_KEYS=67,2048,16384 KB_MLA_HEADS=$h KB_MLA_SPLIT_KEYS=$sk KB_MLA_BLOCKS=$bl B /tmp/kb_mla | grep -v "^cache"
done; done; done; } > $OUT/kb-mla.txt 2>&1; t kb
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
{ for f in s34 s32 s34 s32; do echo "== $f d0"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2; done
  for f in s34 s32; do echo "== $f 16k"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1; done
  for d in 0 16384; do echo "== s32 d$d GLINT_CUDA_F32X4=0"; tg GLINT_CUDA_F32X4=0 $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r 1; done
  for k in "GLINT_CUDA_MLA_SPLIT_KEYS=16" "GLINT_CUDA_MLA_HEADS=8" "GLINT_CUDA_MLA_BLOCKS=2" "GLINT_CUDA_MLA_BLOCKS=8" "GLINT_CUDA_MLA_HEADS=8 GLINT_CUDA_MLA_SPLIT_KEYS=16" ""; do
    for d in 0 16384; do echo "== s32 d$d ${k:-defaults}"; tg $k $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r 1; done
  done; } > $OUT/bench.txt 2>&1; t bench
B device-bin/tests/glint-cuda--quant_types > $OUT/quant_types.log 2>&1; echo "glint-cuda--quant_types rc=$? $(grep '^test result' $OUT/quant_types.log | tail -1)" >> $OUT/ct.txt; t quant_types
