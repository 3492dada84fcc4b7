//! Row-wise and element-wise reference ops of the CPU backend (all math in f32, sums in f64).

use rayon::prelude::*;

use crate::error::{need, CoreError, Result};
use crate::params::{RopeMode, RopeParams, Rows};

pub(crate) fn rms_norm(
    x: &[f32],
    w: &[f32],
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut [f32],
) -> Result<()> {
    need("rms_norm", "x", rows * dim, x.len())?;
    need("rms_norm", "weight", dim, w.len())?;
    need("rms_norm", "y", rows * dim, y.len())?;
    y[..rows * dim]
        .par_chunks_mut(dim)
        .zip(x[..rows * dim].par_chunks(dim))
        .for_each(|(yr, xr)| {
            let ms = xr.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / dim as f64;
            let inv = (1.0 / (ms + eps as f64).sqrt()) as f32;
            for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
                *o = g * (v * inv);
            }
        });
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut [f32],
) -> Result<()> {
    need("layer_norm", "x", rows * dim, x.len())?;
    need("layer_norm", "weight", dim, w.len())?;
    need("layer_norm", "bias", dim, b.len())?;
    need("layer_norm", "y", rows * dim, y.len())?;
    y[..rows * dim]
        .par_chunks_mut(dim)
        .zip(x[..rows * dim].par_chunks(dim))
        .for_each(|(yr, xr)| {
            let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / dim as f64;
            let var = xr
                .iter()
                .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                .sum::<f64>()
                / dim as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            for i in 0..dim {
                yr[i] = (((xr[i] as f64 - mean) * inv) as f32) * w[i] + b[i];
            }
        });
    Ok(())
}

thread_local! {
    static ROPE_CS: std::cell::Cell<Vec<(f32, f32)>> = const { std::cell::Cell::new(Vec::new()) };
}

pub(crate) fn reserve_scratch(s: &crate::params::StepSizes) {
    let mut v = ROPE_CS.take();
    v.reserve(s.rope_pairs);
    ROPE_CS.set(v);
}

pub(crate) fn rope(
    x: &mut [f32],
    positions: &[u32],
    inv_freq: &[f32],
    p: &RopeParams,
) -> Result<()> {
    let half = p.n_rot / 2;
    if !p.n_rot.is_multiple_of(2) || p.offset + p.n_rot > p.head_dim || p.n_heads * p.head_dim == 0
    {
        return Err(CoreError::Param {
            op: "rope",
            msg: format!(
                "n_rot {} at offset {} does not fit a head of {}",
                p.n_rot, p.offset, p.head_dim
            ),
        });
    }
    need("rope", "inv_freq", half, inv_freq.len())?;
    need("rope", "positions", p.n_tokens, positions.len())?;
    let tok = p.n_heads * p.head_dim;
    need("rope", "x", p.n_tokens * tok, x.len())?;
    x[..p.n_tokens * tok]
        .par_chunks_mut(tok)
        .zip(positions[..p.n_tokens].par_iter())
        .for_each(|(xt, &pos)| {
            // Angles in f32 as HF computes them (`inv_freq[None] * pos`), so long positions round
            // the same way as the reference. Per-thread buffer: a warm step does not allocate.
            let mut cs = ROPE_CS.take();
            cs.clear();
            cs.extend(inv_freq[..half].iter().map(|&f| {
                let a = pos as f32 * f;
                (a.cos() * p.attn_factor, a.sin() * p.attn_factor)
            }));
            for h in 0..p.n_heads {
                let v = &mut xt[h * p.head_dim + p.offset..h * p.head_dim + p.offset + p.n_rot];
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (a, b) = match p.mode {
                        RopeMode::Interleaved => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + half),
                    };
                    let (x0, x1) = (v[a], v[b]);
                    v[a] = x0 * c - x1 * s;
                    v[b] = x0 * s + x1 * c;
                }
            }
            ROPE_CS.set(cs);
        });
    Ok(())
}

pub(crate) fn softmax_row(r: &mut [f32]) {
    let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        // Nothing visible: define the row as all zeros rather than NaN.
        r.fill(0.0);
        return;
    }
    let mut s = 0f64;
    for v in r.iter_mut() {
        *v = (*v - m).exp();
        s += *v as f64;
    }
    let inv = (1.0 / s) as f32;
    for v in r.iter_mut() {
        *v *= inv;
    }
}

