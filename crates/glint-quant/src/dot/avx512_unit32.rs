//! Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4, four rows a pass, on AVX-512 with VNNI and VBMI.
//!
//! The AVX2 kernel (`avx2_unit32`) spends about 17 instructions a block a row: the 16-byte
//! nibble split, the sign trick `vpmaddubsw` needs, a horizontal reduction per block and the
//! block's float term. It is instruction-bound at about half of one core's memory stream.
//! Here two blocks' codes come out of one 64-byte load with one byte permute, one
//! `vpmultishiftqb` (each byte takes its nibble) and one table `vpermb`; the codes are made
//! unsigned by an offset (`vpdpbusd` sums four products in i32, so no pair can saturate) whose
//! product with the activation is the accumulator's start, shared by the four rows; and four
//! rows × four blocks are reduced together, so that one vector holds all sixteen integer sums
//! and one the sixteen float terms.
//!
//! Exactness: the integer sums are exact, each float term is the scalar reference's expression
//! (the same products, rounded one at a time, never fused), and each row adds its terms in
//! block order from 0.0: bit for bit the reference, as the AVX2 kernels are.

use std::arch::x86_64::*;

use super::avx2::rows_entry;
use super::avx2_unit32::{block_dot, unit32_rows_impl, Iq4Nl, Mxfp4, Unit32, Q41, Q50, Q51};
use super::x86_util::*;
use crate::grids::{KVALUES_IQ4NL, KVALUES_MXFP4};

/// Whether this CPU has what these kernels use beyond the AVX-512 family's baseline.
pub fn available() -> bool {
    is_x86_feature_detected!("avx512vbmi")
}

/// A [`Unit32`] type's codes and scales in the layout of two blocks loaded together.
pub(super) trait Unit32Zmm: Unit32 {
    /// Offset of the 16 code bytes in a block.
    const QS: usize;
    /// What the unsigned codes exceed the values by.
    const OFF: u8;
    const DUP: [u8; 64] = dup_index(Self::TS, Self::QS);
    const E8M0_AT_0: [u8; 64] = scale_index(Self::TS, 4, 1, 0);
    const F16_AT_0: [u8; 64] = scale_index(Self::TS, 2, 2, 0);
    const F16_AT_2: [u8; 64] = scale_index(Self::TS, 2, 2, 2);
    /// Two blocks' unsigned codes, block 0 in bytes 0..32: `nib` holds each element's nibble
    /// in bits 0..4 of its byte (bits above are another nibble's); `l` is the two blocks.
    unsafe fn codes(nib: __m512i, l: __m512i) -> __m512i;
    /// The sixteen float terms, lane `4k + r` for block `k` of row `r`: `sc` the rows'
    /// two loads each (blocks 0-1 and 2-3), `yb` the first activation block, `s` the sums.
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512;
}

/// Four rows' two loads: `[row][pair]`.
pub(super) type Pairs = [[__m512i; 2]; 4];

/// A 64-byte `vpermb` table: byte `i` is `t[i & 15] + off` (the permute reads six index bits;
/// bits 4 and 5 of a nibble byte belong to the next nibble).
const fn table64(t: &[i8; 16], off: u8) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        b[i] = (t[i & 15] as u8).wrapping_add(off);
        i += 1;
    }
    b
}

static MXFP4_CODES: [u8; 64] = table64(&KVALUES_MXFP4, 128);
static IQ4NL_CODES: [u8; 64] = table64(&KVALUES_IQ4NL, 128);

/// A byte permute (two sources: index bit 6 picks the second) that puts block `k`'s scale of
/// a row's two loads (blocks 0-1, 2-3; blocks `ts` bytes apart) in element `4k + r` of
/// `size`-byte elements: the `width` bytes at `soff` of the block.
const fn scale_index(ts: usize, size: usize, width: usize, soff: usize) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut l = 0;
    while l < 64 {
        let k = (l / size) / 4;
        let j = if l % size < width {
            l % size
        } else {
            width - 1
        };
        b[l] = (((k / 2) << 6) | ((k % 2) * ts + soff + j)) as u8;
        l += 1;
    }
    b
}

