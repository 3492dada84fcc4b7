//! IQ4_NL / IQ4_XS quantizers (non-linear 4-bit code book), as `ggml_quantize_chunk` without an
//! importance matrix runs them: 15 candidate scales per 32-group (`ntry = 7`).

use half::f16;

use super::{f32_to_f16, nearest_int, per_block};
use crate::blocks::*;
use crate::error::QuantError;
use crate::grids::KVALUES_IQ4NL;

const GROUP_MAX_EPS: f32 = 1e-15;
const NTRY: i32 = 7;

/// Index of the code-book value nearest `x` (ggml `best_index_int8`; ties go to the upper one).
#[inline]
fn best_index(x: f32) -> u8 {
    let v = &KVALUES_IQ4NL;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (v[mu - 1] as f32) < v[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// Best scale for one 32-group with weights `x^2`; `None` for an all-zero group.
/// Like ggml, only the scale is kept from the search; codes are recomputed by the caller.
fn group_scale(xb: &[f32]) -> Option<f32> {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return None;
    }
    let v0 = KVALUES_IQ4NL[0] as f32;
    let fit = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &x in xb {
            let q = KVALUES_IQ4NL[best_index(id * x) as usize] as f32;
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d0 = -max / v0;
    let (sumqx, sumq2) = fit(1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + KVALUES_IQ4NL[0] as i32) as f32 / max;
        let (sumqx, sumq2) = fit(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    Some(d)
}

#[inline]
fn pack_nibbles(l: &[u8], q4: &mut [u8]) {
    for i in 0..l.len() / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

pub(crate) fn quant_iq4_nl(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockIQ4NL>(src, out, |x, y| {
        let scale = group_scale(x).unwrap_or(0.0);
        y.d = f32_to_f16(scale);
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let mut l = [0u8; 32];
        for (l, &v) in l.iter_mut().zip(x) {
            *l = best_index(id * v);
        }
        pack_nibbles(&l, &mut y.qs);
    })
}

pub(crate) fn quant_iq4_xs(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockIQ4XS>(src, out, |x, y| {
        let mut scales = [0f32; 8];
        let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
        for ib in 0..8 {
            let s = group_scale(&x[32 * ib..32 * ib + 32]).unwrap_or(0.0);
            scales[ib] = s;
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = s;
            }
        }
        let d = -max_scale / 32.0;
        y.d = f16::from_bits(f32_to_f16(d).to_bits());
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.scales_h = 0;
        y.scales_l = [0; 4];
        let mut l = [0u8; QK_K];
        for ib in 0..8 {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 0..32 {
                l[32 * ib + j] = best_index(idl * x[32 * ib + j]);
            }
            let ls = (ls + 32) as u8;
            y.scales_l[ib / 2] |= (ls & 0xf) << (4 * (ib % 2));
            y.scales_h |= ((ls >> 4) as u16) << (2 * ib);
        }
        pack_nibbles(&l, &mut y.qs);
    })
}
