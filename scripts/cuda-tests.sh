#!/usr/bin/env bash
# Runs on a GPU machine, from a checkout holding device-bin/ (scripts/cuda-build.sh): every
# CUDA test there, one log per binary (packed into $OUT/logs.tar at the end; OUT defaults to
# /tmp/cuda-tests), and a summary of GPU, driver, commit and tests passed — the summary
# docs/cuda.md records.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-tests}
mkdir -p "$out"
export GLINT_REPO=$PWD NCCL_NVLS_ENABLE=0
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels}
summary="$out/summary.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  echo "commit: $(cat device-bin/COMMIT 2>/dev/null || echo unknown)"
} > "$summary"
status=0
for t in device-bin/tests/*; do
  name=$(basename "$t")
  # Model test binaries hold both variants: run the ::cuda ones (the CPU ones ran in CI).
  filter=()
  case "$name" in glm5-model--*) filter=(::cuda) ;; esac
  start=$(date +%s.%N)
  "$t" "${filter[@]}" > "$out/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  line=$(grep -E "^test result" "$out/$name.log" | tail -1)
  printf '%-44s rc=%d %6.1fs  %s\n' "$name" "$rc" "$secs" "$line" >> "$summary"
  [ $rc -eq 0 ] || status=1
done
# The device returns at most 8 files of a run's $OUT: the per-binary logs go into one tar.
(cd "$out" && tar -cf logs.tar ./*.log && rm -f ./*.log)
cat "$summary"
exit $status
