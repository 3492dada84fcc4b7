//! glint against llama.cpp on the llama.cpp-compatible tiny GLM-5 (fixtures/glm5/llamacpp/), in
//! F32 and in glint-quantized Q8_0 / Q4_0 variants. llama.cpp (llama-cpp-python 0.3.36, ggml
//! 0.25.3, built for AVX2, F32 KV caches) is an engine independent of ours — own kernels, own
//! activation quantization, own MLA/DSA graph — so for quantized files, where transformers has no
//! output, it is the reference. Model: fixtures/make_glm5_lc_model.py; logits:
//! fixtures/make_llamacpp_refs.py; hidden states between sublayers: fixtures/make_llamacpp_taps.py.
//!
//! # Why the quantized comparison is teacher-forced
//! Both engines quantize every matmul input to Q8_0 (per 32 elements, `round(x·127/amax)`). Where
//! an element sits within ~1e-4 of a step of a rounding boundary, an ulp of difference upstream
//! (another summation order, another `exp`) rounds it to the neighbouring step; that changes its
//! row by ~1e-3..1e-2 and, through the latent cache, every later position that attends to it.
//! On a whole forward pass that is unbounded in principle (the split position and how far it
//! spreads depend on the kernel family: the AVX2 run of q8_0/medium parts at position 11 and
//! loses 9% of the argmaxes, the AVX-512 run parts at 11 too but keeps them), so the old test's
//! whole-pass bounds (0.3 / 0.05 / 0.4 of the logit range) could neither hold on every CPU nor
//! catch a real bug.
//!
//! Here each sublayer is compared alone: glint's hidden state is overwritten with llama.cpp's at
//! each sublayer boundary (`ffn_inp-L`, `l_out-L`) through [`Glm5::forward_tapped`], so a
//! sublayer row of glint sees exactly llama.cpp's inputs, and the latent cache holds rows
//! computed from them. Every row must then agree to float-summation level, except rows listed
//! in [`ATTENTION_TIES`] — each one named, with the llama.cpp tensor whose element lies on a
//! rounding boundary and by how much (measured from llama.cpp's own intermediate tensors with
//! `fixtures/make_llamacpp_taps.py --ties`). A row beyond the bound that is not listed fails.
//!
//! # What is bit for bit
//! With `GLINT_CPU_KERNEL=avx2`, glint's Q8_0 × Q8_0 kernel runs the same computation as
//! llama.cpp's AVX2 build: the same activation bytes, the same integer sums, the same per-block
//! float order; F32 matmuls follow tinyBLAS's lane order (`glint_quant::dot::dot_f32_ordered`).
//! So on that kernel the q8_0 dense layer's FFN and the q8_0 logits are asserted bit-identical.
//! Not bit-identical, and held to the summation-order bound: the MoE layers (measured 1-2 ulp on
//! a few rows: the router/combination path, not yet traced), glint's AVX2 Q4_0 kernel (it sums two
//! blocks per step), the scalar kernels (ggml's generic C order) and AVX-512 (16 lanes).

mod common;

use common::{argmax, fixture_dir, ids_of, logit_range, max_abs_diff, read_json, read_npy_f32};
use glint_gguf::Gguf;
use glint_quant::dot::{isa, Isa};
use glm5_model::{Backend, Glm5, Tap};

/// Summation-order bound on one hidden-state row (|values| up to ~8) or one logit row, absolute.
/// Measured (teacher-forced, every kernel family, every case): hidden rows <= 1.07e-6, logit rows
/// <= 1.91e-6. 4e-6 is about 2x that and ~1000x below what one flipped Q8_0 step does (>= 6e-4).
const ORDER_BOUND: f32 = 4e-6;

/// Bound on a row listed in [`ATTENTION_TIES`]: one element rounded to the neighbouring Q8_0
/// step. Measured 6.2e-4 .. 2.54e-2 (q4_0/medium L0 row 104, a `qr` element exactly on a
/// boundary); a kernel bug, not a flipped step, moves rows by far more.
const TIE_BOUND: f32 = 3e-2;

/// Attention sublayer rows where llama.cpp's inputs to one of the attention's quantized matmuls
/// hold an element within the given fraction of a Q8_0 step from a rounding boundary:
/// (variant, case, layer, row, llama.cpp tensor, margin in steps). Which of them flip depends on
/// the kernel family's summation order; the test prints those that did.
const ATTENTION_TIES: &[(&str, &str, usize, usize, &str, f32)] = &[
    ("q8_0", "medium", 0, 22, "qr (attn_q_b input)", 3.8e-6),
    (
        "q8_0",
        "medium",
        0,
        11,
        "kqv_mla (attn_output input)",
        8.5e-4,
    ),
    ("q8_0", "medium", 2, 134, "kqv (attn_v_b input)", 7.6e-6),
    (
        "q8_0",
        "medium",
        3,
        12,
        "kqv_mla (attn_output input)",
        5.5e-4,
    ),
    // Flips under the CUDA backend's order (H200): margin from `make_llamacpp_taps.py --ties`.
    ("q8_0", "medium", 3, 142, "kqv (attn_v_b input)", 1.5e-5),
    ("q8_0", "chat", 2, 29, "kqv (attn_v_b input)", 1.9e-6),
    ("q4_0", "chat", 0, 17, "q_nope (attn_k_b input)", 6.1e-4),
    ("q4_0", "chat", 1, 26, "q_nope (attn_k_b input)", 7.6e-6),
    ("q4_0", "medium", 0, 90, "kqv (attn_v_b input)", 1.5e-4),
    ("q4_0", "medium", 0, 104, "qr (attn_q_b input)", 0.0),
    ("q4_0", "medium", 0, 140, "kqv (attn_v_b input)", 1.5e-5),
    ("q4_0", "medium", 3, 132, "kqv (attn_v_b input)", 3.8e-6),
];

