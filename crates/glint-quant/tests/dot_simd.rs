//! Every SIMD kernel against the scalar reference on random blocks, for each instruction set
//! this CPU supports. Integer sums are exact in both; only the order of the per-block float
//! accumulation differs, so the bound is a few f32 ulps of the sum of |block terms|, taken as
//! `(blocks + 16) * eps * sum |w_i a_i|` over the dequantized values.

mod dotutil;

use dotutil::{abs_dot, random_activations, random_weights, random_weights_with, Rng, Scales};
use glint_gguf::GgmlType;
use glint_quant::dequantize_to_vec;
use glint_quant::dot::{self, Isa};
use proptest::prelude::*;

const SIMD_TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_S,
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
];

fn compare(ty: GgmlType, blocks_256: usize, seed: u64) -> Result<(), TestCaseError> {
    compare_with(ty, 256 * blocks_256, seed, Scales::Normal, None)
}

/// SIMD vs scalar on `n` elements with weight scales drawn as `scales`; `zero_block` zeroes
/// that activation block (of the partner's block size) so its quantized scale is 0.
fn compare_with(
    ty: GgmlType,
    n: usize,
    seed: u64,
    scales: Scales,
    zero_block: Option<usize>,
) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let w = random_weights_with(ty, n, &mut rng, scales);
    let mut x = random_activations(n, &mut rng);
    if let Some(b) = zero_block {
        let bs = dot::partner_type(ty).unwrap().block_size();
        let b = b % (n / bs);
        x[b * bs..(b + 1) * bs].fill(0.0);
    }
    let partner = dot::partner_type(ty).unwrap();
    let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
    dot::quantize_activation(partner, &x, &mut act).unwrap();
    let scalar = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
    let mag = abs_dot(
        &dequantize_to_vec(ty, &w).unwrap(),
        &dequantize_to_vec(partner, &act).unwrap(),
    );
    let blocks = n / ty.block_size();
    let tol = (blocks + 16) as f64 * f32::EPSILON as f64 * mag;
    for isa in Isa::all_available() {
        let got = dot::vec_dot_with(isa, ty, n, &w, &act).unwrap();
        prop_assert!(
            ((got - scalar) as f64).abs() <= tol,
            "{} {:?} n {} {:?}: {} vs scalar {} (tol {})",
            ty,
            isa,
            n,
            scales,
            got,
            scalar,
            tol
        );
        // (MXFP4's E8M0 scale has no zero: its "zero" mode leaves the scale as it is.)
        if scales == Scales::Zero
            && !matches!(
                ty,
                GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::MXFP4
            )
        {
            prop_assert_eq!(got, 0.0, "{} {:?}: zero scales must give 0", ty, isa);
        }
    }
    Ok(())
}

