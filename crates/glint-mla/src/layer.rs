//! One MLA (+ DSA) attention layer in absorbed form, written once against the Backend trait.
//!
//! Absorbed form (spec §2.6): instead of decompressing the latent cache into per-head K/V, the
//! key up-projection `W_UK_h` is folded into the query (`q̃_h = W_UK_hᵀ q_nope_h`) and the value
//! up-projection `W_UV_h` is applied after attention. Attention then is MQA over one shared
//! 576-wide row per token, which is what makes the cache small and decode cheap.

use glint_core::{AttnParams, Backend, IndexerParams, RopeMode, RopeParams, Rows};

use crate::cache::PoolLayer;
use crate::error::{MlaError, Result};
use crate::plan::StepInputs;

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

impl<'a, B: Backend + 'a> MlaWeights<'a, B> {
    /// The first product of the layer's input (q_a, or wq): the one the attention norm's output
    /// is prepared for (`Backend::rms_norm_for`; kv_a and the indexer read the same input).
    pub fn input_product(&self) -> &B::Weight<'a> {
        match &self.q {
            QProj::Lora { a, .. } => a,
            QProj::Direct(w) => w,
        }
    }
}

/// Work buffers of a layer call, sized once for the step's limits and shared by all layers, so
/// no step allocates. Names say what each holds for `n` step tokens.
pub struct MlaScratch<B: Backend> {
    /// `[n × H × (nope + rope)]` queries after `attn_q_b` (and RoPE).
    q: B::Buf,
    /// `[n × q_lora]` `attn_q_a` output, and its RMS-normalised form (the indexer reads it too).
    q_lora_raw: B::Buf,
    q_lora: B::Buf,
    /// `[n × (kv_lora + rope)]` `attn_kv_a` output, turned in place into the new cache rows.
    kv_rows: B::Buf,
    /// `[n × kv_lora]` the latent part before and after its RMSNorm.
    kv_raw: B::Buf,
    kv_normed: B::Buf,
    /// `[n × H × nope]`, `[n × H × kv_lora]`: q_nope and `W_UK_hᵀ q_nope`.
    q_nope: B::Buf,
    q_absorbed: B::Buf,
    /// `[n × H × (kv_lora + rope)]` the MQA query over cache rows.
    q_mqa: B::Buf,
    /// `[n × H × kv_lora]` attention output in latent space, `[n × H × v_dim]` after `W_UV`.
    o_latent: B::Buf,
    o_heads: B::Buf,
    /// The indexer's buffers, apart so its ops can run beside the query path's
    /// (`Backend::concurrently`).
    ix: IndexerScratch<B>,
    max_tokens: usize,
    last_selected: Option<usize>,
}

struct IndexerScratch<B: Backend> {
    /// `[n × head_dim]` key projection and its normalised, rotated form; `[n × Hi × head_dim]`
    /// queries; `[n × Hi]` head weights; the backend's selection scratch.
    k_raw: B::Buf,
    k: B::Buf,
    q: B::Buf,
    w: B::Buf,
    scratch: B::Buf,
    scratch_len: usize,
    /// `[n × top_k]` selected logical key positions.
    selected: B::Ids,
}

impl<B: Backend> MlaScratch<B> {
    /// Buffers for up to `max_tokens` tokens per step over at most `kv_capacity` keys.
    pub fn new(
        be: &B,
        d: &MlaDims,
        indexer: Option<&IndexerDims>,
        max_tokens: usize,
        kv_capacity: usize,
    ) -> Result<Self> {
        let n = max_tokens;
        let h = d.n_heads;
        let a = |len: usize| be.alloc(len);
        let (hi, di, k) = indexer.map_or((0, 0, 0), |x| (x.n_heads, x.head_dim, x.top_k));
        let index_scratch_len = if indexer.is_some() {
            be.indexer_scratch_len(n, kv_capacity)
        } else {
            0
        };
        Ok(Self {
            q: a(n * h * d.qk_dim())?,
            q_lora_raw: a(n * d.q_lora)?,
            q_lora: a(n * d.q_lora)?,
            kv_rows: a(n * d.row())?,
            kv_raw: a(n * d.kv_lora)?,
            kv_normed: a(n * d.kv_lora)?,
            q_nope: a(n * h * d.nope)?,
            q_absorbed: a(n * h * d.kv_lora)?,
            q_mqa: a(n * h * d.row())?,
            o_latent: a(n * h * d.kv_lora)?,
            o_heads: a(n * h * d.v_dim)?,
            ix: IndexerScratch {
                k_raw: a(n * di)?,
                k: a(n * di)?,
                q: a(n * hi * di)?,
                w: a(n * hi)?,
                scratch: a(index_scratch_len)?,
                scratch_len: index_scratch_len,
                selected: be.alloc_ids(n * k)?,
            },
            max_tokens,
            last_selected: None,
        })
    }

