//! Binds GGUF tensors to the backend BY NAME, checking every shape against the config.
//! Fused legacy tensors (`attn_kv_b`) are split by slot index, never by file order.

use std::borrow::Cow;

use glint_core::{Backend, GgmlType, RouterParams};
use glint_gguf::Gguf;
use glint_mla::{IndexerDims, IndexerWeights, MlaWeights, QProj};
use glint_moe::{ExpertGateUp, MlpWeights, MoeWeights};

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::shard::{split_of, Shard};
use glint_tp::Split;

pub enum Ffn<'a, B: Backend + 'a> {
    Dense(MlpWeights<'a, B>),
    Moe(MoeWeights<'a, B>),
}

impl<'a, B: Backend + 'a> Ffn<'a, B> {
    /// The product the FFN norm's output is prepared for (`Backend::rms_norm_for`).
    pub fn input_product(&self) -> &B::Weight<'a> {
        match self {
            Ffn::Dense(m) => m.input_product(),
            Ffn::Moe(m) => m.input_product(),
        }
    }
}

pub struct LayerWeights<'a, B: Backend + 'a> {
    pub attn_norm: B::Buf,
    pub attn: MlaWeights<'a, B>,
    pub ffn_norm: B::Buf,
    pub ffn: Ffn<'a, B>,
}

pub struct ModelWeights<'a, B: Backend + 'a> {
    pub token_embd: B::Weight<'a>,
    pub output_norm: B::Buf,
    /// `output.weight`, or `token_embd.weight` again when the file ties them.
    pub output: B::Weight<'a>,
    pub layers: Vec<LayerWeights<'a, B>>,
}

struct Binder<'a, 'b, B: Backend> {
    gguf: &'a Gguf,
    be: &'b B,
    /// The part of each tensor this process binds (`Shard::FULL`: all of it).
    shard: Shard,
    /// (bytes bound so far, bytes of the file's tensors, last tenth logged): loading a large
    /// model onto a GPU takes minutes, so it reports its progress.
    progress: std::cell::Cell<(u64, u64, u64)>,
}

impl<'a, B: Backend> Binder<'a, '_, B> {
    fn has(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    fn raw(&self, name: &str, dims: &[usize]) -> Result<(GgmlType, &'a [u8])> {
        let t = self
            .gguf
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        let expected: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        // Trailing 1s are not significant in GGUF shapes.
        let mut found = t.dims.clone();
        while found.len() > expected.len() && found.last() == Some(&1) {
            found.pop();
        }
        if found != expected {
            return Err(ModelError::Shape {
                name: name.into(),
                expected,
                found: t.dims.clone(),
            });
        }
        if !self.be.supports_weight_type(t.ty) {
            return Err(ModelError::UnsupportedType {
                name: name.into(),
                ty: t.ty,
                backend: self.be.name(),
            });
        }
        Ok((t.ty, self.gguf.tensor_data(t)))
    }

    /// This shard's part of tensor `name` (full `dims` checked first): its type, dims and
    /// bytes, cut from the mmap along the axis `split` declares.
    fn cut(
        &self,
        name: &str,
        dims: &[usize],
        split: Split,
    ) -> Result<(GgmlType, Vec<usize>, Cow<'a, [u8]>)> {
        let (ty, bytes) = self.raw(name, dims)?;
        let s = self.shard;
        let c = glint_tp::cut(name, ty, dims, bytes, split, s.rank, s.world)?;
        Ok((ty, c.dims, c.bytes))
    }

    /// The tensor as the sharding plan splits it (whole for `Shard::FULL`).
    fn weight(&self, name: &str, dims: &[usize]) -> Result<B::Weight<'a>> {
        self.weight_split(name, dims, split_of(name, self.shard.ep))
    }

    fn weight_split(&self, name: &str, dims: &[usize], split: Split) -> Result<B::Weight<'a>> {
        let (ty, dims, bytes) = self.cut(name, dims, split)?;
        let n_bytes = bytes.len();
        let w = self.be.upload_weight(name, ty, &dims, bytes)?;
        let (done, total, tenth) = self.progress.get();
        let done = done + n_bytes as u64;
        let now = (done * 10).checked_div(total).unwrap_or(10);
        // Only a copy to a device takes long enough to report; the CPU binds the mmap.
        if now > tenth && self.be.device_memory().is_some() {
            tracing::info!(
                backend = self.be.name(),
                percent = now * 10,
                gib = done as f64 / (1u64 << 30) as f64,
                "uploading weights"
            );
        }
        self.progress.set((done, total, now.max(tenth)));
        Ok(w)
    }

    /// A tensor decoded to f32 on the host (norm weights, biases, legacy fused tensors).
    /// This shard's part of it, by the sharding plan (norm weights are replicated).
    fn host_f32(&self, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
        let (ty, dims, bytes) = self.cut(name, dims, split_of(name, self.shard.ep))?;
        let mut out = vec![0f32; dims.iter().product()];
        glint_core::cpu::decode_to_f32(ty, &bytes, &mut out).map_err(|_| {
            ModelError::UnsupportedType {
                name: name.into(),
                ty,
                backend: "host decode",
            }
        })?;
        Ok(out)
    }

    fn vector(&self, name: &str, len: usize) -> Result<B::Buf> {
        let v = self.host_f32(name, &[len])?;
        Ok(self.be.upload(&v)?)
    }

    fn owned_f32(&self, name: &str, dims: &[usize], v: Vec<f32>) -> Result<B::Weight<'a>> {
        let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
        Ok(self
            .be
            .upload_weight(name, GgmlType::F32, dims, Cow::Owned(bytes))?)
    }
}

