//! AVX-512 VNNI GEMM tiles for Q4_K / Q5_K weights against Q8_K activations: the prefill and
//! batched-decode path of `matmul::dot_tile`.
//!
//! The one-token kernels spend their lanes on positions within a block, so every (row, token)
//! pair pays two multiply instructions per 64 weights plus a reduction. Here the lanes are 16
//! tokens: four activation bytes of each token sit in one 32-bit lane, the four weight codes
//! they meet are broadcast from memory, and one `vpdpbusd` does 64 multiply-adds that all land
//! in the right (row, token) sum. Sub-block scales are one `vpmulld` per 32 weights and the
//! mins one `vpdpwssd` per pair of sub-blocks, all exact integers; the float work per block is
//! `avx512::k4_fold`'s, so every token gets the bits the one-token kernel gives it.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, and the broadcast operand is the signed one:
//! the weight codes (0..31) are broadcast as signed bytes and the activations stored as
//! `q + 128` (unsigned); the `128 * sum(codes)` this adds is known per row and sub-block and
//! taken off before scaling.
//!
//! Both sides are repacked into thread-local scratch, never into the caller's memory: a tile of
//! 16 weight rows is decoded to bytes once and then met by every token tile (zero-copy weights
//! stay zero-copy), and the activations of a call are transposed once into token tiles.

use std::arch::x86_64::*;
use std::cell::RefCell;

use glint_gguf::GgmlType;

use super::avx512::{nibbles64, q5_codes64};
use super::x86_util::*;
use super::GemmFn;

/// Tokens per tile: the 16 i32 lanes of a zmm register.
const TOK: usize = 16;
/// Weight rows decoded together (their codes and block constants stay in L1/L2 while every
/// token tile passes over them).
const ROW_TILE: usize = 16;
/// Rows computed together against one activation load.
const R: usize = 4;
/// Bytes of one Q8_K block (d, 256 quants, 16 bsums).
const Q8K: usize = 292;
/// Packed bytes of one token tile for one block: 64 dword vectors of `q + 128`, the 16 scales,
/// 4 vectors of paired 32-element sums (Q4_K/Q5_K mins) and 8 of paired 16-element sums (Q6_K).
const ACT_BLOCK: usize = 64 * 64 + 64 + 4 * 64 + 8 * 64;
/// Where in a packed block the scales, the 32-element and the 16-element sums start.
const YD_AT: usize = 4096;
const BS32_AT: usize = YD_AT + 64;
const BS16_AT: usize = BS32_AT + 4 * 64;
/// Block constants of one row, as i32. Q4_K/Q5_K: eight sub-block scales, four mins pairs, the
/// correction, d and -dmin (f32 bits). Q6_K: sixteen scales, eight scale pairs, the correction
/// and d.
const META: usize = 32;

/// The GEMM tile for `ty`, if there is one (the caller has checked the CPU has the family).
pub fn gemm_kernel(ty: GgmlType) -> Option<GemmFn> {
    match ty {
        GgmlType::Q4_K => {
            Some(|n, w, rows, act, n_acts, out| gemm(GgmlType::Q4_K, n, w, rows, act, n_acts, out))
        }
        GgmlType::Q5_K => {
            Some(|n, w, rows, act, n_acts, out| gemm(GgmlType::Q5_K, n, w, rows, act, n_acts, out))
        }
        GgmlType::Q6_K => {
            Some(|n, w, rows, act, n_acts, out| gemm(GgmlType::Q6_K, n, w, rows, act, n_acts, out))
        }
        _ => None,
    }
}

