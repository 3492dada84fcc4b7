#!/usr/bin/env bash
# Device call BL (thirteenth session; first written in the twelfth, which ran out of device
# time before running it). Binaries: device-bin/ at 75ee9da (every test binary and glint:
# `matvec_wide_f32x4` for F32 products of 128+ tokens, `mmid_group_heads` for per-head
# groupings); device-pack/glint-bl.xz is the same with 2946830's layer.rs (the indexer's query
# on the side chain as soon as q_lora is there, its head weights beside it on the main chain,
# the scores after both), call BK's 16k timeline put its scores ~8 µs sooner.
# (1) every CUDA test binary, llama.cpp building beside them; (2) pp512 of the 3 + 4 and 3 + 2
# files, the new prompt kernels on and off (GLINT_CUDA_F32_WIDE_MIN=0 GLINT_CUDA_HEAD_GROUP=0),
# two alternating rounds, and llama.cpp's pp512 on the same files; (3) a 512-token prefill
# profile with the new kernels; (4) tg32 of the 1 + 1 file at 16,384 and 65,536, the head and
# the BL order, two alternating rounds; (5) Nsight Compute on the one-token router product.
# bash callBL.sh 580
source scripts/device-call-lib.sh "${1:-580}"
xz -dc device-pack/glint-bl.xz > device-bin/glint-bl && chmod +x device-bin/glint-bl
llama_build & LBP=$!
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
anchor_files
OFF="GLINT_CUDA_F32_WIDE_MIN=0 GLINT_CUDA_HEAD_GROUP=0"
for r in 1 2; do
  for cfg in default "$OFF"; do
    for m in 34 32; do
      echo "== round $r s$m $cfg"
      B env ${cfg/#default/} $G bench -m /tmp/s$m.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"
    done
  done
done > $R/pp512.txt 2>&1; t pp512
wait $LBP; t "llama build rc=$?"
for m in 34 32; do
  echo "== llama.cpp s$m"
  B $LB -m /tmp/s$m.gguf -ngl 99 -p 512 -n 0 -r 3 2>&1 | grep -E "pp512|rror"
done > $R/llama-pp512.txt 2>&1; t llama
rm -f /tmp/s32.gguf /tmp/s34.gguf
OUT=$R/profile-p512 PROFILE_PROMPT=512 PROFILE_ARGS="$BF" NCU_CACHE=none B bash scripts/cuda-profile.sh > /dev/null 2>&1; t "profile p512 rc=$?"
f=$(scripts/profile-file.sh)
for r in 1 2; do
  for g in device-bin/glint-bl device-bin/glint; do
    echo "== round $r $g"
    B $g bench -m $f --device cuda -p 0 -n 32 -d 16384,65536 -b 1 -r 2 $BF 2>&1 | grep -E "tg32|rror|panic"
  done
done > $R/ab.txt 2>&1; t ab
OUT=$R/ncu-router1 PROMPT=1 KERNELS=matvec1_f32x4 COUNT=1 PROFILE_ARGS="$BF" B bash scripts/cuda-stalls.sh > /dev/null 2>&1; t "ncu router 1 rc=$?"
rm -f $R/ncu-router1/stalls.ncu-rep.xz; t done
