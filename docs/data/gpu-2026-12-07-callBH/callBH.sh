#!/usr/bin/env bash
# Device call BH (binaries `1d09b49`, the head's CUDA code): why the indexer's scores and its
# top-k cost ~50 µs a layer at 64k (call BG's timeline: `indexer_scores_mma_fp8` 28 µs for 8.4
# MB of fp8 keys, `top_k_rows_c` ~23 µs). Nsight Compute's full set on each kernel's first
# launch of a decode step at depth 65,536 (1 dense + 1 MoE file, bf16 + fp8 caches, CUDA graphs
# off): a first pass times every launch of the two kernels (the context's prefill launches
# them too) and picks the first whose grid is a decode step's (one query row); the second
# profiles that launch. Run from the repository root with device-pack/ carried:
#   bash callBH.sh 300          (KERNELS=indexer_scores_mma_fp8 for the scores alone)
# First run 09:16Z: its test for a decode launch wanted a grid of exactly 1,024 blocks, so only
# the top-k was profiled (the context plus the new token is 65,537 keys: 1,025 blocks); the
# second run, with the test above, profiled the scores.
source scripts/device-call-lib.sh "${1:-300}"
export GLINT_CUDA_GRAPHS=0
G=device-bin/glint
f=$(scripts/profile-file.sh)
cmd=($G bench -m "$f" --device cuda -p 0 -n 1 -d 65536 -b 1 -r 1 --cache-type bf16 --cache-type-index fp8)
B "${cmd[@]}" > $R/bench.txt 2>&1; t "warm rc=$?"
for k in ${KERNELS:-indexer_scores_mma_fp8 top_k_rows_c}; do
  B ncu --metrics launch__grid_size,gpu__time_duration.sum -k "regex:^$k\$" --csv "${cmd[@]}" \
    > $R/all-$k.csv 2> $R/all-$k.err
  t "$k listed rc=$?"
  # A decode step's launch: one row of queries, so a grid of (1, tiles) for the scores (the
  # context's 65,537 keys: 1,025 blocks of 64) or one cluster of 8 blocks for the top-k.
  skip=$(python3 - "$R/all-$k.csv" "$k" <<'PY'
import csv, sys
decode = (lambda g: g == "(8, 1, 1)") if sys.argv[2] == "top_k_rows_c" else (lambda g: g.startswith("(1, "))
ids = sorted({int(r[0]) for r in csv.reader(open(sys.argv[1])) if len(r) > 10 and r[0].isdigit() and decode(r[8])})
print(ids[0] if ids else -1)
PY
)
  echo "$k: first decode launch $skip" >> $R/timeline.txt
  [ "$skip" -ge 0 ] 2>/dev/null || continue
  B ncu --set full --clock-control none -k "regex:^$k\$" --launch-skip "$skip" --launch-count 1 \
    -o /tmp/bh-$k -f "${cmd[@]}" > $R/ncu-$k.log 2>&1
  ncu -i /tmp/bh-$k.ncu-rep --page details --print-details all > $R/details-$k.txt 2>&1
  t "$k profiled"
done
