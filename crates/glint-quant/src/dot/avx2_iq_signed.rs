//! The signed-grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) against Q8_K with AVX2;
//! AVX-512 CPUs use these too, except where `avx512_iq` has a kernel.
//!
//! Each 8 weights are a grid row (magnitudes, a byte each) and 8 sign bits (IQ2_XXS, IQ2_XS,
//! IQ3_XXS: a 7-bit field expanded by the parity table, the others: a whole byte); a sub-block
//! of 32 weights is four rows in one register, multiplied by the activation with `vpmaddubsw`
//! and scaled by its sub-block scales with `vpmaddwd`. Each type is one [`SignedGrid`] row: how
//! a sub-block decodes. The same decode feeds the one-token and multi-token kernels here and
//! the AVX-512 GEMM tiles (`avx512_gemm_signed`).
//!
//! Exactness: `vpmaddubsw` takes one unsigned operand, and negating the activation (as the
//! IQ2_XXS kernel does) wraps Q8_K's -128. So the signs go on the grid (`|g| < 64`, never
//! wraps), the activation's own sign moves onto that, and its magnitude (128 fits a u8) is the
//! unsigned operand: `Σ |q|·(±g·sgn q) = Σ q·(±g)`. The integer sums are then exact, and each
//! block's float term is the scalar reference's expression added in block order, so the result
//! is bit for bit the reference's.

use std::arch::x86_64::*;

use super::x86_util::*;
use super::COLS;
use crate::grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

const Y_QS: usize = 4;

/// Pairs of `q·w` as i16 (at most 2·128·62): `w` the signed grid values (never -128), `q` the
/// activation bytes.
#[inline(always)]
unsafe fn signed_pairs(w: __m256i, q: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(w, q))
}

/// `T` activation rows' step: each row's 32 activations at byte `off` against the signed grid
/// values `w`, scaled by `ls` and added to its sums.
#[inline(always)]
unsafe fn tokens_step<const T: usize>(
    sumi: &mut [__m256i; T],
    y: &[*const u8; T],
    off: usize,
    w: __m256i,
    ls: __m256i,
) {
    for (s, yt) in sumi.iter_mut().zip(y) {
        let p = signed_pairs(w, load256(yt.add(off)));
        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(p, ls));
    }
}

/// ±1 bytes from four sign bytes (group l's byte in bits 8l..8l+8 of `w`): bit j of a group's
/// byte is the sign of its weight j.
#[inline(always)]
unsafe fn byte_signs(w: u32) -> __m256i {
    _mm256_or_si256(bit_bytes(w), _mm256_set1_epi8(1))
}

/// `lo` in the eight i16 lanes of the low half (elements 0..16), `hi` in the high half.
#[inline(always)]
pub(super) unsafe fn halves16(lo: i32, hi: i32) -> __m256i {
    _mm256_setr_m128i(_mm_set1_epi16(lo as i16), _mm_set1_epi16(hi as i16))
}

/// The reference's block step for each row: `sumf += (d_x·d_y)·bsum`, blocks in order.
#[inline(always)]
unsafe fn block_terms<const T: usize>(
    sumf: &mut [f32; T],
    xb: *const u8,
    y: &[*const u8; T],
    i: usize,
    sumi: &[__m256i; T],
) {
    for t in 0..T {
        let d = f16_at(xb) * f32_at(y[t].add(i * 292));
        sumf[t] += d * hsum_epi32(sumi[t]) as f32;
    }
}

/// A signed-grid type: block bytes, the reference's final factor, and sub-block `ib`'s 32
/// signed grid values (element order) with the scales of its two 16-weight halves.
pub(super) trait SignedGrid {
    const TS: usize;
    const FACTOR: f32;
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32);
}

/// Sign bytes (+1/-1) for four 8-weight groups from the four 7-bit fields of `aux`.
#[inline(always)]
unsafe fn parity_signs(aux: u32) -> __m256i {
    _mm256_set_epi64x(
        SIGNS_PM1[((aux >> 21) & 127) as usize] as i64,
        SIGNS_PM1[((aux >> 14) & 127) as usize] as i64,
        SIGNS_PM1[((aux >> 7) & 127) as usize] as i64,
        SIGNS_PM1[(aux & 127) as usize] as i64,
    )
}

