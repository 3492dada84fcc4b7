#!/usr/bin/env bash
# Issue 12's first runs, for a machine with two or more GPUs (nvidia-h200-x2): --tp 2 against
# --tp 1 under CUDA graphs, with and without --ep, on the tiny fixture and on a synthetic
# real-geometry file; decode speed at TP 1 and 2; one decode-sized all-reduce with NCCL's
# default protocol and with NCCL_PROTO=LL. Runs from a checkout holding device-bin/
# (scripts/cuda-build.sh); writes $OUT/tp2.txt. Keep NVLink multicast off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/cuda-tp2}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=${GLINT_KERNEL_CACHE:-/tmp/glint-kernels} RUST_LOG=warn
G=device-bin/glint
log="$out/tp2.txt"
: > "$log"
ngpu=$(nvidia-smi -L | wc -l)
echo "GPUs: $ngpu; commit $(cat device-bin/COMMIT 2>/dev/null)" | tee -a "$log"
[ "$ngpu" -ge 2 ] || { echo "needs two GPUs" | tee -a "$log"; exit 2; }

tiny=fixtures/glm5/glm5-tiny-f32.gguf
synth=/tmp/tp_1_2.gguf
[ -e "$synth" ] || $G synth "$synth" --dense 1 --moe 2 --experts 256 --quant q4_k_m --seed 1 >/dev/null
toks=$(python3 -c 'print(",".join(str((i * 7919) % 150000 + 10) for i in range(64)))')
tiny_toks=$(python3 -c 'print(",".join(str((i * 31) % 200 + 3) for i in range(64)))')

compare() {  # a.npy b.npy label
  python3 - "$1" "$2" "$3" <<'PY' | tee -a "$log"
import sys, numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
print(f"{sys.argv[3]}: max |Δlogit| {np.abs(a - b).max():.3e}, min cosine {cos.min():.7f} "
      f"(need ≥ 0.99999), argmax agree {(a.argmax(-1) == b.argmax(-1)).mean():.3f}")
PY
}
for f in "$tiny" "$synth"; do
  t=$tiny_toks; [ "$f" = "$synth" ] && t=$toks
  $G logits -m "$f" --tokens "$t" --device cuda -o "$out/tp1.npy"
  for ep in "" "--ep"; do
    $G logits -m "$f" --tokens "$t" --device cuda --tp 2 $ep -o "$out/tp2.npy" && \
      compare "$out/tp1.npy" "$out/tp2.npy" "$(basename "$f") --tp 2 $ep vs --tp 1"
    rm -f "$out/tp2.npy"
  done
  a=$($G generate -m "$f" -p "hello world" -n 64 --temp 0 --ignore-eos --device cuda 2>/dev/null)
  b=$($G generate -m "$f" -p "hello world" -n 64 --temp 0 --ignore-eos --device cuda --tp 2 2>/dev/null)
  [ "$a" = "$b" ] && r=same || r=DIFFERENT
  echo "$(basename "$f"): 64 greedy tokens at --tp 2 vs --tp 1: $r" | tee -a "$log"
done
rm -f "$out"/tp1.npy

for tp in 1 2; do
  echo "decode --tp $tp: $($G generate -m "$synth" -p "hello world" -n 128 --temp 0 --ignore-eos --device cuda --tp $tp 2>&1 >/dev/null | tail -1)" | tee -a "$log"
done

# One decode all-reduce: a token's hidden state (6144 values; 24 KB f32, 12 KB bf16), NCCL
# through PyTorch (the same library glint links), CUDA events over 2000 calls.
cat > /tmp/allreduce.py <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank(); torch.cuda.set_device(r)
for dt in (torch.float32, torch.bfloat16):
    x = torch.ones(6144, dtype=dt, device="cuda")
    for _ in range(100): dist.all_reduce(x)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(2000): dist.all_reduce(x)
    b.record(); torch.cuda.synchronize()
    if r == 0:
        print(f"all_reduce 6144 x {dt} ({x.numel() * x.element_size()} B), NCCL_PROTO={os.environ.get('NCCL_PROTO', 'default')}: {a.elapsed_time(b) * 1000 / 2000:.2f} us")
dist.destroy_process_group()
PY
torchrun --nproc_per_node 2 /tmp/allreduce.py 2>/dev/null | tee -a "$log"
NCCL_PROTO=LL torchrun --nproc_per_node 2 /tmp/allreduce.py 2>/dev/null | tee -a "$log"
# Communication share of a decode step: 2 all-reduces per layer (3 here) + the logits gather,
# against the step times above; docs/tensor-parallel.md has the arithmetic for 78 layers.
