//! Model hyper-parameters read from GGUF metadata (`glm-dsa.*` / `deepseek2.*` keys).

use glint_core::rope::Yarn;
use glint_core::{Gating, RopeMode};
use glint_gguf::{Gguf, Metadata, Value};

use crate::error::{ModelError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// GLM-5 / 5.1: MLA + DSA lightning indexer + MoE.
    GlmDsa,
    /// DeepSeek-V2/V3, GLM-4.7-Flash: the same MLA + MoE without the indexer.
    Deepseek2,
}

impl Arch {
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::GlmDsa => "glm-dsa",
            Arch::Deepseek2 => "deepseek2",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexerConfig {
    pub n_heads: usize,
    pub head_dim: usize,
    pub top_k: usize,
    pub rope_mode: RopeMode,
    /// LayerNorm eps of `indexer.k_norm` (HF: 1e-6; llama.cpp reads `layer_norm_epsilon`).
    pub eps: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub n_vocab: usize,
    pub d_model: usize,
    /// `block_count`: trunk plus MTP blocks.
    pub n_block: usize,
    pub n_nextn: usize,
    /// Trunk layers actually run: `block_count − nextn_predict_layers`.
    pub n_layer: usize,
    pub context_length: usize,
    pub n_heads: usize,
    /// 0 when there is no q LoRA (DeepSeek-V2-Lite).
    pub q_lora: usize,
    pub kv_lora: usize,
    pub nope: usize,
    pub rope_dim: usize,
    pub v_dim: usize,
    pub d_ff: usize,
    pub d_ff_exp: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_expert_shared: usize,
    pub n_group: usize,
    pub n_group_used: usize,
    pub gating: Gating,
    pub weights_norm: bool,
    pub weights_scale: f32,
    pub n_dense_lead: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    pub yarn: Option<Yarn>,
    /// Softmax scale `mscale² / sqrt(nope + rope)`.
    pub attn_scale: f32,
    pub indexer: Option<IndexerConfig>,
}

/// Upper bound on the size keys that become tensor dimensions. Shapes multiply two or three of
/// them (`head_count × (key_length + value_length)`, ...); bounding each keeps those products
/// from overflow on a forged header while staying far above any real model's sizes.
const MAX_SIZE: usize = 1 << 24;

fn cfg_err(key: &str, msg: impl Into<String>) -> ModelError {
    ModelError::Config {
        key: key.to_string(),
        msg: msg.into(),
    }
}

struct Keys<'m> {
    md: &'m Metadata,
    arch: &'static str,
}

impl Keys<'_> {
    fn key(&self, s: &str) -> String {
        format!("{}.{s}", self.arch)
    }
    fn req(&self, s: &str) -> Result<usize> {
        Ok(self.md.get_u64(&self.key(s))? as usize)
    }
    fn opt(&self, s: &str) -> Result<Option<usize>> {
        let k = self.key(s);
        if self.md.get(&k).is_none() {
            return Ok(None);
        }
        Ok(Some(self.md.get_u64(&k)? as usize))
    }
    fn opt_f32(&self, s: &str) -> Result<Option<f32>> {
        let k = self.key(s);
        if self.md.get(&k).is_none() {
            return Ok(None);
        }
        Ok(Some(self.md.get_f32(&k)?))
    }
}