pub(super) struct Iq2Xxs;
impl SignedGrid for Iq2Xxs {
    // d f16, then per 32 weights four grid index bytes and a u32 of four 7-bit sign fields and
    // a 4-bit scale.
    const TS: usize = 66;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32) {
        let q = xb.add(2 + 8 * ib);
        let (a0, a1) = (
            (q as *const u32).read_unaligned(),
            (q.add(4) as *const u32).read_unaligned(),
        );
        let g = |l: u32| IQ2XXS_GRID[((a0 >> (8 * l)) & 255) as usize] as i64;
        let w = _mm256_sign_epi8(_mm256_set_epi64x(g(3), g(2), g(1), g(0)), parity_signs(a1));
        let ls = 2 * (a1 >> 28) as i32 + 1;
        (w, ls, ls)
    }
}

pub(super) struct Iq3Xxs;
impl SignedGrid for Iq3Xxs {
    // d f16, 64 grid index bytes (eight per 32 weights, four values each), then per 32 weights
    // a u32 of four 7-bit sign fields and a 4-bit scale.
    const TS: usize = 98;
    const FACTOR: f32 = 0.25;
    #[inline(always)]
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32) {
        let q3 = xb.add(2 + 8 * ib);
        let aux = (xb.add(66 + 4 * ib) as *const u32).read_unaligned();
        let gi = |k: usize| IQ3XXS_GRID[*q3.add(k) as usize] as i32;
        let g = _mm256_set_epi32(gi(7), gi(6), gi(5), gi(4), gi(3), gi(2), gi(1), gi(0));
        let ls = 2 * (aux >> 28) as i32 + 1;
        (_mm256_sign_epi8(g, parity_signs(aux)), ls, ls)
    }
}

pub(super) struct Iq2Xs;
impl SignedGrid for Iq2Xs {
    // d f16, qs [u16; 32] (9-bit grid index, 7-bit sign field), scales [u8; 8].
    const TS: usize = 74;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32) {
        let q = |l: usize| (xb.add(2 + 8 * ib + 2 * l) as *const u16).read_unaligned() as usize;
        let (q0, q1, q2, q3) = (q(0), q(1), q(2), q(3));
        let g = _mm256_set_epi64x(
            IQ2XS_GRID[q3 & 511] as i64,
            IQ2XS_GRID[q2 & 511] as i64,
            IQ2XS_GRID[q1 & 511] as i64,
            IQ2XS_GRID[q0 & 511] as i64,
        );
        let s = _mm256_set_epi64x(
            SIGNS_PM1[q3 >> 9] as i64,
            SIGNS_PM1[q2 >> 9] as i64,
            SIGNS_PM1[q1 >> 9] as i64,
            SIGNS_PM1[q0 >> 9] as i64,
        );
        let sc = *xb.add(66 + ib) as i32;
        (
            _mm256_sign_epi8(g, s),
            2 * (sc & 0x0f) + 1,
            2 * (sc >> 4) + 1,
        )
    }
}

pub(super) struct Iq2S;
impl SignedGrid for Iq2S {
    // d f16, qs [u8; 64] (32 low index bytes, then 32 sign bytes), qh [u8; 8] (two high index
    // bits a group), scales [u8; 8].
    const TS: usize = 82;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32) {
        let qh = *xb.add(66 + ib) as usize;
        let idx = |l: usize| *xb.add(2 + 4 * ib + l) as usize | ((qh << (8 - 2 * l)) & 0x300);
        let g = _mm256_set_epi64x(
            IQ2S_GRID[idx(3)] as i64,
            IQ2S_GRID[idx(2)] as i64,
            IQ2S_GRID[idx(1)] as i64,
            IQ2S_GRID[idx(0)] as i64,
        );
        let s = byte_signs((xb.add(34 + 4 * ib) as *const u32).read_unaligned());
        let sc = *xb.add(74 + ib) as i32;
        (
            _mm256_sign_epi8(g, s),
            2 * (sc & 0x0f) + 1,
            2 * (sc >> 4) + 1,
        )
    }
}

