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

/// Work buffers of one layer call, kept between calls (and shared by all layers) so decode does
/// not allocate. Buffers only grow; ops use the prefix they need.
pub struct MlaScratch<B: Backend> {
    q: B::Buf,
    qa: B::Buf,
    cq: B::Buf,
    kv: B::Buf,
    raw: B::Buf,
    ckv: B::Buf,
    kpe: B::Buf,
    qn: B::Buf,
    qt: B::Buf,
    qfull: B::Buf,
    olat: B::Buf,
    oh: B::Buf,
    ik_raw: B::Buf,
    ik: B::Buf,
    iq: B::Buf,
    iw: B::Buf,
    scores: B::Buf,
    sel: B::Ids,
    sel_len: usize,
    last_selected: Option<usize>,
}

/// Grows `buf` to at least `len` floats.
pub fn ensure<B: Backend>(be: &B, buf: &mut B::Buf, len: usize) -> Result<()> {
    if be.buf_len(buf) < len {
        *buf = be.alloc(len)?;
    }
    Ok(())
}

impl<B: Backend> MlaScratch<B> {
    pub fn new(be: &B) -> Result<Self> {
        let e = || be.alloc(0);
        Ok(Self {
            q: e()?,
            qa: e()?,
            cq: e()?,
            kv: e()?,
            raw: e()?,
            ckv: e()?,
            kpe: e()?,
            qn: e()?,
            qt: e()?,
            qfull: e()?,
            olat: e()?,
            oh: e()?,
            ik_raw: e()?,
            ik: e()?,
            iq: e()?,
            iw: e()?,
            scores: e()?,
            sel: be.alloc_ids(0)?,
            // `sel_len` tracks the ids capacity: Ids have no length query on the trait.
            sel_len: 0,
            last_selected: None,
        })
    }

