//! Matmul kernels of the CPU backend: glint-quant's quantized kernels for block types, and a
//! row-parallel decode-then-dot kernel for float weights. Float rows use
//! [`dot_f32_ordered`] for every batch size, so a token's result does not depend on how many
//! tokens share the call (batch invariance) nor on the CPU, and equals llama.cpp's tinyBLAS.

use std::cell::RefCell;

use glint_gguf::GgmlType;
use glint_quant::dot::dot_f32_ordered;
use glint_quant::matmul::{MatmulScratch, QWeight};
use rayon::prelude::*;

use super::weight::CpuWeight;
use crate::error::{need, CoreError, Result};

/// Output rows handled by one rayon task in the row-parallel kernel.
const ROW_BLOCK: usize = 16;

thread_local! {
    /// Quantized-activation scratch of glint-quant's kernels, reused across calls so decode
    /// does not allocate. Per thread because backend ops take `&self`.
    static SCRATCH: RefCell<MatmulScratch> = RefCell::new(MatmulScratch::new());
}

/// Sizes this thread's matmul scratch for steps up to `s`.
pub(crate) fn reserve_scratch(s: &crate::params::StepSizes) {
    // Expert-indexed products pick n_used slices per token, per-head products all heads.
    let slots = s.max_tokens * s.n_used.max(s.max_heads);
    let slices = s.n_expert.max(s.max_heads);
    // A product's batch (or a slice's tokens in an expert-indexed one) is at most a step's
    // tokens.
    let tiles = s
        .act_shapes
        .map(|(rows, cols)| (rows.min(s.max_tokens), cols));
    SCRATCH.with(|m| {
        let mut m = m.borrow_mut();
        m.reserve(&s.act_shapes, slices, slots, s.max_slice_rows);
        m.reserve_tiles(&tiles);
    });
    for &(batch, cols) in &tiles {
        glint_quant::dot::reserve_gemm(cols, batch);
    }
    let mut g = GROUPS.take();
    g.starts.reserve(s.n_expert.max(s.max_heads) + 1);
    g.order.reserve(s.grouped_slots);
    g.xs.reserve(s.grouped_slots * s.grouped_cols);
    g.ys.reserve(s.grouped_slots * s.grouped_rows);
    GROUPS.set(g);
}

/// Whether glint-quant's kernels (activations quantized to the weight type's vec_dot partner,
/// as llama.cpp does) handle this type. F32 stays on the f32 GEMM/dot path.
fn quant_kernel(ty: GgmlType) -> bool {
    ty != GgmlType::F32
        && glint_quant::dot::partner_type(ty).is_some()
        && glint_quant::dot::kernel(ty).is_some()
}

fn qweight<'w>(w: &'w CpuWeight) -> Option<&'w [u8]> {
    match &w.data {
        super::weight::Data::Bytes(b) => Some(b),
        super::weight::Data::F32(_) => None,
    }
}

/// Disjoint writes into one output buffer from several rayon tasks.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}
impl SyncPtr {
    /// Going through a method makes closures capture the whole (Send) wrapper, not the field.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `y[t·y_stride + r] = W_slice[r] · x[t·x_stride ..]` for rows of slice `slice` and `t < n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_slice(
    w: &CpuWeight,
    slice: usize,
    x: &[f32],
    x_stride: usize,
    n: usize,
    y: &mut [f32],
    y_stride: usize,
) -> Result<()> {
    let (cols, rows) = (w.cols, w.rows);
    if n == 0 {
        return Ok(());
    }
    need("matmul", "x", (n - 1) * x_stride + cols, x.len())?;
    need("matmul", "y", (n - 1) * y_stride + rows, y.len())?;
    let yp = SyncPtr(y.as_mut_ptr());
    let f32_rows = w.as_f32();
    (0..rows.div_ceil(ROW_BLOCK))
        .into_par_iter()
        .try_for_each(|blk| -> Result<()> {
            // Decode buffer only for non-F32 weights (F32 rows are read in place).
            let mut row = if f32_rows.is_some() {
                Vec::new()
            } else {
                vec![0f32; cols]
            };
            for r in blk * ROW_BLOCK..((blk + 1) * ROW_BLOCK).min(rows) {
                let g = slice * rows + r;
                let wr: &[f32] = match f32_rows {
                    Some(wf) => &wf[g * cols..(g + 1) * cols],
                    None => {
                        w.decode_row(g, &mut row)?;
                        &row
                    }
                };
                for t in 0..n {
                    let v = dot_f32_ordered(wr, &x[t * x_stride..t * x_stride + cols]);
                    // SAFETY: (t, r) pairs are disjoint across tasks and in bounds (checked above).
                    unsafe { *yp.get().add(t * y_stride + r) = v };
                }
            }
            Ok(())
        })
}

