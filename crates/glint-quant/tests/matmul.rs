//! matmul and mul_mat_id: against per-row `vec_dot` (same kernel and activation, so exactly
//! equal), against an f64 reference from the dequantizers, and on every kernel family.

mod dotutil;

use dotutil::{abs_dot, dot64, random_activations, random_weights, Rng};
use glint_gguf::GgmlType;
use glint_quant::dot;
use glint_quant::{dequantize_to_vec, matmul, mul_mat_id, MatmulScratch, QWeight, QuantError};

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

const TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ4_XS,
    GgmlType::F16,
    GgmlType::BF16,
];

/// Every output equals the per-row dot product of the quantized activation row.
#[test]
fn matmul_equals_per_row_vec_dot() {
    let (rows, cols) = (67, 512);
    let mut scratch = MatmulScratch::new();
    for &ty in TYPES {
        let mut rng = Rng::new(ty as u64 + 3);
        let w = random_weights(ty, rows * cols, &mut rng);
        let qw = QWeight::new(ty, cols, rows, &w).unwrap();
        for batch in [1usize, 3, 37] {
            let x = random_activations(batch * cols, &mut rng);
            let partner = dot::partner_type(ty).unwrap();
            let ab = dot::activation_bytes(partner, cols).unwrap();
            for threads in [1, 2, 3] {
                let mut y = vec![f32::NAN; batch * rows];
                pool(threads)
                    .install(|| matmul(&qw, &x, batch, &mut y, &mut scratch))
                    .unwrap();
                for b in 0..batch {
                    let mut act = vec![0u8; ab];
                    dot::quantize_activation(partner, &x[b * cols..(b + 1) * cols], &mut act)
                        .unwrap();
                    for r in 0..rows {
                        let rb = qw.row_bytes();
                        let want = dot::vec_dot(ty, cols, &w[r * rb..(r + 1) * rb], &act).unwrap();
                        assert_eq!(
                            y[b * rows + r].to_bits(),
                            want.to_bits(),
                            "{ty} batch {batch} threads {threads} b {b} r {r}"
                        );
                    }
                }
            }
        }
    }
}

/// Against the f64 product of dequantized weights and dequantized activations.
#[test]
fn matmul_matches_f64_reference() {
    let (rows, cols, batch) = (40, 768, 5);
    for &ty in TYPES {
        let mut rng = Rng::new(ty as u64 + 11);
        let w = random_weights(ty, rows * cols, &mut rng);
        let x = random_activations(batch * cols, &mut rng);
        let mut y = vec![0f32; batch * rows];
        matmul(
            &QWeight::new(ty, cols, rows, &w).unwrap(),
            &x,
            batch,
            &mut y,
            &mut MatmulScratch::new(),
        )
        .unwrap();
        let wf = dequantize_to_vec(ty, &w).unwrap();
        let partner = dot::partner_type(ty).unwrap();
        for b in 0..batch {
            let xb = &x[b * cols..(b + 1) * cols];
            let mut act = vec![0u8; dot::activation_bytes(partner, cols).unwrap()];
            dot::quantize_activation(partner, xb, &mut act).unwrap();
            let af = dequantize_to_vec(partner, &act).unwrap();
            for r in 0..rows {
                let wr = &wf[r * cols..(r + 1) * cols];
                let rel = if matches!(ty, GgmlType::Q4_1) {
                    2e-3
                } else {
                    1e-5
                };
                let tol = rel * abs_dot(wr, &af) + 1e-6;
                let want = dot64(wr, &af);
                assert!(
                    (y[b * rows + r] as f64 - want).abs() <= tol,
                    "{ty} b {b} r {r}: {} vs {want}",
                    y[b * rows + r]
                );
            }
        }
    }
}

