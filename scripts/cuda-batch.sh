#!/usr/bin/env bash
# Batched speed on GLM-5's real shapes (docs/performance.md, docs/cuda.md): `glint bench` at 1, 8,
# 64 and 256 sequences on a synthetic 3 dense + 2 MoE file (256 experts, Q4_K_M-like), with the
# expert-grouped products on and off (GLINT_CUDA_MMID_GROUP=0) in the same run; then
# `glint serve --device cuda` on the same file under 64 and 256 concurrent streaming clients
# (scripts/serve-load.py). Runs on a GPU machine from a checkout holding device-bin/; tables go
# to $OUT/batch-*.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-batch}
mkdir -p "$out"
G=device-bin/glint
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels} RUST_LOG=warn
f=/tmp/s32.gguf
[ -e "$f" ] || $G synth "$f" --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 >/dev/null
for g in 1 0; do
  GLINT_CUDA_MMID_GROUP=$g $G bench -m "$f" --device cuda -p 512 -n 32 -d 0 -b 1,8,64,256 -r 2 \
    > "$out/batch-group$g.md" 2>&1
done
port=18124
$G serve -m "$f" --device cuda --port $port --max-seqs 256 --ctx 192 > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do curl -sf localhost:$port/health > /dev/null && break; sleep 0.5; done
{
  for c in 64 256; do python3 scripts/serve-load.py "http://127.0.0.1:$port" $c $((2 * c)) 64; done
} > "$out/batch-serve.md" 2>&1
kill -TERM $pid; wait $pid || true
cat "$out"/batch-*.md
