//! MLA attention, the DSA indexer and top-k on the device (kernels/mla.cu, kernels/indexer.cu).
//!
//! Launch layouts (the kernels' comments have the details):
//! * `mla_attention`: grid `(n_tokens · n_groups, splits)` of [`MLA_THREADS`] threads; a block
//!   takes `G` heads of one token (`G · dv ≤ MLA_THREADS · MLA_ACC`, the shared queries and a
//!   tile of [`MLA_KT`] decoded key rows within the device's shared memory) and one chunk of
//!   the token's key list. When the grid would be too small for the GPU (decode) the key list is
//!   split and `mla_combine` merges the partial (max, sum, accumulator) triples, kept in
//!   [`AttnState`]'s scratch. The splits come from the call's key capacity (`n_kv`, or the
//!   selection's size), never the live lengths, so the grid can be recorded in a CUDA graph; a
//!   block whose chunk lies past its token's keys exits after writing (max, sum) = (−∞, 0).
//! * `indexer_scores`: grid `(n_tokens, ⌈n_kv / kt⌉)` of 256 threads, a block scoring `kt`
//!   keys of one token for every indexer head; GLM-5's 32 heads take `indexer_scores_t32`
//!   (4 heads × 4 keys register tiles a lane, 32 keys a block).
//! * `top_k`: one block per row, radix select on `total_cmp` keys then one ordered pass.
//! * `indexer_select`: `indexer_scores` into the caller's scratch, then `top_k`.
#![allow(clippy::too_many_arguments)]

use std::sync::Mutex;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaSlice, LaunchConfig};
use glint_core::error::need;
use glint_core::{AttnParams, CacheType, CoreError, IndexerParams, Pages, Result, Rows, StepSizes};

use crate::backend::{dev, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaCache, CudaIds};
use crate::compile::Family;
use crate::smem::SMEM_DEFAULT;

/// Must match `MLA_THREADS`, `MLA_ACC` and `MLA_KT` in kernels/mla.cu.
const MLA_THREADS: usize = 256;
const MLA_ACC: usize = 32;
const MLA_KT: usize = 16;
/// Fewest keys a split of the key list gets, and most splits.
const MIN_SPLIT_KEYS: usize = 32;
const MAX_SPLITS: usize = 128;
/// Keys a block of `indexer_scores` scores, and its threads.
const IDX_KT: usize = 32;
/// Keys a block of `indexer_scores_t32` scores (kernels/indexer.cu IDX_T32_KT: 8 warps × 4).
const IDX_T32_KT: usize = 32;
/// Keys a block of `indexer_scores_mma_*` scores (kernels/indexer.cu IDX_MMA_KT: 8 warps × 8).
const IDX_MMA_KT: usize = 64;
/// Keys a block of `indexer_scores_mma128_*` (kernels/indexer.cu IDX_MMA_KT_WIDE, the default):
/// the token's query rounded half as often for the same keys.
const IDX_MMA_KT_WIDE: usize = 128;

/// Whether the tensor-core indexer kernel takes 128 keys a block (the default since call BI of
/// 2026-12-07: decode 2-6% faster at 16k and 64k on an H100, docs/performance.md) or 64
/// (`GLINT_CUDA_IDX_KT=64`, to compare; the scores are the same bits either way: each key's is
/// formed by one warp in the same order).
fn idx_wide() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_IDX_KT").map_or(true, |v| v != "64"))
}

/// Whether 16-bit and fp8 indexer keys take the tensor-core kernel (`GLINT_CUDA_IDX_MMA=0`: the
/// register tiles, to compare).
fn idx_mma() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_IDX_MMA").map_or(true, |v| v != "0"))
}

/// Whether GLM-5's indexer shape takes the register-tile kernel (`GLINT_CUDA_IDX_TILES=0`: the
/// general one, to compare).
fn idx_tiles() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_IDX_TILES").map_or(true, |v| v != "0"))
}
const IDX_THREADS: u32 = 256;

/// Which top-k kernel a call may take (`GLINT_CUDA_TOPK`): `rows` the one-histogram kernel,
/// `shared` at most `top_k_rows_s` (one block a row), else (default) also `top_k_rows_c`.
fn topk_choice() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| std::env::var("GLINT_CUDA_TOPK").unwrap_or_default())
}

fn topk_shared() -> bool {
    topk_choice() != "rows"
}

/// Blocks of a `top_k_rows_c` cluster (kernels/indexer.cu TOPK_CLUSTER).
const TOPK_CLUSTER: usize = 8;
/// Bits of the first radix level the scores kernel counts for `top_k_rows_ch` (kernels/indexer.cu
/// TOPK_HIST_BITS: the top bits of a key), and its bins.
const TOPK_HIST_BITS: usize = 11;
const TOPK_HIST_BINS: usize = 1 << TOPK_HIST_BITS;

/// Whether a row the cluster top-k takes has its first radix level counted by the tensor-core
/// scores kernel (`top_k_rows_ch`: two passes over the keys where `top_k_rows_c` makes four;
/// the same set and order). Opt-in, `GLINT_CUDA_TOPK_HIST=1`: on an H100 its tests pass and
/// decode at 16k and 64k is 2-3% slower with it (the scores' atomics cost more than the two
/// passes save; docs/performance.md, call BN).
fn topk_hist_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_TOPK_HIST").is_ok_and(|v| v == "1"))
}

/// Row widths from which a few rows take the cluster kernel (kernel bench, H100, one row:
/// 4,096 keys 14.6 µs against `top_k_rows_s`'s 12.8, the cluster's barriers and remote reads
/// costing more than the passes they split; 16,384 keys 16.0 against 22.1; 65,536 22.1 against
/// 83.0).
const TOPK_CLUSTER_MIN: usize = 8192;

/// Per-backend scratch of attention and the indexer: the split-key partial results of
/// `mla_attention`, and what was asked of the device once.
#[derive(Default)]
pub struct AttnState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `mla_attention`'s partials: `blocks · splits · G · (dv + 2)` floats.
    part: Option<CudaSlice<f32>>,
    part_len: usize,
    limits: Option<Limits>,
    /// `top_k_rows_ch`'s first radix level, [`TOPK_HIST_BINS`] words a row for up to
    /// [`hist_rows`] rows, all zero between steps (the top-k zeroes what the scores counted).
    hist: Option<CudaSlice<u32>>,
}

