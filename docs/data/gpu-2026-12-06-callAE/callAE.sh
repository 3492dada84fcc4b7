#!/usr/bin/env bash
# Device call AE: (1) pp512 of the 3 dense + 2 MoE file, c86b265 against 062e456 (padded Q8_K
# activations, one-address copies in mmq_k4, pipelined mmq_q6_k), alternating binaries; (2)
# every CUDA test binary at 062e456 (scripts/cuda-tests.sh; quant_types checks each weight
# type's batched products against the CPU backend and the one-token kernels' bits); (3) glint
# 062e456 and llama.cpp (built meanwhile) side by side on the 3 + 2 and 3 + 4 files. Every
# output goes into $OUT/all.tar (the device returns at most 8 files).
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD
R=/tmp/res; mkdir -p $R
S=$(date +%s); t() { echo "$(date -u +%T) $1 $(( $(date +%s)-S ))s" >> $R/timeline.txt; tar -cf $OUT/all.tar -C $R .; }
LIMIT=${1:-580}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 10 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; mkdir -p /tmp/old && tar -xJf device-pack/bin-c86b265.tar.xz -C /tmp/old
{ nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv; cat device-bin/COMMIT /tmp/old/device-bin/COMMIT; nproc; } >> $R/timeline.txt; t untar
lsrc=/tmp/llama-src; mkdir -p $lsrc && tar -xJf device-pack/llama.cpp.tar.xz -C $lsrc
( cd $lsrc/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF && cmake --build build -j 10 --target llama-bench
) > $R/llama-build.log 2>&1 &
build=$!
G=device-bin/glint; O=/tmp/old/device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
wait $s1 $s2; t synth
{ for i in 1 2; do for n in old new; do
    b=$G; [ $n = old ] && b=$O
    echo "== $n"; GLINT_KERNEL_CACHE=/tmp/kc-$n B $b bench -m /tmp/s32.gguf --device cuda -p 512 -n 16 -d 0 -b 1 -r 3 2>&1 | grep -E "pp512|tg16"
  done; done; } > $R/ab.txt 2>&1; t ab
OUT=$R/tests GLINT_KERNEL_CACHE=/tmp/kc-new B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
BF="--cache-type bf16 --cache-type-index fp8"
for m in 2 4; do
  GLINT_KERNEL_CACHE=/tmp/kc-new B $G bench -m /tmp/s3$m.gguf --device cuda -p 512 -n 64 -d 0,16384 -b 1 -r 2 $BF -o json \
    > $R/glint-3-$m.json 2> $R/glint-3-$m.err; t "glint 3+$m rc=$?"
done
wait $build; t "llama.cpp build rc=$?"
LB=$lsrc/llama.cpp/build/bin/llama-bench
for m in 2 4; do
  B $LB -m /tmp/s3$m.gguf -ngl 99 -p 512 -n 64 -d 0,16384 -r 2 -o json > $R/llama-3-$m.json 2> $R/llama-3-$m.err
  t "llama-bench 3+$m rc=$?"
done
PROFILE_PROMPT=512 NCU_CACHE=none OUT=$R/profile GLINT_KERNEL_CACHE=/tmp/kc-new B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile rc=$?"
