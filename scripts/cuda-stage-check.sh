#!/usr/bin/env bash
# Runs on a GPU machine, from a checkout holding device-bin/ (scripts/cuda-build.sh) and
# benches/cuda/src/ (the kernel_source example): what the weight stages and the indexer's tile
# kernel need before their defaults are trusted or changed (docs/cuda.md, "Weight stages").
# First the CUDA tests that run products and the indexer, with the defaults and again with
# every stage on (GLINT_CUDA_MV_STAGE=all, GLINT_CUDA_MMID_STAGE=1: the sums must keep their
# bits); then the kernel bench with and without stages (and gate + up as one launch); then tg64
# on the 3 dense + 4 MoE synthetic file without pair launches and gating quantizers
# (GLINT_CUDA_PAIR=0 GLINT_CUDA_GLU=0), with the
# defaults and with the expert stages, and at 16k with the indexer kernels side by
# side (GLINT_CUDA_IDX_TILES=0 the general scores kernel, GLINT_CUDA_TOPK=rows the
# one-histogram top-k). Logs and tables under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-stage-check}
mkdir -p "$out"
export GLINT_REPO=$PWD NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels} RUST_LOG=warn
G=device-bin/glint
f=/tmp/s34.gguf
[ -e "$f" ] || $G synth "$f" --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 &
(cd benches/cuda && nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -DBENCH_QUANT \
  -DKERNEL_SOURCE='"src/quant.cu"' -o /tmp/kb_stage kernel_bench.cu > "$out/kb-build.txt" 2>&1) &
status=0
tests=(glint-cuda--compile glint-cuda--quant_types glint-cuda--conformance glint-cuda--graphs
  glm5-model--batched_step glm5-model--forward_fixture glm5-model--llamacpp_quantized glm5-model--tp
  glm5-model--indexer_topk)
for env in "" "GLINT_CUDA_MV_STAGE=all GLINT_CUDA_MMID_STAGE=1"; do
  for t in "${tests[@]}"; do
    [ -n "$env" ] && [ "$t" = glint-cuda--compile ] && continue
    filter=(); case "$t" in glm5-model--*) filter=(::cuda) ;; esac
    log="$out/$t${env:+-staged}.log"
    env $env timeout 300 "device-bin/tests/$t" "${filter[@]}" > "$log" 2>&1
    rc=$?
    echo "${env:-defaults} $t rc=$rc $(grep -E '^test result' "$log" | tail -1)" | tee -a "$out/tests.txt"
    [ $rc -eq 0 ] || status=1
  done
done
wait
{ for st in 0 1; do
    echo "== KB_STAGE=$st KB_MMID_STAGE=$st"
    KB_STAGE=$st KB_MMID_STAGE=$st KB_PAIR=$st KB_TYPES=q4_K,q5_K,q6_K,q8_0 KB_SHAPES=exp,attn_output,ffn_gate,output \
      KB_KS0=1 timeout 120 /tmp/kb_stage
  done; } > "$out/kb.txt" 2>&1
{ for env in "GLINT_CUDA_PAIR=0 GLINT_CUDA_GLU=0" "" "GLINT_CUDA_MMID_STAGE=1" "GLINT_CUDA_PAIR=0 GLINT_CUDA_GLU=0" "" "GLINT_CUDA_MMID_STAGE=1"; do
    echo "== ${env:-defaults}"
    env $env $G bench -m "$f" --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 | grep -E "probe|tg64"
  done
  for env in "GLINT_CUDA_IDX_TILES=0 GLINT_CUDA_TOPK=rows" "" "GLINT_CUDA_TOPK=rows" "" "GLINT_CUDA_IDX_TILES=0"; do
    echo "== 16k ${env:-defaults}"
    env $env $G bench -m "$f" --device cuda -p 0 -n 64 -d 16384 -b 1 -r 1 | grep -E "probe|tg64"
  done; } > "$out/bench.txt" 2>&1
cat "$out/tests.txt" "$out/bench.txt"
exit $status
