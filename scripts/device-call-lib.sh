# Sourced by a device call's script (docs/data/*/call*.sh) on the GPU machine, from the
# repository root with device-pack/ carried: what every call repeats. `source
# scripts/device-call-lib.sh LIMIT` gives
#   R            the results folder, packed into $OUT/all.tar.xz at every `t` (so a call cut
#                short still returns what it had);
#   t LABEL      a line in $R/timeline.txt with the seconds since the start;
#   left         seconds left of LIMIT;
#   B CMD...     CMD under a timeout of what is left minus 5 s, or nothing with 10 s or less left;
#   anchor_files writes the anchor files, /tmp/s34.gguf (3 dense + 4 MoE) and
#                /tmp/s32.gguf (3 + 2; 256 experts, Q4_K_M-like), and warms the kernel cache on
#                one (ptxas of quant.cu) outside any timed row; G is the glint binary, BF the
#                bf16 latent + fp8 indexer cache options;
#   knob_rounds RESERVE SETTING...
#                tg64 of /tmp/s34.gguf then /tmp/s32.gguf under each SETTING (`default` for
#                none, else NAME=VALUE environment words, the first of them `bin=PATH` for
#                another glint binary than G), two rounds alternating the settings,
#                at the depths in DEPTHS (default 0); stops a round early once RESERVE seconds
#                or fewer are left;
#   llama_build  builds llama-bench from device-pack/llama.cpp.tar.xz (scripts/llamacpp-pack.sh)
#                into $LB, log in $R/llama-build.log (about 5 minutes on 16 cores: run it in the
#                background);
# and unpacks device-pack/bin.tar.xz (scripts/cuda-build.sh's device-bin/), noting the GPU,
# driver, commit and core count in the timeline.
export NCCL_NVLS_ENABLE=0 RUST_LOG=warn GLINT_REPO=$PWD GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/kc}
R=/tmp/res
mkdir -p "$R"
S=$(date +%s)
LIMIT=${1:-570}
LB=/tmp/llama-src/llama.cpp/build/bin/llama-bench
t() { echo "$(date -u +%T) $1 $(($(date +%s) - S))s" >> "$R/timeline.txt"; tar -cJf "$OUT/all.tar.xz" -C "$R" .; }
left() { echo $((LIMIT - ($(date +%s) - S))); }
B() { [ "$(left)" -gt 10 ] && timeout $(($(left) - 5)) "$@"; }
G=device-bin/glint
BF="--cache-type bf16 --cache-type-index fp8"
anchor_files() {
  ( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & local s1=$!
  ( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & local s2=$!
  wait $s1 $s2; t synth
  B $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 4 -d 0 -b 1 -r 1 $BF > /dev/null 2>&1; t warm
}
knob_rounds() {
  local reserve=$1 r cfg m words g
  shift
  for r in 1 2; do
    for cfg in "$@"; do
      [ "$(left)" -gt "$reserve" ] || return 0
      words=${cfg/#default/} g=$G
      if [[ $words == bin=* ]]; then
        g=${words%% *} words=${words#"${words%% *}"}
        g=${g#bin=}
      fi
      [ -x "$g" ] || { echo "== round $r $cfg: error: no executable at $g"; continue; }
      for m in 34 32; do
        echo "== round $r s$m $cfg"
        env $words $g bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d "${DEPTHS:-0}" -b 1 -r 2 $BF 2>&1 \
          | grep -E "tg64|rror|panic"
      done
    done
  done
}
llama_build() {
  local src=/tmp/llama-src
  mkdir -p $src && tar -xJf device-pack/llama.cpp.tar.xz -C $src
  (cd $src/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF && cmake --build build -j 10 --target llama-bench) \
    > "$R/llama-build.log" 2>&1
}
tar -xJf device-pack/bin.tar.xz
{
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv
  cat device-bin/COMMIT
  nproc
} >> "$R/timeline.txt" 2>&1
t untar
