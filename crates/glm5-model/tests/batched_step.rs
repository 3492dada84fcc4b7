//! The batched, paged step against transformers and against the same prompt run alone:
//! several fixture prompts interleaved token by token in shared steps (prefill chunks of one
//! sequence next to single decode-like tokens of another) give each prompt transformers'
//! logits; a prompt in a step with 15 other sequences gives bit-identical logits to the prompt
//! alone (batch invariance: a server's answers must not depend on its load); chunked prefill
//! equals one-shot prefill bit for bit; refused plans leave the cache as it was.

mod common;

use common::{case, case_gguf, fixture_dir, ids_of, read_npy_f32, reference, usizes_of};
use glint_gguf::Gguf;
use glm5_model::{
    Backend, BatchPlan, CpuBackend, Glm5, KvPool, Logits, Model, ModelError, SeqCache,
    SessionOptions, StepLimits, StepState,
};

/// Bound against transformers where the indexer's selection is unambiguous: the same bound and
/// measurement as forward_fixture.rs (<= 3.34e-5 measured, every kernel family).
const DENSE_BOUND: f32 = 6e-5;

/// Past position 2048 of `long`: forward_fixture.rs's bound where the top-2048 selection has
/// near-ties (the independent float64 forward is 1.42e-2 from transformers there).
const SPARSE_BOUND: f32 = 2.5e-2;

const BLOCK: usize = 16;

struct Engine<'a, B: Backend> {
    model: Model<'a, B>,
    pool: KvPool<B>,
    st: StepState<B>,
}

fn engine<B: Backend>(
    be: B,
    g: &Gguf,
    max_tokens: usize,
    max_seqs: usize,
    n_blocks: usize,
) -> Engine<'_, B> {
    let model = Model::load(g, be).unwrap();
    let pool = model.new_pool(n_blocks, BLOCK, Default::default()).unwrap();
    let limits = StepLimits {
        max_tokens,
        max_seqs,
        max_blocks: 4096 / BLOCK,
    };
    let st = model.new_step_state(limits, BLOCK, max_tokens).unwrap();
    Engine { model, pool, st }
}

/// Runs the sequences `prompts` to the end through shared steps. Each step takes up to
/// `chunk[i]` next tokens of sequence `i`, interleaving the sequences token by token, and asks
/// for the logits of every token. Returns each sequence's logits `[len × n_vocab]`.
fn run_interleaved<B: Backend>(
    e: &mut Engine<'_, B>,
    prompts: &[Vec<u32>],
    chunk: &[usize],
) -> Vec<Vec<f32>> {
    let nv = e.model.config().n_vocab;
    let mut seqs: Vec<SeqCache> = prompts.iter().map(|_| SeqCache::default()).collect();
    for (s, p) in seqs.iter_mut().zip(prompts) {
        e.pool.reserve(s, p.len()).unwrap();
    }
    let mut out: Vec<Vec<f32>> = prompts.iter().map(|_| Vec::new()).collect();
    while seqs.iter().zip(prompts).any(|(s, p)| s.len < p.len()) {
        let mut plan = BatchPlan::new(BLOCK);
        // (sequence, plan index, first position, count) of this step.
        let mut parts = Vec::new();
        for (i, (s, p)) in seqs.iter().zip(prompts).enumerate() {
            let m = chunk[i].min(p.len() - s.len);
            if m > 0 {
                parts.push((i, plan.add_seq(s), s.len, m));
            }
        }
        let longest = parts.iter().map(|p| p.3).max().unwrap();
        for j in 0..longest {
            for &(i, ps, lo, m) in &parts {
                if j < m {
                    plan.add_token(ps, prompts[i][lo + j], lo + j, true)
                        .unwrap();
                }
            }
        }
        let mut logits = vec![0f32; plan.logit_rows().len() * nv];
        e.model
            .step(&plan, &mut e.pool, &mut e.st, &mut logits)
            .unwrap();
        // Rows come in plan order: token j of every part, interleaved.
        let mut row = 0;
        for j in 0..longest {
            for &(i, _, _, m) in &parts {
                if j < m {
                    out[i].extend_from_slice(&logits[row * nv..(row + 1) * nv]);
                    row += 1;
                }
            }
        }
        for &(i, _, lo, m) in &parts {
            seqs[i].len = lo + m;
        }
    }
    out
}

fn alone<B: Backend>(be: B, g: &Gguf, ids: &[u32], ubatch: usize, block_size: usize) -> Vec<f32> {
    let opts = SessionOptions {
        ubatch,
        block_size,
        ..SessionOptions::new(4096)
    };
    let mut m = Glm5::load_with(g, be, opts).unwrap();
    m.forward(ids, 0).unwrap()
}

