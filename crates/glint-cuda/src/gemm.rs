//! Prompt-sized dense products on cuBLAS.
//!
//! The MMQ kernels (quant.rs) multiply a quantized row by 8-bit activations with `mma.sync`
//! and rescale every 32-element piece on the CUDA cores: on an H100 a 512-token product of a
//! 6144 × 12288 Q4_K weight runs at ~140 int8 TOPS with half the issue slots busy (call AH,
//! docs/performance.md), a tenth of what the tensor cores do. Past [`min_tokens`] tokens a
//! dense product instead decodes its weight to bf16 (`dequant_bf16_*`, one pass over the
//! weight: read ~0.6 bytes, write 2 an element), rounds the activation to bf16 and has
//! cuBLAS multiply the two, summing in f32. F32 weights go to cuBLAS' f32 GEMM as they are
//! (no TF32: the default math mode), BF16 ones without a decode.
//!
//! Numerics: bf16 keeps 8 significant bits, so each weight and activation is rounded by at
//! most 2^-9 of itself; the MMQ path rounds an activation by up to 1/254 of its 32- or
//! 256-element block's largest. Both are far below a Q4_K weight's own error. What changes is
//! that a token's logits then depend (at that level) on whether it was part of a long prompt.
//!
//! Not here: expert-indexed products (at ~16 pairs an expert a prompt reads each expert's
//! weights a few times at most, so a decode to bf16 would only add bytes), F16 weights (bf16
//! would drop three of their bits) and steps being recorded into a CUDA graph (they keep the
//! kernels the eager run of the same step already loaded). `GLINT_CUDA_GEMM_MIN=N` sets the
//! token threshold; 0 turns this path off, to compare.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::{result as blas, sys as bsys, CudaBlas};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use glint_core::{CoreError, GgmlType, Result};

use crate::backend::{dev, grid_1d, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaWeight};
use crate::compile::Family;

/// The default token threshold: a decode costs ~2.6 bytes an element of the weight, about
/// what MMQ spends on 80 tokens (H100 estimate), so well past that the GEMM wins.
const GEMM_MIN_DEFAULT: usize = 128;

/// Most bf16 elements of a decoded weight held at once (256 MiB): a larger weight (an output
/// head) is decoded and multiplied in row chunks.
const SCRATCH_ELEMS: usize = 128 << 20;

/// The token count from which dense products take this path (`usize::MAX`: never).
pub(crate) fn min_tokens() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| match std::env::var("GLINT_CUDA_GEMM_MIN") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(0) => usize::MAX,
            Ok(n) => n,
            Err(_) => {
                tracing::warn!(value = %v, "GLINT_CUDA_GEMM_MIN is not a token count; using {GEMM_MIN_DEFAULT}");
                GEMM_MIN_DEFAULT
            }
        },
        Err(_) => GEMM_MIN_DEFAULT,
    })
}

/// The cuBLAS handle (made at the first product that takes this path) and the decoded-weight
/// scratch.
#[derive(Default)]
pub(crate) struct GemmState {
    blas: Mutex<Option<CudaBlas>>,
    /// cuBLAS could not be loaded or started: the MMQ kernels run everything.
    unavailable: AtomicBool,
    scratch: Mutex<Option<CudaSlice<u16>>>,
    /// A step is being recorded (backend.rs `run_recorded`).
    pub(crate) capturing: AtomicBool,
}

/// How a weight reaches cuBLAS: as f32, as bf16 bytes, or decoded to bf16 by this kernel.
enum Input {
    F32,
    Bf16,
    Decode(&'static str),
}

fn input(w: &CudaWeight, dequant: &'static str) -> Option<Input> {
    Some(match w.ty {
        GgmlType::F32 => Input::F32,
        GgmlType::BF16 => Input::Bf16,
        GgmlType::F16 | GgmlType::Q8_1 => return None,
        _ => Input::Decode(dequant),
    })
}

/// Whether `w · x` over `n` tokens takes this path: enough tokens, a weight type it takes,
/// even rows (two bf16 a thread), the main stream (the scratch is its own) and no capture.
pub(crate) fn applies(be: &CudaBackend, w: &CudaWeight, n: usize) -> bool {
    n >= min_tokens()
        && w.slices() == 1
        && w.cols().is_multiple_of(2)
        && !matches!(w.ty, GgmlType::F16 | GgmlType::Q8_1)
        && be.fork.branch() != Some(1)
        && !be.gemm.capturing.load(Ordering::Acquire)
        && !be.gemm.unavailable.load(Ordering::Acquire)
}

/// The cuBLAS handle on the backend's main stream, made now if it is not yet; None (and the
/// path off from here on) where cuBLAS cannot be loaded.
fn handle(be: &CudaBackend) -> Option<std::sync::MutexGuard<'_, Option<CudaBlas>>> {
    let mut g = be.gemm.blas.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        // SAFETY: only asks the dynamic loader whether the library can be opened.
        if !unsafe { bsys::is_culib_present() } {
            tracing::warn!("libcublas not found: prompt products stay on the MMQ kernels");
            be.gemm.unavailable.store(true, Ordering::Release);
            return None;
        }
        match CudaBlas::new(be.stream.clone()) {
            Ok(b) => *g = Some(b),
            Err(e) => {
                tracing::warn!(error = %e, "cuBLAS did not start: prompt products stay on the MMQ kernels");
                be.gemm.unavailable.store(true, Ordering::Release);
                return None;
            }
        }
    }
    Some(g)
}