impl Config {
    pub fn from_gguf(gguf: &Gguf) -> Result<Config> {
        let md = gguf.metadata();
        let arch_name = md.architecture()?;
        let arch = match arch_name {
            "glm-dsa" => Arch::GlmDsa,
            "deepseek2" => Arch::Deepseek2,
            other => {
                return Err(ModelError::UnknownArch {
                    arch: other.to_string(),
                })
            }
        };
        let k = Keys {
            md,
            arch: arch.gguf_name(),
        };
        let d_model = k.req("embedding_length")?;
        let n_block = k.req("block_count")?;
        let n_nextn = k.opt("nextn_predict_layers")?.unwrap_or(0);
        if n_nextn >= n_block {
            return Err(cfg_err(
                &k.key("nextn_predict_layers"),
                format!("{n_nextn} MTP layers leave no trunk of the {n_block} blocks"),
            ));
        }
        let n_heads = k.req("attention.head_count")?;
        let rope_dim = k.req("rope.dimension_count")?;
        let kv_lora = k.req("attention.kv_lora_rank")?;
        let q_lora = k.opt("attention.q_lora_rank")?.unwrap_or(0);
        // MLA-converted files carry the per-head dims in *_mla keys (key_length is then the
        // 576-wide cache row); older DeepSeek files only have key_length/value_length.
        let qk = match k.opt("attention.key_length_mla")? {
            Some(v) => v,
            None => k.req("attention.key_length")?,
        };
        let v_dim = match k.opt("attention.value_length_mla")? {
            Some(v) => v,
            None => k.req("attention.value_length")?,
        };
        if qk <= rope_dim {
            return Err(cfg_err(
                &k.key("attention.key_length_mla"),
                format!("{qk} must exceed the rope dim {rope_dim}"),
            ));
        }
        let n_expert = k.opt("expert_count")?.unwrap_or(0);
        let n_expert_used = k.opt("expert_used_count")?.unwrap_or(0);
        let gating = match k.opt("expert_gating_func")? {
            Some(1) => Gating::Softmax,
            Some(2) => Gating::Sigmoid,
            Some(v) => {
                return Err(cfg_err(
                    &k.key("expert_gating_func"),
                    format!("unknown gating function {v}"),
                ))
            }
            // llama.cpp: GLM-DSA defaults to sigmoid, old DeepSeek-V2 files to softmax.
            None if arch == Arch::GlmDsa => Gating::Sigmoid,
            None => Gating::Softmax,
        };
        let n_group = k.opt("expert_group_count")?.unwrap_or(1).max(1);
        let n_group_used = k.opt("expert_group_used_count")?.unwrap_or(n_group);
        if n_expert > 0
            && (!n_expert.is_multiple_of(n_group) || n_group_used == 0 || n_group_used > n_group)
        {
            return Err(cfg_err(
                &k.key("expert_group_count"),
                format!("{n_expert} experts in {n_group} groups, {n_group_used} used"),
            ));
        }
        if n_expert_used > n_expert {
            return Err(cfg_err(
                &k.key("expert_used_count"),
                format!("{n_expert_used} > expert_count {n_expert}"),
            ));
        }
        // Group-limited routing keeps only the experts of the best `n_group_used` groups; asking
        // for more experts than those hold would pick masked (-inf) experts.
        if n_expert > 0 {
            let reachable = n_expert / n_group * n_group_used;
            if n_expert_used > reachable {
                return Err(cfg_err(
                    &k.key("expert_used_count"),
                    format!(
                        "{n_expert_used} is outside the allowed range 1..={reachable}: {n_group_used} \
                         of {n_group} groups of {} experts are routed to",
                        n_expert / n_group
                    ),
                ));
            }
        }
        let weights_norm = match md.get(&k.key("expert_weights_norm")) {
            Some(Value::Bool(b)) => *b,
            Some(_) => md.get_bool(&k.key("expert_weights_norm"))?,
            None => false,
        };
        let rope_theta = k.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
        let yarn = match md.get(&k.key("rope.scaling.type")) {
            Some(_) if md.get_str(&k.key("rope.scaling.type"))? == "yarn" => Some(Yarn {
                factor: k.opt_f32("rope.scaling.factor")?.unwrap_or(1.0),
                original_ctx: k
                    .opt("rope.scaling.original_context_length")?
                    .ok_or_else(|| {
                        cfg_err(
                            &k.key("rope.scaling.original_context_length"),
                            "required for yarn",
                        )
                    })? as f32,
                beta_fast: k.opt_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: k.opt_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
            }),
            _ => None,
        };
        // mscale = 0.1·mscale_all_dim·ln(factor) + 1, with yarn_log_multiplier = 0.1·mscale_all_dim.
        let log_mul = k
            .opt_f32("rope.scaling.yarn_log_multiplier")?
            .unwrap_or(0.0);
        if !log_mul.is_finite() {
            return Err(cfg_err(
                &k.key("rope.scaling.yarn_log_multiplier"),
                format!("{log_mul} is outside the allowed range: a finite number"),
            ));
        }
        let mscale = match &yarn {
            Some(y) if y.factor > 1.0 => 1.0 + log_mul * y.factor.ln(),
            _ => 1.0,
        };
        let indexer = match (arch, k.opt("attention.indexer.head_count")?) {
            (Arch::GlmDsa, Some(h)) => Some(IndexerConfig {
                n_heads: h,
                head_dim: k.req("attention.indexer.key_length")?,
                top_k: k.req("attention.indexer.top_k")?,
                rope_mode: RopeMode::Interleaved,
                eps: k.opt_f32("attention.layer_norm_epsilon")?.unwrap_or(1e-6),
            }),
            _ => None,
        };
        // GLM-5.2 IndexShare: "shared" layers reuse the previous full layer's top-k. Not
        // implemented yet; refuse such files rather than silently running every indexer.
        let types_key = k.key("attention.indexer.types");
        if indexer.is_some() && md.get(&types_key).is_some() {
            let arr = md.get_array(&types_key)?;
            let all_full = arr.iter().all(|v| match v {
                Value::Bool(b) => b,
                Value::U8(x) => x != 0,
                Value::I8(x) => x != 0,
                Value::U32(x) => x != 0,
                Value::I32(x) => x != 0,
                _ => false,
            });
            if !all_full {
                return Err(cfg_err(
                    &types_key,
                    "shared indexer layers (IndexShare, GLM-5.2) are not supported yet",
                ));
            }
        }
        if let Some(ix) = &indexer {
            if ix.head_dim < rope_dim || ix.top_k == 0 {
                return Err(cfg_err(
                    &k.key("attention.indexer.key_length"),
                    format!("indexer head dim {} / top_k {}", ix.head_dim, ix.top_k),
                ));
            }
        }
        let embd_rows = gguf
            .tensor("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied());
        // Checked at load, not when generation first samples an id without text.
        if let (Some(Value::Array(a)), Some(rows)) = (md.get("tokenizer.ggml.tokens"), embd_rows) {
            if (a.len() as u64) < rows {
                return Err(cfg_err(
                    "tokenizer.ggml.tokens",
                    format!(
                        "{} tokens, fewer than the {rows} rows of token_embd.weight; ids {}..{rows} \
                         would have no text",
                        a.len(),
                        a.len()
                    ),
                ));
            }
        }
        let n_vocab = match k.opt("vocab_size")? {
            Some(v) => v,
            None => match md.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => a.len(),
                _ => embd_rows.ok_or_else(|| ModelError::MissingTensor {
                    name: "token_embd.weight".into(),
                })? as usize,
            },
        };
        let cfg = Config {
            arch,
            n_vocab,
            d_model,
            n_block,
            n_nextn,
            n_layer: n_block - n_nextn,
            context_length: k.opt("context_length")?.unwrap_or(0),
            n_heads,
            q_lora,
            kv_lora,
            nope: qk - rope_dim,
            rope_dim,
            v_dim,
            d_ff: k.opt("feed_forward_length")?.unwrap_or(0),
            d_ff_exp: k.opt("expert_feed_forward_length")?.unwrap_or(0),
            n_expert,
            n_expert_used,
            n_expert_shared: k.opt("expert_shared_count")?.unwrap_or(0),
            n_group,
            n_group_used,
            gating,
            weights_norm,
            weights_scale: k.opt_f32("expert_weights_scale")?.unwrap_or(1.0),
            n_dense_lead: k.opt("leading_dense_block_count")?.unwrap_or(0),
            rms_eps: k
                .opt_f32("attention.layer_norm_rms_epsilon")?
                .unwrap_or(1e-6),
            rope_theta,
            yarn,
            attn_scale: mscale * mscale / (qk as f32).sqrt(),
            indexer,
        };
        cfg.validate(arch.gguf_name())?;
        Ok(cfg)
    }

