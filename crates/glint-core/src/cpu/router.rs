//! Reference MoE router (DeepSeek-V3 `noaux_tc` / GLM-5), one token at a time, in f32.

use crate::params::{Gating, RouterParams};

/// Indices of the `k` largest values of `v`, descending, into `idx[..k]`; ties go to the lower
/// index. `idx` is the caller's scratch, so a warm caller does not allocate.
pub(crate) fn top_k_into(v: &[f32], k: usize, idx: &mut Vec<usize>) {
    idx.clear();
    idx.extend(0..v.len());
    let cmp = |a: &usize, b: &usize| v[*b].total_cmp(&v[*a]).then(a.cmp(b));
    if k < idx.len() && k > 0 {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    // The comparator is a total order (index breaks ties), so an unstable sort is
    // deterministic, and unlike `sort_by` it needs no buffer.
    idx.sort_unstable_by(cmp);
    idx.truncate(k);
}

/// Host buffers of [`route_token_into`], reused across tokens.
#[derive(Debug, Default)]
pub struct RouteScratch {
    scores: Vec<f32>,
    sel: Vec<f32>,
    group_score: Vec<f32>,
    idx: Vec<usize>,
    keep: Vec<usize>,
}

impl RouteScratch {
    pub(crate) fn reserve(&mut self, n_expert: usize) {
        self.scores.reserve(n_expert);
        self.sel.reserve(n_expert);
        self.group_score.reserve(n_expert);
        self.idx.reserve(n_expert);
        self.keep.reserve(n_expert);
    }
}

/// Routes one token: returns `(expert ids, weights)` with `p.n_used` entries (see
/// [`route_token_into`]).
pub fn route_token(logits: &[f32], bias: Option<&[f32]>, p: &RouterParams) -> (Vec<u32>, Vec<f32>) {
    let mut ids = vec![0u32; p.n_used];
    let mut w = vec![0f32; p.n_used];
    route_token_into(
        logits,
        bias,
        p,
        &mut RouteScratch::default(),
        &mut ids,
        &mut w,
    );
    (ids, w)
}

/// Routes one token into `ids[..n_used]` and `weights[..n_used]`.
///
/// Scores come from the gating function; the correction `bias` only steers selection (the
/// weights use the unbiased scores). With groups, a group's score is the sum of its two best
/// biased scores (HF `DeepseekV3TopkRouter`), the best `n_group_used` groups survive and the
/// experts of the others are masked with −∞ before the final top-k.
pub fn route_token_into(
    logits: &[f32],
    bias: Option<&[f32]>,
    p: &RouterParams,
    s: &mut RouteScratch,
    ids: &mut [u32],
    weights: &mut [f32],
) {
    let n = p.n_expert;
    let scores = &mut s.scores;
    scores.clear();
    scores.extend_from_slice(&logits[..n]);
    match p.gating {
        Gating::Sigmoid => scores
            .iter_mut()
            .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Gating::Softmax => super::elementwise::softmax_row(scores),
    }
    let sel = &mut s.sel;
    sel.clear();
    match bias {
        Some(b) => sel.extend(scores.iter().zip(b).map(|(s, b)| s + b)),
        None => sel.extend_from_slice(scores),
    }
    if p.n_group > 1 && p.n_group_used < p.n_group {
        let per = n / p.n_group;
        s.group_score.clear();
        for g in 0..p.n_group {
            let part = &sel[g * per..(g + 1) * per];
            top_k_into(part, per.min(2), &mut s.idx);
            s.group_score.push(s.idx.iter().map(|&i| part[i]).sum());
        }
        top_k_into(&s.group_score, p.n_group_used, &mut s.keep);
        for g in 0..p.n_group {
            if !s.keep.contains(&g) {
                sel[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
            }
        }
    }
    top_k_into(sel, p.n_used, &mut s.idx);
    let w = &mut weights[..p.n_used];
    for (wi, &i) in w.iter_mut().zip(&s.idx) {
        *wi = scores[i];
    }
    if p.normalize {
        let sum: f32 = w.iter().sum::<f32>() + 1e-20;
        w.iter_mut().for_each(|v| *v /= sum);
    }
    w.iter_mut().for_each(|v| *v *= p.scale);
    for (o, &i) in ids[..p.n_used].iter_mut().zip(&s.idx) {
        *o = i as u32;
    }
}
