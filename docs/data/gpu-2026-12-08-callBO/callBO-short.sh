#!/usr/bin/env bash
# Call BO in one round (callBO.sh's three runs once each), for a session with little device
# time left. bash callBO-short.sh 100
source scripts/device-call-lib.sh "${1:-100}"
T=device-bin/tests/glm5-model--batched_step
B $T chunked_prefill_equals_one_shot_on_every_fixture_prompt::cuda --exact > $R/alone1.log 2>&1
echo "alone rc=$? $(grep -E '^test result' $R/alone1.log | tail -1)" >> $R/tests.txt; t alone
B $T ::cuda --test-threads=1 > $R/serial1.log 2>&1
echo "serial rc=$? $(grep -E '^test result' $R/serial1.log | tail -1)" >> $R/tests.txt; t serial
B $T ::cuda > $R/parallel1.log 2>&1
echo "parallel rc=$? $(grep -E '^test result' $R/parallel1.log | tail -1)" >> $R/tests.txt; t parallel
t done
