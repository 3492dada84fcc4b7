#!/usr/bin/env bash
# Device call AD: glint and llama.cpp side by side in one run (the GPU-speed issue's point 4),
# glint at c86b265 with bf16 latent + fp8 index caches; llama.cpp (llama-cpp-python 0.3.36's
# vendored copy, CUDA, sm_90a) built while glint runs. Then glint's batched decode.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $OUT/timeline.txt; }
LIMIT=${1:-575}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; t untar
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT; nproc; } >> $OUT/timeline.txt
lsrc=/tmp/llama-src; mkdir -p $lsrc && tar -xJf device-pack/llama.cpp.tar.xz -C $lsrc
( cd $lsrc/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF && cmake --build build -j 12 --target llama-bench
) > $OUT/llama-build.log 2>&1 &
build=$!
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
for m in 2 4; do
  B $G bench -m /tmp/s3$m.gguf --device cuda -p 512 -n 64 -d 0,16384,65536 -b 1 -r 2 $BF -o json \
    > $OUT/glint-3-$m.json 2> $OUT/glint-3-$m.err; t "glint 3+$m rc=$?"
done
wait $build; t "llama.cpp build rc=$?"
LB=$lsrc/llama.cpp/build/bin/llama-bench
for m in 2 4; do
  B $LB -m /tmp/s3$m.gguf -ngl 99 -p 512 -n 64 -d 0,16384 -r 2 -o json > $OUT/llama-3-$m.json 2> $OUT/llama-3-$m.err
  t "llama-bench 3+$m rc=$?"
done
for m in 2 4; do
  B $LB -m /tmp/s3$m.gguf -ngl 99 -p 0 -n 64 -d 65536 -r 1 -o json > $OUT/llama-3-$m-d64k.json 2> $OUT/llama-3-$m-d64k.err
  t "llama-bench 3+$m 64k rc=$?"
done
for m in 2 4; do
  B $G bench -m /tmp/s3$m.gguf --device cuda -p 0 -n 64 -d 0 -b 8,64,256 -r 1 > $OUT/glint-batch-3-$m.md 2>&1
  t "glint batch 3+$m rc=$?"
done