#[derive(Clone, Copy)]
struct Limits {
    sm_count: usize,
    smem_optin: usize,
}

impl AttnState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn prepare(&self, be: &CudaBackend, s: &StepSizes) -> Result<()> {
        let mut inner = self.lock();
        let lim = limits(be, &mut inner)?;
        // Before any capture: a graph cannot allocate it.
        ensure_hist(be, &mut inner, lim)?;
        if s.max_heads == 0 || s.max_key_row == 0 {
            return Ok(());
        }
        // Splits happen only while blocks < target, and then blocks · splits < 2 · target; a
        // block's partial is G · (dv + 2) floats with G · dv ≤ MLA_THREADS · MLA_ACC, dv ≤ dk.
        let per_block =
            (s.max_heads * (s.max_key_row + 2)).min(MLA_THREADS * MLA_ACC + 2 * s.max_heads);
        let len = 2 * target_blocks(lim) * per_block;
        grow_part(be, &mut inner, len)
    }
}

fn limits(be: &CudaBackend, inner: &mut Inner) -> Result<Limits> {
    if let Some(l) = inner.limits {
        return Ok(l);
    }
    let op = "querying the CUDA device";
    let sm = be
        .ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(dev(op))?;
    let l = Limits {
        sm_count: sm.max(1) as usize,
        smem_optin: be.smem.optin(be)?.saturating_sub(STATIC_SMEM_RESERVE),
    };
    inner.limits = Some(l);
    Ok(l)
}

/// Shared memory the attention and indexer plans leave under the device's opt-in limit for a
/// kernel's own (static) shared memory, which counts against it too (at most ~1.3 KiB in
/// kernels/mla.cu and indexer.cu: `top_k_rows_s`'s summed histogram and warp counts).
const STATIC_SMEM_RESERVE: usize = 2048;

/// Blocks that fill the GPU (four per SM: a block is latency-bound, so more of them help).
fn target_blocks(l: Limits) -> usize {
    mla_knob("GLINT_CUDA_MLA_BLOCKS").unwrap_or(4) * l.sm_count
}

/// A positive integer from the environment: the MLA plan's knobs (`GLINT_CUDA_MLA_BLOCKS`
/// blocks a multiprocessor the splits aim for, `GLINT_CUDA_MLA_HEADS` most heads a block,
/// `GLINT_CUDA_MLA_SPLIT_KEYS` fewest keys a split), read once each, to time other plans on a
/// device without a rebuild. None where unset (or not a number from 1 to 4096).
fn mla_knob(name: &'static str) -> Option<usize> {
    static KNOBS: Mutex<Vec<(&'static str, Option<usize>)>> = Mutex::new(Vec::new());
    let mut k = KNOBS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, v)) = k.iter().find(|(n, _)| *n == name) {
        return v;
    }
    let v = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&v| (1..=4096).contains(&v));
    k.push((name, v));
    v
}

/// Rows the cluster top-k takes at most: a quarter of the multiprocessors' worth of clusters.
fn hist_rows(l: Limits) -> usize {
    l.sm_count / (TOPK_CLUSTER * 4)
}

fn ensure_hist(be: &CudaBackend, inner: &mut Inner, l: Limits) -> Result<()> {
    if inner.hist.is_none() && hist_rows(l) > 0 {
        let len = hist_rows(l) * TOPK_HIST_BINS;
        inner.hist = Some(be.zeros::<u32>("the top-k's first radix level", len)?);
    }
    Ok(())
}

fn grow_part(be: &CudaBackend, inner: &mut Inner, len: usize) -> Result<()> {
    if inner.part.is_some() && inner.part_len >= len {
        return Ok(());
    }
    tracing::debug!(
        floats = len,
        was = inner.part_len,
        "growing mla_attention's split scratch"
    );
    inner.part = None;
    inner.part = Some(be.zeros::<f32>("mla_attention split scratch", len)?);
    inner.part_len = len;
    Ok(())
}

/// Bytes of dynamic shared memory: `floats` f32 (rounded up to 8-byte alignment), then `longs`
/// i64.
fn smem_bytes(floats: usize, longs: usize) -> usize {
    floats.div_ceil(2) * 8 + longs * 8
}

fn pages_args(
    op: &'static str,
    pages: &Pages<'_, CudaBackend>,
    n: usize,
) -> Result<(i64, i32, i32)> {
    need(op, "token_seq", n, pages.token_seq.len)?;
    if pages.block_size == 0 {
        return Err(CoreError::Param {
            op,
            msg: "block size 0".into(),
        });
    }
    Ok((
        pages.tables.len as i64,
        int(op, pages.max_blocks)?,
        int(op, pages.block_size)?,
    ))
}

/// Which scores kernel a call takes: GLM-5's 32 heads (d a multiple of 16, at most 256) the
/// register-tile kernel (kernels/indexer.cu `indexer_scores_t32`) unless GLINT_CUDA_IDX_TILES=0,
/// other shapes the general one; 16-bit and fp8 keys of that shape the tensor-core kernel (sm_80+;
/// GLINT_CUDA_IDX_MMA=0 keeps them on the register tiles). (tiled, mma, wide)
fn scores_kind(be: &CudaBackend, ty: CacheType, hi: usize, d: usize) -> (bool, bool, bool) {
    let tiled = hi == 32 && d.is_multiple_of(16) && d <= 256 && idx_tiles();
    let mma = tiled
        && matches!(ty, CacheType::F16 | CacheType::Bf16 | CacheType::Fp8)
        && be.info().compute_capability.0 >= 8
        && idx_mma();
    (tiled, mma, mma && idx_wide())
}

