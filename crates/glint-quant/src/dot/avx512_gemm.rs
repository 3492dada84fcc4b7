//! AVX-512 VNNI GEMM tiles for Q4_K / Q5_K weights against Q8_K activations: the prefill and
//! batched-decode path of `matmul::dot_tile`.
//!
//! The one-token kernels spend their lanes on positions within a block, so every (row, token)
//! pair pays two multiply instructions per 64 weights plus a reduction. Here the lanes are 16
//! tokens: four activation bytes of each token sit in one 32-bit lane, the four weight codes
//! they meet are broadcast from memory, and one `vpdpbusd` does 64 multiply-adds that all land
//! in the right (row, token) sum. Sub-block scales are one `vpmulld` per 32 weights and the
//! mins one `vpdpwssd` per pair of sub-blocks, all exact integers; the float work per block is
//! `x86_util::k4_fold`'s, so every token gets the bits the one-token kernel gives it.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, and the broadcast operand is the signed one:
//! the weight codes (0..31) are broadcast as signed bytes and the activations stored as
//! `q + 128` (unsigned); the `128 * sum(codes)` this adds is known per row and sub-block and
//! taken off before scaling.
//! The layout, scratch and driver are `gemm_tile`'s.

use std::arch::x86_64::*;

use glint_gguf::GgmlType;

use super::avx2_iq_signed::{Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs};
use super::avx2_unit32::{Iq4Nl, Mxfp4, Unit32Q8, Q50};
use super::avx512::{nibbles64, q5_codes64, q6_codes64};
use super::avx512_gemm_signed::{decode_iq1_s, decode_signed, tile_kernel_signed, Iq1STile};
use super::gemm_tile::*;
use super::x86_util::*;

pub(super) static Q4_K: Fmt = Fmt {
    ty: GgmlType::Q4_K,
    qk: 256,
    act_block: Q8K,
    packed: ACT_BLOCK,
    codes: 256,
    meta: META,
    pack: pack_tile::<0x8080_8080>,
    decode: decode_row::<false>,
    kernel: tile_kernel::<4>,
    rows: 4,
    piece: 0,
    pair: None,
    fallback: None,
};
pub(super) static Q5_K: Fmt = Fmt {
    ty: GgmlType::Q5_K,
    decode: decode_row::<true>,
    ..Q4_K
};
pub(super) static Q6_K: Fmt = Fmt {
    ty: GgmlType::Q6_K,
    decode: decode_row_q6,
    kernel: tile_kernel_q6::<8>,
    rows: 8,
    ..Q4_K
};
pub(super) static Q8_0: Fmt = Fmt {
    ty: GgmlType::Q8_0,
    qk: 32,
    act_block: 34,
    packed: Q8_0_PACKED,
    codes: 0,
    meta: 2,
    pack: pack_tile_q8_0,
    decode: decode_row_q8_0,
    kernel: tile_kernel_q8_0::<8, 34, 2>,
    rows: 8,
    piece: 0,
    pair: None,
    fallback: None,
};
/// The Q8_0-partner 32-element types on Q8_0's kernel, their rows decoded to int8 codes first.
static Q5_0: Fmt = Fmt {
    ty: GgmlType::Q5_0,
    codes: 32,
    decode: decode_row_unit32::<Q50>,
    kernel: tile_kernel_q8_0::<8, 32, 0>,
    ..Q8_0
};
static IQ4_NL: Fmt = Fmt {
    ty: GgmlType::IQ4_NL,
    decode: decode_row_unit32::<Iq4Nl>,
    ..Q5_0
};
static MXFP4: Fmt = Fmt {
    ty: GgmlType::MXFP4,
    decode: decode_row_unit32::<Mxfp4>,
    ..Q5_0
};

