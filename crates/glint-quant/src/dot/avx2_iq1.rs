//! IQ1_S against Q8_K with AVX2 (AVX-512 CPUs use `avx512_iq1`).
//!
//! The grid coordinates are -1, 0, +1; the kernel reads them from a copy of the grid shifted
//! to 0, 1, 2 so that `vpmaddubsw` (unsigned x signed) multiplies them with the activations,
//! and takes the shift back out with the activation block sums Q8_K already carries:
//! `Σ g·q = Σ (g+1)·q − Σ q`. (`vpsignb` on the unshifted grid would be one step shorter but
//! wraps the activation value -128, which Q8_K produces.) The integer sums are exact and each
//! block's float term is the scalar reference's expression added in block order, so the result
//! is bit for bit the reference's.

use std::arch::x86_64::*;

use super::x86_util::*;
use crate::grids::{IQ1S_DELTA, IQ1S_GRID_P1};

/// Byte offsets in an IQ1_S block (d: f16, qs: 32 low index bytes, qh: 8 u16) and in a Q8_K
/// block (d: f32, qs: 256 i8, bsums: 16 i16).
const QS: usize = 2;
const QH: usize = 34;
const Y_QS: usize = 4;
const Y_BSUMS: usize = 260;

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn iq1_s_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let grid = |i: usize| IQ1S_GRID_P1[i] as i64;
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 50), y.add(i * 292));
        prefetch_ahead_avx2(xb, 50);
        let mut acc = _mm256_setzero_si256();
        let (mut shift, mut sumi1) = (0i32, 0i32);
        for ib in 0..8 {
            let qh = (xb.add(QH + 2 * ib) as *const u16).read_unaligned() as usize;
            let q = xb.add(QS + 4 * ib);
            let idx = |l: usize| *q.add(l) as usize | ((qh >> (3 * l)) & 7) << 8;
            let g = _mm256_set_epi64x(grid(idx(3)), grid(idx(2)), grid(idx(1)), grid(idx(0)));
            let q8 = load256(yb.add(Y_QS + 32 * ib));
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            // Pairs of (g+1)·q (at most 2·2·128 in magnitude), then ls times each pair.
            let p = _mm256_maddubs_epi16(g, q8);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(ls as i16)));
            let bs = yb.add(Y_BSUMS + 4 * ib) as *const i16;
            let bsum = bs.read_unaligned() as i32 + bs.add(1).read_unaligned() as i32;
            shift += ls * bsum;
            sumi1 += if qh & 0x8000 != 0 {
                -ls * bsum
            } else {
                ls * bsum
            };
        }
        let sumi = hsum_epi32(acc) - shift;
        sumf += f16_at(xb) * f32_at(yb) * (sumi as f32 + IQ1S_DELTA * sumi1 as f32);
    }
    sumf
}
