//! Mixture-of-experts feed-forward of the DeepSeek-V3 / GLM-5 family, written against
//! `glint_core::Backend`: an f32 router (sigmoid or softmax gating, selection-only correction
//! bias, group-limited top-k, renormalisation, scaling), routed experts through the
//! expert-indexed matmul, an ungated shared expert, and the dense SwiGLU MLP of the leading
//! dense blocks.

use glint_core::{Backend, Result, RouterParams, Rows};

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
    /// Expert parallelism: the stacked expert tensors hold only routed experts
    /// `first .. first + count` (`Some((first, count))`); the router still scores all of them
    /// and choices of experts held elsewhere contribute nothing here. `None`: every expert.
    pub local_experts: Option<(u32, u32)>,
}

/// The widest FFN a step runs, for sizing [`MoeScratch`] once.
#[derive(Debug, Clone, Copy, Default)]
pub struct FfnSizes {
    pub max_tokens: usize,
    pub d_model: usize,
    /// Widest dense or shared-expert hidden size.
    pub dense_d_ff: usize,
    /// Routed experts (0 for a model without MoE layers), experts per token, expert hidden size.
    pub n_expert: usize,
    pub n_used: usize,
    pub expert_d_ff: usize,
    /// The shared experts' hidden size (0 without them): they get buffers of their own, so
    /// they can run beside the routed experts (`Backend::concurrently`).
    pub shared_d_ff: usize,
}

/// Work buffers sized once for the step's limits so no step allocates; an op given more tokens
/// than they hold reports a shape error naming the buffer.
pub struct MoeScratch<B: Backend> {
    /// `[n × n_expert]` router logits; `[n × n_used]` chosen experts and their weights.
    router_logits: B::Buf,
    expert_ids: B::Ids,
    /// The backend's grouping of the choices by expert, shared by gate, up and down.
    route_plan: B::Ids,
    expert_weights: B::Buf,
    /// Gate and up projections and `silu(gate)·up`: `[n × d_ff]` dense, `[n × n_used × d_ff]`
    /// routed.
    gate: B::Buf,
    up: B::Buf,
    act: B::Buf,
    /// `[n × n_used × d_model]` expert outputs (or `[n × n_used × 2·d_ff]` fused gate+up).
    expert_out: B::Buf,
    /// `[n × shared_d_ff]` the shared expert's gate, up and `silu(gate)·up`; `[n × d_model]`
    /// its output.
    shared_gate: B::Buf,
    shared_up: B::Buf,
    shared_act: B::Buf,
    shared_out: B::Buf,
}

impl<B: Backend> MoeScratch<B> {
    pub fn new(be: &B, s: &FfnSizes) -> Result<Self> {
        let n = s.max_tokens;
        let hidden = (n * s.dense_d_ff).max(n * s.n_used * s.expert_d_ff);
        Ok(Self {
            router_logits: be.alloc(n * s.n_expert)?,
            expert_ids: be.alloc_ids(n * s.n_used)?,
            route_plan: be.alloc_ids(be.moe_plan_len(n, s.n_used, s.n_expert))?,
            expert_weights: be.alloc(n * s.n_used)?,
            gate: be.alloc(hidden)?,
            up: be.alloc(hidden)?,
            act: be.alloc(hidden)?,
            expert_out: be.alloc(n * s.n_used * s.d_model.max(2 * s.expert_d_ff))?,
            shared_gate: be.alloc(n * s.shared_d_ff)?,
            shared_up: be.alloc(n * s.shared_d_ff)?,
            shared_act: be.alloc(n * s.shared_d_ff)?,
            shared_out: be.alloc(n * s.d_model)?,
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

impl<'a, B: Backend + 'a> MlpWeights<'a, B> {
    /// The first product of the input (gate): the one the FFN norm's output is prepared for
    /// (`Backend::rms_norm_for`).
    pub fn input_product(&self) -> &B::Weight<'a> {
        &self.gate
    }
}

impl<'a, B: Backend + 'a> MoeWeights<'a, B> {
    /// The routed experts' gate (or fused gate/up) product: the largest reader of the FFN
    /// norm's output, the one it is prepared for (`Backend::rms_norm_for`).
    pub fn input_product(&self) -> &B::Weight<'a> {
        match &self.gate_up {
            ExpertGateUp::Split { gate, .. } => gate,
            ExpertGateUp::Fused(w) => w,
        }
    }
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
    swiglu(be, w, x, n, [&mut sc.gate, &mut sc.up, &mut sc.act], out)
}

fn swiglu<B: Backend>(
    be: &B,
    w: &MlpWeights<'_, B>,
    x: &B::Buf,
    n: usize,
    [g, u, h]: [&mut B::Buf; 3],
    out: &mut B::Buf,
) -> Result<()> {
    be.matmul_pair(&w.gate, &w.up, x, n, g, u)?;
    be.matmul_glu(&w.down, g, u, n, w.d_ff, h, out)
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
    let mut routed = || -> Result<()> {
        let ids = &mut sc.expert_ids;
        be.matmul(&w.gate_inp, x, n, &mut sc.router_logits)?;
        be.moe_route(
            &sc.router_logits,
            w.bias.as_ref(),
            n,
            r,
            ids,
            &mut sc.expert_weights,
        )?;
        if let Some((first, count)) = w.local_experts {
            be.moe_local_experts(ids, &mut sc.expert_weights, n, k, first, count)?;
        }
        be.moe_plan(ids, n, k, r.n_expert, &mut sc.route_plan)?;
        let (ids, plan) = (&sc.expert_ids, &sc.route_plan);

        match &w.gate_up {
            ExpertGateUp::Split { gate, up } => {
                let (g, u) = (&mut sc.gate, &mut sc.up);
                be.mul_mat_id_planned_pair(gate, up, ids, plan, k, x, false, n, g, u)?;
            }
            ExpertGateUp::Fused(gu) => {
                // One product into expert_out ([n·k × 2·d_ff]), split by slot.
                let f = w.d_ff;
                be.mul_mat_id_planned(gu, ids, plan, k, x, false, n, &mut sc.expert_out)?;
                let halves = Rows::of(2 * f);
                be.copy2d(&sc.expert_out, halves, &mut sc.gate, Rows::of(f), n * k, f)?;
                be.copy2d(
                    &sc.expert_out,
                    halves.at(f),
                    &mut sc.up,
                    Rows::of(f),
                    n * k,
                    f,
                )?;
            }
        }
        let (g, u) = (&sc.gate, &sc.up);
        let (h, y) = (&mut sc.act, &mut sc.expert_out);
        be.mul_mat_id_planned_glu(&w.down_exps, ids, plan, k, g, u, n, w.d_ff, h, y)?;
        Ok(())
    };
    match &w.shared {
        Some(sh) => {
            // The shared expert reads only x: beside the router and the routed experts.
            let bufs = [&mut sc.shared_gate, &mut sc.shared_up, &mut sc.shared_act];
            let out = &mut sc.shared_out;
            be.concurrently(|| swiglu(be, sh, x, n, bufs, out), routed)?;
        }
        None => routed()?,
    }
    let (y, wts) = (&sc.expert_out, &sc.expert_weights);
    match &w.shared {
        Some(_) => be.moe_combine_add(y, wts, n, k, d_model, &sc.shared_out, out),
        None => be.moe_combine(y, wts, n, k, d_model, out),
    }
}
