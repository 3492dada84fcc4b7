//! Ternary (TQ1_0, TQ2_0) and 1-bit (Q1_0) quantizers.

use super::{f32_to_f16, per_block};
use crate::blocks::*;
use crate::error::QuantError;

/// Scale = absmax; returns (d, 1/d or 0).
#[inline]
fn absmax_scale(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// The trit code 0, 1, 2 for -1, 0, +1 (ggml uses `lroundf`, i.e. half away from zero).
#[inline]
fn trit(x: f32, id: f32) -> u8 {
    ((x * id).round() as i32 + 1) as u8
}

/// Packs base-3 digits (most significant first) as a fixed-point fraction of 3^5 in a byte,
/// rounded up so that `(byte * 3^n * 3) >> 8` recovers digit n exactly.
#[inline]
fn pack_trits(digits: impl Iterator<Item = u8>) -> u8 {
    let q = digits.fold(0u8, |q, t| q.wrapping_mul(3).wrapping_add(t));
    (q as u16 * 256).div_ceil(243) as u8
}

pub(crate) fn quant_tq1_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockTQ1_0>(src, out, |x, y| {
        let (d, id) = absmax_scale(x);
        y.d = f32_to_f16(d);
        // qs[0..32]: byte m holds elements m + 32n (n = 0..5).
        for m in 0..32 {
            y.qs[m] = pack_trits((0..5).map(|n| trit(x[m + 32 * n], id)));
        }
        // qs[32..48]: byte m holds elements 160 + m + 16n.
        for m in 0..16 {
            y.qs[32 + m] = pack_trits((0..5).map(|n| trit(x[160 + m + 16 * n], id)));
        }
        // qh: byte j holds elements 240 + j + 4m (4 trits, then shifted up one trit).
        for j in 0..4 {
            let digits = (0..4).map(|m| trit(x[240 + j + 4 * m], id)).chain([0]);
            y.qh[j] = pack_trits(digits);
        }
    })
}

pub(crate) fn quant_tq2_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockTQ2_0>(src, out, |x, y| {
        let (d, id) = absmax_scale(x);
        y.d = f32_to_f16(d);
        for c in 0..2 {
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    q += (trit(x[128 * c + m + 32 * n], id) & 3) << (2 * n);
                }
                y.qs[32 * c + m] = q;
            }
        }
    })
}

/// Q1_0 keeps only signs; the scale is the mean magnitude, which minimises squared error for a
/// fixed sign pattern.
pub(crate) fn quant_q1_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ1_0>(src, out, |x, y| {
        let mut sum_abs = 0.0f32;
        for v in x {
            sum_abs += v.abs();
        }
        y.d = f32_to_f16(sum_abs / 128.0);
        y.qs = [0; 16];
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                y.qs[j / 8] |= 1 << (j % 8);
            }
        }
    })
}
