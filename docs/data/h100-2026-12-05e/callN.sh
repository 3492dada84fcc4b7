#!/usr/bin/env bash
# Device call N: ncu --set full of the decode step's small kernels at 16k (s32 file, 3 dense + 2 MoE):
# mla_attention (and at depth 0), top_k_rows_s, moe_route, mmid_q8_0 (k_b/v_b), matvec1_f32 (indexer
# weights, router), indexer_scores_t32, mla_combine. Skip counts from call M's all-kernel list.
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn GLINT_REPO=$PWD
S=$(date +%s); t() { echo "$1 $(( $(date +%s)-S ))s" >> $OUT/log; }
LIMIT=${1:-540}; left() { echo $(( LIMIT - ($(date +%s)-S) )); }
B() { [ $(left) -gt 15 ] && timeout $(( $(left) - 5 )) "$@"; }
tar -xJf device-pack/bin.tar.xz; G=$PWD/device-bin/glint
[ -f /tmp/s32.gguf ] || $G synth /tmp/s32.gguf --dense 3 --moe 2 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1; t synth
mkdir -p /tmp/ncu
P() { # name skip count depth
  B ncu --set full -k "$1" -s $2 -c $3 -o /tmp/ncu/$1-$4 --force-overwrite $G bench -m /tmp/s32.gguf --device cuda -p 0 -n 3 -d $4 -b 1 -r 1 > /tmp/ncu/$1-$4.log 2>&1
  ncu --import /tmp/ncu/$1-$4.ncu-rep > $OUT/$1-$4.txt 2>&1; t "$1-$4"
}
P mla_attention 175 1 16384
P top_k_rows_s 155 1 16384
P moe_route 70 1 16384
P mmid_q8_0 30 2 16384
P matvec1_f32 21 2 16384
P indexer_scores_t32 155 1 16384
P mla_combine 15 1 16384
P mla_attention 8 1 0
