//! FP4 (E2M1) micro-scaled blocks: MXFP4 (E8M0 scale per 32) and NVFP4 (UE4M3 scale per 16).

use super::per_block;
use crate::blocks::*;
use crate::error::QuantError;
use crate::grids::KVALUES_MXFP4;

/// Half of the E8M0 scale `2^(e - 127)`, halved because [`KVALUES_MXFP4`] are doubled E2M1
/// values. e = 0 and 1 give f32 subnormals.
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e - 1) as u32) << 23
    };
    f32::from_bits(bits)
}

/// Half of an unsigned E4M3 (bias 7) scale; 0x7F (the NaN code) decodes as 0 like ggml.
#[inline]
pub fn ue4m3_to_f32_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xf) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * (1.0 / 512.0)
    } else {
        // 2^(exp - 7), built exactly from its bits.
        (1.0 + man / 8.0) * f32::from_bits(((exp - 7 + 127) as u32) << 23)
    };
    raw * 0.5
}

pub(crate) fn dequant_mxfp4(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockMXFP4>(b, o, |x, y| {
        let d = e8m0_to_f32_half(x.e);
        for j in 0..16 {
            y[j] = KVALUES_MXFP4[(x.qs[j] & 0xf) as usize] as f32 * d;
            y[j + 16] = KVALUES_MXFP4[(x.qs[j] >> 4) as usize] as f32 * d;
        }
    })
}

pub(crate) fn dequant_nvfp4(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockNVFP4>(b, o, |x, y| {
        for s in 0..4 {
            let d = ue4m3_to_f32_half(x.d[s]);
            for j in 0..8 {
                let q = x.qs[8 * s + j];
                y[16 * s + j] = KVALUES_MXFP4[(q & 0xf) as usize] as f32 * d;
                y[16 * s + 8 + j] = KVALUES_MXFP4[(q >> 4) as usize] as f32 * d;
            }
        }
    })
}
