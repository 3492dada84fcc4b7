#!/usr/bin/env bash
# Device call AR: (1) every CUDA test binary on the head (3 buffers by default, Q6_K on the
# wide tiles) but glint-cuda--compile, whose NVRTC 13.0 build of every kernel for sm_80 and
# sm_90a ran on the CPU machine (the same compiler); (2) pp512 of the 3 + 4 and 3 + 2 files,
# bf16 caches + fp8 indexer keys, the default path and the cuBLAS path (GEMM_MIN=128), each
# also with the 64-key attention tiles on every list (GLINT_CUDA_MLA_TILE64=all);
# (3) llama.cpp (built meanwhile) on the same files.
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
rm -f device-bin/tests/glint-cuda--compile
OUT=$R/tests-main B bash scripts/cuda-tests.sh > /dev/null 2>&1; t "tests rc=$?"
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
ab() { # file gemm_min tile64
  echo "== s$1 gemm_min=$2 tile64=$3"
  GLINT_CUDA_MLA_TILE64=$3 GLINT_CUDA_GEMM_MIN=$2 B $G bench -m /tmp/s$1.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
}
{ for m in 34 32 34; do ab $m 0 1024; ab $m 128 1024; ab $m 0 all; ab $m 128 all; done; } > $R/ab.txt 2>&1; t ab
wait $build; t "llama.cpp build rc=$?"
LB=$lsrc/llama.cpp/build/bin/llama-bench
for m in 34 32; do
  B $LB -m /tmp/s$m.gguf -ngl 99 -p 512 -n 0 -r 3 -o md > $R/llama-$m.md 2> $R/llama-$m.err; t "llama-bench s$m rc=$?"
done
