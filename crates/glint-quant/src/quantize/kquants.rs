//! k-quant reference quantizers (Q2_K ... Q6_K) and the Q8_K activation format.
//!
//! The scale searches (`make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`) are iterative and
//! their choices flip on the last bit of an f32 sum, so they are written to evaluate the same
//! expressions as ggml in the same order (`a * b * c` is `(a * b) * c`, ints converted to f32 at
//! the same points).

use super::{f32_to_f16, nearest_int, per_block};
use crate::blocks::*;
use crate::dequant::{q3k_scales, scale_min_k4};
use crate::error::QuantError;

/// ggml's threshold below which a group counts as all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Largest-magnitude value (first on ties) with its sign, and its magnitude.
#[inline]
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric scale search with weights `x^2` (ggml `make_qx_quants`, rmse_type 1, no imatrix):
/// tries 18 scales around `nmax / max` and keeps the one minimising weighted squared error.
/// Writes codes `0..2*nmax` to `l` and returns the scale.
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (i, &xi) in x.iter().enumerate() {
        let l = clamp(nearest_int(iscale * xi));
        l_out[i] = (l + nmax) as i8;
        let w = xi * xi;
        sumlx += w * xi * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &xi in x {
            let l = clamp(nearest_int(iscale * xi));
            let w = xi * xi;
            sumlx += w * xi * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (i, &xi) in x.iter().enumerate() {
                l_out[i] = (nmax + clamp(nearest_int(iscale * xi))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q3_K's scale search (ggml `make_q3_quants` with `do_rmse`): start from `nmax / max`, then up
/// to 5 passes of coordinate descent moving single codes while weighted error improves.
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (i, &xi) in x.iter().enumerate() {
        let l = clamp(nearest_int(iscale * xi));
        l_out[i] = l as i8;
        let w = xi * xi;
        sumlx += w * xi * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (i, &xi) in x.iter().enumerate() {
            let w = xi * xi;
            let li = l_out[i] as f32;
            let mut slx = sumlx - w * xi * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(xi * sl2 / slx));
                if new_l != l_out[i] as i32 {
                    slx += w * xi * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in l_out.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of the asymmetric (scale + min) search, per ggml caller.
struct Qkx2 {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
}

/// Asymmetric scale/min search (ggml `make_qkx2_quants`): codes `0..=nmax`, value
/// `scale * l - min`. Tries `nstep + 1` scale candidates, each refit by weighted least squares.
/// Returns `(scale, min)` with `min >= 0` meaning the value subtracted.
fn make_qkx2_quants(p: &Qkx2, x: &[f32], weights: &[f32], l_out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.iter_mut().for_each(|l| *l = 0);
        return (0.0, -min);
    }
    let nmax = p.nmax;
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    let err = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit codes: element 128*h + 32*s + l goes to qs[32*h + l] bits 2s..2s+2.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; 64]) {
    for h in 0..2 {
        for j in 0..32 {
            let b = 128 * h + j;
            qs[32 * h + j] = l[b] | (l[b + 32] << 2) | (l[b + 64] << 4) | (l[b + 96] << 6);
        }
    }
}

pub(crate) fn quant_q2_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    const Q4SCALE: f32 = 15.0;
    let p = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    per_block::<BlockQ2K>(src, out, |x, y| {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let mut w = [0f32; 16];
            for (w, v) in w.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(&p, xs, &w, &mut l[16 * j..16 * j + 16]);
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (q, &s) in y.scales.iter_mut().zip(&scales) {
                *q = nearest_int(iscale * s) as u8;
            }
            y.d = f32_to_f16(max_scale / Q4SCALE);
        } else {
            y.scales = [0; 16];
            y.d = f32_to_f16(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (q, &m) in y.scales.iter_mut().zip(&mins) {
                *q |= (nearest_int(iscale * m) << 4) as u8;
            }
            y.dmin = f32_to_f16(max_min / Q4SCALE);
        } else {
            y.dmin = f32_to_f16(0.0);
        }
        for j in 0..16 {
            let d = y.d.to_f32() * (y.scales[j] & 0xf) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = y.dmin.to_f32() * (y.scales[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut y.qs);
    })
}

pub(crate) fn quant_q3_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ3K>(src, out, |x, y| {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let s = scales[j].abs();
            if s > amax {
                amax = s;
                max_scale = scales[j];
            }
        }
        y.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // ggml stores nearest_int into an int8_t before clamping (wrapping cast).
                let mut li = (nearest_int(iscale * s) as i8).clamp(-32, 31) + 32;
                if j < 8 {
                    y.scales[j] = (li & 0xf) as u8;
                } else {
                    y.scales[j - 8] |= ((li & 0xf) << 4) as u8;
                }
                li >>= 4;
                y.scales[j % 4 + 8] |= (li << (2 * (j / 4))) as u8;
            }
            y.d = f32_to_f16(1.0 / iscale);
        } else {
            y.d = f32_to_f16(0.0);
        }
        let sc = q3k_scales(&y.scales);
        for j in 0..16 {
            let d = y.d.to_f32() * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
            }
        }
        y.hmask = [0; 32];
        let mut lu = [0u8; QK_K];
        for j in 0..QK_K {
            let mut v = l[j] as u8;
            if v > 3 {
                y.hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            lu[j] = v;
        }
        pack_2bit(&lu, &mut y.qs);
    })
}

/// Shared body of Q4_K and Q5_K: per 32-group asymmetric search, then 6-bit scales/mins packed
/// in 12 bytes, then final codes recomputed against the rounded scales. Returns the codes.
fn q45k_scales(
    p: &Qkx2,
    x: &[f32],
    d_out: &mut half::f16,
    dmin_out: &mut half::f16,
    packed: &mut [u8; K_SCALE_SIZE],
) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut w = [0f32; 32];
        for (w, v) in w.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(p, xs, &w, &mut l[32 * j..32 * j + 32]);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    *packed = [0; K_SCALE_SIZE];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    *d_out = f32_to_f16(max_scale / 63.0);
    *dmin_out = f32_to_f16(max_min / 63.0);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, packed);
        let d = d_out.to_f32() * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin_out.to_f32() * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, p.nmax) as u8;
        }
    }
    l
}