const CASES: &[&str] = &["short", "chat", "medium"];

/// The CPU backend's indexer selections per layer on llama.cpp's teacher-forced inputs.
fn cpu_selections(
    gguf: &Gguf,
    ids: &[u32],
    taps: &[f32],
    nl: usize,
    n: usize,
    d: usize,
) -> Vec<Option<Vec<u32>>> {
    let mut m = Glm5::load(gguf, glm5_model::CpuBackend::new(), 256).unwrap();
    m.record_selections(true);
    m.forward_tapped(ids, 0, &mut |tap, l, h| {
        let k = match tap {
            Tap::FfnInput => 1,
            Tap::LayerOutput => 3,
        };
        h.copy_from_slice(&taps[(k * nl + l) * n * d..(k * nl + l + 1) * n * d]);
    })
    .unwrap();
    m.selections().to_vec()
}

/// Layers whose FFN is dense (`leading_dense_block_count` of the fixture).
const DENSE_LAYERS: usize = 1;

fn model_path(variant: &str) -> std::path::PathBuf {
    fixture_dir()
        .join("llamacpp")
        .join(format!("glm5-tiny-lc-{variant}.gguf"))
}

per_backend!(
    quantized_sublayers_teacher_forced_match_llamacpp,
    teacher_forced
);
fn teacher_forced<B: Backend>(backend: impl Fn() -> B) {
    let lc = fixture_dir().join("llamacpp");
    let reference = common::reference();
    let kernel = isa();
    // The bit-exact claims are the CPU AVX2 kernels' (llama.cpp's summation order); another
    // backend is held to the order-independent bounds only.
    let backend_name = backend().name();
    let same_order_as_llamacpp = kernel == Isa::Avx2 && backend_name == "cpu";
    eprintln!("kernel family {kernel:?} (bit-exact checks: {same_order_as_llamacpp})");
    let mut ties_seen = Vec::new();
    for variant in ["q8_0", "q4_0"] {
        let gguf = Gguf::open(model_path(variant)).unwrap();
        for &case in CASES {
            let mut model = Glm5::load(&gguf, backend(), 256).unwrap();
            let ids = ids_of(&common::case(&reference, case)["ids"]);
            let (shape, taps) = read_npy_f32(&lc.join(format!("{variant}.{case}.taps.npy")));
            // [kind, layer, token, d_model], kinds attn_norm, ffn_inp, ffn_norm, l_out.
            let (nl, n, d) = (shape[1], shape[2], shape[3]);
            assert_eq!(
                (shape[0], n),
                (4, ids.len()),
                "{variant}/{case}: taps shape"
            );
            let at = |k: usize, l: usize| &taps[(k * nl + l) * n * d..(k * nl + l + 1) * n * d];
            let mut failures = Vec::new();
            // Attention rows over the order bound on a non-CPU backend, checked below against
            // the indexer's decisions: (layer, row, |Δ|).
            let mut over = Vec::new();
            model.record_selections(!same_order_as_llamacpp && model.backend().name() != "cpu");
            let got = model
                .forward_tapped(&ids, 0, &mut |tap, l, h| {
                    let (k, what) = match tap {
                        Tap::FfnInput => (1, "attention"),
                        Tap::LayerOutput => (3, "ffn"),
                    };
                    let want = at(k, l);
                    for r in 0..n {
                        let e = max_abs_diff(&h[r * d..(r + 1) * d], &want[r * d..(r + 1) * d]);
                        let tie = ATTENTION_TIES.iter().find(|t| {
                            (t.0, t.1, t.2, t.3) == (variant, case, l, r) && tap == Tap::FfnInput
                        });
                        let exact = same_order_as_llamacpp
                            && variant == "q8_0"
                            && what == "ffn"
                            && l < DENSE_LAYERS;
                        if exact && e != 0.0 {
                            failures.push(format!(
                                "layer {l} dense ffn row {r}: |Δ| {e:e}, expected bit-identical on AVX2"
                            ));
                        } else if e > ORDER_BOUND {
                            match tie {
                                _ if tie.is_none() && what == "attention" && e <= TIE_BOUND
                                    && backend_name != "cpu" =>
                                {
                                    over.push((l, r, e))
                                }
                                Some(t) if e <= TIE_BOUND => ties_seen.push(format!(
                                    "{variant}/{case} layer {l} row {r}: |Δ| {e:.2e} from {} (margin {:.1e} step)",
                                    t.4, t.5
                                )),
                                _ => failures.push(format!(
                                    "layer {l} {what} row {r}: |Δ| {e:e} > {}",
                                    if tie.is_some() { TIE_BOUND } else { ORDER_BOUND }
                                )),
                            }
                        }
                    }
                    h.copy_from_slice(want);
                })
                .unwrap();
            if !over.is_empty() {
                // Rows of another backend past the order bound are explained only by a flipped
                // indexer decision: its top-k set for that row differs from the CPU backend's
                // on the same teacher-forced inputs (a near-tie in the scores: the order of
                // the sums decides it). Anything else is a failure.
                let cpu = cpu_selections(&gguf, &ids, &taps, nl, n, d);
                let mine = model.selections().to_vec();
                for (l, r, e) in over {
                    let set = |s: &Option<Vec<u32>>| {
                        s.as_ref().map(|v| {
                            let k = v.len() / n;
                            let mut x: Vec<u32> = v[r * k..(r + 1) * k]
                                .iter()
                                .copied()
                                .filter(|&t| t as usize <= r)
                                .collect();
                            x.sort_unstable();
                            x
                        })
                    };
                    let (a, b) = (set(&mine[l]), set(&cpu[l]));
                    if a != b {
                        let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                        let swapped = a.iter().filter(|t| !b.contains(t)).count();
                        ties_seen.push(format!(
                            "{variant}/{case} layer {l} row {r}: |Δ| {e:.2e} from the indexer's top-k ({swapped} of {} keys differ from the CPU's)",
                            a.len()
                        ));
                    } else {
                        failures.push(format!(
                            "layer {l} attention row {r}: |Δ| {e:e} > {ORDER_BOUND}, same indexer selection as the CPU"
                        ));
                    }
                }
            }
            let (_, want) = read_npy_f32(&lc.join(format!("{variant}.{case}.logits.npy")));
            let nv = want.len() / n;
            for r in 0..n {
                let e = max_abs_diff(&got[r * nv..(r + 1) * nv], &want[r * nv..(r + 1) * nv]);
                let exact = same_order_as_llamacpp && variant == "q8_0";
                if (exact && e != 0.0) || e > ORDER_BOUND {
                    failures.push(format!(
                        "logits row {r}: |Δ| {e:e} (bit-identical expected: {exact})"
                    ));
                }
            }
            assert!(
                failures.is_empty(),
                "{variant}/{case} on {kernel:?}, teacher-forced against llama.cpp:\n  {}",
                failures.join("\n  ")
            );
        }
    }
    eprintln!("documented near-ties that flipped on {kernel:?}:");
    for t in &ties_seen {
        eprintln!("  {t}");
    }
}

