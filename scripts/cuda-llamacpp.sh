#!/usr/bin/env bash
# glint and llama.cpp side by side on one GPU, in one run (the GPU-speed issue's table and
# plot): llama.cpp CUDA is built from device-pack/llama.cpp.tar.xz (scripts/llamacpp-pack.sh)
# while glint writes the synthetic 3 dense + 2 and 3 dense + 4 MoE files (256 experts,
# Q4_K_M-like) and benchmarks them; then llama-bench runs the same tests on the same files.
# JSON of both engines goes to $OUT/side-by-side.tar; scripts/side-by-side.py makes the table
# and the plot from its contents.
# Runs on a GPU machine from a checkout holding device-bin/ (scripts/cuda-build.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-llamacpp}
mkdir -p "$out"
G=$PWD/device-bin/glint
export GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels} RUST_LOG=${RUST_LOG:-warn,glint_cuda::compile=info}
export NCCL_NVLS_ENABLE=0
DEPTHS=${DEPTHS:-0,4096,16384}
REPS=${REPS:-2}
log() { echo "$(date -u +%T) $*" | tee -a "$out/timeline.txt"; }

log "llama.cpp build starts"
lsrc=/tmp/llama-src
rm -rf "$lsrc" && mkdir -p "$lsrc" && tar -xJf device-pack/llama.cpp.tar.xz -C "$lsrc"
(
  cd "$lsrc/llama.cpp" &&
  cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF &&
  cmake --build build -j "${BUILD_JOBS:-12}" --target llama-bench
) > "$out/llama-build.log" 2>&1 &
build=$!

for moe in 2 4; do
  f=/tmp/s3$moe.gguf
  [ -e "$f" ] || $G synth "$f" --dense 3 --moe $moe --experts 256 --quant q4_k_m --seed 1 >/dev/null
  log "synth 3+$moe done"
done
for moe in 2 4; do
  $G bench -m /tmp/s3$moe.gguf --device cuda -p 512 -n 64 -d "$DEPTHS" -b 1 -r "$REPS" -o json \
    > "$out/glint-3-$moe.json" 2> "$out/glint-3-$moe.err"
  log "glint bench 3+$moe rc=$?"
done

wait $build
log "llama.cpp build rc=$?"
tail -5 "$out/llama-build.log"
LB=$lsrc/llama.cpp/build/bin/llama-bench
for moe in 2 4; do
  $LB -m /tmp/s3$moe.gguf -ngl 99 -p 512 -n 64 -d "$DEPTHS" -r "$REPS" -o json \
    > "$out/llama-3-$moe.json" 2> "$out/llama-3-$moe.err"
  log "llama-bench 3+$moe rc=$?"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$out/timeline.txt"
# The device returns at most 8 files of a run's $OUT (call AD lost its llama.cpp tables to
# that): everything goes into one tar.
(cd "$out" && tar -cf side-by-side.tar --exclude=side-by-side.tar . && find . -type f ! -name side-by-side.tar -delete)
