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
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unit32_impl<T: Unit32>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let dot = |i: usize| {
        let q = T::quants(x.add(i * T::TS));
        let a = load256(y.add(i * T::AS + T::AS - 32));
        let p = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(q, a));
        _mm256_madd_epi16(p, ones)
    };
    let mut sumf = 0.0f32;
    let mut i = 0;
    while i + 4 <= nb {
        prefetch_ahead_avx2(x.add(i * T::TS), 4 * T::TS);
        let (v0, v1, v2, v3) = (dot(i), dot(i + 1), dot(i + 2), dot(i + 3));
        // Lane k of 128-bit half h: block k's sum over its lanes 4h..4h+4.
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        let mut s = [0i32; 4];
        _mm_storeu_si128(s.as_mut_ptr() as *mut __m128i, s4);
        for (k, &sk) in s.iter().enumerate() {
            sumf += T::term(x.add((i + k) * T::TS), y.add((i + k) * T::AS), sk);
        }
        i += 4;
    }
    for i in i..nb {
        sumf += T::term(x.add(i * T::TS), y.add(i * T::AS), hsum_epi32(dot(i)));
    }
    sumf
}
