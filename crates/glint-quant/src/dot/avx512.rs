//! AVX-512 (F, BW, VL, VNNI) dot products: 64 weights per instruction, `vpdpbusd` /
//! `vpdpwssd` fusing the multiply-add chains of the AVX2 kernels.
//!
//! Same integer sums as the scalar kernels (exact), same per-block float scaling as the AVX2
//! kernels but in sixteen lanes. IQ2_XXS/IQ3_XXS apply their sign bits as a `k` mask built with
//! `pdep` instead of a +-1 byte table. Types without a kernel here use the AVX2 one.

use std::arch::x86_64::*;

use glint_gguf::GgmlType;

use super::avx2::{blocks, cols_entry, pair_spread, q3k_scales_i8, rows_entry};
use super::avx512_iq::{iq2_xxs_impl, iq3_xxs_impl};
use super::avx512_iq1::iq1_s_impl;
use super::x86_util::*;
use super::{VecDotColsFn, VecDotFn, VecDotRowsFn, COLS};
use crate::grids::KVALUES_IQ4NL;

/// The AVX-512 kernel for `ty`, if there is one.
pub fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => q4_0,
        Q8_0 => q8_0,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        IQ4_XS => iq4_xs,
        // Without VBMI the AVX2 kernels (see avx512_iq).
        IQ2_XXS if super::avx512_iq::available() => iq2_xxs,
        IQ3_XXS if super::avx512_iq::available() => iq3_xxs,
        IQ1_S => iq1_s,
        _ => return None,
    })
}

/// The AVX-512 multi-row kernel for `ty`, if there is one. Each row gets the bits of this
/// family's single-row kernel: its own (Q4_0, Q6_K, IQ4_XS: the same operations per row), the
/// AVX2 one it falls back to (Q2_K, Q3_K: that kernel's steps in each 256-bit half), or the
/// reference's (the exact 32-element types, which need VBMI).
pub fn rows_kernel(ty: GgmlType) -> Option<VecDotRowsFn> {
    use super::avx512_unit32::*;
    use GgmlType::*;
    let vbmi = available();
    Some(match ty {
        Q4_0 => q4_0_rows,
        Q8_0 => q8_0_rows,
        Q6_K => q6_k_rows,
        IQ4_XS => iq4_xs_rows,
        Q2_K => q2_k_rows,
        Q3_K => q3_k_rows,
        Q4_1 if vbmi => q4_1_rows4,
        Q5_0 if vbmi => q5_0_rows4,
        Q5_1 if vbmi => q5_1_rows4,
        IQ4_NL if vbmi => iq4_nl_rows4,
        MXFP4 if vbmi => mxfp4_rows4,
        _ => return None,
    })
}

/// The AVX-512 multi-token kernel for `ty`, if there is one: bit for bit [`kernel`]`(ty)` on
/// each token.
pub fn cols_kernel(ty: GgmlType) -> Option<VecDotColsFn> {
    match ty {
        GgmlType::Q4_K => Some(q4_k_cols),
        GgmlType::Q5_K => Some(q5_k_cols),
        GgmlType::Q6_K => Some(q6_k_cols),
        GgmlType::Q8_0 => Some(q8_0_cols),
        _ => None,
    }
}

cols_entry!(q4_k_cols, k4_cols_impl::<false>, 256, 144, 292);
cols_entry!(q5_k_cols, k4_cols_impl::<true>, 256, 176, 292);
cols_entry!(q6_k_cols, q6_k_cols_impl, 256, 210, 292);
cols_entry!(q8_0_cols, q8_0_cols_impl, 32, 34, 34);

macro_rules! safe_kernel {
    ($name:ident, $imp:ident, $qk:expr, $wsize:expr, $asize:expr) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = blocks(n, $qk, w, $wsize, a, $asize);
            // SAFETY: lengths checked above; AVX-512 F/BW/VL/VNNI checked by `kernel_for`.
            unsafe { $imp(nb, w.as_ptr(), a.as_ptr()) }
        }
    };
}

