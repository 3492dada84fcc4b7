//! Reference dot products for the i-quants (IQ1_S ... IQ4_XS) against Q8_K activations.
//!
//! Mirrors ggml's `ggml_vec_dot_iq*_q8_K_generic`: grid lookups and sign masks produce exact
//! integer sums per 32 weights, the block's float scale is applied once per block (per 32 for
//! IQ4_XS), and IQ2/IQ3 results carry ggml's final 0.125 / 0.25 factor.

// Indexed loops on purpose: they follow ggml's generic kernels line by line, which is what
// makes these the reference.
#![allow(clippy::needless_range_loop)]

use super::pairs;

use crate::blocks::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockIQ4XS,
    BlockQ8K,
};
use crate::grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
    KVALUES_IQ4NL,
};

/// ggml's `IQ1S_DELTA` / `IQ1M_DELTA`: the shift applied to all weights of a 32-group.
const IQ1_DELTA: f32 = 0.125;

/// Sum over 8 weights of `grid[j] * q8[j]`, negated where sign bit j is set.
#[inline]
fn signed8(grid: u64, signs: u8, q8: &[i8]) -> i32 {
    let g = grid.to_le_bytes();
    let mut s = 0i32;
    for j in 0..8 {
        let p = g[j] as i32 * q8[j] as i32;
        s += if signs & (1 << j) != 0 { -p } else { p };
    }
    s
}

/// Eight 8-bit grid values from two 4-value (u32) grid entries.
#[inline]
fn grid_pair(g1: u32, g2: u32) -> u64 {
    g1 as u64 | ((g2 as u64) << 32)
}

