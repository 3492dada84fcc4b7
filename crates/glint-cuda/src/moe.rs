//! MoE routing and combine on the device (kernels/moe.cu).
// TODO(helper): being written.

use glint_core::{CoreError, Result, RouterParams};

use crate::backend::CudaBackend;
use crate::buffers::{CudaBuf, CudaIds};

fn todo_err(op: &'static str) -> CoreError {
    CoreError::Device {
        op,
        msg: "not yet implemented on CUDA".into(),
    }
}

pub(crate) fn route(
    be: &CudaBackend,
    logits: &CudaBuf,
    bias: Option<&CudaBuf>,
    n_tokens: usize,
    p: &RouterParams,
    ids: &mut CudaIds,
    weights: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, logits, bias, n_tokens, p, ids, weights);
    Err(todo_err("moe_route"))
}

pub(crate) fn combine(
    be: &CudaBackend,
    y: &CudaBuf,
    weights: &CudaBuf,
    n_tokens: usize,
    n_used: usize,
    dim: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, y, weights, n_tokens, n_used, dim, out);
    Err(todo_err("moe_combine"))
}
