//! Reference implementations of the fused attention-side ops: absorbed-MLA attention over the
//! latent cache, the DSA indexer score, and row-wise top-k.

use std::cell::Cell;

use rayon::prelude::*;

use super::cache::CpuCache;
use super::elementwise::softmax_row;
use super::topk::top_k_packed_into;
use crate::error::{need, CoreError, Result};
use crate::params::{AttnParams, IndexerParams};
use glint_quant::dot::{
    axpy_rows_ordered_heads, dot_f32_ordered, dot_f32_ordered_grid, dot_f32_ordered_rows,
    indexer_scores_i8, relu_weighted_sums8, IndexerQuery, INDEXER_MAX_DIM,
};

/// Few query rows (decode): run rows in turn and split a row's heads over the pool; many
/// (prefill): parallelise across rows.
fn split(n_rows: usize) -> bool {
    n_rows >= 2 * rayon::current_num_threads()
}

/// Threads inside one row only pay off above roughly a million multiply-adds.
fn inner_par(across: bool, macs: usize) -> bool {
    !across && macs >= (1 << 20) && rayon::current_num_threads() > 1
}

/// `sc[i][t] = scale · q_i · k_t` for the heads `q [hs × dk]` and keys `keys [nk × dk]`, then a
/// softmax per head, then `o[i] = Σ_t sc[i][t] · k_t[..dv]` summed over `t` in order. Dots in
/// tinyBLAS lane order ([`dot_f32_ordered`]), like the F32 matmuls, so the result depends on
/// neither the CPU nor the batch, and nothing is allocated.
#[allow(clippy::too_many_arguments)]
fn attend_heads(
    q: &[f32],
    keys: &[f32],
    dk: usize,
    dv: usize,
    scale: f32,
    sc: &mut [f32],
    o: &mut [f32],
) {
    let nk = keys.len() / dk;
    let hs = q.len() / dk;
    // Scores: a block of 36 keys (83 KB for GLM-5, twelve of the grid's 4-head × 3-key tiles)
    // stays in L2 while every head meets it, eight heads (18 KB of q) at a time from L1; the keys
    // stream from memory once per row.
    for t0 in (0..nk).step_by(36) {
        let t1 = (t0 + 36).min(nk);
        for h0 in (0..hs).step_by(8) {
            let h1 = (h0 + 8).min(hs);
            let out = &mut sc[h0 * nk + t0..];
            dot_f32_ordered_grid(&q[h0 * dk..h1 * dk], &keys[t0 * dk..t1 * dk], dk, out, nk);
        }
    }
    for row in sc[..hs * nk].chunks_mut(nk) {
        row.iter_mut().for_each(|v| *v *= scale);
        softmax_row(row);
    }
    // Output: a tile of eight keys (18 KB) stays in L1 while every head accumulates it, in
    // key order per element.
    o[..hs * dv].fill(0.0);
    for t0 in (0..nk).step_by(8) {
        let t1 = (t0 + 8).min(nk);
        axpy_rows_ordered_heads(
            &sc[t0..],
            nk,
            t1 - t0,
            &keys[t0 * dk..],
            dk,
            &mut o[..hs * dv],
            dv,
        );
    }
}

thread_local! {
    /// Per-thread scratch so decode does not allocate per token and layer: the gathered key rows
    /// (up to top_k × 576 floats for GLM-5, ~4.7 MB) and the score rows. Taken out of the cell
    /// while in use, so a nested call on the same thread (rayon work stealing) gets a fresh
    /// buffer instead of a borrow conflict.
    static KEYS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static SCORES: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    static TOPK: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
    /// Eight decoded key rows (indexer keys in an f16/bf16/fp8 pool).
    static ROW: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// A token's indexer query quantized for q8 keys.
    static QUERY: Cell<IndexerQuery> = const { Cell::new(IndexerQuery::new()) };
}

