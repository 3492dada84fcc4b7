#!/usr/bin/env bash
# Device call G: weight stages in shared memory for one-token products (cp.async, 3 passes).
# GPU tests that run products; kernel bench staged vs not; sanitizer; decode bench stage on/off.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-580}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
tar -xJf device-pack/bin.tar.xz; t untar
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
( cd benches/cuda
  nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_QUANT -DKERNEL_SOURCE="\"src/quant.cu\"" -o /tmp/kb_q kernel_bench.cu > /tmp/kbbuild.txt 2>&1 ) & KBP=$!
G=device-bin/glint
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & SYN=$!
mkdir -p /tmp/ct; for n in glint-cuda--compile glint-cuda--conformance glint-cuda--quant_types glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp glm5-model--indexer_topk; do
  f=(); case $n in glm5-model--*) f=(::cuda);; esac
  GLINT_REPO=$PWD timeout 150 device-bin/tests/$n "${f[@]}" > /tmp/ct/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' /tmp/ct/$n.log | tail -1)" >> $OUT/ct.txt; done
tar -cJf $OUT/ct-logs.tar.xz -C /tmp ct; t tests
wait $KBP; t kbbuilt
{ cat /tmp/kbbuild.txt
  for st in 1 0; do echo "== KB_STAGE=$st"; KB_STAGE=$st KB_TYPES=q4_K,q5_K,q6_K,q8_0 KB_SHAPES=exp,attn_output,ffn_gate,attn_q_a,output KB_KS0=1 KB_KS=2,4 timeout 60 /tmp/kb_q; done; } > $OUT/kb.txt 2>&1; t kb
{ for ty in q6_K q4_K; do tool=memcheck; [ $ty = q4_K ] && tool=racecheck
    echo "== $tool $ty"; KB_TYPES=$ty KB_SHAPES="exp gate" KB_KS0=1 timeout 40 compute-sanitizer --tool $tool --print-limit 5 /tmp/kb_q 2>&1 | tail -8
  done; } > $OUT/sanitizer.txt 2>&1; t sanitizer
wait $SYN; t synth
B() { timeout $(( $(left) > 10 ? $(left) : 1 )) "$@"; }
{ for st in 1 0 1; do echo "== GLINT_CUDA_MV_STAGE=$st"; GLINT_CUDA_MV_STAGE=$st B $G bench -m /tmp/s34.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2; done
  for st in 1 0; do GLINT_CUDA_MV_STAGE=$st B $G bench -m /tmp/s34.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1; done; } > $OUT/bench.txt 2>&1; t bench
mkdir -p /tmp/ncu
if [ $(left) -gt 40 ]; then
  KB_TYPES=q4_K KB_SHAPES="exp gate" KB_KS0=1 timeout 40 ncu --set full -k mmid_q4_k -s 3 -c 1 -o /tmp/ncu/st /tmp/kb_q > /tmp/ncu/st.log 2>&1
  ncu --import /tmp/ncu/st.ncu-rep > /tmp/ncu/st-details.txt 2>&1
  ncu --import /tmp/ncu/st.ncu-rep --page source --csv --print-source sass > /tmp/ncu/st-sass.csv 2>&1
fi; rm -f /tmp/ncu/*.ncu-rep; tar -cJf $OUT/ncu.tar.xz -C /tmp ncu; t ncu