/// Whether `indexer_select` has the scores count the top-k's first radix level
/// (`top_k_rows_ch`): tensor-core scores, rows the cluster top-k takes with the kernel's
/// tables and keys in shared memory (else the other top-k kernels), GLINT_CUDA_TOPK_HIST.
fn counts_first_level(
    be: &CudaBackend,
    ty: CacheType,
    hi: usize,
    d: usize,
    rows: usize,
    n: usize,
) -> Result<bool> {
    if !topk_hist_on() || !scores_kind(be, ty, hi, d).1 {
        return Ok(false);
    }
    let Some((per, _)) = cluster_shape(be, rows, n)? else {
        return Ok(false);
    };
    let name = "top_k_rows_ch";
    let f = be.func(Family::Indexer, name)?;
    Ok((3 * TOPK_HIST_BINS + per) * 4 <= be.smem.dynamic_limit(be, "top_k", &f, name)?)
}

impl CudaBackend {
    /// Whether `indexer_select` over `rows` tokens of `n` keys of type `ty` (`hi` heads of `d`)
    /// runs `top_k_rows_ch` on a first radix level the scores counted, so a test can tell which
    /// kernels chose its set (all choose the same).
    pub fn indexer_counts_first_level(
        &self,
        ty: CacheType,
        hi: usize,
        d: usize,
        rows: usize,
        n: usize,
    ) -> bool {
        counts_first_level(self, ty, hi, d, rows, n).unwrap_or(false)
    }
}

