//! The `deepseek2` path (MLA + MoE, no indexer) and the legacy fused `attn_kv_b` tensor, checked
//! against transformers: the tiny GLM-5 fixture is rewritten as a deepseek2 file whose
//! `attn_k_b`/`attn_v_b` are re-fused into one head-major `attn_kv_b`. For a prompt shorter than
//! `index_topk` (2048) DSA selects every key, so transformers' GLM-5 logits for that prompt are
//! also the exact reference for the dense deepseek2 model.

mod common;

use std::path::Path;

use common::{case, f32s, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference};
use glint_gguf::{write_gguf, Gguf, TensorSpec, Value};
use glm5_model::{Arch, CpuBackend, Glm5};

/// Rewrites the GLM-5 fixture as a deepseek2 file with fused `attn_kv_b` tensors.
fn write_deepseek2(src: &Gguf, out: &Path) {
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
    let meta: Vec<(String, Value)> = md
        .entries()
        .iter()
        .filter(|(k, _)| !k.contains(".indexer."))
        .map(|(k, val)| {
            if k == "general.architecture" {
                (k.clone(), Value::String("deepseek2".into()))
            } else if let Some(rest) = k.strip_prefix("glm-dsa.") {
                (format!("deepseek2.{rest}"), val.clone())
            } else {
                (k.clone(), val.clone())
            }
        })
        .collect();
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for t in src.tensors() {
        if t.name.contains(".indexer.") || t.name.ends_with("attn_v_b.weight") {
            continue;
        }
        if let Some(prefix) = t.name.strip_suffix("attn_k_b.weight") {
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

#[test]
fn deepseek2_with_fused_kv_b_matches_transformers_dense() {
    let d = fixture_dir();
    let reference = reference();
    let case = case(&reference, "medium_dense");
    let ids = ids_of(&case["ids"]);
    assert!(ids.len() < 2048, "the case must be dense for DSA");
    let (_, want) = read_npy_f32(&d.join(case["logits_file"].as_str().unwrap()));

    let src = Gguf::open(d.join("glm5-tiny-topk2048-f32.gguf")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds2.gguf");
    write_deepseek2(&src, &path);
    let g = Gguf::open(&path).unwrap();
    assert!(g.tensor("blk.1.attn_k_b.weight").is_none());
    let mut m = Glm5::load(&g, CpuBackend::new(), 512).unwrap();
    assert_eq!(m.config().arch, Arch::Deepseek2);
    assert!(m.config().indexer.is_none());
    let got = m.forward(&ids, 0).unwrap();
    let range = logit_range(&want);
    let err = max_abs_diff(&got, &want);
    eprintln!("deepseek2 + fused kv_b: max |Δlogit| {err:.3e} (range {range:.2})");
    // Measured 3.10e-5 against transformers (medium_dense: every key attended), on every
    // kernel family; bound 6e-5 as forward_fixture.rs DENSE_BOUND.
    assert!(err <= 6e-5, "max abs error {err}");
}
