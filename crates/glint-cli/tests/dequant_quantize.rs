//! `glint dequant` and `glint quantize` against gguf-py (fixtures/make_cli_fixtures.py made the
//! inputs and the expected values with gguf-py 0.19.0; no glint code was involved).

use std::path::{Path, PathBuf};

use glint_gguf::{GgmlType, Gguf, Value};

mod common;
use common::{fixtures, glint, read_npy};

#[test]
fn dequant_matches_gguf_py_for_every_fixture_type() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("dequant.gguf");
    let names = [
        "q4_0", "q5_0", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq2_xxs",
        "mxfp4", "f16", "bf16", "f32",
    ];
    for name in names {
        let out = dir.path().join(format!("{name}.npy"));
        let o = glint(&[
            "dequant",
            src.to_str().unwrap(),
            name,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let (shape, got) = read_npy(&out);
        let (want_shape, want) = read_npy(&fixtures().join(format!("dequant.{name}.npy")));
        assert_eq!(shape, want_shape, "{name}: numpy shape (reversed ne)");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name}[{i}]: glint {g} vs gguf-py {w}"
            );
        }
    }
}

#[test]
fn dequant_reports_missing_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.npy");
    let o = glint(&[
        "dequant",
        fixtures().join("dequant.gguf").to_str().unwrap(),
        "no.such.tensor",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no.such.tensor"));
}

fn quantize(ty: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("out-{ty}.gguf"));
    let o = glint(&[
        "quantize",
        fixtures().join("quant_in.gguf").to_str().unwrap(),
        out.to_str().unwrap(),
        ty,
    ]);
    assert!(
        o.status.success(),
        "quantize {ty}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The output is written under a temporary name and renamed only once complete.
    assert!(!dir.join(format!("out-{ty}.gguf.partial")).exists());
    out
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn quantize_q4_k_follows_the_type_rules_and_keeps_values() {
    use GgmlType::*;
    let dir = tempfile::tempdir().unwrap();
    let out = quantize("Q4_K", dir.path());
    let input = Gguf::open(fixtures().join("quant_in.gguf")).unwrap();
    let g = Gguf::open(&out).unwrap();
    // Expected types by llama-quantize's rules (see quantize_plan.rs): 1-D, norms, router,
    // router bias and indexer.proj in F32; 192-wide rows fall back to Q5_0; 100-wide rows fit no
    // block type and become F16; integer tensors are copied.
    let want = [
        ("token_embd.weight", Q4_K),
        ("blk.0.attn_norm.weight", F32),
        ("blk.0.attn_q_a.weight", Q4_K),
        ("blk.0.attn_q_a_norm.weight", F32),
        ("blk.0.attn_k_b.weight", Q5_0),
        ("blk.0.indexer.k_norm.bias", F32),
        ("blk.0.indexer.proj.weight", F32),
        ("blk.0.ffn_gate_inp.weight", F32),
        ("blk.0.exp_probs_b.bias", F32),
        ("blk.0.ffn_down_exps.weight", Q4_K),
        ("blk.0.odd.weight", F16),
        ("blk.0.positions", I32),
    ];
    assert_eq!(g.tensors().len(), want.len());
    for ((t, src), (name, ty)) in g.tensors().iter().zip(input.tensors()).zip(want) {
        assert_eq!(t.name, name);
        assert_eq!(t.ty, ty, "{name}");
        assert_eq!(t.dims, src.dims, "{name}");
        let data = g.tensor_data(t);
        if ty == I32 {
            assert_eq!(data, input.tensor_data(src), "{name} copied");
            continue;
        }
        let got = glint_quant::dequantize_to_vec(ty, data).unwrap();
        let (_, orig) = read_npy(&fixtures().join(format!("quant_in.{name}.npy")));
        if ty == F32 || ty == F16 {
            assert_eq!(got, orig, "{name} must be exact");
        } else {
            let e = rel_err(&got, &orig);
            assert!(e < 0.08, "{name}: relative error {e}");
        }
    }
    let md = g.metadata();
    assert_eq!(md.get_u32("general.file_type").unwrap(), 14); // LLAMA_FTYPE_MOSTLY_Q4_K_S
    assert_eq!(md.get_u32("general.quantization_version").unwrap(), 2);
    assert_eq!(md.get_str("general.name").unwrap(), "cli-fixture");
    assert!(matches!(
        md.get("general.architecture"),
        Some(Value::String(s)) if s == "glm-dsa"
    ));
}

#[test]
fn quantize_q8_0_matches_gguf_py_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = quantize("q8_0", dir.path());
    let g = Gguf::open(&out).unwrap();
    let (t, data) = g.tensor_bytes("blk.0.attn_k_b.weight").unwrap();
    assert_eq!(t.ty, GgmlType::Q8_0);
    let want = std::fs::read(fixtures().join("quant_q8_0.attn_k_b.bin")).unwrap();
    assert_eq!(data, &want[..]);
    assert_eq!(g.metadata().get_u32("general.file_type").unwrap(), 7);
}

#[test]
fn quantize_rejects_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("quant_in.gguf");
    let out = dir.path().join("o.gguf");
    for (ty, needle) in [("Q9_9", "Q9_9"), ("IQ2_XXS", "IQ2_XXS")] {
        let o = glint(&["quantize", src.to_str().unwrap(), out.to_str().unwrap(), ty]);
        assert!(!o.status.success(), "{ty} should fail");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{ty}: {err}");
    }
    // Writing over the input would truncate the file that is being read (memory-mapped).
    let copy = dir.path().join("in.gguf");
    std::fs::copy(&src, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let o = glint(&[
        "quantize",
        copy.to_str().unwrap(),
        copy.to_str().unwrap(),
        "Q8_0",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("same file as the input"));
    assert_eq!(std::fs::read(&copy).unwrap(), before);
}

/// `glint quantize` against llama.cpp's own quantizer on the same model: fixtures/gguf/
/// llama_quantize_q8_0.gguf was written by llama.cpp's `llama_model_quantize` (MOSTLY_Q8_0) from
/// the same F32 input (fixtures/make_llama_quantize_fixture.py). Every tensor both tools store in
/// the same type must be byte-identical; the only tensors allowed to differ in type are the ones
/// glint keeps in F32 on purpose (`indexer.proj`: an F32 weight in GLM-5 files whose output
/// feeds f32 scoring) — llama.cpp 0.3.36's rules quantize it.
#[test]
fn quantize_q8_0_equals_llama_cpp_byte_for_byte() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let src = root.join("glm5/llamacpp/glm5-tiny-lc-f32.gguf");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q8_0.gguf");
    let o = glint(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "Q8_0",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ours = Gguf::open(&out).unwrap();
    let theirs = Gguf::open(root.join("gguf/llama_quantize_q8_0.gguf")).unwrap();
    assert_eq!(ours.tensors().len(), theirs.tensors().len());
    let (mut identical, mut kept_f32) = (0, Vec::new());
    for t in theirs.tensors() {
        let mine = ours
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} missing from glint's output", t.name));
        assert_eq!(mine.dims, t.dims, "{}", t.name);
        if mine.ty == t.ty {
            assert!(
                ours.tensor_data(mine) == theirs.tensor_data(t),
                "{} ({}) differs from llama.cpp's bytes",
                t.name,
                t.ty
            );
            identical += 1;
        } else {
            assert_eq!(
                mine.ty,
                GgmlType::F32,
                "{}: glint chose {}",
                t.name,
                mine.ty
            );
            kept_f32.push(t.name.clone());
        }
    }
    assert!(
        kept_f32.iter().all(|n| n.ends_with("indexer.proj.weight")),
        "unexpected type differences: {kept_f32:?}"
    );
    // 117 tensors: 5 indexer.proj kept F32; of the rest, 70 are quantized matrices.
    assert_eq!(kept_f32.len(), 5);
    assert_eq!(identical, 112);
}
