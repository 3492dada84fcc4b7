#!/usr/bin/env bash
# Runs on a GPU machine, from a checkout holding device-bin/ (scripts/cuda-build.sh): for each
# GGML type named, a 3 dense + 2 MoE file with GLM-5's shapes and every quantizable weight of
# that type (`glint synth`), benchmarked with the per-unit kernels (GLINT_CUDA_MMQ=0) and the
# tensor-core ones in the same binary — docs/performance.md's "Tensor-core products" tables.
#   bash scripts/cuda-mmq-bench.sh q4_0 iq4_nl mxfp4
set -uo pipefail
cd "$(dirname "$0")/.."
export GLINT_REPO=$PWD NCCL_NVLS_ENABLE=0
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels}
file=${MMQ_BENCH_FILE:-/tmp/glint-mmq-bench.gguf}
for ty in "$@"; do
  device-bin/glint synth "$file" --dense 3 --moe 2 --experts 256 --quant "$ty" --seed 1 > /dev/null || exit 1
  echo "== $ty ($(du -m "$file" | cut -f1) MB), commit $(cat device-bin/COMMIT 2>/dev/null)"
  for mmq in 0 1; do
    echo "GLINT_CUDA_MMQ=$mmq"
    GLINT_CUDA_MMQ=$mmq device-bin/glint bench -m "$file" --device cuda -p 512 -n 32 -b 1,8 -r 2 \
      | grep -E "^\| (pp|tg)"
  done
  rm -f "$file"
done
