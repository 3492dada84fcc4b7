//! Norms, RoPE, SwiGLU, adds, copies, row scatter/gather and cache rows (kernels/elementwise.cu).
#![allow(clippy::too_many_arguments)]

use glint_core::{CoreError, Result, RopeParams};

use crate::backend::CudaBackend;
use crate::buffers::{CudaBuf, CudaCache, CudaIds};

fn todo_err(op: &'static str) -> CoreError {
    CoreError::Device {
        op,
        msg: "not yet implemented on CUDA".into(),
    }
}

pub(crate) fn cache_set_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    slots: &CudaIds,
    n: usize,
    cache: &mut CudaCache,
) -> Result<()> {
    let _ = (be, src, slots, n, cache);
    Err(todo_err("cache_set_rows"))
}
pub(crate) fn cache_download(be: &CudaBackend, cache: &CudaCache, out: &mut [f32]) -> Result<()> {
    let _ = (be, cache, out);
    Err(todo_err("cache_download"))
}
pub(crate) fn norm(
    be: &CudaBackend,
    x: &CudaBuf,
    w: &CudaBuf,
    b: Option<&CudaBuf>,
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, x, w, b, rows, dim, eps, y);
    Err(todo_err("norm"))
}
pub(crate) fn rope(
    be: &CudaBackend,
    x: &mut CudaBuf,
    positions: &CudaIds,
    inv_freq: &CudaBuf,
    p: &RopeParams,
) -> Result<()> {
    let _ = (be, x, positions, inv_freq, p);
    Err(todo_err("rope"))
}
pub(crate) fn silu_mul(
    be: &CudaBackend,
    gate: &CudaBuf,
    up: &CudaBuf,
    n: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, gate, up, n, out);
    Err(todo_err("silu_mul"))
}
pub(crate) fn add(be: &CudaBackend, a: &mut CudaBuf, b: &CudaBuf, n: usize) -> Result<()> {
    let _ = (be, a, b, n);
    Err(todo_err("add"))
}
pub(crate) fn scale(be: &CudaBackend, a: &mut CudaBuf, s: f32, n: usize) -> Result<()> {
    let _ = (be, a, s, n);
    Err(todo_err("scale"))
}
pub(crate) fn copy2d(
    be: &CudaBackend,
    src: &CudaBuf,
    src_off: usize,
    src_stride: usize,
    dst: &mut CudaBuf,
    dst_off: usize,
    dst_stride: usize,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let _ = (
        be, src, src_off, src_stride, dst, dst_off, dst_stride, rows, cols,
    );
    Err(todo_err("copy2d"))
}
pub(crate) fn set_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    dim: usize,
    slots: &CudaIds,
    n: usize,
    dst: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, src, dim, slots, n, dst);
    Err(todo_err("set_rows"))
}
pub(crate) fn gather_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    dim: usize,
    rows: &CudaIds,
    n: usize,
    dst: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, src, dim, rows, n, dst);
    Err(todo_err("gather_rows"))
}
