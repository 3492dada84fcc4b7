#!/usr/bin/env bash
# Device call AJ: (1) pp512 of the 3 dense + 2 MoE file, b28e42b (raw fragments, int8 min MMAs) against
# e3da8a0 (one f16 MMA a step for the mins, f16 bsums), alternating binaries; (2) every CUDA test binary at
# e3da8a0; (3) per-kernel durations of one 512-token prefill step (1 + 1 file). Output in
# $OUT/all.tar.xz.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-560}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 10 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; mkdir -p /tmp/old && tar -xJf device-pack/bin-b28e42b.tar.xz -C /tmp/old
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT /tmp/old/device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint; O=/tmp/old/device-bin/glint
$G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
{ for i in 1 2; do for n in old new; do
    b=$G; [ $n = old ] && b=$O
    echo "== $n"; GLINT_KERNEL_CACHE=/tmp/kc-$n B $b bench -m /tmp/s32.gguf --device cuda -p 512 -n 16 -d 0 -b 1 -r 3 2>&1 | grep -E "pp512|tg16"
  done; done; } > $R/ab.txt 2>&1; t ab
OUT=$R/tests GLINT_KERNEL_CACHE=/tmp/kc-new B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
PROFILE_PROMPT=512 NCU_CACHE=none OUT=$R/profile GLINT_KERNEL_CACHE=/tmp/kc-new B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile rc=$?"
