//! 256-element k-quant super-blocks (Q2_K ... Q8_K).

use super::per_block;
use crate::blocks::*;
use crate::error::QuantError;

/// Unpacks the 6-bit scale and min of sub-block `j` (0..8) from Q4_K/Q5_K's 12 scale bytes:
/// bytes 0-3 hold scales 0-3 (+ top bits of scales 4-7), bytes 4-7 mins 0-3 (+ top bits of mins
/// 4-7), bytes 8-11 the low nibbles of scales/mins 4-7.
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Unpacks Q3_K's sixteen 6-bit scales (stored biased by 32) from its 12 scale bytes.
#[inline]
pub fn q3k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = if j < 8 { s[j] & 0xf } else { s[j - 8] >> 4 };
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (lo | (hi << 4)) as i8 - 32;
    }
    out
}

pub(crate) fn dequant_q2_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ2K>(b, o, |x, y| {
        let (d, min) = (x.d.to_f32(), x.dmin.to_f32());
        // Element 128*h + 32*s + l lives in qs[32*h + l] at bit 2*s; its group of 16 is
        // 8*h + 2*s + l/16.
        for h in 0..2 {
            let q = &x.qs[32 * h..32 * h + 32];
            for s in 0..4 {
                for half in 0..2 {
                    let sc = x.scales[8 * h + 2 * s + half];
                    let dl = d * (sc & 0xf) as f32;
                    let ml = min * (sc >> 4) as f32;
                    let base = 128 * h + 32 * s + 16 * half;
                    for l in 0..16 {
                        let qv = (q[16 * half + l] >> (2 * s)) & 3;
                        y[base + l] = dl * qv as f32 - ml;
                    }
                }
            }
        }
    })
}

pub(crate) fn dequant_q3_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ3K>(b, o, |x, y| {
        let d_all = x.d.to_f32();
        let scales = q3k_scales(&x.scales);
        // Element 128*h + 32*s + l: low bits at qs[32*h + l] >> 2s, high bit (set means "no -4
        // offset") at bit 4h + s of hmask[l].
        for h in 0..2 {
            let q = &x.qs[32 * h..32 * h + 32];
            for s in 0..4 {
                let m = 1u8 << (4 * h + s);
                for half in 0..2 {
                    let dl = d_all * scales[8 * h + 2 * s + half] as f32;
                    let base = 128 * h + 32 * s + 16 * half;
                    for l in 0..16 {
                        let i = 16 * half + l;
                        let qv = ((q[i] >> (2 * s)) & 3) as i32;
                        let off = if x.hmask[i] & m != 0 { 0 } else { 4 };
                        y[base + l] = dl * (qv - off) as f32;
                    }
                }
            }
        }
    })
}

pub(crate) fn dequant_q4_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ4K>(b, o, |x, y| {
        let (d, min) = (x.d.to_f32(), x.dmin.to_f32());
        for c in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * c, &x.scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, &x.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let q = &x.qs[32 * c..32 * c + 32];
            for l in 0..32 {
                y[64 * c + l] = d1 * (q[l] & 0xf) as f32 - m1;
                y[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    })
}

pub(crate) fn dequant_q5_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ5K>(b, o, |x, y| {
        let (d, min) = (x.d.to_f32(), x.dmin.to_f32());
        for c in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * c, &x.scales);
            let (sc2, m2) = scale_min_k4(2 * c + 1, &x.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let q = &x.qs[32 * c..32 * c + 32];
            for l in 0..32 {
                let h1 = if x.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if x.qh[l] & u2 != 0 { 16 } else { 0 };
                y[64 * c + l] = d1 * ((q[l] & 0xf) + h1) as f32 - m1;
                y[64 * c + 32 + l] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
            }
        }
    })
}

pub(crate) fn dequant_q6_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ6K>(b, o, |x, y| {
        let d = x.d.to_f32();
        for h in 0..2 {
            let ql = &x.ql[64 * h..64 * h + 64];
            let qh = &x.qh[32 * h..32 * h + 32];
            let sc = &x.scales[8 * h..8 * h + 8];
            let y = &mut y[128 * h..128 * h + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    })
}

pub(crate) fn dequant_q8_k(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ8K>(b, o, |x, y| {
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = x.d * q as f32;
        }
    })
}
