//! AVX2 GEMM tiles for Q4_K / Q5_K / Q6_K weights against Q8_K activations: the prefill and
//! batched-decode path of `matmul::dot_tile` on CPUs without AVX-512 (Zen 2/3, older Xeons).
//!
//! As in `avx512_gemm`, the lanes are tokens: four activation bytes of each token sit in one
//! 32-bit lane (tokens 0..8 in one register, 8..16 in the next) and the four weight codes they
//! meet are broadcast. Without `vpdpbusd`, `vpmaddubsw` multiplies and adds pairs into i16 and
//! those are summed in i16 for as many steps as cannot overflow: each i16 lane then holds the
//! products of one token's bytes with 16 codes below 16 (a whole Q4_K sub-block, 16 x 15 x 128
//! < 2^15), 8 below 32 (half a Q5_K one) or 4 below 64 (a quarter of a Q6_K one). One
//! `vpmaddwd` against the sub-block scale word then turns them into scaled i32 sums. The weight codes are the unsigned operand, so unlike `avx512_gemm` the activations
//! stay signed and need no offset correction.
//!
//! The mins (Q4_K/Q5_K) and the codes' offset of 32 (Q6_K) are one `vpmaddwd` per pair of
//! sub-blocks against the paired activation sums, and the float work per block is
//! `x86_util::k4_fold` / `q6_fold`'s, so every token gets the bits the AVX2 one-token kernel
//! gives it. The layout, scratch and driver are `gemm_tile`'s.

use std::arch::x86_64::*;

use glint_gguf::GgmlType;

use super::avx2::{k4_codes, k4_scales_mins_u64, q6k_codes};
use super::gemm_tile::*;
use super::x86_util::*;

static Q4_K: Fmt = Fmt {
    ty: GgmlType::Q4_K,
    qk: 256,
    act_block: Q8K,
    packed: ACT_BLOCK,
    codes: 256,
    meta: META,
    pack: pack_tile::<0>,
    decode: decode_row::<false>,
    kernel: tile_k4::<4, 8>,
    rows: 4,
    piece: 0,
    pair: None,
    fallback: None,
};
static Q5_K: Fmt = Fmt {
    ty: GgmlType::Q5_K,
    decode: decode_row::<true>,
    kernel: tile_k4::<4, 4>,
    ..Q4_K
};
static Q6_K: Fmt = Fmt {
    ty: GgmlType::Q6_K,
    decode: decode_row_q6,
    kernel: tile_q6::<4>,
    ..Q4_K
};

tile_entries!(Q4_K => Q4_K, Q5_K => Q5_K, Q6_K => Q6_K);

/// `v` as the i16 word in both halves of a dword (a `vpmaddwd` operand scaling both pair sums
/// of a token by the same factor).
fn word_pair(v: i16) -> i32 {
    let w = v as u16 as u32;
    (w | (w << 16)) as i32
}

/// One Q4_K (`Q5` false) or Q5_K row to element-order codes (`nb * 256` bytes) and per-block
/// constants: eight scale word pairs, four pairs of mins, d and -dmin (f32 bits).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_row<const Q5: bool>(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let bs = if Q5 { 176 } else { 144 };
    for b in 0..nb {
        let xb = x.add(b * bs);
        let qh = if Q5 {
            load256(xb.add(16))
        } else {
            _mm256_setzero_si256()
        };
        for j in 0..4 {
            let (lo, hi) = k4_codes::<Q5>(xb, qh, j);
            let at = codes.as_mut_ptr().add(b * 256 + 64 * j);
            _mm256_storeu_si256(at as *mut _, lo);
            _mm256_storeu_si256(at.add(32) as *mut _, hi);
        }
        let (sc, mn) = k4_scales_mins_u64(xb.add(4));
        let (sc, mn) = (sc.to_le_bytes(), mn.to_le_bytes());
        let m = &mut meta[b * META..(b + 1) * META];
        for s in 0..8 {
            m[s] = word_pair(sc[s] as i16);
        }
        for p in 0..4 {
            m[8 + p] = (mn[2 * p] as i32) | ((mn[2 * p + 1] as i32) << 16);
        }
        m[12] = f16_at(xb).to_bits() as i32;
        m[13] = (-f16_at(xb.add(2))).to_bits() as i32;
    }
}

/// `RN` decoded Q4_K/Q5_K rows against one token tile over all `nb` blocks: `out[r][t]` is row
/// r . token t. `STEP` four-weight steps are summed in i16 before each scale multiply (8 for
/// 4-bit codes, 4 for 5-bit ones: what cannot overflow).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_k4<const RN: usize, const STEP: usize>(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; RN];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let s = scaled_sums::<RN, STEP, 8>(ab, &codes, &meta, b);
        let m = pair_sums::<RN, 4>(ab.add(BS32_AT), &meta, b * META + 8);
        let yd = [0, 32].map(|h| _mm256_loadu_ps(ab.add(YD_AT + h) as *const f32));
        for r in 0..RN {
            let mb = meta[r].add(b * META);
            let (d, dm) = (
                f32::from_bits(*mb.add(12) as u32),
                f32::from_bits(*mb.add(13) as u32),
            );
            for h in 0..2 {
                let dv = _mm256_mul_ps(_mm256_set1_ps(d), yd[h]);
                acc[r][h] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s[r][h]), acc[r][h]);
                let dmv = _mm256_mul_ps(_mm256_set1_ps(dm), yd[h]);
                acc[r][h] = _mm256_fmadd_ps(dmv, _mm256_cvtepi32_ps(m[r][h]), acc[r][h]);
            }
        }
    }
    store(&acc, out);
}

