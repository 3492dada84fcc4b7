//! Config parsing of a DeepSeek-V3-style `deepseek2` header (YaRN, groups, no q LoRA defaults)
//! against values worked out by hand from spec §2.4, §6.1 and §9.

use glint_gguf::{write_gguf, Gguf, Value};
use glm5_model::{Arch, Config, ModelError};

fn header(extra: &[(&str, Value)]) -> Vec<(String, Value)> {
    let mut m: Vec<(String, Value)> = vec![
        (
            "general.architecture".into(),
            Value::String("deepseek2".into()),
        ),
        ("deepseek2.block_count".into(), Value::U32(62)),
        ("deepseek2.nextn_predict_layers".into(), Value::U32(1)),
        ("deepseek2.embedding_length".into(), Value::U32(7168)),
        ("deepseek2.feed_forward_length".into(), Value::U32(18432)),
        ("deepseek2.vocab_size".into(), Value::U32(129280)),
        ("deepseek2.attention.head_count".into(), Value::U32(128)),
        ("deepseek2.attention.q_lora_rank".into(), Value::U32(1536)),
        ("deepseek2.attention.kv_lora_rank".into(), Value::U32(512)),
        ("deepseek2.attention.key_length".into(), Value::U32(576)),
        ("deepseek2.attention.value_length".into(), Value::U32(512)),
        ("deepseek2.attention.key_length_mla".into(), Value::U32(192)),
        (
            "deepseek2.attention.value_length_mla".into(),
            Value::U32(128),
        ),
        ("deepseek2.rope.dimension_count".into(), Value::U32(64)),
        ("deepseek2.rope.freq_base".into(), Value::F32(10000.0)),
        (
            "deepseek2.rope.scaling.type".into(),
            Value::String("yarn".into()),
        ),
        ("deepseek2.rope.scaling.factor".into(), Value::F32(40.0)),
        (
            "deepseek2.rope.scaling.original_context_length".into(),
            Value::U32(4096),
        ),
        (
            "deepseek2.rope.scaling.yarn_log_multiplier".into(),
            Value::F32(0.1),
        ),
        ("deepseek2.expert_count".into(), Value::U32(256)),
        ("deepseek2.expert_used_count".into(), Value::U32(8)),
        ("deepseek2.expert_group_count".into(), Value::U32(8)),
        ("deepseek2.expert_group_used_count".into(), Value::U32(4)),
        (
            "deepseek2.expert_feed_forward_length".into(),
            Value::U32(2048),
        ),
        ("deepseek2.expert_shared_count".into(), Value::U32(1)),
        ("deepseek2.leading_dense_block_count".into(), Value::U32(3)),
        (
            "deepseek2.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-6),
        ),
    ];
    for (k, v) in extra {
        m.retain(|(key, _)| key != k);
        m.push((k.to_string(), v.clone()));
    }
    m
}

fn parse(meta: &[(String, Value)]) -> glm5_model::Result<Config> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h.gguf");
    write_gguf(&p, meta, &[]).unwrap();
    let g = Gguf::open(&p).unwrap();
    Config::from_gguf(&g)
}

#[test]
fn deepseek_v3_header() {
    let c = parse(&header(&[])).unwrap();
    assert_eq!(c.arch, Arch::Deepseek2);
    // 62 blocks − 1 MTP = 61 trunk layers.
    assert_eq!(c.n_layer, 61);
    assert_eq!((c.nope, c.rope_dim, c.v_dim), (128, 64, 128));
    // No expert_gating_func key in an old deepseek2 file: llama.cpp falls back to softmax.
    assert_eq!(c.gating, glint_core::Gating::Softmax);
    assert_eq!((c.n_group, c.n_group_used), (8, 4));
    // No expert_weights_scale / _norm keys: scale 1, no renormalisation (llama.cpp defaults).
    assert_eq!(c.weights_scale, 1.0);
    assert!(!c.weights_norm);
    // mscale = 1 + 0.1·ln 40 = 1.3688879; scale = mscale² / sqrt(192) = 1.8738542 / 13.856406
    //        = 0.1352338.
    assert!((c.attn_scale - 0.1352338).abs() < 1e-6, "{}", c.attn_scale);
    let y = c.yarn.unwrap();
    assert_eq!(
        (y.factor, y.original_ctx, y.beta_fast, y.beta_slow),
        (40.0, 4096.0, 32.0, 1.0)
    );
    assert!(c.indexer.is_none());
}

#[test]
fn glm5_without_gating_key_defaults_to_sigmoid_and_plain_rope() {
    let mut m: Vec<(String, Value)> = header(&[])
        .into_iter()
        .filter(|(k, _)| !k.contains("rope.scaling"))
        .map(|(k, v)| (k.replace("deepseek2.", "glm-dsa."), v))
        .collect();
    m[0].1 = Value::String("glm-dsa".into());
    let c = parse(&m).unwrap();
    assert_eq!(c.arch, Arch::GlmDsa);
    assert_eq!(c.gating, glint_core::Gating::Sigmoid);
    assert!(c.yarn.is_none());
    // 1/sqrt(192)
    assert!((c.attn_scale - 0.07216878).abs() < 1e-7);
}

