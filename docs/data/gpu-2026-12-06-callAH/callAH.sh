#!/usr/bin/env bash
# Device call AH: Nsight Compute stall samples by source line and SASS instruction for the
# prefill products (scripts/cuda-stalls.sh), 512-token prefill on the 1 + 1 file.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz --exclude='*.ncu-rep*' -C $R .; }
LIMIT=${1:-560}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 10 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt; t untar
OUT=$R/stalls B bash scripts/cuda-stalls.sh; t "stalls rc=$?"
ls -la $R/stalls >> $R/timeline.txt; t done
r=$R/stalls/stalls.ncu-rep.xz; [ -f $r ] && [ $(stat -c %s $r) -lt 15000000 ] && cp $r $OUT/
ls -la $OUT
