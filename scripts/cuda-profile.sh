#!/usr/bin/env bash
# Per-kernel GPU time of one decode step, from Nsight Compute (`ncu`, one duration metric per
# launch, graphs off so every launch is its own kernel): on a synthetic file with GLM-5's real
# shapes (1 dense + 1 MoE layer, 256 experts, Q4_K_M-like), a 1-token prompt and 3 generated
# tokens; the last decode step's launches are summed by kernel name. PROFILE_SEQS=N profiles a
# batched decode step of N sequences instead (`glint bench -b N`, its last step), PROFILE_DEPTH=D
# a decode step with D tokens already in the cache (`glint bench -d D`), PROFILE_PROMPT=N one
# prefill step of an N-token prompt (`glint bench -p N -n 0`, its last step); PROFILE_ARGS adds
# bench options (cache types, say) to the bench runs. Runs on a GPU
# machine from a checkout holding device-bin/ (scripts/cuda-build.sh). NCU_CACHE=none keeps the
# caches between launches (ncu flushes them by default, so every kernel then reads its weights
# from DRAM: closer to a graph replay's small kernels with it off). Writes $OUT/profile.txt and
# the raw durations as $OUT/ncu.csv.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-profile}
mkdir -p "$out"
G=device-bin/glint
f=$(scripts/profile-file.sh)
export GLINT_CUDA_GRAPHS=0 GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels}
if [ -n "${PROFILE_PROMPT:-}" ]; then
  # PROFILE_ARGS: more bench options (cache types, say).
  cmd=($G bench -m "$f" --device cuda -p "$PROFILE_PROMPT" -n 0 -r 1 ${PROFILE_ARGS:-})
elif [ -n "${PROFILE_SEQS:-}${PROFILE_DEPTH:-}" ]; then
  cmd=($G bench -m "$f" --device cuda -p 16 -n 2 -d "${PROFILE_DEPTH:-0}" -b "${PROFILE_SEQS:-1}" -r 1 ${PROFILE_ARGS:-})
else
  cmd=($G generate -m "$f" -p "hi" -n 3 --temp 0 --ignore-eos --device cuda)
fi
RUST_LOG=warn "${cmd[@]}" >/dev/null 2>&1
ncu --clock-control none --cache-control "${NCU_CACHE:-all}" --metrics gpu__time_duration.sum --csv --print-units base \
  "${cmd[@]}" > "$out/ncu.csv" 2> "$out/ncu.err"
python3 - "$out/ncu.csv" > "$out/profile.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, ni, vi = hdr.index("ID"), hdr.index("Kernel Name"), hdr.index("Metric Value")
launches = [(int(r[ki]), r[ni].split("(")[0], float(r[vi].replace(",", ""))) for r in rows if r[hdr.index("Metric Name")] == "gpu__time_duration.sum"]
launches.sort()
# The steps are separated by the first kernel of each step (the embedding row gather).
first = launches[0][1]
starts = [i for i, l in enumerate(launches) if l[1] == first]
last = launches[starts[-1]:]
tot = collections.defaultdict(lambda: [0, 0.0])
for _, n, v in last:
    tot[n][0] += 1; tot[n][1] += v
total = sum(v for _, _, v in last)
print(f"launches in the file: {len(launches)}; steps: {len(starts)}; last step: {len(last)} launches, {total/1e3:.1f} us")
print(f"{'kernel':<40} {'count':>5} {'us':>9} {'share':>6}")
for n, (c, v) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{n:<40} {c:>5} {v/1e3:>9.1f} {100*v/total:>5.1f}%")
print("\nlast step in launch order (us):")
for _, n, v in last:
    print(f"  {n:<40} {v/1e3:8.1f}")
PY
cat "$out/profile.txt" | head -40
xz -f -9 "$out/ncu.csv"
[ -s "$out/ncu.err" ] || rm -f "$out/ncu.err"
