//! Quantizing activations to the partner format of a weight type, as llama.cpp does on x86.
//!
//! llama.cpp's x86 `quantize_row_q8_0` / `quantize_row_q8_1` are not its `_ref` functions: they
//! compute the inverse scale as `127 / amax` (not `1 / (amax / 127)`) and round with
//! `_mm256_round_ps(.., _MM_ROUND_NEAREST)`, i.e. ties to even (not `roundf`'s ties away). The
//! two differ by one quant on a few elements per million, so results can only match llama.cpp's
//! x86 build bit for bit if the activation is quantized its way; that is what this file does.
//! `quantize_row_q8_K` on x86 is the reference one; it is written out here (rather than calling
//! the crate's general quantizer) so the hot path writes straight into caller scratch without
//! alignment copies, and a test checks it against that quantizer.

use glint_gguf::GgmlType;
use half::{bf16, f16};

use crate::error::QuantError;

/// Bytes needed for `n` activations in `partner` format.
pub fn activation_bytes(partner: GgmlType, n: usize) -> Result<usize, QuantError> {
    let blk = partner.block_size();
    if !n.is_multiple_of(blk) {
        return Err(QuantError::NotBlockAligned {
            ty: partner,
            n,
            block: blk,
        });
    }
    Ok(n / blk * partner.type_size())
}

/// Quantizes `x` into `out` in `partner` format (one of F32, F16, BF16, Q8_0, Q8_1, Q8_K), the
/// way llama.cpp's CPU backend prepares `src1` for `ggml_vec_dot` on x86.
pub fn quantize_activation(partner: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let need = activation_bytes(partner, x.len())?;
    if out.len() != need {
        return Err(QuantError::BadLength {
            ty: partner,
            what: "activation output bytes",
            expected: need,
            found: out.len(),
        });
    }
    #[cfg(target_arch = "x86_64")]
    if matches!(partner, GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K) && avx2() {
        // SAFETY: AVX2 + FMA are present; lengths were checked above.
        unsafe { x86::quantize(partner, x, out) };
        return Ok(());
    }
    quantize_scalar(partner, x, out)
}