/// `y = x · wᵀ` for `n` tokens, `x` already rounded to bf16 (`act`, n × cols) where the weight
/// is not F32 (then `x` is read as is). False where cuBLAS is unavailable (nothing done).
pub(crate) fn matmul(
    be: &CudaBackend,
    w: &CudaWeight,
    dequant: &'static str,
    x: &CudaBuf,
    act: Option<&CudaSlice<u8>>,
    n: usize,
    y: &mut CudaBuf,
) -> Result<bool> {
    const OP: &str = "matmul (cuBLAS)";
    let Some(how) = input(w, dequant) else {
        return Ok(false);
    };
    let Some(blas) = handle(be) else {
        return Ok(false);
    };
    let h = *blas.as_ref().expect("made above").handle();
    let (cols, rows) = (w.cols(), w.rows());
    let (cols_i, n_i, rows_i) = (int(OP, cols)?, int(OP, n)?, int(OP, rows)?);
    let stream = &be.stream;
    let (alpha, beta) = (1f32, 0f32);
    let (yp, _yg) = y.data_mut().device_ptr_mut(stream);
    let gemm = |a: u64, ty: bsys::cudaDataType, m: usize, b: u64, c: u64| -> Result<()> {
        // SAFETY: column-major, C (m × n, ld rows) = Aᵀ (A: cols × m, ld cols) · B (cols × n,
        // ld cols): A holds m weight rows of cols elements, B n activation rows, C the m
        // output columns of n rows of y (checked by the caller: y holds n × rows floats, x or
        // act n × cols elements, the weight rows × cols); alpha and beta are host values
        // (the handle's default pointer mode).
        unsafe {
            blas::gemm_ex(
                h,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                int(OP, m)?,
                n_i,
                cols_i,
                (&alpha as *const f32).cast(),
                a as *const _,
                ty,
                cols_i,
                b as *const _,
                ty,
                cols_i,
                (&beta as *const f32).cast(),
                c as *mut _,
                bsys::cudaDataType::CUDA_R_32F,
                rows_i,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CoreError::Device {
            op: OP,
            msg: format!("{} ({m} × {cols} by {n} tokens): {e}", w.name()),
        })
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
        Input::Decode(kernel) => {
            let (ap, _ag) = act.expect("bf16 activation").device_ptr(stream);
            let chunk = (SCRATCH_ELEMS / cols).clamp(1, rows);
            let mut sg = be.gemm.scratch.lock().unwrap_or_else(|p| p.into_inner());
            let scratch = crate::quant::ensure(be, &mut sg, chunk * cols)?;
            let f = be.func(Family::Quant, kernel)?;
            let mut first = 0usize;
            while first < rows {
                let m = chunk.min(rows - first);
                let (first_i, m_i) = (first as i64, m as i64);
                let mut b = be.launch(&f);
                b.arg(&w.data)
                    .arg(&mut *scratch)
                    .arg(&cols_i)
                    .arg(&first_i)
                    .arg(&m_i);
                let grid = grid_1d((m * cols / 2).min(4096 * 256));
                // SAFETY: reads rows first .. first + m of the weight (rows × cols elements,
                // checked at upload) and writes m × cols bf16 of the scratch (sized above).
                unsafe { b.launch(grid) }.map_err(dev(OP))?;
                let (sp, _sg) = scratch.device_ptr(stream);
                let c = yp + (first * std::mem::size_of::<f32>()) as u64;
                gemm(sp, bsys::cudaDataType::CUDA_R_16BF, m, ap, c)?;
                first += m;
            }
        }
    }
    Ok(true)
}