safe_kernel!(q8_0, q8_0_impl, 32, 34, 34);
// Two rows a pass: measured on Zen 5 (32768 × 8192, one core) Q6_K 26-27 -> 28-33 GiB/s;
// four rows were no better, and Q4_K was slower with two (22-26) or four (18.6) than one.
rows_entry!(
    q6_k_rows,
    2,
    256,
    210,
    292,
    q6_k_rows_impl::<2>,
    q6_k_rows_impl::<1>
);
rows_entry!(
    iq4_xs_rows,
    2,
    256,
    136,
    292,
    iq4_xs_rows_impl::<2>,
    iq4_xs_rows_impl::<1>
);
rows_entry!(
    q4_0_rows,
    4,
    32,
    18,
    34,
    q4_0_rows_impl::<4>,
    q4_0_rows_impl::<1>
);
rows_entry!(
    q8_0_rows,
    4,
    32,
    34,
    34,
    q8_0_rows_impl::<4>,
    q8_0_rows_impl::<1>
);
rows_entry!(q3_k_rows, 2, 256, 110, 292, q3_k_pair_impl, q3_k_one);
rows_entry!(q2_k_rows, 2, 256, 84, 292, q2_k_pair_impl, q2_k_one);
safe_kernel!(q4_0, q4_0_impl, 32, 18, 34);
safe_kernel!(q4_k, q4_k_impl, 256, 144, 292);
safe_kernel!(q5_k, q5_k_impl, 256, 176, 292);
safe_kernel!(q6_k, q6_k_impl, 256, 210, 292);
safe_kernel!(iq4_xs, iq4_xs_impl, 256, 136, 292);
safe_kernel!(iq2_xxs, iq2_xxs_impl, 256, 66, 292);
safe_kernel!(iq1_s, iq1_s_impl, 256, 50, 292);
safe_kernel!(iq3_xxs, iq3_xxs_impl, 256, 98, 292);

/// Two 32-byte halves as one 64-byte vector.
#[inline(always)]
pub(super) unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// Signed x signed bytes summed in fours (abs / conditional negate, then `vpdpbusd`).
#[inline(always)]
unsafe fn dot_i8(x: __m512i, y: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(x);
    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy)
}

/// Q8_0 in the scalar reference's float order (`sum += s * (dw * da)` per block, in block
/// order), two blocks per vector: the integer dots are exact, so every AVX-512 Q8_0 path (one
/// token, several, the GEMM tiles of `avx512_gemm`) gives the reference's bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q8_0_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    q8_0_rows_impl::<1>(nb, x, 0, y)[0]
}

/// [`q8_0_impl`] for `R` rows `rb` bytes apart, each row on its own running sum (its bits): the
/// rows share the activation loads, and their sums' serial adds (four a round, in block order)
/// overlap instead of one row waiting on each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q8_0_rows_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let mut sum = [0.0f32; R];
    let mut i = 0;
    let pair = |p: *const u8| join(load256(p.add(2)), load256(p.add(36)));
    // Four blocks a round: one shared reduction gives their four integer dots, then each term
    // is added in block order.
    while i + 4 <= nb {
        let ya = y.add(i * 34);
        let (qy01, qy23) = (pair(ya), pair(ya.add(68)));
        let dy = [0, 1, 2, 3].map(|k| f16_at(ya.add(34 * k)));
        for (r, sum) in sum.iter_mut().enumerate() {
            let xa = x.add(r * rb + i * 34);
            prefetch_rows::<R>(xa, rb, 136);
            let p01 = dot_i8(pair(xa), qy01);
            let p23 = dot_i8(pair(xa.add(68)), qy23);
            let v = _mm512_add_epi32(
                _mm512_shuffle_i64x2(p01, p23, 0b10_00_10_00),
                _mm512_shuffle_i64x2(p01, p23, 0b11_01_11_01),
            );
            let v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
            let v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
            let s4 = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
                _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                v,
            ));
            let d = [0, 1, 2, 3].map(|k| f16_at(xa.add(34 * k)) * dy[k]);
            let mut t = [0f32; 4];
            _mm_storeu_ps(
                t.as_mut_ptr(),
                _mm_mul_ps(_mm_cvtepi32_ps(s4), _mm_loadu_ps(d.as_ptr())),
            );
            *sum = *sum + t[0] + t[1] + t[2] + t[3];
        }
        i += 4;
    }
    for (r, sum) in sum.iter_mut().enumerate() {
        let (xr, mut j) = (x.add(r * rb), i);
        if j + 2 <= nb {
            let (xa, ya) = (xr.add(j * 34), y.add(j * 34));
            let p = dot_i8(pair(xa), pair(ya));
            *sum = q8_0_fold(*sum, p, [xa, ya, xa.add(34), ya.add(34)]);
            j += 2;
        }
        if j < nb {
            *sum += super::scalar_legacy::dot_q8_0(
                32,
                std::slice::from_raw_parts(xr.add(j * 34), 34),
                std::slice::from_raw_parts(y.add(j * 34), 34),
            );
        }
    }
    sum
}

