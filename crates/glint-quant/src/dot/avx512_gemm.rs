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
use super::{GemmFn, GemmOut, GemmParts};

/// Tokens per tile: the 16 i32 lanes of a zmm register.
const TOK: usize = 16;
/// Weight rows decoded together (their codes and block constants stay in L1/L2 while every
/// token tile passes over them).
const ROW_TILE: usize = 16;
/// Most rows a kernel computes together against one activation load (each format picks its
/// own count up to this: more rows hide `vpdpbusd` latency, until accumulators spill).
const R: usize = 8;
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

/// One weight format's tile: how its blocks and its partner's are laid out, and its kernels.
struct Fmt {
    ty: GgmlType,
    /// Elements per block (the partner's blocks are cut to the same size).
    qk: usize,
    /// Bytes of one partner (activation) block.
    act_block: usize,
    /// Packed bytes of one block of a token tile.
    packed: usize,
    /// Decoded code bytes of one row-block, or 0 when the kernel reads the codes in place.
    codes: usize,
    /// i32 block constants of one row-block.
    meta: usize,
    pack: fn(nb: usize, lanes: &[&[u8]], tile: &mut [u8]),
    decode: unsafe fn(nb: usize, row: *const u8, codes: &mut [u8], meta: &mut [i32]),
    kernel: Kernel,
    /// Rows the kernel computes together (at most [`R`]).
    rows: usize,
}

type Kernel = unsafe fn(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; R],
);

static Q4_K: Fmt = Fmt {
    ty: GgmlType::Q4_K,
    qk: 256,
    act_block: Q8K,
    packed: ACT_BLOCK,
    codes: 256,
    meta: META,
    pack: pack_tile,
    decode: decode_row::<false>,
    kernel: tile_kernel::<4>,
    rows: 4,
};
static Q5_K: Fmt = Fmt {
    ty: GgmlType::Q5_K,
    decode: decode_row::<true>,
    ..Q4_K
};
static Q6_K: Fmt = Fmt {
    ty: GgmlType::Q6_K,
    decode: decode_row_q6,
    kernel: tile_kernel_q6::<8>,
    rows: 8,
    ..Q4_K
};
static Q8_0: Fmt = Fmt {
    ty: GgmlType::Q8_0,
    qk: 32,
    act_block: 34,
    packed: Q8_0_PACKED,
    codes: 0,
    meta: 2,
    pack: pack_tile_q8_0,
    decode: decode_row_q8_0,
    kernel: tile_kernel_q8_0::<8>,
    rows: 8,
};

/// The GEMM tile for `ty`, if there is one (the caller has checked the CPU has the family).
pub fn gemm_kernel(ty: GgmlType) -> Option<GemmFn> {
    Some(match fmt(ty)?.ty {
        GgmlType::Q4_K => |n, w, rows, act, n_acts, out| gemm(&Q4_K, n, w, rows, act, n_acts, out),
        GgmlType::Q5_K => |n, w, rows, act, n_acts, out| gemm(&Q5_K, n, w, rows, act, n_acts, out),
        GgmlType::Q6_K => |n, w, rows, act, n_acts, out| gemm(&Q6_K, n, w, rows, act, n_acts, out),
        _ => |n, w, rows, act, n_acts, out| gemm(&Q8_0, n, w, rows, act, n_acts, out),
    })
}

/// [`gemm_kernel`] in its two halves (see [`GemmParts`]).
pub fn gemm_parts(ty: GgmlType) -> Option<GemmParts> {
    macro_rules! parts {
        ($f:expr) => {
            GemmParts {
                tile_bytes: |n| n / $f.qk * $f.packed,
                pack: |n, act, count, tile| pack_lanes(&$f, n, act, 0, count, tile),
                run: |n, w, rows, packed, n_acts, out| {
                    SCRATCH.with_borrow_mut(|s| {
                        let Scratch { codes, meta, .. } = s;
                        run(&$f, n, w, rows, packed, n_acts, codes, meta, out)
                    })
                },
            }
        };
    }
    Some(match fmt(ty)?.ty {
        GgmlType::Q4_K => parts!(Q4_K),
        GgmlType::Q5_K => parts!(Q5_K),
        GgmlType::Q6_K => parts!(Q6_K),
        _ => parts!(Q8_0),
    })
}

