//! MXFP4 quantizer: one power-of-two (E8M0) scale per 32 weights, each weight the nearest E2M1.

use super::per_block;
use crate::blocks::*;
use crate::dequant::e8m0_to_f32_half;
use crate::error::QuantError;
use crate::grids::KVALUES_MXFP4;

/// Nearest doubled-E2M1 code to `x` at scale `d` (first index wins ties, so +0 beats -0).
#[inline]
fn best_index_mxfp4(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

pub(crate) fn quant_mxfp4(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockMXFP4>(src, out, |x, y| {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        // Exponent so that amax / 2^(e-127) lands in [4, 8): the top E2M1 value is 6.
        // (`as i32 as u8` mirrors C's float-to-uint8_t conversion on x86.)
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        y.e = e;
        for j in 0..16 {
            y.qs[j] = best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[j + 16], d) << 4);
        }
    })
}
