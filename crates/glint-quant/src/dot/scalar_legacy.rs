//! Reference dot products for the 32-element block types against Q8_0 / Q8_1 activations.
//!
//! Each function is ggml's `ggml_vec_dot_<w>_<a>_generic`, same integer sums, same float
//! expression per block and same left-to-right accumulation into one f32, so its results are
//! llama.cpp's generic results bit for bit.

use bytemuck::pod_read_unaligned;

use crate::blocks::{
    BlockIQ4NL, BlockMXFP4, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1,
};
use crate::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};

/// Iterates the blocks of a weight row and its activation row in lock step. Blocks are read
/// unaligned by value so callers may pass any byte slice (mmap row offsets are not aligned).
fn pairs<'a, W: bytemuck::Pod, A: bytemuck::Pod>(
    w: &'a [u8],
    a: &'a [u8],
) -> impl Iterator<Item = (W, A)> + 'a {
    w.chunks_exact(std::mem::size_of::<W>())
        .zip(a.chunks_exact(std::mem::size_of::<A>()))
        .map(|(wb, ab)| (pod_read_unaligned::<W>(wb), pod_read_unaligned::<A>(ab)))
}

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
pub(crate) fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}