fn fmt(ty: GgmlType) -> Option<&'static Fmt> {
    match ty {
        GgmlType::Q4_K => Some(&Q4_K),
        GgmlType::Q5_K => Some(&Q5_K),
        GgmlType::Q6_K => Some(&Q6_K),
        GgmlType::Q8_0 => Some(&Q8_0),
        _ => None,
    }
}

#[derive(Default)]
struct Scratch {
    /// Packed token tiles, `u64` storage for alignment.
    act: Vec<u64>,
    /// Decoded codes of a row tile: `ROW_TILE` rows of `nb * codes` bytes.
    codes: Vec<u64>,
    /// Block constants of a row tile: `ROW_TILE` rows of `nb * meta` i32.
    meta: Vec<i32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The largest packed token tile of activations of `n` elements over every format.
pub fn max_tile_bytes(n: usize) -> usize {
    [&Q4_K, &Q5_K, &Q6_K, &Q8_0]
        .map(|f| n.div_ceil(f.qk) * f.packed)
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// Sizes this thread's scratch for calls of up to `n_acts` activations of `n` elements, in
/// every format, so that a step's calls within those sizes do not allocate.
pub fn reserve(n: usize, n_acts: usize) {
    SCRATCH.with_borrow_mut(|s| {
        for f in [&Q4_K, &Q5_K, &Q6_K, &Q8_0] {
            let nb = n.div_ceil(f.qk);
            grow(&mut s.act, n_acts.div_ceil(TOK) * nb * f.packed);
            grow(&mut s.codes, ROW_TILE * nb * f.codes);
            let meta = ROW_TILE * nb * f.meta;
            if s.meta.len() < meta {
                s.meta.resize(meta, 0);
            }
        }
    });
}

/// The products of the `n_rows` rows of `w` (back to back, `n` elements each) and the `n_acts`
/// partner rows `act(i)`, handed to `out` tile by tile as [`GemmFn`] says. Each value is bit for
/// bit the AVX-512 one-token kernel's.
///
/// # Panics
/// If a row or activation is not `n` elements long.
fn gemm<'a>(
    f: &Fmt,
    n: usize,
    w: &[u8],
    n_rows: usize,
    act: &dyn Fn(usize) -> &'a [u8],
    n_acts: usize,
    out: &mut GemmOut,
) {
    assert!(n.is_multiple_of(f.qk), "{} tile, n {n}", f.ty);
    let tile_bytes = n / f.qk * f.packed;
    let n_tiles = n_acts.div_ceil(TOK);
    SCRATCH.with_borrow_mut(|s| {
        let Scratch {
            act: buf,
            codes,
            meta,
        } = s;
        grow(buf, n_tiles * tile_bytes);
        let packed = &mut bytemuck::cast_slice_mut::<u64, u8>(buf)[..n_tiles * tile_bytes];
        for (t, tile) in packed.chunks_exact_mut(tile_bytes).enumerate() {
            pack_lanes(f, n, act, t * TOK, TOK.min(n_acts - t * TOK), tile);
        }
        run(f, n, w, n_rows, packed, n_acts, codes, meta, out);
    });
}

/// Packs `act(first..first + count)` (at most [`TOK`]) into one token tile.
fn pack_lanes<'a>(
    f: &Fmt,
    n: usize,
    act: &dyn Fn(usize) -> &'a [u8],
    first: usize,
    count: usize,
    tile: &mut [u8],
) {
    let ty = f.ty;
    assert!(n.is_multiple_of(f.qk) && count <= TOK, "{ty} tile, n {n}");
    let nb = n / f.qk;
    assert_eq!(tile.len(), nb * f.packed, "{ty} tile bytes");
    let mut lanes: [&[u8]; TOK] = [&[]; TOK];
    for (j, lane) in lanes.iter_mut().enumerate().take(count) {
        *lane = act(first + j);
        assert_eq!(
            lane.len(),
            nb * f.act_block,
            "{ty} tile: activation {} bytes",
            first + j
        );
    }
    (f.pack)(nb, &lanes[..count], tile);
}

