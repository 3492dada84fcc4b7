//! Malformed models and bad calls give clear errors, never panics. The malformed GGUFs are the
//! tiny fixture rewritten with glint-gguf's writer, minus one tensor / with one wrong shape /
//! with an unknown architecture.

use std::path::{Path, PathBuf};

use glint_gguf::{write_gguf, Gguf, TensorSpec, Value};
use glm5_model::{CpuBackend, Glm5, ModelError};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5/glm5-tiny-f32.gguf")
}

/// Rewrites the fixture through `edit_meta` / `edit_tensor` (return None to drop a tensor).
fn rewrite(
    out: &Path,
    edit_meta: impl Fn(&mut Vec<(String, Value)>),
    edit_tensor: impl Fn(&TensorSpec) -> Option<TensorSpec>,
) {
    let src = Gguf::open(fixture()).unwrap();
    let mut meta: Vec<(String, Value)> = src.metadata().entries().to_vec();
    edit_meta(&mut meta);
    let mut owned: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for t in src.tensors() {
        let spec = TensorSpec {
            name: t.name.clone(),
            ty: t.ty,
            dims: t.dims.clone(),
        };
        if let Some(new) = edit_tensor(&spec) {
            let data = src.tensor_data(t);
            let n_bytes = new.ty.row_bytes(new.dims[0]).unwrap() as usize
                * new.dims[1..].iter().product::<u64>() as usize;
            let mut bytes = data.to_vec();
            bytes.resize(n_bytes, 0);
            owned.push((new, bytes));
        }
    }
    let refs: Vec<(TensorSpec, &[u8])> = owned
        .iter()
        .map(|(s, b)| (s.clone(), b.as_slice()))
        .collect();
    write_gguf(out, &meta, &refs).unwrap();
}

fn load_err(path: &Path) -> ModelError {
    let g = Gguf::open(path).unwrap();
    match Glm5::load(&g, CpuBackend::new(), 64) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e,
    }
}

#[test]
fn missing_tensor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("missing.gguf");
    rewrite(
        &p,
        |_| {},
        |t| (t.name != "blk.2.attn_k_b.weight").then(|| t.clone()),
    );
    let e = load_err(&p);
    assert!(
        matches!(&e, ModelError::MissingTensor { name } if name == "blk.2.attn_k_b.weight"),
        "{e}"
    );
    assert!(e.to_string().contains("blk.2.attn_k_b.weight"));
}

#[test]
fn wrong_shape_is_named_with_both_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("shape.gguf");
    rewrite(
        &p,
        |_| {},
        |t| {
            let mut t = t.clone();
            if t.name == "blk.1.ffn_up_exps.weight" {
                t.dims[1] += 1;
            }
            Some(t)
        },
    );
    let e = load_err(&p);
    let msg = e.to_string();
    assert!(matches!(e, ModelError::Shape { .. }), "{msg}");
    assert!(msg.contains("blk.1.ffn_up_exps.weight"), "{msg}");
    assert!(
        msg.contains("[64, 24, 8]") && msg.contains("[64, 25, 8]"),
        "{msg}"
    );
}

#[test]
fn unsupported_weight_type_is_named() {
    // I32 has the same 4-byte size as F32, so only the declared type is wrong.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("type.gguf");
    rewrite(
        &p,
        |_| {},
        |t| {
            let mut t = t.clone();
            if t.name == "blk.0.attn_q_b.weight" {
                t.ty = glint_gguf::GgmlType::I32;
            }
            Some(t)
        },
    );
    let e = load_err(&p);
    let msg = e.to_string();
    assert!(matches!(e, ModelError::UnsupportedType { .. }), "{msg}");
    assert!(
        msg.contains("blk.0.attn_q_b.weight") && msg.contains("I32"),
        "{msg}"
    );
}

#[test]
fn unknown_architecture_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("arch.gguf");
    rewrite(
        &p,
        |m| {
            for (k, v) in m.iter_mut() {
                if k == "general.architecture" {
                    *v = Value::String("llama".into());
                }
            }
        },
        |t| Some(t.clone()),
    );
    let e = load_err(&p);
    assert!(
        matches!(&e, ModelError::UnknownArch { arch } if arch == "llama"),
        "{e}"
    );
}

#[test]
fn prompt_past_the_context_is_an_error() {
    let g = Gguf::open(fixture()).unwrap();
    let mut m = Glm5::load(&g, CpuBackend::new(), 8).unwrap();
    let e = m.forward(&[1; 9], 0).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextOverflow {
                needed: 9,
                ctx_len: 8
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("context"), "{e}");
    // Filling the context exactly works; one more decode step is refused, cache untouched.
    m.forward(&[1; 8], 0).unwrap();
    let e = m.forward_last(&[2], 8).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextOverflow {
                needed: 9,
                ctx_len: 8
            }
        ),
        "{e}"
    );
    assert_eq!(m.cache_len(), 8);
}

#[test]
fn bad_tokens_and_positions_are_errors() {
    let g = Gguf::open(fixture()).unwrap();
    let mut m = Glm5::load(&g, CpuBackend::new(), 16).unwrap();
    let nv = m.config().n_vocab as u32;
    assert!(matches!(
        m.forward(&[nv], 0).unwrap_err(),
        ModelError::TokenOutOfRange { .. }
    ));
    assert!(matches!(
        m.forward(&[], 0).unwrap_err(),
        ModelError::EmptyBatch
    ));
    assert!(matches!(
        m.forward(&[1], 3).unwrap_err(),
        ModelError::Gap { .. }
    ));
}

#[test]
fn a_cache_too_large_for_memory_is_an_error_naming_its_size() {
    let g = Gguf::open(fixture()).unwrap();
    // 2^40 tokens of the fixture's latent rows: petabytes.
    let e = match Glm5::load(&g, CpuBackend::new(), 1 << 40) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a 2^40-token cache was allocated"),
    };
    assert!(e.contains("cannot allocate KV cache"), "{e}");
    let c = glm5_model::Config::from_gguf(&g).unwrap();
    let rows = (1u128 << 40) * (c.kv_lora + c.rope_dim) as u128 * 4;
    assert!(e.contains(&rows.to_string()), "{e} (expected {rows} bytes)");
}