/// [`quantize_activation`] without SIMD, lengths already checked.
fn quantize_scalar(partner: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    match partner {
        GgmlType::F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(x) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&f32_to_bf16_ggml(*v).to_le_bytes());
            }
        }
        GgmlType::Q8_0 => {
            for (o, xb) in out.chunks_exact_mut(34).zip(x.chunks_exact(32)) {
                let (d, _) = q8_x86_block(xb, &mut o[2..34]);
                o[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            }
        }
        GgmlType::Q8_1 => {
            for (o, xb) in out.chunks_exact_mut(36).zip(x.chunks_exact(32)) {
                let (d, sum) = q8_x86_block(xb, &mut o[4..36]);
                o[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                o[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
            }
        }
        GgmlType::Q8_K => {
            for (o, xb) in out.chunks_exact_mut(292).zip(x.chunks_exact(256)) {
                q8_k_block(xb, o);
            }
        }
        ty => {
            return Err(QuantError::Unsupported {
                ty,
                op: "activation quantization",
            })
        }
    }
    Ok(())
}

/// Whether the AVX2 quantizers may run (they give the scalar ones' bytes, so this does not
/// follow `GLINT_CPU_KERNEL`: quantizing is not a kernel family's choice).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// The Q8 quantizers in AVX2, byte for byte the scalar ones below: the same products and
/// the same ties-to-even rounding, lane-wise.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use glint_gguf::GgmlType;
    use half::f16;

    /// # Safety
    /// AVX2 + FMA must be present; `out` holds exactly `x`'s blocks in `partner` format, one of
    /// Q8_0, Q8_1, Q8_K.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize(partner: GgmlType, x: &[f32], out: &mut [u8]) {
        match partner {
            GgmlType::Q8_0 => {
                for (o, xb) in out.chunks_exact_mut(34).zip(x.chunks_exact(32)) {
                    let (d, _) = q8_block(xb.as_ptr(), o.as_mut_ptr().add(2));
                    o[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                }
            }
            GgmlType::Q8_1 => {
                for (o, xb) in out.chunks_exact_mut(36).zip(x.chunks_exact(32)) {
                    let (d, sum) = q8_block(xb.as_ptr(), o.as_mut_ptr().add(4));
                    o[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                    o[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
                }
            }
            _ => {
                for (o, xb) in out.chunks_exact_mut(292).zip(x.chunks_exact(256)) {
                    q8_k_block(xb.as_ptr(), o);
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn abs_ps(v: __m256) -> __m256 {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
    }

    /// The largest `|x|` over `vectors` runs of eight floats; NaNs are skipped (`maxps` returns
    /// its second operand when the first is NaN), as `f32::max` skips them.
    #[inline(always)]
    unsafe fn amax(x: *const f32, vectors: usize) -> f32 {
        let mut m = _mm256_setzero_ps();
        for k in 0..vectors {
            m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x.add(8 * k))), m);
        }
        let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)))
    }

    /// Sum of four i32 lanes.
    #[inline(always)]
    unsafe fn hsum4(v: __m128i) -> i32 {
        let s = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)))
    }

    /// `round(v * s)` to i32 lanes, ties to even (`vroundps` nearest is what the scalar two-add
    /// rounding computes); NaN becomes `i32::MIN`, as `vcvtps2dq` makes it.
    #[inline(always)]
    unsafe fn quants(p: *const f32, s: __m256) -> __m256i {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(_mm256_loadu_ps(p), s),
        );
        _mm256_cvtps_epi32(r)
    }

    /// Four vectors of i32 quants to 32 bytes in element order, saturated to i8.
    #[inline(always)]
    unsafe fn pack4(q: [__m256i; 4]) -> __m256i {
        let a = _mm256_packs_epi32(q[0], q[1]);
        let b = _mm256_packs_epi32(q[2], q[3]);
        // packs work within 128-bit lanes: restore element order afterwards.
        let v = _mm256_packs_epi16(a, b);
        _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// [`super::q8_x86_block`]: the scale and the wrapping sum of the i32 quants (before
    /// saturation), the 32 quants written at `qs`.
    #[inline(always)]
    unsafe fn q8_block(x: *const f32, qs: *mut u8) -> (f32, i32) {
        let amax = amax(x, 4);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q: [__m256i; 4] = std::array::from_fn(|k| quants(x.add(8 * k), id));
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        _mm256_storeu_si256(qs as *mut __m256i, pack4(q));
        (d, super::super::x86_util::hsum_epi32(s))
    }

    /// [`super::q8_k_block`]: the element of largest magnitude (the first of equals) sets the
    /// scale `-127 / max`.
    #[inline(always)]
    unsafe fn q8_k_block(x: *const f32, out: &mut [u8]) {
        let amax = amax(x, 32);
        out.fill(0);
        if amax == 0.0 {
            return;
        }
        let am = _mm256_set1_ps(amax);
        let mut first = 0;
        for k in 0..32 {
            let eq = _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x.add(8 * k))), am, _CMP_EQ_OQ);
            let bits = _mm256_movemask_ps(eq);
            if bits != 0 {
                first = 8 * k + bits.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127.0 / *x.add(first);
        let s = _mm256_set1_ps(iscale);
        let qs = out.as_mut_ptr().add(4);
        let ones = _mm256_set1_epi8(1);
        for c in 0..8 {
            let q: [__m256i; 4] = std::array::from_fn(|k| {
                // min(127) before the i8 saturation, as the scalar `r.min(127) as i8`: the
                // only i32 below -128 is NaN's i32::MIN, whose low byte (0) the scalar keeps.
                let v = quants(x.add(32 * c + 8 * k), s);
                let v = _mm256_min_epi32(v, _mm256_set1_epi32(127));
                _mm256_and_si256(v, _mm256_set1_epi32(0xff))
            });
            // Bytes already fit: pack without saturation by sign-extending first.
            let q = q.map(|v| _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24));
            let b = pack4(q);
            _mm256_storeu_si256(qs.add(32 * c) as *mut __m256i, b);
            // Sums of each 16 quants: pairwise byte products with 1, then word pairs.
            let w = _mm256_maddubs_epi16(ones, b);
            let w = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
            // w: eight i32 sums of 4 quants; lanes 0..4 = quants 0..16 of this 32.
            let b0 = (hsum4(_mm256_castsi256_si128(w)) as i16).to_le_bytes();
            let b1 = (hsum4(_mm256_extracti128_si256(w, 1)) as i16).to_le_bytes();
            out[260 + 4 * c..262 + 4 * c].copy_from_slice(&b0);
            out[262 + 4 * c..264 + 4 * c].copy_from_slice(&b1);
        }
        out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// One 32-element block the way llama.cpp's AVX2 `quantize_row_q8_0/1` does it; returns the