/// Row `r`'s bytes of [`scale_index`]'s result: elements `4k + r`, their first `width` bytes.
const fn scale_keep(size: usize, width: usize) -> [u64; 4] {
    let mut m = [0u64; 4];
    let mut l = 0;
    while l < 64 {
        let e = l / size;
        if e < 16 && l % size < width {
            m[e % 4] |= 1 << l;
        }
        l += 1;
    }
    m
}

const KEEP_E8M0: [u64; 4] = scale_keep(4, 1);
const KEEP_F16: [u64; 4] = scale_keep(2, 2);

/// Output qword `m` of block `b` (bytes `32b + 8m..`) takes code bytes `8(m % 2)..` of block
/// `b`: qwords 0, 1 give elements 0..16 (low nibbles), 2, 3 elements 16..32 (high nibbles).
const fn dup_index(ts: usize, qs: usize) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut l = 0;
    while l < 64 {
        b[l] = ((l / 32) * ts + qs + 8 * ((l / 8) % 2) + l % 8) as u8;
        l += 1;
    }
    b
}

/// `vpmultishiftqb` controls: byte `j` of a qword takes the low nibble of source byte `j`
/// (qwords 0, 1 of each block) or its high nibble (qwords 2, 3).
const SPLIT: [u8; 64] = {
    let mut b = [0u8; 64];
    let mut l = 0;
    while l < 64 {
        b[l] = (8 * (l % 8) + if (l / 8) % 4 >= 2 { 4 } else { 0 }) as u8;
        l += 1;
    }
    b
};

#[inline(always)]
unsafe fn ld(t: &[u8; 64]) -> __m512i {
    _mm512_loadu_si512(t.as_ptr() as *const _)
}

/// The four rows' scales chosen by `idx`, merged by the rows' masks.
#[inline(always)]
unsafe fn merge_scales(sc: &Pairs, idx: &[u8; 64], keep: &[u64; 4]) -> __m512i {
    let idx = ld(idx);
    let mut out = _mm512_setzero_si512();
    for (pair, &k) in sc.iter().zip(keep) {
        out = _mm512_or_si512(
            out,
            _mm512_maskz_permutex2var_epi8(k, pair[0], idx, pair[1]),
        );
    }
    out
}

/// The E8M0 byte leading each block, as dwords in the `4k + r` layout.
#[inline(always)]
unsafe fn e8m0_scales<T: Unit32Zmm>(sc: &Pairs) -> __m512i {
    merge_scales(sc, &T::E8M0_AT_0, &KEEP_E8M0)
}

/// The f16 at byte 0 (`HI`: byte 2) of each block, as floats in the `4k + r` layout.
#[inline(always)]
unsafe fn f16_scales<T: Unit32Zmm, const HI: bool>(sc: &Pairs) -> __m512 {
    let idx = if HI { &T::F16_AT_2 } else { &T::F16_AT_0 };
    let h = merge_scales(sc, idx, &KEEP_F16);
    _mm512_cvtph_ps(_mm512_castsi512_si256(h))
}

/// The activation blocks' f16 at byte `off` of the four blocks at `yb`, as floats with block
/// k's value in elements 4k..4k+4.
#[inline(always)]
unsafe fn act_f16<T: Unit32>(yb: *const u8, off: usize) -> __m512 {
    let h = |k: usize| (yb.add(k * T::AS + off) as *const i16).read_unaligned();
    let v = _mm_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), 0, 0, 0, 0));
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(v))
}

/// A `vpermb` index giving each element byte `j` of two blocks (block `j / 32`) the byte of
/// its block's `qh` word (at byte `qh` of blocks `ts` apart) that holds its fifth bit.
const fn qh_index(ts: usize, qh: usize) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        b[j] = ((j / 32) * ts + qh + (j % 32) / 8) as u8;
        j += 1;
    }
    b
}

static Q50_QH: [u8; 64] = qh_index(22, 2);
static Q51_QH: [u8; 64] = qh_index(24, 4);
/// Byte `j`: the bit of element `j` within its `qh` byte.
static QH_BIT: [u8; 64] = {
    let mut b = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        b[j] = 1 << (j % 8);
        j += 1;
    }
    b
};

