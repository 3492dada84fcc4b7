//! Mixture-of-experts feed-forward of the DeepSeek-V3 / GLM-5 family, written against
//! `glint_core::Backend`: an f32 router (sigmoid or softmax gating, selection-only correction
//! bias, group-limited top-k, renormalisation, scaling), routed experts through the
//! expert-indexed matmul, an ungated shared expert, and the dense SwiGLU MLP of the leading
//! dense blocks.

use glint_core::{Backend, Result, RouterParams};

pub use glint_core::cpu::router::route_token;
pub use glint_core::{Gating, RouterParams as Router};

/// `down(silu(gate·x) ⊙ up·x)` weights (dense MLP or shared expert).
pub struct MlpWeights<'a, B: Backend + 'a> {
    pub gate: B::Weight<'a>,
    pub up: B::Weight<'a>,
    pub down: B::Weight<'a>,
    /// Hidden width (rows of gate/up).
    pub d_ff: usize,
}

pub struct MoeWeights<'a, B: Backend + 'a> {
    /// Router `{d_model, n_expert}` (F32 in GGUF files).
    pub gate_inp: B::Weight<'a>,
    /// Selection bias `exp_probs_b` (`e_score_correction_bias`).
    pub bias: Option<B::Buf>,
    /// Stacked expert gate/up projections, down `{d_ff, d_model, n_expert}`.
    pub gate_up: ExpertGateUp<'a, B>,
    pub down_exps: B::Weight<'a>,
    pub d_ff: usize,
    pub shared: Option<MlpWeights<'a, B>>,
    pub router: RouterParams,
}

/// Work buffers kept between calls so decode does not allocate; they only grow.
pub struct MoeScratch<B: Backend> {
    logits: B::Buf,
    ids: B::Ids,
    ids_len: usize,
    wts: B::Buf,
    g: B::Buf,
    u: B::Buf,
    h: B::Buf,
    y: B::Buf,
    shared: B::Buf,
}

fn ensure<B: Backend>(be: &B, buf: &mut B::Buf, len: usize) -> Result<()> {
    if be.buf_len(buf) < len {
        *buf = be.alloc(len)?;
    }
    Ok(())
}

impl<B: Backend> MoeScratch<B> {
    pub fn new(be: &B) -> Result<Self> {
        Ok(Self {
            logits: be.alloc(0)?,
            ids: be.alloc_ids(0)?,
            ids_len: 0,
            wts: be.alloc(0)?,
            g: be.alloc(0)?,
            u: be.alloc(0)?,
            h: be.alloc(0)?,
            y: be.alloc(0)?,
            shared: be.alloc(0)?,
        })
    }
}

/// The experts' gate and up projections, as separate tensors `{d_model, d_ff, n_expert}` or as
/// newer llama.cpp files store them, one fused `{d_model, 2·d_ff, n_expert}` tensor with each
/// expert's gate rows first and its up rows second.
pub enum ExpertGateUp<'a, B: Backend + 'a> {
    Split {
        gate: B::Weight<'a>,
        up: B::Weight<'a>,
    },
    Fused(B::Weight<'a>),
}

/// SwiGLU MLP: `out [n × d_model] = down(silu(gate x) ⊙ up x)`.
pub fn mlp<B: Backend>(
    be: &B,
    w: &MlpWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    sc: &mut MoeScratch<B>,
    out: &mut B::Buf,
) -> Result<()> {
    swiglu(be, w, x, n, [&mut sc.g, &mut sc.u, &mut sc.h], out)
}

fn swiglu<B: Backend>(
    be: &B,
    w: &MlpWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    [g, u, h]: [&mut B::Buf; 3],
    out: &mut B::Buf,
) -> Result<()> {
    let len = n * w.d_ff;
    ensure(be, g, len)?;
    ensure(be, u, len)?;
    ensure(be, h, len)?;
    be.matmul(&w.gate, x, n, g)?;
    be.matmul(&w.up, x, n, u)?;
    be.silu_mul(g, u, len, h)?;
    be.matmul(&w.down, h, n, out)
}

/// Routed experts plus shared expert: `out [n × d_model] = Σ_k w_k E_{id_k}(x) + S(x)`.
pub fn moe<B: Backend>(
    be: &B,
    w: &MoeWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    d_model: usize,
    sc: &mut MoeScratch<B>,
    out: &mut B::Buf,
) -> Result<()> {
    let r = &w.router;
    let k = r.n_used;
    ensure(be, &mut sc.logits, n * r.n_expert)?;
    ensure(be, &mut sc.wts, n * k)?;
    if sc.ids_len < n * k {
        sc.ids = be.alloc_ids(n * k)?;
        sc.ids_len = n * k;
    }
    be.matmul(&w.gate_inp, x, n, &mut sc.logits)?;
    be.moe_route(&sc.logits, w.bias.as_ref(), n, r, &mut sc.ids, &mut sc.wts)?;

    let len = n * k * w.d_ff;
    ensure(be, &mut sc.g, len)?;
    ensure(be, &mut sc.u, len)?;
    ensure(be, &mut sc.h, len)?;
    ensure(be, &mut sc.y, n * k * d_model)?;
    match &w.gate_up {
        ExpertGateUp::Split { gate, up } => {
            be.mul_mat_id(gate, &sc.ids, k, x, false, n, &mut sc.g)?;
            be.mul_mat_id(up, &sc.ids, k, x, false, n, &mut sc.u)?;
        }
        ExpertGateUp::Fused(gu) => {
            // One product into y ([n·k × 2·d_ff], y is at least that large), split by slot.
            let f = w.d_ff;
            ensure(be, &mut sc.y, n * k * 2 * f)?;
            be.mul_mat_id(gu, &sc.ids, k, x, false, n, &mut sc.y)?;
            be.copy2d(&sc.y, 0, 2 * f, &mut sc.g, 0, f, n * k, f)?;
            be.copy2d(&sc.y, f, 2 * f, &mut sc.u, 0, f, n * k, f)?;
        }
    }
    be.silu_mul(&sc.g, &sc.u, len, &mut sc.h)?;
    be.mul_mat_id(&w.down_exps, &sc.ids, k, &sc.h, true, n, &mut sc.y)?;
    be.moe_combine(&sc.y, &sc.wts, n, k, d_model, out)?;

    if let Some(sh) = &w.shared {
        ensure(be, &mut sc.shared, n * d_model)?;
        swiglu(
            be,
            sh,
            x,
            n,
            [&mut sc.g, &mut sc.u, &mut sc.h],
            &mut sc.shared,
        )?;
        be.add(out, &sc.shared, n * d_model)?;
    }
    Ok(())
}
