//! Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 against Q8_0 / Q8_1 with AVX2 (AVX-512 CPUs use these
//! too).
//!
//! These 32-element types ran only the scalar reference, about 1 GB/s a core. They differ only
//! in how a block's 32 codes become int8 values (nibbles, a fifth bit, a 16-entry table) and in
//! the block's float term, so one loop serves them all and each type is one [`Unit32`] row.
//!
//! Exactness: the weights are the signed operand of `vpmaddubsw` (never -128: the tables stop
//! at -127 and the offset codes at -16), the activation's sign moves onto them and its
//! magnitude (128 fits a u8) is the unsigned one, so the integer dots are exact for every
//! activation. Four blocks' dots are reduced together, then each block's float term is the
//! scalar reference's expression, added in block order: bit for bit the reference.

use std::arch::x86_64::*;

use super::scalar_legacy::e8m0_to_f32_half;
use super::x86_util::*;
use crate::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};

/// A 32-element weight type: its block bytes, its partner activation block's bytes (Q8_0: d,
/// qs; Q8_1: d, s, qs), its codes as int8 in element order, and the reference's float term
/// from the block's exact integer dot `s`.
pub(super) trait Unit32 {
    const TS: usize;
    const AS: usize;
    unsafe fn quants(x: *const u8) -> __m256i;
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32;
    /// `term` of blocks 0..4 at `x` and `y` (TS and AS bytes apart) from their dots `s`, as one
    /// vector: lane k is `term(x + k·TS, y + k·AS, s[k])` bit for bit (the same products, in the
    /// same order, rounded one at a time).
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128;
}

/// The f16 at `p`, `p + stride`, `p + 2·stride`, `p + 3·stride` as four floats.
#[inline(always)]
unsafe fn f16x4(p: *const u8, stride: usize) -> __m128 {
    let h = |k: usize| (p.add(k * stride) as *const i16).read_unaligned();
    _mm_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), 0, 0, 0, 0))
}

/// The 32 nibbles of `qs[16]`: elements 0..16 the low nibbles, 16..32 the high ones.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    let t = _mm_loadu_si128(qs as *const __m128i);
    _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16::<4>(t), t),
        _mm256_set1_epi8(0x0f),
    )
}

/// 0x10 in byte j where bit j of the little-endian u32 at `qh` is set.
#[inline(always)]
unsafe fn fifth_bits(qh: *const u8) -> __m256i {
    let w = (qh as *const u32).read_unaligned();
    _mm256_and_si256(bit_bytes(w), _mm256_set1_epi8(0x10))
}

/// `table[code]` for 32 codes below 16.
#[inline(always)]
unsafe fn lookup(table: &[i8; 16], codes: __m256i) -> __m256i {
    let t = _mm_loadu_si128(table.as_ptr() as *const __m128i);
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), codes)
}

/// The Q8_0-partner types' weight scale: their float term is `(d_a · scale) · s`, which the
/// AVX-512 GEMM tiles compute for sixteen tokens at once.
pub(super) trait Unit32Q8: Unit32 {
    unsafe fn wscale(x: *const u8) -> f32;
}

impl Unit32Q8 for Q50 {
    #[inline(always)]
    unsafe fn wscale(x: *const u8) -> f32 {
        f16_at(x)
    }
}

impl Unit32Q8 for Iq4Nl {
    #[inline(always)]
    unsafe fn wscale(x: *const u8) -> f32 {
        f16_at(x)
    }
}

impl Unit32Q8 for Mxfp4 {
    #[inline(always)]
    unsafe fn wscale(x: *const u8) -> f32 {
        E8M0_HALF[*x as usize]
    }
}

pub(super) struct Q41;
impl Unit32 for Q41 {
    const TS: usize = 20; // d, m, qs
    const AS: usize = 36;
    #[inline(always)]
    unsafe fn quants(x: *const u8) -> __m256i {
        nibbles(x.add(4))
    }
    #[inline(always)]
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32 {
        (f16_at(x) * f16_at(y)) * s as f32 + f16_at(x.add(2)) * f16_at(y.add(2))
    }
    #[inline(always)]
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128 {
        min_terms4::<Self>(x, y, s)
    }
}

pub(super) struct Q50;
impl Unit32 for Q50 {
    const TS: usize = 22; // d, qh, qs
    const AS: usize = 34;
    #[inline(always)]
    unsafe fn quants(x: *const u8) -> __m256i {
        let q = _mm256_or_si256(nibbles(x.add(6)), fifth_bits(x.add(2)));
        _mm256_sub_epi8(q, _mm256_set1_epi8(16))
    }
    #[inline(always)]
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32 {
        (f16_at(x) * f16_at(y)) * s as f32
    }
    #[inline(always)]
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128 {
        _mm_mul_ps(_mm_mul_ps(f16x4(x, Self::TS), f16x4(y, Self::AS)), s)
    }
}

pub(super) struct Q51;
impl Unit32 for Q51 {
    const TS: usize = 24; // d, m, qh, qs
    const AS: usize = 36;
    #[inline(always)]
    unsafe fn quants(x: *const u8) -> __m256i {
        _mm256_or_si256(nibbles(x.add(8)), fifth_bits(x.add(4)))
    }
    #[inline(always)]
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32 {
        (f16_at(x) * f16_at(y)) * s as f32 + f16_at(x.add(2)) * f16_at(y.add(2))
    }
    #[inline(always)]
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128 {
        min_terms4::<Self>(x, y, s)
    }
}

