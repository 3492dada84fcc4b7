#!/usr/bin/env python3
"""Fails when workspace code calls an x86 intrinsic instead of inlining it.

An intrinsic inlines only into code compiled with its target feature. A closure handed to a
generic std function (`array::from_fn`, `<[T; N]>::map`) inside a `#[target_feature]` kernel is
compiled without the kernel's features whenever LLVM keeps the std function out of line, and
the closure's intrinsics then become calls: the AVX2 IQ1_S kernel ran 15x slower that way in
default builds, while the benches, built with `-C target-cpu=native`, did not show it
(docs/performance.md, 2026-12-07).

Two checks on a release binary:
1. Every out-of-line `core::core_arch` function must be one of ALLOWED_NAMES (what the
   dependencies and set-up code need). The IQ1_S regression put a dozen others there.
2. Where the binary has line tables (the local release profile; CI builds without), each call
   site is traced through its inlined frames to the first one outside core/std, and that
   frame must not be workspace code, unless listed in ALLOWED_CALLERS.

    python3 scripts/outlined_intrinsics.py target/release/glint
"""

import bisect
import re
import subprocess
import sys

# Intrinsics that may exist out of line, and who needs them.
ALLOWED_NAMES = {
    "_xgetbv",  # std_detect and compiler_builtins' feature detection
    "_mm256_loadu_si256",  # aho_corasick (the tokenizer's regex engine), its mask set-up
    "_mm512_loadu_si512",  # glint_quant::dot::avx512_iq::word_ctrl, once-per-call controls
}
# Workspace functions allowed to call one: set-up run once per call, not a kernel's loop.
ALLOWED_CALLERS = ("glint_quant::dot::avx512_iq::word_ctrl",)
OURS = re.compile(r"^<?(glint|glint_\w+|glm5_model)::")
STD = re.compile(r"^<?(core|std|alloc)::")


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/glint"
    syms = []
    for line in run("nm", "-C", "--defined-only", binary).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in ("t", "T"):
            syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    intrinsics = {a: n for a, n in syms if re.match(r"^core::core_arch::", n)}
    names = {n.rsplit("::", 1)[1] for n in intrinsics.values()}
    failed = False
    print(f"{len(intrinsics)} out-of-line intrinsic functions in {binary}: {sorted(names)}")
    extra = names - ALLOWED_NAMES
    if extra:
        failed = True
        print(f"  not expected out of line: {sorted(extra)}")

    call = re.compile(r"^\s*([0-9a-f]+):\s+call\s+([0-9a-f]+)\b")
    sites = []
    for line in run("objdump", "-d", "--no-show-raw-insn", binary).splitlines():
        m = call.match(line)
        if m and int(m.group(2), 16) in intrinsics:
            sites.append((int(m.group(1), 16), intrinsics[int(m.group(2), 16)]))
    frames = run("addr2line", "-f", "-C", "-i", "-a", "-e", binary, *[hex(s) for s, _ in sites])
    # addr2line prints, per address: the address, then (function, file:line) pairs innermost
    # first; without line tables only the enclosing symbol, with "??:0".
    chains, cur = {}, None
    lines = frames.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("0x"):
            cur = int(line, 16)
            chains[cur] = []
        elif cur is not None and not re.match(r"^(\?\?|/|[A-Za-z]:).*:\d+", line) and "??:" not in line:
            chains[cur].append(line)
    has_lines = any(":" in l and not l.startswith("??") for l in lines if l.startswith("/"))
    starts = [a for a, _ in syms]
    found = {}
    for site, target in sites:
        enclosing = syms[bisect.bisect_right(starts, site) - 1][1]
        chain = chains.get(site, []) if has_lines else []
        origin = next((f for f in chain if not STD.match(f)), enclosing)
        if OURS.match(origin) and not origin.lstrip("<").startswith(ALLOWED_CALLERS):
            found.setdefault((origin, enclosing), set()).add(target.rsplit("::", 1)[1])
    for (origin, enclosing), targets in sorted(found.items()):
        failed = True
        print(f"  {origin} (inlined into {enclosing}) calls {', '.join(sorted(targets))}")
    if not has_lines:
        print("  (no line tables: call sites checked by their enclosing symbol only)")
    if failed:
        print("intrinsics called out of line from workspace code: a closure inside a "
              "#[target_feature] function? write its loop out")
        sys.exit(1)


if __name__ == "__main__":
    main()
