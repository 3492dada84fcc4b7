//! A step allocates nothing: every buffer is sized at load (the backend's own per-thread
//! scratch through `Backend::prepare_step`), per-step values are written into them. Counted
//! with a global allocator over every thread (rayon's workers included) from the first step
//! on, on an F32 model (float matmuls and per-head products) and on Q8_0 / Q4_0 files
//! (glint-quant's kernels with quantized activations).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{case, case_gguf, fixture_dir, ids_of, reference};
use glint_gguf::Gguf;
use glm5_model::{BatchPlan, CpuBackend, Logits, Model, SeqCache, StepLimits};

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
    for path in [
        case_gguf(&r, c),
        lc.join("glm5-tiny-lc-q8_0.gguf"),
        lc.join("glm5-tiny-lc-q4_0.gguf"),
    ] {
        let counts = count_step_allocations(&Gguf::open(&path).unwrap(), &ids);
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
}

/// Runs `ids` as two sequences (20-token prefill chunks of one, single tokens of the other)
/// and returns the allocations made during each step.
fn count_step_allocations(g: &Gguf, ids: &[u32]) -> Vec<(usize, usize)> {
    let model = Model::load(g, CpuBackend::new()).unwrap();
    let nv = model.config().n_vocab;
    let bs = 16;
    let limits = StepLimits {
        max_tokens: 32,
        max_seqs: 2,
        max_blocks: 16,
    };
    let mut pool = model.new_pool(32, bs, Default::default()).unwrap();
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
