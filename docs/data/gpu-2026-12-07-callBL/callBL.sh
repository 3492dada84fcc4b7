#!/usr/bin/env bash
# Device call BL (twelfth session): call BK found the indexer's head weights on the main chain
# after q_lora slower at 16k (the indexer's query then waited for them and ran beside W_qb).
# The head binary issues the indexer's query on the side chain as soon as q_lora is there,
# the head weights on the main chain beside it, and the scores after both (`side_after_main`
# twice). Against call BK's binary (`a9a1b05`, carried as device-pack/glint-a9a1b05.xz):
# (1) the CUDA tests that run the indexer and graphs; (2) tg64 of the anchor files at 16,384
# and 65,536, two alternating rounds; (3) a decode timeline at 16k. Run from the repository
# root with device-pack/ carried: bash callBL.sh 330
source scripts/device-call-lib.sh "${1:-330}"
xz -dc device-pack/glint-a9a1b05.xz > device-bin/glint-old && chmod +x device-bin/glint-old
for b in glint-cuda--graphs glm5-model--indexer_topk glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; esac
  B device-bin/tests/$b "${f[@]}" > $R/$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/$b.log | tail -1)"
done > $R/tests.txt; t tests
anchor_files
DEPTHS=16384,65536 knob_rounds 40 default bin=device-bin/glint-old > $R/anchor.txt 2>&1; t anchor
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
