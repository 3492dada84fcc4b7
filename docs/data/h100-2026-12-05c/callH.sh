#!/usr/bin/env bash
# Device call H: decode speed, e1043b2 (no weight stages) against 25c704c's build (stages), same
# machine, 3+2 and 3+4 files, depth 0 and 16384; the warps-wanted knob with stages.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-330}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
tar -xJf device-pack/bin.tar.xz; xz -dc device-pack/glint-base.xz > /tmp/glint-old; chmod +x /tmp/glint-old; t untar
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
G=device-bin/glint
for m in 2 4; do $G synth /tmp/s3$m.gguf --dense 3 --moe $m --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 & done
# the kernel cache of both binaries while the files are written
$G synth /tmp/w.gguf --dense 1 --moe 1 --experts 8 --quant q4_k_m --seed 1 > /dev/null 2>&1
for g in /tmp/glint-old $G; do $g bench -m /tmp/w.gguf --device cuda -p 8 -n 2 -r 1 > /dev/null 2>&1; done
wait; t synth
B() { [ $(left) -gt 12 ] && timeout $(left) "$@"; }
{ run() { echo "== $1 3+$2 depth $3 $4"; B env $4 $1 bench -m /tmp/s3$2.gguf --device cuda -p 0 -n 64 -d $3 -b 1 -r $5 | grep -E "probe|tg64"; }
  O=/tmp/glint-old
  run $O 4 0 "" 2; run $G 4 0 "" 2; run $O 2 0 "" 2; run $G 2 0 "" 2; run $O 4 0 "" 2; run $G 4 0 "" 2
  run $G 2 16384 "" 1; run $G 4 16384 "" 1; run $O 2 16384 "" 1; run $O 4 16384 "" 1
  run $G 4 0 GLINT_CUDA_MV_WARPS=8 2
} > $OUT/bench.txt 2>&1; t bench
