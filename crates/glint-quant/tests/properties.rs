//! Property tests: length handling never panics, sub-ranges of blocks decode like the reference,
//! and quantize -> dequantize stays within error bounds worked out from each format's step size.

mod common;

use common::*;
use glint_gguf::GgmlType;
use glint_quant::{dequantize, dequantize_to_vec, quantize, quantize_to_vec, traits, QuantError};
use proptest::prelude::*;

/// Effective bits per weight for the round-trip bound (mantissa bits for the float types).
const BITS: &[(&str, f64)] = &[
    ("F16", 11.0),
    ("BF16", 8.0),
    ("Q8_0", 8.0),
    ("Q8_1", 8.0),
    ("Q8_K", 8.0),
    ("Q6_K", 6.0),
    ("Q5_0", 5.0),
    ("Q5_1", 5.0),
    ("Q5_K", 5.0),
    ("Q4_0", 4.0),
    ("Q4_1", 4.0),
    ("Q4_K", 4.0),
    ("IQ4_NL", 4.0),
    ("IQ4_XS", 4.0),
    ("Q3_K", 3.0),
    ("MXFP4", 3.0),
    ("NVFP4", 3.0),
    ("Q2_K", 2.0),
];

fn any_type() -> impl Strategy<Value = GgmlType> {
    proptest::sample::select(GgmlType::ALL.to_vec())
}

