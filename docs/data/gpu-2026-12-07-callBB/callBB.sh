#!/usr/bin/env bash
# Ran 2026-12-07 05:12 UTC on an H100 80GB HBM3 (written the session before, when no machine
# could be started); results beside this file. Run from the repository root with device-pack/
# carried (bin.tar.xz from scripts/cuda-build.sh, llama.cpp.tar.xz from scripts/llamacpp-pack.sh).
# Device call BB, at the head of 2026-12-07 (COMMIT in timeline.txt): (1) every CUDA test binary
# (scripts/cuda-tests.sh); (2) glint and llama.cpp (built meanwhile from the PyPI
# llama-cpp-python 0.3.36 sdist) side by side on the 3 dense + 4 MoE and 3 + 2 files: pp512 on
# glint's default and cuBLAS prompt paths, tg64 at depth 0 and 16384, glint before and after
# llama.cpp so a drift of the GPU shows; (3) a decode step's CUPTI timeline at depth 16384.
source scripts/device-call-lib.sh "${1:-570}"
llama_build &
build=$!
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
pp() { for m in 34 32; do for g in 0 128; do
    echo "== s$m gemm_min=$g"; GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done; }
{ echo "# round 1"; pp
  for m in 34 32; do echo "== s$m tg64"; B $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d 0,16384 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"; done
} > $R/glint.txt 2>&1; t glint1
wait $build; t "llama.cpp build rc=$?"
for m in 34 32; do
  B $LB -m /tmp/s$m.gguf -ngl 99 -p 512 -n 64 -d 0,16384 -r 3 -o md > $R/llama-$m.md 2> $R/llama-$m.err; t "llama-bench s$m rc=$?"
done
{ echo "# round 2"; pp; } >> $R/glint.txt 2>&1; t glint2
for m in 34 32; do B $LB -m /tmp/s$m.gguf -ngl 99 -p 512 -n 0 -r 3 -o md >> $R/llama-$m.md 2>> $R/llama-$m.err; done; t llama2
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/timeline-d16k DEPTH=16384 STEPS=32 PROFILE_ARGS="$BF" B bash scripts/cuda-timeline.sh > /dev/null 2>&1; t "timeline d16k rc=$?"
