#!/usr/bin/env bash
# Device call BF (binaries `1d09b49`, the head's CUDA code): the issue's decode rows at the head
# with bf16 latent and fp8 indexer caches, on the 3 dense + 4 MoE and 3 + 2 files: one sequence
# at depth 0 and 65,536 (one MoE layer = the files' difference / 2), and batched decode at 8, 64
# and 256 sequences (last measured in call AD with f32 caches). Run from the repository root
# with device-pack/ carried: bash callBF.sh 330
source scripts/device-call-lib.sh "${1:-330}"
anchor_files
for m in 34 32; do
  echo "== s$m one sequence"
  B $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 64 -d 0,65536 -b 1 -r 2 $BF 2>&1 | grep -E "tg64|rror|panic"
  t "s$m one"
done > $R/glint.txt 2>&1
for m in 34 32; do
  echo "== s$m batched"
  B $G bench -m /tmp/s$m.gguf --device cuda -p 0 -n 32 -d 0 -b 8,64,256 -r 2 $BF 2>&1 | grep -E "tg32|rror|panic|test"
  t "s$m batched"
done >> $R/glint.txt 2>&1
