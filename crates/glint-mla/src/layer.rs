//! One MLA (+ DSA) attention layer in absorbed form, written once against the Backend trait.
//!
//! Absorbed form (spec §2.6): instead of decompressing the latent cache into per-head K/V, the
//! key up-projection `W_UK_h` is folded into the query (`q̃_h = W_UK_hᵀ q_nope_h`) and the value
//! up-projection `W_UV_h` is applied after attention. Attention then is MQA over one shared
//! 576-wide row per token, which is what makes the cache small and decode cheap.

use glint_core::{AttnParams, Backend, IndexerParams, RopeMode, RopeParams};

use crate::cache::LayerCache;
use crate::error::Result;

/// Static shape of an MLA layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaDims {
    pub d_model: usize,
    pub n_heads: usize,
    /// 0 when the model projects q directly from the hidden state (no q LoRA).
    pub q_lora: usize,
    pub kv_lora: usize,
    pub nope: usize,
    pub rope: usize,
    pub v_dim: usize,
    /// RMSNorm eps of `attn_q_a_norm` / `attn_kv_a_norm`.
    pub eps: f32,
    /// Softmax scale: `mscale² / sqrt(nope + rope)`.
    pub scale: f32,
}

impl MlaDims {
    pub fn qk_dim(&self) -> usize {
        self.nope + self.rope
    }
    /// Width of a cache row and of an absorbed query head.
    pub fn row(&self) -> usize {
        self.kv_lora + self.rope
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexerDims {
    pub n_heads: usize,
    pub head_dim: usize,
    pub top_k: usize,
    /// GLM-5: interleaved; DeepSeek-V3.2: NeoX.
    pub rope_mode: RopeMode,
    /// LayerNorm eps of `indexer.k_norm`.
    pub eps: f32,
}

/// RoPE state shared by every layer: frequencies on the device, YaRN magnitude and layout.
pub struct Rope<B: Backend> {
    pub inv_freq: B::Buf,
    pub attn_factor: f32,
    pub mode: RopeMode,
}

pub struct IndexerWeights<'a, B: Backend + 'a> {
    pub q_b: B::Weight<'a>,
    pub k: B::Weight<'a>,
    pub k_norm: B::Buf,
    pub k_norm_bias: B::Buf,
    pub proj: B::Weight<'a>,
    pub dims: IndexerDims,
}

/// How queries are projected: through the q LoRA (`attn_q_a`, norm, `attn_q_b`) or directly.
pub enum QProj<'a, B: Backend + 'a> {
    Lora {
        a: B::Weight<'a>,
        norm: B::Buf,
        b: B::Weight<'a>,
    },
    Direct(B::Weight<'a>),
}

pub struct MlaWeights<'a, B: Backend + 'a> {
    pub q: QProj<'a, B>,
    pub kv_a: B::Weight<'a>,
    pub kv_a_norm: B::Buf,
    /// `{nope, kv_lora, n_heads}`: per head `W_UK_hᵀ`.
    pub k_b: B::Weight<'a>,
    /// `{kv_lora, v_dim, n_heads}`: per head `W_UV_h`.
    pub v_b: B::Weight<'a>,
    pub o: B::Weight<'a>,
    pub indexer: Option<IndexerWeights<'a, B>>,
}

/// Per-batch inputs shared by all layers.
pub struct Batch<B: Backend> {
    pub n: usize,
    /// Absolute position of the first token (= its cache row).
    pub start: usize,
    /// `[n]` absolute positions.
    pub positions: B::Ids,
    /// `[n × n_heads]` head indices, for the per-head batched products.
    pub head_ids: B::Ids,
}

impl<B: Backend> Batch<B> {
    pub fn new(backend: &B, start: usize, n: usize, n_heads: usize) -> Result<Self> {
        let pos: Vec<u32> = (start..start + n).map(|p| p as u32).collect();
        let heads: Vec<u32> = (0..n * n_heads).map(|i| (i % n_heads) as u32).collect();
        Ok(Self {
            n,
            start,
            positions: backend.upload_ids(&pos)?,
            head_ids: backend.upload_ids(&heads)?,
        })
    }
}

/// Runs attention for the batch: `a` is the attn-normed hidden state `[n × d_model]`; writes the
/// attention output (after `attn_output`) to `out [n × d_model]`. Appends this batch's latent
/// rows (and indexer keys) to `cache` at rows `batch.start..`.
#[allow(clippy::too_many_arguments)]
pub fn forward<B: Backend>(
    be: &B,
    w: &MlaWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    batch: &Batch<B>,
    cache: &mut LayerCache<B>,
    out: &mut B::Buf,
) -> Result<()> {
    let n = batch.n;
    let h = d.n_heads;
    let qk = d.qk_dim();
    let row = d.row();

    // Queries.
    let mut q = be.alloc(n * h * qk)?;
    let cq = match &w.q {
        QProj::Lora { a: qa, norm, b } => {
            let mut raw = be.alloc(n * d.q_lora)?;
            be.matmul(qa, a, n, &mut raw)?;
            let mut cq = be.alloc(n * d.q_lora)?;
            be.rms_norm(&raw, norm, n, d.q_lora, d.eps, &mut cq)?;
            be.matmul(b, &cq, n, &mut q)?;
            Some(cq)
        }
        QProj::Direct(wq) => {
            be.matmul(wq, a, n, &mut q)?;
            None
        }
    };
    be.rope(
        &mut q,
        &batch.positions,
        &rope.inv_freq,
        &RopeParams {
            n_tokens: n,
            n_heads: h,
            head_dim: qk,
            offset: d.nope,
            n_rot: d.rope,
            mode: rope.mode,
            attn_factor: rope.attn_factor,
        },
    )?;

    // Latent KV for the new tokens -> cache rows.
    let mut kv = be.alloc(n * row)?;
    be.matmul(&w.kv_a, a, n, &mut kv)?;
    let mut raw = be.alloc(n * d.kv_lora)?;
    be.copy2d(&kv, 0, row, &mut raw, 0, d.kv_lora, n, d.kv_lora)?;
    let mut ckv = be.alloc(n * d.kv_lora)?;
    be.rms_norm(&raw, &w.kv_a_norm, n, d.kv_lora, d.eps, &mut ckv)?;
    let mut kpe = be.alloc(n * d.rope)?;
    be.copy2d(&kv, d.kv_lora, row, &mut kpe, 0, d.rope, n, d.rope)?;
    be.rope(
        &mut kpe,
        &batch.positions,
        &rope.inv_freq,
        &RopeParams {
            n_tokens: n,
            n_heads: 1,
            head_dim: d.rope,
            offset: 0,
            n_rot: d.rope,
            mode: rope.mode,
            attn_factor: rope.attn_factor,
        },
    )?;
    let base = batch.start * row;
    be.copy2d(
        &ckv,
        0,
        d.kv_lora,
        &mut cache.latent,
        base,
        row,
        n,
        d.kv_lora,
    )?;
    be.copy2d(
        &kpe,
        0,
        d.rope,
        &mut cache.latent,
        base + d.kv_lora,
        row,
        n,
        d.rope,
    )?;

    // Absorb W_UK into the queries: Q_h = [W_UK_hᵀ q_nope_h | q_pe_h].
    let mut qn = be.alloc(n * h * d.nope)?;
    be.copy2d(&q, 0, qk, &mut qn, 0, d.nope, n * h, d.nope)?;
    let mut qt = be.alloc(n * h * d.kv_lora)?;
    be.mul_mat_id(&w.k_b, &batch.head_ids, h, &qn, true, n, &mut qt)?;
    let mut qfull = be.alloc(n * h * row)?;
    be.copy2d(&qt, 0, d.kv_lora, &mut qfull, 0, row, n * h, d.kv_lora)?;
    be.copy2d(&q, d.nope, qk, &mut qfull, d.kv_lora, row, n * h, d.rope)?;

    let n_kv = batch.start + n;
    let selected = match (&w.indexer, &cq, cache.index_k.as_mut()) {
        (Some(iw), Some(cq), Some(keys)) => {
            indexer(be, iw, d, rope, a, cq, batch, keys, n_kv)?.map(|s| (s, iw.dims.top_k))
        }
        _ => None,
    };

    let mut olat = be.alloc(n * h * d.kv_lora)?;
    be.mla_attention(
        &qfull,
        &cache.latent,
        &batch.positions,
        selected.as_ref().map(|(s, _)| s),
        &AttnParams {
            n_tokens: n,
            n_heads: h,
            dk: row,
            dv: d.kv_lora,
            n_kv,
            n_selected: selected.as_ref().map_or(0, |(_, k)| *k),
            scale: d.scale,
        },
        &mut olat,
    )?;
    let mut oh = be.alloc(n * h * d.v_dim)?;
    be.mul_mat_id(&w.v_b, &batch.head_ids, h, &olat, true, n, &mut oh)?;
    be.matmul(&w.o, &oh, n, out)?;
    Ok(())
}

/// The DSA lightning indexer. Always computes and caches this batch's keys; returns the
/// selected key indices `[n × top_k]` only when some query sees more than `top_k` keys
/// (otherwise every visible key is selected and dense attention is exact, spec §3.7).
#[allow(clippy::too_many_arguments)]
fn indexer<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    cq: &B::Buf,
    batch: &Batch<B>,
    keys: &mut B::Buf,
    n_kv: usize,
) -> Result<Option<B::Ids>> {
    let n = batch.n;
    let id = &iw.dims;
    let rp = |heads| RopeParams {
        n_tokens: n,
        n_heads: heads,
        head_dim: id.head_dim,
        offset: 0,
        n_rot: d.rope,
        mode: id.rope_mode,
        attn_factor: rope.attn_factor,
    };
    let mut kraw = be.alloc(n * id.head_dim)?;
    be.matmul(&iw.k, a, n, &mut kraw)?;
    let mut k = be.alloc(n * id.head_dim)?;
    be.layer_norm(
        &kraw,
        &iw.k_norm,
        &iw.k_norm_bias,
        n,
        id.head_dim,
        id.eps,
        &mut k,
    )?;
    be.rope(&mut k, &batch.positions, &rope.inv_freq, &rp(1))?;
    be.copy2d(
        &k,
        0,
        id.head_dim,
        keys,
        batch.start * id.head_dim,
        id.head_dim,
        n,
        id.head_dim,
    )?;
    if n_kv <= id.top_k {
        return Ok(None);
    }
    let mut q = be.alloc(n * id.n_heads * id.head_dim)?;
    be.matmul(&iw.q_b, cq, n, &mut q)?;
    be.rope(&mut q, &batch.positions, &rope.inv_freq, &rp(id.n_heads))?;
    let mut wts = be.alloc(n * id.n_heads)?;
    be.matmul(&iw.proj, a, n, &mut wts)?;
    // n_heads^-1/2 · head_dim^-1/2: a global factor (ordering-neutral) kept for numeric parity.
    be.scale(
        &mut wts,
        1.0 / ((id.n_heads * id.head_dim) as f32).sqrt(),
        n * id.n_heads,
    )?;
    let mut scores = be.alloc(n * n_kv)?;
    be.indexer_scores(
        &q,
        &wts,
        keys,
        &batch.positions,
        &IndexerParams {
            n_tokens: n,
            n_heads: id.n_heads,
            head_dim: id.head_dim,
            n_kv,
        },
        &mut scores,
    )?;
    let mut sel = be.upload_ids(&vec![0u32; n * id.top_k])?;
    be.top_k(&scores, n, n_kv, id.top_k, &mut sel)?;
    Ok(Some(sel))
}