/// Adds two blocks' terms, `p`'s low and high eight lanes, in block order.
#[inline(always)]
unsafe fn q8_0_fold(sum: f32, p: __m512i, [xa, ya, xb, yb]: [*const u8; 4]) -> f32 {
    let sa = hsum_epi32(_mm512_castsi512_si256(p));
    let sb = hsum_epi32(_mm512_extracti64x4_epi64(p, 1));
    let sum = sum + sa as f32 * (f16_at(xa) * f16_at(ya));
    sum + sb as f32 * (f16_at(xb) * f16_at(yb))
}

/// [`q8_0_impl`] for COLS activation rows: each pair of weight blocks is loaded and its signs
/// taken once, then every token runs `q8_0_impl`'s operations on its own sum.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q8_0_cols_impl(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    let mut sum = [0.0f32; COLS];
    let mut i = 0;
    while i + 2 <= nb {
        let (xa, xb) = (x.add(i * 34), x.add(i * 34 + 34));
        prefetch_ahead(xa, 68);
        let qx = join(load256(xa.add(2)), load256(xb.add(2)));
        let (neg, ax) = (_mm512_movepi8_mask(qx), _mm512_abs_epi8(qx));
        for t in 0..COLS {
            let (ya, yb) = (y[t].add(i * 34), y[t].add(i * 34 + 34));
            let qy = join(load256(ya.add(2)), load256(yb.add(2)));
            let sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy);
            sum[t] = q8_0_fold(sum[t], p, [xa, ya, xb, yb]);
        }
        i += 2;
    }
    for t in 0..COLS {
        if i < nb {
            sum[t] += super::scalar_legacy::dot_q8_0(
                32,
                std::slice::from_raw_parts(x.add(i * 34), 34),
                std::slice::from_raw_parts(y[t].add(i * 34), 34),
            );
        }
        out[t] = sum[t];
    }
}

