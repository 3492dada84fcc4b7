#!/usr/bin/env bash
# Device call AY: (1) quant_types (every type against the CPU, and the new short per-head rows
# test for mmid_short); (2) scripts/cuda-timeline.sh (new): decode steps as they run, graph
# nodes traced by Nsight Systems, bf16 + fp8 caches, 1 dense + 1 MoE file: depth 0 with
# mmid_short on and off (GLINT_CUDA_MMID_SHORT=0), depth 16,384; (3) Nsight Compute's full set
# on the three expert products (mmq_q4_k_fit) of a 512-token prefill step.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; which nsys ncu; } >> $R/timeline.txt 2>&1; t untar
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
GLINT_CUDA_MMID_SHORT=0 OUT=$R/timeline-d0-short0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 short=0 rc=$?"
OUT=$R/timeline-d16384 DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16384 rc=$?"
{ for r in 1 2; do for s in 1 0; do echo "== short=$s"; GLINT_CUDA_MMID_SHORT=$s B device-bin/glint bench -m /tmp/p_1_1.gguf --device cuda -p 16 -n 64 -r 3 $BF 2>&1 | grep -E "tg64|rror|panic"; done; done; } > $R/ab.txt 2>&1; t ab
OUT=$R/stalls-fit KERNELS='mmq_q4_k_fit' COUNT=3 PROFILE_ARGS="$BF" B bash scripts/cuda-stalls.sh > /dev/null 2>&1; t "stalls rc=$?"
rm -f $R/stalls-fit/stalls.ncu-rep; t done