/// Adds 16 to the codes `q` whose fifth bit is set, the `qh` words found by `index` in `l`.
#[inline(always)]
unsafe fn with_fifth_bits(q: __m512i, l: __m512i, index: &[u8; 64]) -> __m512i {
    let bits = _mm512_permutexvar_epi8(ld(index), l);
    let k = _mm512_test_epi8_mask(bits, ld(&QH_BIT));
    _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16))
}

impl Unit32Zmm for Mxfp4 {
    const QS: usize = 1;
    const OFF: u8 = 128;
    #[inline(always)]
    unsafe fn codes(nib: __m512i, _l: __m512i) -> __m512i {
        _mm512_permutexvar_epi8(nib, ld(&MXFP4_CODES))
    }
    #[inline(always)]
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
        // E8M0 half-scale: e >= 2 is the normal 2^(e-128), e < 2 the subnormal 0x200000 << e.
        let e = e8m0_scales::<Self>(sc);
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let big = _mm512_cmpgt_epu32_mask(e, _mm512_set1_epi32(1));
        let dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(big, sub, normal));
        // The reference's `(d_a · e) · s`.
        _mm512_mul_ps(_mm512_mul_ps(act_f16::<Self>(yb, 0), dw), s)
    }
}

impl Unit32Zmm for Iq4Nl {
    const QS: usize = 2;
    const OFF: u8 = 128;
    #[inline(always)]
    unsafe fn codes(nib: __m512i, _l: __m512i) -> __m512i {
        _mm512_permutexvar_epi8(nib, ld(&IQ4NL_CODES))
    }
    #[inline(always)]
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
        let dw = f16_scales::<Self, false>(sc);
        _mm512_mul_ps(_mm512_mul_ps(act_f16::<Self>(yb, 0), dw), s)
    }
}

impl Unit32Zmm for Q50 {
    const QS: usize = 6;
    const OFF: u8 = 16;
    #[inline(always)]
    unsafe fn codes(nib: __m512i, l: __m512i) -> __m512i {
        let q = _mm512_and_si512(nib, _mm512_set1_epi8(0x0f));
        with_fifth_bits(q, l, &Q50_QH)
    }
    #[inline(always)]
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
        // The reference's `(d · d_a) · s`.
        _mm512_mul_ps(
            _mm512_mul_ps(f16_scales::<Self, false>(sc), act_f16::<Self>(yb, 0)),
            s,
        )
    }
}

impl Unit32Zmm for Q41 {
    const QS: usize = 4;
    const OFF: u8 = 0;
    #[inline(always)]
    unsafe fn codes(nib: __m512i, _l: __m512i) -> __m512i {
        _mm512_and_si512(nib, _mm512_set1_epi8(0x0f))
    }
    #[inline(always)]
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
        min_terms::<Self>(sc, yb, s)
    }
}

impl Unit32Zmm for Q51 {
    const QS: usize = 8;
    const OFF: u8 = 0;
    #[inline(always)]
    unsafe fn codes(nib: __m512i, l: __m512i) -> __m512i {
        let q = _mm512_and_si512(nib, _mm512_set1_epi8(0x0f));
        with_fifth_bits(q, l, &Q51_QH)
    }
    #[inline(always)]
    unsafe fn terms(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
        min_terms::<Self>(sc, yb, s)
    }
}

/// Q4_1's and Q5_1's `(d·d_a)·s + m·s_a` (d, m leading the weight block; d_a, s_a the Q8_1
/// block's).
#[inline(always)]
unsafe fn min_terms<T: Unit32Zmm>(sc: &Pairs, yb: *const u8, s: __m512) -> __m512 {
    let d = _mm512_mul_ps(f16_scales::<T, false>(sc), act_f16::<T>(yb, 0));
    let m = _mm512_mul_ps(f16_scales::<T, true>(sc), act_f16::<T>(yb, 2));
    _mm512_add_ps(_mm512_mul_ps(d, s), m)
}

