#!/usr/bin/env bash
# Device call BO (2026-12-08): call BN's one failure, glm5-model batched_step's
# chunked_prefill_equals_one_shot_on_every_fixture_prompt::cuda (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
# at mla_attention on the third fixture prompt, the others of the binary running beside it in
# the same process). Is it the test threads (another test's frees or syncs while a step is
# captured) or the step itself? The test alone, then the binary one test at a time, then the
# binary with its default threads, twice each where time allows.
# bash callBO.sh 300
source scripts/device-call-lib.sh "${1:-300}"
T=device-bin/tests/glm5-model--batched_step
for r in 1 2; do
  B $T chunked_prefill_equals_one_shot_on_every_fixture_prompt::cuda --exact > $R/alone$r.log 2>&1
  echo "alone round $r rc=$? $(grep -E '^test result' $R/alone$r.log | tail -1)" >> $R/tests.txt; t "alone $r"
  B $T ::cuda --test-threads=1 > $R/serial$r.log 2>&1
  echo "serial round $r rc=$? $(grep -E '^test result' $R/serial$r.log | tail -1)" >> $R/tests.txt; t "serial $r"
  B $T ::cuda > $R/parallel$r.log 2>&1
  echo "parallel round $r rc=$? $(grep -E '^test result' $R/parallel$r.log | tail -1)" >> $R/tests.txt; t "parallel $r"
done
t done
