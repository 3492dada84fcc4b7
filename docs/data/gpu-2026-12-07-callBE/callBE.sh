#!/usr/bin/env bash
# Device call BE: how many warps a 6144-wide row is split over. Call BD's Nsight profile had the
# short one-token products latency-bound at 6-22% occupancy (`kv_a` 2 MB in 7.3 µs, `q_a` 7 MB
# in 9.2 µs, the indexer's `wk` 0.4 MB in 6.6 µs): their rows have 192 units, and a warp keeps at
# least 64 of them, so a row is split four ways at most, whatever GLINT_CUDA_MV_WARPS asks.
# GLINT_CUDA_MV_MIN_UNITS lowers that floor. (1) tg64 of the 3 dense + 4 MoE and 3 + 2 files
# (one MoE layer = the difference / 2), bf16 + fp8 caches, each setting twice in alternating
# rounds; (2) a decode step's CUPTI timeline at depth 0 under MIN_UNITS (call BC has the
# default's); (3) every CUDA test with GLINT_CUDA_MV_MIN_UNITS=${TEST_UNITS:-32} (the split
# changes a row's sum order: the tests hold the batch paths to the one-token path's bits).
# Run from the repository root with device-pack/ carried: bash callBE.sh 480. The binaries come
# without glint-cuda--compile (the kernels are those whose compile test passed in call BB).
source scripts/device-call-lib.sh "${1:-480}"
CONFIGS=${CONFIGS:-default GLINT_CUDA_MV_MIN_UNITS=32 GLINT_CUDA_MV_MIN_UNITS=16}
anchor_files
knob_rounds 200 $CONFIGS > $R/knobs.txt 2>&1; t knobs
rm -f /tmp/s32.gguf /tmp/s34.gguf
GLINT_CUDA_MV_MIN_UNITS=${TEST_UNITS:-32} OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
GLINT_CUDA_MV_MIN_UNITS=${TEST_UNITS:-32} OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
