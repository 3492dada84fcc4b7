#!/usr/bin/env python3
"""One MoE layer's decode time against context, from device-call bench logs and llama.cpp's.

    python3 scripts/layer-vs-context.py OUT.png LABEL=BENCH.txt[:FLAGS] ... [llama=DIR]

BENCH.txt is a device call's `bench.txt` (docs/data/*/bench-call*.txt: "== s34 d16384 FLAGS"
headers, each followed by the `glint bench` table row); FLAGS (optional) picks the runs whose
header ends with them (default: no flags; several choices separated by `;`, e.g. one for depth 0
and another for the deeper runs). A MoE layer's time at a depth is the issue's anchor,
(1/tok_s of the 3 + 4 file − 1/tok_s of the 3 + 2 file) / 2, averaged over the pairs at that
depth. llama=DIR adds llama.cpp's line from scripts/cuda-llamacpp.sh's llama-3-{2,4}.json.
Prints the table it plots.
"""
import json
import pathlib
import sys
from collections import defaultdict


def glint_layers(path, flags):
    runs, cur = [], None
    for line in open(path):
        if line.startswith("=="):
            cur = line[3:].split()
        elif line.startswith("| tg64") and cur:
            runs.append((cur[0], cur[1], " ".join(cur[2:]), float(line.split("|")[4].split("±")[0])))
    by_depth = defaultdict(list)
    for a, b in zip(runs, runs[1:]):
        if a[0] == "s34" and b[0] == "s32" and a[1:3] == b[1:3] and a[2] in flags.split(";"):
            by_depth[int(a[1].lstrip("d").replace("16k", "16384"))].append((1e3 / a[3] - 1e3 / b[3]) / 2)
    return {d: sum(v) / len(v) for d, v in sorted(by_depth.items())}


def llama_layers(d):
    ts = {}
    for m in (2, 4):
        for r in json.loads((pathlib.Path(d) / f"llama-3-{m}.json").read_text()):
            if r["n_prompt"] == 0:
                ts[(m, r.get("n_depth", 0))] = r["avg_ts"]
    return {dep: (1e3 / ts[(4, dep)] - 1e3 / ts[(2, dep)]) / 2 for (m, dep) in sorted(ts) if m == 4}


def main():
    out, series = sys.argv[1], {}
    for arg in sys.argv[2:]:
        label, src = arg.split("=", 1)
        if label == "llama":
            series["llama.cpp (H200, 2026-12-01)"] = llama_layers(src)
        else:
            path, _, flags = src.partition(":")
            series[label] = glint_layers(path, flags)
    depths = sorted({d for s in series.values() for d in s})
    print("| series | " + " | ".join(f"depth {d}" for d in depths) + " |")
    print("|---" * (len(depths) + 1) + "|")
    for name, s in series.items():
        cells = []
        for d in depths:
            v = s.get(d)
            cells.append("—" if v is None else f"{v:.3f} ms" + (f" ({v / s[0]:.2f}x)" if 0 in s and d else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, s in series.items():
        ax.plot([d / 1024 for d in s], list(s.values()), marker="o", ls="--" if "llama" in name else "-", label=name)
    ax.set_xlabel("context (k tokens)")
    ax.set_ylabel("ms per MoE layer (decode, one sequence)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("One GLM-5 MoE layer, synthetic Q4_K_M files (3+4 minus 3+2)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


main()