    /// The key indices the indexer selected in the most recent layer call (`[n × k]`, `k`
    /// returned alongside), or None when that call attended to every visible key. For tests and
    /// debugging (comparing selections with another implementation).
    pub fn selection(&self) -> Option<(&B::Ids, usize)> {
        self.last_selected.map(|k| (&self.sel, k))
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
    sc: &mut MlaScratch<B>,
    out: &mut B::Buf,
) -> Result<()> {
    let n = batch.n;
    let h = d.n_heads;
    let qk = d.qk_dim();
    let row = d.row();
    let rp = |heads, head_dim, offset| RopeParams {
        n_tokens: n,
        n_heads: heads,
        head_dim,
        offset,
        n_rot: d.rope,
        mode: rope.mode,
        attn_factor: rope.attn_factor,
    };

    // Queries.
    ensure(be, &mut sc.q, n * h * qk)?;
    let has_cq = match &w.q {
        QProj::Lora { a: qa, norm, b } => {
            ensure(be, &mut sc.qa, n * d.q_lora)?;
            ensure(be, &mut sc.cq, n * d.q_lora)?;
            be.matmul(qa, a, n, &mut sc.qa)?;
            be.rms_norm(&sc.qa, norm, n, d.q_lora, d.eps, &mut sc.cq)?;
            be.matmul(b, &sc.cq, n, &mut sc.q)?;
            true
        }
        QProj::Direct(wq) => {
            be.matmul(wq, a, n, &mut sc.q)?;
            false
        }
    };
    be.rope(
        &mut sc.q,
        &batch.positions,
        &rope.inv_freq,
        &rp(h, qk, d.nope),
    )?;

    // Latent KV for the new tokens -> cache rows.
    ensure(be, &mut sc.kv, n * row)?;
    ensure(be, &mut sc.raw, n * d.kv_lora)?;
    ensure(be, &mut sc.ckv, n * d.kv_lora)?;
    ensure(be, &mut sc.kpe, n * d.rope)?;
    be.matmul(&w.kv_a, a, n, &mut sc.kv)?;
    be.copy2d(&sc.kv, 0, row, &mut sc.raw, 0, d.kv_lora, n, d.kv_lora)?;
    be.rms_norm(&sc.raw, &w.kv_a_norm, n, d.kv_lora, d.eps, &mut sc.ckv)?;
    be.copy2d(&sc.kv, d.kv_lora, row, &mut sc.kpe, 0, d.rope, n, d.rope)?;
    be.rope(
        &mut sc.kpe,
        &batch.positions,
        &rope.inv_freq,
        &rp(1, d.rope, 0),
    )?;
    let base = batch.start * row;
    be.copy2d(
        &sc.ckv,
        0,
        d.kv_lora,
        &mut cache.latent,
        base,
        row,
        n,
        d.kv_lora,
    )?;
    be.copy2d(
        &sc.kpe,
        0,
        d.rope,
        &mut cache.latent,
        base + d.kv_lora,
        row,
        n,
        d.rope,
    )?;

    // Absorb W_UK into the queries: Q_h = [W_UK_hᵀ q_nope_h | q_pe_h].
    ensure(be, &mut sc.qn, n * h * d.nope)?;
    ensure(be, &mut sc.qt, n * h * d.kv_lora)?;
    ensure(be, &mut sc.qfull, n * h * row)?;
    be.copy2d(&sc.q, 0, qk, &mut sc.qn, 0, d.nope, n * h, d.nope)?;
    be.mul_mat_id(&w.k_b, &batch.head_ids, h, &sc.qn, true, n, &mut sc.qt)?;
    be.copy2d(
        &sc.qt,
        0,
        d.kv_lora,
        &mut sc.qfull,
        0,
        row,
        n * h,
        d.kv_lora,
    )?;
    be.copy2d(
        &sc.q,
        d.nope,
        qk,
        &mut sc.qfull,
        d.kv_lora,
        row,
        n * h,
        d.rope,
    )?;

    let n_kv = batch.start + n;
    let n_selected = match (&w.indexer, has_cq, cache.index_k.as_mut()) {
        (Some(iw), true, Some(keys)) => indexer(be, iw, d, rope, a, batch, keys, sc, n_kv)?,
        _ => None,
    };
    sc.last_selected = n_selected;

    ensure(be, &mut sc.olat, n * h * d.kv_lora)?;
    ensure(be, &mut sc.oh, n * h * d.v_dim)?;
    be.mla_attention(
        &sc.qfull,
        &cache.latent,
        &batch.positions,
        n_selected.map(|_| &sc.sel),
        &AttnParams {
            n_tokens: n,
            n_heads: h,
            dk: row,
            dv: d.kv_lora,
            n_kv,
            n_selected: n_selected.unwrap_or(0),
            scale: d.scale,
        },
        &mut sc.olat,
    )?;
    be.mul_mat_id(&w.v_b, &batch.head_ids, h, &sc.olat, true, n, &mut sc.oh)?;
    be.matmul(&w.o, &sc.oh, n, out)?;
    Ok(())
}

/// The DSA lightning indexer. Always computes and caches this batch's keys; when some query
/// sees more than `top_k` keys, writes the selected key indices `[n × top_k]` to `sc.sel` and
/// returns `Some(top_k)`. Otherwise every visible key is selected and dense attention is exact
/// (spec §3.7), so scoring is skipped.
#[allow(clippy::too_many_arguments)]
fn indexer<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    batch: &Batch<B>,
    keys: &mut B::Buf,
    sc: &mut MlaScratch<B>,
    n_kv: usize,
) -> Result<Option<usize>> {
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
    ensure(be, &mut sc.ik_raw, n * id.head_dim)?;
    ensure(be, &mut sc.ik, n * id.head_dim)?;
    be.matmul(&iw.k, a, n, &mut sc.ik_raw)?;
    be.layer_norm(
        &sc.ik_raw,
        &iw.k_norm,
        &iw.k_norm_bias,
        n,
        id.head_dim,
        id.eps,
        &mut sc.ik,
    )?;
    be.rope(&mut sc.ik, &batch.positions, &rope.inv_freq, &rp(1))?;
    be.copy2d(
        &sc.ik,
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
    ensure(be, &mut sc.iq, n * id.n_heads * id.head_dim)?;
    ensure(be, &mut sc.iw, n * id.n_heads)?;
    ensure(be, &mut sc.scores, n * n_kv)?;
    be.matmul(&iw.q_b, &sc.cq, n, &mut sc.iq)?;
    be.rope(
        &mut sc.iq,
        &batch.positions,
        &rope.inv_freq,
        &rp(id.n_heads),
    )?;
    be.matmul(&iw.proj, a, n, &mut sc.iw)?;
    // n_heads^-1/2 · head_dim^-1/2: a global factor (ordering-neutral) kept for numeric parity.
    be.scale(
        &mut sc.iw,
        1.0 / ((id.n_heads * id.head_dim) as f32).sqrt(),
        n * id.n_heads,
    )?;
    be.indexer_scores(
        &sc.iq,
        &sc.iw,
        keys,
        &batch.positions,
        &IndexerParams {
            n_tokens: n,
            n_heads: id.n_heads,
            head_dim: id.head_dim,
            n_kv,
        },
        &mut sc.scores,
    )?;
    if sc.sel_len < n * id.top_k {
        sc.sel = be.alloc_ids(n * id.top_k)?;
        sc.sel_len = n * id.top_k;
    }
    be.top_k(&sc.scores, n, n_kv, id.top_k, &mut sc.sel)?;
    Ok(Some(id.top_k))
}
