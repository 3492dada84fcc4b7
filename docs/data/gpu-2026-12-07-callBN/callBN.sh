#!/usr/bin/env bash
# Device call BN (written in the fourteenth session, not run: six tries found no machine and
# spent the session's device time). Binaries: device-bin/ with the session's two kernels:
# (a) the tensor-core indexer scores count each row's first radix level (the top 11 bits of a
# key) as they write the scores, and `top_k_rows_ch` picks the first bin from that table and
# makes two passes over the cluster's keys (11 bits, then 10) where `top_k_rows_c` makes four
# of 8 (opt-in: GLINT_CUDA_TOPK_HIST=1); (b) `matvec_tile_f32x4`, the prompt's F32
# products (the router) on shared-memory tiles of 32 rows × 32 tokens (opt-in:
# GLINT_CUDA_F32_TILE=1; the default `matvec_wide_f32x4`); the layer in `2946830`'s indexer
# order (call BM). Both kernels are opt-in until this call's tests pass.
# (1) the CUDA tests that run them: glint-cuda's conformance (its new decode-width indexer case
# takes `top_k_rows_ch`, and the test asserts so), graphs and quant_types (F32 products of 150
# tokens, bit-identical to each token alone), glm5-model's ::cuda tests, glint-tp;
# (2) pp512 of the 3 + 4 file, GLINT_CUDA_F32_TILE=1 against the default, two alternating rounds;
# (3) the per-MoE-layer anchor at 16,384 and 65,536 (tg64 of the 3 + 4 and 3 + 2 files),
# GLINT_CUDA_TOPK_HIST=1 against the default, alternating, as many rounds as the time allows.
# bash callBN.sh 450
source scripts/device-call-lib.sh "${1:-580}"
for b in glint-cuda--conformance glint-cuda--graphs glint-cuda--quant_types glm5-model--indexer_topk \
  glm5-model--batched_step glm5-model--forward_fixture glm5-model--tp glint-tp--nccl; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; glint-cuda--quant_types) f=(every_weight_type_matches_the_cpu_backend --exact) ;; esac
  B device-bin/tests/$b "${f[@]}" > $R/$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/$b.log | tail -1)" >> $R/tests.txt; t "$b"
done
anchor_files
pp() { echo "== $*"; B "$@" bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"; }
for r in 1 2; do pp env GLINT_CUDA_F32_TILE=1 $G; pp env $G; done > $R/pp512.txt 2>&1; t pp512
DEPTHS=16384,65536 knob_rounds 20 GLINT_CUDA_TOPK_HIST=1 default > $R/anchor.txt 2>&1; t anchor
t done
