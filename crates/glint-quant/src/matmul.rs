//! Quantized matrix-vector and matrix-matrix products on the CPU.
//!
//! Decode is a memory-bandwidth problem: every weight byte is read once per token, so the
//! kernels stream each thread's contiguous slab of rows once and the activations (a few KB,
//! quantized once per call into reusable scratch) stay in L1/L2. Larger batches walk the weights
//! in row tiles and the activations in batch tiles so that both stay cache-resident while every
//! weight tile is reused across the batch tile.

use glint_gguf::GgmlType;
use rayon::prelude::*;

use crate::dot::{self, VecDotFn};
use crate::error::QuantError;

/// A weight matrix in GGUF layout: `rows` rows of `cols` elements (ne0 = cols), bytes borrowed
/// (typically straight from the mmap). For a stacked expert tensor (see
/// [`crate::moe_matmul::mul_mat_id`]) `rows` is the rows of one expert and `data` holds all.
#[derive(Clone, Copy, Debug)]
pub struct QWeight<'a> {
    pub ty: GgmlType,
    pub cols: usize,
    pub rows: usize,
    pub data: &'a [u8],
}

impl<'a> QWeight<'a> {
    /// Checks that `cols` is whole blocks and `data` is exactly `rows` rows.
    pub fn new(ty: GgmlType, cols: usize, rows: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        Self::stacked(ty, cols, rows, 1, data)
    }

    /// A `{cols, rows, n_expert}` tensor: `n_expert` matrices of `rows` x `cols`, back to back.
    pub fn stacked(
        ty: GgmlType,
        cols: usize,
        rows: usize,
        n_expert: usize,
        data: &'a [u8],
    ) -> Result<Self, QuantError> {
        let row_bytes = row_bytes(ty, cols)?;
        let expected = row_bytes
            .checked_mul(rows)
            .and_then(|v| v.checked_mul(n_expert))
            .ok_or(QuantError::BadLength {
                ty,
                what: "weight bytes (size overflows)",
                expected: usize::MAX,
                found: data.len(),
            })?;
        if data.len() != expected {
            return Err(QuantError::BadLength {
                ty,
                what: "weight bytes (rows x cols x experts)",
                expected,
                found: data.len(),
            });
        }
        Ok(QWeight {
            ty,
            cols,
            rows,
            data,
        })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }
}

fn row_bytes(ty: GgmlType, cols: usize) -> Result<usize, QuantError> {
    if !cols.is_multiple_of(ty.block_size()) {
        return Err(QuantError::NotBlockAligned {
            ty,
            n: cols,
            block: ty.block_size(),
        });
    }
    Ok(cols / ty.block_size() * ty.type_size())
}

/// Scratch reused across calls so the hot path does not allocate: the quantized activations and
/// the expert grouping of [`crate::moe_matmul::mul_mat_id`]. Buffers only grow.
#[derive(Debug, Default)]
pub struct MatmulScratch {
    /// Quantized activations; u64 storage keeps block fields naturally aligned.
    pub(crate) act: Vec<u64>,
    pub(crate) expert_start: Vec<u32>,
    pub(crate) slots: Vec<u32>,
    pub(crate) tasks: Vec<(u32, u32, u32)>,
    /// The activations of a batched call packed into GEMM token tiles, shared by its tasks.
    pub(crate) packed: Vec<dot::Line>,
}

