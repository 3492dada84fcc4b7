#!/usr/bin/env bash
# Device call AK: (1) pp512 of the 3 dense + 2 MoE file with the wide Q4_K/Q5_K tiles (128
# rows) against the 64-row ones (GLINT_CUDA_MMQ_WIDE=0), one binary, alternating; (2) the
# tests that run the wide kernels: quant_types (its 70-row shapes and grouped products pass
# 64 rows) and the model tests' ::cuda variants of batched_step and forward_fixture.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-270}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint
$G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
{ for i in 1 2; do for wide in 0 1; do
    echo "== wide=$wide"; GLINT_CUDA_MMQ_WIDE=$wide B $G bench -m /tmp/s32.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 2>&1 | grep -E "pp512"
  done; done; } > $R/ab.txt 2>&1; t ab
mkdir -p $R/tests
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
for m in batched_step forward_fixture; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