/// Block `b`'s scaled code x activation sums of `RN` rows against a token tile (`ab`, the
/// block's packed activations): sub-blocks of `PER_SB` four-weight steps, each scaled by its
/// row's scale word (meta `b * META + sub-block`), summed in i16 `STEP` steps at a time.
#[inline(always)]
unsafe fn scaled_sums<const RN: usize, const STEP: usize, const PER_SB: usize>(
    ab: *const u8,
    codes: &[*const u8; R],
    meta: &[*const i32; R],
    b: usize,
) -> [[__m256i; 2]; RN] {
    let z = _mm256_setzero_si256();
    let mut s = [[z; 2]; RN];
    for sb in 0..64 / PER_SB {
        for c in 0..PER_SB / STEP {
            let mut p = [[z; 2]; RN];
            for k in STEP * c..STEP * (c + 1) {
                let q = PER_SB * sb + k;
                let a0 = load256(ab.add(64 * q));
                let a1 = load256(ab.add(64 * q + 32));
                for r in 0..RN {
                    let wc = (codes[r].add(b * 256 + 4 * q) as *const i32).read_unaligned();
                    let w = _mm256_set1_epi32(wc);
                    p[r][0] = _mm256_add_epi16(p[r][0], _mm256_maddubs_epi16(w, a0));
                    p[r][1] = _mm256_add_epi16(p[r][1], _mm256_maddubs_epi16(w, a1));
                }
            }
            for r in 0..RN {
                let sc = _mm256_set1_epi32(*meta[r].add(b * META + sb));
                for h in 0..2 {
                    s[r][h] = _mm256_add_epi32(s[r][h], _mm256_madd_epi16(p[r][h], sc));
                }
            }
        }
    }
    s
}

/// `N` vectors of paired activation sums at `at` times each row's i16 pairs from meta index
/// `m0 + i` (the Q4_K/Q5_K mins, the Q6_K scales for the codes' offset), summed.
#[inline(always)]
unsafe fn pair_sums<const RN: usize, const N: usize>(
    at: *const u8,
    meta: &[*const i32; R],
    m0: usize,
) -> [[__m256i; 2]; RN] {
    let mut m = [[_mm256_setzero_si256(); 2]; RN];
    for i in 0..N {
        let bs = [0, 32].map(|h| load256(at.add(64 * i + h)));
        for r in 0..RN {
            let mp = _mm256_set1_epi32(*meta[r].add(m0 + i));
            for h in 0..2 {
                m[r][h] = _mm256_add_epi32(m[r][h], _mm256_madd_epi16(bs[h], mp));
            }
        }
    }
    m
}

#[inline(always)]
unsafe fn store<const RN: usize>(acc: &[[__m256; 2]; RN], out: &mut [[f32; TOK]; MAX_ROWS]) {
    for r in 0..RN {
        for h in 0..2 {
            _mm256_storeu_ps(out[r][8 * h..].as_mut_ptr(), acc[r][h]);
        }
    }
}

/// One Q6_K row to element-order codes (0..63, `nb * 256` bytes) and per-block constants:
/// sixteen scale word pairs, eight pairs of scales for the offset term, d (f32 bits).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_row_q6(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let m4 = _mm256_set1_epi8(0x0f);
    for b in 0..nb {
        let xb = x.add(b * 210);
        for h in 0..2 {
            let qh = load256(xb.add(128 + 32 * h));
            for k in 0..4 {
                let v = q6k_codes(load256(xb.add(64 * h + 32 * (k % 2))), qh, k, m4);
                let at = codes.as_mut_ptr().add(b * 256 + 128 * h + 32 * k);
                _mm256_storeu_si256(at as *mut _, v);
            }
        }
        let sc = std::slice::from_raw_parts(xb.add(192) as *const i8, 16);
        let m = &mut meta[b * META..(b + 1) * META];
        for s in 0..16 {
            m[s] = word_pair(sc[s] as i16);
        }
        for p in 0..8 {
            m[16 + p] = (sc[2 * p] as i16 as u16 as i32) | ((sc[2 * p + 1] as i16 as i32) << 16);
        }
        m[24] = f16_at(xb.add(208)).to_bits() as i32;
    }
}

/// [`tile_k4`] for Q6_K: sixteen 16-element sub-blocks, each scaled by its signed scale in two
/// halves (six-bit codes allow two steps in i16); the codes' offset of 32 is taken off with the
/// paired 16-element activation sums.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q6<const RN: usize>(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; RN];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let s = scaled_sums::<RN, 2, 4>(ab, &codes, &meta, b);
        let bias = pair_sums::<RN, 8>(ab.add(BS16_AT), &meta, b * META + 16);
        let yd = [0, 32].map(|h| _mm256_loadu_ps(ab.add(YD_AT + h) as *const f32));
        for r in 0..RN {
            let d = _mm256_set1_ps(f32::from_bits(*meta[r].add(b * META + 24) as u32));
            for h in 0..2 {
                let t = _mm256_sub_epi32(s[r][h], _mm256_slli_epi32(bias[r][h], 5));
                let dv = _mm256_mul_ps(yd[h], d);
                acc[r][h] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(t), acc[r][h]);
            }
        }
    }
    store(&acc, out);
}