/// Q3_K, two rows in one register: each 256-bit half runs the AVX2 one-row kernel's
/// operations (`avx2::q3_k_impl`: every integer step stays within 128-bit lanes, every float
/// step is per lane) for its own row, so each row gets that kernel's bits, which is this
/// family's single-row Q3_K kernel. Half the instructions of running the rows one by one.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q3_k_pair_impl(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; 2] {
    let m3 = _mm512_set1_epi8(3);
    let one = _mm512_set1_epi8(1);
    let ctrl: [__m512i; 8] = std::array::from_fn(|c| _mm512_broadcast_i64x4(pair_spread(c, true)));
    let mut acc = _mm512_setzero_ps();
    let mut acc_bias = _mm512_setzero_ps();
    for i in 0..nb {
        let yb = y.add(i * 292);
        let (x0, x1) = (x.add(i * 110), x.add(rb + i * 110));
        prefetch_rows::<2>(x0, rb, 110);
        prefetch_rows::<2>(x1, rb, 110);
        let d = join_ps(
            f32_at(yb) * f16_at(x0.add(108)),
            f32_at(yb) * f16_at(x1.add(108)),
        );
        let (sc0, sc1) = (q3k_scales_i8(x0.add(96)), q3k_scales_i8(x1.add(96)));
        let bsums = _mm512_broadcast_i64x4(load256(yb.add(260)));
        let sc16 = join(_mm256_cvtepi8_epi16(sc0), _mm256_cvtepi8_epi16(sc1));
        let bias = _mm512_slli_epi32(_mm512_madd_epi16(sc16, bsums), 2);
        acc_bias = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(bias), acc_bias);
        let scv = join(
            _mm256_broadcastsi128_si256(sc0),
            _mm256_broadcastsi128_si256(sc1),
        );
        let hm = join(load256(x0), load256(x1));
        let mut sumi = _mm512_setzero_si512();
        for k in 0..2 {
            let q2 = join(load256(x0.add(32 + 32 * k)), load256(x1.add(32 + 32 * k)));
            for j in 0..4 {
                let c = 4 * k + j;
                let lo =
                    _mm512_and_si512(_mm512_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let hb = _mm512_and_si512(_mm512_srl_epi16(hm, _mm_cvtsi32_si128(c as i32)), one);
                let q = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));
                let a = _mm512_broadcast_i64x4(load256(yb.add(4 + 32 * c)));
                let p = _mm512_maddubs_epi16(q, a);
                let s = _mm512_srai_epi16(_mm512_shuffle_epi8(scv, ctrl[c]), 8);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, s));
            }
        }
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc);
    }
    [
        hsum_ps(half_ps(acc, false)) - hsum_ps(half_ps(acc_bias, false)),
        hsum_ps(half_ps(acc, true)) - hsum_ps(half_ps(acc_bias, true)),
    ]
}

/// Q2_K, two rows in one register, as [`q3_k_pair_impl`] is for Q3_K (`avx2::q2_k_impl`'s
/// operations in each 256-bit half: each row gets the family's single-row bits).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q2_k_pair_impl(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; 2] {
    let m3 = _mm512_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let ctrl: [__m512i; 8] = std::array::from_fn(|c| _mm512_broadcast_i64x4(pair_spread(c, false)));
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm512_setzero_ps();
    for i in 0..nb {
        let yb = y.add(i * 292);
        let (x0, x1) = (x.add(i * 84), x.add(rb + i * 84));
        prefetch_rows::<2>(x0, rb, 84);
        prefetch_rows::<2>(x1, rb, 84);
        let yd = f32_at(yb);
        let (p0, p1) = (
            _mm_loadu_si128(x0 as *const __m128i),
            _mm_loadu_si128(x1 as *const __m128i),
        );
        let scales = join(
            _mm256_broadcastsi128_si256(_mm_and_si128(p0, m4)),
            _mm256_broadcastsi128_si256(_mm_and_si128(p1, m4)),
        );
        let mins = join(
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(p0, 4), m4)),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(p1, 4), m4)),
        );
        let summs = _mm512_madd_epi16(mins, _mm512_broadcast_i64x4(load256(yb.add(260))));
        let dmin = join_ps(yd * f16_at(x0.add(82)), yd * f16_at(x1.add(82)));
        acc_min = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(summs), acc_min);
        let mut sumi = _mm512_setzero_si512();
        for k in 0..2 {
            let q2 = join(load256(x0.add(16 + 32 * k)), load256(x1.add(16 + 32 * k)));
            for j in 0..4 {
                let q = _mm512_and_si512(_mm512_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let a = _mm512_broadcast_i64x4(load256(yb.add(4 + 128 * k + 32 * j)));
                let p = _mm512_maddubs_epi16(q, a);
                let s = _mm512_shuffle_epi8(scales, ctrl[4 * k + j]);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, s));
            }
        }
        let d = join_ps(yd * f16_at(x0.add(80)), yd * f16_at(x1.add(80)));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc);
    }
    [
        hsum_ps(half_ps(acc, false)) - hsum_ps(half_ps(acc_min, false)),
        hsum_ps(half_ps(acc, true)) - hsum_ps(half_ps(acc_min, true)),
    ]
}

