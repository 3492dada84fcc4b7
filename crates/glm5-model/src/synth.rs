//! GLM-5's true geometry as a GGUF tensor table and metadata, for synthetic files with random
//! weights (`glint synth`): benchmarks at the real shapes without a 400 GB download. Shapes,
//! names and F32 rules follow the llama.cpp converter (reference/glm5-architecture.md §5).

use glint_gguf::{Array, ArrayData, GgmlType, Value};

/// The real GLM-5 sizes, with the layer and expert counts a user picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub dense: usize,
    pub moe: usize,
    pub experts: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub q_lora: usize,
    pub kv_lora: usize,
    pub rope: usize,
    pub nope: usize,
    pub v_dim: usize,
    pub index_heads: usize,
    pub index_dim: usize,
    pub index_topk: usize,
    pub n_used: usize,
    pub expert_ff: usize,
    pub dense_ff: usize,
    pub n_vocab: usize,
}

impl Geometry {
    /// GLM-5 (HF `config.json`): hidden 6144, 64 heads, q_lora 2048, kv_lora 512 + rope 64,
    /// qk_nope 192, v 256, indexer 32 × 128 top-k 2048, top-8 + 1 shared experts of 2048, dense
    /// FFN 12288, vocabulary 154880.
    pub fn glm5(dense: usize, moe: usize, experts: usize) -> Self {
        Self {
            dense,
            moe,
            experts,
            d_model: 6144,
            n_heads: 64,
            q_lora: 2048,
            kv_lora: 512,
            rope: 64,
            nope: 192,
            v_dim: 256,
            index_heads: 32,
            index_dim: 128,
            index_topk: 2048,
            n_used: 8.min(experts),
            expert_ff: 2048,
            dense_ff: 12288,
            n_vocab: 154880,
        }
    }
    pub fn n_layers(&self) -> usize {
        self.dense + self.moe
    }
}

/// Which GGML type each weight gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMix {
    /// llama.cpp's Q4_K_M recipe as GLM-5 files have it: Q4_K, with Q6_K for the output head
    /// and the FFN down projections of every other layer, Q8_0 for `attn_k_b` (its rows of 192
    /// do not fit a 256-block) and `attn_v_b`, F32 for norms, router and indexer projection.
    Q4KM,
    /// One type for every quantizable weight (`attn_k_b` falls back to Q8_0 when the type's
    /// block does not divide 192).
    Uniform(GgmlType),
}

/// One tensor of the synthetic file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthTensor {
    pub name: String,
    /// ggml `ne` order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// What an F32 tensor is filled with.
    pub fill: Fill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Random weights (quantized from random values for block types).
    Random,
    /// Norm weights: ones.
    Ones,
    /// Biases: zeros.
    Zeros,
}