// F32 weights: no activation quantization, so no rounding boundaries; the whole forward pass
// (not teacher-forced) is compared. llama.cpp F32 vs transformers is <= 2.6e-5 absolute
// (manifest `f32_vs_hf`); glint vs llama.cpp measured <= 1.91e-5 on every kernel family (the
// remaining difference is attention's exp and softmax order). Bound 4e-5, same argmax everywhere.
per_backend!(f32_whole_pass_matches_llamacpp, f32_whole_pass);
fn f32_whole_pass<B: Backend>(backend: impl Fn() -> B) {
    const BOUND: f32 = 4e-5;
    let lc = fixture_dir().join("llamacpp");
    let manifest = read_json(&lc.join("manifest.json"));
    let reference = common::reference();
    let gguf = Gguf::open(model_path("f32")).unwrap();
    for &case in CASES {
        let f = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["variant"] == "f32" && f["case"] == case)
            .unwrap_or_else(|| panic!("manifest has no f32/{case} logits"));
        let mut model = Glm5::load(&gguf, backend(), 256).unwrap();
        let nv = model.config().n_vocab;
        let ids = ids_of(&common::case(&reference, case)["ids"]);
        let (shape, want) = read_npy_f32(&lc.join(f["logits_file"].as_str().unwrap()));
        assert_eq!(shape, vec![ids.len(), nv], "f32/{case}: logits shape");
        let got = model.forward(&ids, 0).unwrap();
        let e = max_abs_diff(&got, &want);
        eprintln!(
            "f32/{case}: max |Δ| {e:.3e} (range {:.2})",
            logit_range(&want)
        );
        assert!(e <= BOUND, "f32/{case}: max |Δlogit| {e} > {BOUND}");
        for r in 0..ids.len() {
            let (g, w) = (&got[r * nv..(r + 1) * nv], &want[r * nv..(r + 1) * nv]);
            assert_eq!(argmax(g), argmax(w), "f32/{case}: argmax at position {r}");
        }
    }
}