/// mul_mat_id: each (token, slot) output equals the matmul of the chosen expert alone (bit for
/// bit: same kernel, same activation), and is close to the f64 dequantized reference.
#[test]
fn mul_mat_id_matches_per_expert_matmul() {
    let (rows, cols, n_expert, n_used) = (24, 512, 6, 3);
    for &ty in &[
        GgmlType::Q4_K,
        GgmlType::Q8_0,
        GgmlType::IQ2_XXS,
        GgmlType::MXFP4,
    ] {
        let mut rng = Rng::new(ty as u64 + 99);
        let w = random_weights(ty, n_expert * rows * cols, &mut rng);
        let sw = QWeight::stacked(ty, cols, rows, n_expert, &w).unwrap();
        let eb = rows * sw.row_bytes();
        let wf = dequantize_to_vec(ty, &w).unwrap();
        for (n_tokens, per_slot) in [(1usize, false), (4, false), (5, true)] {
            // Includes a repeated expert within one token and unused experts.
            let ids: Vec<u32> = (0..n_tokens * n_used)
                .map(|i| ((i * 5 + i / 3) % (n_expert - 1)) as u32)
                .collect();
            let x_rows = if per_slot {
                n_tokens * n_used
            } else {
                n_tokens
            };
            let x = random_activations(x_rows * cols, &mut rng);
            for threads in [1, 2] {
                let mut y = vec![f32::NAN; n_tokens * n_used * rows];
                let mut scratch = MatmulScratch::new();
                pool(threads)
                    .install(|| {
                        mul_mat_id(
                            &sw,
                            n_expert,
                            &ids,
                            n_used,
                            &x,
                            per_slot,
                            &mut y,
                            &mut scratch,
                        )
                    })
                    .unwrap();
                for (s, &e) in ids.iter().enumerate() {
                    let xr = if per_slot { s } else { s / n_used };
                    let xs = &x[xr * cols..(xr + 1) * cols];
                    let e = e as usize;
                    let ew = QWeight::new(ty, cols, rows, &w[e * eb..(e + 1) * eb]).unwrap();
                    let mut want = vec![0f32; rows];
                    matmul(&ew, xs, 1, &mut want, &mut MatmulScratch::new()).unwrap();
                    let got = &y[s * rows..(s + 1) * rows];
                    assert_eq!(
                        got,
                        &want[..],
                        "{ty} tokens {n_tokens} slot {s} expert {e} threads {threads}"
                    );
                    let partner = dot::partner_type(ty).unwrap();
                    let mut act = vec![0u8; dot::activation_bytes(partner, cols).unwrap()];
                    dot::quantize_activation(partner, xs, &mut act).unwrap();
                    let af = dequantize_to_vec(partner, &act).unwrap();
                    for r in 0..rows {
                        let wr = &wf[(e * rows + r) * cols..(e * rows + r + 1) * cols];
                        let tol = 1e-5 * abs_dot(wr, &af) + 1e-6;
                        assert!(
                            (got[r] as f64 - dot64(wr, &af)).abs() <= tol,
                            "{ty} slot {s} r {r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn shape_errors_are_reported() {
    let ty = GgmlType::Q4_K;
    let w = vec![0u8; 2 * 144];
    assert!(matches!(
        QWeight::new(ty, 256, 3, &w),
        Err(QuantError::BadLength { .. })
    ));
    assert!(matches!(
        QWeight::new(ty, 100, 2, &w),
        Err(QuantError::NotBlockAligned { .. })
    ));
    let qw = QWeight::new(ty, 256, 2, &w).unwrap();
    let mut s = MatmulScratch::new();
    let mut y = vec![0f32; 2];
    assert!(matmul(&qw, &[0.0; 255], 1, &mut y, &mut s).is_err());
    assert!(matmul(&qw, &[0.0; 256], 1, &mut y[..1], &mut s).is_err());
    let q8k = QWeight::new(GgmlType::Q8_K, 256, 1, &[0u8; 292]).unwrap();
    assert!(matches!(
        matmul(&q8k, &[0.0; 256], 1, &mut y[..1], &mut s),
        Err(QuantError::Unsupported { .. })
    ));
    // Stacked: 2 experts of 1 row; an id of 2 is out of range.
    let sw = QWeight::stacked(ty, 256, 1, 2, &w).unwrap();
    let r = mul_mat_id(&sw, 2, &[0, 2], 2, &[0.0; 256], false, &mut y, &mut s);
    assert!(
        matches!(
            r,
            Err(QuantError::OutOfRange {
                index: 2,
                limit: 2,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(mul_mat_id(&sw, 2, &[0, 1, 1], 2, &[0.0; 256], false, &mut y, &mut s).is_err());
    assert!(mul_mat_id(&sw, 3, &[0, 1], 2, &[0.0; 256], false, &mut y, &mut s).is_err());
    assert!(mul_mat_id(&sw, 2, &[0, 1], 2, &[0.0; 256], false, &mut y, &mut s).is_ok());
}
