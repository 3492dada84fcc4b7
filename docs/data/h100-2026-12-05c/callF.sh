#!/usr/bin/env bash
# The exact commands of the 2026-12-05 (fourth session) device calls: run from the repository
# root on the GPU machine with device-pack/ holding bin.tar.xz (scripts/cuda-build.sh's device-bin/, tar -cJf)
# and, for F and H, glint-base.xz (the baseline glint binary, xz); $OUT is where logs go.
# Device call F (2026-12-05 fourth session): all CUDA tests on d00d263's attention; kernel bench
# mla (ab958db vs now), quant with MV_UNROLL 1/2 and splits; ncu of mmid_q4_k; decode bench
# b7d696b vs now, 3+2 and 3+4 at depth 0 and 16384.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-580}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
tar -xJf device-pack/bin.tar.xz; xz -dc device-pack/glint-base.xz > /tmp/glint-base; chmod +x /tmp/glint-base; t untar
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
cp device-pack/mla-base.cu benches/cuda/src/mla_base.cu
( cd benches/cuda
  b() { nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 $2 -DBENCH_$3 -DKERNEL_SOURCE="\"src/$4.cu\"" -o /tmp/kb_$1 kernel_bench.cu > /tmp/kbbuild-$1.txt 2>&1; }
  b q1 "" QUANT quant & b q2 -DMV_UNROLL=2 QUANT quant & b mbase "" MLA mla_base & b mnew "" MLA mla & wait ) &
G=device-bin/glint
( for m in 2 4; do $G synth /tmp/s3$m.gguf --dense 3 --moe $m --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; done ) &
OUT=$OUT/ct timeout 300 bash scripts/cuda-tests.sh > /dev/null 2>&1; t tests
wait; t synth+kbbuilt
{ for v in mbase mnew; do echo "== $v"; timeout 25 /tmp/kb_$v; done
  for v in q1 q2; do echo "== $v"; KB_TYPES=q4_K,q6_K,q8_0 KB_SHAPES=exp,attn_output,ffn_gate KB_KS=1,2,4,8 timeout 60 /tmp/kb_$v; done; cat /tmp/kbbuild-*.txt; } > $OUT/kb.txt 2>&1; t kb
B() { timeout $(( $(left) > 10 ? $(left) : 1 )) "$@"; }
{ for g in /tmp/glint-base $G; do echo "== $g"; for m in 2 4; do B $g bench -m /tmp/s3$m.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2; done; done
  for m in 2 4; do B $G bench -m /tmp/s3$m.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1; done; } > $OUT/bench.txt 2>&1; t bench
mkdir -p /tmp/ncu
for v in q1 q2; do
  [ $(left) -gt 40 ] || break
  KB_TYPES=q4_K KB_SHAPES="exp gate" KB_KS0=1 timeout 40 ncu --set full -k mmid_q4_k -s 3 -c 1 -o /tmp/ncu/$v /tmp/kb_$v > /tmp/ncu/$v.log 2>&1
  ncu --import /tmp/ncu/$v.ncu-rep > /tmp/ncu/$v-details.txt 2>&1
  ncu --import /tmp/ncu/$v.ncu-rep --page source --csv --print-source sass > /tmp/ncu/$v-sass.csv 2>&1
done; rm -f /tmp/ncu/*.ncu-rep; tar -cJf $OUT/ncu.tar.xz -C /tmp ncu; t ncu
