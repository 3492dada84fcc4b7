//! Files from newer llama.cpp converters store each layer's expert gate and up projections as
//! one `ffn_gate_up_exps` tensor (per expert: gate rows, then up rows). The fixture rewritten
//! that way must still give transformers' logits.

use std::path::Path;

use glint_gguf::{write_gguf, Gguf, TensorSpec};
use glm5_model::{CpuBackend, Glm5};
use serde_json::Value;

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn fused_gate_up_experts_match_transformers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let case = reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "medium")
        .unwrap();
    let src = Gguf::open(dir.join("glm5-tiny-f32.gguf")).unwrap();
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
    assert!(n_fused >= 3);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fused.gguf");
    let refs: Vec<(TensorSpec, &[u8])> = owned.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    write_gguf(&path, src.metadata().entries(), &refs).unwrap();
    let g = Gguf::open(&path).unwrap();
    assert!(g.tensor("blk.1.ffn_gate_exps.weight").is_none());
    let mut m = Glm5::load(&g, CpuBackend::new(), 256).unwrap();
    let ids: Vec<u32> = case["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let got = m.forward(&ids, 0).unwrap();
    let b = std::fs::read(dir.join(case["logits_file"].as_str().unwrap())).unwrap();
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    let want = f32s(&b[10 + hl..]);
    let range = want.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - want.iter().copied().fold(f32::INFINITY, f32::min);
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    eprintln!("fused gate_up experts: max |Δlogit| {err:.3e} (range {range:.2})");
    assert!(err <= 1e-3 * range, "max abs error {err}");
}
