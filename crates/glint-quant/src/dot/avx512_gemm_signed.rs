//! AVX-512 VNNI GEMM tiles for the signed-grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S):
//! prefill and
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
//! one-token kernel's bits.

use std::arch::x86_64::*;

use super::avx2_iq_signed::{halves16, SignedGrid};
use super::gemm_tile::*;
use super::x86_util::*;

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

/// `RN` decoded rows against one token tile over all `nb` blocks: `out[r][t]` is row r . token t.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn tile_kernel_signed<G: SignedGrid, const RN: usize>(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; R],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); RN];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let mut s = [z; RN];
        for sb in 0..16 {
            let mut p = [z; RN];
            for k in 0..4 {
                let a = _mm512_loadu_si512(ab.add((4 * sb + k) * 64) as *const _);
                for r in 0..RN {
                    let wc =
                        (codes[r].add(b * 256 + 16 * sb + 4 * k) as *const i32).read_unaligned();
                    p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
                }
            }
            for r in 0..RN {
                let sc = _mm512_set1_epi32(*meta[r].add(b * META + sb));
                s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p[r], sc));
            }
        }
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..RN {
            let mb = meta[r].add(b * META);
            let t = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(16)));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(17) as u32)), yd);
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(d, _mm512_cvtepi32_ps(t)));
        }
    }
    let f = _mm512_set1_ps(G::FACTOR);
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), _mm512_mul_ps(f, acc[r]));
    }
}
