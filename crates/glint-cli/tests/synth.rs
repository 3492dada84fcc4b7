//! `glint synth` at a reduced size (1 dense + 1 MoE layer, 8 experts, everything else GLM-5's
//! real geometry): the tensor table against GLM-5's shapes written out here from the model card
//! (reference/glm5-architecture.md §5), the Q4_K_M type rules, and the file loading and
//! running in glint. llama.cpp loading the same file is recorded in docs/performance.md.

use glint_gguf::{ArrayData, GgmlType, Gguf, Value};
use glm5_model::{CpuBackend, Glm5};

mod common;
use common::glint;

/// The two tests that write GiB-sized files take turns, and the grid-type one removes each file
/// once checked: at most one 1.7 GiB file is on disk at a time (CI once ran out of disk with
/// all of them side by side, ~6 GiB).
static DISK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn disk_turn() -> std::sync::MutexGuard<'static, ()> {
    DISK.lock().unwrap_or_else(|e| e.into_inner())
}

/// (name, ggml dims) of GLM-5's tensors for layer 0 dense and layer 1 MoE with 8 experts.
fn expected() -> Vec<(String, Vec<u64>)> {
    let mut t: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![6144, 154880]),
        ("output_norm.weight".into(), vec![6144]),
        ("output.weight".into(), vec![6144, 154880]),
    ];
    for l in 0..2 {
        let p = |s: &str| format!("blk.{l}.{s}");
        t.extend([
            (p("attn_norm.weight"), vec![6144]),
            (p("attn_q_a.weight"), vec![6144, 2048]),
            (p("attn_q_a_norm.weight"), vec![2048]),
            (p("attn_q_b.weight"), vec![2048, 64 * 256]),
            (p("attn_kv_a_mqa.weight"), vec![6144, 576]),
            (p("attn_kv_a_norm.weight"), vec![512]),
            (p("attn_k_b.weight"), vec![192, 512, 64]),
            (p("attn_v_b.weight"), vec![512, 256, 64]),
            (p("attn_output.weight"), vec![16384, 6144]),
            (p("indexer.attn_q_b.weight"), vec![2048, 32 * 128]),
            (p("indexer.attn_k.weight"), vec![6144, 128]),
            (p("indexer.k_norm.weight"), vec![128]),
            (p("indexer.k_norm.bias"), vec![128]),
            (p("indexer.proj.weight"), vec![6144, 32]),
            (p("ffn_norm.weight"), vec![6144]),
        ]);
        if l == 0 {
            t.extend([
                (p("ffn_gate.weight"), vec![6144, 12288]),
                (p("ffn_up.weight"), vec![6144, 12288]),
                (p("ffn_down.weight"), vec![12288, 6144]),
            ]);
        } else {
            t.extend([
                (p("ffn_gate_inp.weight"), vec![6144, 8]),
                (p("exp_probs_b.bias"), vec![8]),
                (p("ffn_gate_exps.weight"), vec![6144, 2048, 8]),
                (p("ffn_up_exps.weight"), vec![6144, 2048, 8]),
                (p("ffn_down_exps.weight"), vec![2048, 6144, 8]),
                (p("ffn_gate_shexp.weight"), vec![6144, 2048]),
                (p("ffn_up_shexp.weight"), vec![6144, 2048]),
                (p("ffn_down_shexp.weight"), vec![2048, 6144]),
            ]);
        }
    }
    t
}

/// `glint synth PATH --dense 1 --moe 1 --experts E [--quant Q]`: the smallest file with both
/// layer kinds.
fn synth_small(path: &std::path::Path, experts: &str, quant: Option<&str>) -> std::process::Output {
    let mut a = vec![
        "synth",
        path.to_str().unwrap(),
        "--dense",
        "1",
        "--moe",
        "1",
        "--experts",
        experts,
    ];
    if let Some(q) = quant {
        a.extend(["--quant", q]);
    }
    glint(&a)
}