fn quantizable() -> impl Strategy<Value = GgmlType> {
    let tys: Vec<GgmlType> = GgmlType::ALL
        .iter()
        .copied()
        .filter(|&t| traits(t).from_f32.is_some())
        .collect();
    proptest::sample::select(tys)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any (input bytes, output length) pair either decodes or returns an error naming the
    /// type; it succeeds exactly when the lengths agree with gguf-py's block geometry.
    #[test]
    fn dequant_lengths_checked(ty in any_type(), n_bytes in 0usize..2000, n_out in 0usize..4000) {
        let bytes = vec![0u8; n_bytes];
        let mut out = vec![0f32; n_out];
        let consistent = n_bytes % ty.type_size() == 0
            && n_out == n_bytes / ty.type_size() * ty.block_size();
        match dequantize(ty, &bytes, &mut out) {
            Ok(()) => prop_assert!(consistent),
            Err(QuantError::BadLength { ty: t, .. }) => {
                prop_assert!(!consistent);
                prop_assert_eq!(t, ty);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn quant_lengths_checked(ty in quantizable(), n_src in 0usize..1200, n_out in 0usize..1200) {
        let src = vec![0.5f32; n_src];
        let mut out = vec![0u8; n_out];
        let aligned = n_src % ty.block_size() == 0;
        let consistent = aligned && n_out == n_src / ty.block_size() * ty.type_size();
        match quantize(ty, &src, &mut out) {
            Ok(()) => prop_assert!(consistent),
            Err(QuantError::NotBlockAligned { ty: t, n, block }) => {
                prop_assert!(!aligned);
                prop_assert_eq!((t, n, block), (ty, n_src, ty.block_size()));
            }
            Err(QuantError::BadLength { ty: t, .. }) => {
                prop_assert!(aligned && !consistent);
                prop_assert_eq!(t, ty);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    /// Arbitrary bytes (any scale, any grid index, NaN/inf f16) decode without panicking, into
    /// exactly the element count gguf-py's geometry gives.
    #[test]
    fn arbitrary_bytes_decode(ty in any_type(), blocks in 0usize..6, seed in any::<u64>()) {
        let mut state = seed | 1;
        let bytes: Vec<u8> = (0..blocks * ty.type_size())
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u8
            })
            .collect();
        let out = dequantize_to_vec(ty, &bytes).unwrap();
        prop_assert_eq!(out.len(), blocks * ty.block_size());
    }

    /// Arbitrary f32 bit patterns (NaN, inf, subnormals, huge values) quantize without panicking.
    #[test]
    fn arbitrary_floats_quantize(ty in quantizable(), bits in proptest::collection::vec(any::<u32>(), 256)) {
        let x: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let n = x.len() / ty.block_size() * ty.block_size();
        let q = quantize_to_vec(ty, &x[..n]).unwrap();
        prop_assert_eq!(q.len(), n / ty.block_size() * ty.type_size());
        prop_assert_eq!(dequantize_to_vec(ty, &q).unwrap().len(), n);
    }

    /// Any whole-block window of a reference fixture (odd counts, odd offsets, misaligned
    /// slices) decodes to the same window of the reference output.
    #[test]
    fn block_windows_match_reference(ty in any_type(), a in 0usize..64, len in 0usize..64) {
        let raw = read(&format!("dequant/{}.bin", ty.name()));
        let want = read_f32(&format!("dequant/{}.f32", ty.name()));
        let (bs, qk) = (ty.type_size(), ty.block_size());
        let nb = raw.len() / bs;
        let a = a % nb;
        let b = (a + len).min(nb);
        let got = dequantize_to_vec(ty, &raw[a * bs..b * bs]).unwrap();
        prop_assert!(first_f32_mismatch(&got, &want[a * qk..b * qk]).is_none());
        prop_assert_eq!(got.len(), (b - a) * qk);
    }

    /// Round-trip error of Gaussian-ish data, relative to its RMS, stays below a bound derived
    /// from the format: uniform quantization with step s has RMS error s / sqrt(12); for a
    /// 32-element Gaussian group the range is about 5 sigma, so b bits give about
    /// 5 / (2^b - 1) / sqrt(12) sigma. Bounds below are 2x that estimate (k-quants also round
    /// their scales, FP4 / IQ4 code books are non-uniform).
    /// (Ternary and 1-bit types are sign/trit codes, not approximations of Gaussian data, and
    /// are covered by the byte-exact reference test only.)
    #[test]
    fn round_trip_error_bounded(
        (name, bits) in proptest::sample::select(BITS.to_vec()),
        blocks in 1usize..5,
        scale_exp in -8i32..8,
        seed in any::<u64>(),
    ) {
        let ty = GgmlType::from_name(name).unwrap();
        let n = blocks * ty.block_size().max(256);
        let mut state = seed | 1;
        // NVFP4's per-16 UE4M3 scale only spans about 2^-9 .. 448 (real NVFP4 tensors carry an
        // extra per-tensor f32 scale), so tiny data underflows to zero by design: keep it in range.
        let scale_exp = if ty == GgmlType::NVFP4 { scale_exp.clamp(-3, 7) } else { scale_exp };
        let scale = 2f32.powi(scale_exp);
        let x: Vec<f32> = (0..n)
            .map(|_| {
                // xorshift + sum of 4 uniforms: cheap, roughly Gaussian.
                let mut s = 0.0f32;
                for _ in 0..4 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    s += (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                }
                s * scale
            })
            .collect();
        let q = quantize_to_vec(ty, &x).unwrap();
        let y = dequantize_to_vec(ty, &q).unwrap();
        let rms = (x.iter().map(|v| (v * v) as f64).sum::<f64>() / n as f64).sqrt();
        let err = (x.iter().zip(&y).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
        let bound = 2.0 * 5.0 / (2f64.powf(bits) - 1.0) / 12f64.sqrt();
        prop_assert!(err <= bound * rms, "{}: rel rms error {} > {}", ty, err / rms, bound);
    }
}

/// Q8_0's error per element is at most half a step plus the f16 rounding of the scale:
/// |x - y| <= d/2 + 127 * |d - f16(d)|, where the f16 rounding error is at most d * 2^-11 for
/// normal f16 and 2^-25 in the subnormal range. Checked on the reference inputs (scale regimes
/// down to 1e-20, zeros, constant row, outlier row).
#[test]
fn q8_0_elementwise_bound() {
    let x = read_f32("quantize/input.f32");
    let y = dequantize_to_vec(
        GgmlType::Q8_0,
        &quantize_to_vec(GgmlType::Q8_0, &x).unwrap(),
    )
    .unwrap();
    for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let tol = (d * 0.5 + 127.0 * (d / 2048.0).max(2f32.powi(-25))) * 1.0001;
        for (a, b) in xb.iter().zip(yb) {
            assert!((a - b).abs() <= tol, "{a} vs {b}, tol {tol}");
        }
    }
}
