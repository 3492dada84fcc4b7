//! Reference implementations of the fused attention-side ops: absorbed-MLA attention over the
//! latent cache, the DSA indexer score, and row-wise top-k.

use rayon::prelude::*;

use super::elementwise::softmax_row;
use super::linear::dot;
use super::router::top_k_indices;
use crate::error::{need, CoreError, Result};
use crate::params::{AttnParams, IndexerParams};

pub(crate) fn mla_attention(
    q: &[f32],
    cache: &[f32],
    positions: &[u32],
    selected: Option<&[u32]>,
    p: &AttnParams,
    out: &mut [f32],
) -> Result<()> {
    let (n, h, dk, dv) = (p.n_tokens, p.n_heads, p.dk, p.dv);
    if dv > dk {
        return Err(CoreError::Param {
            op: "mla_attention",
            msg: format!("dv {dv} > dk {dk}"),
        });
    }
    need("mla_attention", "q", n * h * dk, q.len())?;
    need("mla_attention", "cache", p.n_kv * dk, cache.len())?;
    need("mla_attention", "positions", n, positions.len())?;
    need("mla_attention", "out", n * h * dv, out.len())?;
    if let Some(s) = selected {
        need("mla_attention", "selected", n * p.n_selected, s.len())?;
    }
    out[..n * h * dv]
        .par_chunks_mut(dv)
        .enumerate()
        .for_each(|(sh, o)| {
            let s = sh / h;
            let pos = positions[s] as usize;
            let keys: Vec<usize> = match selected {
                Some(sel) => sel[s * p.n_selected..(s + 1) * p.n_selected]
                    .iter()
                    .map(|&t| t as usize)
                    .filter(|&t| t <= pos && t < p.n_kv)
                    .collect(),
                None => (0..=pos.min(p.n_kv.saturating_sub(1)))
                    .take(p.n_kv)
                    .collect(),
            };
            let qh = &q[sh * dk..(sh + 1) * dk];
            let mut sc: Vec<f32> = keys
                .iter()
                .map(|&t| p.scale * dot(qh, &cache[t * dk..(t + 1) * dk]))
                .collect();
            softmax_row(&mut sc);
            o.fill(0.0);
            for (&t, &pw) in keys.iter().zip(&sc) {
                let v = &cache[t * dk..t * dk + dv];
                for (oi, &vi) in o.iter_mut().zip(v) {
                    *oi += pw * vi;
                }
            }
        });
    Ok(())
}

pub(crate) fn indexer_scores(
    q: &[f32],
    w: &[f32],
    keys: &[f32],
    positions: &[u32],
    p: &IndexerParams,
    out: &mut [f32],
) -> Result<()> {
    let (n, hi, d, nkv) = (p.n_tokens, p.n_heads, p.head_dim, p.n_kv);
    need("indexer_scores", "q", n * hi * d, q.len())?;
    need("indexer_scores", "w", n * hi, w.len())?;
    need("indexer_scores", "keys", nkv * d, keys.len())?;
    need("indexer_scores", "positions", n, positions.len())?;
    need("indexer_scores", "out", n * nkv, out.len())?;
    if nkv == 0 {
        return Ok(());
    }
    out[..n * nkv]
        .par_chunks_mut(nkv)
        .enumerate()
        .for_each(|(s, row)| {
            let pos = positions[s] as usize;
            let qs = &q[s * hi * d..(s + 1) * hi * d];
            let ws = &w[s * hi..(s + 1) * hi];
            for (t, r) in row.iter_mut().enumerate() {
                if t > pos {
                    *r = f32::NEG_INFINITY;
                    continue;
                }
                let k = &keys[t * d..(t + 1) * d];
                let mut acc = 0f32;
                for j in 0..hi {
                    acc += ws[j] * dot(&qs[j * d..(j + 1) * d], k).max(0.0);
                }
                *r = acc;
            }
        });
    Ok(())
}

pub(crate) fn top_k(x: &[f32], rows: usize, n: usize, k: usize, ids: &mut [u32]) -> Result<()> {
    if k > n {
        return Err(CoreError::Param {
            op: "top_k",
            msg: format!("k {k} > row width {n}"),
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
            for (oi, i) in o.iter_mut().zip(top_k_indices(r, k)) {
                *oi = i as u32;
            }
        });
    Ok(())
}
