#!/usr/bin/env bash
# Times glint's decode kernels alone on GLM-5's shapes (benches/cuda/kernel_bench.cu).
# Here (no GPU):   cargo run -p glint-cuda --example kernel_source -- benches/cuda/src
#                  bash scripts/kernel-bench-compile.sh   (nvcc from PyPI: the harness compiles)
# There (GPU):     bash benches/cuda/kernel_bench.sh [quant|mla|indexer|mla-ablate]...   (nvcc needed)
# mla-ablate also times the attention kernel with its score dot or its P·V update left out, to
# see which phase its time goes to. KB_TYPES / KB_KS narrow the quant types and sweep the
# warps per row group, KB_SHAPES=ffn_gate,exp keeps the shapes naming a word, KB_KEYS=4,2048 the
# attention key counts (kernel_bench.cu); KB_NVCC_FLAGS adds defines, e.g. -DMV_UNROLL=2 or
# -DTOPK_AGG=1 (how top_k_rows_s counts a warp's keys);
# KB_STAGE=1 times every one-token product with its shared-memory weight stages (matvec1s_*),
# KB_MMID_STAGE=1 adds the expert products with two stages (mmids_*, one warp a row group: ks 1).
set -euo pipefail
cd "$(dirname "$0")"
[ -e src/quant.cu ] || { echo "run the kernel_source example first (see above)" >&2; exit 2; }
arch=${CUDA_ARCH:-sm_90a}
# The SM and memory clocks while the kernels run (a latency-bound kernel's time scales with
# the SM clock): sampled every 100 ms over the whole script (its nvcc compiles too, when the
# GPU idles), summarised at the end.
clocks=/tmp/kernel_bench_clocks.csv
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader,nounits -lms 100 > "$clocks" 2>/dev/null &
smi=$!
clock_summary() {
  kill "$smi" 2>/dev/null
  awk -F', ' 'NF == 2 { n++; s += $1; if ($1 > mx) mx = $1; if (mn == "" || $1 < mn) mn = $1; m = $2 }
    END { if (n) printf "SM clock during the run: %d..%d MHz (mean %d), memory %d MHz, %d samples\n", mn, mx, s / n, m, n }' "$clocks"
}
trap clock_summary EXIT
build() {  # family, source file, binary
  # shellcheck disable=SC2086  # KB_NVCC_FLAGS: extra defines (kernel variants), word-split on purpose
  nvcc -O3 -std=c++17 -arch="$arch" -diag-suppress 177 ${KB_NVCC_FLAGS:-} -D"BENCH_$(echo "$1" | tr a-z A-Z)" \
    -DKERNEL_SOURCE="\"$2\"" -o "$3" kernel_bench.cu
}
for what in "${@:-quant mla}"; do
  for w in $what; do
    case "$w" in
      quant | mla | indexer) build "$w" "src/$w.cu" "/tmp/kb_$w" && "/tmp/kb_$w" ;;
      mla-ablate)
        sed 's/for (int i = part; i < d4; i += 16) {/for (int i = part; i < 0; i += 16) {/' src/mla.cu > src/mla_noscore.cu
        sed 's/for (int kk = 0; kk < nt; kk++) a = fmaf(pg\[kk\], ks\[kk \* st + j\], a);//' src/mla.cu > src/mla_nopv.cu
        for v in noscore nopv; do
          echo "-- mla without its ${v#no}"
          build mla "src/mla_$v.cu" "/tmp/kb_mla_$v" && "/tmp/kb_mla_$v" | tail -n +2
        done ;;
      *) echo "unknown: $w" >&2; exit 2 ;;
    esac
  done
done