/// Sizes this thread's attention scratch for steps up to `s`.
pub(crate) fn reserve_scratch(s: &crate::params::StepSizes) {
    let grow = |slot: &'static std::thread::LocalKey<Cell<Vec<f32>>>, len: usize| {
        let mut v = slot.take();
        if v.len() < len {
            v.resize(len, 0.0);
        }
        slot.set(v);
    };
    grow(&KEYS, s.max_gathered_keys * s.max_key_row);
    grow(&ROW, 8 * s.max_key_row);
    grow(&SCORES, s.max_heads * s.kv_capacity);
    let mut t = TOPK.take();
    t.reserve(s.kv_capacity);
    TOPK.set(t);
}

/// Runs `f` with this thread's scratch vector from `slot`, grown to at least `len` floats.
fn with_scratch<R>(
    slot: &'static std::thread::LocalKey<Cell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut Vec<f32>) -> R,
) -> R {
    let mut v = slot.take();
    if v.len() < len {
        v.resize(len, 0.0);
    }
    let r = f(&mut v);
    slot.set(v);
    r
}

/// The CPU's view of [`crate::backend::Pages`].
#[derive(Clone, Copy)]
pub(crate) struct PageView<'a> {
    pub tables: &'a [u32],
    pub token_seq: &'a [u32],
    pub max_blocks: usize,
    pub block_size: usize,
}

impl<'a> PageView<'a> {
    /// The block table of token `s`'s sequence.
    fn table(&self, op: &'static str, s: usize) -> Result<&'a [u32]> {
        let seq = *self.token_seq.get(s).ok_or(CoreError::Index {
            op,
            index: s,
            limit: self.token_seq.len(),
        })? as usize;
        let lo = seq * self.max_blocks;
        self.tables
            .get(lo..lo + self.max_blocks)
            .ok_or(CoreError::Index {
                op,
                index: seq,
                limit: self.tables.len() / self.max_blocks.max(1),
            })
    }
}

/// The pool row holding logical key `t` of the sequence whose block table is `table`.
fn pool_row(op: &'static str, table: &[u32], bs: usize, t: usize) -> Result<usize> {
    let b = *table.get(t / bs).ok_or(CoreError::Index {
        op,
        index: t,
        limit: table.len() * bs,
    })? as usize;
    Ok(b.saturating_mul(bs) + t % bs)
}

/// Logical keys `0..nk` of a sequence as f32 rows: a slice of the pool when it is stored as
/// f32 and its blocks are consecutive (a fresh pool hands them out in order), else gathered
/// (and decoded) into `buf`.
fn dense_keys<'p>(
    op: &'static str,
    pool: &'p CpuCache,
    table: &[u32],
    bs: usize,
    nk: usize,
    buf: &'p mut Vec<f32>,
) -> Result<&'p [f32]> {
    let dk = pool.dim;
    let n_blocks = nk.div_ceil(bs);
    if n_blocks > table.len() {
        return Err(CoreError::Index {
            op,
            index: nk,
            limit: table.len() * bs,
        });
    }
    let blocks = &table[..n_blocks];
    let first = blocks.first().copied().unwrap_or(0) as usize;
    let consecutive = blocks
        .iter()
        .enumerate()
        .all(|(i, &b)| b as usize == first + i);
    if let (true, Some(rows)) = (consecutive, pool.as_f32()) {
        let lo = first.saturating_mul(bs).saturating_mul(dk);
        return rows
            .get(lo..lo.saturating_add(nk * dk))
            .ok_or(CoreError::Index {
                op,
                index: first * bs + nk,
                limit: pool.rows,
            });
    }
    buf.clear();
    buf.resize(nk * dk, 0.0);
    for (t, out) in buf.chunks_exact_mut(dk).enumerate() {
        let r = (blocks[t / bs] as usize).saturating_mul(bs) + t % bs;
        pool.read_row(op, r, out)?;
    }
    Ok(&buf[..])
}