/// The tensor table: global tensors, then each layer's in llama.cpp's order.
pub fn tensors(g: &Geometry, mix: QuantMix) -> Vec<SynthTensor> {
    let (d, h) = (g.d_model as u64, g.n_heads as u64);
    let q = |ty_default: GgmlType, cols: u64| -> GgmlType {
        let ty = match mix {
            QuantMix::Q4KM => ty_default,
            QuantMix::Uniform(t) => t,
        };
        if cols.is_multiple_of(ty.block_size() as u64) {
            ty
        } else {
            GgmlType::Q8_0
        }
    };
    let mut out = Vec::new();
    let mut push = |name: String, dims: Vec<u64>, ty: GgmlType, fill: Fill| {
        out.push(SynthTensor {
            name,
            dims,
            ty,
            fill,
        })
    };
    let v = g.n_vocab as u64;
    push(
        "token_embd.weight".into(),
        vec![d, v],
        q(GgmlType::Q4_K, d),
        Fill::Random,
    );
    push(
        "output_norm.weight".into(),
        vec![d],
        GgmlType::F32,
        Fill::Ones,
    );
    push(
        "output.weight".into(),
        vec![d, v],
        q(GgmlType::Q6_K, d),
        Fill::Random,
    );
    for l in 0..g.n_layers() {
        let p = format!("blk.{l}");
        let f32v = |n: usize| vec![n as u64];
        let qk = (g.nope + g.rope) as u64;
        let down = if l % 2 == 0 {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        push(
            format!("{p}.attn_norm.weight"),
            f32v(g.d_model),
            GgmlType::F32,
            Fill::Ones,
        );
        push(
            format!("{p}.attn_q_a.weight"),
            vec![d, g.q_lora as u64],
            q(GgmlType::Q4_K, d),
            Fill::Random,
        );
        push(
            format!("{p}.attn_q_a_norm.weight"),
            f32v(g.q_lora),
            GgmlType::F32,
            Fill::Ones,
        );
        push(
            format!("{p}.attn_q_b.weight"),
            vec![g.q_lora as u64, h * qk],
            q(GgmlType::Q4_K, g.q_lora as u64),
            Fill::Random,
        );
        push(
            format!("{p}.attn_kv_a_mqa.weight"),
            vec![d, (g.kv_lora + g.rope) as u64],
            q(GgmlType::Q4_K, d),
            Fill::Random,
        );
        push(
            format!("{p}.attn_kv_a_norm.weight"),
            f32v(g.kv_lora),
            GgmlType::F32,
            Fill::Ones,
        );
        push(
            format!("{p}.attn_k_b.weight"),
            vec![g.nope as u64, g.kv_lora as u64, h],
            q(GgmlType::Q8_0, g.nope as u64),
            Fill::Random,
        );
        push(
            format!("{p}.attn_v_b.weight"),
            vec![g.kv_lora as u64, g.v_dim as u64, h],
            q(GgmlType::Q8_0, g.kv_lora as u64),
            Fill::Random,
        );
        push(
            format!("{p}.attn_output.weight"),
            vec![h * g.v_dim as u64, d],
            q(GgmlType::Q4_K, h * g.v_dim as u64),
            Fill::Random,
        );
        let (ih, id) = (g.index_heads as u64, g.index_dim as u64);
        push(
            format!("{p}.indexer.attn_q_b.weight"),
            vec![g.q_lora as u64, ih * id],
            q(GgmlType::Q4_K, g.q_lora as u64),
            Fill::Random,
        );
        push(
            format!("{p}.indexer.attn_k.weight"),
            vec![d, id],
            q(GgmlType::Q4_K, d),
            Fill::Random,
        );
        push(
            format!("{p}.indexer.k_norm.weight"),
            f32v(g.index_dim),
            GgmlType::F32,
            Fill::Ones,
        );
        push(
            format!("{p}.indexer.k_norm.bias"),
            f32v(g.index_dim),
            GgmlType::F32,
            Fill::Zeros,
        );
        push(
            format!("{p}.indexer.proj.weight"),
            vec![d, ih],
            GgmlType::F32,
            Fill::Random,
        );
        push(
            format!("{p}.ffn_norm.weight"),
            f32v(g.d_model),
            GgmlType::F32,
            Fill::Ones,
        );
        if l < g.dense {
            let ff = g.dense_ff as u64;
            push(
                format!("{p}.ffn_gate.weight"),
                vec![d, ff],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_up.weight"),
                vec![d, ff],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_down.weight"),
                vec![ff, d],
                q(down, ff),
                Fill::Random,
            );
        } else {
            let (e, ff) = (g.experts as u64, g.expert_ff as u64);
            push(
                format!("{p}.ffn_gate_inp.weight"),
                vec![d, e],
                GgmlType::F32,
                Fill::Random,
            );
            push(
                format!("{p}.exp_probs_b.bias"),
                vec![e],
                GgmlType::F32,
                Fill::Zeros,
            );
            push(
                format!("{p}.ffn_gate_exps.weight"),
                vec![d, ff, e],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_up_exps.weight"),
                vec![d, ff, e],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_down_exps.weight"),
                vec![ff, d, e],
                q(down, ff),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_gate_shexp.weight"),
                vec![d, ff],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_up_shexp.weight"),
                vec![d, ff],
                q(GgmlType::Q4_K, d),
                Fill::Random,
            );
            push(
                format!("{p}.ffn_down_shexp.weight"),
                vec![ff, d],
                q(down, ff),
                Fill::Random,
            );
        }
    }
    out
}

/// GPT-2's byte-to-unicode map: byte-level BPE vocabularies spell byte `b` as this character.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// GLM-5's control tokens at their ids in the real vocabulary (154820 `<|endoftext|>` is eos
/// and pad, 154827 `<|user|>` eot, 154829 `<|observation|>` eom).
const SPECIALS: &[(u32, &str)] = &[
    (154820, "<|endoftext|>"),
    (154821, "[MASK]"),
    (154822, "[gMASK]"),
    (154823, "[sMASK]"),
    (154824, "<sop>"),
    (154825, "<eop>"),
    (154826, "<|system|>"),
    (154827, "<|user|>"),
    (154828, "<|assistant|>"),
    (154829, "<|observation|>"),
];

/// Metadata of a glm-dsa file with this geometry and a byte-level tokenizer: the 256 byte
/// tokens, GLM-5's control tokens at their real ids, and UNUSED `[PADn]` rows up to the
/// vocabulary size (as real GLM-5 files pad theirs). No merges: text tokenizes byte by byte.
pub fn metadata(g: &Geometry, name: &str) -> Vec<(String, Value)> {
    let a = "glm-dsa";
    let u = |v: usize| Value::U32(v as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String(name.into())),
        ("general.quantization_version".into(), Value::U32(2)),
        (format!("{a}.block_count"), u(g.n_layers())),
        (format!("{a}.context_length"), u(202752)),
        (format!("{a}.embedding_length"), u(g.d_model)),
        (format!("{a}.feed_forward_length"), u(g.dense_ff)),
        (format!("{a}.attention.head_count"), u(g.n_heads)),
        (format!("{a}.attention.head_count_kv"), u(1)),
        (format!("{a}.rope.freq_base"), Value::F32(1_000_000.0)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
        (format!("{a}.expert_count"), u(g.experts)),
        (format!("{a}.expert_used_count"), u(g.n_used)),
        (format!("{a}.expert_group_count"), u(1)),
        (format!("{a}.expert_group_used_count"), u(1)),
        (format!("{a}.expert_gating_func"), u(2)),
        (format!("{a}.attention.key_length"), u(g.kv_lora + g.rope)),
        (format!("{a}.attention.value_length"), u(g.kv_lora)),
        (format!("{a}.leading_dense_block_count"), u(g.dense)),
        (format!("{a}.vocab_size"), u(g.n_vocab)),
        (format!("{a}.attention.q_lora_rank"), u(g.q_lora)),
        (format!("{a}.attention.kv_lora_rank"), u(g.kv_lora)),
        (format!("{a}.attention.key_length_mla"), u(g.nope + g.rope)),
        (format!("{a}.attention.value_length_mla"), u(g.v_dim)),
        (format!("{a}.expert_feed_forward_length"), u(g.expert_ff)),
        (format!("{a}.expert_shared_count"), u(1)),
        (format!("{a}.expert_weights_scale"), Value::F32(2.5)),
        (format!("{a}.expert_weights_norm"), Value::Bool(true)),
        (format!("{a}.rope.dimension_count"), u(g.rope)),
        (format!("{a}.nextn_predict_layers"), u(0)),
        (
            format!("{a}.attention.indexer.head_count"),
            u(g.index_heads),
        ),
        (format!("{a}.attention.indexer.key_length"), u(g.index_dim)),
        (format!("{a}.attention.indexer.top_k"), u(g.index_topk)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("glm4".into())),
    ];
    let mut tokens = Vec::with_capacity(g.n_vocab);
    let mut types = Vec::with_capacity(g.n_vocab);
    for i in 0..g.n_vocab {
        let (tok, ty) = if i < 256 {
            (byte_char(i as u8).to_string(), 1) // NORMAL
        } else if let Some(&(_, s)) = SPECIALS.iter().find(|(id, _)| *id as usize == i) {
            (s.to_string(), 3) // CONTROL
        } else {
            (format!("[PAD{i}]"), 5) // UNUSED
        };
        tokens.push(tok);
        types.push(ty);
    }
    md.push((
        "tokenizer.ggml.tokens".into(),
        Value::Array(Array::new(ArrayData::String(tokens))),
    ));
    md.push((
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::new(ArrayData::I32(types))),
    ));
    md.push((
        "tokenizer.ggml.merges".into(),
        Value::Array(Array::new(ArrayData::String(Vec::new()))),
    ));
    for (key, id) in [
        ("eos_token_id", 154820),
        ("eot_token_id", 154827),
        ("eom_token_id", 154829),
        ("padding_token_id", 154820),
        ("unknown_token_id", 154820),
    ] {
        if id < g.n_vocab {
            md.push((format!("tokenizer.ggml.{key}"), Value::U32(id as u32)));
        }
    }
    md.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
    md
}