impl MatmulScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sizes the buffers for the calls a step makes: `act_shapes` lists each call's activation
    /// (rows, cols), and the largest quantized size of any of them over every partner format
    /// (F16/BF16 cost two bytes a value, Q8_K ~1.14) is reserved; expert-indexed calls cover
    /// up to `n_slices` slices with `n_slots` (token, slice) pairs and `max_slice_rows` rows per
    /// slice. Later calls within those sizes do not allocate.
    pub fn reserve(
        &mut self,
        act_shapes: &[(usize, usize)],
        n_slices: usize,
        n_slots: usize,
        max_slice_rows: usize,
    ) {
        let partners = [
            GgmlType::Q8_0,
            GgmlType::Q8_1,
            GgmlType::Q8_K,
            GgmlType::F16,
            GgmlType::BF16,
        ];
        let bytes = act_shapes
            .iter()
            .map(|&(rows, cols)| {
                let cols = cols.next_multiple_of(256);
                let stride = partners
                    .iter()
                    .filter_map(|&p| dot::activation_bytes(p, cols).ok())
                    .max()
                    .unwrap_or(0);
                rows * stride
            })
            .max()
            .unwrap_or(0);
        if self.act.len() * 8 < bytes {
            self.act.resize(bytes.div_ceil(8), 0);
        }
        self.expert_start.reserve(n_slices + 1);
        self.slots.reserve(n_slots);
        let active = n_slices.min(n_slots);
        self.tasks
            .reserve(n_slices.max(active * max_slice_rows.div_ceil(16)));
    }

    /// Sizes the shared GEMM tiles of batched [`matmul`] calls with up to `batch` activation
    /// rows of `cols` elements, for each `(batch, cols)` of `shapes` (expert-indexed calls pack
    /// per task, in the kernel's own per-thread scratch: see [`dot::reserve_gemm`]).
    pub fn reserve_tiles(&mut self, shapes: &[(usize, usize)]) {
        let bytes = shapes
            .iter()
            .map(|&(batch, cols)| batch.div_ceil(16) * dot::gemm_max_tile_bytes(cols))
            .max()
            .unwrap_or(0);
        dot::line_bytes(&mut self.packed, bytes);
    }
}

/// Quantizes the rows of `x` (each `cols` long) to `partner` into `buf`, returning the bytes and
/// the stride of one quantized row. Rows are quantized in parallel for larger batches.
pub(crate) fn quantize_rows<'b>(
    buf: &'b mut Vec<u64>,
    partner: GgmlType,
    x: &[f32],
    cols: usize,
) -> Result<(&'b [u8], usize), QuantError> {
    let stride = dot::activation_bytes(partner, cols)?;
    let n_rows = x.len() / cols.max(1);
    let need = stride * n_rows;
    if buf.len() * 8 < need {
        buf.resize(need.div_ceil(8), 0);
    }
    let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(buf)[..need];
    if n_rows >= 8 && rayon::current_num_threads() > 1 {
        bytes
            .par_chunks_mut(stride)
            .zip(x.par_chunks(cols))
            .try_for_each(|(o, xr)| dot::quantize_activation(partner, xr, o))?;
    } else {
        for (o, xr) in bytes.chunks_mut(stride).zip(x.chunks(cols)) {
            dot::quantize_activation(partner, xr, o)?;
        }
    }
    Ok((&bytemuck::cast_slice::<u64, u8>(buf)[..need], stride))
}

/// Output pointer shared by parallel tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub *mut f32);
// SAFETY: every user hands each task a set of indices no other task writes (documented at the
// call sites), and the pointee outlives the parallel scope.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The element `i` past the start (a method, so closures capture the whole `Sync` wrapper
    /// rather than its raw pointer field).
    ///
    /// # Safety
    /// `i` must be in bounds of the output.
    pub(crate) unsafe fn at(self, i: usize) -> *mut f32 {
        self.0.add(i)
    }
}

/// Rows of weights per tile when the batch is larger than one.
const ROW_TILE: usize = 16;
/// Activation rows per tile when the batch is larger than one.
const BATCH_TILE: usize = 32;
/// Fewest activation rows that take a GEMM tile (its 16 token lanes) over the multi-token
/// kernels. Measured on an AMD EPYC Zen 4, Q4_K 6144 x 2048 (docs/performance.md).
pub(crate) const GEMM_MIN_SLOTS: usize = 4;

/// How many rows a parallel task gets: about four tasks per thread (so an uneven thread still
/// finishes close to the others), never fewer than 16 rows (a task must amortise its start).
pub(crate) fn chunk_rows(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads * 4).max(16).min(rows.max(1))
}

/// Rows per task of a GEMM (a prompt's product): whole 16-row tiles, about sixteen tasks a
/// thread. A task computes every token, so with four a thread the last one ran alone for up
/// to a quarter of a thread's share: on two Zen 3 cores one thread sat idle through ~3% of a
/// 512-token prefill at the ends of its products (perf, docs/performance.md).
pub(crate) fn gemm_chunk_rows(rows: usize, threads: usize) -> usize {
    rows_in_parts(rows, threads * 16)
}

