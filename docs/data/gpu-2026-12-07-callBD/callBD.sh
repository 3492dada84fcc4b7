#!/usr/bin/env bash
# Not run yet: its one try on 2026-12-07 found no machine.
# Device call BD, 2026-12-07: what fitted in the session's last device time, the part of call
# BC (callBC.sh beside it) most likely to change a default: every one-token product staged
# (GLINT_CUDA_MV_STAGE=all) against the default, on the per-MoE-layer anchor (tg64 of the
# 3 dense + 4 MoE and 3 + 2 files, bf16 + fp8 caches; one MoE layer = the difference / 2),
# alternating. Same binaries as call BB (device-pack/bin.tar.xz, 7af6a38).
source scripts/device-call-lib.sh "${1:-250}"
G=device-bin/glint
( $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s1=$!
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ) & s2=$!
wait $s1 $s2; t synth
BF="--cache-type bf16 --cache-type-index fp8"
B $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 4 -d 0 -b 1 -r 1 $BF > /dev/null 2>&1; t warm
{ for r in 1 2; do
  for cfg in "" "GLINT_CUDA_MV_STAGE=all"; do
    [ $(left) -gt 40 ] || break 2
    for m in 34 32; do
      echo "== round $r s$m ${cfg:-default}"
      env $cfg $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d 0 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"
    done
  done
done; } > $R/knobs.txt 2>&1; t knobs
