//! The `deepseek2` path (MLA + MoE, no indexer) and the legacy fused `attn_kv_b` tensor, checked
//! against transformers: the tiny GLM-5 fixture is rewritten as a deepseek2 file whose
//! `attn_k_b`/`attn_v_b` are re-fused into one head-major `attn_kv_b`. For a prompt shorter than
//! `index_topk` (2048) DSA selects every key, so transformers' GLM-5 logits for that prompt are
//! also the exact reference for the dense deepseek2 model.

mod common;

use common::{
    case, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference, write_deepseek2,
};
use glint_gguf::Gguf;
use glm5_model::{Arch, CpuBackend, Glm5};

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
    write_deepseek2(&src, &path, true);
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