/// Row lengths a type allows that are not multiples of 256: whole blocks of 32 for the
/// 32-element formats, any length for the float types.
fn odd_length(ty: GgmlType, k: usize) -> Option<usize> {
    match ty.block_size() {
        1 => Some(1 + k % 700),
        32 => Some(32 * (1 + k % 23)),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Zero, subnormal and large scales, an all-zero activation block, and (where the type has
    /// 32-element or 1-element blocks) row lengths that are not multiples of 256.
    #[test]
    fn simd_equals_scalar_edge_values(
        t in 0..SIMD_TYPES.len(),
        blocks in 1usize..8,
        mode in 0usize..4,
        zero_block in proptest::option::of(0usize..64),
        odd in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let ty = SIMD_TYPES[t];
        let scales = [Scales::Normal, Scales::Zero, Scales::Subnormal, Scales::Large][mode];
        let n = match (odd, odd_length(ty, seed as usize)) {
            (true, Some(n)) => n,
            _ => 256 * blocks,
        };
        compare_with(ty, n, seed, scales, zero_block)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn simd_equals_scalar(t in 0..SIMD_TYPES.len(), blocks in 1usize..24, seed in any::<u64>()) {
        compare(SIMD_TYPES[t], blocks, seed)?;
    }
}

/// Odd block counts exercise the AVX-512 two-blocks-at-a-time tails of Q4_0/Q8_0.
#[test]
fn legacy_odd_block_counts() {
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        for nb in 1..12 {
            let n = 32 * nb;
            let mut rng = Rng::new(nb as u64);
            let w = random_weights(ty, n, &mut rng);
            let x = random_activations(n, &mut rng);
            let mut act = vec![0u8; dot::activation_bytes(GgmlType::Q8_0, n).unwrap()];
            dot::quantize_activation(GgmlType::Q8_0, &x, &mut act).unwrap();
            let s = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
            let mag = abs_dot(
                &dequantize_to_vec(ty, &w).unwrap(),
                &dequantize_to_vec(GgmlType::Q8_0, &act).unwrap(),
            );
            for isa in Isa::all_available() {
                let g = dot::vec_dot_with(isa, ty, n, &w, &act).unwrap();
                assert!(
                    ((g - s) as f64).abs() <= (nb + 16) as f64 * 1.2e-7 * mag,
                    "{ty} {isa:?} nb {nb}: {g} vs {s}"
                );
            }
        }
    }
}

/// The kernels SIMD families promise are really there (not silently scalar).
#[test]
fn simd_coverage() {
    eprintln!(
        "SIMD kernels checked on families {:?}",
        Isa::all_available()
    );
    for isa in Isa::all_available() {
        if isa == Isa::Scalar {
            continue;
        }
        for &ty in SIMD_TYPES {
            assert!(dot::has_simd_kernel(ty, isa), "{ty} {isa:?}");
        }
    }
}

/// Float rows whose length is not a multiple of the 32-element SIMD step use the scalar tail.
#[test]
fn float_tails() {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for n in [1usize, 7, 31, 33, 100, 257] {
            let mut rng = Rng::new(n as u64);
            let w = random_weights(ty, n, &mut rng);
            let x = random_activations(n, &mut rng);
            let mut act = vec![0u8; dot::activation_bytes(ty, n).unwrap()];
            dot::quantize_activation(ty, &x, &mut act).unwrap();
            let s = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
            let mag = abs_dot(
                &dequantize_to_vec(ty, &w).unwrap(),
                &dequantize_to_vec(ty, &act).unwrap(),
            );
            for isa in Isa::all_available() {
                let g = dot::vec_dot_with(isa, ty, n, &w, &act).unwrap();
                assert!(
                    ((g - s) as f64).abs() <= (n + 16) as f64 * 1.2e-7 * mag,
                    "{ty} {isa:?} n {n}: {g} vs {s}"
                );
            }
        }
    }
}

/// A multi-row kernel gives each row bit for bit what the single-row kernel of its family
/// gives (what keeps a matvec equal to a batched matmul), for every row count's remainder.
#[test]
fn rows_kernels_equal_single_row_bits() {
    let mut covered = 0;
    for isa in Isa::all_available() {
        for &ty in SIMD_TYPES {
            let Some(rk) = dot::rows_kernel_for(ty, isa) else {
                continue;
            };
            let single = dot::kernel_for(ty, isa).unwrap();
            let partner = dot::partner_type(ty).unwrap();
            let cases = [(1usize, 1usize), (2, 3), (3, 2), (4, 1), (5, 4), (9, 2)];
            // 32-element types also with block counts that leave a remainder of a four-block pass.
            let odd = (ty.block_size() == 32).then_some([(4usize, 7usize), (8, 13), (5, 2)]);
            let shapes = cases
                .map(|(r, b)| (r, 256 * b))
                .into_iter()
                .chain(odd.into_iter().flatten().map(|(r, b)| (r, 32 * b)));
            for (rows, n) in shapes {
                let mut rng = Rng::new((ty as u64) << 8 | rows as u64);
                let w = random_weights(ty, rows * n, &mut rng);
                let x = random_activations(n, &mut rng);
                let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
                dot::quantize_activation(partner, &x, &mut act).unwrap();
                let rb = w.len() / rows;
                let mut out = vec![f32::NAN; rows];
                rk(n, &w, &act, &mut out);
                for (r, got) in out.iter().enumerate() {
                    let want = single(n, &w[r * rb..(r + 1) * rb], &act);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{ty} {isa:?} rows {rows} r {r}"
                    );
                }
            }
            covered += 1;
        }
    }
    eprintln!("{covered} (type, family) multi-row kernels checked");
}

