#!/usr/bin/env bash
# Device call BK (twelfth session; replaces call BJ, written and never run): the binaries at the
# head with (a) the indexer's head weights on the main chain after q_lora, so the indexer's
# query no longer waits behind them on the side chain; (b) `rope_split_for`: the query's RoPE,
# the q_nope copy and its Q8_0 quantization in one launch (`rope_split_q8_0`;
# GLINT_CUDA_QSPLIT=0 turns it off); (c) `top_k_rows_c16`, the cluster top-k over 16 blocks
# (GLINT_CUDA_TOPK_CLUSTER=16; the default stays 8). Beside them the previous binary
# (`118ab70`, carried as device-pack/glint-118ab70.xz; the same CUDA code as f9af653, the
# 128-key indexer blocks the default). (1) every CUDA test binary, and those that run the
# top-k again with 16-block clusters; (2) the per-MoE-layer anchor at depth 0, 16,384 and
# 65,536 (tg64 of the 3 + 4 and 3 + 2 files, one MoE layer = the difference / 2): the new
# binary, the old one, the new one with 16-block clusters, two alternating rounds; (3) decode
# timelines at 16k and 0 with the new binary. Run from the repository root with device-pack/
# carried: bash callBK.sh 580
source scripts/device-call-lib.sh "${1:-580}"
xz -dc device-pack/glint-118ab70.xz > device-bin/glint-old && chmod +x device-bin/glint-old
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
for b in glint-cuda--conformance glint-cuda--graphs glm5-model--indexer_topk glm5-model--batched_step glm5-model--forward_fixture; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; esac
  GLINT_CUDA_TOPK_CLUSTER=16 B device-bin/tests/$b "${f[@]}" > $R/c16-$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/c16-$b.log | tail -1)"
done > $R/tests-c16.txt; t "tests c16"
anchor_files
DEPTHS=0,16384,65536 knob_rounds 50 default bin=device-bin/glint-old GLINT_CUDA_TOPK_CLUSTER=16 > $R/anchor.txt 2>&1; t anchor
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