/// `Backend::indexer_scores`; the tensor-core kernel also counts each row's first radix level
/// into `hist` where given (`indexer_select`, which checked it holds `n_tokens` rows and that
/// the kernel is the tensor-core one).
#[allow(clippy::too_many_arguments)]
pub(crate) fn indexer_scores(
    be: &CudaBackend,
    q: &CudaBuf,
    w: &CudaBuf,
    keys: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    p: &IndexerParams,
    out: &mut CudaBuf,
    hist: Option<&mut CudaSlice<u32>>,
) -> Result<()> {
    let op = "indexer_scores";
    let (n, hi, d, nkv) = (p.n_tokens, p.n_heads, p.head_dim, p.n_kv);
    if d == 0 || hi == 0 || keys.dim != d {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "head_dim {d}, {hi} heads, cache rows of {}, block size {}",
                keys.dim, pages.block_size
            ),
        });
    }
    need(op, "q", n * hi * d, q.len)?;
    need(op, "w", n * hi, w.len)?;
    need(op, "positions", n, positions.len)?;
    need(op, "out", n * nkv, out.len)?;
    let (n_table, max_blocks, bs) = pages_args(op, pages, n)?;
    if n == 0 || nkv == 0 {
        return Ok(());
    }
    let (tiled, mma, wide) = scores_kind(be, keys.ty, hi, d);
    let name = match keys.ty {
        CacheType::F16 if wide => "indexer_scores_mma128_f16",
        CacheType::Bf16 if wide => "indexer_scores_mma128_bf16",
        _ if wide => "indexer_scores_mma128_fp8",
        CacheType::F16 if mma => "indexer_scores_mma_f16",
        CacheType::Bf16 if mma => "indexer_scores_mma_bf16",
        _ if mma => "indexer_scores_mma_fp8",
        _ if tiled => "indexer_scores_t32",
        _ => "indexer_scores",
    };
    let f = be.func(Family::Indexer, name)?;
    let mut inner = be.attn.lock();
    let lim = limits(be, &mut inner)?;
    // The token's queries stay in shared memory; fewer keys per block if they are wide.
    let mut kt = if wide {
        IDX_MMA_KT_WIDE
    } else if mma {
        IDX_MMA_KT
    } else if tiled {
        IDX_T32_KT
    } else {
        IDX_KT
    };
    let bytes = |kt: usize| {
        if mma {
            // 16-bit query and key rows of d + 8, 64 + kt floats, kt i64 rows.
            2 * (hi + kt) * (d + 8) + 4 * (2 * hi + kt) + 8 * kt
        } else if tiled {
            smem_bytes((hi + kt) * (d + 4) + hi, kt)
        } else {
            smem_bytes(hi * (d + 1) + hi + kt * d, kt)
        }
    };
    while !tiled && kt > 1 && bytes(kt) > lim.smem_optin {
        kt /= 2;
    }
    let smem = bytes(kt);
    be.smem.allow(be, op, &f, name, smem)?;
    drop(inner);
    let tiles = nkv.div_ceil(kt);
    if tiles > 65535 {
        return Err(CoreError::Param {
            op,
            msg: format!("{nkv} keys exceed the grid ({kt} a block)"),
        });
    }
    let (krows, kdim, kty) = (keys.rows as i64, int(op, keys.dim)?, keys.code());
    let (hi_i, d_i, nkv_i, kt_i) = (int(op, hi)?, int(op, d)?, int(op, nkv)?, int(op, kt)?);
    let cfg = LaunchConfig {
        grid_dim: (int(op, n)? as u32, tiles as u32, 1),
        block_dim: (IDX_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let mut b = be.launch(&f);
    b.arg(q.data())
        .arg(w.data())
        .arg(&p.w_scale)
        .arg(&keys.data)
        .arg(&krows);
    if !mma {
        b.arg(&kdim).arg(&kty);
    }
    b.arg(&positions.data)
        .arg(&pages.tables.data)
        .arg(&n_table)
        .arg(&pages.token_seq.data)
        .arg(&max_blocks)
        .arg(&bs);
    // The tile kernel's heads and keys a block are constants.
    if !tiled {
        b.arg(&hi_i);
    }
    b.arg(&d_i).arg(&nkv_i);
    if !tiled {
        b.arg(&kt_i);
    }
    b.arg(out.data_mut());
    let null = 0u64;
    if mma {
        match hist {
            Some(h) => b.arg(h),
            None => b.arg(&null),
        };
    }
    // SAFETY: argument types match the kernel; the buffers hold the prefixes checked above (and
    // `hist` n_tokens rows, the caller's check), and the kernel bounds every pool row it derives
    // from device ids.
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}

pub(crate) fn indexer_scratch_len(n_tokens: usize, n_kv: usize) -> usize {
    n_tokens * n_kv
}

pub(crate) fn indexer_select(
    be: &CudaBackend,
    q: &CudaBuf,
    w: &CudaBuf,
    keys: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    p: &IndexerParams,
    top_k: usize,
    scratch: &mut CudaBuf,
    out: &mut CudaIds,
) -> Result<()> {
    let op = "indexer_select";
    need(
        op,
        "scratch",
        indexer_scratch_len(p.n_tokens, p.n_kv),
        scratch.len,
    )?;
    if top_k > p.n_kv {
        return Err(CoreError::Param {
            op,
            msg: format!("top_k {top_k} > {} keys", p.n_kv),
        });
    }
    need(op, "out", p.n_tokens * top_k, out.len)?;
    let (rows, n) = (p.n_tokens, p.n_kv);
    let fused =
        rows > 0 && top_k > 0 && counts_first_level(be, keys.ty, p.n_heads, p.head_dim, rows, n)?;
    // Taken out while in use (the scores and top-k lock the state themselves); a row the scores
    // counted and no top-k read would be counted again next step, so a failed launch zeroes it.
    let hist = if fused {
        let mut inner = be.attn.lock();
        let lim = limits(be, &mut inner)?;
        ensure_hist(be, &mut inner, lim)?;
        // cluster_shape keeps rows to hist_rows; checked again before the table is lent out.
        if rows <= hist_rows(lim) {
            inner.hist.take()
        } else {
            None
        }
    } else {
        None
    };
    let Some(mut h) = hist else {
        indexer_scores(be, q, w, keys, positions, pages, p, scratch, None)?;
        return self::top_k(be, scratch, rows, n, top_k, out);
    };
    let done = indexer_scores(be, q, w, keys, positions, pages, p, scratch, Some(&mut h))
        .and_then(|()| top_k_cluster(be, scratch, rows, n, top_k, out, Some(&mut h)))
        .and_then(|r| {
            r.ok_or_else(|| CoreError::Param {
                op,
                msg: format!("no cluster top-k for {rows} rows of {n} keys"),
            })
        });
    if done.is_err() {
        let _ = be.cur_stream().memset_zeros(&mut h);
    }
    be.attn.lock().hist = Some(h);
    done
}

pub(crate) fn top_k(
    be: &CudaBackend,
    x: &CudaBuf,
    rows: usize,
    n: usize,
    k: usize,
    ids: &mut CudaIds,
) -> Result<()> {
    let op = "top_k";
    if k > n {
        return Err(CoreError::Param {
            op,
            msg: format!("k {k} > row width {n}"),
        });
    }
    need(op, "x", rows * n, x.len)?;
    need(op, "ids", rows * k, ids.len)?;
    if k == 0 || rows == 0 {
        return Ok(());
    }
    if let Some(done) = top_k_cluster(be, x, rows, n, k, ids, None)? {
        return Ok(done);
    }
    let threads = n.next_power_of_two().clamp(32, 1024);
    // `top_k_rows_s` (kernels/indexer.cu): a 256-bin histogram a warp, and the row's keys too
    // where they fit; GLINT_CUDA_TOPK=rows takes the one-histogram kernel, to compare.
    let shared = topk_shared();
    let name = if shared { "top_k_rows_s" } else { "top_k_rows" };
    let f = be.func(Family::Indexer, name)?;
    let hist = threads / 32 * 256 * 4;
    let cached = shared && hist + 4 * n <= be.smem.dynamic_limit(be, op, &f, name)?;
    let smem = match (shared, cached) {
        (false, _) => 0,
        (true, false) => hist,
        (true, true) => hist + 4 * n,
    };
    be.smem.allow(be, op, &f, name, smem)?;
    let cfg = LaunchConfig {
        grid_dim: (int(op, rows)? as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let (n_i, k_i, cached_i) = (int(op, n)?, int(op, k)?, cached as i32);
    let mut b = be.launch(&f);
    b.arg(x.data()).arg(&n_i).arg(&k_i).arg(&mut ids.data);
    if shared {
        b.arg(&cached_i);
    }
    // SAFETY: argument types match the kernel; rows·n values are read, rows·k ids written.
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}

/// `top_k_rows_c` (kernels/indexer.cu): each row over a cluster of [`TOPK_CLUSTER`] blocks, where
/// a one-block-a-row grid would leave most multiprocessors idle (Hopper, rows of at least
/// [`TOPK_CLUSTER_MIN`], up to a quarter of the multiprocessors' worth of clusters) and a block's
/// share of keys fits its shared memory. `None` when the call takes the other kernels.
fn top_k_cluster(
    be: &CudaBackend,
    x: &CudaBuf,
    rows: usize,
    n: usize,
    k: usize,
    ids: &mut CudaIds,
    hist: Option<&mut CudaSlice<u32>>,
) -> Result<Option<()>> {
    let op = "top_k";
    let Some((per, threads)) = cluster_shape(be, rows, n)? else {
        return Ok(None);
    };
    let (name, tables) = match hist {
        Some(_) => ("top_k_rows_ch", 3 * TOPK_HIST_BINS),
        None => ("top_k_rows_c", threads / 32 * 256),
    };
    let f = be.func(Family::Indexer, name)?;
    let smem = (tables + per) * 4;
    if smem > be.smem.dynamic_limit(be, op, &f, name)? {
        return Ok(None);
    }
    be.smem.allow(be, op, &f, name, smem)?;
    let cfg = LaunchConfig {
        grid_dim: (int(op, rows * TOPK_CLUSTER)? as u32, 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let (n_i, k_i) = (int(op, n)?, int(op, k)?);
    let mut b = be.launch(&f);
    b.arg(x.data()).arg(&n_i).arg(&k_i).arg(&mut ids.data);
    if let Some(h) = hist {
        b.arg(h);
    }
    // SAFETY: argument types match the kernel (its cluster shape is compiled in, the grid a
    // multiple of it); rows·n values are read, rows·k ids written (and for `top_k_rows_ch`
    // rows · TOPK_HIST_BINS words of `hist`, which indexer_select checked it holds).
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(Some(()))
}

/// The cluster top-k's shape for `rows` rows of `n` keys — each block's share of keys
/// (`per`) and threads — or None where the call takes the other kernels.
fn cluster_shape(be: &CudaBackend, rows: usize, n: usize) -> Result<Option<(usize, usize)>> {
    let sms = {
        let mut inner = be.attn.lock();
        limits(be, &mut inner)?.sm_count
    };
    if be.info().compute_capability.0 < 9
        || !matches!(topk_choice(), "" | "cluster")
        || n < TOPK_CLUSTER_MIN
        || rows * TOPK_CLUSTER * 4 > sms
    {
        return Ok(None);
    }
    let per = n.div_ceil(TOPK_CLUSTER).next_multiple_of(32);
    // About four keys a thread a pass.
    let threads = (per / 4).next_power_of_two().clamp(128, 1024);
    Ok(Some((per, threads)))
}

/// How `mla_attention` covers a call: heads per block, key-list chunks.
struct MlaPlan {
    g: usize,
    n_groups: usize,
    splits: usize,
    chunk: usize,
    smem: usize,
}

/// Shared memory of a block of `g` heads (the row stride as in kernels/mla.cu).
fn mla_smem(g: usize, dk: usize) -> usize {
    let st = if dk.is_multiple_of(4) { dk + 4 } else { dk + 1 };
    smem_bytes((g + MLA_KT) * st + g * MLA_KT + 3 * g, MLA_KT)
}

/// Widest key row `mla_attention_mma_*` takes (kernels/mla.cu MLA_MMA_DKMAX).
const MLA_MMA_DKMAX: usize = 576;

/// Shared memory of `mla_attention_mma_*` (kernels/mla.cu): 16 query rows and MLA_KT key rows of
/// dk + 8 16-bit values, 8 × 16 × 16 + 16 · MLA_KT + 4 · 16 floats, MLA_KT i64 rows.
fn mla_mma_smem(dk: usize) -> usize {
    2 * (16 + MLA_KT) * (dk + 8) + 4 * (8 * 256 + 16 * MLA_KT + 64) + 8 * MLA_KT
}

/// Keys a tile of `mla_attention_mma64_*` (kernels/mla.cu MLA_KT64), and the row stride of its P.
const MLA_KT64: usize = 64;
const MLA_PST: usize = MLA_KT64 + 8;

/// Shared memory of `mla_attention_mma64_*` (kernels/mla.cu): 16 query rows and MLA_KT64 key
/// rows of dk + 8 16-bit values, 16 rows of P, 2 · 8 · 16 + 4 · 16 floats, MLA_KT64 i64 rows.
fn mla_mma64_smem(dk: usize) -> usize {
    2 * (16 + MLA_KT64) * (dk + 8) + 2 * 16 * MLA_PST + 4 * (2 * 8 * 16 + 4 * 16) + 8 * MLA_KT64
}

/// Heads a block of `mla_attention_mma64x64_*` (kernels/mla.cu MLA_H64).
const MLA_H64: usize = 64;

/// Shared memory of `mla_attention_mma64x64_*` (kernels/mla.cu) whose warps split a tile in
/// `parts` (2: 8 warps; 4: the 16-warp `_w16_` kernel): MLA_H64 query rows and MLA_KT64 key
/// rows of dk + 8 16-bit values, MLA_H64 rows of P, (2 · parts + 4) · MLA_H64 floats (the parts'
/// maxima and sums, the query's scales), two tiles' MLA_KT64 i64 pool rows. The same for any
/// number of heads up to MLA_H64.
fn mla_mma64x64_smem(dk: usize, parts: usize) -> usize {
    2 * (MLA_H64 + MLA_KT64) * (dk + 8)
        + 2 * MLA_H64 * MLA_PST
        + 4 * (2 * parts + 4) * MLA_H64
        + 16 * MLA_KT64
}

/// Whether the 64-head kernel runs with 16 warps a block, each a quarter of a tile's keys and
/// of dv (64 accumulators, 113 registers), rather than 8 (224 registers): at one block a
/// multiprocessor the 8-warp kernel waits on latencies (12.5% occupancy, issue slots 23%
/// busy); 16 warps take 12% less time (a 512-token step on an H100, call AX,
/// docs/performance.md). `GLINT_CUDA_MLA_H64_WARPS=8` keeps the 8-warp kernel.
fn h64_w16() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_MLA_H64_WARPS").map_or(true, |v| v != "8"))
}

/// Whether a step of `n_tokens` runs the tensor-core attention with all of a token's heads in
/// one block (`mla_attention_mma64x64_*`), so a prompt's tokens copy each key row once rather
/// than once a 16-head group: steps of [`TILE64_ALL_TOKENS`] tokens or more, as the 64-key
/// tiles (a decode step's one token has too few blocks for a grid of them). Measured on H100s:
/// with 8 warps pp512 was +3-5% on the default path but 1-3% slower with the cuBLAS products
/// (calls AV, AW); with 16 warps +4% with the cuBLAS products in each of two pairs and within
/// the spread on the default path (call AX, docs/performance.md), so it no longer depends on
/// the product path. `GLINT_CUDA_MLA_H64=all` every list (the conformance suite's cases), `=0`
/// never.
fn mla_h64(n_tokens: usize) -> bool {
    static KNOB: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let knob = *KNOB.get_or_init(|| match std::env::var("GLINT_CUDA_MLA_H64").as_deref() {
        Ok("0") => Some(false),
        Ok("all") => Some(true),
        _ => None,
    });
    h64_on(knob, n_tokens)
}

/// [`mla_h64`] given the knob (None: unset).
fn h64_on(knob: Option<bool>, n_tokens: usize) -> bool {
    knob.unwrap_or(n_tokens >= TILE64_ALL_TOKENS)
}

/// The key lists from which the tensor-core attention runs on 64-key tiles in a step of
/// `n_tokens`: from 1,024 keys by default (at 2,048 selected keys on an H100, `mla_attention` +
/// `mla_combine` 22.9 µs against 29.6 for the 16-key tiles, docs/performance.md), and every
/// list in a step of [`TILE64_ALL_TOKENS`] tokens or more (a prompt: pp512 +2% on the default
/// path, +5% with the cuBLAS products, call AR); every list with `GLINT_CUDA_MLA_TILE64=all`
/// (the conformance suite's small cases), never with `=0`. Short lists of decode steps keep the
/// 16-key plan: at ~70 keys the kernel bench has 64-key tiles 5% faster, but decode on an H200
/// moved within its runs' spread (call AA, docs/performance.md).
fn mla_tile64_from(n_tokens: usize) -> Option<usize> {
    static FROM: std::sync::OnceLock<Option<Option<usize>>> = std::sync::OnceLock::new();
    let knob = *FROM.get_or_init(|| match std::env::var("GLINT_CUDA_MLA_TILE64").as_deref() {
        Ok("0") => Some(None),
        Ok("all") => Some(Some(0)),
        _ => None,
    });
    tile64_from(knob, n_tokens)
}

/// [`mla_tile64_from`] given the knob (None: unset).
fn tile64_from(knob: Option<Option<usize>>, n_tokens: usize) -> Option<usize> {
    knob.unwrap_or(if n_tokens >= TILE64_ALL_TOKENS {
        Some(0)
    } else {
        Some(16 * MLA_KT64)
    })
}

/// Tokens a step holds from which every key list takes the 64-key tiles.
const TILE64_ALL_TOKENS: usize = 64;

/// Whether f16 and bf16 latent caches take the tensor-core kernel (`GLINT_CUDA_MLA_MMA=0`: the
/// CUDA-core one, to compare).
fn mla_mma() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_MLA_MMA").map_or(true, |v| v != "0"))
}

/// Heads a block and fewest keys a split of the plan for short key lists (see [`mla_plan`]).
const SHORT_HEADS: usize = 8;
const SHORT_SPLIT_KEYS: usize = 16;

/// The plan: as many heads a block as the accumulators and shared memory allow, the key list
/// split until the grid reaches [`target_blocks`]. Where that grid stays under half the
/// multiprocessors (a short context: about 500 keys or fewer for GLM-5's 64 heads), half the
/// heads a block and one 16-key tile a split instead: at ~70 keys on an H100, 40 blocks in
/// place of 12, `mla_attention` + `mla_combine` 16.4 µs against 23.2 (kernel bench) and decode
/// of the 3 + 2 file +3.0%; the same plan at 2048 selected keys was 8% slower end to end,
/// so longer lists keep the default. The knobs (`GLINT_CUDA_MLA_*`) override either.
fn mla_plan(op: &'static str, lim: Limits, p: &AttnParams, selected: bool) -> Result<MlaPlan> {
    let l_max = if selected { p.n_selected } else { p.n_kv }.max(1);
    let (heads, keys) = (
        mla_knob("GLINT_CUDA_MLA_HEADS"),
        mla_knob("GLINT_CUDA_MLA_SPLIT_KEYS"),
    );
    let knobs_set = heads.is_some() || keys.is_some();
    let (heads, keys) = (heads.unwrap_or(usize::MAX), keys.unwrap_or(MIN_SPLIT_KEYS));
    let plan = plan_with(op, lim, p, l_max, heads, keys)?;
    if knobs_set || p.n_tokens * plan.n_groups * plan.splits >= lim.sm_count / 2 {
        return Ok(plan);
    }
    plan_with(op, lim, p, l_max, SHORT_HEADS, SHORT_SPLIT_KEYS)
}

fn plan_with(
    op: &'static str,
    lim: Limits,
    p: &AttnParams,
    l_max: usize,
    heads: usize,
    min_keys: usize,
) -> Result<MlaPlan> {
    let (h, dk, dv) = (p.n_heads, p.dk, p.dv);
    let by_acc = (MLA_THREADS * MLA_ACC) / dv;
    let mut g_max = h.min(by_acc).min(heads);
    while g_max > 0 && mla_smem(g_max, dk) > lim.smem_optin {
        g_max -= 1;
    }
    if g_max == 0 {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "rows of dk {dk}, dv {dv} do not fit one block ({} bytes of shared memory)",
                lim.smem_optin
            ),
        });
    }
    Ok(plan_groups(p, l_max, g_max, min_keys, target_blocks(lim)))
}

