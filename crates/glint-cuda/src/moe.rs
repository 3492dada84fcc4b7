//! MoE routing and combine on the device (kernels/moe.cu).
//!
//! * `moe_route`: one warp per token, [`ROUTE_WARPS`] tokens to a block; the token's scores,
//!   biased scores and composite selection keys live in dynamic shared memory, so any
//!   `n_expert` up to a few thousand works (GLM-5: 256). Selection is `n_used` rounds of a
//!   warp arg-max over `(total_cmp key, lowest index)`, the order of the CPU's `top_k_into`.
//! * `moe_combine`: one thread per output value, the `n_used` terms summed in order.
//! * `moe_local_experts`: expert parallelism's id remap, one thread per choice, so a step
//!   with `--ep` can be recorded (the trait's default goes through the host).

use cudarc::driver::LaunchConfig;
use glint_core::error::need;
use glint_core::{CoreError, Gating, Result, RouterParams};

use crate::backend::{dev, grid_1d, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaIds};
use crate::compile::Family;
use crate::smem::SMEM_DEFAULT;

/// Tokens (warps) per block of `moe_route`; must match `ROUTE_WARPS` in kernels/moe.cu.
const ROUTE_WARPS: usize = 4;

pub(crate) fn route(
    be: &CudaBackend,
    logits: &CudaBuf,
    bias: Option<&CudaBuf>,
    n_tokens: usize,
    p: &RouterParams,
    ids: &mut CudaIds,
    weights: &mut CudaBuf,
) -> Result<()> {
    let op = "moe_route";
    let (ne, nu) = (p.n_expert, p.n_used);
    if ne == 0 || nu > ne || p.n_group == 0 || p.n_group > ne {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "{nu} of {ne} experts in {} groups ({} used)",
                p.n_group, p.n_group_used
            ),
        });
    }
    need(op, "logits", n_tokens * ne, logits.len)?;
    if let Some(b) = bias {
        need(op, "bias", ne, b.len)?;
    }
    need(op, "ids", n_tokens * nu, ids.len)?;
    need(op, "weights", n_tokens * nu, weights.len)?;
    if n_tokens == 0 || nu == 0 {
        return Ok(());
    }
    let smem = ROUTE_WARPS * (ne * 8 + 2 * ne * 4 + p.n_group * 4);
    if smem > SMEM_DEFAULT {
        return Err(CoreError::Param {
            op,
            msg: format!("{ne} experts need {smem} bytes of shared memory per block"),
        });
    }
    let f = be.func(Family::Moe, "moe_route")?;
    let has_bias = i32::from(bias.is_some());
    let gating = match p.gating {
        Gating::Softmax => 0i32,
        Gating::Sigmoid => 1i32,
    };
    let (n, ne_i, nu_i) = (int(op, n_tokens)?, int(op, ne)?, int(op, nu)?);
    let (ng, ngu) = (int(op, p.n_group)?, int(op, p.n_group_used)?);
    let normalize = i32::from(p.normalize);
    // Without a bias the kernel never reads it; any valid pointer will do.
    let bias_data = bias.map_or(logits.data(), |b| b.data());
    let mut b = be.launch(&f);
    b.arg(logits.data())
        .arg(bias_data)
        .arg(&has_bias)
        .arg(&n)
        .arg(&ne_i)
        .arg(&nu_i)
        .arg(&gating)
        .arg(&ng)
        .arg(&ngu)
        .arg(&normalize)
        .arg(&p.scale)
        .arg(&mut ids.data)
        .arg(weights.data_mut());
    let cfg = LaunchConfig {
        grid_dim: (n_tokens.div_ceil(ROUTE_WARPS) as u32, 1, 1),
        block_dim: (32 * ROUTE_WARPS as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: argument types match the kernel's signature; every read and write is within the
    // prefixes checked above.
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn combine(
    be: &CudaBackend,
    y: &CudaBuf,
    weights: &CudaBuf,
    n_tokens: usize,
    n_used: usize,
    dim: usize,
    add: Option<&CudaBuf>,
    out: &mut CudaBuf,
) -> Result<()> {
    let op = "moe_combine";
    need(op, "y", n_tokens * n_used * dim, y.len)?;
    need(op, "weights", n_tokens * n_used, weights.len)?;
    need(op, "out", n_tokens * dim, out.len)?;
    if let Some(a) = add {
        need(op, "add", n_tokens * dim, a.len)?;
    }
    if n_tokens == 0 || dim == 0 {
        return Ok(());
    }
    let f = be.func(Family::Moe, "moe_combine")?;
    let (n, k, d) = (int(op, n_tokens)?, int(op, n_used)?, int(op, dim)?);
    let mut b = be.launch(&f);
    let null = 0u64;
    b.arg(y.data()).arg(weights.data()).arg(&n).arg(&k).arg(&d);
    match add {
        Some(a) => b.arg(a.data()),
        None => b.arg(&null),
    };
    b.arg(out.data_mut());
    // SAFETY: as above; `add`, where given, holds n_tokens × dim floats (checked).
    unsafe { b.launch(grid_1d(n_tokens * dim)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn local_experts(
    be: &CudaBackend,
    ids: &mut CudaIds,
    weights: &mut CudaBuf,
    n_tokens: usize,
    n_used: usize,
    first: u32,
    count: u32,
) -> Result<()> {
    let op = "moe_local_experts";
    let len = n_tokens
        .checked_mul(n_used)
        .ok_or_else(|| CoreError::Param {
            op,
            msg: format!("{n_tokens} × {n_used} overflows"),
        })?;
    need(op, "ids", len, ids.len)?;
    need(op, "weights", len, weights.len)?;
    if len == 0 {
        return Ok(());
    }
    let f = be.func(Family::Moe, op)?;
    let len_i = int(op, len)?;
    let mut b = be.launch(&f);
    b.arg(&mut ids.data)
        .arg(weights.data_mut())
        .arg(&len_i)
        .arg(&first)
        .arg(&count);
    // SAFETY: the kernel touches the first `len` entries of both, checked above.
    unsafe { b.launch(grid_1d(len)) }.map_err(dev(op))?;
    Ok(())
}