/// The low (`hi` false) or high eight lanes.
#[inline(always)]
unsafe fn half_ps(v: __m512, hi: bool) -> __m256 {
    let v = _mm512_castps_pd(v);
    _mm256_castpd_ps(if hi {
        _mm512_extractf64x4_pd::<1>(v)
    } else {
        _mm512_castpd512_pd256(v)
    })
}

/// One Q2_K row through the family's single-row kernel (AVX2's), for [`q2_k_rows`]' last row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_one(nb: usize, x: *const u8, _rb: usize, y: *const u8) -> [f32; 1] {
    [super::avx2::q2_k_impl(nb, x, y)]
}

/// One Q3_K row through the family's single-row kernel (AVX2's), for [`q3_k_rows`]' last row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_one(nb: usize, x: *const u8, _rb: usize, y: *const u8) -> [f32; 1] {
    [super::avx2::q3_k_impl(nb, x, y)]
}

/// Eight lanes of `a` then eight of `b`.
#[inline(always)]
unsafe fn join_ps(a: f32, b: f32) -> __m512 {
    _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_set1_ps(a)),
        _mm256_set1_ps(b),
        1,
    )
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q4_0_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    q4_0_rows_impl::<1>(nb, x, 0, y)[0]
}

/// [`q4_0_impl`] for `R` rows `rb` bytes apart: each row runs the same operations on its own
/// accumulator (its bits), the rows sharing the activation loads and their offset products;
/// several rows prefetch the next pass's rows ([`prefetch_rows`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q4_0_rows_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let m4 = _mm512_set1_epi8(0x0f);
    let eight = _mm512_set1_epi8(8);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i + 2 <= nb {
        let (ya, yb) = (y.add(i * 34), y.add(i * 34 + 34));
        let qy = join(load256(ya.add(2)), load256(yb.add(2)));
        let z = _mm512_setzero_si512();
        let off = _mm512_dpbusd_epi32(z, eight, qy);
        for (r, acc) in acc.iter_mut().enumerate() {
            let (xa, xb) = (x.add(r * rb + i * 18), x.add(r * rb + i * 18 + 18));
            prefetch_rows::<R>(xa, rb, 36);
            let ta = _mm_loadu_si128(xa.add(2) as *const __m128i);
            let tb = _mm_loadu_si128(xb.add(2) as *const __m128i);
            let qa = _mm256_set_m128i(_mm_srli_epi16(ta, 4), ta);
            let qb = _mm256_set_m128i(_mm_srli_epi16(tb, 4), tb);
            let q = _mm512_and_si512(join(qa, qb), m4);
            let p = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, qy), off);
            let d = join_ps(f16_at(xa) * f16_at(ya), f16_at(xb) * f16_at(yb));
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), *acc);
        }
        i += 2;
    }
    std::array::from_fn(|r| {
        let mut sum = _mm512_reduce_add_ps(acc[r]);
        if i < nb {
            sum += super::scalar_legacy::dot_q4_0(
                32,
                std::slice::from_raw_parts(x.add(r * rb + i * 18), 18),
                std::slice::from_raw_parts(y.add(i * 34), 34),
            );
        }
        sum
    })
}

/// `vpshufb` controls that spread the eight i16 sub-block scales (broadcast to every 128-bit
/// lane) so that the low 256 bits of vector j get scale 2j and the high 256 bits scale 2j + 1.
static K4_SCALE_CTRL: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut j = 0;
    while j < 4 {
        let mut b = 0;
        while b < 64 {
            let word = if b < 32 { 2 * j } else { 2 * j + 1 };
            t[j][b] = (2 * word + b % 2) as u8;
            b += 1;
        }
        j += 1;
    }
    t
};

