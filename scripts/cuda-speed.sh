#!/usr/bin/env bash
# First CUDA speed figures (docs/performance.md): greedy decode of 128 tokens with
# `glint generate --device cuda`, graphs on and off, on the tiny fixture and on synthetic files
# with GLM-5's real layer shapes (glint synth, Q4_K_M-like, 256 experts). Per-layer times come
# from differences between files with more dense or MoE layers. Runs from a checkout holding
# device-bin/ (scripts/cuda-build.sh) on a GPU machine; writes the files to /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
G=device-bin/glint
run() { RUST_LOG=warn $G generate -m "$1" -p "hello world" -n 128 --temp 0 --ignore-eos --device cuda 2>&1 >/dev/null | tail -1; }
echo "tiny graphs: $(run fixtures/glm5/glm5-tiny-f32.gguf)"
echo "tiny eager:  $(GLINT_CUDA_GRAPHS=0 run fixtures/glm5/glm5-tiny-f32.gguf)"
for spec in "1 1" "1 3" "3 1"; do
  set -- $spec
  f=/tmp/s_$1_$2.gguf
  $G synth "$f" --dense "$1" --moe "$2" --experts 256 --quant q4_k_m --seed 1 >/dev/null 2>&1
  echo "dense $1 moe $2 ($(du -h "$f" | cut -f1)) graphs: $(run "$f")"
  echo "dense $1 moe $2 eager: $(GLINT_CUDA_GRAPHS=0 run "$f")"
  rm -f "$f"
done
