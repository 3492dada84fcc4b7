#!/usr/bin/env bash
# The synthetic file the device profiles run on (scripts/cuda-profile.sh, cuda-stalls.sh): 1
# dense + PROFILE_MOE (default 1) MoE layers with GLM-5's real shapes, 256 experts,
# Q4_K_M-like, written once by device-bin/glint; prints its path. Layer 1's expert down
# projection is Q4_K, layer 2's Q6_K (the recipe alternates), so PROFILE_MOE=2 shows both.
set -euo pipefail
cd "$(dirname "$0")/.."
m=${PROFILE_MOE:-1}
f=/tmp/p_1_$m.gguf
[ -e "$f" ] || device-bin/glint synth "$f" --dense 1 --moe "$m" --experts 256 --quant q4_k_m --seed 1 >/dev/null 2>&1
echo "$f"
