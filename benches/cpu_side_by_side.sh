#!/usr/bin/env bash
# glint and llama.cpp on one GGUF on this CPU, alternating: prefill of P prompt tokens and
# greedy decode of N tokens, 2 threads, F32 KV caches in both (docs/performance.md, "CPU
# prefill: multi-token dot kernels"). llama.cpp is PyPI llama-cpp-python==0.3.36 in LLVENV
# (fixtures/make_llamacpp_refs.py builds that venv); glint is target/release/glint.
#   bash benches/cpu_side_by_side.sh MODEL.gguf        # P=64 N=8 R=2 KERNELS="avx2 avx512"
set -euo pipefail
cd "$(dirname "$0")/.."
M=$1 P=${P:-64} N=${N:-8} R=${R:-2}
LLVENV=${LLVENV:-/tmp/llvenv}
KERNELS=${KERNELS:-avx2 avx512}
ids=$(mktemp)
trap 'rm -f "$ids"' EXIT
# Token ids 1000.. (any valid ids: both engines run the same ones).
python3 -c "print(','.join(str(1000 + i) for i in range($P)))" > "$ids"
for r in $(seq 1 "$R"); do
  for k in $KERNELS; do
    echo "run $r, glint GLINT_CPU_KERNEL=$k:"
    GLINT_CPU_KERNEL=$k RAYON_NUM_THREADS=2 target/release/glint bench -m "$M" -p "$P" -n "$N" -r "${GLINT_REPS:-3}" 2>/dev/null \
      | grep -E "^\| (pp|tg)"
  done
  echo "run $r, llama.cpp:"
  "$LLVENV/bin/python" benches/llamacpp_tiny.py "$M" "$ids" "$N"
done