#[test]
fn synth_writes_glm5_geometry_that_loads_and_runs() {
    let _turn = disk_turn();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synth.gguf");
    let o = synth_small(&path, "8", None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g = Gguf::open(&path).unwrap();
    let got: Vec<(String, Vec<u64>)> = g
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect();
    let mut want = expected();
    let mut got_sorted = got.clone();
    want.sort();
    got_sorted.sort();
    assert_eq!(got_sorted, want, "tensor table");
    // Q4_K_M rules: norms/router/indexer proj/biases F32, k_b/v_b Q8_0, output Q6_K.
    for t in g.tensors() {
        let want = if t.dims.len() == 1
            || t.name.ends_with("ffn_gate_inp.weight")
            || t.name.ends_with("indexer.proj.weight")
        {
            vec![GgmlType::F32]
        } else if t.name.ends_with("attn_k_b.weight") || t.name.ends_with("attn_v_b.weight") {
            vec![GgmlType::Q8_0]
        } else if t.name == "output.weight" {
            vec![GgmlType::Q6_K]
        } else if t.name.contains("ffn_down") {
            vec![GgmlType::Q4_K, GgmlType::Q6_K]
        } else {
            vec![GgmlType::Q4_K]
        };
        assert!(want.contains(&t.ty), "{}: {}", t.name, t.ty);
    }
    // The tokenizer covers the vocabulary and knows GLM-5's control tokens.
    let Some(Value::Array(tokens)) = g.metadata().get("tokenizer.ggml.tokens") else {
        panic!("no token list");
    };
    let ArrayData::String(tokens) = tokens.data() else {
        panic!("token list is not strings");
    };
    assert_eq!(tokens.len(), 154880);
    assert_eq!(tokens[154820], "<|endoftext|>");
    assert_eq!(tokens[154827], "<|user|>");
    assert_eq!(
        tokens.iter().filter(|t| t.starts_with("[PAD")).count(),
        154880 - 256 - 10
    );
    // glint loads it and its logits are finite.
    let mut m = Glm5::load(&g, CpuBackend::new(), 16).unwrap();
    let logits = m.forward(&[72, 101, 108], 0).unwrap();
    assert_eq!(logits.len(), 3 * 154880);
    assert!(logits.iter().all(|v| v.is_finite()));
}

#[test]
fn synth_refuses_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let out = out.to_str().unwrap();
    for (args, want) in [
        (
            vec!["--quant", "q9_z"],
            "--quant q9_z: expected q4_k_m or a GGML type name",
        ),
        (
            vec!["--experts", "0"],
            "--experts 0: must be between 1 and 1024",
        ),
        (
            vec!["--dense", "0", "--moe", "0"],
            "need at least one layer",
        ),
    ] {
        let mut a = vec!["synth", out];
        a.extend(args.iter());
        let o = glint(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(
            !std::path::Path::new(out).exists(),
            "{args:?}: output written"
        );
    }
}

#[test]
fn synth_writes_random_blocks_for_grid_types_without_a_quantizer() {
    let _turn = disk_turn();
    let dir = tempfile::tempdir().unwrap();
    for ty in ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s"] {
        let path = dir.path().join(format!("{ty}.gguf"));
        let o = synth_small(&path, "2", Some(ty));
        assert!(
            o.status.success(),
            "{ty}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let g = Gguf::open(&path).unwrap();
        let want = GgmlType::from_name(&ty.to_ascii_uppercase()).unwrap();
        let t = g
            .tensors()
            .iter()
            .find(|t| t.name == "blk.0.ffn_up.weight")
            .unwrap();
        assert_eq!(t.ty, want, "{ty}");
        let data = g.tensor_data(t);
        // Every block has one finite, positive f16 scale, and the codes are not one pattern.
        let blocks: Vec<&[u8]> = data.chunks_exact(want.type_size()).collect();
        let d = half::f16::from_le_bytes([blocks[0][0], blocks[0][1]]).to_f32();
        assert!(d.is_finite() && d > 0.0, "{ty}: scale {d}");
        assert!(
            blocks.iter().all(|b| b[..2] == blocks[0][..2]),
            "{ty}: block scales"
        );
        assert!(blocks[0][2..] != blocks[1][2..], "{ty}: codes repeat");
        // They dequantize to finite weights near the 0.02 RMS of the quantized types' values.
        let w = glint_quant::dequantize_to_vec(want, &data[..64 * want.type_size()]).unwrap();
        let rms = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        assert!(w.iter().all(|v| v.is_finite()), "{ty}: finite");
        assert!(rms > 0.001 && rms < 0.1, "{ty}: rms {rms}");
        drop(g);
        std::fs::remove_file(&path).unwrap();
    }
}