/// Sixteen i16 lanes of scale 2j then sixteen of scale 2j + 1, for j = 0..4.
#[inline(always)]
unsafe fn k4_scale_vectors(sc: &[u8; 8], ctrl: &[__m512i; 4]) -> [__m512i; 4] {
    let s16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64(
        sc.as_ptr() as *const __m128i
    )));
    [
        _mm512_shuffle_epi8(s16, ctrl[0]),
        _mm512_shuffle_epi8(s16, ctrl[1]),
        _mm512_shuffle_epi8(s16, ctrl[2]),
        _mm512_shuffle_epi8(s16, ctrl[3]),
    ]
}

/// 32 packed nibble bytes as 64 codes: low nibbles in the low half, high nibbles in the high.
#[inline(always)]
pub(super) unsafe fn nibbles64(p: *const u8, m4: __m512i) -> __m512i {
    let v = _mm512_broadcast_i64x4(load256(p));
    _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF_0000, v, 4), m4)
}

fn k4_ctrl() -> [__m512i; 4] {
    // SAFETY: plain loads of a 64-byte static; AVX-512F is present whenever this is called.
    unsafe { std::array::from_fn(|j| _mm512_loadu_si512(K4_SCALE_CTRL[j].as_ptr() as *const _)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q4_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm512_set1_epi8(0x0f);
    let ctrl = k4_ctrl();
    let mut acc = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 144), y.add(i * 292));
        prefetch_ahead(xb, 144);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let scales = k4_scale_vectors(&sc, &ctrl);
        let mut sumi = _mm512_setzero_si512();
        for (j, scale) in scales.iter().enumerate() {
            let w = nibbles64(xb.add(16 + 32 * j), m4);
            let q8 = _mm512_loadu_si512(yb.add(4 + 64 * j) as *const _);
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w, q8), *scale);
        }
        let m = hsum_epi32(mins_bsums_v(&mn, yb.add(260)));
        acc = k4_fold(acc, f32_at(yb), xb, _mm512_reduce_add_epi32(sumi), m);
    }
    acc
}

/// [`q4_k_impl`] (`Q5` false) or [`q5_k_impl`] for COLS activation rows at once: each weight
/// block's scales, mins and codes are decoded once, then every token runs exactly the single
/// kernel's operations on its own accumulators (so each result has its bits).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn k4_cols_impl<const Q5: bool>(
    nb: usize,
    x: *const u8,
    y: [*const u8; COLS],
    out: &mut [f32; COLS],
) {
    let bs = if Q5 { 176 } else { 144 };
    let m4 = _mm512_set1_epi8(0x0f);
    let ctrl = k4_ctrl();
    let mut acc = [0.0f32; COLS];
    for i in 0..nb {
        let xb = x.add(i * bs);
        prefetch_ahead(xb, bs);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let scales = k4_scale_vectors(&sc, &ctrl);
        let w: [__m512i; 4] = if Q5 {
            std::array::from_fn(|j| q5_codes64(xb, j, m4))
        } else {
            std::array::from_fn(|j| nibbles64(xb.add(16 + 32 * j), m4))
        };
        for t in 0..COLS {
            let yb = y[t].add(i * 292);
            let mut sumi = _mm512_setzero_si512();
            for (j, scale) in scales.iter().enumerate() {
                let q8 = _mm512_loadu_si512(yb.add(4 + 64 * j) as *const _);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w[j], q8), *scale);
            }
            let m = hsum_epi32(mins_bsums_v(&mn, yb.add(260)));
            acc[t] = k4_fold(acc[t], f32_at(yb), xb, _mm512_reduce_add_epi32(sumi), m);
        }
    }
    *out = acc;
}

