#!/usr/bin/env python3
"""Decode step time against context on this CPU, glint and llama.cpp on one GGUF in one run
(docs/performance.md, "CPU decode against context, side by side"; the CPU-speed issue's
point 5).

    /tmp/llvenv/bin/python benches/cpu_context.py MODEL OUT_DIR [--depths 0,1024,2048,4096]
        [--n 16] [--rounds 2] [--glint target/release/glint]

llama.cpp is PyPI llama-cpp-python==0.3.36 in the running interpreter (fixtures/
make_llamacpp_refs.py builds that venv; matplotlib==3.10.7 for the plot). Both engines: 2
threads, F32 KV caches, greedy decode of N tokens after a context of D tokens. glint's figure
is `glint bench -p 0 -n N -d D -r 1 -o json` (its tg test fills the context by prefill, untimed,
then times N steps after one untimed step; the first depth runs twice, the first run a warm-up);
llama.cpp's fills the same number of tokens with one `eval`, untimed, then times N single-token
`eval`s (after an untimed warm-up of a short context and four steps). Rounds alternate the engines. Writes OUT_DIR/cpu-context.json,
prints a markdown table (ms per decoded token, tok/s, the ratio, each engine's step at D against
its step at the first depth) and draws OUT_DIR/cpu-context.png when matplotlib is there.
"""

import argparse
import json
import os
import pathlib
import subprocess
import time

import numpy as np
from llama_cpp import Llama

GGML_TYPE_F32 = 0


def glint_tg(binary, model, depths, n):
    env = dict(os.environ, RAYON_NUM_THREADS="2")
    out = subprocess.run(
        # The first depth twice: its first run warms the process (pages, pools) and the later
        # row for that depth overwrites it below.
        [binary, "bench", "-m", model, "-p", "0", "-n", str(n), "-d",
         ",".join(map(str, [depths[0]] + depths)),
         "-r", "1", "-o", "json"],
        check=True, capture_output=True, text=True, env=env).stdout
    rows = json.loads(out)
    return {r["depth"]: r["tokens_per_s_mean"] for r in rows if r["test"].startswith("tg") and r["batch"] == 1}


def llama_tg(model, depths, n):
    m = Llama(model, n_ctx=max(depths) + n + 8, n_threads=2, n_threads_batch=2,
              n_batch=4096, n_ubatch=4096, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
              verbose=False)
    n_vocab = m.n_vocab()
    # Untimed warm-up, as glint's extra first depth: a short context and a few decode steps.
    m.eval([1000 + i for i in range(8)])
    for _ in range(4):
        m.eval([1000])
    res = {}
    for d in depths:
        m.reset()
        # The same context length glint's tg test builds (at least one token).
        m.eval([1000 + (i % 5000) for i in range(max(d, 1))])
        t0 = time.perf_counter()
        for _ in range(n):
            logits = np.ctypeslib.as_array(m._ctx.get_logits(), shape=(n_vocab,))
            m.eval([int(np.argmax(logits))])
        res[d] = n / (time.perf_counter() - t0)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--depths", default="0,1024,2048,4096")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--glint", default="target/release/glint")
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    out = pathlib.Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = {"glint": [], "llama.cpp": []}
    for r in range(a.rounds):
        runs["glint"].append(glint_tg(a.glint, a.model, depths, a.n))
        runs["llama.cpp"].append(llama_tg(a.model, depths, a.n))
        print(f"round {r + 1}: glint {runs['glint'][-1]} llama.cpp {runs['llama.cpp'][-1]}", flush=True)
    (out / "cpu-context.json").write_text(json.dumps(
        {"model": a.model, "n": a.n, "depths": depths,
         "tok_s": {k: [{str(d): v for d, v in run.items()} for run in vs] for k, vs in runs.items()}},
        indent=1))
    mean = {k: {d: sum(run[d] for run in vs) / len(vs) for d in depths} for k, vs in runs.items()}
    print("| context | glint ms/token | llama.cpp ms/token | glint / llama.cpp speed | glint step vs first | llama.cpp step vs first |")
    print("|---|---|---|---|---|---|")
    for d in depths:
        g, l = 1000 / mean["glint"][d], 1000 / mean["llama.cpp"][d]
        g0, l0 = 1000 / mean["glint"][depths[0]], 1000 / mean["llama.cpp"][depths[0]]
        print(f"| {d} | {g:.1f} | {l:.1f} | {l / g:.2f}x | {g / g0:.2f}x | {l / l0:.2f}x |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, style in (("glint", "o-"), ("llama.cpp", "s--")):
        for i, run in enumerate(runs[k]):
            ax.plot(depths, [1000 / run[d] for d in depths], style, alpha=0.35 if i else 1.0,
                    label=k if i == 0 else None, color="C0" if k == "glint" else "C1")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode step (ms per token)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{pathlib.Path(a.model).name}: decode vs context, 2 threads")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "cpu-context.png", dpi=110)
    print(f"wrote {out / 'cpu-context.png'}")


if __name__ == "__main__":
    main()
