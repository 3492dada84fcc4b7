#!/usr/bin/env bash
# Device call BG (binaries `1d09b49`, the head's CUDA code): where a decode step's time goes at
# 65,536 tokens of context (call BF: one MoE layer 1.40-1.52x its depth-0 time on an H100,
# against the issue's ≤ 1.25x), a CUPTI timeline (scripts/cuda-timeline.sh) of the 1 dense + 1
# MoE file with bf16 latent and fp8 indexer caches; call BC has the same at 0 and 16,384. Run
# from the repository root with device-pack/ carried: bash callBG.sh 240
source scripts/device-call-lib.sh "${1:-240}"
BF="--cache-type bf16 --cache-type-index fp8"
OUT=$R/timeline-d64k DEPTH=65536 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d64k rc=$?"
rm -f $R/timeline-d64k/trace.csv.xz; t done