pub(super) struct Iq3S;
impl SignedGrid for Iq3S {
    // d f16, qs [u8; 64] (low index bytes, two a group), qh [u8; 8] (the ninth bits), signs
    // [u8; 32], scales [u8; 4] (a nibble a sub-block).
    const TS: usize = 110;
    const FACTOR: f32 = 1.0;
    #[inline(always)]
    unsafe fn sub(xb: *const u8, ib: usize) -> (__m256i, i32, i32) {
        let qs = xb.add(2 + 8 * ib);
        let qh = *xb.add(66 + ib) as usize;
        // Entry k (two a group): qs[k] and bit k of qh as the ninth bit.
        let gi = |k: usize| IQ3S_GRID[*qs.add(k) as usize | ((qh << (8 - k)) & 256)] as i32;
        let g = _mm256_set_epi32(gi(7), gi(6), gi(5), gi(4), gi(3), gi(2), gi(1), gi(0));
        let s = byte_signs((xb.add(74 + 4 * ib) as *const u32).read_unaligned());
        let ls = 2 * ((*xb.add(106 + ib / 2) >> (4 * (ib % 2))) & 0x0f) as i32 + 1;
        (_mm256_sign_epi8(g, s), ls, ls)
    }
}

/// `T` activation rows against one row of type `G`: each row's arithmetic is the same whatever
/// `T` (the multi-token kernel gives every token the one-token kernel's bits).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn signed_impl<G: SignedGrid, const T: usize>(
    nb: usize,
    x: *const u8,
    y: [*const u8; T],
) -> [f32; T] {
    let mut sumf = [0.0f32; T];
    for i in 0..nb {
        let xb = x.add(i * G::TS);
        prefetch_ahead_avx2(xb, G::TS);
        let mut sumi = [_mm256_setzero_si256(); T];
        for ib in 0..8 {
            let (w, lo, hi) = G::sub(xb, ib);
            tokens_step(&mut sumi, &y, i * 292 + Y_QS + 32 * ib, w, halves16(lo, hi));
        }
        block_terms(&mut sumf, xb, &y, i, &sumi);
    }
    sumf.map(|s| G::FACTOR * s)
}

/// The one-row entry point.
pub(super) unsafe fn signed_one<G: SignedGrid>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    signed_impl::<G, 1>(nb, x, [y])[0]
}

/// The [`COLS`]-row entry point.
pub(super) unsafe fn signed_cols<G: SignedGrid>(
    nb: usize,
    x: *const u8,
    y: [*const u8; COLS],
    out: &mut [f32; COLS],
) {
    *out = signed_impl::<G, COLS>(nb, x, y);
}

/// IQ2_XXS and IQ3_XXS: each sub-block's signs and scale in one u32 (four 7-bit sign fields,
/// the eighth sign of a group being the parity of its seven, and the scale in the top nibble).
/// [`parity_one`] forms a block's sign bytes and scales for all eight sub-blocks at once.
pub(super) trait ParitySigned: SignedGrid {
    /// The block's eight sign-and-scale words, sub-block ib in lane ib.
    unsafe fn aux(xb: *const u8) -> __m256i;
    /// Sub-block ib's 32 grid magnitudes (unsigned, element order).
    unsafe fn grid(xb: *const u8, ib: usize) -> __m256i;
}

impl ParitySigned for Iq2Xxs {
    #[inline(always)]
    unsafe fn aux(xb: *const u8) -> __m256i {
        // Sub-block ib's eight bytes: four grid indices, then its word; two loads of four.
        let odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
        let lo = _mm256_permutevar8x32_epi32(load256(xb.add(2)), odd);
        let hi = _mm256_permutevar8x32_epi32(load256(xb.add(34)), odd);
        _mm256_blend_epi32::<0xf0>(lo, hi)
    }
    #[inline(always)]
    unsafe fn grid(xb: *const u8, ib: usize) -> __m256i {
        let q = xb.add(2 + 8 * ib);
        let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize] as i64;
        _mm256_set_epi64x(g(3), g(2), g(1), g(0))
    }
}