/// Codes 64j..64j+64 of the Q5_K block at `xb` (0..31 each, in element order): four low bits
/// from `qs`, the fifth from bit 2j (first 32) or 2j + 1 (last 32) of `qh`.
#[inline(always)]
pub(super) unsafe fn q5_codes64(xb: *const u8, j: usize, m4: __m512i) -> __m512i {
    let qh = load256(xb.add(16));
    let qh2 = join(qh, _mm256_srli_epi16(qh, 1));
    let h = _mm512_and_si512(
        _mm512_srl_epi16(qh2, _mm_cvtsi32_si128(2 * j as i32)),
        _mm512_set1_epi8(1),
    );
    _mm512_or_si512(nibbles64(xb.add(48 + 32 * j), m4), _mm512_slli_epi16(h, 4))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q5_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm512_set1_epi8(0x0f);
    let ctrl = k4_ctrl();
    let mut acc = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 176), y.add(i * 292));
        prefetch_ahead(xb, 176);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let scales = k4_scale_vectors(&sc, &ctrl);
        let mut sumi = _mm512_setzero_si512();
        for (j, scale) in scales.iter().enumerate() {
            let q8 = _mm512_loadu_si512(yb.add(4 + 64 * j) as *const _);
            let w = q5_codes64(xb, j, m4);
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w, q8), *scale);
        }
        let m = hsum_epi32(mins_bsums_v(&mn, yb.add(260)));
        acc = k4_fold(acc, f32_at(yb), xb, _mm512_reduce_add_epi32(sumi), m);
    }
    acc
}

/// Half `h` of a Q6_K block's 6-bit codes (0..63, in element order), as two 64-code vectors:
/// elements 128h..128h+64 and 128h+64..128h+128.
#[inline(always)]
pub(super) unsafe fn q6_codes64(xb: *const u8, h: usize) -> [__m512i; 2] {
    let m4 = _mm512_set1_epi8(0x0f);
    let m3 = _mm512_set1_epi8(3);
    let ql = _mm512_loadu_si512(xb.add(64 * h) as *const _);
    let qh = load256(xb.add(128 + 32 * h));
    let qh2 = join(qh, _mm256_srli_epi16(qh, 2));
    [
        _mm512_or_si512(
            _mm512_and_si512(ql, m4),
            _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4),
        ),
        _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), m3), 4),
        ),
    ]
}

/// `vpermw` indices picking, for each i16 lane of the Q6_K product vectors (half h, pair p: vector
/// 2h + p), the sub-block scale that covers it.
#[inline(always)]
unsafe fn q6k_scale_sel() -> [__m512i; 4] {
    // i16 lane index -> which of the 16 scales covers it: 128-bit lane L of the vector for
    // half h, pair p holds elements of 16-group 8h + 4p + L.
    let idx = |base: i16| {
        _mm512_set_epi16(
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base,
            base,
            base,
            base,
            base,
            base,
            base,
            base,
        )
    };
    [idx(0), idx(4), idx(8), idx(12)]
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q6_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    q6_k_rows_impl::<1>(nb, x, 0, y)[0]
}

/// [`q6_k_impl`] for `R` rows `rb` bytes apart: each row runs the same operations on its own
/// accumulator (its bits), the rows sharing the activation loads; several rows prefetch the
/// next pass's rows ([`prefetch_rows`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q6_k_rows_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let sel = q6k_scale_sel();
    let mut acc = [0.0f32; R];
    for i in 0..nb {
        let yb = y.add(i * 292);
        for (r, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(r * rb + i * 210);
            prefetch_rows::<R>(xb, rb, 210);
            let sc = xb.add(192);
            let sc16 =
                _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(sc as *const __m128i)));
            let mut sumi = _mm512_setzero_si512();
            for h in 0..2 {
                let [w01, w23] = q6_codes64(xb, h);
                for (p, w) in [(0, w01), (1, w23)] {
                    let q8 = _mm512_loadu_si512(yb.add(4 + 128 * h + 64 * p) as *const _);
                    let p16 = _mm512_maddubs_epi16(w, q8);
                    let s = _mm512_permutexvar_epi16(sel[2 * h + p], sc16);
                    sumi = _mm512_dpwssd_epi32(sumi, p16, s);
                }
            }
            let bias = hsum_epi32(scales_bsums_v(sc, yb.add(260)));
            *acc = q6_fold(*acc, f32_at(yb), xb, _mm512_reduce_add_epi32(sumi), bias);
        }
    }
    acc
}

