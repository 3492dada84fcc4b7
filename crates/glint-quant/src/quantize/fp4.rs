//! FP4 quantizers: MXFP4 (one power-of-two E8M0 scale per 32 weights) and NVFP4 (one UE4M3
//! scale per 16); each weight becomes the nearest E2M1 value.

use super::per_block;
use crate::blocks::*;
use crate::dequant::{e8m0_to_f32_half, ue4m3_to_f32_half};
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

/// f32 to unsigned E4M3 (bias 7, max 448) as ggml's `ggml_fp32_to_ue4m3`: round half up on the
/// mantissa, saturate to 0x7E, non-positive and NaN to 0.
fn f32_to_ue4m3(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let x = if x > 448.0 { 448.0 } else { x };
    let bits = x.to_bits();
    let mut exp = ((bits >> 23) & 0xff) as i32 - 127 + 7;
    if exp <= 0 {
        let man = ((x * 512.0 + 0.5) as i32).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7e;
    }
    let mut man = ((bits >> 20) & 7) as i32 + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7e;
        }
    }
    ((exp << 3) | man) as u8
}

pub(crate) fn quant_nvfp4(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockNVFP4>(src, out, |x, y| {
        for s in 0..4 {
            let xb = &x[16 * s..16 * s + 16];
            let mut amax = 0.0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            // amax / 6 maps the largest E2M1 magnitude (6) onto amax.
            let ue = f32_to_ue4m3(amax / 6.0);
            y.d[s] = ue;
            let d = ue4m3_to_f32_half(ue);
            for j in 0..8 {
                y.qs[8 * s + j] =
                    best_index_mxfp4(xb[j], d) | (best_index_mxfp4(xb[8 + j], d) << 4);
            }
        }
    })
}
