//! IQ1_S against Q8_K on AVX-512.
//!
//! The AVX2 kernel (`avx2_iq1`) spends most of its instructions on the 11-bit grid indices
//! (two fields per 8 weights) and the per-sub-block scale and sum steps. Here each sub-block's
//! four indices come out of two `pdep`s on the scalar side (the low bytes and the three high
//! bits of each group spread into four 16-bit fields of one register), the sub-block scales
//! reach their lanes by a word permute, and one `vpmaddubsw` + `vpdpwssd` takes 64 weights.
//! Measured on Zen 5 against the alternatives (docs/performance.md): indices built in a vector
//! and moved out word by word, stored and reloaded, or fed to `vpgatherqq`, and grid rows merged
//! by masked broadcasts or copied through the stack were all 25-50% slower; the vector unit's
//! shuffle ports, not the loads, are what bound this kernel.
//!
//! As in the AVX2 kernel the grid is the copy shifted to 0, 1, 2 (the unsigned operand) and the
//! shift comes back out through the activation's block sums. The integer sums are exact and
//! each block's float term is the scalar reference's expression, added in block order: bit for
//! bit the reference.

use std::arch::x86_64::*;

use super::x86_util::*;
use crate::grids::{IQ1S_DELTA, IQ1S_GRID_P1};

/// Byte offsets in an IQ1_S block (d: f16, qs: 32 low index bytes, qh: 8 u16) and in a Q8_K
/// block (d: f32, qs: 256 i8, bsums: 16 i16).
const QS: usize = 2;
const QH: usize = 34;
const Y_QS: usize = 4;
const Y_BSUMS: usize = 260;

/// A 512-bit word-permute control: lane `l` reads word `f(l)`.
#[inline(always)]
unsafe fn words(f: impl Fn(usize) -> usize) -> __m512i {
    let w: [u16; 32] = std::array::from_fn(|l| f(l) as u16);
    _mm512_loadu_si512(w.as_ptr() as *const _)
}

/// The grid indices of sub-block `ib` of the block at `xb`, four 16-bit fields (group 0 lowest):
/// `qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8`.
#[inline(always)]
unsafe fn indices4(xb: *const u8, ib: usize) -> u64 {
    let lo = (xb.add(QS + 4 * ib) as *const u32).read_unaligned() as u64;
    let hi = (xb.add(QH + 2 * ib) as *const u16).read_unaligned() as u64;
    _pdep_u64(lo, 0x00ff_00ff_00ff_00ff) | _pdep_u64(hi, 0x0700_0700_0700_0700)
}

/// The grid rows of sub-blocks `ib` and `ib + 1` (eight shifted coordinates a row, a byte
/// each): 64 weights.
#[inline(always)]
unsafe fn rows8(xb: *const u8, ib: usize) -> __m512i {
    let (a, b) = (indices4(xb, ib), indices4(xb, ib + 1));
    let g =
        |i: u64, k: usize| *IQ1S_GRID_P1.get_unchecked(((i >> (16 * k)) & 0xffff) as usize) as i64;
    _mm512_set_epi64(
        g(b, 3),
        g(b, 2),
        g(b, 1),
        g(b, 0),
        g(a, 3),
        g(a, 2),
        g(a, 1),
        g(a, 0),
    )
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c,bmi2")]
pub unsafe fn iq1_s_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    // Scale lanes of 64 weights p: sub-block 2p in words 0..16, 2p + 1 in 16..32.
    let ls_sel: [__m512i; 4] = std::array::from_fn(|p| words(|l| 2 * p + l / 16));
    // Sub-block ib's scale next to both of its block sums (words 2ib, 2ib + 1).
    let ls_pairs = _mm512_castsi512_si256(words(|l| (l / 2) % 8));
    let seven = _mm512_set1_epi16(7);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 50), y.add(i * 292));
        prefetch_ahead(xb, 50);
        let qh = _mm_loadu_si128(xb.add(QH) as *const __m128i);
        // 2·((qh >> 12) & 7) + 1 per sub-block, in words 0..8.
        let ls = _mm512_add_epi16(
            _mm512_slli_epi16::<1>(_mm512_and_si512(
                _mm512_srli_epi16::<12>(_mm512_zextsi128_si512(qh)),
                seven,
            )),
            _mm512_set1_epi16(1),
        );
        let mut acc = _mm512_setzero_si512();
        for (p, sel) in ls_sel.iter().enumerate() {
            let g = rows8(xb, 2 * p);
            let q8 = _mm512_loadu_si512(yb.add(Y_QS + 64 * p) as *const _);
            // Pairs of (g+1)·q (at most 2·2·128), then each pair times its sub-block's scale.
            let pairs = _mm512_maddubs_epi16(g, q8);
            acc = _mm512_dpwssd_epi32(acc, pairs, _mm512_permutexvar_epi16(*sel, ls));
        }
        // ls·(bsum of the sub-block) per sub-block: the shift to take out, and the delta sum
        // with the sign of qh's bit 15.
        let bs = load256(yb.add(Y_BSUMS));
        let ls2 = _mm256_permutexvar_epi16(ls_pairs, _mm512_castsi512_si256(ls));
        let t = _mm256_madd_epi16(bs, ls2);
        let neg = _mm_movepi16_mask(qh) as __mmask8;
        let t1 = _mm256_mask_sub_epi32(t, neg, _mm256_setzero_si256(), t);
        let sumi = _mm512_reduce_add_epi32(acc) - hsum_epi32(t);
        let sumi1 = hsum_epi32(t1);
        sumf += f16_at(xb) * f32_at(yb) * (sumi as f32 + IQ1S_DELTA * sumi1 as f32);
    }
    sumf
}
