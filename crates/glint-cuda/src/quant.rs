//! Weights on the device and the quantized matmuls (kernels/quant.cu).
// TODO(helper): being written.

use glint_core::{CoreError, GgmlType, Result, StepSizes};

use crate::backend::CudaBackend;
use crate::buffers::{CudaBuf, CudaIds, CudaWeight};

/// Per-backend scratch of the quantized matmuls (the quantized activation).
#[derive(Default)]
pub struct QuantState {}

impl QuantState {
    pub(crate) fn prepare(&self, be: &CudaBackend, s: &StepSizes) -> Result<()> {
        let _ = (be, s);
        Ok(())
    }
}

fn todo_err(op: &'static str) -> CoreError {
    CoreError::Device {
        op,
        msg: "not yet implemented on CUDA".into(),
    }
}

pub(crate) fn supports(ty: GgmlType) -> bool {
    let _ = ty;
    false
}

pub(crate) fn upload_weight(
    be: &CudaBackend,
    name: &str,
    ty: GgmlType,
    dims: &[usize],
    bytes: &[u8],
) -> Result<CudaWeight> {
    let _ = (be, name, ty, dims, bytes);
    Err(todo_err("upload_weight"))
}

pub(crate) fn matmul(
    be: &CudaBackend,
    w: &CudaWeight,
    x: &CudaBuf,
    n: usize,
    y: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, w, x, n, y);
    Err(todo_err("matmul"))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    n_used: usize,
    x: &CudaBuf,
    x_per_slot: bool,
    n: usize,
    y: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, w, ids, n_used, x, x_per_slot, n, y);
    Err(todo_err("mul_mat_id"))
}

pub(crate) fn get_rows(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    n: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, w, ids, n, out);
    Err(todo_err("get_rows"))
}