/// f32 scale and the integer sum of the quants (for Q8_1's `s`).
fn q8_x86_block(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        // cvtps_epi32 of an already-rounded value (NaN and anything out of i32's range, such
        // as the infinity a subnormal amax's scale makes, become i32::MIN), then saturating
        // packs to i8.
        let r = round_even_small(v * id);
        let i = if r.is_nan() || r.abs() >= 2_147_483_648.0 {
            i32::MIN
        } else {
            r as i32
        };
        sum = sum.wrapping_add(i);
        *q = i.clamp(-128, 127) as i8 as u8;
    }
    (d, sum)
}

/// One Q8_K block as ggml's `quantize_row_q8_K_ref`: the scale comes from the signed value of
/// largest magnitude (`-127 / max`, so that element maps to exactly -127), rounding is ggml's
/// `nearest_int` (ties to even), and `bsums` holds the sum of each 16 quants. An all-zero block
/// gets d = 0 and zero sums (ggml leaves its `bsums` stale there; every kernel multiplies them
/// by d, so the value cannot matter).
fn q8_k_block(x: &[f32], out: &mut [u8]) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    out.fill(0);
    if amax == 0.0 {
        return;
    }
    let iscale = -127.0 / max;
    let (qs, bsums) = out[4..].split_at_mut(256);
    for (q, &v) in qs.iter_mut().zip(x) {
        // ggml's `nearest_int` bit trick turns NaN and infinities (a subnormal max's scale is
        // infinite) into numbers whose low byte is 0.
        let r = round_even_small(iscale * v);
        *q = if r.is_finite() {
            (r as i32).min(127) as i8 as u8
        } else {
            0
        };
    }
    for (j, b) in bsums.chunks_exact_mut(2).enumerate() {
        let s: i32 = qs[j * 16..j * 16 + 16]
            .iter()
            .map(|&q| q as i8 as i32)
            .sum();
        b.copy_from_slice(&(s as i16).to_le_bytes());
    }
    out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