    /// Rejects sizes that would make an op meaningless (zero-width rows, odd rope dims) so a
    /// malformed header fails here, by key, rather than deep inside a kernel.
    fn validate(&self, a: &str) -> Result<()> {
        let mut nonzero = vec![
            ("embedding_length", self.d_model),
            ("attention.head_count", self.n_heads),
            ("attention.kv_lora_rank", self.kv_lora),
            ("attention.value_length_mla", self.v_dim),
            ("rope.dimension_count", self.rope_dim),
            ("vocab_size", self.n_vocab),
        ];
        if self.n_expert > 0 {
            nonzero.push(("expert_used_count", self.n_expert_used));
            nonzero.push(("expert_feed_forward_length", self.d_ff_exp));
        }
        if self.n_expert == 0 || self.n_dense_lead > 0 {
            nonzero.push(("feed_forward_length", self.d_ff));
        }
        if let Some(ix) = &self.indexer {
            nonzero.push(("attention.indexer.head_count", ix.n_heads));
            if self.q_lora == 0 {
                return Err(cfg_err(
                    &format!("{a}.attention.q_lora_rank"),
                    "the DSA indexer needs the q LoRA",
                ));
            }
        }
        for (key, v) in nonzero {
            if v == 0 {
                return Err(cfg_err(&format!("{a}.{key}"), "must be non-zero"));
            }
        }
        let mut sizes = vec![
            ("block_count", self.n_block),
            ("embedding_length", self.d_model),
            ("attention.head_count", self.n_heads),
            ("attention.q_lora_rank", self.q_lora),
            ("attention.kv_lora_rank", self.kv_lora),
            ("attention.key_length_mla", self.nope + self.rope_dim),
            ("attention.value_length_mla", self.v_dim),
            ("feed_forward_length", self.d_ff),
            ("expert_feed_forward_length", self.d_ff_exp),
            ("expert_count", self.n_expert),
            ("expert_shared_count", self.n_expert_shared),
        ];
        if let Some(ix) = &self.indexer {
            sizes.push(("attention.indexer.head_count", ix.n_heads));
            sizes.push(("attention.indexer.key_length", ix.head_dim));
            sizes.push(("attention.indexer.top_k", ix.top_k));
        }
        for (key, v) in sizes {
            if v > MAX_SIZE {
                return Err(cfg_err(
                    &format!("{a}.{key}"),
                    format!("{v} exceeds {MAX_SIZE}, more than any real model uses"),
                ));
            }
        }
        self.check_floats(a)?;
        if !self.rope_dim.is_multiple_of(2) {
            return Err(cfg_err(
                &format!("{a}.rope.dimension_count"),
                format!("{} is odd; RoPE rotates pairs", self.rope_dim),
            ));
        }
        Ok(())
    }

