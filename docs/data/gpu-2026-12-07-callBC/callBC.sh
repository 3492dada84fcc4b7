#!/usr/bin/env bash
# Ran in full on 2026-12-07 08:10Z (eleventh session's third try; H100): knobs.txt, timeline-d0/,
# timeline-d16k/ beside this script, docs/performance.md "The one-token products' launch knobs".
# Run from the repository root
# with device-pack/ carried (bin.tar.xz from scripts/cuda-build.sh, llama.cpp.tar.xz from
# scripts/llamacpp-pack.sh).
# Device call BC (same binaries as call BB): the one-token products' launch knobs on the
# per-MoE-layer anchor, tg64 of the 3 dense + 4 MoE and 3 + 2 files (one MoE layer = the
# difference / 2), bf16 + fp8 caches, each setting twice in alternating rounds:
# GLINT_CUDA_MV_WARPS (warps a multiprocessor before a row group is split: 16 default),
# GLINT_CUDA_MMID_STAGE=1 (staged expert products), GLINT_CUDA_MV_STAGE=all (every one-token
# product staged); then a decode step's CUPTI timeline at depth 0 and 16384.
# CONFIGS (space-separated, `default` for none) and TIMELINES=0 cut it down for a short call:
#   CONFIGS="default GLINT_CUDA_MV_STAGE=all" TIMELINES=0 bash callBC.sh 240   (~4 minutes)
source scripts/device-call-lib.sh "${1:-570}"
CONFIGS=${CONFIGS:-default GLINT_CUDA_MV_WARPS=8 GLINT_CUDA_MV_WARPS=24 GLINT_CUDA_MV_WARPS=32 GLINT_CUDA_MMID_STAGE=1 GLINT_CUDA_MV_STAGE=all}
TIMELINES=${TIMELINES:-1}
# Seconds a knob round leaves for the timelines after it.
reserve=$((TIMELINES ? 120 : 40))
anchor_files
knob_rounds $reserve $CONFIGS > $R/knobs.txt 2>&1; t knobs
rm -f /tmp/s32.gguf /tmp/s34.gguf
[ "$TIMELINES" = 1 ] || exit 0
OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