/// `x.round_ties_even()` for `|x| < 2^22` (and NaN, +-inf), which every scaled quant here is
/// (at most 127 in magnitude): adding and taking off 1.5 * 2^23 leaves the value on the integer
/// grid under the default rounding mode. Without SSE4.1 in the build target,
/// `round_ties_even` is a call to libm's `rintf` per element; this is two adds.
#[inline(always)]
fn round_even_small(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

/// ggml's `GGML_FP32_TO_BF16`: round to nearest even, NaNs kept quiet.
fn f32_to_bf16_ggml(v: f32) -> bf16 {
    let u = v.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits((u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: amax 127 -> d 1, id 1; 2.5 rounds to 2 (ties to even, where the
    /// reference's `roundf` gives 3), -3.5 to -4; s = d * sum.
    #[test]
    fn q8_1_block_matches_hand_computation() {
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.4;
        let mut out = vec![0u8; 36];
        quantize_activation(GgmlType::Q8_1, &x, &mut out).unwrap();
        assert_eq!(f16::from_le_bytes([out[0], out[1]]).to_f32(), 1.0);
        assert_eq!(out[4] as i8, 127);
        assert_eq!(out[5] as i8, 2);
        assert_eq!(out[6] as i8, -4);
        assert_eq!(out[7] as i8, 0);
        assert_eq!(f16::from_le_bytes([out[2], out[3]]).to_f32(), 125.0);
    }

    /// The AVX2 quantizers give the scalar ones' bytes: random blocks at several magnitudes,
    /// exact ties (k + 0.5 after scaling), both signs of the largest magnitude (the first one
    /// sets Q8_K's scale), zeros, NaN, infinities and subnormal blocks.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_quantizers_equal_scalar_bytes() {
        if !avx2() {
            eprintln!("no AVX2: nothing to compare");
            return;
        }
        let mut seed = 0x853c49e6748fea9bu64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut cases: Vec<Vec<f32>> = Vec::new();
        for scale in [1e-3f32, 1.0, 37.0, 1e5] {
            cases.push((0..1024).map(|_| next() * scale).collect());
        }
        // Ties after scaling: amax 127 gives scale 1 (Q8_0) / -1 (Q8_K, max -127).
        let mut ties: Vec<f32> = (0..256).map(|i| (i % 100) as f32 - 49.5).collect();
        ties[7] = -127.0;
        ties[200] = 127.0;
        cases.push(ties);
        let mut specials = vec![0.0f32; 512];
        specials[3] = f32::NAN;
        specials[40] = 2.0;
        specials[300] = f32::INFINITY;
        specials[301] = -1.0;
        specials[400] = f32::NEG_INFINITY;
        cases.push(specials);
        cases.push(vec![0.0; 256]);
        cases.push(vec![f32::NAN; 256]);
        let mut sub: Vec<f32> = (0..256)
            .map(|i| f32::from_bits(1 + i as u32) * if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        sub[9] = -f32::from_bits(300);
        cases.push(sub);
        for x in &cases {
            for partner in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
                let bytes = activation_bytes(partner, x.len()).unwrap();
                let (mut simd, mut scalar) = (vec![0u8; bytes], vec![0u8; bytes]);
                // SAFETY: AVX2 + FMA checked above; `simd` is x's blocks in `partner` format.
                unsafe { x86::quantize(partner, x, &mut simd) };
                quantize_scalar(partner, x, &mut scalar).unwrap();
                assert_eq!(simd, scalar, "{partner} on {:?}..", &x[..4]);
            }
        }
    }

    /// ggml's bf16 conversion on hand-picked values: ties to even both ways, NaN stays NaN.
    #[test]
    fn bf16_rounding() {
        assert_eq!(
            f32_to_bf16_ggml(f32::from_bits(0x3f80_8000)).to_bits(),
            0x3f80
        );
        assert_eq!(
            f32_to_bf16_ggml(f32::from_bits(0x3f81_8000)).to_bits(),
            0x3f82
        );
        assert_eq!(
            f32_to_bf16_ggml(f32::from_bits(0x3f80_8001)).to_bits(),
            0x3f81
        );
        assert!(f32_to_bf16_ggml(f32::NAN).to_f32().is_nan());
    }

    /// The two-add rounding equals std's `round_ties_even` over the range quants take: every
    /// quarter step in [-300, 300] (ties included), values a hair off the ties, and NaN / inf.
    #[test]
    fn round_even_small_is_ties_to_even() {
        for i in -1200..=1200 {
            let x = i as f32 / 4.0;
            for v in [
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits().max(1) - 1),
            ] {
                assert_eq!(round_even_small(v), v.round_ties_even(), "{v}");
            }
        }
        assert!(round_even_small(f32::NAN).is_nan());
        assert_eq!(round_even_small(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_even_small(f32::NEG_INFINITY), f32::NEG_INFINITY);
    }
}
