//! Reference MoE router (DeepSeek-V3 `noaux_tc` / GLM-5), one token at a time, in f32.

use crate::params::{Gating, RouterParams};

/// Indices of the `k` largest values, descending; ties go to the lower index.
pub(crate) fn top_k_indices(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    let cmp = |a: &usize, b: &usize| v[*b].total_cmp(&v[*a]).then(a.cmp(b));
    if k < idx.len() && k > 0 {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx.truncate(k);
    idx
}

/// Routes one token: returns `(expert ids, weights)` with `p.n_used` entries.
///
/// Scores come from the gating function; the correction `bias` only steers selection (the
/// weights use the unbiased scores). With groups, a group's score is the sum of its two best
/// biased scores (HF `DeepseekV3TopkRouter`), the best `n_group_used` groups survive and the
/// experts of the others are masked with −∞ before the final top-k.
pub fn route_token(logits: &[f32], bias: Option<&[f32]>, p: &RouterParams) -> (Vec<u32>, Vec<f32>) {
    let n = p.n_expert;
    let mut scores: Vec<f32> = logits[..n].to_vec();
    match p.gating {
        Gating::Sigmoid => scores
            .iter_mut()
            .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Gating::Softmax => super::elementwise::softmax_row(&mut scores),
    }
    let mut sel: Vec<f32> = match bias {
        Some(b) => scores.iter().zip(b).map(|(s, b)| s + b).collect(),
        None => scores.clone(),
    };
    if p.n_group > 1 && p.n_group_used < p.n_group {
        let per = n / p.n_group;
        let group_score: Vec<f32> = (0..p.n_group)
            .map(|g| {
                let part = &sel[g * per..(g + 1) * per];
                top_k_indices(part, per.min(2))
                    .iter()
                    .map(|&i| part[i])
                    .sum()
            })
            .collect();
        let keep = top_k_indices(&group_score, p.n_group_used);
        for g in 0..p.n_group {
            if !keep.contains(&g) {
                sel[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
            }
        }
    }
    let idx = top_k_indices(&sel, p.n_used);
    let mut w: Vec<f32> = idx.iter().map(|&i| scores[i]).collect();
    if p.normalize {
        let s: f32 = w.iter().sum::<f32>() + 1e-20;
        w.iter_mut().for_each(|v| *v /= s);
    }
    w.iter_mut().for_each(|v| *v *= p.scale);
    (idx.into_iter().map(|i| i as u32).collect(), w)
}
