//! IQ1_S (AVX-512 CPUs use `avx512_iq1`) and IQ1_M against Q8_K with AVX2.
//!
//! The grid coordinates are -1, 0, +1; the kernel reads them from a copy of the grid shifted
//! to 0, 1, 2 so that `vpmaddubsw` (unsigned x signed) multiplies them with the activations,
//! and takes the shift back out with the activation block sums Q8_K already carries:
//! `Σ g·q = Σ (g+1)·q − Σ q`. (`vpsignb` on the unshifted grid would be one step shorter but
//! wraps the activation value -128, which Q8_K produces.) The integer sums are exact and each
//! block's float term is the scalar reference's expression added in block order, so the result
//! is bit for bit the reference's.

use std::arch::x86_64::*;

use super::avx2_iq_signed::halves16;
use super::x86_util::*;
use super::COLS;
use crate::grids::{IQ1S_DELTA, IQ1S_GRID_P1};

/// Byte offsets in an IQ1_S block (d: f16, qs: 32 low index bytes, qh: 8 u16) and in a Q8_K
/// block (d: f32, qs: 256 i8, bsums: 16 i16).
const QS: usize = 2;
const QH: usize = 34;
const Y_QS: usize = 4;
const Y_BSUMS: usize = 260;

/// One block's decoded grid indices and scale word pairs, stored by [`Scratch::prep`] and read
/// back by [`Scratch::sub`].
#[derive(Clone, Copy)]
struct Scratch {
    idx: [u32; 32],
    lsw: [i32; 8],
}

impl Scratch {
    const NEW: Self = Self {
        idx: [0; 32],
        lsw: [0; 8],
    };

    /// Stores block `xb`'s 32 grid indices (sub-block ib's group l at 4ib + l) and its eight
    /// `2·scale + 1` word pairs; returns `qh` widened (lane ib: qh[ib]) and the word pairs.
    #[inline(always)]
    unsafe fn prep(&mut self, xb: *const u8) -> (__m256i, __m256i) {
        // Lane (ib, l) of a two-sub-block vector takes group l's three bits of qh[ib].
        let shifts = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
        let (seven, one) = (_mm256_set1_epi32(7), _mm256_set1_epi32(1));
        let qh = _mm256_cvtepu16_epi32(_mm_loadu_si128(xb.add(QH) as *const __m128i));
        for k in 0..4 {
            let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(xb.add(QS + 8 * k) as *const __m128i));
            let (a, b) = (2 * k as i32, 2 * k as i32 + 1);
            let h = _mm256_permutevar8x32_epi32(qh, _mm256_setr_epi32(a, a, a, a, b, b, b, b));
            let h = _mm256_and_si256(_mm256_srlv_epi32(h, shifts), seven);
            let v = _mm256_or_si256(lo, _mm256_slli_epi32(h, 8));
            _mm256_storeu_si256(self.idx.as_mut_ptr().add(8 * k) as *mut __m256i, v);
        }
        let ls = _mm256_or_si256(
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 12), seven), 1),
            one,
        );
        let lsp = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
        _mm256_storeu_si256(self.lsw.as_mut_ptr() as *mut __m256i, lsp);
        (qh, lsp)
    }

    /// Sub-block `ib`'s 32 grid values (shifted to 0, 1, 2) and its scale word pair in every
    /// lane.
    #[inline(always)]
    unsafe fn sub(&self, ib: usize) -> (__m256i, __m256i) {
        // Volatile so that they are read back as loads, not extracted from the vectors they
        // were stored from (`vpextrd` is two operations on Zen, a load one). SAFETY: within
        // the arrays; every index is a byte plus three bits shifted by 8, below 2048, the
        // grid's length.
        let at = |l: usize| std::ptr::read_volatile(self.idx.as_ptr().add(4 * ib + l)) as usize;
        let grid = |l: usize| *IQ1S_GRID_P1.get_unchecked(at(l)) as i64;
        let g = _mm256_set_epi64x(grid(3), grid(2), grid(1), grid(0));
        let ls = _mm256_set1_epi32(std::ptr::read_volatile(self.lsw.as_ptr().add(ib)));
        (g, ls)
    }
}

/// Pairs of (g+1)·q (at most 2·2·128 in magnitude) for the 32 activations at `q8`, then `ls`
/// times each pair, as i32 lanes.
#[inline(always)]
unsafe fn scaled(g: __m256i, ls: __m256i, q8: *const u8) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(g, load256(q8)), ls)
}

