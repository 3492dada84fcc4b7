#!/usr/bin/env bash
# The synthetic file the device profiles run on (scripts/cuda-profile.sh, cuda-stalls.sh): 1
# dense + 1 MoE layer with GLM-5's real shapes, 256 experts, Q4_K_M-like, written once by
# device-bin/glint; prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
f=/tmp/p_1_1.gguf
[ -e "$f" ] || device-bin/glint synth "$f" --dense 1 --moe 1 --experts 256 --quant q4_k_m --seed 1 >/dev/null 2>&1
echo "$f"