    /// The key positions the indexer selected in the most recent layer call (`[n × k]`, `k`
    /// returned alongside), or None when that call attended to every visible key. For tests and
    /// debugging (comparing selections with another implementation).
    pub fn selection(&self) -> Option<(&B::Ids, usize)> {
        self.last_selected.map(|k| (&self.ix.selected, k))
    }
}

/// Runs attention for the step: `a` is the attn-normed hidden state `[n × d_model]`; writes the
/// attention output (after `attn_output`) to `out [n × d_model]`. Writes the step's latent rows
/// (and indexer keys) into the pool at the step's slots.
#[allow(clippy::too_many_arguments)]
pub fn forward<B: Backend>(
    be: &B,
    w: &MlaWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    step: &StepInputs<B>,
    pool: &mut PoolLayer<B>,
    sc: &mut MlaScratch<B>,
    out: &mut B::Buf,
) -> Result<()> {
    let n = step.n;
    if n > sc.max_tokens {
        return Err(MlaError::Scratch {
            what: "step tokens",
            needed: n,
            capacity: sc.max_tokens,
        });
    }
    let h = d.n_heads;
    let q_rows = Rows::of(d.qk_dim());
    let mut n_selected = None;
    let has_q_lora = matches!(w.q, QProj::Lora { .. });
    // Two chains beside each other (a second stream on a GPU): the indexer reads only the
    // normed input and q_lora. While it only writes its keys, the latent rows join it and the
    // query path runs alone beside them. When it selects (the longer chain, the step's critical
    // path), its keys run beside q_lora; its query (which waits for q_lora) beside its head
    // weights, which the main chain computes after q_lora; then its scores and top-k beside
    // the query's rest and the latent rows. On an H100 at 16k (calls BC and BK) the head
    // weights, a ~9 µs launch, held the indexer's query back wherever they ran before it on
    // either chain; this order decoded +0.9% faster at 16k than the head weights after the
    // keys on the side chain (call BM, docs/performance.md).
    match (&w.indexer, has_q_lora, pool.index_k.as_mut()) {
        (Some(iw), true, Some(keys)) if step.max_seen > iw.dims.top_k => {
            be.branches(|b| {
                b.side(|| indexer_keys(be, iw, d, rope, a, step, keys, &mut sc.ix))?;
                b.main(|| q_lora(be, w, d, a, n, &mut sc.q_lora_raw, &mut sc.q_lora))?;
                b.side_after_main(|| indexer_query(be, iw, d, rope, step, &sc.q_lora, &mut sc.ix))?;
                b.main(|| Ok::<_, MlaError>(be.matmul(&iw.proj, a, n, &mut sc.ix.w)?))?;
                b.side_after_main(|| indexer_select(be, iw, step, keys, &mut sc.ix))?;
                b.main(|| {
                    let (q, q_nope, q_abs) = (&mut sc.q, &mut sc.q_nope, &mut sc.q_absorbed);
                    queries(be, w, d, rope, a, step, &sc.q_lora, q, q_nope, q_abs)?;
                    let kv = [&mut sc.kv_rows, &mut sc.kv_raw, &mut sc.kv_normed];
                    latent_rows(be, w, d, rope, a, step, &mut pool.latent, kv)
                })
            })?;
            n_selected = Some(iw.dims.top_k);
        }
        (Some(iw), true, Some(keys)) => be.branches(|b| {
            b.side(|| {
                let kv = [&mut sc.kv_rows, &mut sc.kv_raw, &mut sc.kv_normed];
                latent_rows(be, w, d, rope, a, step, &mut pool.latent, kv)?;
                // Keys only: no query sees more than top_k keys.
                indexer_keys(be, iw, d, rope, a, step, keys, &mut sc.ix)
            })?;
            b.main(|| {
                q_lora(be, w, d, a, n, &mut sc.q_lora_raw, &mut sc.q_lora)?;
                let (q, q_nope, q_abs) = (&mut sc.q, &mut sc.q_nope, &mut sc.q_absorbed);
                queries(be, w, d, rope, a, step, &sc.q_lora, q, q_nope, q_abs)
            })
        })?,
        _ => {
            q_lora(be, w, d, a, n, &mut sc.q_lora_raw, &mut sc.q_lora)?;
            let (q, q_nope, q_abs) = (&mut sc.q, &mut sc.q_nope, &mut sc.q_absorbed);
            queries(be, w, d, rope, a, step, &sc.q_lora, q, q_nope, q_abs)?;
            let kv = [&mut sc.kv_rows, &mut sc.kv_raw, &mut sc.kv_normed];
            latent_rows(be, w, d, rope, a, step, &mut pool.latent, kv)?;
        }
    }
    sc.last_selected = n_selected;

    // The query rows [W_UK_hᵀ q_nope_h | q_pe_h] are q_absorbed's rows and q's rope columns:
    // assembled into q_mqa by the default, read in place where a backend can.
    be.mla_attention_parts(
        &sc.q_absorbed,
        &sc.q,
        q_rows.at(d.nope),
        &mut sc.q_mqa,
        &pool.latent,
        &step.positions,
        &step.pages(),
        n_selected.map(|_| &sc.ix.selected),
        &AttnParams {
            n_tokens: n,
            n_heads: h,
            dk: d.row(),
            dv: d.kv_lora,
            n_kv: step.max_seen,
            n_selected: n_selected.unwrap_or(0),
            scale: d.scale,
        },
        &mut sc.o_latent,
    )?;
    be.per_head_matmul(&w.v_b, &step.head_ids, h, &sc.o_latent, n, &mut sc.o_heads)?;
    be.matmul(&w.o, &sc.o_heads, n, out)?;
    Ok(())
}