/// The weight side of [`gemm`] against already packed token tiles (`n_acts` activations).
#[allow(clippy::too_many_arguments)]
fn run(
    f: &Fmt,
    n: usize,
    w: &[u8],
    n_rows: usize,
    packed: &[u8],
    n_acts: usize,
    codes: &mut Vec<u64>,
    meta: &mut Vec<i32>,
    out: &mut GemmOut,
) {
    let ty = f.ty;
    assert!(n.is_multiple_of(f.qk), "{ty} tile, n {n}");
    let nb = n / f.qk;
    let rb = nb * ty.type_size();
    assert_eq!(w.len(), n_rows * rb, "{ty} tile weight bytes");
    let n_tiles = n_acts.div_ceil(TOK);
    let tile_bytes = nb * f.packed;
    assert!(packed.len() >= n_tiles * tile_bytes, "{ty} packed tiles");
    let (row_codes, row_meta) = (nb * f.codes, nb * f.meta);
    grow(codes, ROW_TILE * row_codes);
    if meta.len() < ROW_TILE * row_meta {
        meta.resize(ROW_TILE * row_meta, 0);
    }
    let codes = bytemuck::cast_slice_mut::<u64, u8>(codes);
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let rows = ROW_TILE.min(n_rows - r0);
        for r in 0..rows {
            let row = &w[(r0 + r) * rb..(r0 + r + 1) * rb];
            let c = &mut codes[r * row_codes..(r + 1) * row_codes];
            let m = &mut meta[r * row_meta..(r + 1) * row_meta];
            // SAFETY: `row` is nb blocks of `ty`, `c` and `m` hold nb blocks' worth; the
            // AVX-512 family (F/BW/VNNI) is what selected this path.
            unsafe { (f.decode)(nb, row.as_ptr(), c, m) };
        }
        let code_ptr = |r: usize| {
            if f.codes == 0 {
                w[(r0 + r) * rb..].as_ptr()
            } else {
                codes[r * row_codes..].as_ptr()
            }
        };
        for t in 0..n_tiles {
            let tile = &packed[t * tile_bytes..(t + 1) * tile_bytes];
            let valid = TOK.min(n_acts - t * TOK);
            let mut r = 0;
            while r < rows {
                let take = f.rows.min(rows - r);
                if t == 0 {
                    // The next row tile's weights, a group at a time, so its decode finds
                    // them in cache instead of stalling on memory between compute bursts.
                    let next = (r0 + ROW_TILE + r).min(n_rows);
                    let end = (next + take).min(n_rows);
                    prefetch(&w[next * rb..end * rb]);
                }
                let mut res = [[0f32; TOK]; R];
                let cp: [*const u8; R] = std::array::from_fn(|k| code_ptr(r + k.min(take - 1)));
                let mp: [*const i32; R] =
                    std::array::from_fn(|k| meta[(r + k.min(take - 1)) * row_meta..].as_ptr());
                // SAFETY: every pointer covers nb blocks (rows past `take` repeat the last
                // valid row, whose results are dropped); the tile holds nb packed blocks.
                unsafe { (f.kernel)(nb, cp, mp, tile.as_ptr(), &mut res) };
                out(r0 + r, t * TOK, &res[..take], valid);
                r += take;
            }
        }
    }
}

fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch hint of an address inside a live slice; it never faults.
        unsafe { _mm_prefetch(line.as_ptr() as *const i8, _MM_HINT_T1) };
    }
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

/// One Q4_K (`Q5` false) or Q5_K row to element-order codes (`nb * 256` bytes) and per-block
/// constants.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_row<const Q5: bool>(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
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