/// A SwiGLU MLP of hidden width `d_ff`; a shard holds `d_ff / world` of it (gate/up rows,
/// down columns).
fn mlp<'a, B: Backend>(
    b: &Binder<'a, '_, B>,
    c: &Config,
    p: &str,
    suffix: &str,
    d_ff: usize,
) -> Result<MlpWeights<'a, B>> {
    Ok(MlpWeights {
        gate: b.weight(&format!("{p}.ffn_gate{suffix}.weight"), &[c.d_model, d_ff])?,
        up: b.weight(&format!("{p}.ffn_up{suffix}.weight"), &[c.d_model, d_ff])?,
        down: b.weight(&format!("{p}.ffn_down{suffix}.weight"), &[d_ff, c.d_model])?,
        d_ff: d_ff / b.shard.world,
    })
}

fn attention<'a, B: Backend>(
    b: &Binder<'a, '_, B>,
    c: &Config,
    p: &str,
) -> Result<MlaWeights<'a, B>> {
    let (h, qk) = (c.n_heads, c.nope + c.rope_dim);
    // This shard's heads. Checked here: `attn_q_b`'s or a fused `attn_kv_b`'s rows may divide
    // where the heads do not, and a cut through a head would be silently wrong.
    let world = b.shard.world.max(1);
    if !h.is_multiple_of(world) {
        let q = if c.q_lora > 0 { "attn_q_b" } else { "attn_q" };
        return Err(glint_tp::ShardError::Count {
            name: format!("{p}.{q}.weight"),
            what: "attention heads",
            count: h,
            world,
        }
        .into());
    }
    let hl = h / world;
    let q = if c.q_lora > 0 {
        QProj::Lora {
            a: b.weight(&format!("{p}.attn_q_a.weight"), &[c.d_model, c.q_lora])?,
            norm: b.vector(&format!("{p}.attn_q_a_norm.weight"), c.q_lora)?,
            b: b.weight(&format!("{p}.attn_q_b.weight"), &[c.q_lora, h * qk])?,
        }
    } else {
        QProj::Direct(b.weight(&format!("{p}.attn_q.weight"), &[c.d_model, h * qk])?)
    };
    let kb_name = format!("{p}.attn_k_b.weight");
    let vb_name = format!("{p}.attn_v_b.weight");
    let kvb_name = format!("{p}.attn_kv_b.weight");
    let kb_dims = [c.nope, c.kv_lora, h];
    let vb_dims = [c.kv_lora, c.v_dim, h];
    let (k_b, v_b) = if !b.has(&kb_name) && b.has(&kvb_name) {
        // Head-major rows: a shard's rows are its heads', split per head by slot.
        let kv_b = b.host_f32(&kvb_name, &[c.kv_lora, h * (c.nope + c.v_dim)])?;
        let (k, v) = glint_mla::split_kv_b(&kv_b, hl, c.nope, c.v_dim, c.kv_lora);
        (
            b.owned_f32(&kb_name, &[c.nope, c.kv_lora, hl], k)?,
            b.owned_f32(&vb_name, &[c.kv_lora, c.v_dim, hl], v)?,
        )
    } else {
        (b.weight(&kb_name, &kb_dims)?, b.weight(&vb_name, &vb_dims)?)
    };
    let indexer = match &c.indexer {
        Some(ix) => Some(IndexerWeights {
            q_b: b.weight(
                &format!("{p}.indexer.attn_q_b.weight"),
                &[c.q_lora, ix.n_heads * ix.head_dim],
            )?,
            k: b.weight(
                &format!("{p}.indexer.attn_k.weight"),
                &[c.d_model, ix.head_dim],
            )?,
            k_norm: b.vector(&format!("{p}.indexer.k_norm.weight"), ix.head_dim)?,
            k_norm_bias: if b.has(&format!("{p}.indexer.k_norm.bias")) {
                b.vector(&format!("{p}.indexer.k_norm.bias"), ix.head_dim)?
            } else {
                b.be.alloc(ix.head_dim)?
            },
            proj: b.weight(
                &format!("{p}.indexer.proj.weight"),
                &[c.d_model, ix.n_heads],
            )?,
            dims: IndexerDims {
                n_heads: ix.n_heads,
                head_dim: ix.head_dim,
                top_k: ix.top_k,
                rope_mode: ix.rope_mode,
                eps: ix.eps,
            },
        }),
        None => None,
    };
    Ok(MlaWeights {
        q,
        kv_a: b.weight(
            &format!("{p}.attn_kv_a_mqa.weight"),
            &[c.d_model, c.kv_lora + c.rope_dim],
        )?,
        kv_a_norm: b.vector(&format!("{p}.attn_kv_a_norm.weight"), c.kv_lora)?,
        k_b,
        v_b,
        o: b.weight(
            &format!("{p}.attn_output.weight"),
            &[h * c.v_dim, c.d_model],
        )?,
        indexer,
    })
}

