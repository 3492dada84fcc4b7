#!/usr/bin/env bash
# Device call V (for the next session; rebuild first: scripts/cuda-build.sh, kernel_source, tar):
# every CUDA test binary on the current head (graphs, quant_types and most model tests last ran
# at 9dcd938; the mma wrapper's move to common.cuh and the cluster top-k's 8,192-key threshold
# have not run), then the per-MoE-layer anchor at 0 / 16k / 64k with bf16 latent rows + fp8
# index keys (64k has not run with the tensor-core attention) beside f32.
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
for f in device-bin/tests/*; do
  n=$(basename $f); a=(); case $n in glm5-model--*) a=(::cuda);; esac
  B $f "${a[@]}" > $OUT/$n.log 2>&1; echo "$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt
done; t tests
wait $SY; t synth
tg() { B env "$@" | grep -E "tg64"; }
BF="--cache-type bf16 --cache-type-index fp8"
{ for d in 0 16384 65536; do for c in "" "$BF"; do for f in s34 s32; do
    echo "== $f d$d $c"; tg $G bench -m /tmp/$f.gguf --device cuda -p 0 -n 64 -d $d -b 1 -r $([ $d = 0 ] && echo 2 || echo 1) $c
  done; done; done; } > $OUT/bench.txt 2>&1; t bench
