//! Norms, RoPE, SwiGLU, adds, copies, row scatter/gather and cache rows (kernels/elementwise.cu).
//! Sizes are checked here, on the host, with the CPU backend's messages; the kernels trust them.
#![allow(clippy::too_many_arguments)]

use glint_core::error::need;
use glint_core::{CoreError, Result, RopeMode, RopeParams, Rows};

use crate::backend::{dev, grid_1d, grid_rows, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaCache, CudaIds};
use crate::compile::Family;

const FAM: Family = Family::Elementwise;

/// Threads per row for row-wise kernels: enough to cover typical widths in one pass.
fn row_threads(dim: usize) -> u32 {
    if dim >= 1024 {
        512
    } else if dim >= 256 {
        256
    } else {
        64
    }
}

/// The launch of a row-wise norm over `rows` rows of `dim`: the norm kernels' and
/// kernels/quant.cu `rms_norm_q8_k`'s (whose norm must sum in the same order).
pub(crate) fn norm_grid(rows: usize, dim: usize) -> cudarc::driver::LaunchConfig {
    grid_rows(rows, row_threads(dim))
}

/// kernels/elementwise.cu's `mode` argument of the RoPE kernels.
fn rope_mode_code(mode: RopeMode) -> i32 {
    match mode {
        RopeMode::Interleaved => 0,
        RopeMode::Neox => 1,
    }
}

/// Dynamic shared memory of the fused row kernels: one row of `dim` floats.
fn row_shared_bytes(op: &'static str, dim: usize) -> Result<u32> {
    u32::try_from(dim * 4).map_err(|_| CoreError::Param {
        op,
        msg: format!("rows of {dim}"),
    })
}

pub(crate) fn cache_set_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    slots: &CudaIds,
    n: usize,
    cache: &mut CudaCache,
) -> Result<()> {
    let op = "cache_set_rows";
    need(op, "slots", n, slots.len)?;
    need(op, "src", n * cache.dim, src.len)?;
    if n == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "cache_set_rows")?;
    let (rows, dim, ty) = (cache.rows as i64, int(op, cache.dim)?, cache.code());
    let mut b = be.launch(&f);
    b.arg(src.data())
        .arg(&slots.data)
        .arg(&mut cache.data)
        .arg(&rows)
        .arg(&dim)
        .arg(&ty);
    unsafe { b.launch(grid_rows(n, row_threads(cache.dim))) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn cache_download(be: &CudaBackend, cache: &CudaCache, out: &mut [f32]) -> Result<()> {
    let op = "cache_download";
    let dim = cache.dim.max(1);
    let n_rows = out.len() / dim;
    need(op, "cache rows", n_rows, cache.rows)?;
    if n_rows == 0 {
        return Ok(());
    }
    let mut tmp = be.zeros::<f32>("cache download", n_rows * dim)?;
    let f = be.func(FAM, "cache_decode")?;
    let (rows, d, ty, nr) = (
        cache.rows as i64,
        int(op, cache.dim)?,
        cache.code(),
        n_rows as i64,
    );
    let mut b = be.launch(&f);
    b.arg(&cache.data)
        .arg(&rows)
        .arg(&d)
        .arg(&ty)
        .arg(&nr)
        .arg(&mut tmp);
    unsafe { b.launch(grid_1d(n_rows * dim)) }.map_err(dev(op))?;
    be.stream
        .memcpy_dtoh(&tmp, &mut out[..n_rows * dim])
        .map_err(dev(op))?;
    be.synchronize()
}

pub(crate) fn norm(
    be: &CudaBackend,
    x: &CudaBuf,
    w: &CudaBuf,
    bias: Option<&CudaBuf>,
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut CudaBuf,
) -> Result<()> {
    let op = if bias.is_some() {
        "layer_norm"
    } else {
        "rms_norm"
    };
    need(op, "x", rows * dim, x.len)?;
    need(op, "weight", dim, w.len)?;
    need(op, "y", rows * dim, y.len)?;
    if let Some(b) = bias {
        need(op, "bias", dim, b.len)?;
    }
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    let d = int(op, dim)?;
    let cfg = norm_grid(rows, dim);
    match bias {
        None => {
            let f = be.func(FAM, "rms_norm")?;
            let mut b = be.launch(&f);
            b.arg(x.data())
                .arg(w.data())
                .arg(y.data_mut())
                .arg(&d)
                .arg(&eps);
            unsafe { b.launch(cfg) }.map_err(dev(op))?;
        }
        Some(bb) => {
            let f = be.func(FAM, "layer_norm")?;
            let mut b = be.launch(&f);
            b.arg(x.data())
                .arg(w.data())
                .arg(bb.data())
                .arg(y.data_mut())
                .arg(&d)
                .arg(&eps);
            unsafe { b.launch(cfg) }.map_err(dev(op))?;
        }
    }
    Ok(())
}

/// The RoPE kernels' `n_heads, head_dim, offset, n_rot, mode` arguments (`rope`,
/// `rope_split_q8_*`).
pub(crate) fn rope_geometry(op: &'static str, p: &RopeParams) -> Result<[i32; 5]> {
    Ok([
        int(op, p.n_heads)?,
        int(op, p.head_dim)?,
        int(op, p.offset)?,
        int(op, p.n_rot)?,
        rope_mode_code(p.mode),
    ])
}

/// Whether `p` fits x's heads and the buffers hold what a rotation by `p` reads and writes.
pub(crate) fn check_rope(
    op: &'static str,
    x: &CudaBuf,
    positions: &CudaIds,
    inv_freq: &CudaBuf,
    p: &RopeParams,
) -> Result<()> {
    if !p.n_rot.is_multiple_of(2) || p.offset + p.n_rot > p.head_dim || p.n_heads * p.head_dim == 0
    {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "n_rot {} at offset {} does not fit a head of {}",
                p.n_rot, p.offset, p.head_dim
            ),
        });
    }
    need(op, "inv_freq", p.n_rot / 2, inv_freq.len)?;
    need(op, "positions", p.n_tokens, positions.len)?;
    need(op, "x", p.n_tokens * p.n_heads * p.head_dim, x.len)
}