    /// Every float read from the file, against the range in which it means something: a NaN
    /// or negative epsilon, a zero rope base or a NaN expert scale would otherwise run and
    /// print NaN (or silently wrong text) with exit 0.
    fn check_floats(&self, a: &str) -> Result<()> {
        type Check = fn(f32) -> bool;
        let pos: Check = |v| v.is_finite() && v > 0.0;
        let eps: Check = |v| v.is_finite() && v > 0.0 && v < 1.0;
        let fin: Check = |v| v.is_finite();
        let at_least_1: Check = |v| v.is_finite() && v >= 1.0;
        let mut checks: Vec<(&str, f32, Check, &str)> = vec![
            (
                "attention.layer_norm_rms_epsilon",
                self.rms_eps,
                eps,
                "(0, 1)",
            ),
            (
                "rope.freq_base",
                self.rope_theta,
                pos,
                "a finite number above 0",
            ),
            (
                "expert_weights_scale",
                self.weights_scale,
                pos,
                "a finite number above 0",
            ),
        ];
        if let Some(ix) = &self.indexer {
            checks.push(("attention.layer_norm_epsilon", ix.eps, eps, "(0, 1)"));
        }
        if let Some(y) = &self.yarn {
            checks.push((
                "rope.scaling.factor",
                y.factor,
                at_least_1,
                "a finite number >= 1",
            ));
            checks.push((
                "rope.scaling.original_context_length",
                y.original_ctx,
                pos,
                "above 0",
            ));
            checks.push((
                "rope.scaling.yarn_beta_fast",
                y.beta_fast,
                fin,
                "a finite number",
            ));
            checks.push((
                "rope.scaling.yarn_beta_slow",
                y.beta_slow,
                fin,
                "a finite number",
            ));
        }
        for (key, v, ok, allowed) in checks {
            if !ok(v) {
                return Err(cfg_err(
                    &format!("{a}.{key}"),
                    format!("{v} is outside the allowed range: {allowed}"),
                ));
            }
        }
        if !(self.attn_scale.is_finite() && self.attn_scale > 0.0) {
            return Err(cfg_err(
                &format!("{a}.rope.scaling.yarn_log_multiplier"),
                format!(
                    "gives the attention scale {}; it must be a finite number above 0",
                    self.attn_scale
                ),
            ));
        }
        Ok(())
    }

    /// Bytes of the KV cache (latent rows plus indexer keys, f32) for `ctx` tokens, or `None`
    /// if that does not fit in a `u64`: the caller compares it with the memory it has before
    /// allocating, so an oversized context is an error naming its size, not an allocator abort.
    pub fn kv_cache_bytes(&self, ctx: usize) -> Option<u64> {
        let row = self.kv_lora + self.rope_dim + self.indexer.as_ref().map_or(0, |ix| ix.head_dim);
        (ctx as u64)
            .checked_mul(row as u64)?
            .checked_mul(self.n_layer as u64)?
            .checked_mul(4)
    }

    /// Whether layer `l` has a MoE block (otherwise the dense MLP).
    pub fn is_moe(&self, l: usize) -> bool {
        self.n_expert > 0 && l >= self.n_dense_lead
    }
}