/// Rows per task when `rows` are cut into about `parts` tasks of whole 16-row tiles.
pub(crate) fn rows_in_parts(rows: usize, parts: usize) -> usize {
    rows.div_ceil(parts.max(1))
        .next_multiple_of(ROW_TILE)
        .min(rows.max(1))
}

/// out[o * out_stride + r] = W[r] . act[a] for r in `r0..r1` and every `(a, o) = slot(i)`,
/// `i < n_slots` (activation row, output row). The weight rows start at byte `w_base`.
///
/// # Safety
/// `out` must be valid for every written index and no other thread may touch those indices.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dot_tile(
    k: VecDotFn,
    w: &QWeight,
    w_base: usize,
    (r0, r1): (usize, usize),
    (act, stride): (&[u8], usize),
    n_slots: usize,
    slot: &dyn Fn(usize) -> (usize, usize),
    out: OutPtr,
    out_stride: usize,
) {
    let rb = w.row_bytes();
    let row = |r: usize| &w.data[w_base + r * rb..w_base + (r + 1) * rb];
    let act_row = |a: usize| &act[a * stride..(a + 1) * stride];
    // Same family as `k` (both follow `dot::isa()`), so each token gets `k`'s bits.
    if n_slots >= GEMM_MIN_SLOTS {
        if let Some(g) = dot::gemm_kernel(w.ty) {
            let rows = &w.data[w_base + r0 * rb..w_base + r1 * rb];
            g(
                w.cols,
                rows,
                r1 - r0,
                &|i| act_row(slot(i).0),
                n_slots,
                &mut |r, i0, vals, lanes| {
                    for j in 0..lanes {
                        let o = slot(i0 + j).1 * out_stride + r0 + r;
                        for (k, v) in vals.iter().enumerate() {
                            *out.0.add(o + k) = v[j];
                        }
                    }
                },
            );
            return;
        }
    }
    // One token (an expert's single pair in a decode step): the family's multi-row kernel,
    // as the dense matvec uses, bit for bit the single-row kernel on every row.
    if n_slots == 1 {
        if let Some(rk) = dot::rows_kernel(w.ty) {
            let (a, o) = slot(0);
            // SAFETY: the caller gives this task rows r0..r1 of output row `o` alone, and out
            // holds o * out_stride + r1 elements (the caller's check).
            let ys = std::slice::from_raw_parts_mut(out.0.add(o * out_stride + r0), r1 - r0);
            rk(
                w.cols,
                &w.data[w_base + r0 * rb..w_base + r1 * rb],
                act_row(a),
                ys,
            );
            return;
        }
    }
    let cols_k = dot::cols_kernel(w.ty);
    // Row tiles outermost: each weight row is read from memory once per call and then served
    // from L1/L2 for every activation tile; the activations (a few KB per row) stay in L2.
    for rt in (r0..r1).step_by(ROW_TILE) {
        for bt in (0..n_slots).step_by(BATCH_TILE) {
            let bt_end = (bt + BATCH_TILE).min(n_slots);
            for r in rt..(rt + ROW_TILE).min(r1) {
                let wr = row(r);
                let mut i = bt;
                if let Some(ck) = cols_k {
                    while i + dot::COLS <= bt_end {
                        let s: [(usize, usize); dot::COLS] = std::array::from_fn(|j| slot(i + j));
                        let mut v = [0.0f32; dot::COLS];
                        ck(w.cols, wr, s.map(|(a, _)| act_row(a)), &mut v);
                        for ((_, o), v) in s.into_iter().zip(v) {
                            *out.0.add(o * out_stride + r) = v;
                        }
                        i += dot::COLS;
                    }
                }
                for i in i..bt_end {
                    let (a, o) = slot(i);
                    *out.0.add(o * out_stride + r) = k(w.cols, wr, act_row(a));
                }
            }
        }
    }
}

