#!/usr/bin/env python3
"""Per-kernel times of one decode step from an ncu CSV (`ncu --metrics gpu__time_duration.sum
--csv ... glint bench ...`, xz or plain). The last step is the launches after the
second-to-last output-head product (`matvec1s_*`, the step's last launch); layers are cut at
their first launch (the attention norm). Prints each layer's launches and a table of the
MoE layers' kernels. ncu serialises launches, so each time is a kernel alone: launch overlap
(graphs, programmatic dependent launch) is not in it."""
import csv, io, lzma, sys
from collections import OrderedDict


def load(path):
    f = lzma.open(path, "rt") if path.endswith(".xz") else open(path)
    rows = []
    for r in csv.reader(f):
        if len(r) > 14 and r[0].isdigit():
            rows.append((r[4], r[8].strip("()").replace(" ", ""), float(r[14].replace(",", "")) / 1000))
    return rows


def step(rows):
    heads = [i for i, r in enumerate(rows) if r[0].startswith("matvec1s")]
    return rows[heads[-2] + 1 : heads[-1] + 1]


def layers(st):
    cut = [i for i, r in enumerate(st) if r[0] in ("rms_norm", "add_rms_norm")]
    # A layer starts at the norm that precedes the q_a product; the FFN norm sits mid-layer.
    starts = [cut[0]] + [
        i for i in cut[1:] if i + 3 < len(st) and st[i + 2][0].startswith("matvec1") and st[i + 3][0] == "rms_norm"
    ]
    out = [st[a:b] for a, b in zip(starts, starts[1:] + [len(st)])]
    return out


def main():
    st = step(load(sys.argv[1]))
    ls = layers(st)
    print(f"{len(st)} launches, {sum(r[2] for r in st):.1f} us in the step; {len(ls)} layers")
    for i, l in enumerate(ls):
        moe = any(r[0] == "moe_route" for r in l)
        print(f"layer {i} ({'MoE' if moe else 'dense'}): {len(l)} launches, {sum(r[2] for r in l):.1f} us")
    # The first MoE layer: the last one also holds the output norm and head.
    moe = [l for l in ls if any(r[0] == "moe_route" for r in l)][0]
    print("\n| # | kernel | grid | us |\n|---|---|---|---|")
    for j, (n, g, us) in enumerate(moe):
        print(f"| {j} | {n} | {g} | {us:.1f} |")
    cats = OrderedDict()
    for n, _, us in moe:
        c = category(n)
        cats[c] = (cats.get(c, (0, 0.0))[0] + 1, cats.get(c, (0, 0.0))[1] + us)
    print("\n| part of the MoE layer | launches | us |\n|---|---|---|")
    for c, (k, us) in cats.items():
        print(f"| {c} | {k} | {us:.1f} |")


def category(name):
    if name.startswith(("matvec", "mmid", "mmq")):
        return "weight products"
    if name.startswith("mla_"):
        return "attention (mla_attention, mla_combine)" if name != "mla_kv_rows" else "small ops"
    if name.startswith(("indexer_scores", "top_k")):
        return "indexer scores, top-k"
    return "small ops"


if __name__ == "__main__":
    main()
