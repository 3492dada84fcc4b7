#!/usr/bin/env bash
# Device call BH (binaries `1d09b49`, the head's CUDA code): why the indexer's scores and its
# top-k cost ~50 µs a layer at 64k (call BG's timeline: `indexer_scores_mma_fp8` 28 µs for 8.4
# MB of fp8 keys, `top_k_rows_c` ~23 µs). Nsight Compute's full set on each kernel's first
# launch of a decode step at depth 65,536 (1 dense + 1 MoE file, bf16 + fp8 caches, CUDA graphs
# off): a first pass times every launch of the two kernels (the context's prefill launches
# them too) and picks the first whose grid is a decode step's (one query row); the second
# profiles that launch. Run from the repository root with device-pack/ carried:
#   bash callBH.sh 300
source scripts/device-call-lib.sh "${1:-300}"
export GLINT_CUDA_GRAPHS=0
G=device-bin/glint
f=$(scripts/profile-file.sh)
cmd=($G bench -m "$f" --device cuda -p 0 -n 1 -d 65536 -b 1 -r 1 --cache-type bf16 --cache-type-index fp8)
B "${cmd[@]}" > $R/bench.txt 2>&1; t "warm rc=$?"
for k in indexer_scores_mma_fp8 top_k_rows_c; do
  B ncu --metrics launch__grid_size,gpu__time_duration.sum -k "regex:^$k\$" --csv "${cmd[@]}" \
    > $R/all-$k.csv 2> $R/all-$k.err
  t "$k listed rc=$?"
  # A decode step's launch: one row of queries, so 1024 blocks of 64 keys (scores) or one
  # cluster of 8 blocks (top-k).
  want=$([ $k = top_k_rows_c ] && echo 8 || echo 1024)
  skip=$(python3 - "$R/all-$k.csv" "$want" <<'PY'
import csv, sys
ids = []
for row in csv.reader(open(sys.argv[1])):
    if len(row) > 10 and row[-3] == "launch__grid_size" and row[-1].replace(",", "") == sys.argv[2]:
        ids.append(int(row[0]))
seen = sorted(set(ids))
print(seen[0] if seen else -1)
PY
)
  echo "$k: first decode launch $skip" >> $R/timeline.txt
  [ "$skip" -ge 0 ] 2>/dev/null || continue
  B ncu --set full --clock-control none -k "regex:^$k\$" --launch-skip "$skip" --launch-count 1 \
    -o /tmp/bh-$k -f "${cmd[@]}" > $R/ncu-$k.log 2>&1
  ncu -i /tmp/bh-$k.ncu-rep --page details --print-details all > $R/details-$k.txt 2>&1
  t "$k profiled"
done
