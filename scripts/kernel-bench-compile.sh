#!/usr/bin/env bash
# Compiles the kernel bench harness (benches/cuda/kernel_bench.cu) with nvcc on a machine
# without a GPU, for every family it times, so a device call never finds it broken. nvcc,
# cicc, the CRT and CCCL headers and the runtime headers come from PyPI's CUDA 13.0 wheels
# (pinned), installed once into target/nvcc-13.0; object files only (nothing is linked).
#   bash scripts/kernel-bench-compile.sh        (the kernel_source example runs first)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$PWD/target/nvcc-13.0"
if [ ! -x "$dir/nvidia/cu13/bin/nvcc" ]; then
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
fi
chmod +x "$dir"/nvidia/cu13/bin/* "$dir"/nvidia/cu13/nvvm/bin/* 2>/dev/null || true
cargo run -q --release -p glint-cuda --example kernel_source -- benches/cuda/src > /dev/null
cd benches/cuda
out=$(mktemp -d)
for build in "QUANT quant" "MLA mla" "INDEXER indexer" "INDEXER indexer -DTOPK_AGG=1"; do
  # shellcheck disable=SC2086  # family, source and an optional define, split on purpose
  set -- $build
  # shellcheck disable=SC2086
  "$dir/nvidia/cu13/bin/nvcc" -c -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 ${3:-} -DBENCH_$1 \
    -DKERNEL_SOURCE="\"src/$2.cu\"" -o "$out/kb_$2.o" kernel_bench.cu
  echo "kernel_bench ($2${3:+ $3}): compiled"
done
rm -rf "$out"
