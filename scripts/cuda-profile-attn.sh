#!/usr/bin/env bash
# Nsight Compute durations of the attention-side kernels (indexer scores, top-k, MLA attention
# and its combine) in decode at several depths: `glint bench -p 16 -n 2 -d D -b 1` on the
# 1 dense + 1 MoE synthetic file of scripts/cuda-profile.sh, graphs off, only those kernels
# profiled; the last decode step's launches are printed per depth. NCU_CACHE=none keeps the
# caches between launches (scripts/cuda-profile.sh). Writes $OUT/attn-D.txt (the raw CSVs stay
# in /tmp).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-profile-attn}
mkdir -p "$out"
G=device-bin/glint
f=/tmp/p_1_1.gguf
[ -e "$f" ] || $G synth "$f" --dense 1 --moe 1 --experts 256 --quant q4_k_m --seed 1 >/dev/null 2>&1
export GLINT_CUDA_GRAPHS=0 GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels}
for d in ${DEPTHS:-0 4096 16384}; do
  ncu --clock-control none --cache-control "${NCU_CACHE:-all}" --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:'indexer_scores|top_k_rows|mla_attention|mla_combine' \
    $G bench -m "$f" --device cuda -p 16 -n 2 -d "$d" -b 1 -r 1 > "/tmp/ncu-attn-$d.csv" 2>/dev/null
  python3 - "/tmp/ncu-attn-$d.csv" "$d" > "$out/attn-$d.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, ni, vi, mi = hdr.index("ID"), hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Name")
gi = hdr.index("Grid Size") if "Grid Size" in hdr else None
l = [(int(r[ki]), r[ni].split("(")[0], float(r[vi].replace(",", "")), r[gi] if gi is not None else "") for r in rows if r[mi] == "gpu__time_duration.sum"]
l.sort()
print(f"depth {sys.argv[2]}: {len(l)} launches; the last 8 (the last decode step's):")
for _, n, v, g in l[-8:]:
    print(f"  {n:<20} {v/1e3:8.1f} us  grid {g}")
PY
  cat "$out/attn-$d.txt"
done