/// A block's float term from its lanes of scaled products: the reference's
/// `d_x·d_y·(Σ (g+1)·q·ls − Σ ls·bsum + δ·Σ ±ls·bsum)`.
#[inline(always)]
unsafe fn term(acc: __m256i, qh: __m256i, lsp: __m256i, xb: *const u8, yb: *const u8) -> f32 {
    // Lane ib: ls · (bsums[2ib] + bsums[2ib+1]), and -1 where the delta is negative.
    let lsb = _mm256_madd_epi16(load256(yb.add(Y_BSUMS)), lsp);
    let neg = _mm256_srai_epi32(_mm256_slli_epi32(qh, 16), 31);
    let sumi = hsum_epi32(_mm256_sub_epi32(acc, lsb));
    let sumi1 = hsum_epi32(_mm256_sub_epi32(_mm256_xor_si256(lsb, neg), neg));
    f16_at(xb) * f32_at(yb) * (sumi as f32 + IQ1S_DELTA * sumi1 as f32)
}

/// The float terms of the `N` consecutive blocks at `x` against the Q8_K blocks at `y`, their
/// sub-blocks interleaved so that one block's final sums overlap the others' products. Plain
/// loops: this helper has no `#[target_feature]` of its own (it is inlined into the kernels),
/// so a closure written here and handed to `array::from_fn` or `map` would carry no AVX2, and
/// wherever std's generic stays out of line its intrinsics become calls (15x slower).
#[inline(always)]
unsafe fn block_terms<const N: usize>(
    x: *const u8,
    y: *const u8,
    sc: &mut [Scratch; N],
) -> [f32; N] {
    let z = _mm256_setzero_si256();
    let (mut qh, mut lsp, mut acc) = ([z; N], [z; N], [z; N]);
    for j in 0..N {
        (qh[j], lsp[j]) = sc[j].prep(x.add(50 * j));
    }
    for ib in 0..8 {
        for j in 0..N {
            let (g, ls) = sc[j].sub(ib);
            let q8 = y.add(292 * j + Y_QS + 32 * ib);
            acc[j] = _mm256_add_epi32(acc[j], scaled(g, ls, q8));
        }
    }
    let mut out = [0.0f32; N];
    for j in 0..N {
        out[j] = term(acc[j], qh[j], lsp[j], x.add(50 * j), y.add(292 * j));
    }
    out
}

/// IQ1_S against one Q8_K row. A block's index and scale work is done in vectors first: a
/// sub-block's four grid indices each took a byte load and three or four shifts and masks, and
/// its scale and block-sum terms another dozen scalar steps, so the kernel was bound by its
/// instruction count (~45 a sub-block; 1.0-1.3 GiB/s on one Zen 3 core, L2-resident or not).
/// Here a block's 32 indices (the low byte and three `qh` bits each) and eight scale word
/// pairs are formed in a few vector steps and stored, the loop reads them back with plain loads
/// (~15 instructions a sub-block), and the `Σ ls·bsum` terms (the grid's shift and the delta)
/// are one `vpmaddwd` over the block's sixteen activation sums. Blocks go two at a time; their
/// float terms are still added in block order, so the bits are the scalar reference's.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1_s_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let mut sc = [Scratch::NEW; 2];
    let mut sumf = 0.0f32;
    let mut i = 0;
    while i + 2 <= nb {
        let xb = x.add(i * 50);
        prefetch_ahead_avx2(xb, 100);
        for t in block_terms::<2>(xb, y.add(i * 292), &mut sc) {
            sumf += t;
        }
        i += 2;
    }
    if i < nb {
        let mut one = [Scratch::NEW];
        sumf += block_terms::<1>(x.add(i * 50), y.add(i * 292), &mut one)[0];
    }
    sumf
}

/// IQ1_S against [`COLS`] Q8_K rows (a prompt's tokens): each sub-block is decoded once for
/// all of them; each token's sums and float terms are the one-token kernel's, so its bits too.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1_s_cols(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    let mut sc = Scratch::NEW;
    *out = [0.0; COLS];
    for i in 0..nb {
        let xb = x.add(i * 50);
        prefetch_ahead_avx2(xb, 50);
        let (qh, lsp) = sc.prep(xb);
        let mut acc = [_mm256_setzero_si256(); COLS];
        for ib in 0..8 {
            let (g, ls) = sc.sub(ib);
            for t in 0..COLS {
                let q8 = y[t].add(i * 292 + Y_QS + 32 * ib);
                acc[t] = _mm256_add_epi32(acc[t], scaled(g, ls, q8));
            }
        }
        for t in 0..COLS {
            out[t] += term(acc[t], qh, lsp, xb, y[t].add(i * 292));
        }
    }
}

