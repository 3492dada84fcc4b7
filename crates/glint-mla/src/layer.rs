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
    let has_q_lora = match &w.q {
        QProj::Lora { a: qa, norm, b } => {
            be.matmul(qa, a, n, &mut sc.q_lora_raw)?;
            be.rms_norm_for(&sc.q_lora_raw, norm, n, d.q_lora, d.eps, &mut sc.q_lora, b)?;
            be.matmul(b, &sc.q_lora, n, &mut sc.q)?;
            true
        }
        QProj::Direct(wq) => {
            be.matmul(wq, a, n, &mut sc.q)?;
            false
        }
    };
    let q_rows = Rows::of(qk);
    // The query path and the new latent rows; beside them (a second stream on a GPU) the
    // indexer, which reads only the normed input and q_lora.
    let mut main = || -> Result<()> {
        be.rope(
            &mut sc.q,
            &step.positions,
            &rope.inv_freq,
            &rp(h, qk, d.nope),
        )?;

        // The new cache rows: [rms_norm(latent) | rope(k_pe)], scattered to the step's slots.
        be.matmul(&w.kv_a, a, n, &mut sc.kv_rows)?;
        be.mla_kv_rows(
            &mut sc.kv_rows,
            &w.kv_a_norm,
            d.eps,
            d.kv_lora,
            &rp(1, row, d.kv_lora),
            &step.positions,
            &rope.inv_freq,
            &step.slots,
            &mut pool.latent,
            [&mut sc.kv_raw, &mut sc.kv_normed],
        )?;

        // Absorb W_UK into the queries: Q_h = [W_UK_hᵀ q_nope_h | q_pe_h] (the attention call
        // below takes the two parts).
        be.copy2d(
            &sc.q,
            q_rows,
            &mut sc.q_nope,
            Rows::of(d.nope),
            n * h,
            d.nope,
        )?;
        be.per_head_matmul(&w.k_b, &step.head_ids, h, &sc.q_nope, n, &mut sc.q_absorbed)?;
        Ok(())
    };
    let mut n_selected = None;
    match (&w.indexer, has_q_lora, pool.index_k.as_mut()) {
        (Some(iw), true, Some(keys)) => {
            let (q_lora, ix) = (&sc.q_lora, &mut sc.ix);
            let side = || -> Result<()> {
                n_selected = indexer(be, iw, d, rope, a, step, keys, q_lora, ix)?;
                Ok(())
            };
            be.concurrently(side, main)?;
        }
        _ => main()?,
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
            dk: row,
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

/// The DSA lightning indexer. Always computes and caches this step's keys; when some query
/// sees more than `top_k` keys (known on the host from the plan), writes the selected key
/// positions `[n × top_k]` to `sc.selected` and returns `Some(top_k)`. Otherwise every visible
/// key is selected and dense attention is exact (spec §3.7), so scoring is skipped.
#[allow(clippy::too_many_arguments)]
fn indexer<B: Backend>(
    be: &B,
    iw: &IndexerWeights<'_, B>,
    d: &MlaDims,
    rope: &Rope<B>,
    a: &B::Buf,
    step: &StepInputs<B>,
    keys: &mut B::Cache,
    q_lora: &B::Buf,
    sc: &mut IndexerScratch<B>,
) -> Result<Option<usize>> {
    let n = step.n;
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
    be.matmul(&iw.k, a, n, &mut sc.k_raw)?;
    be.indexer_k_rows(
        &sc.k_raw,
        &iw.k_norm,
        &iw.k_norm_bias,
        id.eps,
        &rp(1),
        &step.positions,
        &rope.inv_freq,
        &step.slots,
        keys,
        &mut sc.k,
    )?;
    if step.max_seen <= id.top_k {
        return Ok(None);
    }
    let need = be.indexer_scratch_len(n, step.max_seen);
    if need > sc.scratch_len {
        return Err(MlaError::Scratch {
            what: "indexer scores",
            needed: need,
            capacity: sc.scratch_len,
        });
    }
    be.matmul(&iw.q_b, q_lora, n, &mut sc.q)?;
    be.rope(&mut sc.q, &step.positions, &rope.inv_freq, &rp(id.n_heads))?;
    be.matmul(&iw.proj, a, n, &mut sc.w)?;
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
    Ok(Some(id.top_k))
}
