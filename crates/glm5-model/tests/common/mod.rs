//! Shared helpers for the integration tests that compare against the tiny GLM-5 fixtures
//! (fixtures/glm5/, written by fixtures/make_glm5_fixtures.py and friends): the fixture paths,
//! reference.json lookups, a .npy reader and logit comparisons. Each test binary uses a subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Declares the test `$name` once per backend, from one generic body
/// `fn $body<B: Backend>(backend: impl Fn() -> B)`: `$name::cpu` always, `$name::cuda` when the
/// crate is built with `--features cuda` (device 0; `scripts/cuda-tests.sh` on a GPU machine).
/// The CUDA variant exists only under the feature, so a machine without a GPU skips nothing.
#[macro_export]
macro_rules! per_backend {
    ($name:ident, $body:ident) => {
        mod $name {
            #[test]
            fn cpu() {
                super::$body(glm5_model::CpuBackend::new)
            }
            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() {
                super::$body(|| glint_cuda::CudaBackend::new(0).expect("CUDA device 0"))
            }
        }
    };
}

use serde_json::Value;

/// fixtures/glm5 of this checkout, or of `$GLINT_REPO` (test binaries built here and run from
/// another checkout, e.g. on a GPU machine: scripts/cuda-tests.sh).
pub fn fixture_dir() -> PathBuf {
    match std::env::var_os("GLINT_REPO") {
        Some(root) => PathBuf::from(root).join("fixtures/glm5"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5"),
    }
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// fixtures/glm5/reference.json: transformers' ids, logits files and greedy tokens per case.
pub fn reference() -> Value {
    read_json(&fixture_dir().join("reference.json"))
}

/// The case called `name` in reference.json.
pub fn case<'r>(reference: &'r Value, name: &str) -> &'r Value {
    reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("case {name} not in reference.json"))
}

/// The GGUF path of the model a case runs on.
pub fn case_gguf(reference: &Value, case: &Value) -> PathBuf {
    let file = reference["models"][case["model"].as_str().unwrap()]["gguf"]
        .as_str()
        .unwrap();
    fixture_dir().join(file)
}

pub fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn usizes_of(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// Minimal .npy reader for little-endian C-order arrays of 4-byte elements (`<f4`, `<i4`: the
/// only kinds the fixture scripts write); returns (shape, raw 4-byte words).
pub fn read_npy(path: &Path, descr: &str) -> (Vec<usize>, Vec<[u8; 4]>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not an npy file", path.display());
    let (hlen, hstart) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[hstart..hstart + hlen]).unwrap();
    assert!(header.contains(&format!("'descr': '{descr}'")), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let s = header.split("'shape': (").nth(1).unwrap();
    let shape: Vec<usize> = s[..s.find(')').unwrap()]
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse().unwrap())
        .collect();
    let words: Vec<[u8; 4]> = b[hstart + hlen..]
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect();
    assert_eq!(words.len(), shape.iter().product::<usize>());
    (shape, words)
}

/// [`read_npy`] of a `<f4` array.
pub fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let (shape, words) = read_npy(path, "<f4");
    (shape, words.into_iter().map(f32::from_le_bytes).collect())
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// First index of the maximum (ties go to the lowest index, like numpy.argmax).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// max - min of the reference logits: tolerances are fractions of it, so they scale with the
/// model's logit magnitudes instead of being absolute.
pub fn logit_range(want: &[f32]) -> f32 {
    want.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - want.iter().copied().fold(f32::INFINITY, f32::min)
}

/// Largest |a - b| over the pairs.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

use glint_gguf::{write_gguf, Gguf, TensorSpec, Value as GgufValue};

