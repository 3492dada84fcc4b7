#!/usr/bin/env python3
"""Prints the docs/performance.md "Quant matvec (CPU)" table from criterion's results.

Usage: python3 benches/quant_table.py [CRITERION_DIR]   (default: target/criterion)
Reads <dir>/matvec_<rows>x<cols>_<type>/{glint,candle,probe}/<threads>/new/{estimates,benchmark}.json
written by `cargo bench --bench quant`; GB/s = weight bytes / median time (10^9 bytes).
Standard library only.
"""
import glob
import json
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
rows = {}
for d in glob.glob(os.path.join(root, "matvec_*")):
    m = re.match(r"matvec_(\d+)x(\d+)_(.+)", os.path.basename(d))
    if not m:
        continue
    r, c, ty = int(m.group(1)), int(m.group(2)), m.group(3)
    for impl in ("glint", "candle", "probe"):
        for tdir in glob.glob(os.path.join(d, impl, "*")):
            est = os.path.join(tdir, "new", "estimates.json")
            bench = os.path.join(tdir, "new", "benchmark.json")
            if not os.path.exists(est):
                continue
            ns = json.load(open(est))["median"]["point_estimate"]
            nbytes = json.load(open(bench))["throughput"]["Bytes"]
            key = (r, c, ty, int(os.path.basename(tdir)))
            rows.setdefault(key, {"bytes": nbytes})[impl] = nbytes / ns

order = ["Q4_K", "Q6_K", "Q8_0", "IQ2_XXS", "IQ4_XS"]
print("| rows x cols | type | weight MB | threads | glint GB/s | probe GB/s | glint / probe | candle GB/s | glint / candle |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(rows, key=lambda k: (k[0] * k[1], order.index(k[2]) if k[2] in order else 99, k[3])):
    v = rows[key]
    r, c, ty, t = key
    g, p, cd = v.get("glint"), v.get("probe"), v.get("candle")
    cand = f"{cd:.1f} | {g / cd:.2f}x" if cd else "n/a | n/a"
    print(f"| {r}x{c} | {ty} | {v['bytes'] / 1e6:.0f} | {t} | {g:.1f} | {p:.1f} | {100 * g / p:.0f}% | {cand} |")
