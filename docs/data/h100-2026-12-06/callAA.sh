#!/usr/bin/env bash
# Device call AA: the per-MoE-layer anchor with the 64-key attention tiles as the default (from
# 1,024 keys; call Z ran them opt-in), more repetitions than call Z's one-run depths: depth 0
# with the default and with GLINT_CUDA_MLA_TILE64=all (64-key tiles on the ~70-key lists too),
# 16k and 64k with bf16 + fp8 caches, 16k with f32 caches; and the MLA kernel bench at 67, 512
# and 2,048 keys with 64 and 128 keys a split of the 64-key kernel.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-420}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT; } >> $OUT/log
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1
  $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) &
( cd benches/cuda; nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_MLA -DKERNEL_SOURCE='"src/mla.cu"' -o /tmp/kb_mla kernel_bench.cu > /tmp/kbm.txt 2>&1 ) &
wait; t synth
{ cat /tmp/kbm.txt; for sk in 64 128; do echo "== KB_MLA_SPLIT_KEYS64=$sk"; KB_MLA_SPLIT_KEYS64=$sk KB_KEYS=67,512,2048 B /tmp/kb_mla; done; } > $OUT/kb-mla.txt 2>&1; t kb
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for k in GLINT_CUDA_MLA_TILE64=1 GLINT_CUDA_MLA_TILE64=all; do for f in s34 s32; do
    echo "== $f d0 $k"; tg $k $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 3
  done; done
  for d in 16384 65536; do for f in s34 s32; do
    echo "== $f d$d $BF"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r 2 $BF
  done; done
  for f in s34 s32; do
    echo "== $f d16384 f32"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d 16384 -b 1 -r 2
  done; } > $OUT/bench.txt 2>&1; t bench
