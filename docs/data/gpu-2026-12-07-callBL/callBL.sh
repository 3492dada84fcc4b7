#!/usr/bin/env bash
# Device call BL (written in the twelfth session, NOT RUN: the session's device time ran out
# on machines that did not start). Call BK found the indexer's head weights on the main chain
# after q_lora 2% slower at 16k (the indexer's query then waited for them and ran beside
# W_qb), so the head went back to their place on the side chain. `2946830` had instead the
# indexer's query on the side chain as soon as q_lora is there, the head weights beside it on
# the main chain, and the scores after both (`side_after_main` twice); by call BK's 16k
# timeline that should start the scores ~8 µs sooner than the head's order. To run: take
# 2946830's layer.rs (`git checkout 2946830 -- crates/glint-mla/src/layer.rs`; since then only
# its branch order was put back, in 70e3dae), build (scripts/cuda-build.sh), pack device-bin into device-pack/bin.tar.xz and the head's
# glint as device-pack/glint-base.xz, then: bash callBL.sh 200
# (1) the CUDA tests that run the indexer and graphs; (2) a decode timeline at 16k (1 dense + 1
# MoE file); (3) tg32 of that file at 16,384 and 65,536, both binaries, two alternating rounds.
source scripts/device-call-lib.sh "${1:-200}"
xz -dc device-pack/glint-base.xz > device-bin/glint-old && chmod +x device-bin/glint-old
for b in glint-cuda--graphs glm5-model--indexer_topk glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; esac
  B device-bin/tests/$b "${f[@]}" > $R/$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/$b.log | tail -1)"
done > $R/tests.txt; t tests
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
f=$(scripts/profile-file.sh)
for r in 1 2; do
  for g in device-bin/glint device-bin/glint-old; do
    echo "== round $r $g"
    B $g bench -m $f --device cuda -p 0 -n 32 -d 16384,65536 -b 1 -r 2 $BF 2>&1 | grep -E "tg32|rror|panic"
  done
done > $R/ab.txt 2>&1; t ab