/// Q4_1's and Q5_1's `terms4`: `(d·d_a)·s + m·s_a` a lane (d, m leading the weight block; d_a,
/// s_a the Q8_1 block's).
#[inline(always)]
unsafe fn min_terms4<T: Unit32>(x: *const u8, y: *const u8, s: __m128) -> __m128 {
    let d = _mm_mul_ps(f16x4(x, T::TS), f16x4(y, T::AS));
    let m = _mm_mul_ps(f16x4(x.add(2), T::TS), f16x4(y.add(2), T::AS));
    _mm_add_ps(_mm_mul_ps(d, s), m)
}

pub(super) struct Iq4Nl;
impl Unit32 for Iq4Nl {
    const TS: usize = 18; // d, qs
    const AS: usize = 34;
    #[inline(always)]
    unsafe fn quants(x: *const u8) -> __m256i {
        lookup(&KVALUES_IQ4NL, nibbles(x.add(2)))
    }
    #[inline(always)]
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32 {
        (f16_at(y) * f16_at(x)) * s as f32
    }
    #[inline(always)]
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128 {
        _mm_mul_ps(_mm_mul_ps(f16x4(y, Self::AS), f16x4(x, Self::TS)), s)
    }
}

/// [`e8m0_to_f32_half`] of every E8M0 byte: one load a block instead of its branch and shift
/// (measured: MXFP4's one-token kernel 12% faster on Zen 5).
static E8M0_HALF: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut e = 0;
    while e < 256 {
        t[e] = e8m0_to_f32_half(e as u8);
        e += 1;
    }
    t
};

pub(super) struct Mxfp4;
impl Unit32 for Mxfp4 {
    const TS: usize = 17; // e (E8M0), qs
    const AS: usize = 34;
    #[inline(always)]
    unsafe fn quants(x: *const u8) -> __m256i {
        lookup(&KVALUES_MXFP4, nibbles(x.add(1)))
    }
    #[inline(always)]
    unsafe fn term(x: *const u8, y: *const u8, s: i32) -> f32 {
        (f16_at(y) * E8M0_HALF[*x as usize]) * s as f32
    }
    #[inline(always)]
    unsafe fn terms4(x: *const u8, y: *const u8, s: __m128) -> __m128 {
        let e = |k: usize| E8M0_HALF[*x.add(k * Self::TS) as usize];
        let dx = _mm_setr_ps(e(0), e(1), e(2), e(3));
        _mm_mul_ps(_mm_mul_ps(f16x4(y, Self::AS), dx), s)
    }
}

/// The exact integer dot of one weight block and its activation block.
#[inline(always)]
pub(super) unsafe fn block_dot<T: Unit32>(xb: *const u8, yb: *const u8) -> i32 {
    let a = load256(yb.add(T::AS - 32));
    let q = T::quants(xb);
    let p = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(q, a));
    hsum_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
}

/// `R` rows (`rb` bytes apart) against one activation row; each row's result is what the
/// one-row kernel gives it, bit for bit (the same integer dots, the same float terms added in
/// block order). The rows share each activation block and its magnitude, and their float
/// chains (one add a block, which bounds a single row) run side by side.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unit32_rows_impl<T: Unit32, const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let ones = _mm256_set1_epi16(1);
    let dot = |xr: *const u8, i: usize, a: __m256i, aa: __m256i| {
        let q = T::quants(xr.add(i * T::TS));
        _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(q, a)), ones)
    };
    let act = |i: usize| load256(y.add(i * T::AS + T::AS - 32));
    let mut sumf = [0.0f32; R];
    let mut i = 0;
    while i + 4 <= nb {
        let a: [__m256i; 4] = std::array::from_fn(|k| act(i + k));
        let aa = a.map(|v| _mm256_abs_epi8(v));
        for (r, sr) in sumf.iter_mut().enumerate() {
            let xr = x.add(r * rb);
            prefetch_rows_avx2::<R>(xr.add(i * T::TS), rb, 4 * T::TS);
            let v: [__m256i; 4] = std::array::from_fn(|k| dot(xr, i + k, a[k], aa[k]));
            // Lane k of 128-bit half h: block k's sum over its lanes 4h..4h+4.
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let t = T::terms4(xr.add(i * T::TS), y.add(i * T::AS), _mm_cvtepi32_ps(s4));
            // Added in block order, as the reference does.
            *sr += _mm_cvtss_f32(t);
            *sr += _mm_cvtss_f32(_mm_movehdup_ps(t));
            *sr += _mm_cvtss_f32(_mm_movehl_ps(t, t));
            *sr += _mm_cvtss_f32(_mm_shuffle_ps::<3>(t, t));
        }
        i += 4;
    }
    for i in i..nb {
        for (r, sr) in sumf.iter_mut().enumerate() {
            let (xb, yb) = (x.add(r * rb + i * T::TS), y.add(i * T::AS));
            *sr += T::term(xb, yb, block_dot::<T>(xb, yb));
        }
    }
    sumf
}