/// RoPE of the `d.rope` values from `offset` in each of a token's `heads` rows of `head_dim`.
fn rope_params<B: Backend>(
    rope: &Rope<B>,
    d: &MlaDims,
    n: usize,
    heads: usize,
    head_dim: usize,
    offset: usize,
    mode: glint_core::RopeMode,
) -> RopeParams {
    RopeParams {
        n_tokens: n,
        n_heads: heads,
        head_dim,
        offset,
        n_rot: d.rope,
        mode,
        attn_factor: rope.attn_factor,
    }
}

/// `q_lora = rms_norm(attn_q_a · a)`, prepared for `attn_q_b`; nothing for a direct query
/// projection.
fn q_lora<B: Backend>(
    be: &B,
    w: &MlaWeights<'_, B>,
    d: &MlaDims,
    a: &B::Buf,
    n: usize,
    raw: &mut B::Buf,
    out: &mut B::Buf,
) -> Result<()> {
    if let QProj::Lora { a: qa, norm, b } = &w.q {
        be.matmul(qa, a, n, raw)?;
        be.rms_norm_for(raw, norm, n, d.q_lora, d.eps, out, b)?;
    }
    Ok(())
}

/// The queries `[n × H × (nope + rope)]` with RoPE, and `W_UK_hᵀ q_nope_h` a head (absorbed
/// MLA: the attention call takes q_absorbed's rows and q's rope columns as its query rows).
#[allow(clippy::too_many_arguments)]
fn queries<B: Backend>(
    be: &B,
    w: &MlaWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    step: &StepInputs<B>,
    q_lora: &B::Buf,
    q: &mut B::Buf,
    q_nope: &mut B::Buf,
    q_absorbed: &mut B::Buf,
) -> Result<()> {
    let (n, h, qk) = (step.n, d.n_heads, d.qk_dim());
    match &w.q {
        QProj::Lora { b, .. } => be.matmul(b, q_lora, n, q)?,
        QProj::Direct(wq) => be.matmul(wq, a, n, q)?,
    }
    let rp = rope_params(rope, d, n, h, qk, d.nope, rope.mode);
    be.rope_split_for(
        q,
        &step.positions,
        &rope.inv_freq,
        &rp,
        d.nope,
        q_nope,
        &w.k_b,
    )?;
    be.per_head_matmul(&w.k_b, &step.head_ids, h, q_nope, n, q_absorbed)?;
    Ok(())
}

