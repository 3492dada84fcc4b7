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
    /// Stacked experts: gate/up `{d_model, d_ff, n_expert}`, down `{d_ff, d_model, n_expert}`.
    pub gate_exps: B::Weight<'a>,
    pub up_exps: B::Weight<'a>,
    pub down_exps: B::Weight<'a>,
    pub d_ff: usize,
    pub shared: Option<MlpWeights<'a, B>>,
    pub router: RouterParams,
}

/// SwiGLU MLP: `out [n × d_model] = down(silu(gate x) ⊙ up x)`.
pub fn mlp<B: Backend>(
    be: &B,
    w: &MlpWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    out: &mut B::Buf,
) -> Result<()> {
    let mut g = be.alloc(n * w.d_ff)?;
    let mut u = be.alloc(n * w.d_ff)?;
    be.matmul(&w.gate, x, n, &mut g)?;
    be.matmul(&w.up, x, n, &mut u)?;
    let mut h = be.alloc(n * w.d_ff)?;
    be.silu_mul(&g, &u, n * w.d_ff, &mut h)?;
    be.matmul(&w.down, &h, n, out)
}

/// Routed experts plus shared expert: `out [n × d_model] = Σ_k w_k E_{id_k}(x) + S(x)`.
pub fn moe<B: Backend>(
    be: &B,
    w: &MoeWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    d_model: usize,
    out: &mut B::Buf,
) -> Result<()> {
    let r = &w.router;
    let k = r.n_used;
    let mut logits = be.alloc(n * r.n_expert)?;
    be.matmul(&w.gate_inp, x, n, &mut logits)?;
    let mut ids = be.upload_ids(&vec![0u32; n * k])?;
    let mut wts = be.alloc(n * k)?;
    be.moe_route(&logits, w.bias.as_ref(), n, r, &mut ids, &mut wts)?;

    let mut g = be.alloc(n * k * w.d_ff)?;
    let mut u = be.alloc(n * k * w.d_ff)?;
    be.mul_mat_id(&w.gate_exps, &ids, k, x, false, n, &mut g)?;
    be.mul_mat_id(&w.up_exps, &ids, k, x, false, n, &mut u)?;
    let mut h = be.alloc(n * k * w.d_ff)?;
    be.silu_mul(&g, &u, n * k * w.d_ff, &mut h)?;
    let mut y = be.alloc(n * k * d_model)?;
    be.mul_mat_id(&w.down_exps, &ids, k, &h, true, n, &mut y)?;
    be.moe_combine(&y, &wts, n, k, d_model, out)?;

    if let Some(sh) = &w.shared {
        let mut s = be.alloc(n * d_model)?;
        mlp(be, sh, x, n, &mut s)?;
        be.add(out, &s, n * d_model)?;
    }
    Ok(())
}