impl<'a, B: Backend> ModelWeights<'a, B> {
    pub fn bind(gguf: &'a Gguf, be: &B, c: &Config) -> Result<Self> {
        Self::bind_shard(gguf, be, c, Shard::FULL)
    }

    /// Binds `shard`'s part of every tensor (the plan in [`crate::shard`]).
    pub fn bind_shard(gguf: &'a Gguf, be: &B, c: &Config, shard: Shard) -> Result<Self> {
        let total = crate::shard::local_bytes(gguf, shard);
        let b = Binder {
            gguf,
            be,
            shard,
            progress: std::cell::Cell::new((0, total, 0)),
        };
        let (world, ep) = (shard.world.max(1), shard.ep && shard.world > 1);
        let token_embd = b.weight("token_embd.weight", &[c.d_model, c.n_vocab])?;
        let output = if b.has("output.weight") {
            b.weight("output.weight", &[c.d_model, c.n_vocab])?
        } else {
            // Tied: the embedding is replicated, the head is split by vocabulary rows.
            b.weight_split("token_embd.weight", &[c.d_model, c.n_vocab], Split::ROWS)?
        };
        let output_norm = b.vector("output_norm.weight", c.d_model)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for l in 0..c.n_layer {
            let p = format!("blk.{l}");
            let ffn = if c.is_moe(l) {
                let e = c.n_expert;
                if ep && !e.is_multiple_of(world) {
                    return Err(glint_tp::ShardError::Count {
                        name: format!("{p}.ffn_down_exps.weight"),
                        what: "routed experts",
                        count: e,
                        world,
                    }
                    .into());
                }
                let bias_name = format!("{p}.exp_probs_b.bias");
                Ffn::Moe(MoeWeights {
                    gate_inp: b.weight(&format!("{p}.ffn_gate_inp.weight"), &[c.d_model, e])?,
                    bias: if b.has(&bias_name) {
                        Some(b.vector(&bias_name, e)?)
                    } else {
                        None
                    },
                    gate_up: if b.has(&format!("{p}.ffn_gate_up_exps.weight")) {
                        ExpertGateUp::Fused(b.weight(
                            &format!("{p}.ffn_gate_up_exps.weight"),
                            &[c.d_model, 2 * c.d_ff_exp, e],
                        )?)
                    } else {
                        ExpertGateUp::Split {
                            gate: b.weight(
                                &format!("{p}.ffn_gate_exps.weight"),
                                &[c.d_model, c.d_ff_exp, e],
                            )?,
                            up: b.weight(
                                &format!("{p}.ffn_up_exps.weight"),
                                &[c.d_model, c.d_ff_exp, e],
                            )?,
                        }
                    },
                    down_exps: b.weight(
                        &format!("{p}.ffn_down_exps.weight"),
                        &[c.d_ff_exp, c.d_model, e],
                    )?,
                    d_ff: if ep { c.d_ff_exp } else { c.d_ff_exp / world },
                    shared: if c.n_expert_shared > 0 {
                        Some(mlp(&b, c, &p, "_shexp", c.d_ff_exp * c.n_expert_shared)?)
                    } else {
                        None
                    },
                    router: RouterParams {
                        n_expert: e,
                        n_used: c.n_expert_used,
                        gating: c.gating,
                        n_group: c.n_group,
                        n_group_used: c.n_group_used,
                        normalize: c.weights_norm,
                        scale: c.weights_scale,
                    },
                    local_experts: ep.then(|| {
                        let per = (e / world) as u32;
                        (shard.rank as u32 * per, per)
                    }),
                })
            } else {
                Ffn::Dense(mlp(&b, c, &p, "", c.d_ff)?)
            };
            layers.push(LayerWeights {
                attn_norm: b.vector(&format!("{p}.attn_norm.weight"), c.d_model)?,
                attn: attention(&b, c, &p)?,
                ffn_norm: b.vector(&format!("{p}.ffn_norm.weight"), c.d_model)?,
                ffn,
            });
        }
        Ok(Self {
            token_embd,
            output_norm,
            output,
            layers,
        })
    }
}
