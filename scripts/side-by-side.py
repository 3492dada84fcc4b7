#!/usr/bin/env python3
"""Table and plot of glint against llama.cpp from one scripts/cuda-llamacpp.sh run.

    python3 scripts/side-by-side.py DIR [PNG]

DIR holds glint-3-{2,4}.json (`glint bench -o json`) and llama-3-{2,4}.json (`llama-bench
-o json`) of the 3 dense + 2 and 3 dense + 4 MoE files. Prints a markdown table per test and
depth (tok/s of both engines, the ratio), then one MoE layer's decode time at each depth as
the GPU-speed issue's anchor defines it: (step with 4 MoE layers - step with 2) / 2. PNG gets
that per-layer time against context for both engines; with BEFORE=DIR2 (an earlier run's
glint JSON) that run's glint line is drawn too, dashed.
"""
import json
import os
import pathlib
import sys


def glint(path):
    rows = {}
    for r in json.loads(path.read_text()):
        if r["batch"] != 1:
            continue
        kind = "pp" if r["test"].startswith("pp") else "tg"
        rows[(kind, r["depth"])] = (r["tokens_per_s_mean"], r["tokens_per_s_sd"], r.get("roofline_fraction"))
    return rows


def llama(path):
    rows = {}
    for r in json.loads(path.read_text()):
        kind = "pp" if r["n_prompt"] > 0 else "tg"
        rows[(kind, r.get("n_depth", 0))] = (r["avg_ts"], r["stddev_ts"], None)
    return rows


def main():
    d = pathlib.Path(sys.argv[1])
    g = {m: glint(d / f"glint-3-{m}.json") for m in (2, 4)}
    l = {m: llama(d / f"llama-3-{m}.json") for m in (2, 4)}
    print("| file | test | depth | glint tok/s | llama.cpp tok/s | glint / llama.cpp | glint % of probe |")
    print("|---|---|---|---|---|---|---|")
    for m in (2, 4):
        for key in sorted(g[m]):
            kind, depth = key
            gm, gs, frac = g[m][key]
            lm, ls, _ = l[m].get(key, (float("nan"), float("nan"), None))
            test = "pp512" if kind == "pp" else "tg64"
            pct = f"{100 * frac:.0f}%" if frac is not None else "—"
            print(f"| 3+{m} | {test} | {depth} | {gm:.2f} ± {gs:.2f} | {lm:.2f} ± {ls:.2f} | {gm / lm:.2f}x | {pct} |")
    print()
    print("| depth | glint ms / MoE layer | llama.cpp ms / MoE layer | llama.cpp / glint |")
    print("|---|---|---|---|")
    before = os.environ.get("BEFORE")
    gb = {m: glint(pathlib.Path(before) / f"glint-3-{m}.json") for m in (2, 4)} if before else None
    depths, per = [], {"glint": [], "llama.cpp": []}
    if gb:
        per["glint (before)"] = []
    for (kind, depth) in sorted(g[2]):
        if kind != "tg" or ("tg", depth) not in g[4]:
            continue
        layer = lambda rows: (1e3 / rows[4][("tg", depth)][0] - 1e3 / rows[2][("tg", depth)][0]) / 2
        gl, ll = layer(g), layer(l)
        depths.append(depth)
        per["glint"].append(gl)
        per["llama.cpp"].append(ll)
        if gb:
            per["glint (before)"].append(layer(gb))
        print(f"| {depth} | {gl:.3f} | {ll:.3f} | {ll / gl:.2f}x |")
    if len(sys.argv) > 2:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for name, ys in per.items():
            style = "--" if "before" in name else "-"
            ax.plot(depths, ys, style, marker="o", label=name)
        ax.set_xlabel("context (tokens already in the cache)")
        ax.set_ylabel("decode time of one MoE layer (ms)")
        gpu = json.loads((d / "llama-3-2.json").read_text())[0].get("gpu_info", "one GPU")
        ax.set_title(f"GLM-5 MoE layer decode, {gpu}, 1 sequence", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