pub(crate) fn quant_q4_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let p = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    per_block::<BlockQ4K>(src, out, |x, y| {
        let l = q45k_scales(&p, x, &mut y.d, &mut y.dmin, &mut y.scales);
        for c in 0..4 {
            for j in 0..32 {
                y.qs[32 * c + j] = l[64 * c + j] | (l[64 * c + 32 + j] << 4);
            }
        }
    })
}

pub(crate) fn quant_q5_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let p = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    per_block::<BlockQ5K>(src, out, |x, y| {
        let l = q45k_scales(&p, x, &mut y.d, &mut y.dmin, &mut y.scales);
        y.qh = [0; 32];
        for c in 0..4 {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for j in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + j], l[64 * c + 32 + j]);
                if l1 > 15 {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                y.qs[32 * c + j] = l1 | (l2 << 4);
            }
        }
    })
}

pub(crate) fn quant_q6_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ6K>(src, out, |x, y| {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let s = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *y = bytemuck::Zeroable::zeroed();
            return;
        }
        let iscale = -128.0 / max_scale;
        y.d = f32_to_f16(1.0 / iscale);
        for (q, &s) in y.scales.iter_mut().zip(&scales) {
            *q = nearest_int(iscale * s).min(127) as i8;
        }
        for j in 0..16 {
            let d = y.d.to_f32() * y.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        for h in 0..2 {
            let (ql, qh) = (
                &mut y.ql[64 * h..64 * h + 64],
                &mut y.qh[32 * h..32 * h + 32],
            );
            let lb = &l[128 * h..128 * h + 128];
            for j in 0..32 {
                let q = |k: usize| lb[j + 32 * k] as u8;
                ql[j] = (q(0) & 0xf) | ((q(2) & 0xf) << 4);
                ql[j + 32] = (q(1) & 0xf) | ((q(3) & 0xf) << 4);
                qh[j] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    })
}

/// Q8_K is only an activation format: scale -127/max (not -128, which would let the SIMD IQ
/// kernels overflow), plus per-16 sums the k-quant dot products use to fold in their mins.
pub(crate) fn quant_q8_k(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ8K>(src, out, |x, y| {
        let (max, amax) = signed_absmax(x);
        if amax == 0.0 {
            *y = bytemuck::Zeroable::zeroed();
            return;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for j in 0..16 {
            y.bsums[j] = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        y.d = 1.0 / iscale;
    })
}
