#!/usr/bin/env bash
# Device call BD (binaries of call BB, `7af6a38`, the head's CUDA code): where the one-token
# products wait. Nsight Compute's full set with per-instruction stall samples
# (scripts/cuda-stalls.sh) for the first launches of the one-token products in a one-token
# step (PROMPT=1, CUDA graphs off, bf16 + fp8 caches) of the 1 dense + 1 MoE file: the
# attention projections, `attn_output`, the dense FFN, the router, the expert products and the
# Q6_K head. Run from the repository root with device-pack/ carried:
#   bash docs/data/gpu-2026-12-07-callBD/callBD.sh 420
source scripts/device-call-lib.sh "${1:-420}"
PROMPT=1 COUNT=${COUNT:-30} \
  KERNELS='matvec1_q4_k|matvec1_q6_k|matvec1s_q6_k|mmid_q4_k|mmid_q8_0|matvec1_f32x4' \
  PROFILE_ARGS="--cache-type bf16 --cache-type-index fp8" OUT=$R/stalls-mv B bash scripts/cuda-stalls.sh
t "stalls rc=$?"
# The report itself stays on the machine (several MB); details.txt and the SASS CSVs come back.
mv $R/stalls-mv/stalls.ncu-rep.xz /tmp/ 2>/dev/null
ls -la $R/stalls-mv >> $R/timeline.txt
t done
