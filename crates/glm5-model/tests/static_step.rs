//! A step allocates nothing: every buffer is sized at load (the backend's own per-thread
//! scratch through `Backend::prepare_step`), per-step values are written into them. Counted
//! with a global allocator over every thread (rayon's workers included) from the first step
//! on, on an F32 model (float matmuls and per-head products) and on Q8_0 / Q4_0 files
//! (glint-quant's kernels with quantized activations).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{case, case_gguf, fixture_dir, ids_of, reference};
use glint_gguf::{write_gguf, GgmlType, Gguf, TensorSpec};
use glm5_model::{
    BatchPlan, CacheType, CacheTypes, CpuBackend, Logits, Model, SeqCache, StepLimits,
};

struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(l.size(), Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if ON.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(new, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steps_do_not_allocate() {
    let r = reference();
    // topk 16: the long part of the prompt runs the indexer and sparse attention.
    let c = case(&r, "medium");
    let ids = ids_of(&c["ids"]);
    let lc = fixture_dir().join("llamacpp");
    // BF16 and F16 weights take glint-quant's kernels with 2-byte activations.
    let dir = tempfile::tempdir().unwrap();
    let bf16 = dir.path().join("tiny-bf16.gguf");
    let f16 = dir.path().join("tiny-f16.gguf");
    convert(&case_gguf(&r, c), &bf16, GgmlType::BF16);
    convert(&case_gguf(&r, c), &f16, GgmlType::F16);
    for path in [
        case_gguf(&r, c),
        lc.join("glm5-tiny-lc-q8_0.gguf"),
        lc.join("glm5-tiny-lc-q4_0.gguf"),
        bf16,
        f16,
    ] {
        let counts = count_step_allocations(&Gguf::open(&path).unwrap(), &ids, Default::default());
        eprintln!(
            "{}: allocations (count, bytes) per step: {counts:?}",
            path.display()
        );
        assert!(
            counts.iter().all(|&(n, _)| n == 0),
            "{}: steps allocated: {counts:?}",
            path.display()
        );
    }
    steps_with_16_bit_and_fp8_caches_do_not_allocate();
}

/// Called from [`steps_do_not_allocate`]: the counter is process-wide, so the counted steps
/// must not overlap with another test's work.
fn steps_with_16_bit_and_fp8_caches_do_not_allocate() {
    // Non-f32 caches are decoded row by row: attention gathers at most top-k rows, the indexer
    // none.
    let r = reference();
    let c = case(&r, "medium");
    let ids = ids_of(&c["ids"]);
    let g = Gguf::open(case_gguf(&r, c)).unwrap();
    for (latent, index) in [
        (CacheType::F16, CacheType::F16),
        (CacheType::Bf16, CacheType::F16),
        (CacheType::Fp8, CacheType::Fp8),
    ] {
        let counts = count_step_allocations(&g, &ids, CacheTypes { latent, index });
        eprintln!("{latent}/{index} cache: allocations per step {counts:?}");
        assert!(counts.iter().all(|&(n, _)| n == 0), "{latent}: {counts:?}");
    }
}

/// A copy of `src` with every 2-D and 3-D weight except the router and indexer projection
/// stored as `ty` (as llama.cpp's converter keeps those F32).
fn convert(src: &std::path::Path, dst: &std::path::Path, ty: GgmlType) {
    let g = Gguf::open(src).unwrap();
    let mut out: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for t in g.tensors() {
        let keep = t.dims.len() == 1
            || t.name.ends_with("ffn_gate_inp.weight")
            || t.name.ends_with("indexer.proj.weight");
        let data = g.tensor_data(t);
        let (ty, bytes) = if keep {
            (t.ty, data.to_vec())
        } else {
            let f: Vec<f32> = data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut q = vec![0u8; f.len() * 2];
            glint_quant::quantize(ty, &f, &mut q).unwrap();
            (ty, q)
        };
        let spec = TensorSpec {
            name: t.name.clone(),
            ty,
            dims: t.dims.clone(),
        };
        out.push((spec, bytes));
    }
    let tensors: Vec<(TensorSpec, &[u8])> = out.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    write_gguf(dst, g.metadata().entries(), &tensors).unwrap();
}

/// Runs `ids` as two sequences (20-token prefill chunks of one, single tokens of the other)
/// and returns the allocations made during each step.
fn count_step_allocations(g: &Gguf, ids: &[u32], cache: CacheTypes) -> Vec<(usize, usize)> {
    let model = Model::load(g, CpuBackend::new()).unwrap();
    let nv = model.config().n_vocab;
    let bs = 16;
    let limits = StepLimits {
        max_tokens: 32,
        max_seqs: 2,
        max_blocks: 16,
    };
    let mut pool = model.new_pool(32, bs, cache).unwrap();
    let mut st = model.new_step_state(limits, bs, 32).unwrap();
    let mut seqs = [SeqCache::default(), SeqCache::default()];
    for s in &mut seqs {
        pool.reserve(s, ids.len()).unwrap();
    }
    let mut logits = vec![0f32; 32 * nv];
    // Plans are built on the host before the step (that may allocate); only the step counts.
    let mut plans = Vec::new();
    let (mut a, mut b) = (0, 0);
    while a < ids.len() {
        let mut plan = BatchPlan::new(bs);
        let m = 20.min(ids.len() - a);
        let mut s0 = seqs[0].clone();
        s0.len = a;
        plan.push(&s0, &ids[a..a + m], a, Logits::All).unwrap();
        if b < ids.len() {
            let mut s1 = seqs[1].clone();
            s1.len = b;
            plan.push(&s1, &ids[b..b + 1], b, Logits::Last).unwrap();
            b += 1;
        }
        a += m;
        plans.push(plan);
    }
    let mut counts = Vec::new();
    // The engine loop runs on a pool thread (as `glint serve`'s engine thread does): rayon
    // jobs injected from outside the pool go through a queue that allocates a block every 63
    // jobs; a pool thread pushes onto its own deque instead.
    rayon::scope(|_| {
        for plan in &plans {
            let out = &mut logits[..plan.logit_rows().len() * nv];
            ALLOCS.store(0, Ordering::Relaxed);
            BYTES.store(0, Ordering::Relaxed);
            ON.store(true, Ordering::Relaxed);
            model.step(plan, &mut pool, &mut st, out).unwrap();
            ON.store(false, Ordering::Relaxed);
            counts.push((
                ALLOCS.load(Ordering::Relaxed),
                BYTES.load(Ordering::Relaxed),
            ));
        }
    });
    counts
}
