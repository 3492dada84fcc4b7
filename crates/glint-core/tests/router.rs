//! The MoE router op on a hand-checked case with group-limited selection and a correction bias.

use glint_core::{Backend, CpuBackend, Gating, RouterParams};

fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// 8 experts in 4 groups of 2, 2 groups kept, 3 experts used, sigmoid, renormalised, scale 2.5.
///
/// sigmoid scores s = [0.9, 0.1, 0.6, 0.5, 0.85, 0.25, 0.4, 0.8]
/// bias         b = [0,   0,   0.1, 0.1, 0,    0,    0,   -0.6]
/// biased     s+b = [0.9, 0.1, 0.7, 0.6, 0.85, 0.25, 0.4, 0.2]
/// group score = sum of the top-2 biased scores per group:
///   g0 = 0.9+0.1 = 1.0, g1 = 0.7+0.6 = 1.3, g2 = 0.85+0.25 = 1.1, g3 = 0.4+0.2 = 0.6
///   -> keep g1 and g2 (a max-per-group rule would keep g0 and g2 instead).
/// candidates e2 0.7, e3 0.6, e4 0.85, e5 0.25 -> top-3 by biased score: e4, e2, e3
/// (without groups it would be e0, e4, e2).
/// weights use the UNBIASED scores: 0.85, 0.6, 0.5; sum 1.95;
///   normalised 0.4358974, 0.3076923, 0.2564103; x2.5 = 1.0897436, 0.7692308, 0.6410256.
#[test]
fn group_limited_sigmoid_with_bias() {
    let be = CpuBackend::new();
    let s = [0.9, 0.1, 0.6, 0.5, 0.85, 0.25, 0.4, 0.8];
    let logits: Vec<f32> = s.iter().map(|&p| logit(p)).collect();
    let bias = [0.0, 0.0, 0.1, 0.1, 0.0, 0.0, 0.0, -0.6];
    let p = RouterParams {
        n_expert: 8,
        n_used: 3,
        gating: Gating::Sigmoid,
        n_group: 4,
        n_group_used: 2,
        normalize: true,
        scale: 2.5,
    };
    let mut ids = vec![0u32; 3];
    let mut w = vec![0f32; 3];
    be.moe_route(&logits, Some(&bias.to_vec()), 1, &p, &mut ids, &mut w)
        .unwrap();
    assert_eq!(ids, vec![4, 2, 3]);
    for (a, b) in w.iter().zip([1.0897436, 0.7692308, 0.6410256]) {
        assert!((a - b).abs() < 1e-5, "{w:?}");
    }
}

/// Softmax gating, no groups, no renormalisation: logits [ln 1, ln 2, ln 3, ln 4] give
/// probabilities [0.1, 0.2, 0.3, 0.4]; top-2 = experts 3, 2 with weights 0.4, 0.3 (unscaled).
#[test]
fn softmax_gating_without_norm() {
    let be = CpuBackend::new();
    let logits: Vec<f32> = [1f32, 2.0, 3.0, 4.0].iter().map(|v| v.ln()).collect();
    let p = RouterParams {
        n_expert: 4,
        n_used: 2,
        gating: Gating::Softmax,
        n_group: 1,
        n_group_used: 1,
        normalize: false,
        scale: 1.0,
    };
    let mut ids = vec![0u32; 2];
    let mut w = vec![0f32; 2];
    be.moe_route(&logits, None, 1, &p, &mut ids, &mut w)
        .unwrap();
    assert_eq!(ids, vec![3, 2]);
    assert!(
        (w[0] - 0.4).abs() < 1e-6 && (w[1] - 0.3).abs() < 1e-6,
        "{w:?}"
    );
}