/// IQ1_M: the IQ1_S grid, three high index bits and a delta sign per 8-weight group, two 3-bit
/// scales per 32 weights, and the block's f16 scale spread over the top nibbles of the four
/// scale words. The delta term needs the activation summed per 8 weights (Q8_K's block sums are
/// per 16), so a second `vpmaddubsw` against ones gives those pairs; `Σ g·q` is then the shifted
/// grid's pairs minus them, exact in i16. Each sub-block's two scales fill the halves of one i16
/// vector and its four delta signs go onto them with `vpsignw` (no `pdep`: it is microcoded on
/// Zen 1/2, which run this family). Written for `T` activation rows (the multi-token
/// kernel decodes each sub-block once for all of them); each row's arithmetic is the same
/// whatever `T`, and bit for bit the reference's.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq1_m_rows<const T: usize>(nb: usize, x: *const u8, y: [*const u8; T]) -> [f32; T] {
    // Block: qs [u8; 32] at 0, qh [u8; 16] at 32, scales [u8; 8] at 48 (four u16).
    let grid = |i: usize| IQ1S_GRID_P1[i] as i64;
    let ones = _mm256_set1_epi8(1);
    // Group l's delta bit (bit 3 of qh byte l/2 for even l, bit 7 for odd) in its four lanes.
    let dbit = _mm256_setr_epi16(
        0x08, 0x08, 0x08, 0x08, 0x80, 0x80, 0x80, 0x80, 0x0800, 0x0800, 0x0800, 0x0800, -0x8000,
        -0x8000, -0x8000, -0x8000,
    );
    let mut sumf = [0.0f32; T];
    for i in 0..nb {
        let xb = x.add(i * 56);
        prefetch_ahead_avx2(xb, 56);
        let sc: [u64; 4] =
            std::array::from_fn(|k| (xb.add(48 + 2 * k) as *const u16).read_unaligned() as u64);
        let scale_bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let scale = half::f16::from_bits(scale_bits as u16).to_f32();
        let (mut acc1, mut acc2) = ([_mm256_setzero_si256(); T], [_mm256_setzero_si256(); T]);
        for ib in 0..8 {
            let qh = (xb.add(32 + 2 * ib) as *const u16).read_unaligned() as usize;
            let idx = |l: usize| {
                let h = (qh >> (8 * (l / 2) + 4 * (l % 2))) & 7;
                *xb.add(4 * ib + l) as usize | h << 8
            };
            let g = _mm256_set_epi64x(grid(idx(3)), grid(idx(2)), grid(idx(1)), grid(idx(0)));
            let bits = (sc[ib / 2] >> (6 * (ib % 2))) as i32;
            let ls = halves16(2 * (bits & 7) + 1, 2 * ((bits >> 3) & 7) + 1);
            let neg =
                _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(qh as i16), dbit), dbit);
            let lsd = _mm256_sign_epi16(ls, _mm256_or_si256(neg, _mm256_set1_epi16(1)));
            for t in 0..T {
                let q8 = load256(y[t].add(i * 292 + Y_QS + 32 * ib));
                let p = _mm256_maddubs_epi16(g, q8);
                let s = _mm256_maddubs_epi16(ones, q8);
                acc1[t] = _mm256_add_epi32(acc1[t], _mm256_madd_epi16(_mm256_sub_epi16(p, s), ls));
                acc2[t] = _mm256_add_epi32(acc2[t], _mm256_madd_epi16(s, lsd));
            }
        }
        for t in 0..T {
            let (sumi1, sumi2) = (hsum_epi32(acc1[t]), hsum_epi32(acc2[t]));
            sumf[t] +=
                scale * f32_at(y[t].add(i * 292)) * (sumi1 as f32 + IQ1S_DELTA * sumi2 as f32);
        }
    }
    sumf
}

/// IQ1_M, one activation row.
pub unsafe fn iq1_m_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    iq1_m_rows::<1>(nb, x, [y])[0]
}

/// IQ1_M, [`COLS`] activation rows.
pub unsafe fn iq1_m_cols(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    *out = iq1_m_rows::<COLS>(nb, x, y);
}
