//! AVX-512 VNNI GEMM tiles for the signed-grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)
//! and IQ1_S: prefill and
//! batched decode on the `gemm_tile` driver.
//!
//! Their one-token kernels (`avx2_iq_signed`) spend most of each block on grid lookups and sign
//! expansion; with several tokens that work would be repeated per token. Here a row is decoded
//! once into its signed grid values (a byte each, element order) and the scale of each
//! 16-weight half, and then every token tile meets it with one `vpdpbusd` per 4 weights and 16
//! tokens. The activations are stored as `q + 128`, so each sub-block's sum carries
//! `128 · Σ w`, which the decode computes per block (times the scales) and the kernel takes off.
//! The integer sums are exact; each block's float step is the scalar reference's
//! (`sum += (d_x·d_y)·bsum`, block order, the type's factor at the end), so every token gets the
//! one-token kernel's bits. IQ1_S adds its delta term, `0.125 · Σ ls·(±1)·(32-sum of the
//! activation)`, from the tile's packed 32-element sums, as Q4_K's mins are.

use std::arch::x86_64::*;

use super::avx2_iq_signed::{halves16, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs, SignedGrid};
use super::avx512_gemm::{pair_sums32, scaled_sums};
use super::gemm_tile::*;
use super::x86_util::*;
use crate::grids::{IQ1S_DELTA, IQ1S_GRID};

/// One row to signed grid values (`nb * 256` bytes) and per-block constants: the sixteen
/// half-sub-block scales, the correction `128 · Σ scale · w`, and d (f32 bits).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn decode_signed<G: SignedGrid>(
    nb: usize,
    x: *const u8,
    codes: &mut [u8],
    meta: &mut [i32],
) {
    let ones = _mm256_set1_epi8(1);
    for b in 0..nb {
        let xb = x.add(b * G::TS);
        let m = &mut meta[b * META..(b + 1) * META];
        let mut corr = _mm256_setzero_si256();
        for ib in 0..8 {
            let (w, lo, hi) = G::sub(xb, ib);
            _mm256_storeu_si256(codes.as_mut_ptr().add(b * 256 + 32 * ib) as *mut _, w);
            let pairs = _mm256_maddubs_epi16(ones, w);
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs, halves16(lo, hi)));
            m[2 * ib] = lo;
            m[2 * ib + 1] = hi;
        }
        m[16] = 128 * hsum_epi32(corr);
        m[17] = f16_at(xb).to_bits() as i32;
    }
}

/// What a grid tile's float step needs of its type: the reference's final factor, and whether
/// the block has IQ1_S's delta term.
pub(super) trait GridTile {
    const FACTOR: f32;
    const DELTA: bool;
}

macro_rules! signed_tiles {
    ($($g:ty),+) => {
        $(impl GridTile for $g {
            const FACTOR: f32 = <$g as SignedGrid>::FACTOR;
            const DELTA: bool = false;
        })+
    };
}
signed_tiles!(Iq2Xxs, Iq2Xs, Iq2S, Iq3Xxs, Iq3S);

/// IQ1_S as a tile.
pub(super) struct Iq1STile;
impl GridTile for Iq1STile {
    const FACTOR: f32 = 1.0;
    const DELTA: bool = true;
}

/// One IQ1_S row (d f16, qs [u8; 32], qh [u16; 8]) to grid values (-1, 0, 1, element order) and
/// the block constants [`tile_kernel_signed`] reads, plus the delta pairs: `ls·(±1)` of
/// sub-blocks 2p and 2p + 1 as an i16 pair in `meta[18 + p]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn decode_iq1_s(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let ones = _mm256_set1_epi8(1);
    for b in 0..nb {
        let xb = x.add(b * 50);
        let m = &mut meta[b * META..(b + 1) * META];
        let mut corr = _mm256_setzero_si256();
        let mut dl = [0i32; 8];
        for (ib, dl) in dl.iter_mut().enumerate() {
            let qh = (xb.add(34 + 2 * ib) as *const u16).read_unaligned() as usize;
            let idx = |l: usize| *xb.add(2 + 4 * ib + l) as usize | (((qh >> (3 * l)) & 7) << 8);
            let g = |l: usize| IQ1S_GRID[idx(l)] as i64;
            let w = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            _mm256_storeu_si256(codes.as_mut_ptr().add(b * 256 + 32 * ib) as *mut _, w);
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            let pairs = _mm256_maddubs_epi16(ones, w);
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs, _mm256_set1_epi16(ls as i16)));
            m[2 * ib] = ls;
            m[2 * ib + 1] = ls;
            *dl = if qh & 0x8000 != 0 { -ls } else { ls };
        }
        m[16] = 128 * hsum_epi32(corr);
        m[17] = f16_at(xb).to_bits() as i32;
        for p in 0..4 {
            m[18 + p] = (dl[2 * p] as i16 as u16 as i32) | (dl[2 * p + 1] << 16);
        }
    }
}

/// `RN` decoded rows against one token tile over all `nb` blocks: `out[r][t]` is row r . token t.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn tile_kernel_signed<G: GridTile, const RN: usize>(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); RN];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let s = scaled_sums::<RN, 16>(b, &codes, &meta, ab);
        // IQ1_S: Σ ls·(±1)·(32-sum) over the sub-blocks, from the tile's paired 32-sums.
        let delta = if G::DELTA {
            pair_sums32::<RN>(b, &meta, ab, 18)
        } else {
            [z; RN]
        };
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..RN {
            let mb = meta[r].add(b * META);
            let t = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(16)));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(17) as u32)), yd);
            let mut v = _mm512_cvtepi32_ps(t);
            if G::DELTA {
                let dv = _mm512_mul_ps(_mm512_set1_ps(IQ1S_DELTA), _mm512_cvtepi32_ps(delta[r]));
                v = _mm512_add_ps(v, dv);
            }
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(d, v));
        }
    }
    let f = _mm512_set1_ps(G::FACTOR);
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), _mm512_mul_ps(f, acc[r]));
    }
}
