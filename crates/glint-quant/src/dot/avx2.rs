//! AVX2 (+FMA, F16C) dot products.
//!
//! Integer parts are exact (products of a u8 weight code and an i8 activation summed with
//! `vpmaddubsw`, whose i16 pair sums cannot saturate for these formats: the largest is
//! 2 * 127 * 127 for IQ4 values), so each block's integer sum equals the scalar kernel's. The
//! per-block float scaling is accumulated in eight f32 lanes, a different order from ggml's
//! generic code, hence the small tolerance documented in the module above.
//!
//! Each safe wrapper checks the slice lengths before entering the `unsafe` kernel; they are only
//! handed out by [`kernel`] through `dot::kernel_for`, which first checks the CPU has AVX2.

use std::arch::x86_64::*;

use glint_gguf::GgmlType;

use super::x86_util::*;
use super::VecDotFn;
use crate::grids::{IQ2XXS_GRID, IQ3XXS_GRID, KVALUES_IQ4NL};

/// The AVX2 kernel for `ty`, if there is one.
pub fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => q4_0,
        Q8_0 => q8_0,
        Q2_K => q2_k,
        Q3_K => q3_k,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        IQ4_XS => iq4_xs,
        IQ2_XXS => iq2_xxs,
        IQ3_XXS => iq3_xxs,
        F32 => f32_,
        F16 => f16_,
        BF16 => bf16_,
        _ => return None,
    })
}

/// Asserts the rows hold `nb` blocks each; keeps the raw-pointer kernels in bounds.
#[inline(always)]
pub(super) fn blocks(n: usize, qk: usize, w: &[u8], wsize: usize, a: &[u8], asize: usize) -> usize {
    let nb = n / qk;
    assert!(
        n.is_multiple_of(qk) && w.len() >= nb * wsize && a.len() >= nb * asize,
        "dot row lengths"
    );
    nb
}

macro_rules! safe_kernel {
    ($name:ident, $imp:ident, $qk:expr, $wsize:expr, $asize:expr) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = blocks(n, $qk, w, $wsize, a, $asize);
            // SAFETY: lengths checked above; AVX2/FMA/F16C presence checked by `kernel_for`.
            unsafe { $imp(nb, w.as_ptr(), a.as_ptr()) }
        }
    };
}

safe_kernel!(q8_0, q8_0_impl, 32, 34, 34);
safe_kernel!(q4_0, q4_0_impl, 32, 18, 34);
safe_kernel!(q2_k, q2_k_impl, 256, 84, 292);
safe_kernel!(q3_k, q3_k_impl, 256, 110, 292);
safe_kernel!(q4_k, q4_k_impl, 256, 144, 292);
safe_kernel!(q5_k, q5_k_impl, 256, 176, 292);
safe_kernel!(q6_k, q6_k_impl, 256, 210, 292);
safe_kernel!(iq4_xs, iq4_xs_impl, 256, 136, 292);
safe_kernel!(iq2_xxs, iq2_xxs_impl, 256, 66, 292);
safe_kernel!(iq3_xxs, iq3_xxs_impl, 256, 98, 292);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 34), y.add(i * 34));
        prefetch_ahead(xb, 34);
        let d = _mm256_set1_ps(f16_at(xb) * f16_at(yb));
        let p = dot_i8_avx2(load256(xb.add(2)), load256(yb.add(2)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let off = _mm256_set1_epi8(8);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 18), y.add(i * 34));
        prefetch_ahead(xb, 18);
        let d = _mm256_set1_ps(f16_at(xb) * f16_at(yb));
        let t = _mm_loadu_si128(xb.add(2) as *const __m128i);
        let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        let p = dot_i8_avx2(_mm256_sub_epi8(q, off), load256(yb.add(2)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc)
}

/// `vpshufb` control that spreads scale byte `2c` over the low 128-bit lane's eight i16 slots
/// and byte `2c + 1` over the high lane's (the two 16-weight groups of 32-weight chunk `c`).
/// With `high`, the byte lands in each slot's high byte (for a signed `>> 8`), else in its low
/// byte with a zero high byte (index 0x80 writes zero).
#[inline(always)]
unsafe fn pair_spread(c: usize, high: bool) -> __m256i {
    let slot = |b: usize| -> i16 {
        if high {
            ((b << 8) | 0x80) as i16
        } else {
            (0x8000 | b) as i16
        }
    };
    _mm256_set_m128i(_mm_set1_epi16(slot(2 * c + 1)), _mm_set1_epi16(slot(2 * c)))
}

