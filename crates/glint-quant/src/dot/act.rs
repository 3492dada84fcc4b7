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

/// One 32-element block the way llama.cpp's AVX2 `quantize_row_q8_0/1` does it; returns the
/// f32 scale and the integer sum of the quants (for Q8_1's `s`).
fn q8_x86_block(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        // cvtps_epi32 of an already-rounded value, then saturating packs to i8.
        let r = round_even_small(v * id);
        let i = if r.is_nan() { i32::MIN } else { r as i32 };
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
        let r = round_even_small(iscale * v) as i32;
        *q = r.min(127) as i8 as u8;
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
