//! End-to-end: our forward pass on the tiny random GLM-5 fixtures against Hugging Face
//! transformers' fp32 logits (fixtures/glm5/reference.json + *.logits.npy, written by
//! fixtures/make_glm5_fixtures.py), and greedy continuations against transformers' greedy
//! decoding.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{
    argmax, case_gguf, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference,
    usizes_of,
};
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::Value;

struct CaseResult {
    name: String,
    n_tokens: usize,
    max_err: f32,
    range: f32,
}

fn run_case(model: &mut Glm5<'_, CpuBackend>, case: &Value, dir: &Path) -> CaseResult {
    let name = case["name"].as_str().unwrap().to_string();
    let ids = ids_of(&case["ids"]);
    let positions = usizes_of(&case["logit_positions"]);
    let (shape, want) = read_npy_f32(&dir.join(case["logits_file"].as_str().unwrap()));
    let nv = model.config().n_vocab;
    assert_eq!(shape, vec![positions.len(), nv], "{name}: logits shape");

    model.reset();
    let got = model.forward(&ids, 0).unwrap();
    assert_eq!(got.len(), ids.len() * nv);
    let range = logit_range(&want);
    let mut max_err = 0f32;
    for (row, &p) in positions.iter().enumerate() {
        let w = &want[row * nv..(row + 1) * nv];
        let g = &got[p * nv..(p + 1) * nv];
        max_err = max_err.max(max_abs_diff(w, g));
        assert_eq!(
            argmax(g),
            argmax(w),
            "{name}: argmax differs at position {p}"
        );
    }
    assert!(
        max_err <= 1e-3 * range,
        "{name}: max abs logit error {max_err} > 1e-3 of the logit range {range}"
    );

    // Greedy continuation through the KV cache, one token at a time.
    let want_new = ids_of(&case["greedy_new_tokens"]);
    let mut next = argmax(&got[(ids.len() - 1) * nv..]) as u32;
    let mut new = vec![next];
    while new.len() < want_new.len() {
        let l = model.forward_last(&[next], model.cache_len()).unwrap();
        next = argmax(&l) as u32;
        new.push(next);
    }
    assert_eq!(new, want_new, "{name}: greedy continuation differs");
    CaseResult {
        name,
        n_tokens: ids.len(),
        max_err,
        range,
    }
}

#[test]
fn logits_and_greedy_match_transformers() {
    let dir = fixture_dir();
    let reference = reference();
    let mut files: HashMap<String, Gguf> = HashMap::new();
    for (key, m) in reference["models"].as_object().unwrap() {
        let g = Gguf::open(dir.join(m["gguf"].as_str().unwrap())).unwrap();
        files.insert(key.clone(), g);
    }
    let mut results = Vec::new();
    for case in reference["cases"].as_array().unwrap() {
        let gguf = &files[case["model"].as_str().unwrap()];
        let mut model = Glm5::load(gguf, CpuBackend::new(), 4096).unwrap();
        let r = run_case(&mut model, case, &dir);
        eprintln!(
            "{:>14}: {:>5} tokens, max |Δlogit| {:.3e} (range {:.2}, ratio {:.2e})",
            r.name,
            r.n_tokens,
            r.max_err,
            r.range,
            r.max_err / r.range
        );
        results.push(r);
    }
    assert!(
        results.iter().any(|r| r.n_tokens > 2048),
        "no long case ran"
    );
}

/// The long prompt fed as a 2000-token prefill followed by one-token decode steps through the
/// cache (crossing the point where the indexer starts dropping keys) must give transformers'
/// logits at every stored position, like the single batched prefill does.
#[test]
fn long_prompt_decoded_token_by_token_matches_transformers() {
    let dir = fixture_dir();
    let reference = reference();
    let case = common::case(&reference, "long");
    let gguf = Gguf::open(case_gguf(&reference, case)).unwrap();
    let mut model = Glm5::load(&gguf, CpuBackend::new(), 4096).unwrap();
    let nv = model.config().n_vocab;
    let ids = ids_of(&case["ids"]);
    let positions = usizes_of(&case["logit_positions"]);
    let (_, want) = read_npy_f32(&dir.join(case["logits_file"].as_str().unwrap()));
    let range = logit_range(&want);
    let split = 2000;
    let mut got = model.forward(&ids[..split], 0).unwrap();
    for p in split..ids.len() {
        got.extend(model.forward(&ids[p..p + 1], p).unwrap());
    }
    let mut max_err = 0f32;
    for (row, &p) in positions.iter().enumerate() {
        let w = &want[row * nv..(row + 1) * nv];
        let g = &got[p * nv..(p + 1) * nv];
        max_err = max_err.max(max_abs_diff(w, g));
        assert_eq!(argmax(g), argmax(w), "argmax differs at position {p}");
    }
    eprintln!("long, prefill 2000 + decode: max |Δlogit| {max_err:.3e} (range {range:.2})");
    assert!(max_err <= 1e-3 * range, "max abs logit error {max_err}");
}