/// Logical keys `0..nk` as one slice of an f32 pool, when the blocks holding them are
/// consecutive.
fn contiguous_f32<'p>(
    pool: &'p CpuCache,
    table: &[u32],
    bs: usize,
    nk: usize,
) -> Option<&'p [f32]> {
    let rows = pool.as_f32()?;
    let blocks = table.get(..nk.div_ceil(bs))?;
    let first = *blocks.first()? as usize;
    if !blocks
        .iter()
        .enumerate()
        .all(|(i, &b)| b as usize == first + i)
    {
        return None;
    }
    let lo = first.checked_mul(bs)?.checked_mul(pool.dim)?;
    rows.get(lo..lo.checked_add(nk.checked_mul(pool.dim)?)?)
}

/// How many rows ahead of its copy the sparse gather prefetches: the copy of one 2.3 KB row
/// takes about as long as a DRAM miss, so a few rows in flight hide it.
const GATHER_AHEAD: usize = 4;

/// Rows of the logical keys `sel` (those `≤ pos`) gathered (and decoded) from the pool. With
/// `par`, the copy is split over the pool: at GLM-5's 2048 selected rows it is 4.7 MB of
/// scattered reads, a third of the sparse attention's time on one thread. The buffer only
/// grows (every row is overwritten, so it is not cleared first).
#[allow(clippy::too_many_arguments)]
fn selected_keys<'p>(
    op: &'static str,
    pool: &CpuCache,
    table: &[u32],
    bs: usize,
    sel: &[u32],
    pos: usize,
    buf: &'p mut Vec<f32>,
    par: bool,
) -> Result<&'p [f32]> {
    let dk = pool.dim;
    let visible = sel.iter().filter(|&&t| t as usize <= pos).count();
    if buf.len() < visible * dk {
        buf.resize(visible * dk, 0.0);
    }
    let out = &mut buf[..visible * dk];
    let row_of = |t: u32| pool_row(op, table, bs, t as usize);
    let copy = |t: u32, out: &mut [f32]| pool.read_row(op, row_of(t)?, out);
    if par && visible == sel.len() {
        // Every selected key is visible (the indexer's choice past the selection size), so
        // output row i is key sel[i]. Rows are fetched GATHER_AHEAD keys ahead of the copy.
        out.par_chunks_mut(64 * dk)
            .zip(sel.par_chunks(64))
            .try_for_each(|(o, ks)| {
                for &t in ks.iter().take(GATHER_AHEAD) {
                    pool.prefetch_row(row_of(t)?);
                }
                ks.iter()
                    .enumerate()
                    .zip(o.chunks_exact_mut(dk))
                    .try_for_each(|((i, &t), r)| {
                        if let Some(&next) = ks.get(i + GATHER_AHEAD) {
                            pool.prefetch_row(row_of(next)?);
                        }
                        copy(t, r)
                    })
            })?;
    } else {
        sel.iter()
            .filter(|&&t| t as usize <= pos)
            .zip(out.chunks_exact_mut(dk))
            .try_for_each(|(&t, r)| copy(t, r))?;
    }
    Ok(&buf[..visible * dk])
}