static IQ2_XS: Fmt = Fmt {
    ty: GgmlType::IQ2_XS,
    decode: decode_signed::<Iq2Xs>,
    kernel: tile_kernel_signed::<Iq2Xs, 8>,
    rows: 8,
    ..Q4_K
};
static IQ2_S: Fmt = Fmt {
    ty: GgmlType::IQ2_S,
    decode: decode_signed::<Iq2S>,
    kernel: tile_kernel_signed::<Iq2S, 8>,
    ..IQ2_XS
};
static IQ2_XXS: Fmt = Fmt {
    ty: GgmlType::IQ2_XXS,
    decode: decode_signed::<Iq2Xxs>,
    kernel: tile_kernel_signed::<Iq2Xxs, 8>,
    ..IQ2_XS
};
static IQ3_XXS: Fmt = Fmt {
    ty: GgmlType::IQ3_XXS,
    decode: decode_signed::<Iq3Xxs>,
    kernel: tile_kernel_signed::<Iq3Xxs, 8>,
    ..IQ2_XS
};
static IQ1_S: Fmt = Fmt {
    ty: GgmlType::IQ1_S,
    decode: decode_iq1_s,
    kernel: tile_kernel_signed::<Iq1STile, 8>,
    ..IQ2_XS
};
static IQ3_S: Fmt = Fmt {
    ty: GgmlType::IQ3_S,
    decode: decode_signed::<Iq3S>,
    kernel: tile_kernel_signed::<Iq3S, 8>,
    ..IQ2_XS
};

tile_entries!(
    Q4_K => Q4_K,
    Q5_K => Q5_K,
    Q6_K => Q6_K,
    Q8_0 => Q8_0,
    Q5_0 => Q5_0,
    IQ4_NL => IQ4_NL,
    MXFP4 => MXFP4,
    IQ2_XXS => IQ2_XXS,
    IQ2_XS => IQ2_XS,
    IQ3_XXS => IQ3_XXS,
    IQ2_S => IQ2_S,
    IQ3_S => IQ3_S,
    IQ1_S => IQ1_S,
);

/// One Q4_K (`Q5` false) or Q5_K row to element-order codes (`nb * 256` bytes) and per-block
/// constants.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn decode_row<const Q5: bool>(
    nb: usize,
    x: *const u8,
    codes: &mut [u8],
    meta: &mut [i32],
) {
    let (q5, bs) = (Q5, if Q5 { 176 } else { 144 });
    let m4 = _mm512_set1_epi8(0x0f);
    for b in 0..nb {
        let xb = x.add(b * bs);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let mut corr = _mm512_setzero_si512();
        for j in 0..4 {
            let v = if q5 {
                q5_codes64(xb, j, m4)
            } else {
                nibbles64(xb.add(16 + 32 * j), m4)
            };
            _mm512_storeu_si512(codes.as_mut_ptr().add(b * 256 + 64 * j) as *mut _, v);
            // Codes times their sub-block's scale (low 32 bytes: sub-block 2j, high: 2j + 1).
            let scb = _mm512_mask_blend_epi8(
                0xFFFF_FFFF_0000_0000,
                _mm512_set1_epi8(sc[2 * j] as i8),
                _mm512_set1_epi8(sc[2 * j + 1] as i8),
            );
            corr = _mm512_dpbusd_epi32(corr, v, scb);
        }
        let corr = _mm512_reduce_add_epi32(corr);
        let m = &mut meta[b * META..(b + 1) * META];
        for s in 0..8 {
            m[s] = sc[s] as i32;
        }
        for p in 0..4 {
            m[8 + p] = (mn[2 * p] as i32) | ((mn[2 * p + 1] as i32) << 16);
        }
        m[12] = 128 * corr;
        m[13] = f16_at(xb).to_bits() as i32;
        m[14] = (-f16_at(xb.add(2))).to_bits() as i32;
    }
}

/// Block `b`'s `Σ scale_sb · (codes · (q + 128))` for `RN` decoded rows against the packed
/// block at `ab`: `SUBS` sub-blocks of `256 / SUBS` weights, sub-block `sb`'s scale the rows'
/// block constant `sb`. One `vpdpbusd` per four weights and sixteen tokens, exact.
#[inline(always)]
pub(super) unsafe fn scaled_sums<const RN: usize, const SUBS: usize>(
    b: usize,
    codes: &[*const u8; R],
    meta: &[*const i32; R],
    ab: *const u8,
) -> [__m512i; RN] {
    let z = _mm512_setzero_si512();
    let dwords = 64 / SUBS;
    let mut s = [z; RN];
    for sb in 0..SUBS {
        let mut p = [z; RN];
        for k in 0..dwords {
            let at = dwords * sb + k;
            let a = _mm512_loadu_si512(ab.add(at * 64) as *const _);
            for r in 0..RN {
                let wc = (codes[r].add(b * 256 + 4 * at) as *const i32).read_unaligned();
                p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
            }
        }
        for r in 0..RN {
            let sc = _mm512_set1_epi32(*meta[r].add(b * META + sb));
            s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p[r], sc));
        }
    }
    s
}

