#!/usr/bin/env bash
# Where a decode step's time goes as it really runs: scripts/cupti_trace.c, a CUDA injection
# library built here against the machine's CUPTI, records every kernel's start and end,
# graph nodes included, so each kernel's duration is its own inside a graph replay with
# programmatic dependent launch and the second stream, caches warm (ncu, in
# scripts/cuda-profile.sh, serializes launches and so overstates the small kernels; the device
# machines have no Nsight Systems). On a synthetic file with GLM-5's real shapes
# (scripts/profile-file.sh: 1 dense + PROFILE_MOE MoE layers), `glint bench -p 16 -n N -d
# DEPTH`; the decode steps are split at each step's first kernel (the embedding row gather).
# Writes $OUT/timeline.txt: per step the span (first start to the next step's first start),
# the time some kernel runs and the kernels' summed durations; per kernel its mean time a
# step; one median step in launch order with its gaps. The raw trace is $OUT/trace.csv.xz.
# DEPTH (default 0), STEPS (default 32), PROFILE_ARGS (more bench options).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-timeline}
mkdir -p "$out"
G=device-bin/glint
f=$(scripts/profile-file.sh)
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels}
cmd=($G bench -m "$f" --device cuda -p 16 -n "${STEPS:-32}" -d "${DEPTH:-0}" -b 1 -r 1 ${PROFILE_ARGS:-})
RUST_LOG=warn "${cmd[@]}" > "$out/bench.txt" 2>&1
cuda=${CUDA_HOME:-/usr/local/cuda}
first() { local f=$1; shift; for d in "$@"; do [ -d "$d" ] && find -L "$d" -name "$f" -print -quit 2>/dev/null; done | head -1; }
hdr=$(first cupti_activity.h "$cuda/extras" "$cuda/include" "$cuda/" /usr/local/lib /usr/lib)
cupti=$(dirname "$hdr")
so_cupti=$(first 'libcupti.so*' "$cupti/.." "$cuda/" /usr/local/lib /usr/lib)
lib=$(dirname "$so_cupti")
krec=$(grep -o '} CUpti_ActivityKernel[0-9]*;' "$hdr" | tr -d '}; ' | sort -V | tail -1)
so=/tmp/libglint_cupti.so
gcc -O2 -shared -fPIC -DKREC="$krec" -I"$cuda/include" -I"$cupti" scripts/cupti_trace.c \
  -L"$lib" -l:"$(basename "$so_cupti")" -Wl,-rpath,"$lib" -o "$so" > "$out/build.log" 2>&1
echo "cupti $hdr lib $so_cupti record $krec build rc=$?" >> "$out/build.log"
CUDA_INJECTION64_PATH=$so GLINT_CUPTI_OUT="$out/trace.csv" RUST_LOG=warn "${cmd[@]}" > "$out/traced.txt" 2>&1
echo "traced run rc=$?" >> "$out/build.log"
python3 - "$out/trace.csv" "${STEPS:-32}" > "$out/timeline.txt" <<'PY'
import csv, sys, collections, statistics
rows = list(csv.DictReader(open(sys.argv[1])))
def col(r, *names):
    for n in names:
        if n in r and r[n] != "":
            return r[n]
    return None
ks = []
for r in rows:
    name = col(r, "Name", "Kernel Name")
    grid = col(r, "GrdX")
    if name is None or grid is None:  # memcpy / memset rows carry no grid
        continue
    ks.append((int(col(r, "Start (ns)")), int(col(r, "Duration (ns)")), name.split("(")[0].split("<")[0].strip(), col(r, "Strm") or "?"))
ks.sort()
first = next(n for _, _, n, _ in ks if n.startswith("get_rows_"))
starts = [i for i, k in enumerate(ks) if k[2] == first]
steps = []
for a, b in zip(starts, starts[1:]):
    seg = ks[a:b]
    span = ks[b][0] - seg[0][0]
    busy, end = 0, seg[0][0]
    for s, d, _, _ in seg:
        e = s + d
        if e > end:
            busy += e - max(s, end)
            end = e
    steps.append((span, busy, sum(d for _, d, _, _ in seg), seg))
n = int(sys.argv[2])
dec = steps[-(n - 2):] if len(steps) > n - 2 else steps[1:]
print(f"kernels: {len(ks)}; steps: {len(steps)}; decode steps summarised: {len(dec)} (the last ones)")
m = lambda i: statistics.mean(s[i] for s in dec) / 1e3
print(f"step span {m(0):.1f} us; some kernel running {m(1):.1f} us; kernel durations summed {m(2):.1f} us")
tot = collections.defaultdict(lambda: [0, 0])
for s in dec:
    for _, d, nm, _ in s[3]:
        tot[nm][0] += 1; tot[nm][1] += d
print(f"\n{'kernel':<40} {'a step':>6} {'us a step':>10}")
for nm, (c, d) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{nm:<40} {c/len(dec):>6.1f} {d/len(dec)/1e3:>10.1f}")
med = sorted(dec, key=lambda s: s[0])[len(dec) // 2]
print(f"\nmedian step in launch order (start offset, duration, gap since the previous kernel ended; us):")
t0, end = med[3][0][0], med[3][0][0]
for s, d, nm, st in med[3]:
    print(f"  {nm:<40} {(s-t0)/1e3:8.1f} {d/1e3:7.1f} {(s-end)/1e3:7.1f}  stream {st}")
    end = max(end, s + d)
PY
head -40 "$out/timeline.txt"
xz -f -9 "$out/trace.csv"
