//! Ternary blocks TQ1_0 / TQ2_0 (weights in {-1, 0, 1} times a scale).

use super::per_block;
use crate::blocks::*;
use crate::error::QuantError;

/// Extracts trit `n` (0 = most significant) from a TQ1_0 byte.
///
/// TQ1_0 stores 5 (or 4) trits as the fraction `value / 243` scaled to a byte, so multiplying by
/// 3^n (wrapping) shifts trit n to the top and `(q * 3) >> 8` reads it off.
#[inline]
fn trit(byte: u8, pow3: u8) -> f32 {
    let q = byte.wrapping_mul(pow3);
    (((q as u16 * 3) >> 8) as i32 - 1) as f32
}

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

pub(crate) fn dequant_tq1_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockTQ1_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        let mut k = 0;
        // qs[0..32]: 5 trits each, trit n of byte m -> element 32n + m.
        for &p in &POW3 {
            for m in 0..32 {
                y[k] = trit(x.qs[m], p) * d;
                k += 1;
            }
        }
        // qs[32..48]: 5 trits each over 16 bytes.
        for &p in &POW3 {
            for m in 0..16 {
                y[k] = trit(x.qs[32 + m], p) * d;
                k += 1;
            }
        }
        // qh: 4 trits each.
        for &p in POW3.iter().take(4) {
            for &q in &x.qh {
                y[k] = trit(q, p) * d;
                k += 1;
            }
        }
    })
}

pub(crate) fn dequant_tq2_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockTQ2_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        for (i, y) in y.iter_mut().enumerate() {
            let (c, l, m) = (i / 128, (i % 128) / 32, i % 32);
            let q = (x.qs[32 * c + m] >> (2 * l)) & 3;
            *y = (q as i32 - 1) as f32 * d;
        }
    })
}