/// A multi-token kernel gives each token bit for bit what the single kernel of its family
/// gives that token alone (what keeps a prefill chunk's rows equal to decoding them one by one).
#[test]
fn cols_kernels_equal_single_token_bits() {
    let mut covered = 0;
    for isa in Isa::all_available() {
        for &ty in SIMD_TYPES {
            let Some(ck) = dot::cols_kernel_for(ty, isa) else {
                continue;
            };
            let single = dot::kernel_for(ty, isa).unwrap();
            let partner = dot::partner_type(ty).unwrap();
            // Odd block counts too: Q8_0 takes blocks in pairs and the last one alone.
            for blocks in [1usize, 2, 5, 7] {
                let n = ty.block_size() * blocks;
                let mut rng = Rng::new((ty as u64) << 8 | blocks as u64);
                let w = random_weights(ty, n, &mut rng);
                let acts: Vec<Vec<u8>> = (0..dot::COLS)
                    .map(|_| {
                        let x = random_activations(n, &mut rng);
                        let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
                        dot::quantize_activation(partner, &x, &mut act).unwrap();
                        act
                    })
                    .collect();
                let mut out = [f32::NAN; dot::COLS];
                ck(n, &w, std::array::from_fn(|t| &acts[t][..]), &mut out);
                for (t, got) in out.iter().enumerate() {
                    let want = single(n, &w, &acts[t]);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{ty} {isa:?} blocks {blocks} token {t}"
                    );
                }
            }
            covered += 1;
        }
    }
    eprintln!("{covered} (type, family) multi-token kernels checked");
}

/// A GEMM tile gives each (row, token) bit for bit what the single kernel of its family gives
/// that pair alone, exactly once, for row and token counts that leave partial tiles (16 token
/// lanes, 4-row groups, 16-row tiles, AMX's 64-row tiles of 16-row groups and pairs of token
/// tiles), odd block counts and activations with Q8_K's -128. On an AMX machine the `Amx`
/// family's tiles are checked beside `Avx512`'s VNNI tiles.
#[test]
fn gemm_kernels_equal_single_bits() {
    let mut covered = 0;
    for isa in Isa::all_available() {
        for &ty in SIMD_TYPES {
            let Some(g) = dot::gemm_kernel_for(ty, isa) else {
                continue;
            };
            let single = dot::kernel_for(ty, isa).unwrap();
            let partner = dot::partner_type(ty).unwrap();
            for (rows, n_acts, blocks) in [
                (1usize, 1usize, 1usize),
                (3, 17, 2),
                (18, 33, 1),
                (5, 16, 3),
                (37, 4, 2),
                // Past a four-block pass of the one-token kernels, and its remainder.
                (6, 20, 5),
                // AMX (from 48 activations; fewer run the VNNI tiles): past a 64-row tile, a
                // second tile of one 16-row group, partly filled; token tiles in pairs and
                // one alone, the last partly filled.
                (70, 50, 2),
                (37, 65, 1),
            ] {
                let n = ty.block_size() * blocks;
                let mut rng = Rng::new((ty as u64) << 16 | (rows * 64 + n_acts) as u64);
                let w = random_weights(ty, rows * n, &mut rng);
                let acts: Vec<Vec<u8>> = (0..n_acts)
                    .map(|i| {
                        let mut x = random_activations(n, &mut rng);
                        if i % 3 == 0 {
                            // The largest magnitude negative quantizes to -128.
                            x[i % n] = -1e3;
                        }
                        let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
                        dot::quantize_activation(partner, &x, &mut act).unwrap();
                        act
                    })
                    .collect();
                let rb = w.len() / rows;
                let mut got = vec![None; rows * n_acts];
                g(
                    n,
                    &w,
                    rows,
                    &|i| &acts[i][..],
                    n_acts,
                    &mut |r0, i0, vals, lanes| {
                        for (k, lane) in vals.iter().enumerate() {
                            for (j, &v) in lane.iter().enumerate().take(lanes) {
                                let (r, i) = (r0 + k, i0 + j);
                                assert!(
                                    got[r * n_acts + i].replace(v).is_none(),
                                    "({r}, {i}) twice"
                                );
                            }
                        }
                    },
                );
                for r in 0..rows {
                    for (i, act) in acts.iter().enumerate() {
                        let want = single(n, &w[r * rb..(r + 1) * rb], act);
                        let v = got[r * n_acts + i].expect("every (row, token) written");
                        assert_eq!(
                            v.to_bits(),
                            want.to_bits(),
                            "{ty} {isa:?} rows {rows} acts {n_acts} blocks {blocks}: ({r}, {i}) {v} vs {want}"
                        );
                    }
                }
            }
            covered += 1;
        }
    }
    eprintln!("{covered} (type, family) GEMM tiles checked");
}

