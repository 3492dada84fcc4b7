//! End-to-end: our forward pass on the tiny random GLM-5 fixtures against Hugging Face
//! transformers' fp32 logits (fixtures/glm5/reference.json + *.logits.npy, written by
//! fixtures/make_glm5_fixtures.py), and greedy continuations against transformers' greedy
//! decoding.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5")
}

/// Minimal .npy reader for little-endian f32 C-order arrays (the only kind the fixture writes).
fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not an npy file", path.display());
    let (hlen, hstart) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[hstart..hstart + hlen]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let s = header.split("'shape': (").nth(1).unwrap();
    let shape: Vec<usize> = s[..s.find(')').unwrap()]
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse().unwrap())
        .collect();
    let data: Vec<f32> = b[hstart + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

struct CaseResult {
    name: String,
    n_tokens: usize,
    max_err: f32,
    range: f32,
}

fn run_case(model: &mut Glm5<'_, CpuBackend>, case: &Value, dir: &Path) -> CaseResult {
    let name = case["name"].as_str().unwrap().to_string();
    let ids = ids_of(&case["ids"]);
    let positions: Vec<usize> = case["logit_positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let (shape, want) = read_npy_f32(&dir.join(case["logits_file"].as_str().unwrap()));
    let nv = model.config().n_vocab;
    assert_eq!(shape, vec![positions.len(), nv], "{name}: logits shape");

    model.reset();
    let got = model.forward(&ids, 0).unwrap();
    assert_eq!(got.len(), ids.len() * nv);
    let lo = want.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = want.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let range = hi - lo;
    let mut max_err = 0f32;
    for (row, &p) in positions.iter().enumerate() {
        let w = &want[row * nv..(row + 1) * nv];
        let g = &got[p * nv..(p + 1) * nv];
        let err = w
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        max_err = max_err.max(err);
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
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
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
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let case = reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "long")
        .expect("long case");
    let gguf = Gguf::open(
        dir.join(
            reference["models"][case["model"].as_str().unwrap()]["gguf"]
                .as_str()
                .unwrap(),
        ),
    )
    .unwrap();
    let mut model = Glm5::load(&gguf, CpuBackend::new(), 4096).unwrap();
    let nv = model.config().n_vocab;
    let ids = ids_of(&case["ids"]);
    let positions: Vec<usize> = case["logit_positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let (_, want) = read_npy_f32(&dir.join(case["logits_file"].as_str().unwrap()));
    let range = want.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - want.iter().copied().fold(f32::INFINITY, f32::min);
    let split = 2000;
    let mut got = model.forward(&ids[..split], 0).unwrap();
    for p in split..ids.len() {
        got.extend(model.forward(&ids[p..p + 1], p).unwrap());
    }
    let mut max_err = 0f32;
    for (row, &p) in positions.iter().enumerate() {
        let w = &want[row * nv..(row + 1) * nv];
        let g = &got[p * nv..(p + 1) * nv];
        max_err = w
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(max_err, f32::max);
        assert_eq!(argmax(g), argmax(w), "argmax differs at position {p}");
    }
    eprintln!("long, prefill 2000 + decode: max |Δlogit| {max_err:.3e} (range {range:.2})");
    assert!(max_err <= 1e-3 * range, "max abs logit error {max_err}");
}
