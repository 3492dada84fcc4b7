//! Reference dot products for the 32-element block types (and Q1_0 / NVFP4, which span several
//! Q8_0 blocks) against Q8_0 / Q8_1 activations.
//!
//! Each function is ggml's `ggml_vec_dot_<w>_<a>_generic`, same integer sums, same float
//! expression per block and same left-to-right accumulation into one f32, so its results are
//! llama.cpp's generic results bit for bit.

use bytemuck::pod_read_unaligned;

use super::pairs;

use crate::blocks::{
    BlockIQ4NL, BlockMXFP4, BlockNVFP4, BlockQ1_0, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1,
    BlockQ8_0, BlockQ8_1,
};
use crate::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::ue4m3_to_f32_half;

pub fn dot_q4_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ4_0, BlockQ8_0>(w, a) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            s0 += ((x.qs[j] & 0x0f) as i32 - 8) * y.qs[j] as i32;
            s1 += ((x.qs[j] >> 4) as i32 - 8) * y.qs[j + 16] as i32;
        }
        sumf += (s0 + s1) as f32 * x.d.to_f32() * y.d.to_f32();
    }
    sumf
}

pub fn dot_q4_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ4_1, BlockQ8_1>(w, a) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            s0 += (x.qs[j] & 0x0f) as i32 * y.qs[j] as i32;
            s1 += (x.qs[j] >> 4) as i32 * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * (s0 + s1) as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

pub fn dot_q5_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ5_0, BlockQ8_0>(w, a) {
        let qh = u32::from_le_bytes(x.qh);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            let x0 = ((x.qs[j] & 0x0f) as u32 | h0) as i32 - 16;
            let x1 = ((x.qs[j] >> 4) as u32 | h1) as i32 - 16;
            s0 += x0 * y.qs[j] as i32;
            s1 += x1 * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * (s0 + s1) as f32;
    }
    sumf
}

pub fn dot_q5_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ5_1, BlockQ8_1>(w, a) {
        let qh = u32::from_le_bytes(x.qh);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            s0 += ((x.qs[j] & 0x0f) as u32 | h0) as i32 * y.qs[j] as i32;
            s1 += ((x.qs[j] >> 4) as u32 | h1) as i32 * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * (s0 + s1) as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

pub fn dot_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ8_0, BlockQ8_0>(w, a) {
        let mut s = 0i32;
        for j in 0..32 {
            s += x.qs[j] as i32 * y.qs[j] as i32;
        }
        sumf += s as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sumf
}

pub fn dot_iq4_nl(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ4NL, BlockQ8_0>(w, a) {
        let d = y.d.to_f32() * x.d.to_f32();
        let (mut s1, mut s2) = (0i32, 0i32);
        for j in 0..16 {
            s1 += y.qs[j] as i32 * KVALUES_IQ4NL[(x.qs[j] & 0x0f) as usize] as i32;
            s2 += y.qs[j + 16] as i32 * KVALUES_IQ4NL[(x.qs[j] >> 4) as usize] as i32;
        }
        sumf += d * (s1 + s2) as f32;
    }
    sumf
}

pub fn dot_mxfp4(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockMXFP4, BlockQ8_0>(w, a) {
        let d = y.d.to_f32() * e8m0_to_f32_half(x.e);
        let (mut s1, mut s2) = (0i32, 0i32);
        for j in 0..16 {
            s1 += y.qs[j] as i32 * KVALUES_MXFP4[(x.qs[j] & 0x0f) as usize] as i32;
            s2 += y.qs[j + 16] as i32 * KVALUES_MXFP4[(x.qs[j] >> 4) as usize] as i32;
        }
        sumf += d * (s1 + s2) as f32;
    }
    sumf
}

/// ggml's `GGML_E8M0_TO_FP32_HALF`: half of the E8M0 scale `2^(e-127)`, with the two smallest
/// exponents as subnormals so `e = 0` still maps to a finite non-zero value.
#[inline]
pub(crate) const fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

/// Q1_0 (128 one-bit weights, `+d` / `-d`) against four Q8_0 blocks; ggml sums each Q8_0
/// block's integer dot scaled by its `d` in f32, then scales the block total by the weight's `d`.
pub fn dot_q1_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, ya) in w.chunks_exact(18).zip(a.chunks_exact(4 * 34)) {
        let x = pod_read_unaligned::<BlockQ1_0>(xb);
        let mut sumi = 0.0f32;
        for k in 0..4 {
            let y = pod_read_unaligned::<BlockQ8_0>(&ya[k * 34..(k + 1) * 34]);
            let mut s = 0i32;
            for j in 0..32 {
                let bit = (x.qs[k * 4 + j / 8] >> (j % 8)) & 1;
                s += if bit != 0 {
                    y.qs[j] as i32
                } else {
                    -(y.qs[j] as i32)
                };
            }
            sumi += y.d.to_f32() * s as f32;
        }
        sumf += x.d.to_f32() * sumi;
    }
    sumf
}

/// NVFP4 (64 FP4 weights in four 16-groups, each with a UE4M3 scale) against two Q8_0 blocks.
pub fn dot_nvfp4(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, ya) in w.chunks_exact(36).zip(a.chunks_exact(2 * 34)) {
        let x = pod_read_unaligned::<BlockNVFP4>(xb);
        for s in 0..4 {
            let d = ue4m3_to_f32_half(x.d[s]);
            let y = pod_read_unaligned::<BlockQ8_0>(&ya[(s / 2) * 34..(s / 2 + 1) * 34]);
            let off = (s % 2) * 16;
            let (mut lo, mut hi) = (0i32, 0i32);
            for j in 0..8 {
                let q = x.qs[s * 8 + j];
                lo += y.qs[off + j] as i32 * KVALUES_MXFP4[(q & 0x0f) as usize] as i32;
                hi += y.qs[off + j + 8] as i32 * KVALUES_MXFP4[(q >> 4) as usize] as i32;
            }
            sumf += y.d.to_f32() * d * (lo + hi) as f32;
        }
    }
    sumf
}