/// Block `b`'s `Σ_p (c_2p · s_2p + c_2p+1 · s_2p+1)` for `RN` rows, `s` the tile's 32-element
/// activation sums and `(c_2p, c_2p+1)` the i16 pair in the rows' block constant `first + p`
/// (Q4_K/Q5_K: the mins; IQ1_S: scale times delta sign). Exact.
#[inline(always)]
pub(super) unsafe fn pair_sums32<const RN: usize>(
    b: usize,
    meta: &[*const i32; R],
    ab: *const u8,
    first: usize,
) -> [__m512i; RN] {
    let mut m = [_mm512_setzero_si512(); RN];
    for pi in 0..4 {
        let bsum = _mm512_loadu_si512(ab.add(BS32_AT + 64 * pi) as *const _);
        for r in 0..RN {
            let c = _mm512_set1_epi32(*meta[r].add(b * META + first + pi));
            m[r] = _mm512_dpwssd_epi32(m[r], bsum, c);
        }
    }
    m
}

/// `R` decoded rows against one token tile over all `nb` blocks: `out[r][t]` is row r . token t.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel<const RN: usize>(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let mut acc = [_mm512_setzero_ps(); RN];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let s = scaled_sums::<RN, 8>(b, &codes, &meta, ab);
        let m = pair_sums32::<RN>(b, &meta, ab, 8);
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..RN {
            acc[r] = k4_step(acc[r], s[r], m[r], meta[r].add(b * META), yd);
        }
    }
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}

/// One row's block step of the Q4_K/Q5_K tiles (VNNI and AMX): the exact sums `s` (scaled
/// codes × `q + 128`) and `m` (mins × activation sums) of 16 tokens, less the row's correction,
/// scaled by d and -dmin (block constants `mb`) times the tokens' scales `yd` and added to
/// `acc`: `k4_fold`'s steps, so each token gets the one-token kernel's bits.
#[inline(always)]
pub(super) unsafe fn k4_step(
    acc: __m512,
    s: __m512i,
    m: __m512i,
    mb: *const i32,
    yd: __m512,
) -> __m512 {
    let si = _mm512_sub_epi32(s, _mm512_set1_epi32(*mb.add(12)));
    let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(13) as u32)), yd);
    let acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(si), acc);
    let dm = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(14) as u32)), yd);
    _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m), acc)
}

/// One row's block step of the Q6_K tiles (VNNI and AMX): the exact sum `s` less the row's
/// correction and 32 × `bias` (the codes' offset against the 16-element activation sums),
/// times d × `yd`, added to `acc` (`q6_fold`'s steps).
#[inline(always)]
pub(super) unsafe fn q6_step(
    acc: __m512,
    s: __m512i,
    bias: __m512i,
    mb: *const i32,
    yd: __m512,
) -> __m512 {
    let t = _mm512_sub_epi32(s, _mm512_set1_epi32(*mb.add(24)));
    let t = _mm512_sub_epi32(t, _mm512_slli_epi32(bias, 5));
    let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(25) as u32)), yd);
    _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(t), acc)
}

/// One row's block step of the Q8_0 tiles (VNNI and AMX): the exact sum `p` less the row's
/// correction `128 · Σ codes`, times `dw · da`, added to `acc` in the scalar reference's order.
#[inline(always)]
pub(super) unsafe fn q8_0_step(acc: __m512, p: __m512i, mb: *const i32, da: __m512) -> __m512 {
    let t = _mm512_sub_epi32(p, _mm512_set1_epi32(*mb));
    let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(1) as u32)), da);
    _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(t), d))
}

/// Sums of each 16-byte run of `v` (four per 64 bytes), via `vpsadbw`'s 8-byte sums.
#[inline(always)]
unsafe fn sums16(v: __m512i) -> [i32; 4] {
    let mut s = [0u64; 8];
    _mm512_storeu_si512(
        s.as_mut_ptr() as *mut _,
        _mm512_sad_epu8(v, _mm512_setzero_si512()),
    );
    std::array::from_fn(|i| (s[2 * i] + s[2 * i + 1]) as i32)
}

