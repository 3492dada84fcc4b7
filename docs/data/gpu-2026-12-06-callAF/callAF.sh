#!/usr/bin/env bash
# Device call AF: 2ca6310 (the MMQ kernels skip a tile's empty 8-token groups) against 062e456:
# pp512 and batched decode at 64 and 256 sequences on the 3 dense + 2 MoE file, alternating
# binaries; then the CUDA tests that run the MMQ kernels (quant_types: every weight type's
# batched and grouped products against the CPU backend and the one-token bits, n = 9 and 40
# and grouped tiles of every fill), conformance, graphs and the model tests' ::cuda variants.
# Every output goes into $OUT/all.tar (the device returns at most 8 files).
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cf $OUT/all.tar -C $R .; }
LIMIT=${1:-420}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; mkdir -p /tmp/old && tar -xJf device-pack/bin-062e456.tar.xz -C /tmp/old
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT /tmp/old/device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint; O=/tmp/old/device-bin/glint
$G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
{ for i in 1 2; do for n in old new; do
    b=$G; [ $n = old ] && b=$O
    echo "== $n"; GLINT_KERNEL_CACHE=/tmp/kc-$n B $b bench -m /tmp/s32.gguf --device cuda -p 512 -n 32 -d 0 -b 1,64,256 -r 2 2>&1 | grep -E "pp512|tg32"
  done; done; } > $R/ab.txt 2>&1; t ab
mkdir -p $R/tests
for tb in glint-cuda--quant_types glint-cuda--conformance glint-cuda--graphs glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized; do
  f=(); case $tb in glm5-model--*) f=(::cuda) ;; esac
  GLINT_KERNEL_CACHE=/tmp/kc-new B device-bin/tests/$tb "${f[@]}" > $R/tests/$tb.log 2>&1
  echo "$tb rc=$? $(grep -E '^test result' $R/tests/$tb.log | tail -1)" >> $R/tests.txt; t "$tb"
done