pub(crate) fn matmul(w: &CpuWeight, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    if w.slices != 1 {
        return Err(CoreError::Param {
            op: "matmul",
            msg: format!("weight has {} slices; use mul_mat_id", w.slices),
        });
    }
    if let (true, Some(data)) = (quant_kernel(w.ty), qweight(w)) {
        need("matmul", "x", n * w.cols, x.len())?;
        need("matmul", "y", n * w.rows, y.len())?;
        let qw = QWeight::new(w.ty, w.cols, w.rows, data)?;
        return SCRATCH.with(|s| {
            glint_quant::matmul::matmul(
                &qw,
                &x[..n * w.cols],
                n,
                &mut y[..n * w.rows],
                &mut s.borrow_mut(),
            )
            .map_err(Into::into)
        });
    }
    matmul_slice(w, 0, x, w.cols, n, y, w.rows)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id(
    w: &CpuWeight,
    ids: &[u32],
    n_used: usize,
    x: &[f32],
    x_per_slot: bool,
    n: usize,
    y: &mut [f32],
) -> Result<()> {
    let (cols, rows) = (w.cols, w.rows);
    need("mul_mat_id", "ids", n * n_used, ids.len())?;
    let x_rows = if x_per_slot { n * n_used } else { n };
    need("mul_mat_id", "x", x_rows * cols, x.len())?;
    need("mul_mat_id", "y", n * n_used * rows, y.len())?;
    if let (true, Some(data)) = (quant_kernel(w.ty), qweight(w)) {
        let qw = QWeight::stacked(w.ty, cols, rows, w.slices, data)?;
        return SCRATCH.with(|s| {
            glint_quant::moe_matmul::mul_mat_id(
                &qw,
                w.slices,
                &ids[..n * n_used],
                n_used,
                &x[..x_rows * cols],
                x_per_slot,
                &mut y[..n * n_used * rows],
                &mut s.borrow_mut(),
            )
            .map_err(Into::into)
        });
    }
    // Group (token, slot) pairs by slice so each slice's rows are read once per call: a
    // counting sort into per-thread buffers, so a warm call does not allocate.
    let mut g = GROUPS.take();
    let r = grouped(w, ids, n_used, x, x_per_slot, n, y, &mut g);
    GROUPS.set(g);
    r
}

/// Reused buffers of the float `mul_mat_id` path.
#[derive(Default)]
struct Groups {
    /// `starts[e]..starts[e + 1]` indexes `order` for slice `e`.
    starts: Vec<usize>,
    order: Vec<usize>,
    xs: Vec<f32>,
    ys: Vec<f32>,
}

thread_local! {
    static GROUPS: std::cell::Cell<Groups> = std::cell::Cell::new(Groups::default());
}

#[allow(clippy::too_many_arguments)]
fn grouped(
    w: &CpuWeight,
    ids: &[u32],
    n_used: usize,
    x: &[f32],
    x_per_slot: bool,
    n: usize,
    y: &mut [f32],
    g: &mut Groups,
) -> Result<()> {
    let (cols, rows) = (w.cols, w.rows);
    let ids = &ids[..n * n_used];
    g.starts.clear();
    g.starts.resize(w.slices + 1, 0);
    for &e in ids {
        let e = e as usize;
        if e >= w.slices {
            return Err(CoreError::Index {
                op: "mul_mat_id",
                index: e,
                limit: w.slices,
            });
        }
        g.starts[e + 1] += 1;
    }
    for e in 0..w.slices {
        g.starts[e + 1] += g.starts[e];
    }
    g.order.clear();
    g.order.resize(ids.len(), 0);
    // Fill each slice's range in token order (a cursor per slice, walking `starts` back after).
    for (i, &e) in ids.iter().enumerate() {
        let e = e as usize;
        g.order[g.starts[e]] = i;
        g.starts[e] += 1;
    }
    for e in (1..=w.slices).rev() {
        g.starts[e] = g.starts[e - 1];
    }
    g.starts[0] = 0;
    for e in 0..w.slices {
        let members = &g.order[g.starts[e]..g.starts[e + 1]];
        if members.is_empty() {
            continue;
        }
        let m = members.len();
        g.xs.clear();
        for &i in members {
            let xr = if x_per_slot { i } else { i / n_used };
            g.xs.extend_from_slice(&x[xr * cols..(xr + 1) * cols]);
        }
        g.ys.resize(m * rows, 0.0);
        matmul_slice(w, e, &g.xs, cols, m, &mut g.ys, rows)?;
        for (j, &i) in members.iter().enumerate() {
            y[i * rows..(i + 1) * rows].copy_from_slice(&g.ys[j * rows..(j + 1) * rows]);
        }
    }
    Ok(())
}

pub(crate) fn get_rows(w: &CpuWeight, ids: &[u32], n: usize, out: &mut [f32]) -> Result<()> {
    need("get_rows", "ids", n, ids.len())?;
    need("get_rows", "out", n * w.cols, out.len())?;
    for (i, &id) in ids[..n].iter().enumerate() {
        let r = id as usize;
        if r >= w.total_rows() {
            return Err(CoreError::Index {
                op: "get_rows",
                index: r,
                limit: w.total_rows(),
            });
        }
        w.decode_row(r, &mut out[i * w.cols..(i + 1) * w.cols])?;
    }
    Ok(())
}
