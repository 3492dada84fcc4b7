#!/usr/bin/env bash
# Device call AZ (ordered so a short call keeps the A/B): mmq_k4 / mmq_q6k_wide copying a step's weight blocks as consecutive 16-byte
# pieces (c71dd2f) against the previous binary (a4f25da, device-bin/glint-a4f25da). (1)
# quant_types and batched_step ::cuda on c71dd2f; (2) pp512 of the 3 + 4 file, both binaries
# alternating, both product paths, two rounds; (3) the 512-token prefill profile of both;
# (4) scripts/cuda-timeline.sh (CUPTI) on a decode step, depth 0.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; } >> $R/timeline.txt 2>&1; t untar
G=device-bin/glint; O=device-bin/glint-a4f25da
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
mkdir -p $R/tests
B device-bin/tests/glm5-model--batched_step cuda > $R/tests/batched_step.log 2>&1; t "batched_step rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
wait $s2; t synth
{ for r in 1 2; do [ $(left) -gt 60 ] || break; for g in 128 0; do for b in new old; do
    bin=$G; [ $b = old ] && bin=$O
    echo "== s34 gemm_min=$g binary=$b"; GLINT_CUDA_GEMM_MIN=$g B $bin bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; done; } > $R/ab.txt 2>&1; t ab
rm -f /tmp/s34.gguf
B device-bin/tests/glint-cuda--quant_types > $R/tests/quant_types.log 2>&1; t "quant_types rc=$?"
OUT=$R/timeline-d0 DEPTH=0 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d0 rc=$?"
OUT=$R/profile-new PROFILE_PROMPT=512 PROFILE_ARGS="$BF" NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile new rc=$?"
mv device-bin/glint device-bin/glint-new && cp $O device-bin/glint
OUT=$R/profile-old PROFILE_PROMPT=512 PROFILE_ARGS="$BF" NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile old rc=$?"
