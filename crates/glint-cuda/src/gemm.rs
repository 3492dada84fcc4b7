//! Prompt-sized dense products on cuBLAS.
//!
//! The MMQ kernels (quant.rs) multiply a quantized row by 8-bit activations with `mma.sync`
//! and rescale every 32-element piece on the CUDA cores: on an H100 a 512-token product of a
//! 6144 × 12288 Q4_K weight runs at ~140 int8 TOPS with half the issue slots busy (call AH,
//! docs/performance.md), a tenth of what the tensor cores do. Past a token count a
//! dense product instead decodes its weight to bf16 (`dequant_bf16_*`, one pass over the
//! weight: read ~0.6 bytes, write 2 an element), rounds the activation to bf16 and has
//! cuBLAS multiply the two, summing in f32. F32 weights go to cuBLAS' f32 GEMM as they are
//! (no TF32: the default math mode), BF16 ones without a decode.
//!
//! Numerics: bf16 keeps 8 significant bits, so each weight and activation is rounded by at
//! most 2^-9 of itself; the MMQ path rounds an activation by up to 1/254 of its 32- or
//! 256-element block's largest. Both are far below a Q4_K weight's own error.
//!
//! Off by default: cuBLAS picks its kernels (and so its summation order) by shape, and the
//! one-token kernels sum in 8-bit integers, so with this path a token's logits depend, at the
//! level above, on how many tokens shared its step; the default CUDA path gives a token the
//! same bits in any batch (tests/batched_step.rs holds it to that). `GLINT_CUDA_GEMM_MIN=N`
//! (or [`CudaBackend::with_prompt_gemm`]) turns it on for products of N tokens and more.
//!
//! Not here: expert-indexed products (at ~16 pairs an expert a prompt reads each expert's
//! weights a few times at most, so a decode to bf16 would only add bytes), F16 weights (bf16
//! would drop three of their bits) and products issued on the side stream (the scratch is the
//! main stream's). A recorded step runs the same path as its eager run: cuBLAS is captured
//! with the workspace set here, the decode scratch grown by the eager run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use cudarc::cublas::{result as blas, sys as bsys, CudaBlas};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use glint_core::{CoreError, GgmlType, Result};

use crate::backend::{dev, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaWeight};
use crate::compile::Family;

/// Most bf16 elements of a decoded weight held at once (256 MiB): a larger weight (an output
/// head) is decoded and multiplied in row chunks.
const SCRATCH_ELEMS: usize = 128 << 20;

/// cuBLAS' workspace, set on the handle so that no call allocates (one inside a capture may
/// not); NVIDIA recommends 32 MiB on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// The token count `GLINT_CUDA_GEMM_MIN` asks for: unset, 0 or not a count, never
/// (`usize::MAX`; a value that is not a count is also warned about).
fn min_tokens_from(v: Option<&str>) -> usize {
    match v.map(|v| (v, v.trim().parse::<usize>())) {
        None | Some((_, Ok(0))) => usize::MAX,
        Some((_, Ok(n))) => n,
        Some((v, Err(_))) => {
            tracing::warn!(value = %v, "GLINT_CUDA_GEMM_MIN is not a token count; the cuBLAS path stays off");
            usize::MAX
        }
    }
}

fn min_tokens_from_env() -> usize {
    min_tokens_from(std::env::var("GLINT_CUDA_GEMM_MIN").ok().as_deref())
}

/// A cuBLAS handle and the workspace set on it (dropped after it: fields drop in order).
struct Blas {
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
}

/// The cuBLAS handle (made at the first product that takes this path), its workspace and the
/// decoded-weight scratch.
pub(crate) struct GemmState {
    /// Products of this many tokens and more take this path (`usize::MAX`: none).
    pub(crate) min_tokens: AtomicUsize,
    blas: Mutex<Option<Blas>>,
    /// cuBLAS could not be loaded or started: the MMQ kernels run everything.
    unavailable: AtomicBool,
    scratch: Mutex<Option<CudaSlice<u16>>>,
}

impl Default for GemmState {
    fn default() -> Self {
        Self {
            min_tokens: AtomicUsize::new(min_tokens_from_env()),
            blas: Mutex::new(None),
            unavailable: AtomicBool::new(false),
            scratch: Mutex::new(None),
        }
    }
}

/// How a weight reaches cuBLAS: as f32, as bf16 bytes, or decoded to bf16 (its type's
/// `dequant_bf16_*`).
enum Input {
    F32,
    Bf16,
    Decode,
}