#[derive(Default)]
struct Scratch {
    /// Packed token tiles, `u64` storage for alignment.
    act: Vec<u64>,
    /// Decoded codes of a row tile: `ROW_TILE` rows of `nb * 256` bytes.
    codes: Vec<u64>,
    /// Block constants of a row tile: `ROW_TILE` rows of `nb * META` i32.
    meta: Vec<i32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `out(r, i, w_r . act(i))` for the `n_rows` rows of `w` (back to back, `n` elements each)
/// and the `n_acts` Q8_K rows `act(i)`. Each value is bit for bit the AVX-512 one-token kernel's.
///
/// # Panics
/// If a row or activation is not `n` elements long.
fn gemm<'a>(
    ty: GgmlType,
    n: usize,
    w: &[u8],
    n_rows: usize,
    act: &dyn Fn(usize) -> &'a [u8],
    n_acts: usize,
    out: &mut dyn FnMut(usize, usize, f32),
) {
    assert!(n.is_multiple_of(256), "{ty} tile, n {n}");
    let nb = n / 256;
    let rb = nb * ty.type_size();
    assert_eq!(w.len(), n_rows * rb, "{ty} tile weight bytes");
    let n_tiles = n_acts.div_ceil(TOK);
    SCRATCH.with_borrow_mut(|s| {
        grow(&mut s.act, n_tiles * nb * ACT_BLOCK);
        grow(&mut s.codes, ROW_TILE * nb * 256);
        s.meta.resize(s.meta.len().max(ROW_TILE * nb * META), 0);
        let packed = bytemuck::cast_slice_mut::<u64, u8>(&mut s.act);
        for t in 0..n_tiles {
            let tile = &mut packed[t * nb * ACT_BLOCK..(t + 1) * nb * ACT_BLOCK];
            let mut lanes: [&[u8]; TOK] = [&[]; TOK];
            let valid = TOK.min(n_acts - t * TOK);
            for (j, lane) in lanes.iter_mut().enumerate().take(valid) {
                *lane = act(t * TOK + j);
                assert_eq!(
                    lane.len(),
                    nb * Q8K,
                    "Q8_K activation {} bytes",
                    t * TOK + j
                );
            }
            pack_tile(nb, &lanes[..valid], tile);
        }
        let codes = bytemuck::cast_slice_mut::<u64, u8>(&mut s.codes);
        for r0 in (0..n_rows).step_by(ROW_TILE) {
            let rows = ROW_TILE.min(n_rows - r0);
            for r in 0..rows {
                let row = &w[(r0 + r) * rb..(r0 + r + 1) * rb];
                let c = &mut codes[r * nb * 256..(r + 1) * nb * 256];
                let m = &mut s.meta[r * nb * META..(r + 1) * nb * META];
                // SAFETY: `row` is nb blocks of `ty`, `c` and `m` hold nb blocks' worth; the
                // AVX-512 family (F/BW/VNNI) is what selected this path.
                unsafe {
                    match ty {
                        GgmlType::Q6_K => decode_row_q6(nb, row.as_ptr(), c, m),
                        _ => decode_row(ty == GgmlType::Q5_K, nb, row.as_ptr(), c, m),
                    }
                };
            }
            for t in 0..n_tiles {
                let tile = &packed[t * nb * ACT_BLOCK..(t + 1) * nb * ACT_BLOCK];
                let valid = TOK.min(n_acts - t * TOK);
                let mut r = 0;
                while r < rows {
                    let take = R.min(rows - r);
                    let mut res = [[0f32; TOK]; R];
                    let cp: [*const u8; R] =
                        std::array::from_fn(|k| codes[(r + k.min(take - 1)) * nb * 256..].as_ptr());
                    let mp: [*const i32; R] = std::array::from_fn(|k| {
                        s.meta[(r + k.min(take - 1)) * nb * META..].as_ptr()
                    });
                    // SAFETY: every pointer covers nb blocks (rows past `take` repeat the last
                    // valid row, whose results are dropped); the tile holds nb packed blocks.
                    unsafe {
                        if ty == GgmlType::Q6_K {
                            tile_kernel_q6(nb, cp, mp, tile.as_ptr(), &mut res)
                        } else {
                            tile_kernel(nb, cp, mp, tile.as_ptr(), &mut res)
                        }
                    };
                    for (k, lane) in res.iter().enumerate().take(take) {
                        for (j, &v) in lane.iter().enumerate().take(valid) {
                            out(r0 + r + k, t * TOK + j, v);
                        }
                    }
                    r += take;
                }
            }
        }
    });
}

fn grow(v: &mut Vec<u64>, bytes: usize) {
    if v.len() * 8 < bytes {
        v.resize(bytes.div_ceil(8), 0);
    }
}

/// Transposes up to 16 Q8_K rows into one token tile: for each block, dword q of every token
/// (as `q + 128`), then the tokens' scales, then their 32-element sums in i16 pairs. Lanes past
/// the last token are zero, which adds nothing to any lane that is kept.
fn pack_tile(nb: usize, lanes: &[&[u8]], tile: &mut [u8]) {
    tile.fill(0);
    for (t, a) in lanes.iter().enumerate() {
        for b in 0..nb {
            let src = &a[b * Q8K..(b + 1) * Q8K];
            let dst = &mut tile[b * ACT_BLOCK..(b + 1) * ACT_BLOCK];
            for q in 0..64 {
                let v = u32::from_le_bytes(src[4 + 4 * q..8 + 4 * q].try_into().unwrap());
                let o = (q * TOK + t) * 4;
                dst[o..o + 4].copy_from_slice(&(v ^ 0x8080_8080).to_le_bytes());
            }
            dst[YD_AT + 4 * t..YD_AT + 4 * t + 4].copy_from_slice(&src[..4]);
            let bsum = |k: usize| i16::from_le_bytes([src[260 + 2 * k], src[261 + 2 * k]]);
            for p in 0..4 {
                let lo = bsum(4 * p) + bsum(4 * p + 1);
                let hi = bsum(4 * p + 2) + bsum(4 * p + 3);
                let v = (lo as u16 as u32) | ((hi as u16 as u32) << 16);
                let o = BS32_AT + (p * TOK + t) * 4;
                dst[o..o + 4].copy_from_slice(&v.to_le_bytes());
            }
            for p in 0..8 {
                let o = BS16_AT + (p * TOK + t) * 4;
                dst[o..o + 4].copy_from_slice(&src[260 + 4 * p..264 + 4 * p]);
            }
        }
    }
}

