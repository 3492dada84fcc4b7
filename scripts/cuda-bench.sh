#!/usr/bin/env bash
# Decode and prefill speed on GLM-5's real shapes (docs/performance.md), the way the GPU-speed
# issue's anchor is taken: `glint bench --device cuda` on synthetic 3 dense + 2 MoE and 3 dense +
# 4 MoE files (256 experts, Q4_K_M-like); one MoE layer = (step(4 MoE) − step(2 MoE)) / 2.
# Runs on a GPU machine from a checkout holding device-bin/ (scripts/cuda-build.sh); the files
# go to /tmp (about 40 GB), the tables to $OUT/bench-*.md. DEPTHS (default "4096") are the
# contexts of the single-sequence decode runs besides depth 0, BATCHES (default "1,8") the
# sequence counts at depth 0, CACHE extra `glint bench` flags for every run (for instance
# "--cache-type bf16 --cache-type-index fp8", the caches the context targets were met with).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-bench}
mkdir -p "$out"
G=device-bin/glint
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels} RUST_LOG=warn
for moe in 2 4; do
  f=/tmp/s3$moe.gguf
  [ -e "$f" ] || $G synth "$f" --dense 3 --moe $moe --experts 256 --quant q4_k_m --seed 1 >/dev/null
  {
    # shellcheck disable=SC2086 # CACHE is a list of flags
    $G bench -m "$f" --device cuda -p 512 -n 64 -d 0 -b "${BATCHES:-1,8}" -r 3 ${CACHE:-}
    for d in ${DEPTHS:-4096}; do
      # shellcheck disable=SC2086
      $G bench -m "$f" --device cuda -p 512 -n 64 -d "$d" -b 1 -r 2 ${CACHE:-}
    done
  } > "$out/bench-3-$moe.md" 2>&1
done
python3 - "$out" <<'PY'
import re, sys, pathlib
out = pathlib.Path(sys.argv[1])
def tg(moe):
    rows = {}
    for line in (out / f"bench-3-{moe}.md").read_text().splitlines():
        c = [x.strip() for x in line.strip("|").split("|")]
        if len(c) >= 4 and c[0].startswith("tg"):
            rows[(int(c[1]), int(c[2]))] = float(c[3].split()[0])
    return rows
a, b = tg(2), tg(4)
for key in sorted(a):
    if key in b:
        d, s = key
        per_layer = (1e3 / b[key] - 1e3 / a[key]) / 2
        base = (1e3 / b[(0, s)] - 1e3 / a[(0, s)]) / 2 if (0, s) in a and (0, s) in b else None
        vs = f" ({per_layer / base:.2f}x depth 0)" if base and d else ""
        print(f"depth {d}, {s} seqs: step {1e3/a[key]:.3f} ms (2 MoE), {1e3/b[key]:.3f} ms (4 MoE): one MoE layer {per_layer:.3f} ms{vs}")
PY