pub(crate) fn rope(
    be: &CudaBackend,
    x: &mut CudaBuf,
    positions: &CudaIds,
    inv_freq: &CudaBuf,
    p: &RopeParams,
) -> Result<()> {
    let op = "rope";
    let half = p.n_rot / 2;
    check_rope(op, x, positions, inv_freq, p)?;
    let total = p.n_tokens * p.n_heads * half;
    if total == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "rope")?;
    let (n_tokens, geometry) = (int(op, p.n_tokens)?, rope_geometry(op, p)?);
    let mut b = be.launch(&f);
    b.arg(x.data_mut())
        .arg(&positions.data)
        .arg(inv_freq.data())
        .arg(&n_tokens);
    for a in &geometry {
        b.arg(a);
    }
    b.arg(&p.attn_factor);
    unsafe { b.launch(grid_1d(total)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn silu_mul(
    be: &CudaBackend,
    gate: &CudaBuf,
    up: &CudaBuf,
    n: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    let op = "silu_mul";
    need(op, "gate", n, gate.len)?;
    need(op, "up", n, up.len)?;
    need(op, "out", n, out.len)?;
    if n == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "silu_mul")?;
    let nn = n as i64;
    let mut b = be.launch(&f);
    b.arg(gate.data())
        .arg(up.data())
        .arg(out.data_mut())
        .arg(&nn);
    unsafe { b.launch(grid_1d(n)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn add(be: &CudaBackend, a: &mut CudaBuf, x: &CudaBuf, n: usize) -> Result<()> {
    let op = "add";
    need(op, "a", n, a.len)?;
    need(op, "b", n, x.len)?;
    if n == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "add_inplace")?;
    let nn = n as i64;
    let mut b = be.launch(&f);
    b.arg(a.data_mut()).arg(x.data()).arg(&nn);
    unsafe { b.launch(grid_1d(n)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn scale(be: &CudaBackend, a: &mut CudaBuf, s: f32, n: usize) -> Result<()> {
    let op = "scale";
    need(op, "a", n, a.len)?;
    if n == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "scale_inplace")?;
    let nn = n as i64;
    let mut b = be.launch(&f);
    b.arg(a.data_mut()).arg(&s).arg(&nn);
    unsafe { b.launch(grid_1d(n)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn copy2d(
    be: &CudaBackend,
    src: &CudaBuf,
    from: Rows,
    dst: &mut CudaBuf,
    to: Rows,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let op = "copy2d";
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    from.check(op, "src", rows, cols, src.len)?;
    to.check(op, "dst", rows, cols, dst.len)?;
    let f = be.func(FAM, "copy2d")?;
    let a = [
        from.off as i64,
        from.stride as i64,
        to.off as i64,
        to.stride as i64,
        rows as i64,
        cols as i64,
    ];
    let mut b = be.launch(&f);
    b.arg(src.data())
        .arg(&a[0])
        .arg(&a[1])
        .arg(dst.data_mut())
        .arg(&a[2])
        .arg(&a[3])
        .arg(&a[4])
        .arg(&a[5]);
    unsafe { b.launch(grid_1d(rows * cols)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn set_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    dim: usize,
    slots: &CudaIds,
    n: usize,
    dst: &mut CudaBuf,
) -> Result<()> {
    let op = "set_rows";
    need(op, "slots", n, slots.len)?;
    need(op, "src", n * dim, src.len)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "set_rows")?;
    let (d, nn, dst_rows) = (int(op, dim)?, n as i64, (dst.len / dim) as i64);
    let mut b = be.launch(&f);
    b.arg(src.data())
        .arg(&d)
        .arg(&slots.data)
        .arg(&nn)
        .arg(dst.data_mut())
        .arg(&dst_rows);
    unsafe { b.launch(grid_1d(n * dim)) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn gather_rows(
    be: &CudaBackend,
    src: &CudaBuf,
    dim: usize,
    rows: &CudaIds,
    n: usize,
    dst: &mut CudaBuf,
) -> Result<()> {
    let op = "gather_rows";
    need(op, "rows", n, rows.len)?;
    need(op, "dst", n * dim, dst.len)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "gather_rows")?;
    let (d, nn, src_rows) = (int(op, dim)?, n as i64, (src.len / dim) as i64);
    let mut b = be.launch(&f);
    b.arg(src.data())
        .arg(&d)
        .arg(&rows.data)
        .arg(&nn)
        .arg(&src_rows)
        .arg(dst.data_mut());
    unsafe { b.launch(grid_1d(n * dim)) }.map_err(dev(op))?;
    Ok(())
}

/// `Backend::mla_kv_rows` in one launch (kernels/elementwise.cu `mla_kv_rows`): a block per
/// token norms, rotates and caches its row; the shapes the model gives it (one head of
/// `kv_lora + n_rot`, the rotated part last) are checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mla_kv_rows(
    be: &CudaBackend,
    kv: &mut CudaBuf,
    norm: &CudaBuf,
    eps: f32,
    kv_lora: usize,
    p: &RopeParams,
    positions: &CudaIds,
    inv_freq: &CudaBuf,
    slots: &CudaIds,
    cache: &mut CudaCache,
) -> Result<()> {
    let op = "mla_kv_rows";
    let (n, row) = (p.n_tokens, p.head_dim);
    if p.n_heads != 1
        || p.offset != kv_lora
        || kv_lora + p.n_rot != row
        || !p.n_rot.is_multiple_of(2)
    {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "rows of {row} must be {kv_lora} latent values then {} rotated ones (one head, offset {})",
                p.n_rot, p.offset
            ),
        });
    }
    if cache.dim != row {
        return Err(CoreError::Param {
            op,
            msg: format!("cache rows of {} for kv rows of {row}", cache.dim),
        });
    }
    need(op, "kv", n * row, kv.len)?;
    need(op, "norm", kv_lora, norm.len)?;
    need(op, "inv_freq", p.n_rot / 2, inv_freq.len)?;
    need(op, "positions", n, positions.len)?;
    need(op, "slots", n, slots.len)?;
    if n == 0 {
        return Ok(());
    }
    let f = be.func(FAM, "mla_kv_rows")?;
    let (lora_i, row_i) = (int(op, kv_lora)?, int(op, row)?);
    let mode = rope_mode_code(p.mode);
    let (rows, ty) = (cache.rows as i64, cache.code());
    let mut b = be.launch(&f);
    b.arg(kv.data_mut())
        .arg(norm.data())
        .arg(&eps)
        .arg(&lora_i)
        .arg(&row_i)
        .arg(&positions.data)
        .arg(inv_freq.data())
        .arg(&mode)
        .arg(&p.attn_factor)
        .arg(&slots.data)
        .arg(&mut cache.data)
        .arg(&rows)
        .arg(&ty);
    let mut cfg = grid_rows(n, row_threads(kv_lora));
    cfg.shared_mem_bytes = row_shared_bytes(op, row)?;
    // SAFETY: reads and writes n rows of kv (checked), kv_lora norm weights, n_rot / 2
    // frequencies, n positions and slots; a slot past the cache's rows is skipped in the kernel;
    // shared memory holds one row.
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}

/// `Backend::add_rms_norm` in one launch (kernels/elementwise.cu `add_rms_norm`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_rms_norm(
    be: &CudaBackend,
    h: &mut CudaBuf,
    d: &CudaBuf,
    w: &CudaBuf,
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut CudaBuf,
) -> Result<()> {
    let op = "add_rms_norm";
    need(op, "h", rows * dim, h.len)?;
    need(op, "d", rows * dim, d.len)?;
    need(op, "weight", dim, w.len)?;
    need(op, "y", rows * dim, y.len)?;
    if rows == 0 || dim == 0 {
        return Ok(());
    }
    let di = int(op, dim)?;
    let f = be.func(FAM, "add_rms_norm")?;
    let mut b = be.launch(&f);
    b.arg(h.data_mut())
        .arg(d.data())
        .arg(w.data())
        .arg(y.data_mut())
        .arg(&di)
        .arg(&eps);
    // SAFETY: rows × dim values of h, d and y (checked), dim weights; one block a row.
    unsafe { b.launch(norm_grid(rows, dim)) }.map_err(dev(op))?;
    Ok(())
}

/// `Backend::indexer_k_rows` in one launch (kernels/elementwise.cu `indexer_k_rows`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn indexer_k_rows(
    be: &CudaBackend,
    raw: &CudaBuf,
    w: &CudaBuf,
    b: &CudaBuf,
    eps: f32,
    p: &RopeParams,
    positions: &CudaIds,
    inv_freq: &CudaBuf,
    slots: &CudaIds,
    cache: &mut CudaCache,
    out: &mut CudaBuf,
) -> Result<()> {
    let op = "indexer_k_rows";
    let (n, dim) = (p.n_tokens, p.head_dim);
    if p.n_heads != 1 || p.offset + p.n_rot > dim || !p.n_rot.is_multiple_of(2) || cache.dim != dim
    {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "one head of {dim} with {} rotated dims at offset {}, into cache rows of {}",
                p.n_rot, p.offset, cache.dim
            ),
        });
    }
    need(op, "raw", n * dim, raw.len)?;
    need(op, "out", n * dim, out.len)?;
    need(op, "norm weight", dim, w.len)?;
    need(op, "norm bias", dim, b.len)?;
    need(op, "inv_freq", p.n_rot / 2, inv_freq.len)?;
    need(op, "positions", n, positions.len)?;
    need(op, "slots", n, slots.len)?;
    if n == 0 {
        return Ok(());
    }
    // A thread per rotated pair (the kernel rotates in one pass).
    let threads = row_threads(dim).max((p.n_rot / 2).next_multiple_of(32) as u32);
    if threads > 1024 {
        return Err(CoreError::Param {
            op,
            msg: format!("{} rotated dims: at most 2048", p.n_rot),
        });
    }
    let f = be.func(FAM, "indexer_k_rows")?;
    let (dim_i, off_i, rot_i) = (int(op, dim)?, int(op, p.offset)?, int(op, p.n_rot)?);
    let mode = rope_mode_code(p.mode);
    let (rows, ty) = (cache.rows as i64, cache.code());
    let mut l = be.launch(&f);
    l.arg(raw.data())
        .arg(w.data())
        .arg(b.data())
        .arg(&eps)
        .arg(&dim_i)
        .arg(&off_i)
        .arg(&rot_i)
        .arg(&positions.data)
        .arg(inv_freq.data())
        .arg(&mode)
        .arg(&p.attn_factor)
        .arg(&slots.data)
        .arg(&mut cache.data)
        .arg(&rows)
        .arg(&ty)
        .arg(out.data_mut());
    let mut cfg = grid_rows(n, threads);
    cfg.shared_mem_bytes = row_shared_bytes(op, dim)?;
    // SAFETY: n rows of raw and out (checked), dim weights and biases, n_rot / 2 frequencies,
    // n positions and slots; a slot past the cache's rows is skipped; shared memory holds a row.
    unsafe { l.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}