impl ParitySigned for Iq3Xxs {
    #[inline(always)]
    unsafe fn aux(xb: *const u8) -> __m256i {
        load256(xb.add(66))
    }
    #[inline(always)]
    unsafe fn grid(xb: *const u8, ib: usize) -> __m256i {
        let q3 = xb.add(2 + 8 * ib);
        let gi = |k: usize| IQ3XXS_GRID[*q3.add(k) as usize] as i32;
        _mm256_set_epi32(gi(7), gi(6), gi(5), gi(4), gi(3), gi(2), gi(1), gi(0))
    }
}

/// The block's sign bytes (lane ib: byte l is group l's eight sign bits, the eighth the parity
/// of the seven) and `2·scale + 1` word pairs, from its eight words.
#[inline(always)]
unsafe fn signs_and_scales(aux: __m256i) -> (__m256i, __m256i) {
    let m7 = _mm256_set1_epi32(0x7f);
    // The 7-bit fields at bits 0, 7, 14, 21 moved to bytes 0..4.
    let f = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_and_si256(aux, m7),
            _mm256_and_si256(_mm256_slli_epi32(aux, 1), _mm256_slli_epi32(m7, 8)),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_slli_epi32(aux, 2), _mm256_slli_epi32(m7, 16)),
            _mm256_and_si256(_mm256_slli_epi32(aux, 3), _mm256_slli_epi32(m7, 24)),
        ),
    );
    // Three shift-xors leave in bit 0 of each byte the xor of that byte's eight bits (its bit 7
    // is 0): bit 0 only ever takes bits 4, 2 and 1 places up, all in the same byte; the other
    // bits, which mix in the next byte's, are masked off.
    let p = _mm256_xor_si256(f, _mm256_srli_epi32(f, 4));
    let p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    let p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    let parity = _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(0x0101_0101)), 7);
    let ls = _mm256_or_si256(
        _mm256_slli_epi32(_mm256_srli_epi32(aux, 28), 1),
        _mm256_set1_epi32(1),
    );
    (
        _mm256_or_si256(f, parity),
        _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16)),
    )
}

/// IQ2_XXS / IQ3_XXS against one Q8_K row, the bits of [`signed_one`]. Why not that kernel:
/// per sub-block it looked up four sign words in the parity table and assembled them (four
/// index extractions, four loads, three shuffles) and built its scale from scalar steps, ~45
/// instructions a sub-block with the grid lookups, which bound it on Zen 3. Here the block's
/// 32 sign bytes and eight scales are formed in one pass of vector steps; a sub-block takes
/// its sign mask from them with a permute, a byte shuffle, an and and a compare, and negates
/// its grid values with an xor and a subtract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn parity_one<G: ParitySigned>(nb: usize, x: *const u8, y: *const u8) -> f32 {
    // Group l's sign byte (byte l of the lane) to its eight weights' bytes.
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * G::TS), y.add(i * 292));
        prefetch_ahead_avx2(xb, G::TS);
        let (signs, lsp) = signs_and_scales(G::aux(xb));
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let lane = _mm256_set1_epi32(ib as i32);
            let s = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(signs, lane), spread);
            // 0xff where the weight is negative: the grid value negated as (g ^ m) - m.
            let m = _mm256_cmpeq_epi8(_mm256_and_si256(s, bits), bits);
            let w = _mm256_sub_epi8(_mm256_xor_si256(G::grid(xb, ib), m), m);
            let p = signed_pairs(w, load256(yb.add(Y_QS + 32 * ib)));
            let ls = _mm256_permutevar8x32_epi32(lsp, lane);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, ls));
        }
        let d = f16_at(xb) * f32_at(yb);
        sumf += d * hsum_epi32(sumi) as f32;
    }
    G::FACTOR * sumf
}
