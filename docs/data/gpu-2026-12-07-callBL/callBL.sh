#!/usr/bin/env bash
# Device call BL (thirteenth session; first written in the twelfth, which ran out of device
# time before running it). Binaries: device-bin/ at 669a6dc (every test binary, and glint with
# the session's prompt kernels: `matvec_wide_f32x4` for F32 products of 128+ tokens,
# `mmid_group_heads` for per-head groupings, the 8-bit quantizers on 16-byte loads);
# device-pack/glint-old.xz is bc8ef44's glint (before them); device-pack/glint-bl.xz is
# 669a6dc with 2946830's layer.rs (the indexer's query on the side chain as soon as q_lora is
# there, its head weights beside it on the main chain, the scores after both; call BK's 16k
# timeline put its scores ~8 µs sooner).
# (1) every CUDA test binary, llama.cpp building beside them; (2) pp512 of the 3 + 4 file: the
# new binary, the old one, the new one with the first two kernels off
# (GLINT_CUDA_F32_WIDE_MIN=0 GLINT_CUDA_HEAD_GROUP=0), two alternating rounds, then the 3 + 2
# file new and old, and llama.cpp's pp512 on both; (3) a 512-token prefill profile (1 + 1
# file) with the new binary; (4) tg32 of the 1 + 1 file at 16,384, the head's order and the
# BL order, two alternating rounds. bash callBL.sh 580
source scripts/device-call-lib.sh "${1:-580}"
for b in bl old; do xz -dc device-pack/glint-$b.xz > device-bin/glint-$b && chmod +x device-bin/glint-$b; done
llama_build & LBP=$!
# glint-cuda's compile test (NVRTC, every kernel for sm_80 and sm_90a) passed on the CPU machine
# at this commit; left out here for device time.
rm -f device-bin/tests/glint-cuda--compile
OUT=$R/tests B bash scripts/cuda-tests.sh > $R/tests.txt 2>&1; t "tests rc=$?"
anchor_files
pp() { echo "== $*"; B "$@" bench -m $F --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"; }
OFF="GLINT_CUDA_F32_WIDE_MIN=0 GLINT_CUDA_HEAD_GROUP=0"
F=/tmp/s34.gguf
for r in 1 2; do
  pp env $G; pp env device-bin/glint-old; pp env $OFF $G
done > $R/pp512.txt 2>&1
F=/tmp/s32.gguf
{ pp env $G; pp env device-bin/glint-old; } >> $R/pp512.txt 2>&1; t pp512
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
    B $g bench -m $f --device cuda -p 0 -n 32 -d 16384 -b 1 -r 2 $BF 2>&1 | grep -E "tg32|rror|panic"
  done
done > $R/ab.txt 2>&1; t ab
t done
