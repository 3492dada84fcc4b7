#!/usr/bin/env bash
# Where the prefill products' warps wait: Nsight Compute's full section set, with
# per-SASS-instruction stall samples, for the launches of the kernels matching KERNELS
# (default: the Q4_K/Q6_K MMQ products and MLA attention) in one prefill step of a PROMPT-token
# prompt (default 512) on a synthetic 1 dense + 1 MoE file with GLM-5's real shapes (256
# experts, Q4_K_M-like). The kernels are compiled with line info (GLINT_NVRTC_LINEINFO=1) and
# the kernel sources are linked into the working directory, so the report carries the source
# for Nsight Compute's GUI (its command-line CUDA view gave no metric columns in call AH,
# ncu 2025.3.1). Runs on a GPU machine from a checkout holding device-bin/
# (scripts/cuda-build.sh). Writes under $OUT: stalls.ncu-rep.xz (the report), details.txt
# (every section of every launch), and per launch sass-*.csv (each instruction with its
# executions and stall samples by reason). PROFILE_ARGS: more bench options (cache types, say).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-stalls}
mkdir -p "$out"
G=device-bin/glint
f=$(scripts/profile-file.sh)
export GLINT_CUDA_GRAPHS=0 GLINT_NVRTC_LINEINFO=1 GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels-li}
for k in kernels/*.cu kernels/*.cuh; do ln -sf "$k" .; done
cmd=($G bench -m "$f" --device cuda -p "${PROMPT:-512}" -n 0 -r 1 ${PROFILE_ARGS:-})
RUST_LOG=warn "${cmd[@]}" >/dev/null 2>&1
ncu --version > "$out/ncu-version.txt" 2>&1
ncu --set full --import-source yes --clock-control none \
  -k "regex:^(${KERNELS:-mmq_q4_k|mmq_q6_k|mla_attention})$" --launch-count "${COUNT:-24}" \
  -o "$out/stalls" -f "${cmd[@]}" > "$out/ncu.log" 2>&1
echo "ncu rc=$?" >> "$out/ncu.log"
rep=$out/stalls.ncu-rep
ncu -i "$rep" --page details --print-details all > "$out/details.txt" 2>&1 \
  || ncu -i "$rep" --page details > "$out/details.txt" 2>&1
for ((i = 0; i < ${COUNT:-24}; i++)); do
  ncu -i "$rep" --page source --csv --print-source sass --launch-skip $i --launch-count 1 > "$out/sass-$i.csv" 2>&1 || break
  grep -q '"Address"' "$out/sass-$i.csv" || { rm -f "$out/sass-$i.csv"; break; }
done
xz -f -9 "$rep"
find . -maxdepth 1 -type l \( -name '*.cu' -o -name '*.cuh' \) -delete