pub fn dot_iq2_xxs(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ2XXS, BlockQ8K>(w, a) {
        let d = x.d.to_f32() * y.d;
        let mut bsum = 0i32;
        for ib32 in 0..8 {
            let q = &x.qs[ib32 * 4..ib32 * 4 + 4];
            let aux0 = q[0] as u32 | (q[1] as u32) << 16;
            let aux1 = q[2] as u32 | (q[3] as u32) << 16;
            let ls = 2 * (aux1 >> 28) as i32 + 1;
            let mut sumi = 0i32;
            for l in 0..4 {
                let grid = IQ2XXS_GRID[((aux0 >> (8 * l)) & 255) as usize];
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                sumi += signed8(grid, signs, &y.qs[ib32 * 32 + l * 8..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

pub fn dot_iq2_xs(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ2XS, BlockQ8K>(w, a) {
        let d = x.d.to_f32() * y.d;
        let mut bsum = 0i32;
        for ib32 in 0..8 {
            let ls1 = 2 * (x.scales[ib32] & 0x0f) as i32 + 1;
            let ls2 = 2 * (x.scales[ib32] >> 4) as i32 + 1;
            for (half, ls) in [(0, ls1), (1, ls2)] {
                let mut sumi = 0i32;
                for l in half * 2..half * 2 + 2 {
                    let q = x.qs[ib32 * 4 + l];
                    let grid = IQ2XS_GRID[(q & 511) as usize];
                    let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                    sumi += signed8(grid, signs, &y.qs[ib32 * 32 + l * 8..]);
                }
                bsum += sumi * ls;
            }
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

pub fn dot_iq2_s(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ2S, BlockQ8K>(w, a) {
        let d = x.d.to_f32() * y.d;
        let mut bsum = 0i32;
        for ib32 in 0..8 {
            let ls1 = 1 + 2 * (x.scales[ib32] & 0x0f) as i32;
            let ls2 = 1 + 2 * (x.scales[ib32] >> 4) as i32;
            let mut sumi = [0i32; 2];
            for l in 0..4 {
                let idx =
                    x.qs[ib32 * 4 + l] as usize | ((x.qh[ib32] as usize) << (8 - 2 * l) & 0x300);
                let signs = x.qs[32 + ib32 * 4 + l];
                sumi[l / 2] += signed8(IQ2S_GRID[idx], signs, &y.qs[ib32 * 32 + l * 8..]);
            }
            bsum += ls1 * sumi[0] + ls2 * sumi[1];
        }
        sumf += d * bsum as f32;
    }
    0.125 * sumf
}

pub fn dot_iq3_xxs(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ3XXS, BlockQ8K>(w, a) {
        let d = x.d.to_f32() * y.d;
        let mut bsum = 0i32;
        for ib32 in 0..8 {
            let g = &x.qs[64 + 4 * ib32..64 + 4 * ib32 + 4];
            let aux = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
            let ls = 2 * (aux >> 28) as i32 + 1;
            let q3 = &x.qs[ib32 * 8..ib32 * 8 + 8];
            let mut sumi = 0i32;
            for l in 0..4 {
                let grid = grid_pair(
                    IQ3XXS_GRID[q3[2 * l] as usize],
                    IQ3XXS_GRID[q3[2 * l + 1] as usize],
                );
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                sumi += signed8(grid, signs, &y.qs[ib32 * 32 + l * 8..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    0.25 * sumf
}

pub fn dot_iq3_s(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ3S, BlockQ8K>(w, a) {
        let d = x.d.to_f32() * y.d;
        let mut bsum = 0i32;
        for ib32 in 0..8 {
            let ls = if ib32 % 2 == 0 {
                2 * (x.scales[ib32 / 2] & 0x0f) as i32 + 1
            } else {
                2 * (x.scales[ib32 / 2] >> 4) as i32 + 1
            };
            let qs = &x.qs[ib32 * 8..ib32 * 8 + 8];
            let qh = x.qh[ib32] as usize;
            let mut sumi = 0i32;
            for l in 0..4 {
                let i1 = qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256);
                let i2 = qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256);
                let grid = grid_pair(IQ3S_GRID[i1], IQ3S_GRID[i2]);
                sumi += signed8(grid, x.signs[ib32 * 4 + l], &y.qs[ib32 * 32 + l * 8..]);
            }
            bsum += sumi * ls;
        }
        sumf += d * bsum as f32;
    }
    sumf
}

pub fn dot_iq1_s(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ1S, BlockQ8K>(w, a) {
        let (mut sumi, mut sumi1) = (0i32, 0i32);
        for ib in 0..8 {
            let qh = x.qh[ib] as usize;
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            let mut lsum = 0i32;
            for l in 0..4 {
                let idx = x.qs[ib * 4 + l] as usize | (((qh >> (3 * l)) & 7) << 8);
                let g = IQ1S_GRID[idx].to_le_bytes();
                for j in 0..8 {
                    lsum += y.qs[ib * 32 + l * 8 + j] as i32 * g[j] as i8 as i32;
                }
            }
            sumi += ls * lsum;
            sumi1 += ls * delta * (y.bsums[2 * ib] as i32 + y.bsums[2 * ib + 1] as i32);
        }
        sumf += x.d.to_f32() * y.d * (sumi as f32 + IQ1_DELTA * sumi1 as f32);
    }
    sumf
}

pub fn dot_iq1_m(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ1M, BlockQ8K>(w, a) {
        let sc: [u16; 4] =
            std::array::from_fn(|i| u16::from_le_bytes([x.scales[2 * i], x.scales[2 * i + 1]]));
        let scale_bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let scale = half::f16::from_bits(scale_bits).to_f32();
        let (mut sumi1, mut sumi2) = (0i32, 0i32);
        for ib in 0..8 {
            let qh = &x.qh[ib * 2..ib * 2 + 2];
            let delta = [
                if qh[0] & 0x08 != 0 { -1 } else { 1 },
                if qh[0] & 0x80 != 0 { -1 } else { 1 },
                if qh[1] & 0x08 != 0 { -1 } else { 1 },
                if qh[1] & 0x80 != 0 { -1 } else { 1 },
            ];
            let (mut sum1, mut sum2) = ([0i32; 2], [0i32; 2]);
            for l in 0..4 {
                let idx = x.qs[ib * 4 + l] as usize
                    | (((qh[l / 2] as usize) << (8 - 4 * (l % 2))) & 0x700);
                let g = IQ1S_GRID[idx].to_le_bytes();
                let (mut lsum1, mut lsum2) = (0i32, 0i32);
                for j in 0..8 {
                    let q = y.qs[ib * 32 + l * 8 + j] as i32;
                    lsum1 += q * g[j] as i8 as i32;
                    lsum2 += q;
                }
                sum1[l / 2] += lsum1;
                sum2[l / 2] += lsum2 * delta[l];
            }
            let s = sc[ib / 2] as i32 >> (6 * (ib % 2));
            let ls1 = 2 * (s & 7) + 1;
            let ls2 = 2 * ((s >> 3) & 7) + 1;
            sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
            sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
        }
        sumf += scale * y.d * (sumi1 as f32 + IQ1_DELTA * sumi2 as f32);
    }
    sumf
}

pub fn dot_iq4_xs(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockIQ4XS, BlockQ8K>(w, a) {
        let d4d8 = x.d.to_f32() * y.d;
        let h = x.scales_h as u32;
        for ib in 0..8 {
            let lo = (x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
            let ls = lo as i32 | (((h >> (2 * ib)) & 3) << 4) as i32;
            let dl = d4d8 * (ls - 32) as f32;
            let qs = &x.qs[ib * 16..ib * 16 + 16];
            let q8 = &y.qs[ib * 32..ib * 32 + 32];
            let (mut s1, mut s2) = (0i32, 0i32);
            for j in 0..16 {
                s1 += q8[j] as i32 * KVALUES_IQ4NL[(qs[j] & 0x0f) as usize] as i32;
                s2 += q8[j + 16] as i32 * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32;
            }
            sumf += dl * (s1 + s2) as f32;
        }
    }
    sumf
}
