#!/usr/bin/env python3
"""llama.cpp's prefill and decode speed on a GGUF, for the side-by-side table in
docs/performance.md ("Tiny GLM-5 end to end: glint vs llama.cpp").

llama.cpp here is the one PyPI llama-cpp-python==0.3.36 builds from source (see
fixtures/make_llamacpp_refs.py for the venv). Settings mirror `glint generate`: 2 threads, F32
KV caches (glint's cache is f32), greedy decode that ignores end-of-generation, one prefill batch.
The token ids come from `glint tokenize` so both engines see the same prompt. One untimed
prefill of the same prompt runs first.

    target/release/glint tokenize -m MODEL -p "$P" > /tmp/ids.txt
    /tmp/llvenv/bin/python benches/llamacpp_tiny.py MODEL /tmp/ids.txt 256

LLAMACPP_EXTRA_BUFTS=0 loads the weights without llama.cpp's extra CPU buffer types (its
repacked GEMM layouts and, in an AMX build, the AMX one): "repack off".
"""

import sys
import time

import os

import numpy as np
import llama_cpp
from llama_cpp import Llama

GGML_TYPE_F32 = 0


def without_extra_bufts() -> None:
    # Llama() takes its model parameters from this function of the low-level module it
    # imported, and has no argument for the field.
    low = llama_cpp.llama.llama_cpp
    default = low.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params


def main() -> None:
    path, ids_file, n_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if os.environ.get("LLAMACPP_EXTRA_BUFTS") == "0":
        without_extra_bufts()
    ids = [int(t) for t in open(ids_file).read().strip().split(",") if t]
    m = Llama(path, n_ctx=len(ids) + n_new + 8, n_threads=2, n_threads_batch=2,
              n_batch=4096, n_ubatch=4096, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
              verbose=False)
    # Warm-up prefill, untimed (llama-bench runs one too; `glint bench` warms up the same way):
    # the compute buffers and KV pages are touched before the timed run.
    m.eval(ids)
    m.reset()
    t0 = time.perf_counter()
    m.eval(ids)
    t1 = time.perf_counter()
    n_vocab = m.n_vocab()
    for _ in range(n_new):
        logits = np.ctypeslib.as_array(m._ctx.get_logits(), shape=(n_vocab,))
        m.eval([int(np.argmax(logits))])
    t2 = time.perf_counter()
    print(f"llama.cpp: prompt {len(ids)} tokens {len(ids) / (t1 - t0):.1f} tok/s | "
          f"generation {n_new} tokens {n_new / (t2 - t1):.1f} tok/s")


if __name__ == "__main__":
    main()