/// Moves `n` rows of width `dim` between `src` and `dst` by index: `dst[to(i)] = src[from(i)]`.
fn move_rows(
    op: &'static str,
    src: &[f32],
    dim: usize,
    n: usize,
    dst: &mut [f32],
    index: impl Fn(usize) -> (usize, usize),
) -> Result<()> {
    let (src_rows, dst_rows) = (src.len() / dim.max(1), dst.len() / dim.max(1));
    for i in 0..n {
        let (from, to) = index(i);
        if from >= src_rows || to >= dst_rows {
            return Err(CoreError::Index {
                op,
                index: if from >= src_rows { from } else { to },
                limit: if from >= src_rows { src_rows } else { dst_rows },
            });
        }
        dst[to * dim..(to + 1) * dim].copy_from_slice(&src[from * dim..(from + 1) * dim]);
    }
    Ok(())
}

pub(crate) fn set_rows(
    src: &[f32],
    dim: usize,
    slots: &[u32],
    n: usize,
    dst: &mut [f32],
) -> Result<()> {
    need("set_rows", "slots", n, slots.len())?;
    need("set_rows", "src", n * dim, src.len())?;
    move_rows("set_rows", src, dim, n, dst, |i| (i, slots[i] as usize))
}

pub(crate) fn gather_rows(
    src: &[f32],
    dim: usize,
    rows: &[u32],
    n: usize,
    dst: &mut [f32],
) -> Result<()> {
    need("gather_rows", "rows", n, rows.len())?;
    need("gather_rows", "dst", n * dim, dst.len())?;
    move_rows("gather_rows", src, dim, n, dst, |i| (rows[i] as usize, i))
}

/// Elements from which an element-wise op runs over the pool (a prompt's sizes; a decode
/// step's stay on the calling thread), and the elements of one task.
pub(crate) const PAR_MIN: usize = 1 << 16;
const CHUNK: usize = 1 << 14;

/// `a[i] += b[i]`.
pub(crate) fn add(a: &mut [f32], b: &[f32]) {
    let run = |(x, y): (&mut [f32], &[f32])| x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
    if a.len() >= PAR_MIN {
        a.par_chunks_mut(CHUNK)
            .zip(b.par_chunks(CHUNK))
            .for_each(run);
    } else {
        run((a, b));
    }
}

pub(crate) fn silu_mul(g: &[f32], u: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
    need("silu_mul", "gate", n, g.len())?;
    need("silu_mul", "up", n, u.len())?;
    need("silu_mul", "out", n, out.len())?;
    let run = |(o, (g, u)): (&mut [f32], (&[f32], &[f32]))| {
        for ((o, &a), &b) in o.iter_mut().zip(g).zip(u) {
            *o = a / (1.0 + (-a).exp()) * b;
        }
    };
    // A prompt's experts give millions of elements (512 tokens × 8 × 2048), an `expf` each:
    // on one thread that was ~1% of a 512-token prefill with the other core idle. Element by
    // element, so the split cannot change a bit.
    let (o, g, u) = (&mut out[..n], &g[..n], &u[..n]);
    if n >= PAR_MIN {
        o.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
            .for_each(run);
    } else {
        run((o, (g, u)));
    }
    Ok(())
}

pub(crate) fn copy2d(
    src: &[f32],
    from: Rows,
    dst: &mut [f32],
    to: Rows,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    from.check("copy2d", "src", rows, cols, src.len())?;
    to.check("copy2d", "dst", rows, cols, dst.len())?;
    let row = |(r, d): (usize, &mut [f32])| {
        let s = from.off + r * from.stride;
        d[..cols].copy_from_slice(&src[s..s + cols]);
    };
    // Rows of the destination as disjoint slices (stride ≥ cols), over the pool for a
    // prompt's sizes (the query split of a 512-token step moves 32 MB).
    if to.stride >= cols && rows * cols >= PAR_MIN {
        dst[to.off..]
            .par_chunks_mut(to.stride)
            .take(rows)
            .enumerate()
            .for_each(row);
    } else {
        for r in 0..rows {
            let d = to.off + r * to.stride;
            row((r, &mut dst[d..d + cols]));
        }
    }
    Ok(())
}
