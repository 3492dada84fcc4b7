#!/usr/bin/env python3
"""Fails when workspace code calls an x86 intrinsic instead of inlining it.

An intrinsic inlines only into code compiled with its target feature. A closure takes the
target features of the function it is written in, so one with intrinsics inside an
`#[inline(always)]` helper that has no `#[target_feature]` of its own carries no AVX2; where
LLVM keeps the std generic that runs it (`array::from_fn`, `<[T; N]>::map`) out of line, its
intrinsics become calls. The AVX2 IQ1_S kernel ran 15x slower that way in default builds,
while the benches, built with `-C target-cpu=native`, did not show it (docs/performance.md,
2026-12-07).

Every call (or tail jump) to an out-of-line `core::core_arch` function in a release binary is
traced to where it was written: with line tables (the local release profile; CI builds
without), the first inlined frame outside core/std; without, the enclosing symbol. It fails
when that is workspace code (unless listed in ALLOWED_CALLERS), or a std generic's body —
where a closure of ours would land — calling an intrinsic not in SHIM_INTRINSICS. Calls from
other crates (the tokenizer's regex engine, std's feature detection) are theirs.

    python3 scripts/outlined_intrinsics.py target/release/glint
"""

import bisect
import re
import subprocess
import sys

# Workspace functions allowed to call an intrinsic out of line: set-up run once per call.
ALLOWED_CALLERS = ("glint_quant::dot::avx512_iq::word_ctrl",)
# Intrinsics a std generic's body may call, and whose closure that is.
SHIM_INTRINSICS = {
    "_mm256_loadu_si256",  # aho_corasick's mask set-up, through `<[T; N]>::map`
    "_mm512_loadu_si512",  # avx512_iq::word_ctrl's controls, through `array::from_fn`
}
OURS = re.compile(r"^<?(glint|glint_\w+|glm5_model)::")
STD = re.compile(r"^<?(core|std|alloc)::")


def run(*cmd):
    return subprocess.run(
        cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/glint"
    syms = []
    for line in run("nm", "-C", "--defined-only", binary).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in ("t", "T"):
            syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    if any(n.startswith("_RNv") and "core_arch" in n for _, n in syms):
        sys.exit("nm left Rust v0 symbols mangled (binutils older than 2.36?): cannot check")
    if not any(n.startswith("core::core_arch::") for _, n in syms):
        # Feature detection always leaves `_xgetbv` out of line; none at all means the names
        # were not read, not that everything inlined.
        sys.exit(f"no core::core_arch symbol in {binary}: not a Rust x86 release binary?")
    intrinsics = {a: n for a, n in syms if n.startswith("core::core_arch::")}
    call = re.compile(r"^\s*([0-9a-f]+):\s+(?:call|jmp)q?\s+([0-9a-f]+)\b")
    sites = []
    for line in run("objdump", "-d", "--no-show-raw-insn", binary).splitlines():
        m = call.match(line)
        if m and int(m.group(2), 16) in intrinsics:
            sites.append((int(m.group(1), 16), intrinsics[int(m.group(2), 16)]))
    # addr2line prints, per address: the address, then (function, file:line) pairs innermost
    # first; without line tables one function and "??:0".
    chains, has_lines = {}, False
    if sites:
        out = run("addr2line", "-f", "-C", "-i", "-a", "-e", binary, *[hex(s) for s, _ in sites])
        record = []
        for line in out.splitlines() + ["0x0"]:
            if line.startswith("0x"):
                if record:
                    chains[record[0]] = record[1::2]
                    has_lines |= any(not loc.startswith("??") for loc in record[2::2])
                record = [int(line, 16)]
            else:
                record.append(line)
    starts = [a for a, _ in syms]
    found = {}
    for site, target in sites:
        name = target.rsplit("::", 1)[1]
        enclosing = syms[bisect.bisect_right(starts, site) - 1][1]
        chain = chains.get(site, []) if has_lines else []
        origin = next((f for f in chain if not STD.match(f)), enclosing)
        if OURS.match(origin):
            bad = not origin.lstrip("<").startswith(ALLOWED_CALLERS)
        else:
            bad = bool(STD.match(origin)) and name not in SHIM_INTRINSICS
        if bad:
            found.setdefault((origin, enclosing), set()).add(name)
    names = sorted({n.rsplit("::", 1)[1] for n in intrinsics.values()})
    print(f"{len(sites)} calls to {len(intrinsics)} out-of-line intrinsics in {binary}: {names}")
    if not has_lines:
        print("  (no line tables: each call traced to its enclosing symbol only)")
    for (origin, enclosing), called in sorted(found.items()):
        print(f"  {origin} (inlined into {enclosing}) calls {', '.join(sorted(called))}")
    if found:
        print("intrinsics called out of line from workspace code: a closure with intrinsics in "
              "a helper without #[target_feature]? write its loop out")
        sys.exit(1)


if __name__ == "__main__":
    main()