/// Rewrites the GLM-5 fixture as a deepseek2 file (no indexer), with its `attn_k_b`/`attn_v_b`
/// re-fused into the legacy head-major `attn_kv_b` when `fused`.
pub fn write_deepseek2(src: &Gguf, out: &Path, fused: bool) {
    let md = src.metadata();
    let u = |k: &str| md.get_u64(&format!("glm-dsa.{k}")).unwrap() as usize;
    let (h, kvl, qk, v, rope) = (
        u("attention.head_count"),
        u("attention.kv_lora_rank"),
        u("attention.key_length_mla"),
        u("attention.value_length_mla"),
        u("rope.dimension_count"),
    );
    let nope = qk - rope;
    let meta: Vec<(String, GgufValue)> = md
        .entries()
        .iter()
        .filter(|(k, _)| !k.contains(".indexer."))
        .map(|(k, val)| {
            if k == "general.architecture" {
                (k.clone(), GgufValue::String("deepseek2".into()))
            } else if let Some(rest) = k.strip_prefix("glm-dsa.") {
                (format!("deepseek2.{rest}"), val.clone())
            } else {
                (k.clone(), val.clone())
            }
        })
        .collect();
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for t in src.tensors() {
        if t.name.contains(".indexer.") || fused && t.name.ends_with("attn_v_b.weight") {
            continue;
        }
        if let Some(prefix) = t.name.strip_suffix("attn_k_b.weight").filter(|_| fused) {
            // Head-major fused kv_b: per head [W_UK_h (nope rows); W_UV_h (v rows)], rows of kvl.
            let kb = f32s(src.tensor_data(t)); // {nope, kvl, h}: W_UK_h[j][c] at j + nope·(c + kvl·h)
            let vb = f32s(
                src.tensor_bytes(&format!("{prefix}attn_v_b.weight"))
                    .unwrap()
                    .1,
            ); // {kvl, v, h}
            let mut kv = Vec::with_capacity(h * (nope + v) * kvl);
            for hh in 0..h {
                for j in 0..nope {
                    kv.extend((0..kvl).map(|c| kb[j + nope * (c + kvl * hh)]));
                }
                for j in 0..v {
                    kv.extend((0..kvl).map(|c| vb[c + kvl * (j + v * hh)]));
                }
            }
            tensors.push((
                TensorSpec {
                    name: format!("{prefix}attn_kv_b.weight"),
                    ty: t.ty,
                    dims: vec![kvl as u64, (h * (nope + v)) as u64],
                },
                kv.iter().flat_map(|f| f.to_le_bytes()).collect(),
            ));
            continue;
        }
        tensors.push((
            TensorSpec {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.clone(),
            },
            src.tensor_data(t).to_vec(),
        ));
    }
    let refs: Vec<(TensorSpec, &[u8])> = tensors.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    write_gguf(out, &meta, &refs).unwrap();
}

/// Rewrites `src` with each MoE layer's `ffn_gate_exps`/`ffn_up_exps` fused into one
/// `ffn_gate_up_exps` (per expert its gate rows, then its up rows, as newer llama.cpp files
/// store them); returns how many layers were fused.
pub fn write_fused_gate_up(src: &Gguf, out: &Path) -> usize {
    let mut owned: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    let mut n_fused = 0;
    for t in src.tensors() {
        if t.name.ends_with("ffn_up_exps.weight") {
            continue;
        }
        if let Some(prefix) = t.name.strip_suffix("ffn_gate_exps.weight") {
            let (cols, rows, ne) = (t.dims[0] as usize, t.dims[1] as usize, t.dims[2] as usize);
            let gate = src.tensor_data(t);
            let up = src
                .tensor_bytes(&format!("{prefix}ffn_up_exps.weight"))
                .unwrap()
                .1;
            let slab = rows * cols * 4;
            let mut fused = Vec::with_capacity(2 * gate.len());
            for e in 0..ne {
                fused.extend_from_slice(&gate[e * slab..(e + 1) * slab]);
                fused.extend_from_slice(&up[e * slab..(e + 1) * slab]);
            }
            owned.push((
                TensorSpec {
                    name: format!("{prefix}ffn_gate_up_exps.weight"),
                    ty: t.ty,
                    dims: vec![cols as u64, 2 * rows as u64, ne as u64],
                },
                fused,
            ));
            n_fused += 1;
            continue;
        }
        owned.push((
            TensorSpec {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.clone(),
            },
            src.tensor_data(t).to_vec(),
        ));
    }
    let refs: Vec<(TensorSpec, &[u8])> = owned.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    write_gguf(out, src.metadata().entries(), &refs).unwrap();
    n_fused
}
