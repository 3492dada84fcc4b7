#!/usr/bin/env bash
# Device call K (at 313d59a): the GPU tests, then tg64 with the new launches off/on, 16k with the
# top-k kernels side by side, the top-k kernel bench, the staged tests, the quant kernel bench.
# Every step checks the time left (LIMIT seconds in all).
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-520}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } > $OUT/gpu.txt
G=device-bin/glint
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
( cd benches/cuda; for a in 2 1; do
    nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DTOPK_AGG=$a -DBENCH_INDEXER -DKERNEL_SOURCE='"src/indexer.cu"' -o /tmp/kb_topk$a kernel_bench.cu > /tmp/kbt$a.txt 2>&1
  done
  nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_QUANT -DKERNEL_SOURCE='"src/quant.cu"' -o /tmp/kb_q kernel_bench.cu > /tmp/kbq.txt 2>&1 ) &
for n in glint-cuda--compile glint-cuda--conformance glint-cuda--quant_types glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  B device-bin/tests/$n "${f[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait; t synth+nvcc
{ for env in "GLINT_CUDA_PAIR=0 GLINT_CUDA_GLU=0" "" "GLINT_CUDA_MMID_STAGE=1" "GLINT_CUDA_PAIR=0 GLINT_CUDA_GLU=0" ""; do
    echo "== depth 0 ${env:-defaults}"; B env $env $G bench -m /tmp/s34.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 | grep -E "probe|tg64"
  done
  for env in "GLINT_CUDA_TOPK=rows" "" "GLINT_CUDA_IDX_TILES=0"; do
    echo "== 16k ${env:-defaults}"; B env $env $G bench -m /tmp/s34.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 | grep -E "probe|tg64"
  done; } > $OUT/bench.txt 2>&1; t bench
{ for a in 2 1; do echo "== TOPK_AGG=$a"; cat /tmp/kbt$a.txt; B /tmp/kb_topk$a; done; } > $OUT/kb-topk.txt 2>&1; t topk
for n in glint-cuda--quant_types glm5-model--batched_step; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  GLINT_CUDA_MV_STAGE=all GLINT_CUDA_MMID_STAGE=1 B device-bin/tests/$n "${f[@]}" > $OUT/$n-staged.log 2>&1; echo "staged $n rc=$? $(grep '^test result' $OUT/$n-staged.log | tail -1)" >> $OUT/ct.txt
done; t staged
{ cat /tmp/kbq.txt; for st in 0 1; do echo "== KB_STAGE=$st KB_MMID_STAGE=$st KB_PAIR=$st"
    KB_STAGE=$st KB_MMID_STAGE=$st KB_PAIR=$st KB_TYPES=q4_K,q6_K,q8_0 KB_SHAPES=exp,attn_output,output KB_KS0=1 B /tmp/kb_q; done; } > $OUT/kb.txt 2>&1; t kb