/// `R` decoded rows against one token tile over all `nb` blocks: `out[r][t]` is row r . token t.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel<const RN: usize>(
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
        for sb in 0..8 {
            let mut p = [z; RN];
            for k in 0..8 {
                let a = _mm512_loadu_si512(ab.add((8 * sb + k) * 64) as *const _);
                for r in 0..RN {
                    let wc =
                        (codes[r].add(b * 256 + 32 * sb + 4 * k) as *const i32).read_unaligned();
                    p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
                }
            }
            for r in 0..RN {
                let sc = _mm512_set1_epi32(*meta[r].add(b * META + sb));
                s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(p[r], sc));
            }
        }
        let mut m = [z; RN];
        for pi in 0..4 {
            let bsum = _mm512_loadu_si512(ab.add(BS32_AT + 64 * pi) as *const _);
            for r in 0..RN {
                let mp = _mm512_set1_epi32(*meta[r].add(b * META + 8 + pi));
                m[r] = _mm512_dpwssd_epi32(m[r], bsum, mp);
            }
        }
        let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
        for r in 0..RN {
            let mb = meta[r].add(b * META);
            let si = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(12)));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(13) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(si), acc[r]);
            let dm = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(14) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m[r]), acc[r]);
        }
    }
    for r in 0..RN {
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
unsafe fn tile_kernel_q6<const RN: usize>(
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
            let mb = meta[r].add(b * META);
            let t = _mm512_sub_epi32(s[r], _mm512_set1_epi32(*mb.add(24)));
            let t = _mm512_sub_epi32(t, _mm512_slli_epi32(bias[r], 5));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(25) as u32)), yd);
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(t), acc[r]);
        }
    }
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}

/// Packed bytes of one Q8_0 block of a token tile: 8 dword vectors of `q + 128`, the scales.
const Q8_0_PACKED: usize = 8 * 64 + 64;

/// [`pack_tile`] for Q8_0 activations (32-element blocks, f16 scale first).
fn pack_tile_q8_0(nb: usize, lanes: &[&[u8]], tile: &mut [u8]) {
    tile.fill(0);
    for (t, a) in lanes.iter().enumerate() {
        for b in 0..nb {
            let src = &a[b * 34..(b + 1) * 34];
            let dst = &mut tile[b * Q8_0_PACKED..(b + 1) * Q8_0_PACKED];
            for q in 0..8 {
                let v = u32::from_le_bytes(src[2 + 4 * q..6 + 4 * q].try_into().unwrap());
                let o = (q * TOK + t) * 4;
                dst[o..o + 4].copy_from_slice(&(v ^ 0x8080_8080).to_le_bytes());
            }
            let d = half::f16::from_le_bytes([src[0], src[1]]).to_f32();
            dst[512 + 4 * t..516 + 4 * t].copy_from_slice(&d.to_le_bytes());
        }
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

/// [`tile_kernel`] for Q8_0 rows read in place: per block the exact integer dot, then the
/// scalar reference's float steps (`sum += s * (dw * da)`, block order).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn tile_kernel_q8_0<const RN: usize>(
    nb: usize,
    rows: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; R],
) {
    let z = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); RN];
    for b in 0..nb {
        let ab = tile.add(b * Q8_0_PACKED);
        let mut p = [z; RN];
        for k in 0..8 {
            let a = _mm512_loadu_si512(ab.add(64 * k) as *const _);
            for r in 0..RN {
                let wc = (rows[r].add(b * 34 + 2 + 4 * k) as *const i32).read_unaligned();
                p[r] = _mm512_dpbusd_epi32(p[r], a, _mm512_set1_epi32(wc));
            }
        }
        let da = _mm512_loadu_ps(ab.add(512) as *const f32);
        for r in 0..RN {
            let mb = meta[r].add(2 * b);
            let t = _mm512_sub_epi32(p[r], _mm512_set1_epi32(*mb));
            let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_bits(*mb.add(1) as u32)), da);
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(t), d));
        }
    }
    for r in 0..RN {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]);
    }
}
