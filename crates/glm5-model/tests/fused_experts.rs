//! Files from newer llama.cpp converters store each layer's expert gate and up projections as
//! one `ffn_gate_up_exps` tensor (per expert: gate rows, then up rows). The fixture rewritten
//! that way must still give transformers' logits.

mod common;

use common::{
    case, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference,
    write_fused_gate_up,
};
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};

#[test]
fn fused_gate_up_experts_match_transformers() {
    let dir = fixture_dir();
    let reference = reference();
    let case = case(&reference, "medium");
    let src = Gguf::open(dir.join("glm5-tiny-f32.gguf")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fused.gguf");
    assert!(write_fused_gate_up(&src, &path) >= 3);
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