/// One Q6_K row to element-order codes (0..63, `nb * 256` bytes) and per-block constants.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn decode_row_q6(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    for b in 0..nb {
        let xb = x.add(b * 210);
        let sc = std::slice::from_raw_parts(xb.add(192) as *const i8, 16);
        let mut corr = 0i32;
        for h in 0..2 {
            let [w01, w23] = q6_codes64(xb, h);
            for (p, v) in [(0, w01), (1, w23)] {
                let at = b * 256 + 128 * h + 64 * p;
                _mm512_storeu_si512(codes.as_mut_ptr().add(at) as *mut _, v);
                for (i, q) in sums16(v).into_iter().enumerate() {
                    corr += sc[8 * h + 4 * p + i] as i32 * q;
                }
            }
        }
        let m = &mut meta[b * META..(b + 1) * META];
        for s in 0..16 {
            m[s] = sc[s] as i32;
        }
        for p in 0..8 {
            m[16 + p] = (sc[2 * p] as i16 as u16 as i32) | ((sc[2 * p + 1] as i16 as i32) << 16);
        }
        m[24] = 128 * corr;
        m[25] = f16_at(xb.add(208)).to_bits() as i32;
    }
}

/// [`tile_kernel`] for Q6_K: sixteen 16-element sub-blocks, each scaled by its signed scale;
/// the codes' offset of 32 is taken off with the paired 16-element activation sums.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel_q6<const RN: usize>(
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
        let mut bias = [z; RN];
        for pi in 0..8 {
            let bsum = _mm512_loadu_si512(ab.add(BS16_AT + 64 * pi) as *const _);
            for r in 0..RN {
                let sp = _mm512_set1_epi32(*meta[r].add(b * META + 16 + pi));
                bias[r] = _mm512_dpwssd_epi32(bias[r], bsum, sp);
            }
        }
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..RN {
            acc[r] = q6_step(acc[r], s[r], bias[r], meta[r].add(b * META), yd);
        }
    }
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}

/// Q8_0's block constants: the correction `128 * sum(codes)` and d. The codes are read in
/// place, already signed bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_row_q8_0(nb: usize, x: *const u8, _codes: &mut [u8], meta: &mut [i32]) {
    for b in 0..nb {
        let xb = x.add(b * 34);
        let q = std::slice::from_raw_parts(xb.add(2) as *const i8, 32);
        meta[2 * b] = 128 * q.iter().map(|&v| v as i32).sum::<i32>();
        meta[2 * b + 1] = f16_at(xb).to_bits() as i32;
    }
}

/// A [`Unit32Q8`] row to int8 codes (32 a block) and Q8_0's block constants: the correction
/// `128 · Σ codes` and the weight scale.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_row_unit32<T: Unit32Q8>(
    nb: usize,
    x: *const u8,
    codes: &mut [u8],
    meta: &mut [i32],
) {
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for b in 0..nb {
        let xb = x.add(b * T::TS);
        let q = T::quants(xb);
        _mm256_storeu_si256(codes.as_mut_ptr().add(32 * b) as *mut _, q);
        let sum = hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        meta[2 * b] = 128 * sum;
        meta[2 * b + 1] = T::wscale(xb).to_bits() as i32;
    }
}

/// [`tile_kernel`] for Q8_0 rows read in place (and decoded 32-element rows, `STRIDE` 32): per
/// block the exact integer dot, then the scalar reference's float steps (`sum += s * (dw * da)`,
/// block order).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel_q8_0<const RN: usize, const STRIDE: usize, const OFF: usize>(
    nb: usize,
    rows: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); RN];
    for b in 0..nb {
        let ab = tile.add(b * Q8_0_PACKED);
        let mut p = [z; RN];
        for k in 0..8 {
            let a = _mm512_loadu_si512(ab.add(64 * k) as *const _);
            for r in 0..RN {
                let wc = (rows[r].add(b * STRIDE + OFF + 4 * k) as *const i32).read_unaligned();
                p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
            }
        }
        let da = _mm512_loadu_ps(ab.add(512) as *const f32);
        for r in 0..RN {
            acc[r] = q8_0_step(acc[r], p[r], meta[r].add(2 * b), da);
        }
    }
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}