/// Q2_K: byte 0..16 scales (low nibble scale, high nibble min, one pair per 16 weights),
/// 16..80 two-bit codes (byte `l` of 32-byte half `k` holds weights `128k + 32j + l` in bits
/// `2j..2j+2`), then `d` and `dmin`. The mins term is `dmin * sum(min_j * bsums_j)`, done
/// with one `vpmaddwd` against the activation's 16-element sums.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 84), y.add(i * 292));
        prefetch_ahead(xb, 84);
        let yd = f32_at(yb);
        let packed = _mm_loadu_si128(xb as *const __m128i);
        let scales = _mm256_broadcastsi128_si256(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        let summs = _mm256_madd_epi16(mins, load256(yb.add(260)));
        let dmin = _mm256_set1_ps(yd * f16_at(xb.add(82)));
        acc_min = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(summs), acc_min);
        let mut sumi = _mm256_setzero_si256();
        for k in 0..2 {
            let q2 = load256(xb.add(16 + 32 * k));
            for j in 0..4 {
                let q = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let p = _mm256_maddubs_epi16(q, load256(yb.add(4 + 128 * k + 32 * j)));
                let s = _mm256_shuffle_epi8(scales, pair_spread(4 * k + j, false));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        let d = _mm256_set1_ps(yd * f16_at(xb.add(80)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_min)
}

/// The sixteen Q3_K scales with the bias 32 removed, as i8 lanes: low nibbles in bytes 0..8
/// (two per byte, scales 0..8 then 8..16), high two bits in bytes 8..12 (scale `j` in byte
/// `8 + j % 4`, bits `2 * (j / 4)`). Done a word at a time so all sixteen come out of a few
/// shifts and masks.
#[inline(always)]
unsafe fn q3k_scales_i8(p: *const u8) -> __m128i {
    const LO4: u32 = 0x0f0f_0f0f;
    const LO2: u32 = 0x0303_0303;
    let a0 = (p as *const u32).read_unaligned();
    let a1 = (p.add(4) as *const u32).read_unaligned();
    let hi = (p.add(8) as *const u32).read_unaligned();
    let v = _mm_set_epi32(
        (((a1 >> 4) & LO4) | (((hi >> 6) & LO2) << 4)) as i32,
        (((a0 >> 4) & LO4) | (((hi >> 4) & LO2) << 4)) as i32,
        ((a1 & LO4) | (((hi >> 2) & LO2) << 4)) as i32,
        ((a0 & LO4) | ((hi & LO2) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// Q3_K: weight = `(q2 | 4 * hbit) - 4` with q2 the two low bits (laid out as Q2_K's) and hbit
/// from `hmask`. The unsigned `q2 | 4 * hbit` (0..7) feeds `vpmaddubsw` directly; the `- 4`
/// is taken out afterwards as `4 * sum(scale_j * bsums_j)`, exact in integers, the same trick
/// the Q6_K kernel uses for its bias 32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_bias = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 110), y.add(i * 292));
        prefetch_ahead(xb, 110);
        let d = _mm256_set1_ps(f32_at(yb) * f16_at(xb.add(108)));
        let sc = q3k_scales_i8(xb.add(96));
        let sb = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(yb.add(260)));
        let bias = _mm256_slli_epi32(sb, 2);
        acc_bias = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(bias), acc_bias);
        let scv = _mm256_broadcastsi128_si256(sc);
        let hm = load256(xb);
        let mut sumi = _mm256_setzero_si256();
        for k in 0..2 {
            let q2 = load256(xb.add(32 + 32 * k));
            for j in 0..4 {
                let c = 4 * k + j;
                let lo =
                    _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(c as i32)), one);
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                let p = _mm256_maddubs_epi16(q, load256(yb.add(4 + 32 * c)));
                let s = _mm256_srai_epi16(_mm256_shuffle_epi8(scv, pair_spread(c, true)), 8);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_bias)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 144), y.add(i * 292));
        prefetch_ahead(xb, 144);
        let yd = f32_at(yb);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let dmin = _mm256_set1_ps(yd * f16_at(xb.add(2)));
        acc_min = _mm256_fmadd_ps(
            dmin,
            _mm256_cvtepi32_ps(mins_bsums_v(&mn, yb.add(260))),
            acc_min,
        );
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q4 = load256(xb.add(16 + 32 * j));
            let lo = _mm256_and_si256(q4, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            let pl = _mm256_maddubs_epi16(lo, load256(yb.add(4 + 64 * j)));
            let ph = _mm256_maddubs_epi16(hi, load256(yb.add(36 + 64 * j)));
            let pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j] as i16));
            let ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1] as i16));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let d = _mm256_set1_ps(yd * f16_at(xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_min)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 176), y.add(i * 292));
        prefetch_ahead(xb, 176);
        let yd = f32_at(yb);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let dmin = _mm256_set1_ps(yd * f16_at(xb.add(2)));
        acc_min = _mm256_fmadd_ps(
            dmin,
            _mm256_cvtepi32_ps(mins_bsums_v(&mn, yb.add(260))),
            acc_min,
        );
        let qh = load256(xb.add(16));
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q4 = load256(xb.add(48 + 32 * j));
            let h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32)), one);
            let h1 = _mm256_and_si256(
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                one,
            );
            let lo = _mm256_or_si256(_mm256_and_si256(q4, m4), _mm256_slli_epi16(h0, 4));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4),
                _mm256_slli_epi16(h1, 4),
            );
            let pl = _mm256_maddubs_epi16(lo, load256(yb.add(4 + 64 * j)));
            let ph = _mm256_maddubs_epi16(hi, load256(yb.add(36 + 64 * j)));
            let pl = _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j] as i16));
            let ph = _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1] as i16));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let d = _mm256_set1_ps(yd * f16_at(xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_min)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    let mut acc_bias = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 210), y.add(i * 292));
        prefetch_ahead(xb, 210);
        let d = f32_at(yb) * f16_at(xb.add(208));
        let sc = xb.add(192);
        let bias = _mm256_cvtepi32_ps(_mm256_slli_epi32(scales_bsums_v(sc, yb.add(260)), 5));
        acc_bias = _mm256_fmadd_ps(_mm256_set1_ps(d), bias, acc_bias);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let ql1 = load256(xb.add(64 * h));
            let ql2 = load256(xb.add(64 * h + 32));
            let qh = load256(xb.add(128 + 32 * h));
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql2, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql2, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4),
                ),
            ];
            for (k, qk) in q.iter().enumerate() {
                let p = _mm256_maddubs_epi16(*qk, load256(yb.add(4 + 128 * h + 32 * k)));
                let s0 = *sc.add(8 * h + 2 * k) as i8 as i16;
                let s1 = *sc.add(8 * h + 2 * k + 1) as i8 as i16;
                let s = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_bias)
}