/// Blocks of 256 threads, each thread eight elements of a row: grid.x over a row's groups,
/// grid.y over rows (the kernel strides past 65535).
fn decode_grid(rows: usize, cols: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (cols / 8).div_ceil(256) as u32,
            rows.clamp(1, 65_535) as u32,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn input(ty: GgmlType) -> Option<Input> {
    Some(match ty {
        GgmlType::F32 => Input::F32,
        GgmlType::BF16 => Input::Bf16,
        GgmlType::F16 | GgmlType::Q8_1 => return None,
        _ => Input::Decode,
    })
}

/// Whether a step of `n` tokens runs its dense products on cuBLAS (where the weights allow).
fn on_for(be: &CudaBackend, n: usize) -> bool {
    n >= be.gemm.min_tokens.load(Ordering::Relaxed)
}

/// Whether a product of `w` (dense, or one slice a head) over `n` tokens takes this path: on
/// and enough tokens, a weight type it takes, rows of whole 8-element groups (a decode
/// thread's), and the main stream.
fn applies(be: &CudaBackend, w: &CudaWeight, n: usize) -> bool {
    on_for(be, n)
        && w.cols().is_multiple_of(8)
        && input(w.ty).is_some()
        && be.fork.branch() != Some(1)
        && !be.gemm.unavailable.load(Ordering::Acquire)
}

/// [`applies`] to a dense weight (an expert-indexed one stays on the MMQ kernels).
pub(crate) fn applies_dense(be: &CudaBackend, w: &CudaWeight, n: usize) -> bool {
    w.slices() == 1 && applies(be, w, n)
}

/// [`applies`] to a per-head weight of `heads` slices, which is decoded whole, so it must fit
/// the scratch.
pub(crate) fn applies_heads(be: &CudaBackend, w: &CudaWeight, heads: usize, n: usize) -> bool {
    heads == w.slices()
        && w.rows().saturating_mul(heads).saturating_mul(w.cols()) <= SCRATCH_ELEMS
        && applies(be, w, n)
}

/// The cuBLAS handle on the backend's main stream, made now (with its workspace) if it is not
/// yet; None (and the path off from here on) where cuBLAS cannot be loaded or started.
fn handle(be: &CudaBackend) -> Result<Option<MutexGuard<'_, Option<Blas>>>> {
    let mut g = be.gemm.blas.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        // SAFETY: only asks the dynamic loader whether the library can be opened.
        if !unsafe { bsys::is_culib_present() } {
            tracing::warn!("libcublas not found: prompt products stay on the MMQ kernels");
            be.gemm.unavailable.store(true, Ordering::Release);
            return Ok(None);
        }
        let b = match CudaBlas::new(be.stream.clone()) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "cuBLAS did not start: prompt products stay on the MMQ kernels");
                be.gemm.unavailable.store(true, Ordering::Release);
                return Ok(None);
            }
        };
        let mut ws = be.zeros::<u8>("cuBLAS workspace", WORKSPACE_BYTES)?;
        let (wp, wg) = ws.device_ptr_mut(&be.stream);
        // SAFETY: the handle is live and the workspace (kept beside it, freed after it) holds
        // WORKSPACE_BYTES bytes.
        unsafe { bsys::cublasSetWorkspace_v2(*b.handle(), wp as *mut _, WORKSPACE_BYTES) }
            .result()
            .map_err(|e| CoreError::Device {
                op: "cublasSetWorkspace",
                msg: e.to_string(),
            })?;
        drop(wg);
        *g = Some(Blas {
            blas: b,
            _workspace: ws,
        });
    }
    Ok(Some(g))
}

