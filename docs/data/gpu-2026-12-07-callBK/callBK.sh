#!/usr/bin/env bash
# Device call BK (twelfth session; replaces call BJ, written and never run): the binaries at the
# head with (a) the indexer's head weights on the main chain after q_lora, so the indexer's
# query no longer waits behind them on the side chain, and (b) `rope_split_for`: the query's
# RoPE, the q_nope copy and its Q8_0 quantization in one launch (`rope_split_q8_0`). Beside them
# the previous binary (`118ab70`, carried as device-pack/glint-118ab70.xz; the same CUDA code
# as f9af653, the 128-key indexer blocks the default). (1) every CUDA test binary; (2) the
# per-MoE-layer anchor at depth 0, 16,384 and 65,536 (tg64 of the 3 + 4 and 3 + 2 files, one
# MoE layer = the difference / 2): the new binary, the old one, the new one with
# GLINT_CUDA_QSPLIT=0 (only (a)), two alternating rounds; (3) a decode timeline at 16k with
# the new binary, and one at depth 0. Run from the repository root with device-pack/ carried: bash callBK.sh 570
source scripts/device-call-lib.sh "${1:-570}"
xz -dc device-pack/glint-118ab70.xz > device-bin/glint-old && chmod +x device-bin/glint-old
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
anchor_files
DEPTHS=0,16384,65536 knob_rounds 60 default bin=device-bin/glint-old GLINT_CUDA_QSPLIT=0 > $R/anchor.txt 2>&1; t anchor
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
