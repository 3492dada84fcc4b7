//! Files from newer llama.cpp converters store each layer's expert gate and up projections as
//! one `ffn_gate_up_exps` tensor (per expert: gate rows, then up rows). The fixture rewritten
//! that way must still give transformers' logits.

mod common;

use common::{case, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference};
use glint_gguf::{write_gguf, Gguf, TensorSpec};
use glm5_model::{CpuBackend, Glm5};

#[test]
fn fused_gate_up_experts_match_transformers() {
    let dir = fixture_dir();
    let reference = reference();
    let case = case(&reference, "medium");
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
    let got = m.forward(&ids_of(&case["ids"]), 0).unwrap();
    let (_, want) = read_npy_f32(&dir.join(case["logits_file"].as_str().unwrap()));
    let range = logit_range(&want);
    let err = max_abs_diff(&got, &want);
    eprintln!("fused gate_up experts: max |Δlogit| {err:.3e} (range {range:.2})");
    // Same bound as forward_fixture.rs DENSE_BOUND: measured 3.34e-5 against transformers on
    // every kernel family (the unfused file gives the same figure), bound 6e-5.
    assert!(err <= 6e-5, "max abs error {err}");
}