/// y[b][r] = sum_c W[r][c] * x[b][c]; `x` is `batch` rows of `cols` f32, `y` is `batch` rows of
/// `rows` f32. Activations are quantized to the weight type's vec_dot partner exactly as
/// llama.cpp does on x86. Runs on the current rayon pool, split by rows.
pub fn matmul(
    w: &QWeight,
    x: &[f32],
    batch: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<(), QuantError> {
    check_len(
        w.ty,
        "activations x (batch x cols)",
        batch * w.cols,
        x.len(),
    )?;
    check_len(w.ty, "output y (batch x rows)", batch * w.rows, y.len())?;
    check_len(
        w.ty,
        "weight bytes (rows x cols)",
        w.rows * w.row_bytes(),
        w.data.len(),
    )?;
    let partner = dot::partner_type(w.ty).ok_or(QuantError::Unsupported {
        ty: w.ty,
        op: "matmul",
    })?;
    let k = dot::kernel(w.ty).ok_or(QuantError::Unsupported {
        ty: w.ty,
        op: "matmul",
    })?;
    if batch == 0 || w.rows == 0 {
        return Ok(());
    }
    let (act, stride) = quantize_rows(&mut scratch.act, partner, x, w.cols)?;
    let rows = w.rows;
    let threads = rayon::current_num_threads();
    if batch >= GEMM_MIN_SLOTS {
        if let Some(g) = dot::gemm_parts(w.ty) {
            gemm_once(&g, w, (act, stride), batch, &mut scratch.packed, y);
            return Ok(());
        }
    }
    let out = OutPtr(y.as_mut_ptr());
    let chunk = if batch >= GEMM_MIN_SLOTS {
        gemm_chunk_rows(rows, threads)
    } else {
        chunk_rows(rows, threads)
    };
    let n_chunks = rows.div_ceil(chunk);
    (0..n_chunks).into_par_iter().for_each(|c| {
        let (r0, r1) = (c * chunk, ((c + 1) * chunk).min(rows));
        // SAFETY: task c writes only y[b * rows + r] for r in its own row range r0..r1, and
        // y has batch * rows elements (checked above).
        unsafe {
            dot_tile(
                k,
                w,
                0,
                (r0, r1),
                (act, stride),
                batch,
                &|b| (b, b),
                out,
                rows,
            )
        };
    });
    Ok(())
}

/// The batched product through a GEMM tile: the activations packed once (a tile per task,
/// in parallel), then row ranges in parallel over the shared tiles.
fn gemm_once(
    g: &dot::GemmParts,
    w: &QWeight,
    (act, stride): (&[u8], usize),
    batch: usize,
    packed: &mut Vec<dot::Line>,
    y: &mut [f32],
) {
    let tile_bytes = (g.tile_bytes)(w.cols);
    let n_tiles = batch.div_ceil(16);
    let packed = dot::line_bytes(packed, n_tiles * tile_bytes);
    packed
        .par_chunks_mut(tile_bytes)
        .enumerate()
        .for_each(|(t, tile)| {
            let act_row = |i: usize| &act[(t * 16 + i) * stride..(t * 16 + i + 1) * stride];
            (g.pack)(w.cols, &act_row, 16.min(batch - t * 16), tile);
        });
    let packed = &*packed;
    let rows = w.rows;
    let rb = w.row_bytes();
    let out = OutPtr(y.as_mut_ptr());
    let chunk = gemm_chunk_rows(rows, rayon::current_num_threads());
    (0..rows.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let (r0, r1) = (c * chunk, ((c + 1) * chunk).min(rows));
        (g.run)(
            w.cols,
            &w.data[r0 * rb..r1 * rb],
            r1 - r0,
            packed,
            batch,
            &mut |r, i0, vals, lanes| {
                for j in 0..lanes {
                    let o = (i0 + j) * rows + r0 + r;
                    for (k, v) in vals.iter().enumerate() {
                        // SAFETY: task c writes only y[b * rows + r] for r in its own range
                        // r0..r1, and y has batch * rows elements (checked by the caller).
                        unsafe { *out.at(o + k) = v[j] };
                    }
                }
            },
        );
    });
}

pub(crate) fn check_len(
    ty: GgmlType,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), QuantError> {
    if expected != found {
        return Err(QuantError::BadLength {
            ty,
            what,
            expected,
            found,
        });
    }
    Ok(())
}