/// Absorbed MLA for one query token: all heads share the key rows (MQA), so the scores of every
/// head are one GEMM `Q [H × dk] · Kᵀ` and the output one GEMM `P [H × nk] · V`.
#[allow(clippy::too_many_arguments)]
fn attend_token(
    qs: &[f32],
    cache: &CpuCache,
    table: &[u32],
    bs: usize,
    pos: usize,
    sel: Option<&[u32]>,
    p: &AttnParams,
    o: &mut [f32],
    across: bool,
) -> Result<()> {
    let (h, dk, dv) = (p.n_heads, p.dk, p.dv);
    let attend = |keys: &[f32], o: &mut [f32]| {
        let nk = keys.len() / dk;
        if nk == 0 {
            o.fill(0.0);
            return;
        }
        if inner_par(across, h * nk * dk) {
            // Heads in groups, one per thread: each group streams the keys once.
            let per = h.div_ceil(rayon::current_num_threads());
            qs.par_chunks(per * dk)
                .zip(o.par_chunks_mut(per * dv))
                .for_each(|(qg, og)| {
                    with_scratch(&SCORES, per * nk, |sc| {
                        attend_heads(qg, keys, dk, dv, p.scale, sc, og)
                    })
                });
        } else {
            with_scratch(&SCORES, h * nk, |sc| {
                attend_heads(qs, keys, dk, dv, p.scale, sc, o)
            });
        }
    };
    let nk = (pos + 1).min(p.n_kv);
    with_scratch(&KEYS, 0, |buf| {
        let keys = match sel {
            // Past the selection size the indexer's choice matters; below it, it would pick
            // every visible key, and attending to them in order keeps the result independent of
            // whatever else shares the step.
            Some(sel) if nk > p.n_selected => {
                let par = inner_par(across, h * sel.len() * dk);
                selected_keys("mla_attention", cache, table, bs, sel, pos, buf, par)?
            }
            _ => dense_keys("mla_attention", cache, table, bs, nk, buf)?,
        };
        attend(keys, o);
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mla_attention(
    q: &[f32],
    cache: &CpuCache,
    positions: &[u32],
    pages: PageView<'_>,
    selected: Option<&[u32]>,
    p: &AttnParams,
    out: &mut [f32],
) -> Result<()> {
    let (n, h, dk, dv) = (p.n_tokens, p.n_heads, p.dk, p.dv);
    if dv > dk || dk == 0 || dv == 0 || h == 0 || pages.block_size == 0 || cache.dim != dk {
        return Err(CoreError::Param {
            op: "mla_attention",
            msg: format!(
                "dv {dv}, dk {dk}, cache rows of {}, block size {}",
                cache.dim, pages.block_size
            ),
        });
    }
    need("mla_attention", "q", n * h * dk, q.len())?;
    need("mla_attention", "positions", n, positions.len())?;
    need("mla_attention", "token_seq", n, pages.token_seq.len())?;
    need("mla_attention", "out", n * h * dv, out.len())?;
    if let Some(s) = selected {
        need("mla_attention", "selected", n * p.n_selected, s.len())?;
    }
    let across = split(n);
    let body = |s: usize, o: &mut [f32]| {
        let sel = selected.map(|v| &v[s * p.n_selected..(s + 1) * p.n_selected]);
        let qs = &q[s * h * dk..(s + 1) * h * dk];
        let table = pages.table("mla_attention", s)?;
        let pos = positions[s] as usize;
        attend_token(qs, cache, table, pages.block_size, pos, sel, p, o, across)
    };
    let out = &mut out[..n * h * dv];
    if across {
        out.par_chunks_mut(h * dv)
            .enumerate()
            .try_for_each(|(s, o)| body(s, o))
    } else {
        out.chunks_mut(h * dv)
            .enumerate()
            .try_for_each(|(s, o)| body(s, o))
    }
}

pub(crate) fn indexer_scores(
    q: &[f32],
    w: &[f32],
    keys: &CpuCache,
    positions: &[u32],
    pages: PageView<'_>,
    p: &IndexerParams,
    out: &mut [f32],
) -> Result<()> {
    let (n, hi, d, nkv) = (p.n_tokens, p.n_heads, p.head_dim, p.n_kv);
    if d == 0 || hi == 0 || pages.block_size == 0 || keys.dim != d {
        return Err(CoreError::Param {
            op: "indexer_scores",
            msg: format!(
                "head_dim {d}, cache rows of {}, block size {}",
                keys.dim, pages.block_size
            ),
        });
    }
    need("indexer_scores", "q", n * hi * d, q.len())?;
    need("indexer_scores", "w", n * hi, w.len())?;
    need("indexer_scores", "positions", n, positions.len())?;
    need("indexer_scores", "token_seq", n, pages.token_seq.len())?;
    need("indexer_scores", "out", n * nkv, out.len())?;
    if nkv == 0 {
        return Ok(());
    }
    let across = split(n);
    let body = |s: usize, row: &mut [f32]| -> Result<()> {
        let nk = (positions[s] as usize + 1).min(nkv);
        // The head weights times w_scale, each product as the separate pass rounded it.
        let (mut small, mut big) = ([0f32; 64], Vec::new());
        let ws: &[f32] = {
            let raw = &w[s * hi..(s + 1) * hi];
            let dst = if hi <= 64 {
                &mut small[..hi]
            } else {
                big.resize(hi, 0.0);
                &mut big[..]
            };
            for (o, &v) in dst.iter_mut().zip(raw) {
                *o = v * p.w_scale;
            }
            dst
        };
        let qs = &q[s * hi * d..(s + 1) * hi * d];
        let table = pages.table("indexer_scores", s)?;
        let bs = pages.block_size;
        // score(t) = Σ_j w_j · ReLU(q_j · k_t), the sum over heads in order.
        let score = |k: &[f32]| -> f32 {
            let mut r = 0f32;
            if hi <= 64 {
                // All heads against the key in one blocked pass; the sum stays in head order.
                let mut dots = [0f32; 64];
                dot_f32_ordered_rows(qs, d, k, &mut dots[..hi], 1);
                for (j, &dj) in dots[..hi].iter().enumerate() {
                    r += ws[j] * dj.max(0.0);
                }
            } else {
                for (j, qj) in qs.chunks_exact(d).enumerate() {
                    r += ws[j] * dot_f32_ordered(qj, k).max(0.0);
                }
            }
            r
        };
        if let Some((codes, kscales)) = keys.as_q8() {
            return q8_scores(qs, ws, d, codes, kscales, table, bs, across, &mut row[..nk])
                .map(|()| row[nk..].fill(f32::NEG_INFINITY));
        }
        // Keys are scored in place when the sequence's rows are one f32 run (a fresh pool), else
        // found row by row and, in an f16/fp8 pool, decoded one at a time: the indexer never
        // gathers a sequence's whole key history.
        let run = contiguous_f32(keys, table, bs, nk);
        let scores = |first: usize, r: &mut [f32]| -> Result<()> {
            if let Some(all) = run {
                let k = &all[first * d..(first + r.len()) * d];
                if hi > 64 {
                    for (ri, kt) in r.iter_mut().zip(k.chunks_exact(d)) {
                        *ri = score(kt);
                    }
                    return Ok(());
                }
                // Eight keys at a time against every head in the register grid (each load
                // feeds several FMAs), then each key's ReLU-weighted sum in head order: the
                // bits of `score`.
                let mut dots = [0f32; 64 * 8];
                for (rc, kc) in r.chunks_mut(8).zip(k.chunks(8 * d)) {
                    dot_f32_ordered_grid(qs, kc, d, &mut dots, 8);
                    relu_weighted_sums8(&dots, ws, rc);
                }
                return Ok(());
            }
            let row_of = |t: usize| pool_row("indexer_scores", table, bs, t);
            // Eight keys at a time decoded into a tile, then the same grid and head sums as the
            // f32 run above (the bits of `score`); row by row for more than 64 heads.
            with_scratch(&ROW, 8 * d, |tile| {
                if hi > 64 {
                    for (i, ri) in r.iter_mut().enumerate() {
                        let row = row_of(first + i)?;
                        *ri = score(keys.row("indexer_scores", row, &mut tile[..d])?);
                    }
                    return Ok(());
                }
                let mut dots = [0f32; 64 * 8];
                for (c, rc) in r.chunks_mut(8).enumerate() {
                    for (i, kt) in tile.chunks_exact_mut(d).take(rc.len()).enumerate() {
                        keys.read_row("indexer_scores", row_of(first + 8 * c + i)?, kt)?;
                    }
                    dot_f32_ordered_grid(qs, &tile[..rc.len() * d], d, &mut dots, 8);
                    relu_weighted_sums8(&dots, ws, rc);
                }
                Ok(())
            })
        };
        if inner_par(across, hi * nk * d) {
            row[..nk]
                .par_chunks_mut(64)
                .enumerate()
                .try_for_each(|(c, r)| scores(c * 64, r))?;
        } else {
            scores(0, &mut row[..nk])?;
        }
        row[nk..].fill(f32::NEG_INFINITY);
        Ok(())
    };
    let out = &mut out[..n * nkv];
    if across {
        out.par_chunks_mut(nkv)
            .enumerate()
            .try_for_each(|(s, r)| body(s, r))
    } else {
        out.chunks_mut(nkv)
            .enumerate()
            .try_for_each(|(s, r)| body(s, r))
    }
}

/// The scores of a token's first `row.len()` logical keys over a q8 key pool: the query is
/// quantized once, then each run of keys that shares a block is scanned in place as int8
/// ([`indexer_scores_i8`]; the result does not depend on how the keys are split).
#[allow(clippy::too_many_arguments)]
fn q8_scores(
    qs: &[f32],
    ws: &[f32],
    d: usize,
    codes: &[i8],
    kscales: &[f32],
    table: &[u32],
    bs: usize,
    across: bool,
    row: &mut [f32],
) -> Result<()> {
    if d > INDEXER_MAX_DIM {
        return Err(CoreError::Param {
            op: "indexer_scores",
            msg: format!("q8 indexer keys take heads up to {INDEXER_MAX_DIM} wide, not {d}"),
        });
    }
    let mut query = QUERY.take();
    query.quantize(qs, ws, d);
    // Keys `first..first + r.len()`, one run per block they touch (a block's rows are
    // consecutive in the pool).
    let scan = |first: usize, r: &mut [f32]| -> Result<()> {
        let mut done = 0;
        while done < r.len() {
            let t = first + done;
            let len = (bs - t % bs).min(r.len() - done);
            let r0 = pool_row("indexer_scores", table, bs, t)?;
            let (k, s) = match (codes.get(r0 * d..(r0 + len) * d), kscales.get(r0..r0 + len)) {
                (Some(k), Some(s)) => (k, s),
                _ => {
                    return Err(CoreError::Index {
                        op: "indexer_scores",
                        index: r0 + len - 1,
                        limit: kscales.len(),
                    })
                }
            };
            indexer_scores_i8(&query, k, s, &mut r[done..done + len]);
            done += len;
        }
        Ok(())
    };
    let res = if inner_par(across, ws.len() * row.len() * d) {
        row.par_chunks_mut(64)
            .enumerate()
            .try_for_each(|(c, r)| scan(c * 64, r))
    } else {
        scan(0, row)
    };
    QUERY.set(query);
    res
}

pub(crate) fn top_k(x: &[f32], rows: usize, n: usize, k: usize, ids: &mut [u32]) -> Result<()> {
    if k > n || n > u32::MAX as usize {
        return Err(CoreError::Param {
            op: "top_k",
            msg: format!("k {k} > row width {n}, or the width does not fit u32 indices"),
        });
    }
    need("top_k", "x", rows * n, x.len())?;
    need("top_k", "ids", rows * k, ids.len())?;
    if k == 0 {
        return Ok(());
    }
    ids[..rows * k]
        .par_chunks_mut(k)
        .zip(x[..rows * n].par_chunks(n))
        .for_each(|(o, r)| {
            let mut scratch = TOPK.take();
            top_k_packed_into(r, &mut scratch, o);
            TOPK.set(scratch);
        });
    Ok(())
}
