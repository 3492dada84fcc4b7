#!/usr/bin/env bash
# Device call BD (call BB cut to what ~5 minutes of device time hold: no GPU machine could be
# started for BB through the session, and each failed start cost 1-3 minutes of the budget):
# (1) every CUDA test binary at the session's head (scripts/cuda-tests.sh), (2) glint pp512 on
# both prompt paths and tg64 on the 3 dense + 4 MoE file, bf16 + fp8 caches.
source scripts/device-call-lib.sh "${1:-300}"
G=device-bin/glint
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
wait $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
{ for g in 0 128; do echo "== s34 gemm_min=$g"; GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"; done
  echo "== s34 tg64"; B $G bench -m /tmp/s34.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"
} > $R/glint.txt 2>&1; t glint