#[test]
fn bad_headers_are_named() {
    let e = parse(&header(&[(
        "general.architecture",
        Value::String("qwen3".into()),
    )]))
    .unwrap_err();
    assert!(
        matches!(&e, ModelError::UnknownArch { arch } if arch == "qwen3"),
        "{e}"
    );

    let m: Vec<_> = header(&[])
        .into_iter()
        .filter(|(k, _)| k != "deepseek2.attention.kv_lora_rank")
        .collect();
    let e = parse(&m).unwrap_err().to_string();
    assert!(e.contains("deepseek2.attention.kv_lora_rank"), "{e}");

    let e = parse(&header(&[("deepseek2.expert_group_count", Value::U32(7))]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expert_group_count"), "{e}");

    let e = parse(&header(&[(
        "deepseek2.nextn_predict_layers",
        Value::U32(62),
    )]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("nextn_predict_layers"), "{e}");

    // A forged size that would overflow shape products (head_count × key_length) is refused by
    // key instead of overflowing while the weights are bound.
    let e = parse(&header(&[(
        "deepseek2.attention.head_count",
        Value::U64(1 << 40),
    )]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("deepseek2.attention.head_count"), "{e}");
}

fn glm_dsa(types: Option<Vec<bool>>) -> Vec<(String, Value)> {
    let mut m: Vec<(String, Value)> = header(&[])
        .into_iter()
        .filter(|(k, _)| !k.contains("rope.scaling"))
        .map(|(k, v)| (k.replace("deepseek2.", "glm-dsa."), v))
        .collect();
    m[0].1 = Value::String("glm-dsa".into());
    m.push((
        "glm-dsa.attention.indexer.head_count".into(),
        Value::U32(32),
    ));
    m.push((
        "glm-dsa.attention.indexer.key_length".into(),
        Value::U32(128),
    ));
    m.push(("glm-dsa.attention.indexer.top_k".into(), Value::U32(2048)));
    if let Some(t) = types {
        m.push((
            "glm-dsa.attention.indexer.types".into(),
            Value::Array(glint_gguf::Array::new(glint_gguf::ArrayData::Bool(t))),
        ));
    }
    m
}

#[test]
fn indexer_keys_and_index_share() {
    let c = parse(&glm_dsa(None)).unwrap();
    let ix = c.indexer.unwrap();
    assert_eq!((ix.n_heads, ix.head_dim, ix.top_k), (32, 128, 2048));
    // GLM-5's indexer rope is interleaved (spec §2.3), unlike DeepSeek-V3.2's NeoX.
    assert_eq!(ix.rope_mode, glint_core::RopeMode::Interleaved);
    // No attention.layer_norm_epsilon key: HF's hard-coded LayerNorm eps 1e-6.
    assert_eq!(ix.eps, 1e-6);
    assert!(parse(&glm_dsa(Some(vec![true; 61]))).is_ok());
    let e = parse(&glm_dsa(Some(vec![true, true, true, false])))
        .unwrap_err()
        .to_string();
    assert!(e.contains("glm-dsa.attention.indexer.types"), "{e}");
}

/// Every float key against its range: each bad value is refused naming the key and the value,
/// and the DeepSeek-V3 header they are put into parses when they are left alone.
#[test]
fn floats_outside_their_range_are_named() {
    let cases: [(&str, f32); 10] = [
        ("deepseek2.attention.layer_norm_rms_epsilon", f32::NAN),
        ("deepseek2.attention.layer_norm_rms_epsilon", 0.0),
        ("deepseek2.attention.layer_norm_rms_epsilon", 2.0),
        ("deepseek2.rope.freq_base", f32::INFINITY),
        ("deepseek2.rope.freq_base", -10000.0),
        ("deepseek2.expert_weights_scale", 0.0),
        ("deepseek2.rope.scaling.factor", 0.5),
        ("deepseek2.rope.scaling.factor", f32::NAN),
        ("deepseek2.rope.scaling.yarn_beta_fast", f32::NAN),
        (
            "deepseek2.rope.scaling.yarn_log_multiplier",
            f32::NEG_INFINITY,
        ),
    ];
    for (key, v) in cases {
        let err = parse(&header(&[(key, Value::F32(v))])).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ModelError::Config { .. }), "{key}={v}: {msg}");
        assert!(msg.contains(key), "{key}={v}: {msg}");
        assert!(msg.contains(&format!("{v}")), "{key}={v}: {msg}");
    }
    assert!(parse(&header(&[])).is_ok());
}

#[test]
fn experts_used_beyond_the_routed_groups_are_refused() {
    // 256 experts in 8 groups of 32, 4 groups routed: 128 experts reachable.
    assert!(parse(&header(&[("deepseek2.expert_used_count", Value::U32(128))])).is_ok());
    let err = parse(&header(&[("deepseek2.expert_used_count", Value::U32(129))])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("deepseek2.expert_used_count"), "{msg}");
    assert!(
        msg.contains("129 is outside the allowed range 1..=128"),
        "{msg}"
    );
}
