#!/usr/bin/env bash
# callBN.sh cut to the ~4 minutes of device time left after five tries that found no machine:
# the tests that run the session's two kernels (`top_k_rows_ch` with the scores' first radix
# level; `matvec_tile_f32x4`), then pp512 of the 3 + 4 file with and without the tile router,
# as far as the time goes. bash callBN-short.sh 230
source scripts/device-call-lib.sh "${1:-230}"
for b in glint-cuda--conformance glint-cuda--quant_types glm5-model--indexer_topk glint-cuda--graphs; do
  f=(); case $b in glm5-model--*) f=(::cuda) ;; glint-cuda--quant_types) f=(every_weight_type_matches_the_cpu_backend --exact) ;; esac
  B device-bin/tests/$b "${f[@]}" > $R/$b.log 2>&1
  echo "$b rc=$? $(grep -E '^test result' $R/$b.log | tail -1)" >> $R/tests.txt; t "$b"
done
( $G synth /tmp/s34.gguf --dense 3 --moe 4 --experts 256 --quant q4_k_m --seed 1 > /dev/null 2>&1 ); t synth
pp() { echo "== $*"; B "$@" bench -m /tmp/s34.gguf --device cuda -p 512 -n 0 -d 0 -b 1 -r 3 $BF 2>&1 | grep -E "pp512|rror|panic"; }
{ pp env GLINT_CUDA_F32_TILE=1 $G; pp env $G; pp env GLINT_CUDA_F32_TILE=1 $G; pp env $G; } > $R/pp512.txt 2>&1; t pp512
t done
