#!/usr/bin/env bash
# Device call AG: mmq_k4 with three weight stages in dynamic shared memory (HEAD) against
# 062e456 (one stage ahead): pp512 and batched decode at 64 sequences on the 3 dense + 2 MoE
# file, alternating; then quant_types and batched_step on CUDA. Output in $OUT/all.tar.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cf $OUT/all.tar -C $R .; }
LIMIT=${1:-250}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; mkdir -p /tmp/old && tar -xJf device-pack/bin-062e456.tar.xz -C /tmp/old
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; cat device-bin/COMMIT /tmp/old/device-bin/COMMIT; } >> $R/timeline.txt; t untar
G=device-bin/glint; O=/tmp/old/device-bin/glint
$G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
{ for n in old new old new; do
    b=$G; [ $n = old ] && b=$O
    echo "== $n"; GLINT_KERNEL_CACHE=/tmp/kc-$n B $b bench -m /tmp/s32.gguf --device cuda -p 512 -n 16 -d 0 -b 1,64 -r 2 2>&1 | grep -E "pp512|tg16|rror"
    t "ab $n"
  done; } > $R/ab.txt 2>&1
mkdir -p $R/tests
for tb in glint-cuda--quant_types glm5-model--batched_step; do
  f=(); case $tb in glm5-model--*) f=(::cuda) ;; esac
  GLINT_KERNEL_CACHE=/tmp/kc-new B device-bin/tests/$tb "${f[@]}" > $R/tests/$tb.log 2>&1
  echo "$tb rc=$? $(grep -E '^test result' $R/tests/$tb.log | tail -1)" >> $R/tests.txt; t "$tb"
done