/// Heads of at most `g_max` a block in even groups, and the key list split until the grid
/// reaches `target` blocks (splits of at least `min_keys`, as many as mla_combine's shared
/// memory takes), with `mla_attention`'s shared memory (the tensor-core kernels set their own).
fn plan_groups(
    p: &AttnParams,
    l_max: usize,
    g_max: usize,
    min_keys: usize,
    target: usize,
) -> MlaPlan {
    let n_groups = p.n_heads.div_ceil(g_max);
    let g = p.n_heads.div_ceil(n_groups);
    let blocks = p.n_tokens * n_groups;
    let mut splits = if blocks >= target {
        1
    } else {
        target
            .div_ceil(blocks)
            .min(l_max.div_ceil(min_keys))
            .min(SMEM_DEFAULT / (4 * g))
            .clamp(1, MAX_SPLITS)
    };
    let chunk = l_max.div_ceil(splits).max(1);
    splits = l_max.div_ceil(chunk).max(1);
    MlaPlan {
        g,
        n_groups,
        splits,
        chunk,
        smem: mla_smem(g, p.dk),
    }
}

/// The query's rope part where `mla_attention` reads the query in two parts
/// (`Backend::mla_attention_parts`): the buffer and its rows.
pub(crate) type QPe<'a> = Option<(&'a CudaBuf, Rows)>;