/// [`q6_k_impl`] for COLS activation rows: each block's 6-bit codes and scale vectors are
/// built once, then every token runs `q6_k_impl`'s operations on its own accumulators.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn q6_k_cols_impl(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    let sel = q6k_scale_sel();
    let mut acc = [0.0f32; COLS];
    for i in 0..nb {
        let xb = x.add(i * 210);
        prefetch_ahead(xb, 210);
        let sc = xb.add(192);
        let sc16 =
            _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(sc as *const __m128i)));
        let mut w = [_mm512_setzero_si512(); 4];
        let mut s = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            [w[2 * h], w[2 * h + 1]] = q6_codes64(xb, h);
            s[2 * h] = _mm512_permutexvar_epi16(sel[2 * h], sc16);
            s[2 * h + 1] = _mm512_permutexvar_epi16(sel[2 * h + 1], sc16);
        }
        for t in 0..COLS {
            let yb = y[t].add(i * 292);
            let mut sumi = _mm512_setzero_si512();
            for h in 0..2 {
                for p in 0..2 {
                    let q8 = _mm512_loadu_si512(yb.add(4 + 128 * h + 64 * p) as *const _);
                    let p16 = _mm512_maddubs_epi16(w[2 * h + p], q8);
                    sumi = _mm512_dpwssd_epi32(sumi, p16, s[2 * h + p]);
                }
            }
            let bias = hsum_epi32(scales_bsums_v(sc, yb.add(260)));
            acc[t] = q6_fold(acc[t], f32_at(yb), xb, _mm512_reduce_add_epi32(sumi), bias);
        }
    }
    *out = acc;
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c,bmi2")]
unsafe fn iq4_xs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    iq4_xs_rows_impl::<1>(nb, x, 0, y)[0]
}

/// [`iq4_xs_impl`] for `R` rows `rb` bytes apart: each row runs the same operations on its own
/// accumulator (its bits), the rows sharing the activation loads; several rows prefetch the
/// next pass's rows ([`prefetch_rows`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c,bmi2")]
unsafe fn iq4_xs_rows_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let m4 = _mm512_set1_epi8(0x0f);
    let bias = _mm512_set1_epi16(32);
    let ctrl = k4_ctrl();
    let values = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let mut acc = [_mm512_setzero_ps(); R];
    for i in 0..nb {
        let yb = y.add(i * 292);
        for (r, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(r * rb + i * 136);
            prefetch_rows::<R>(xb, rb, 136);
            // The eight 6-bit scales, one per byte: low nibbles from `scales_l`, high 2 bits
            // from `scales_h`, both deposited in sub-block order with `pdep`.
            let h = (xb.add(2) as *const u16).read_unaligned() as u64;
            let l = (xb.add(4) as *const u32).read_unaligned() as u64;
            let ls8 = _pdep_u64(l, 0x0f0f_0f0f_0f0f_0f0f) | _pdep_u64(h, 0x3030_3030_3030_3030);
            let s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(ls8 as i64));
            let s16 = _mm512_sub_epi16(_mm512_broadcast_i32x4(s16), bias);
            let mut sumi = _mm512_setzero_si512();
            for (p, c) in ctrl.iter().enumerate() {
                let q = load256(xb.add(8 + 32 * p));
                // [lo(sub 2p) lo(sub 2p+1) hi(sub 2p) hi(sub 2p+1)] -> [lo hi | lo hi] per
                // sub-block.
                let t = _mm512_and_si512(join(q, _mm256_srli_epi16(q, 4)), m4);
                let codes = _mm512_shuffle_i64x2(t, t, 0b11_01_10_00);
                let v = _mm512_shuffle_epi8(values, codes);
                let q8 = _mm512_loadu_si512(yb.add(4 + 64 * p) as *const _);
                let neg = _mm512_movepi8_mask(v);
                let sy = _mm512_mask_sub_epi8(q8, neg, _mm512_setzero_si512(), q8);
                let p16 = _mm512_maddubs_epi16(_mm512_abs_epi8(v), sy);
                sumi = _mm512_dpwssd_epi32(sumi, p16, _mm512_shuffle_epi8(s16, *c));
            }
            let d = _mm512_set1_ps(f32_at(yb) * f16_at(xb));
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), *acc);
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
}
