#!/usr/bin/env python3
"""Where a parallel run leaves a core idle, from a perf sampling profile.

The VMs this project runs on have no PMU counters, so `perf stat` cannot say why a 2-thread
prefill is short of 2x; but samples carry thread ids and times. Cut the run into windows; a
window where only one thread was sampled is one where the other had nothing to do. Count those
windows and name what the busy thread ran in them (the innermost frames of glint's crates above
the kernels).

    perf record -F 149 --call-graph dwarf,32768 -o /tmp/pp.perf \
        target/release/glint bench -m FILE.gguf -p 512 -n 0 -r 1
    perf script -i /tmp/pp.perf -F tid,time,ip,sym > /tmp/pp.txt

    python3 scripts/perf_idle_windows.py /tmp/pp.txt [--window-ms 20] [--after tile_k4]

(Without `--call-graph` each sample is its top frame only: cheaper, so a higher `-F` and
shorter windows suit a decode step's millisecond products.)

`--after SYMBOL` starts the count at the first sample whose top frame contains SYMBOL (skips
the model load, which is single-threaded by nature).
"""

import argparse
import collections
import re

CRATES = ("glm5_model::", "glint_moe::", "glint_mla::", "glint_core::cpu::", "glint_quant::")
# The kernels themselves say little; the product that called them says which op it was.
SKIP = ("glint_quant::dot::",)


def samples(path):
    cur = None
    for line in open(path):
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        m = re.match(r"^\s*(\d+)\s+([\d.]+):\s*(?:[0-9a-f]+\s+(.*))?$", line)
        if m:
            # A new sample; without call graphs its one frame is on the same line.
            if cur:
                yield cur
            cur = (float(m.group(2)), int(m.group(1)), [m.group(3)] if m.group(3) else [])
        elif cur is not None:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                cur[2].append(parts[1])
    if cur:
        yield cur


def where(stack):
    frames = [
        re.sub(r"::\{\{closure\}\}", "", f)[:100]
        for f in stack
        if f.startswith(CRATES) and not f.startswith(SKIP)
    ]
    return " <- ".join(frames[:3]) if frames else (stack[0][:60] if stack else "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("--window-ms", type=float, default=20.0)
    ap.add_argument("--after", default="tile_k4")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    all_s = list(samples(a.script))
    starts = [s[0] for s in all_s if s[2] and a.after in s[2][0]]
    t0 = min(starts) if starts else min(s[0] for s in all_s)
    w = a.window_ms / 1000
    run = [s for s in all_s if s[0] >= t0]
    threads = collections.defaultdict(set)
    for t, tid, _ in run:
        threads[int((t - t0) / w)].add(tid)
    n = max(threads) + 1
    one = {b for b in range(n) if len(threads.get(b, ())) == 1}
    print(f"{n} windows of {a.window_ms:g} ms, {len(one)} with one thread busy "
          f"({100 * len(one) / n:.1f}%)")
    alone, shared = collections.Counter(), collections.Counter()
    for t, _, st in run:
        (alone if int((t - t0) / w) in one else shared)[where(st)] += 1
    print("samples alone | beside the other thread | where")
    for k, v in alone.most_common(a.top):
        print(f"{v:6} | {shared.get(k, 0):6} | {k}")


if __name__ == "__main__":
    main()