/// The 6-bit scale (bias 32 removed) of 32-group `ib` of an IQ4_XS block.
#[inline(always)]
pub(super) unsafe fn iq4xs_scale(xb: *const u8, ib: usize) -> i16 {
    let h = (xb.add(2) as *const u16).read_unaligned() as u32;
    let lo = (*xb.add(4 + ib / 2) >> (4 * (ib % 2))) & 0x0f;
    (lo as u32 | (((h >> (2 * ib)) & 3) << 4)) as i16 - 32
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 136), y.add(i * 292));
        prefetch_ahead(xb, 136);
        let mut sumi = _mm256_setzero_si256();
        for p in 0..4 {
            let q = load256(xb.add(8 + 32 * p));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            for (s, codes) in [
                (0, _mm256_permute2x128_si256(lo, hi, 0x20)),
                (1, _mm256_permute2x128_si256(lo, hi, 0x31)),
            ] {
                let v = _mm256_shuffle_epi8(values, codes);
                let q8 = load256(yb.add(4 + 64 * p + 32 * s));
                let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q8, v));
                let ls = _mm256_set1_epi16(iq4xs_scale(xb, 2 * p + s));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, ls));
            }
        }
        let d = _mm256_set1_ps(f32_at(yb) * f16_at(xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// Sign bytes (+1/-1) for four 8-weight groups from the four 7-bit fields of `aux`.
#[inline(always)]
pub(super) unsafe fn iq_signs(aux: u32) -> __m256i {
    _mm256_set_epi64x(
        SIGNS_PM1[((aux >> 21) & 127) as usize] as i64,
        SIGNS_PM1[((aux >> 14) & 127) as usize] as i64,
        SIGNS_PM1[((aux >> 7) & 127) as usize] as i64,
        SIGNS_PM1[(aux & 127) as usize] as i64,
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq2_xxs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 66), y.add(i * 292));
        prefetch_ahead(xb, 66);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let q = xb.add(2 + 8 * ib);
            let a0 = (q as *const u32).read_unaligned();
            let a1 = (q.add(4) as *const u32).read_unaligned();
            let g = _mm256_set_epi64x(
                IQ2XXS_GRID[(a0 >> 24) as usize] as i64,
                IQ2XXS_GRID[((a0 >> 16) & 255) as usize] as i64,
                IQ2XXS_GRID[((a0 >> 8) & 255) as usize] as i64,
                IQ2XXS_GRID[(a0 & 255) as usize] as i64,
            );
            let q8 = _mm256_sign_epi8(load256(yb.add(4 + 32 * ib)), iq_signs(a1));
            let p16 = _mm256_maddubs_epi16(g, q8);
            let ls = _mm256_set1_epi16(2 * (a1 >> 28) as i16 + 1);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, ls));
        }
        let d = _mm256_set1_ps(f32_at(yb) * f16_at(xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    0.125 * hsum_ps(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq3_xxs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 98), y.add(i * 292));
        prefetch_ahead(xb, 98);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let q3 = xb.add(2 + 8 * ib);
            let aux = (xb.add(66 + 4 * ib) as *const u32).read_unaligned();
            let gi = |k: usize| IQ3XXS_GRID[*q3.add(k) as usize] as i32;
            let g = _mm256_set_epi32(gi(7), gi(6), gi(5), gi(4), gi(3), gi(2), gi(1), gi(0));
            let q8 = _mm256_sign_epi8(load256(yb.add(4 + 32 * ib)), iq_signs(aux));
            let p16 = _mm256_maddubs_epi16(g, q8);
            let ls = _mm256_set1_epi16(2 * (aux >> 28) as i16 + 1);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, ls));
        }
        let d = _mm256_set1_ps(f32_at(yb) * f16_at(xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    0.25 * hsum_ps(acc)
}

/// Float rows (F32 / F16 / BF16 weights against activations of the same format). ggml's x86
/// kernels also accumulate these in f32 vector lanes; the scalar reference mirrors its generic
/// code (f64 sum), so the two differ by f32 rounding of the partial sums.
fn f32_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 4 * n && a.len() >= 4 * n, "dot row lengths");
    // SAFETY: lengths checked; AVX2/FMA presence checked by `kernel_for`.
    unsafe { float_impl::<4>(n, w.as_ptr(), a.as_ptr()) }
}