/// `mla_attention`; with `pe`, q holds only the latent part (`[rows × dv]`) and the rope part
/// comes from `pe` (kernels/mla.cu reads both where they are).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mla_attention(
    be: &CudaBackend,
    q: &CudaBuf,
    pe: QPe<'_>,
    cache: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    selected: Option<&CudaIds>,
    p: &AttnParams,
    out: &mut CudaBuf,
) -> Result<()> {
    let op = "mla_attention";
    let (n, h, dk, dv) = (p.n_tokens, p.n_heads, p.dk, p.dv);
    if dv > dk || dk == 0 || dv == 0 || h == 0 || cache.dim != dk {
        return Err(CoreError::Param {
            op,
            msg: format!(
                "dv {dv}, dk {dk}, {h} heads, cache rows of {}, block size {}",
                cache.dim, pages.block_size
            ),
        });
    }
    if dv > MLA_THREADS * MLA_ACC {
        return Err(CoreError::Param {
            op,
            msg: format!("dv {dv} > {}", MLA_THREADS * MLA_ACC),
        });
    }
    match pe {
        None => need(op, "q", n * h * dk, q.len)?,
        Some((qp, rows)) => {
            need(op, "q", n * h * dv, q.len)?;
            let ext = rows.extent(n * h, dk - dv).ok_or(CoreError::Param {
                op,
                msg: format!("query rope rows {rows:?} overflow"),
            })?;
            need(op, "q_pe", ext, qp.len)?;
        }
    }
    need(op, "positions", n, positions.len)?;
    need(op, "out", n * h * dv, out.len)?;
    if let Some(s) = selected {
        need(op, "selected", n * p.n_selected, s.len)?;
    }
    let (n_table, max_blocks, bs) = pages_args(op, pages, n)?;
    if n == 0 {
        return Ok(());
    }
    be.fork.main_only(op)?;
    let mut inner = be.attn.lock();
    let lim = limits(be, &mut inner)?;
    let mut plan = mla_plan(op, lim, p, selected.is_some())?;
    // 16-bit latent caches of GLM-5's widths: the tensor-core kernel (same plan and outputs).
    let mma = matches!(cache.ty, CacheType::F16 | CacheType::Bf16)
        && be.info().compute_capability.0 >= 8
        && dk.is_multiple_of(32)
        && dk <= MLA_MMA_DKMAX
        && dv.is_multiple_of(64)
        && dv <= 512
        && plan.g <= 16
        && mla_mma();
    let l_max = if selected.is_some() {
        p.n_selected
    } else {
        p.n_kv
    }
    .max(1);
    let tile64 = mma && mla_tile64_from(p.n_tokens).is_some_and(|from| l_max >= from);
    // The 64-head kernel's parts of a tile: 4 with 16 warps, 2 with 8.
    let parts = if dv.is_multiple_of(256) && h64_w16() {
        4
    } else {
        2
    };
    let h64 = mma
        && dv.is_multiple_of(128)
        && mla_h64(p.n_tokens)
        && mla_knob("GLINT_CUDA_MLA_HEADS").is_none()
        && mla_mma64x64_smem(dk, parts) <= lim.smem_optin;
    let w16 = h64 && parts == 4;
    let name = match cache.ty {
        CacheType::F16 if w16 => "mla_attention_mma64x64_w16_f16",
        _ if w16 => "mla_attention_mma64x64_w16_bf16",
        CacheType::F16 if h64 => "mla_attention_mma64x64_f16",
        _ if h64 => "mla_attention_mma64x64_bf16",
        CacheType::F16 if tile64 => "mla_attention_mma64_f16",
        _ if tile64 => "mla_attention_mma64_bf16",
        CacheType::F16 if mma => "mla_attention_mma_f16",
        _ if mma => "mla_attention_mma_bf16",
        _ => "mla_attention",
    };
    if h64 {
        // One block a multiprocessor fits (its shared memory), so the splits aim at one an SM.
        let keys = mla_knob("GLINT_CUDA_MLA_SPLIT_KEYS").unwrap_or(MLA_KT64);
        plan = plan_groups(p, l_max, h.min(MLA_H64), keys, lim.sm_count);
        plan.smem = mla_mma64x64_smem(dk, parts);
    } else if tile64 {
        // Splits of at least one tile, unless the plan's knob says otherwise.
        if mla_knob("GLINT_CUDA_MLA_SPLIT_KEYS").is_none() {
            let heads = mla_knob("GLINT_CUDA_MLA_HEADS").unwrap_or(usize::MAX);
            plan = plan_with(op, lim, p, l_max, heads, MLA_KT64)?;
        }
        plan.smem = mla_mma64_smem(dk);
    } else if mma {
        plan.smem = mla_mma_smem(dk);
    }
    let f = be.func(Family::Mla, name)?;
    be.smem.allow(be, op, &f, name, plan.smem)?;
    let blocks = n * plan.n_groups;
    let part_len = if plan.splits > 1 {
        blocks * plan.splits * plan.g * (dv + 2)
    } else {
        0
    };
    if part_len > 0 {
        grow_part(be, &mut inner, part_len)?;
    }
    let (krows, kty) = (cache.rows as i64, cache.code());
    let has_sel = i32::from(selected.is_some());
    let sel_data = selected.map_or(&positions.data, |s| &s.data);
    let (n_sel, h_i, dk_i, dv_i, nkv) = (
        int(op, p.n_selected)?,
        int(op, h)?,
        int(op, dk)?,
        int(op, dv)?,
        int(op, p.n_kv)?,
    );
    let (g_i, ng_i, chunk_i, splits_i) = (
        int(op, plan.g)?,
        int(op, plan.n_groups)?,
        int(op, plan.chunk)?,
        int(op, plan.splits)?,
    );
    let threads = if w16 { 2 * MLA_THREADS } else { MLA_THREADS };
    let cfg = LaunchConfig {
        grid_dim: (int(op, blocks)? as u32, plan.splits as u32, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: plan.smem as u32,
    };
    if inner.part.is_none() {
        // One split never reads it, but the kernel takes a pointer.
        grow_part(be, &mut inner, 1)?;
    }
    let Some(part) = inner.part.as_mut() else {
        return Ok(());
    };
    {
        let (pe_off, pe_stride, parts) = match pe {
            Some((_, r)) => (r.off as i64, r.stride as i64, 1i32),
            None => (0, 0, 0),
        };
        let mut b = be.launch(&f);
        b.arg(q.data())
            .arg(pe.map_or(q.data(), |(qp, _)| qp.data()))
            .arg(&pe_off)
            .arg(&pe_stride)
            .arg(&parts)
            .arg(&cache.data)
            .arg(&krows)
            .arg(&kty)
            .arg(&positions.data)
            .arg(&pages.tables.data)
            .arg(&n_table)
            .arg(&pages.token_seq.data)
            .arg(&max_blocks)
            .arg(&bs)
            .arg(sel_data)
            .arg(&has_sel)
            .arg(&n_sel)
            .arg(&h_i)
            .arg(&dk_i)
            .arg(&dv_i)
            .arg(&nkv)
            .arg(&p.scale)
            .arg(&g_i)
            .arg(&ng_i)
            .arg(&chunk_i)
            .arg(&splits_i)
            .arg(out.data_mut())
            .arg(&mut *part);
        // SAFETY: argument types match the kernel; q, out, positions, token_seq and the selection
        // hold the prefixes checked above, `part` holds `part_len` floats when splits > 1, and the
        // kernel bounds every pool row it derives from device ids.
        unsafe { b.launch(cfg) }.map_err(dev(op))?;
    }
    if plan.splits > 1 {
        let fc = be.func(Family::Mla, "mla_combine")?;
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, (plan.g * dv).div_ceil(MLA_THREADS) as u32, 1),
            block_dim: (MLA_THREADS as u32, 1, 1),
            shared_mem_bytes: (plan.g * (plan.splits + 1) * 4) as u32,
        };
        let mut b = be.launch(&fc);
        b.arg(&*part)
            .arg(&h_i)
            .arg(&dv_i)
            .arg(&g_i)
            .arg(&ng_i)
            .arg(&splits_i)
            .arg(out.data_mut());
        // SAFETY: reads the partials the launch above wrote, writes out's checked prefix.
        unsafe { b.launch(cfg) }.map_err(dev(op))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prompt-sized steps take the 64-key tiles on every list, decode steps from 1,024 keys;
    /// `GLINT_CUDA_MLA_TILE64` (`0`, `all`) overrides both.
    #[test]
    fn tile64_threshold_by_step_size() {
        assert_eq!(tile64_from(None, 1), Some(1024));
        assert_eq!(tile64_from(None, 63), Some(1024));
        assert_eq!(tile64_from(None, 64), Some(0));
        assert_eq!(tile64_from(None, 512), Some(0));
        assert_eq!(tile64_from(Some(None), 512), None);
        assert_eq!(tile64_from(Some(Some(0)), 1), Some(0));
    }

    /// All heads a block from a prompt's step size (the 64-key tiles' threshold), whatever path
    /// its products take; `GLINT_CUDA_MLA_H64` (`0`, `all`) overrides it.
    #[test]
    fn heads64_by_step_size() {
        assert!(!h64_on(None, 1));
        assert!(!h64_on(None, 63));
        assert!(h64_on(None, 64));
        assert!(h64_on(Some(true), 1));
        assert!(!h64_on(Some(false), 512));
    }

    /// GLM-5's rows (dk 576) in one block of 64 heads: 161,792 bytes with 8 warps, 162,816 with
    /// 16, within a Hopper (227 KiB) or A100 (163 KiB) block's opt-in shared memory; the plan
    /// gives a token's 64 heads one group and a 512-token prompt one split.
    #[test]
    fn heads64_plan_for_glm5() {
        assert_eq!(mla_mma64x64_smem(576, 2), 161_792);
        assert_eq!(mla_mma64x64_smem(576, 4), 162_816);
        let p = AttnParams {
            n_tokens: 512,
            n_heads: 64,
            dk: 576,
            dv: 512,
            n_kv: 512,
            n_selected: 0,
            scale: 1.0,
        };
        let plan = plan_groups(&p, 512, 64, MLA_KT64, 132);
        assert_eq!((plan.g, plan.n_groups, plan.splits), (64, 1, 1));
        let one = AttnParams { n_tokens: 1, ..p };
        let plan = plan_groups(&one, 2048, 64, MLA_KT64, 132);
        assert_eq!((plan.g, plan.splits, plan.chunk), (64, 32, 64));
    }

    /// The shapes the host plans grids and shared memory with are the kernels' own: a block of
    /// keys or threads that differs between the two is a silent out-of-bounds or missed key.
    #[test]
    fn host_constants_match_the_kernels() {
        for (name, host) in [
            ("MLA_THREADS", MLA_THREADS),
            ("MLA_ACC", MLA_ACC),
            ("MLA_KT", MLA_KT),
            ("MLA_MMA_DKMAX", MLA_MMA_DKMAX),
            ("MLA_KT64", MLA_KT64),
            ("MLA_H64", MLA_H64),
        ] {
            assert_eq!(Family::Mla.define(name), host, "kernels/mla.cu {name}");
        }
        for (name, host) in [
            ("IDX_T32_KT", IDX_T32_KT),
            ("IDX_MMA_KT", IDX_MMA_KT),
            ("IDX_MMA_KT_WIDE", IDX_MMA_KT_WIDE),
            ("TOPK_CLUSTER", TOPK_CLUSTER),
            ("TOPK_HIST_BITS", TOPK_HIST_BITS),
        ] {
            assert_eq!(
                Family::Indexer.define(name),
                host,
                "kernels/indexer.cu {name}"
            );
        }
    }

    /// Every kernel the host launches by name is defined (a typo would fail only on a GPU).
    #[test]
    fn launched_kernels_exist() {
        let mla = Family::Mla.source();
        for k in [
            "mla_attention(",
            "mla_combine(",
            "MLA_MMA_KERNEL(mla_attention_mma, f16,",
            "MLA_MMA_KERNEL(mla_attention_mma, bf16,",
            "MLA_MMA_KERNEL(mla_attention_mma64, f16,",
            "MLA_MMA_KERNEL(mla_attention_mma64, bf16,",
        ] {
            assert!(mla.contains(k), "kernels/mla.cu: {k}");
        }
        let idx = Family::Indexer.source();
        for k in [
            "indexer_scores(",
            "indexer_scores_t32(",
            "IDX_MMA_KERNEL(f16, CACHE_F16, , IDX_MMA_KT)",
            "IDX_MMA_KERNEL(bf16, CACHE_BF16, , IDX_MMA_KT)",
            "IDX_MMA_KERNEL(fp8, CACHE_FP8, , IDX_MMA_KT)",
            "IDX_MMA_KERNEL(f16, CACHE_F16, 128, IDX_MMA_KT_WIDE)",
            "IDX_MMA_KERNEL(bf16, CACHE_BF16, 128, IDX_MMA_KT_WIDE)",
            "IDX_MMA_KERNEL(fp8, CACHE_FP8, 128, IDX_MMA_KT_WIDE)",
            "top_k_rows(",
            "top_k_rows_s(",
            "top_k_rows_c(",
            "top_k_rows_ch(",
        ] {
            assert!(idx.contains(k), "kernels/indexer.cu: {k}");
        }
    }
}
