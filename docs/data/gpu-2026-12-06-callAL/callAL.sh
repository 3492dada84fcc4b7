#!/usr/bin/env bash
# Device call AL: (1) every CUDA test binary on main 893a61c (scripts/cuda-tests.sh; host
# refactor 6616b80 and the wide kernels b82dcb9 had not run the compile/conformance/graphs/tp
# binaries); (2) branch wip/mmq-16-place 2cf5f98: quant_types and the ::cuda model tests, then
# pp512 of the 3 dense + 2 MoE file with 16-place expert tiles against 32 (GLINT_CUDA_MMQ16),
# one binary, alternating.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT device-bin16/COMMIT; } >> $R/timeline.txt; t untar
mkdir -p $R/tests-main
OUT=$R/tests-main B bash scripts/cuda-tests.sh > /dev/null 2>&1; t "tests-main rc=$?"
G=device-bin16/glint
B $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
mkdir -p $R/tests16
B device-bin16/tests/glint-cuda--quant_types > $R/tests16/quant_types.log 2>&1; t "quant_types rc=$?"
for m in batched_step forward_fixture; do
  B device-bin16/tests/glm5-model--$m ::cuda > $R/tests16/$m.log 2>&1; t "$m rc=$?"
done
{ for i in 1 2; do for p in 0 1; do
    echo "== mmq16=$p"; GLINT_CUDA_MMQ16=$p B $G bench -m /tmp/s32.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 2>&1 | grep -E "pp512"
  done; done; } > $R/ab.txt 2>&1; t ab