/// `y[t][h] = W[h] · x[t][h]` for `n` tokens and `heads` slices of `w` (one slice: a dense
/// product), `x` already rounded to bf16 (`act`, n × heads × cols) where the weight is not
/// F32 (then `x` is read as is); the caller checked [`applies_dense`] or [`applies_heads`].
/// False (nothing done) where cuBLAS is unavailable.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    be: &CudaBackend,
    w: &CudaWeight,
    dequant: &'static str,
    x: &CudaBuf,
    act: Option<&CudaSlice<u8>>,
    heads: usize,
    n: usize,
    y: &mut CudaBuf,
) -> Result<bool> {
    const OP: &str = "matmul (cuBLAS)";
    let Some(how) = input(w.ty) else {
        return Ok(false);
    };
    let (cols, rows) = (w.cols(), w.rows());
    let Some(blas) = handle(be)? else {
        return Ok(false);
    };
    let h = *blas.as_ref().expect("made above").blas.handle();
    let op_err = |m: usize| {
        move |e: blas::CublasError| CoreError::Device {
            op: OP,
            msg: format!(
                "{} ({m} × {cols} by {n} tokens, {heads} heads): {e}",
                w.name()
            ),
        }
    };
    let (cols_i, n_i, heads_i) = (int(OP, cols)?, int(OP, n)?, int(OP, heads)?);
    // Per token, x holds heads × cols and y heads × rows: the leading dimensions.
    let (ldb, ldc) = (int(OP, heads * cols)?, int(OP, heads * rows)?);
    let stream = &be.stream;
    let (alpha, beta) = (1f32, 0f32);
    let (yp, _yg) = y.data_mut().device_ptr_mut(stream);
    // Column-major: C_h (m × n, ld ldc) = A_hᵀ (A_h: cols × m, ld cols) · B_h (cols × n, ld
    // ldb), A_h head h's (or a chunk's) m weight rows, B_h the tokens' head-h inputs, C_h
    // their head-h outputs, h < heads at strides rows·cols, cols and rows.
    let gemm = |a: u64, ty: bsys::cudaDataType, m: usize, b: u64, c: u64| -> Result<()> {
        let m_i = int(OP, m)?;
        let (a, b, c) = (a as *const _, b as *const _, c as *mut _);
        let (alpha, beta) = ((&alpha as *const f32).cast(), (&beta as *const f32).cast());
        let (t, nt) = (
            bsys::cublasOperation_t::CUBLAS_OP_T,
            bsys::cublasOperation_t::CUBLAS_OP_N,
        );
        let (f32t, fast) = (
            bsys::cudaDataType::CUDA_R_32F,
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        );
        let algo = bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        // SAFETY: the caller checked that y holds n × heads × rows floats and x (or act)
        // n × heads × cols elements; A is the weight (rows × heads × cols elements, checked at
        // upload) or the scratch holding what was decoded of it; alpha and beta are host
        // values (the handle's default pointer mode).
        unsafe {
            if heads == 1 {
                blas::gemm_ex(
                    h, t, nt, m_i, n_i, cols_i, alpha, a, ty, cols_i, b, ty, ldb, beta, c, f32t,
                    ldc, fast, algo,
                )
            } else {
                blas::gemm_strided_batched_ex(
                    h,
                    t,
                    nt,
                    m_i,
                    n_i,
                    cols_i,
                    alpha,
                    a,
                    ty,
                    cols_i,
                    (rows * cols) as i64,
                    b,
                    ty,
                    ldb,
                    cols as i64,
                    beta,
                    c,
                    f32t,
                    ldc,
                    rows as i64,
                    heads_i,
                    fast,
                    algo,
                )
            }
        }
        .map_err(op_err(m))
    };
    let (wp, _wg) = w.data.device_ptr(stream);
    match how {
        Input::F32 => {
            let (xp, _xg) = x.data().device_ptr(stream);
            gemm(wp, bsys::cudaDataType::CUDA_R_32F, rows, xp, yp)?;
        }
        Input::Bf16 => {
            let (ap, _ag) = act.expect("bf16 activation").device_ptr(stream);
            gemm(wp, bsys::cudaDataType::CUDA_R_16BF, rows, ap, yp)?;
        }
        Input::Decode => {
            let (ap, _ag) = act.expect("bf16 activation").device_ptr(stream);
            // A dense weight in row chunks; the heads of a per-head one at once (checked above).
            let total = rows * heads;
            let chunk = if heads > 1 {
                total
            } else {
                (SCRATCH_ELEMS / cols).clamp(1, rows)
            };
            let mut sg = be.gemm.scratch.lock().unwrap_or_else(|p| p.into_inner());
            let scratch = crate::quant::ensure(be, &mut sg, chunk * cols)?;
            let f = be.func(Family::Quant, dequant)?;
            let mut first = 0usize;
            while first < total {
                let m = chunk.min(total - first);
                let (first_i, m_i) = (first as i64, m as i64);
                let mut b = be.launch(&f);
                b.arg(&w.data)
                    .arg(&mut *scratch)
                    .arg(&cols_i)
                    .arg(&first_i)
                    .arg(&m_i);
                // SAFETY: reads rows first .. first + m of the weight (rows × heads rows of
                // cols elements, checked at upload) and writes m × cols bf16 of the scratch
                // (sized above).
                unsafe { b.launch(decode_grid(m, cols)) }.map_err(dev(OP))?;
                let (sp, _sg) = scratch.device_ptr(stream);
                let c = yp + (first * std::mem::size_of::<f32>()) as u64;
                gemm(sp, bsys::cudaDataType::CUDA_R_16BF, m.min(rows), ap, c)?;
                first += m;
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_off_unless_a_positive_count_is_given() {
        assert_eq!(min_tokens_from(None), usize::MAX);
        assert_eq!(min_tokens_from(Some("0")), usize::MAX);
        assert_eq!(min_tokens_from(Some("128")), 128);
        assert_eq!(min_tokens_from(Some(" 64 ")), 64);
        assert_eq!(min_tokens_from(Some("-1")), usize::MAX);
        assert_eq!(min_tokens_from(Some("lots")), usize::MAX);
    }
}