/// Four rows (`rb` bytes apart) against one activation row: each row's result is the scalar
/// reference's bits.
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2"
)]
pub(super) unsafe fn unit32_rows4<T: Unit32Zmm>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; 4] {
    let ts = T::TS;
    let pair_mask: u64 = (1u64 << (2 * ts)) - 1;
    let (dup, split) = (ld(&T::DUP), ld(&SPLIT));
    let act = |yb: *const u8| {
        let q = |k: usize| load256(yb.add(k * T::AS + T::AS - 32));
        [
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(0)), q(1)),
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(2)), q(3)),
        ]
    };
    let mut acc = _mm_setzero_ps();
    let mut i = 0;
    while i + 4 <= nb {
        let yb = y.add(i * T::AS);
        let a = act(yb);
        // -OFF·(sum of each dword's four activations): what the offset codes add back.
        let start = a.map(|v| {
            if T::OFF == 0 {
                _mm512_setzero_si512()
            } else {
                let o =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(T::OFF as i8), v);
                _mm512_sub_epi32(_mm512_setzero_si512(), o)
            }
        });
        let mut sc: Pairs = [[_mm512_setzero_si512(); 2]; 4];
        let mut u = [_mm512_setzero_si512(); 4];
        for r in 0..4 {
            let xb = x.add(r * rb + i * ts);
            prefetch_next_pass(xb.wrapping_add(4 * rb), 4 * ts);
            let mut p = [_mm512_setzero_si512(); 2];
            for h in 0..2 {
                let pb = xb.add(2 * h * ts);
                let l = _mm512_maskz_loadu_epi8(pair_mask, pb as *const i8);
                sc[r][h] = l;
                let nib = _mm512_multishift_epi64_epi8(split, _mm512_permutexvar_epi8(dup, l));
                p[h] = _mm512_dpbusd_epi32(start[h], T::codes(nib, l), a[h]);
            }
            // Lane k: block k's four partial sums.
            let lo = _mm512_shuffle_i32x4::<0x88>(p[0], p[1]);
            let hi = _mm512_shuffle_i32x4::<0xdd>(p[0], p[1]);
            u[r] = _mm512_add_epi32(lo, hi);
        }
        // Element 4k + r: block k's sum of row r.
        let v01 = _mm512_add_epi32(
            _mm512_unpacklo_epi32(u[0], u[1]),
            _mm512_unpackhi_epi32(u[0], u[1]),
        );
        let v23 = _mm512_add_epi32(
            _mm512_unpacklo_epi32(u[2], u[3]),
            _mm512_unpackhi_epi32(u[2], u[3]),
        );
        let s = _mm512_add_epi32(
            _mm512_unpacklo_epi64(v01, v23),
            _mm512_unpackhi_epi64(v01, v23),
        );
        let t = T::terms(&sc, yb, _mm512_cvtepi32_ps(s));
        // Added in block order, as the reference does.
        acc = _mm_add_ps(acc, _mm512_castps512_ps128(t));
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps::<1>(t));
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps::<2>(t));
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps::<3>(t));
        i += 4;
    }
    let mut sums = [0f32; 4];
    _mm_storeu_ps(sums.as_mut_ptr(), acc);
    for i in i..nb {
        for (r, sr) in sums.iter_mut().enumerate() {
            let xb = x.add(r * rb + i * ts);
            let yb = y.add(i * T::AS);
            *sr += T::term(xb, yb, block_dot::<T>(xb, yb));
        }
    }
    sums
}

/// The rows entry of type `$t`: four rows a pass, the last `rows % 4` through the AVX2
/// kernel (the same bits).
macro_rules! rows4_entry {
    ($name:ident, $t:ty) => {
        rows_entry!(
            pub(super) $name,
            4,
            32,
            <$t as Unit32>::TS,
            <$t as Unit32>::AS,
            unit32_rows4::<$t>,
            unit32_rows_impl::<$t, 1>
        );
    };
}

rows4_entry!(q4_1_rows4, Q41);
rows4_entry!(q5_0_rows4, Q50);
rows4_entry!(q5_1_rows4, Q51);
rows4_entry!(iq4_nl_rows4, Iq4Nl);
rows4_entry!(mxfp4_rows4, Mxfp4);