/// One weight row to element-order codes (`nb * 256` bytes) and per-block constants.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_row(q5: bool, nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let bs = if q5 { 176 } else { 144 };
    let m4 = _mm512_set1_epi8(0x0f);
    for b in 0..nb {
        let xb = x.add(b * bs);
        let (sc, mn) = k4_scales_mins(&*(xb.add(4) as *const [u8; 12]));
        let mut corr = 0i32;
        for j in 0..4 {
            let v = if q5 {
                q5_codes64(xb, j, m4)
            } else {
                nibbles64(xb.add(16 + 32 * j), m4)
            };
            _mm512_storeu_si512(codes.as_mut_ptr().add(b * 256 + 64 * j) as *mut _, v);
            let mut sums = [0u64; 8];
            _mm512_storeu_si512(
                sums.as_mut_ptr() as *mut _,
                _mm512_sad_epu8(v, _mm512_setzero_si512()),
            );
            let lo: u64 = sums[..4].iter().sum();
            let hi: u64 = sums[4..].iter().sum();
            corr += sc[2 * j] as i32 * lo as i32 + sc[2 * j + 1] as i32 * hi as i32;
        }
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

/// `R` decoded rows against one token tile over all `nb` blocks: `out[r][t]` is row r . token t.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; R],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let mut s = [z; R];
        for sb in 0..8 {
            let mut p = [z; R];
            for k in 0..8 {
                let a = _mm512_loadu_si512(ab.add((8 * sb + k) * 64) as *const _);
                for r in 0..R {
                    let wc =
                        (codes[r].add(b * 256 + 32 * sb + 4 * k) as *const i32).read_unaligned();
                    p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
                }
            }
            for r in 0..R {
                let sc = _mm512_set1_epi32(*meta[r].add(b * META + sb));
                s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p[r], sc));
            }
        }
        let mut m = [z; R];
        for pi in 0..4 {
            let bsum = _mm512_loadu_si512(ab.add(BS32_AT + 64 * pi) as *const _);
            for r in 0..R {
                let mp = _mm512_set1_epi32(*meta[r].add(b * META + 8 + pi));
                m[r] = _mm512_dpwssd_epi32(m[r], bsum, mp);
            }
        }
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..R {
            let mb = meta[r].add(b * META);
            let si = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(12)));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(13) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(si), acc[r]);
            let dm = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(14) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m[r]), acc[r]);
        }
    }
    for r in 0..R {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
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
unsafe fn decode_row_q6(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let m4 = _mm512_set1_epi8(0x0f);
    let m3 = _mm512_set1_epi8(3);
    for b in 0..nb {
        let xb = x.add(b * 210);
        let sc = std::slice::from_raw_parts(xb.add(192) as *const i8, 16);
        let mut corr = 0i32;
        for h in 0..2 {
            let ql = _mm512_loadu_si512(xb.add(64 * h) as *const _);
            let qh = load256(xb.add(128 + 32 * h));
            let qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            let w01 = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4),
            );
            let w23 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), m3), 4),
            );
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
unsafe fn tile_kernel_q6(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; R],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        let mut s = [z; R];
        for sb in 0..16 {
            let mut p = [z; R];
            for k in 0..4 {
                let a = _mm512_loadu_si512(ab.add((4 * sb + k) * 64) as *const _);
                for r in 0..R {
                    let wc =
                        (codes[r].add(b * 256 + 16 * sb + 4 * k) as *const i32).read_unaligned();
                    p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
                }
            }
            for r in 0..R {
                let sc = _mm512_set1_epi32(*meta[r].add(b * META + sb));
                s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p[r], sc));
            }
        }
        let mut bias = [z; R];
        for pi in 0..8 {
            let bsum = _mm512_loadu_si512(ab.add(BS16_AT + 64 * pi) as *const _);
            for r in 0..R {
                let sp = _mm512_set1_epi32(*meta[r].add(b * META + 16 + pi));
                bias[r] = _mm512_dpwssd_epi32(bias[r], bsum, sp);
            }
        }
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..R {
            let mb = meta[r].add(b * META);
            let t = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(24)));
            let t = _mm512_sub_epi32(t, _mm512_slli_epi32(bias[r], 5));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(25) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(t), acc[r]);
        }
    }
    for r in 0..R {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}