per_backend!(
    interleaved_prompts_match_transformers_and_their_solo_runs,
    interleaved
);
fn interleaved<B: Backend>(backend: impl Fn() -> B) {
    let r = reference();
    let names = ["short", "chat", "medium"];
    let g = Gguf::open(case_gguf(&r, case(&r, "medium"))).unwrap();
    let prompts: Vec<Vec<u32>> = names.iter().map(|n| ids_of(&case(&r, n)["ids"])).collect();
    let mut e = engine(backend(), &g, 64, 4, 64);
    // short goes one token per step (a decode next to prefill chunks), the others in chunks.
    let got = run_interleaved(&mut e, &prompts, &[1, 5, 23]);
    let nv = e.model.config().n_vocab;
    for (name, (ids, logits)) in names.iter().zip(prompts.iter().zip(&got)) {
        let c = case(&r, name);
        let (_, want) = read_npy_f32(&fixture_dir().join(c["logits_file"].as_str().unwrap()));
        let mut worst = 0f32;
        for (row, &p) in usizes_of(&c["logit_positions"]).iter().enumerate() {
            let d = common::max_abs_diff(
                &logits[p * nv..(p + 1) * nv],
                &want[row * nv..(row + 1) * nv],
            );
            worst = worst.max(d);
        }
        eprintln!("{name}: interleaved in shared steps, max |Δlogit| vs transformers {worst:.3e}");
        assert!(worst <= DENSE_BOUND, "{name}: {worst} vs transformers");
        assert!(
            alone(backend(), &g, ids, 512, 64) == *logits,
            "{name}: interleaved logits differ from the prompt run alone"
        );
    }
}

per_backend!(
    a_prompt_among_15_others_is_bit_identical_to_it_alone,
    among_15
);
fn among_15<B: Backend>(backend: impl Fn() -> B) {
    let r = reference();
    let g = Gguf::open(case_gguf(&r, case(&r, "medium"))).unwrap();
    let medium = ids_of(&case(&r, "medium")["ids"]);
    let chat = ids_of(&case(&r, "chat")["ids"]);
    // 15 other sequences: slices of the fixture prompts at different offsets and lengths.
    let mut prompts = vec![medium.clone()];
    for i in 0..15 {
        let src = if i % 2 == 0 { &medium } else { &chat };
        let lo = (7 * i) % (src.len() / 2);
        let len = 3 + (11 * i) % (src.len() - lo - 3);
        prompts.push(src[lo..lo + len].to_vec());
    }
    let mut e = engine(backend(), &g, 192, 16, 256);
    let chunks: Vec<usize> = (0..16).map(|i| [32, 1, 4, 9][i % 4]).collect();
    let got = run_interleaved(&mut e, &prompts, &chunks);
    assert!(
        got[0] == alone(backend(), &g, &medium, 512, 64),
        "medium in a batch of 16 differs from alone"
    );
    // And each of the others equals its own solo run.
    for (i, p) in prompts.iter().enumerate().skip(1) {
        assert!(
            got[i] == alone(backend(), &g, p, 512, 64),
            "sequence {i} differs from alone"
        );
    }
}

per_backend!(
    chunked_prefill_equals_one_shot_on_every_fixture_prompt,
    chunked_prefill
);
/// The same prefills with dense products of 64 tokens and more on cuBLAS (glint-cuda's
/// gemm.rs; the fixture's F32 weights take its f32 GEMM): the one-shot runs and the 64-token
/// chunks take it, the 1- and 7-token chunks do not, and the 3006-token prompt's 64-token
/// chunks repeat a step key, so some run as recorded CUDA graphs with cuBLAS inside. Held to
/// the same transformers bound and argmax as the default path.
#[cfg(feature = "cuda")]
mod prompt_gemm {
    #[test]
    fn cuda() {
        super::chunked_prefill(|| {
            glint_cuda::CudaBackend::new(0)
                .expect("CUDA device 0")
                .with_prompt_gemm(Some(64))
        })
    }
}

