//! Reference dot products for the k-quants and ternary types against Q8_K activations.
//!
//! Mirrors ggml's `ggml_vec_dot_*_q8_K_generic`. Q3_K..Q6_K there accumulate into eight float
//! lanes (`sums[l]`, one per element index mod 8) that are only added together at the end; that
//! order is kept here because it decides the f32 rounding of the result.

// Indexed loops on purpose: they follow ggml's generic kernels line by line, which is what
// makes these the reference.
#![allow(clippy::needless_range_loop)]

use super::pairs;

use crate::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, BlockTQ1_0, BlockTQ2_0,
};

/// The 6-bit (scale, min) pair `j` of a Q4_K/Q5_K block (ggml's `get_scale_min_k4`).
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Adds `scale * a[i] * q8[i]` into lane `i % 8` for a run of elements.
#[inline]
fn lanes_add(aux32: &mut [i32; 8], scale: i32, a: &[i8], q8: &[i8]) {
    for (i, (&x, &y)) in a.iter().zip(q8).enumerate() {
        aux32[i % 8] += scale * (x as i32 * y as i32);
    }
}

pub fn dot_q2_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockQ2K, BlockQ8K>(w, a) {
        let mut summs = 0i32;
        for j in 0..16 {
            summs += y.bsums[j] as i32 * (x.scales[j] >> 4) as i32;
        }
        let dall = y.d * x.d.to_f32();
        let dmin = y.d * x.dmin.to_f32();
        let mut isum = 0i32;
        let mut is = 0;
        for k in 0..2 {
            let q2 = &x.qs[k * 32..k * 32 + 32];
            for j in 0..4 {
                let shift = 2 * j;
                let q8 = &y.qs[k * 128 + j * 32..k * 128 + j * 32 + 32];
                for half in 0..2 {
                    let d = (x.scales[is] & 0x0f) as i32;
                    is += 1;
                    let mut isuml = 0i32;
                    for l in half * 16..half * 16 + 16 {
                        isuml += q8[l] as i32 * ((q2[l] >> shift) & 3) as i32;
                    }
                    isum += d * isuml;
                }
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

pub fn dot_q3_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut a8 = [0i8; 256];
    for (x, y) in pairs::<BlockQ3K, BlockQ8K>(w, a) {
        for j in 0..256 {
            let (half, rest) = (j / 128, j % 128);
            let (shift, l) = (rest / 32 * 2, rest % 32);
            let q = (x.qs[half * 32 + l] >> shift) & 3;
            let m = 1u8 << (j / 32);
            a8[j] = q as i8 - if x.hmask[l] & m != 0 { 0 } else { 4 };
        }
        let scales = q3k_scales(&x.scales);
        let mut aux32 = [0i32; 8];
        for j in 0..16 {
            lanes_add(
                &mut aux32,
                scales[j] as i32 - 32,
                &a8[j * 16..j * 16 + 16],
                &y.qs[j * 16..j * 16 + 16],
            );
        }
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    let mut sumf = 0.0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}

/// The sixteen 6-bit Q3_K scales (unsigned, bias 32 not yet removed).
pub(crate) fn q3k_scales(packed: &[u8; 12]) -> [u8; 16] {
    let mut s = [0u8; 16];
    for j in 0..16 {
        let low = if j < 8 {
            packed[j] & 0x0f
        } else {
            packed[j - 8] >> 4
        };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        s[j] = low | (high << 4);
    }
    s
}

fn dot_q45_k(
    x_d: f32,
    x_dmin: f32,
    scales: &[u8; 12],
    a8: &[i8; 256],
    y: &BlockQ8K,
    sums: &mut [f32; 8],
    sumf: &mut f32,
) {
    let mut sumi = 0i32;
    for j in 0..16 {
        sumi += y.bsums[j] as i32 * scale_min_k4(j / 2, scales).1 as i32;
    }
    let mut aux32 = [0i32; 8];
    for j in 0..8 {
        let sc = scale_min_k4(j, scales).0 as i32;
        lanes_add(
            &mut aux32,
            sc,
            &a8[j * 32..j * 32 + 32],
            &y.qs[j * 32..j * 32 + 32],
        );
    }
    let d = x_d * y.d;
    for l in 0..8 {
        sums[l] += d * aux32[l] as f32;
    }
    let dmin = x_dmin * y.d;
    *sumf -= dmin * sumi as f32;
}

pub fn dot_q4_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    let mut a8 = [0i8; 256];
    for (x, y) in pairs::<BlockQ4K, BlockQ8K>(w, a) {
        for j in 0..4 {
            for l in 0..32 {
                a8[j * 64 + l] = (x.qs[j * 32 + l] & 0x0f) as i8;
                a8[j * 64 + 32 + l] = (x.qs[j * 32 + l] >> 4) as i8;
            }
        }
        dot_q45_k(
            x.d.to_f32(),
            x.dmin.to_f32(),
            &x.scales,
            &a8,
            &y,
            &mut sums,
            &mut sumf,
        );
    }
    for s in sums {
        sumf += s;
    }
    sumf
}

pub fn dot_q5_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    let mut a8 = [0i8; 256];
    for (x, y) in pairs::<BlockQ5K, BlockQ8K>(w, a) {
        for j in 0..4 {
            let (m0, m1) = (1u8 << (2 * j), 1u8 << (2 * j + 1));
            for l in 0..32 {
                let hi0 = if x.qh[l] & m0 != 0 { 16 } else { 0 };
                let hi1 = if x.qh[l] & m1 != 0 { 16 } else { 0 };
                a8[j * 64 + l] = ((x.qs[j * 32 + l] & 0x0f) + hi0) as i8;
                a8[j * 64 + 32 + l] = ((x.qs[j * 32 + l] >> 4) + hi1) as i8;
            }
        }
        dot_q45_k(
            x.d.to_f32(),
            x.dmin.to_f32(),
            &x.scales,
            &a8,
            &y,
            &mut sums,
            &mut sumf,
        );
    }
    for s in sums {
        sumf += s;
    }
    sumf
}

pub fn dot_q6_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut a8 = [0i8; 256];
    for (x, y) in pairs::<BlockQ6K, BlockQ8K>(w, a) {
        for h in 0..2 {
            let (ql, qh) = (&x.ql[h * 64..h * 64 + 64], &x.qh[h * 32..h * 32 + 32]);
            let a = &mut a8[h * 128..h * 128 + 128];
            for l in 0..32 {
                a[l] = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
                a[l + 32] = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let mut aux32 = [0i32; 8];
        for j in 0..16 {
            lanes_add(
                &mut aux32,
                x.scales[j] as i32,
                &a8[j * 16..j * 16 + 16],
                &y.qs[j * 16..j * 16 + 16],
            );
        }
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    let mut sumf = 0.0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}

/// A trit stored as a base-3 fixed-point digit: `((q * 3^l) mod 256) * 3 >> 8`, minus one.
#[inline]
fn trit(q: u8, pow3: u8) -> i32 {
    let q = q.wrapping_mul(pow3);
    (((q as u16) * 3) >> 8) as i32 - 1
}

pub fn dot_tq1_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockTQ1_0, BlockQ8K>(w, a) {
        let mut sum = 0i32;
        for l in 0..5 {
            for m in 0..32 {
                sum += trit(x.qs[m], POW3[l]) * y.qs[l * 32 + m] as i32;
            }
        }
        for l in 0..5 {
            for m in 0..16 {
                sum += trit(x.qs[32 + m], POW3[l]) * y.qs[160 + l * 16 + m] as i32;
            }
        }
        for l in 0..4 {
            for j in 0..4 {
                sum += trit(x.qh[j], POW3[l]) * y.qs[240 + l * 4 + j] as i32;
            }
        }
        sumf += sum as f32 * (x.d.to_f32() * y.d);
    }
    sumf
}

pub fn dot_tq2_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in pairs::<BlockTQ2_0, BlockQ8K>(w, a) {
        let mut sumi = 0i32;
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for k in 0..32 {
                    let q = ((x.qs[j + k] >> (l * 2)) & 3) as i32 - 1;
                    sumi += y.qs[j * 4 + l * 32 + k] as i32 * q;
                }
            }
        }
        let d = y.d * x.d.to_f32();
        sumf += sumi as f32 * d;
    }
    sumf
}
