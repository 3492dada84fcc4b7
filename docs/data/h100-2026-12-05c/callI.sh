#!/usr/bin/env bash
# Device call I: the staged kernels as their own matvec1s_* (head-sized products only): glint-cuda's tests.
export GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
tar -xJf device-pack/bin.tar.xz; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt; t untar
for n in compile quant_types conformance graphs; do
  GLINT_REPO=$PWD timeout 120 device-bin/tests/glint-cuda--$n > $OUT/$n.log 2>&1; echo "glint-cuda--$n rc=$? $(grep '^test result' $OUT/$n.log | tail -1)" >> $OUT/ct.txt; t $n
done