/// The step's new cache rows, `[rms_norm(latent) | rope(k_pe)]`, scattered to its slots.
#[allow(clippy::too_many_arguments)]
fn latent_rows<B: Backend>(
    be: &B,
    w: &MlaWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    step: &StepInputs<B>,
    latent: &mut B::Cache,
    [rows, raw, normed]: [&mut B::Buf; 3],
) -> Result<()> {
    let n = step.n;
    be.matmul(&w.kv_a, a, n, rows)?;
    let rp = rope_params(rope, d, n, 1, d.row(), d.kv_lora, rope.mode);
    be.mla_kv_rows(
        rows,
        &w.kv_a_norm,
        d.eps,
        d.kv_lora,
        &rp,
        &step.positions,
        &rope.inv_freq,
        &step.slots,
        latent,
        [raw, normed],
    )?;
    Ok(())
}

/// The indexer's keys for the step's tokens, normed and rotated, into its cache.
#[allow(clippy::too_many_arguments)]
fn indexer_keys<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    step: &StepInputs<B>,
    keys: &mut B::Cache,
    sc: &mut IndexerScratch<B>,
) -> Result<()> {
    let n = step.n;
    let id = &iw.dims;
    let rp = rope_params(rope, d, n, 1, id.head_dim, 0, id.rope_mode);
    be.matmul(&iw.k, a, n, &mut sc.k_raw)?;
    be.indexer_k_rows(
        &sc.k_raw,
        &iw.k_norm,
        &iw.k_norm_bias,
        id.eps,
        &rp,
        &step.positions,
        &rope.inv_freq,
        &step.slots,
        keys,
        &mut sc.k,
    )?;
    Ok(())
}

/// The DSA lightning indexer's query `[n × H_I × d_I]`, RoPE'd, into `sc.q`: the selection's
/// first op, so it checks the selection's scratch.
fn indexer_query<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    step: &StepInputs<B>,
    q_lora: &B::Buf,
    sc: &mut IndexerScratch<B>,
) -> Result<()> {
    let (n, id) = (step.n, &iw.dims);
    // The selection's scratch checked before its first op.
    let need = be.indexer_scratch_len(n, step.max_seen);
    if need > sc.scratch_len {
        return Err(MlaError::Scratch {
            what: "indexer scores",
            needed: need,
            capacity: sc.scratch_len,
        });
    }
    be.matmul(&iw.q_b, q_lora, n, &mut sc.q)?;
    let rp = rope_params(rope, d, n, id.n_heads, id.head_dim, 0, id.rope_mode);
    be.rope(&mut sc.q, &step.positions, &rope.inv_freq, &rp)?;
    Ok(())
}

/// The DSA lightning indexer's selection, once its keys are cached (`indexer_keys`), its
/// query formed (`indexer_query`) and its head weights computed into `sc.w` (`w = W_Iw a`):
/// each query's `top_k` logical key positions `[n × top_k]` into `sc.selected`. Run only when
/// some query sees more than `top_k` keys (known on the host from the plan); otherwise every
/// visible key is selected and dense attention is exact (spec §3.7).
fn indexer_select<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    step: &StepInputs<B>,
    keys: &B::Cache,
    sc: &mut IndexerScratch<B>,
) -> Result<()> {
    let n = step.n;
    let id = &iw.dims;
    be.indexer_select(
        &sc.q,
        &sc.w,
        keys,
        &step.positions,
        &step.pages(),
        &IndexerParams {
            n_tokens: n,
            n_heads: id.n_heads,
            head_dim: id.head_dim,
            n_kv: step.max_seen,
            // n_heads^-1/2 · head_dim^-1/2: a global factor (ordering-neutral) kept for
            // numeric parity, applied as the scores read the weights.
            w_scale: 1.0 / ((id.n_heads * id.head_dim) as f32).sqrt(),
        },
        id.top_k,
        &mut sc.scratch,
        &mut sc.selected,
    )?;
    Ok(())
}
