//! Expert-indexed matmul (ggml's `mul_mat_id`) for mixture-of-experts layers.
//!
//! A batch of tokens each picks `n_used` experts out of a stacked `{cols, rows, n_expert}`
//! weight. Work is grouped by expert so each selected expert's rows are streamed from memory once
//! per call and reused for every token that chose it; unselected experts are never touched and
//! nothing is dequantized.

use rayon::prelude::*;

use crate::dot;
use crate::error::QuantError;
use crate::matmul::{
    check_len, chunk_rows, dot_tile, quantize_rows, rows_in_parts, MatmulScratch, OutPtr, QWeight,
    GEMM_MIN_SLOTS,
};

/// For each token t and slot k, `y[(t * n_used + k) * rows ..][..rows] = W[ids[t * n_used + k]]
/// x_row`, where `x_row` is token t's row of `x` or, with `x_per_slot`, row `t * n_used + k` (as
/// for the down projection, whose input differs per expert). `w.rows` is the rows of one
/// expert and `w.data` holds `n_expert` experts back to back (see [`QWeight::stacked`]).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_id(
    w: &QWeight,
    n_expert: usize,
    ids: &[u32],
    n_used: usize,
    x: &[f32],
    x_per_slot: bool,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<(), QuantError> {
    let ty = w.ty;
    if n_used == 0 || !ids.len().is_multiple_of(n_used) {
        return Err(QuantError::BadLength {
            ty,
            what: "expert ids (a multiple of n_used)",
            expected: ids.len().div_ceil(n_used.max(1)) * n_used.max(1),
            found: ids.len(),
        });
    }
    let n_slots = ids.len();
    let n_tokens = n_slots / n_used;
    let expert_bytes = w.rows * w.row_bytes();
    check_len(
        ty,
        "stacked expert weight bytes",
        n_expert * expert_bytes,
        w.data.len(),
    )?;
    let x_rows = if x_per_slot { n_slots } else { n_tokens };
    check_len(ty, "activations x", x_rows * w.cols, x.len())?;
    check_len(
        ty,
        "output y (tokens x n_used x rows)",
        n_slots * w.rows,
        y.len(),
    )?;
    if let Some(&bad) = ids.iter().find(|&&e| e as usize >= n_expert) {
        return Err(QuantError::OutOfRange {
            what: "expert id",
            index: bad as usize,
            limit: n_expert,
        });
    }
    let partner = dot::partner_type(ty).ok_or(QuantError::Unsupported {
        ty,
        op: "mul_mat_id",
    })?;
    let k = dot::kernel(ty).ok_or(QuantError::Unsupported {
        ty,
        op: "mul_mat_id",
    })?;
    if n_slots == 0 || w.rows == 0 {
        return Ok(());
    }

    let MatmulScratch {
        act,
        expert_start: start,
        slots,
        tasks,
        ..
    } = scratch;
    let (act, stride) = quantize_rows(act, partner, x, w.cols)?;

    // Counting sort of slots by expert: slots[start[e]..start[e + 1]] chose expert e.
    start.clear();
    start.resize(n_expert + 1, 0);
    for &e in ids {
        start[e as usize + 1] += 1;
    }
    for e in 0..n_expert {
        start[e + 1] += start[e];
    }
    slots.clear();
    slots.resize(n_slots, 0);
    // `tasks` doubles as the per-expert fill cursor before it holds the tasks.
    tasks.clear();
    tasks.extend((0..n_expert).map(|e| (start[e], 0, 0)));
    for (s, &e) in ids.iter().enumerate() {
        let c = &mut tasks[e as usize].0;
        slots[*c as usize] = s as u32;
        *c += 1;
    }
    // Tasks (expert, first row, end row). Under four slots an expert on average (decode):
    // about four a thread over all selected experts, rows that stream from memory. More (a
    // prompt): each expert's rows cut in proportion to its slots, about sixteen tasks a thread
    // in all, so an expert that many tokens chose is not left running alone at the end.
    let threads = rayon::current_num_threads();
    let active = (0..n_expert).filter(|&e| start[e + 1] > start[e]).count();
    let chunk = chunk_rows(w.rows * active, threads).min(w.rows);
    let by_slots = n_slots >= GEMM_MIN_SLOTS * active;
    let total = (threads * 16) as u64;
    tasks.clear();
    for e in 0..n_expert {
        let mine = (start[e + 1] - start[e]) as u64;
        if mine == 0 {
            continue;
        }
        let chunk = if by_slots {
            rows_in_parts(w.rows, (mine * total).div_ceil(n_slots as u64) as usize)
        } else {
            chunk
        };
        for r0 in (0..w.rows).step_by(chunk) {
            tasks.push((e as u32, r0 as u32, (r0 + chunk).min(w.rows) as u32));
        }
    }

    let (start, slots) = (&*start, &*slots);
    let out = OutPtr(y.as_mut_ptr());
    let rows = w.rows;
    let run = |&(e, r0, r1): &(u32, u32, u32)| {
        let e = e as usize;
        let mine = &slots[start[e] as usize..start[e + 1] as usize];
        let slot = |i: usize| {
            let s = mine[i] as usize;
            (if x_per_slot { s } else { s / n_used }, s)
        };
        // SAFETY: each slot belongs to exactly one expert and each (expert, row range) to one
        // task, so task writes y[s * rows + r] are disjoint; y has n_slots * rows elements.
        unsafe {
            dot_tile(
                k,
                w,
                e * expert_bytes,
                (r0 as usize, r1 as usize),
                (act, stride),
                mine.len(),
                &slot,
                out,
                rows,
            )
        };
    };
    if threads == 1 {
        tasks.iter().for_each(run);
    } else {
        tasks.par_iter().for_each(run);
    }
    Ok(())
}
