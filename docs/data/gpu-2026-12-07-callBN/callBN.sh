#!/usr/bin/env bash
# Device call BN (fourteenth session). Binaries: device-bin/ at the session's top-k change: the
# tensor-core indexer scores count each row's first radix level (the top 11 bits of a key)
# as they write the scores, and `top_k_rows_ch` picks the first bin from that table and makes
# two passes over the cluster's keys (11 bits, then 10) where `top_k_rows_c` makes four of 8
# (GLINT_CUDA_TOPK_HIST=0 keeps `top_k_rows_c`); the layer in `2946830`'s indexer order (call
# BM). (1) the CUDA tests that run the indexer and the top-k: glint-cuda's conformance (its new
# decode-width case takes `top_k_rows_ch`, and the test asserts so) and graphs, glm5-model's
# ::cuda tests, glint-tp; (2) the per-MoE-layer anchor at depth 0, 16,384 and 65,536 (tg64 of
# the 3 + 4 and 3 + 2 files), the default against GLINT_CUDA_TOPK_HIST=0, two alternating
# rounds; (3) a decode timeline at 64k with the default. bash callBN.sh 580
source scripts/device-call-lib.sh "${1:-580}"
for b in glint-cuda--conformance glint-cuda--graphs glm5-model--indexer_topk glm5-model--batched_step \
  glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp glint-tp--nccl glint-tp--local; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; esac
  B device-bin/tests/$b "${f[@]}" > $R/$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/$b.log | tail -1)"
done > $R/tests.txt; t tests
anchor_files
DEPTHS=0,16384,65536 knob_rounds 60 default GLINT_CUDA_TOPK_HIST=0 > $R/anchor.txt 2>&1; t anchor
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/timeline-d64k DEPTH=65536 STEPS=16 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d64k rc=$?"
t done