fn chunked_prefill<B: Backend>(backend: impl Fn() -> B) {
    let r = reference();
    for c in r["cases"].as_array().unwrap() {
        let g = Gguf::open(case_gguf(&r, c)).unwrap();
        let ids = ids_of(&c["ids"]);
        let name = c["name"].as_str().unwrap();
        let one_shot = alone(backend(), &g, &ids, ids.len(), 64);
        // Bit-identical is the CPU's claim (one summation order per token, whatever the step).
        let exact = backend().name() == "cpu";
        let mut worst = 0f32;
        // Block sizes that do and do not divide the micro-batch; the 3006-token prompt one
        // token per step only once (3006 steps).
        for (ubatch, bs) in [(1, 16), (1, 5), (7, 16), (7, 5), (64, 16), (64, 5)] {
            if ids.len() > 2048 && ubatch == 1 && bs == 5 {
                continue;
            }
            let got = alone(backend(), &g, &ids, ubatch, bs);
            if exact {
                assert!(
                    got == one_shot,
                    "{name}: --ubatch {ubatch}, block {bs} differs"
                );
            } else {
                // CUDA splits a query's keys by how many blocks the step fills, so the sum
                // order (not the keys) depends on the step: held to the transformers bound,
                // and the same argmax at every position.
                // From position 2048 on (the topk-2048 `long` case) fp32 near-ties at the
                // top-2048 boundary swap keys in any other order: forward_fixture.rs's
                // SPARSE_BOUND (the float64 reference's own distance from transformers).
                let nv = got.len() / ids.len();
                for p in 0..ids.len() {
                    let (a, b) = (&got[p * nv..(p + 1) * nv], &one_shot[p * nv..(p + 1) * nv]);
                    let e = common::max_abs_diff(a, b);
                    worst = worst.max(e);
                    let bound = if p < 2048 { DENSE_BOUND } else { SPARSE_BOUND };
                    assert!(
                        e <= bound,
                        "{name}: --ubatch {ubatch}, block {bs}, position {p}: |Δ| {e:e} > {bound}"
                    );
                    if p < 2048 {
                        assert_eq!(
                            common::argmax(a),
                            common::argmax(b),
                            "{name}: argmax at {p}"
                        );
                    }
                }
            }
        }
        eprintln!(
            "{name}: {} tokens, ubatch 1/7/64 x block 16/5 vs one shot: max |Δ| {worst:e}",
            ids.len()
        );
    }
}

per_backend!(refused_plans_leave_the_cache_unchanged, refused_plans);
fn refused_plans<B: Backend>(backend: impl Fn() -> B) {
    let r = reference();
    let g = Gguf::open(case_gguf(&r, case(&r, "short"))).unwrap();
    let ids = ids_of(&case(&r, "short")["ids"]);
    let mut e = engine(backend(), &g, 4, 2, 4);
    let nv = e.model.config().n_vocab;
    let mut seq = SeqCache::default();
    e.pool.reserve(&mut seq, 4).unwrap();
    let mut plan = BatchPlan::new(BLOCK);
    plan.push(&seq, &ids[..4], 0, Logits::Last).unwrap();
    let mut logits = vec![0f32; nv];
    e.model
        .step(&plan, &mut e.pool, &mut e.st, &mut logits)
        .unwrap();
    seq.len = 4;
    let snapshot = |e: &Engine<'_, B>| -> Vec<Vec<f32>> {
        e.pool
            .layers
            .iter()
            .map(|l| {
                let be = e.model.backend();
                let mut v = vec![0f32; e.pool.capacity() * e.pool.row()];
                be.cache_download(&l.latent, &mut v).unwrap();
                v
            })
            .collect()
    };
    let before = snapshot(&e);
    let mut check = |plan: &BatchPlan, rows: usize, want: &str| {
        let mut logits = vec![0f32; rows * nv];
        let err = e
            .model
            .step(plan, &mut e.pool, &mut e.st, &mut logits)
            .unwrap_err();
        assert!(err.to_string().contains(want), "{err} (want {want})");
        assert!(snapshot(&e) == before, "{want}: the cache changed");
    };
    // More tokens than the step holds.
    let big = seq.clone();
    let mut p = BatchPlan::new(BLOCK);
    p.push(&big, &ids[..5], 0, Logits::Last).unwrap();
    check(&p, 1, "step plan has 5 tokens, the step was sized for 4");
    // A block table pointing outside the pool.
    let forged = SeqCache {
        blocks: vec![9],
        len: 0,
    };
    let mut p = BatchPlan::new(BLOCK);
    p.push(&forged, &ids[..1], 0, Logits::Last).unwrap();
    check(&p, 1, "block table names block 9, the pool has 4");
    // A token id past the vocabulary.
    let mut p = BatchPlan::new(BLOCK);
    p.push(&seq, &[nv as u32], 4, Logits::Last).unwrap();
    check(&p, 1, "out of range");
    // Pool exhaustion is an error the caller can act on, and changes nothing either.
    let mut other = SeqCache::default();
    let err = e.pool.reserve(&mut other, 5 * BLOCK).unwrap_err();
    assert!(err.to_string().contains("KV pool exhausted"), "{err}");
    assert_eq!(other, SeqCache::default());
    // The single-sequence API: a failing call leaves the cached length as it was.
    let mut m = Glm5::load(&g, CpuBackend::new(), 8).unwrap();
    m.forward(&ids[..3], 0).unwrap();
    let e2 = m.forward(&[1; 6], 3).unwrap_err();
    assert!(matches!(e2, ModelError::ContextOverflow { .. }), "{e2}");
    assert_eq!(m.cache_len(), 3);
}