fn f16_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 2 * n && a.len() >= 2 * n, "dot row lengths");
    // SAFETY: as above (F16C too).
    unsafe { float_impl::<2>(n, w.as_ptr(), a.as_ptr()) }
}

fn bf16_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 2 * n && a.len() >= 2 * n, "dot row lengths");
    // SAFETY: as above.
    unsafe { float_impl::<3>(n, w.as_ptr(), a.as_ptr()) }
}

/// Eight elements at `p` as f32: `KIND` 4 = f32, 2 = f16, 3 = bf16.
#[inline(always)]
unsafe fn load8<const KIND: usize>(p: *const u8) -> __m256 {
    match KIND {
        4 => _mm256_loadu_ps(p as *const f32),
        2 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        _ => _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
            16,
        )),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_impl<const KIND: usize>(n: usize, x: *const u8, y: *const u8) -> f32 {
    let es = if KIND == 4 { 4 } else { 2 };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        prefetch_ahead(x.add(i * es), 32 * es);
        for (k, a) in acc.iter_mut().enumerate() {
            let off = (i + 8 * k) * es;
            *a = _mm256_fmadd_ps(load8::<KIND>(x.add(off)), load8::<KIND>(y.add(off)), *a);
        }
        i += 32;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum_ps(v);
    let scalar = match KIND {
        4 => super::scalar_float::dot_f32,
        2 => super::scalar_float::dot_f16,
        _ => super::scalar_float::dot_bf16,
    };
    if i < n {
        let rest = n - i;
        sum += scalar(
            rest,
            std::slice::from_raw_parts(x.add(i * es), rest * es),
            std::slice::from_raw_parts(y.add(i * es), rest * es),
        );
    }
    sum
}
