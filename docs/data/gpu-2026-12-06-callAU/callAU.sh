#!/usr/bin/env bash
# Device call AU, on b9cd6ca (the fit kernels by default): (1) batched_step and forward_fixture
# ::cuda, which call AT left unrun; (2) pp512 of the 3 + 4 and 3 + 2 files, bf16 caches + fp8
# indexer keys, the default path and the cuBLAS path (GEMM_MIN=128); (3) llama.cpp (built
# meanwhile) pp512 on the same files; (4) tg64 anchor; (5) a decode step's per-kernel profile.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cJf $OUT/all.tar.xz -C $R .; }
LIMIT=${1:-570}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 10 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; nproc; } >> $R/timeline.txt; t untar
lsrc=/tmp/llama-src; mkdir -p $lsrc && tar -xJf device-pack/llama.cpp.tar.xz -C $lsrc
( cd $lsrc/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF && cmake --build build -j 8 --target llama-bench
) > $R/llama-build.log 2>&1 &
build=$!
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
mkdir -p $R/tests
for m in batched_step forward_fixture; do
  B device-bin/tests/glm5-model--$m ::cuda > $R/tests/$m.log 2>&1; t "$m rc=$?"
done
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
{ for m in 34 32 34; do for g in 0 128; do
    echo "== s$m gemm_min=$g"; GLINT_CUDA_GEMM_MIN=$g B $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
  done; done
  for m in 34 32 34 32; do echo "== s$m tg64"; B $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"; done
} > $R/bench.txt 2>&1; t bench
wait $build; t "llama.cpp build rc=$?"
LB=$lsrc/llama.cpp/build/bin/llama-bench
for m in 34 32; do
  B $LB -m /tmp/s$m.gguf -ngl 99 -p 512 -n 0 -r 3 -o md > $R/llama-$m.md 2> $R/llama-$m.err; t "llama-bench s$m rc=$?"
done
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/profile NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile rc=$?"