/// The IQ2_XXS, IQ3_XXS, IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_S, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4
/// SIMD kernels add
/// the reference's per-block float expression in block order over exact integer sums, so every
/// family must give the scalar reference's exact bits (one activation quant is -128, which
/// negating the activation would wrap; scales include zero, subnormal and large ones; block
/// counts that are not multiples of four).
#[test]
fn exact_kernels_equal_scalar_bits() {
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_S,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
    ] {
        let partner = dot::partner_type(ty).unwrap();
        for seed in 0..64u64 {
            let mut rng = Rng::new(seed);
            let n = ty.block_size()
                * (1 + seed as usize % 11)
                * if ty.block_size() == 32 { 3 } else { 1 };
            let scales = [
                Scales::Normal,
                Scales::Zero,
                Scales::Subnormal,
                Scales::Large,
            ][seed as usize % 4];
            let w = random_weights_with(ty, n, &mut rng, scales);
            let x = random_activations(n, &mut rng);
            let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
            dot::quantize_activation(partner, &x, &mut act).unwrap();
            // One quant of -128 (the i8 range's end, which negating would wrap): Q8_K's quants
            // start at byte 4 with its first 16-sum (kept consistent) at 260; Q8_0's at 2, Q8_1's
            // at 4.
            let at = if partner == GgmlType::Q8_0 { 2 } else { 4 } + 7;
            let old = act[at] as i8 as i16;
            act[at] = (-128i8) as u8;
            if partner == GgmlType::Q8_K {
                let bsum = i16::from_le_bytes([act[260], act[261]]) - old - 128;
                act[260..262].copy_from_slice(&bsum.to_le_bytes());
            }
            let scalar = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
            for isa in Isa::all_available() {
                let got = dot::vec_dot_with(isa, ty, n, &w, &act).unwrap();
                assert_eq!(
                    got.to_bits(),
                    scalar.to_bits(),
                    "{ty} {isa:?} n {n} seed {seed}: {got} vs {scalar}"
                );
            }
        }
    }
}

/// AVX-512's Q8_0 kernels add each block's term in the scalar reference's order, so they give
/// its bits exactly (odd block counts take the last block alone).
#[test]
fn q8_0_avx512_equals_scalar_bits() {
    if !Isa::Avx512.available() {
        return;
    }
    let ty = GgmlType::Q8_0;
    for seed in 0..64u64 {
        let mut rng = Rng::new(seed);
        let n = 32 * (1 + seed as usize % 13);
        let w = random_weights(ty, n, &mut rng);
        let x = random_activations(n, &mut rng);
        let mut act = vec![0u8; dot::activation_bytes(GgmlType::Q8_0, n).unwrap()];
        dot::quantize_activation(GgmlType::Q8_0, &x, &mut act).unwrap();
        let scalar = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
        let got = dot::vec_dot_with(Isa::Avx512, ty, n, &w, &act).unwrap();
        assert_eq!(
            got.to_bits(),
            scalar.to_bits(),
            "seed {seed}: {got} vs {scalar}"
        );
    }
}
