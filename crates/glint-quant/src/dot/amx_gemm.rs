//! AMX tiles (`tdpbsud`) for the prefill GEMM of Q4_K, Q5_K, Q6_K and Q8_0 weights: the
//! [`Isa::Amx`](super::Isa::Amx) family, which is the AVX-512 family with these four formats'
//! integer core moved from `vpdpbusd` to the tile unit.
//!
//! The weights are the tile product's first (signed) operand, 16 decoded rows by 64 bytes,
//! and the packed token tile is its second (unsigned) operand exactly as `gemm_tile` packs it
//! for the VNNI kernels (a k-quad of 16 tokens per 64-byte row, `q + 128`), so the result tile
//! holds row × token in the orientation the VNNI kernels' accumulators have, and every block
//! ends in the same float steps: each (row, token) gets the bits of the one-token kernel.
//!
//! The k-quants scale every 32 (Q6_K: 16) weights by their own sub-block scale, which a tile
//! product cannot apply between its k-steps. Instead the decode folds the scale into the codes
//! (`v = scale · code`, at most 31 · 63 = 1953, or ±63 · 127 for Q6_K) and splits each into
//! two signed bytes `v = 128 · hi + lo` with `lo` in 0..127: two tile products over the whole
//! 256-weight block then give `Σ v · (q + 128)` exactly, the integer the VNNI kernels reach with
//! a `vpmulld` per sub-block. llama.cpp's AMX path runs one 32-deep product per sub-block and
//! scales each result tile with vector code instead (`ggml-cpu/amx/mmq.cpp`); here the tile
//! unit does twice the multiply-adds and the vector unit an eighth of the scaling.
//!
//! A call takes 64 rows (four 16-row groups) against two token tiles: a prompt's packed
//! activations outgrow L2, so each token slice is met by every group while in L1, and each
//! weight tile by both token tiles; products of few tokens go to the VNNI tile
//! (`Fmt::fallback`). docs/performance.md has the steps and their figures.
//!
//! Linux keeps the tile registers off until a process asks (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)`); [`available`] asks once, and the family exists only if it was
//! granted. Rust's AMX intrinsics are unstable, so the tile instructions are `asm!`; the
//! compiler knows nothing of the tile registers, and each kernel call configures them,
//! uses them and releases them within its own body.

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use glint_gguf::GgmlType;

use super::avx512_gemm::{self as vnni, decode_row, decode_row_q6};
use super::gemm_tile::*;
use super::x86_util::f16_at;

/// Whether the CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7 EDX bits 24, 25) and the OS let
/// this process use the tile registers. Asked once per process.
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let edx = __cpuid_count(7, 0).edx;
        let cpu = edx & (1 << 24) != 0 && edx & (1 << 25) != 0;
        let granted = cpu && request_tile_data();
        if cpu && !granted {
            tracing::info!("the CPU has AMX but the OS did not grant its tile registers");
        }
        granted
    })
}

#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: arch_prctl only changes this process's permitted extended state; an old
    // kernel answers -EINVAL, which is read as "not granted".
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// A palette-1 tile configuration: `(colsb, rows)` of tiles 0..8.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const fn config(shape: [(u16, u8); 8]) -> TileConfig {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = shape[t].0 as u8;
        c[17 + 2 * t] = (shape[t].0 >> 8) as u8;
        c[48 + t] = shape[t].1;
        t += 1;
    }
    TileConfig(c)
}

/// The k-quant kernels: 0, 1 low and high weight bytes and 2 a token slice (16 k-quads × 16
/// tokens) of even 64-deep steps, 3, 6 and 7 the same of odd steps (loads of one step beside
/// the other's products), 4, 5 the low and high sums (16 rows × 16 i32).
static CONFIG_K: TileConfig = config([(64, 16); 8]);

/// The Q8_0 kernel: 0 / 2 weight codes (16 rows × 32) and 1 / 3 token slices (8 k-quads × 16
/// tokens) of an even / odd block, 4 / 5 their sums.
static CONFIG_Q8: TileConfig = config([
    (32, 16),
    (64, 8),
    (32, 16),
    (64, 8),
    (64, 16),
    (64, 16),
    (0, 0),
    (0, 0),
]);

/// 16 × 16 i32, one tile's worth, aligned for the vector loads that read it back.
#[repr(C, align(64))]
struct Sums([[i32; TOK]; ROW_TILE]);

unsafe fn tiles_on(c: &TileConfig) {
    asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, readonly));
}

unsafe fn tiles_off() {
    asm!("tilerelease", options(nostack, nomem));
}

/// Decoded bytes of one k-quant row-block: the 256 low bytes, then the 256 high bytes, in
/// pieces of 64 (row tiles interleaved, `Fmt::piece`): a tile load reads one piece of the 16
/// rows as 1 KiB in a row.
const SPLIT: usize = 512;
const PIECE: usize = 64;
/// Bytes from one piece of a row tile to the next.
const STEP: usize = ROW_TILE * PIECE;

// Below `fallback`'s count a product runs the VNNI tile (same packing, same bits): with few
// token tiles to share it, the split decode costs more than the tile unit saves. One thread,
// 2048 × 6144, G MAC/s VNNI / AMX (`GLINT_BENCH_BATCH=16,32,48,64 cargo bench --bench quant`):
// Q4_K 95 / 61 at 16 tokens, 115 / 106 at 32, 127 / 136 at 48, 130 / 162 at 64; Q6_K 91 / 101
// at 32; Q8_0 68 / 74 at 16.
static Q4_K: Fmt = Fmt {
    ty: GgmlType::Q4_K,
    qk: 256,
    act_block: Q8K,
    packed: ACT_BLOCK,
    codes: SPLIT,
    meta: META,
    pack: pack_tile::<0x8080_8080>,
    decode: decode_split_q4k,
    kernel: kernel_k4,
    rows: MAX_ROWS,
    piece: PIECE,
    pair: Some(kernel_k4_2),
    fallback: Some((&vnni::Q4_K, 48)),
};
static Q5_K: Fmt = Fmt {
    ty: GgmlType::Q5_K,
    decode: decode_split_q5k,
    fallback: Some((&vnni::Q5_K, 48)),
    ..Q4_K
};
static Q6_K: Fmt = Fmt {
    ty: GgmlType::Q6_K,
    decode: decode_split_q6k,
    kernel: kernel_q6,
    pair: Some(kernel_q6_2),
    fallback: Some((&vnni::Q6_K, 32)),
    ..Q4_K
};
static Q8_0: Fmt = Fmt {
    ty: GgmlType::Q8_0,
    qk: 32,
    act_block: 34,
    packed: Q8_0_PACKED,
    codes: 32,
    meta: 2,
    pack: pack_tile_q8_0,
    decode: decode_q8_0,
    kernel: kernel_q8_0,
    rows: MAX_ROWS,
    piece: 32,
    pair: None,
    fallback: Some((&vnni::Q8_0, 16)),
};

tile_entries!(Q4_K => Q4_K, Q5_K => Q5_K, Q6_K => Q6_K, Q8_0 => Q8_0);

/// Sub-block scale of each 16-bit lane of a 64-code run: run `j` of a block covers sub-blocks
/// `SUB · j ..`, each `32 / SUB` lanes of the even (and of the odd) bytes.
#[inline(always)]
unsafe fn lane_scales<const SUB: usize>(meta: *const i32, j: usize) -> __m512i {
    let lanes = 32 / SUB;
    let mut v = _mm512_set1_epi16(*meta.add(SUB * j) as i16);
    for k in 1..SUB {
        let mask = (((1u64 << lanes) - 1) << (k * lanes)) as u32;
        v = _mm512_mask_mov_epi16(v, mask, _mm512_set1_epi16(*meta.add(SUB * j + k) as i16));
    }
    v
}

/// The 64 codes `v` times their lanes' `scales`, split into low bytes (0..127) and high bytes
/// (`scale · code = 128 · hi + lo`).
#[inline(always)]
unsafe fn split_run(v: __m512i, scales: __m512i) -> (__m512i, __m512i) {
    let byte = _mm512_set1_epi16(0xff);
    let low7 = _mm512_set1_epi16(0x7f);
    let even = _mm512_mullo_epi16(_mm512_and_si512(v, byte), scales);
    let odd = _mm512_mullo_epi16(_mm512_srli_epi16(v, 8), scales);
    let lo = _mm512_or_si512(
        _mm512_and_si512(even, low7),
        _mm512_slli_epi16(_mm512_and_si512(odd, low7), 8),
    );
    let hi = _mm512_or_si512(
        _mm512_and_si512(_mm512_srai_epi16(even, 7), byte),
        _mm512_slli_epi16(_mm512_srai_epi16(odd, 7), 8),
    );
    (lo, hi)
}

/// A k-quant row decoded block by block by the VNNI family's decoder (same block constants),
/// its codes then scaled and split (`SUB` sub-blocks per 64 codes) into the row's pieces:
/// block `b`'s low bytes are pieces `8b .. 8b + 4`, its high bytes the next four.
#[inline(always)]
unsafe fn decode_split<const SUB: usize>(
    vnni: unsafe fn(usize, *const u8, &mut [u8], &mut [i32]),
    block_bytes: usize,
    nb: usize,
    x: *const u8,
    codes: &mut [u8],
    meta: &mut [i32],
) {
    assert!(
        codes.len() > (8 * nb - 1) * STEP + PIECE - 1,
        "AMX row tile scratch"
    );
    let mut tmp = [super::Line([0; 64]); 4];
    let dst = codes.as_mut_ptr();
    for b in 0..nb {
        let m = &mut meta[b * META..(b + 1) * META];
        vnni(
            1,
            x.add(b * block_bytes),
            bytemuck::cast_slice_mut(&mut tmp),
            m,
        );
        for (j, run) in tmp.iter().enumerate() {
            let v = _mm512_load_si512(run.0.as_ptr() as *const _);
            let (lo, hi) = split_run(v, lane_scales::<SUB>(m.as_ptr(), j));
            _mm512_storeu_si512(dst.add((8 * b + j) * STEP) as *mut _, lo);
            _mm512_storeu_si512(dst.add((8 * b + 4 + j) * STEP) as *mut _, hi);
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_split_q4k(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    decode_split::<2>(decode_row::<false>, 144, nb, x, codes, meta)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_split_q5k(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    decode_split::<2>(decode_row::<true>, 176, nb, x, codes, meta)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_split_q6k(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    decode_split::<4>(decode_row_q6, 210, nb, x, codes, meta)
}

/// Q8_0 rows copied into 32-byte pieces (one a block, row tiles interleaved), with the VNNI
/// kernel's block constants: `128 · Σ codes` and d.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn decode_q8_0(nb: usize, x: *const u8, codes: &mut [u8], meta: &mut [i32]) {
    let step = ROW_TILE * 32;
    for b in 0..nb {
        let xb = x.add(b * 34);
        let q = std::slice::from_raw_parts(xb.add(2) as *const i8, 32);
        codes[b * step..b * step + 32].copy_from_slice(bytemuck::cast_slice(q));
        meta[2 * b] = 128 * q.iter().map(|&v| v as i32).sum::<i32>();
        meta[2 * b + 1] = f16_at(xb).to_bits() as i32;
    }
}

/// Block `b`'s `Σ v · (q + 128)` for the row tile at `codes` against the packed block at
/// `ab`, as low and high sums (the row's exact sum is `lo + 128 · hi`): four 64-deep steps,
/// the loads of each odd step into other tiles than the even step's products read.
#[inline(always)]
unsafe fn split_sums(codes: *const u8, b: usize, ab: *const u8, lo: &mut Sums, hi: &mut Sums) {
    asm!(
        "tilezero tmm4",
        "tilezero tmm5",
        "tileloadd tmm0, [{a} + {s}*1]",
        "tileloadd tmm1, [{a} + {s}*1 + 4*1024]",
        "tileloadd tmm2, [{t} + {s}*1]",
        "tileloadd tmm3, [{a} + {s}*1 + 1024]",
        "tileloadd tmm6, [{a} + {s}*1 + 5*1024]",
        "tileloadd tmm7, [{t} + {s}*1 + 1024]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tileloadd tmm0, [{a} + {s}*1 + 2*1024]",
        "tileloadd tmm1, [{a} + {s}*1 + 6*1024]",
        "tileloadd tmm2, [{t} + {s}*1 + 2048]",
        "tdpbsud tmm4, tmm3, tmm7",
        "tdpbsud tmm5, tmm6, tmm7",
        "tileloadd tmm3, [{a} + {s}*1 + 3*1024]",
        "tileloadd tmm6, [{a} + {s}*1 + 7*1024]",
        "tileloadd tmm7, [{t} + {s}*1 + 3072]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tdpbsud tmm4, tmm3, tmm7",
        "tdpbsud tmm5, tmm6, tmm7",
        "tilestored [{lo} + {s}*1], tmm4",
        "tilestored [{hi} + {s}*1], tmm5",
        a = in(reg) codes.add(b * 8 * STEP),
        s = in(reg) 64usize,
        t = in(reg) ab,
        lo = in(reg) lo.0.as_mut_ptr(),
        hi = in(reg) hi.0.as_mut_ptr(),
        options(nostack),
    );
}

/// [`split_sums`] against two token tiles' packed blocks at once (`ab`, and `ab1` for the
/// second: sums `lo1`, `hi1`): four independent chains of products, each weight tile loaded
/// once for both.
#[inline(always)]
unsafe fn split_sums2(
    codes: *const u8,
    b: usize,
    ab: *const u8,
    ab1: *const u8,
    s: [&mut Sums; 4],
) {
    let [lo, hi, lo1, hi1] = s;
    asm!(
        "tilezero tmm4",
        "tilezero tmm5",
        "tilezero tmm6",
        "tilezero tmm7",
        "tileloadd tmm0, [{a} + {s}*1]",
        "tileloadd tmm1, [{a} + {s}*1 + 4*1024]",
        "tileloadd tmm2, [{t} + {s}*1]",
        "tileloadd tmm3, [{u} + {s}*1]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tdpbsud tmm6, tmm0, tmm3",
        "tdpbsud tmm7, tmm1, tmm3",
        "tileloadd tmm0, [{a} + {s}*1 + 1024]",
        "tileloadd tmm1, [{a} + {s}*1 + 5*1024]",
        "tileloadd tmm2, [{t} + {s}*1 + 1024]",
        "tileloadd tmm3, [{u} + {s}*1 + 1024]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tdpbsud tmm6, tmm0, tmm3",
        "tdpbsud tmm7, tmm1, tmm3",
        "tileloadd tmm0, [{a} + {s}*1 + 2*1024]",
        "tileloadd tmm1, [{a} + {s}*1 + 6*1024]",
        "tileloadd tmm2, [{t} + {s}*1 + 2048]",
        "tileloadd tmm3, [{u} + {s}*1 + 2048]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tdpbsud tmm6, tmm0, tmm3",
        "tdpbsud tmm7, tmm1, tmm3",
        "tileloadd tmm0, [{a} + {s}*1 + 3*1024]",
        "tileloadd tmm1, [{a} + {s}*1 + 7*1024]",
        "tileloadd tmm2, [{t} + {s}*1 + 3072]",
        "tileloadd tmm3, [{u} + {s}*1 + 3072]",
        "tdpbsud tmm4, tmm0, tmm2",
        "tdpbsud tmm5, tmm1, tmm2",
        "tdpbsud tmm6, tmm0, tmm3",
        "tdpbsud tmm7, tmm1, tmm3",
        "tilestored [{lo} + {s}*1], tmm4",
        "tilestored [{hi} + {s}*1], tmm5",
        "tilestored [{lo1} + {s}*1], tmm6",
        "tilestored [{hi1} + {s}*1], tmm7",
        a = in(reg) codes.add(b * 8 * STEP),
        s = in(reg) 64usize,
        t = in(reg) ab,
        u = in(reg) ab1,
        lo = in(reg) lo.0.as_mut_ptr(),
        hi = in(reg) hi.0.as_mut_ptr(),
        lo1 = in(reg) lo1.0.as_mut_ptr(),
        hi1 = in(reg) hi1.0.as_mut_ptr(),
        options(nostack),
    );
}

/// Row `r`'s exact block sum from the split sums.
#[inline(always)]
unsafe fn joined(lo: &Sums, hi: &Sums, r: usize) -> __m512i {
    let l = _mm512_load_si512(lo.0[r].as_ptr() as *const _);
    let h = _mm512_load_si512(hi.0[r].as_ptr() as *const _);
    _mm512_add_epi32(l, _mm512_slli_epi32(h, 7))
}

/// The 16-row groups of a call (their first rows' pointers non-null).
fn groups(codes: &[*const u8; R]) -> usize {
    (0..GROUPS).take_while(|&g| !codes[g].is_null()).count()
}

/// A k-quant block's post-processing: the float steps of one VNNI kernel for 16 rows, given
/// the split sums of the group (`meta` its first row's block constants, rows `stride` i32
/// apart).
type KPost = unsafe fn(
    b: usize,
    ab: *const u8,
    meta: *const i32,
    stride: usize,
    lo: &Sums,
    hi: &Sums,
    acc: &mut [__m512],
);

/// The k-quant kernels' frame: for each block, every group's split sums against the token
/// slice (its tiles loaded from memory once, then from L1), each group's rows then finished
/// by `post`.
#[inline(always)]
unsafe fn kernel_k(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
    post: KPost,
) {
    let ng = groups(&codes);
    let (mut lo, mut hi) = (Sums([[0; TOK]; ROW_TILE]), Sums([[0; TOK]; ROW_TILE]));
    let mut acc = [_mm512_setzero_ps(); MAX_ROWS];
    tiles_on(&CONFIG_K);
    for b in 0..nb {
        let ab = tile.add(b * ACT_BLOCK);
        for g in 0..ng {
            let rows = g * ROW_TILE..(g + 1) * ROW_TILE;
            split_sums(codes[g], b, ab, &mut lo, &mut hi);
            post(b, ab, meta[g], nb * META, &lo, &hi, &mut acc[rows]);
        }
    }
    tiles_off();
    for (o, a) in out.iter_mut().zip(acc).take(ng * ROW_TILE) {
        _mm512_storeu_ps(o.as_mut_ptr(), a);
    }
}

/// Q4_K / Q5_K rows: the VNNI tile's block step (`avx512_gemm::k4_step`).
#[inline(always)]
unsafe fn post_k4(
    b: usize,
    ab: *const u8,
    meta: *const i32,
    stride: usize,
    lo: &Sums,
    hi: &Sums,
    acc: &mut [__m512],
) {
    let bsum: [__m512i; 4] =
        std::array::from_fn(|p| _mm512_loadu_si512(ab.add(BS32_AT + 64 * p) as *const _));
    let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
    for (r, acc) in acc.iter_mut().enumerate() {
        let mb = meta.add(r * stride + b * META);
        let mut m = _mm512_setzero_si512();
        for (p, &bs) in bsum.iter().enumerate() {
            m = _mm512_dpwssd_epi32(m, bs, _mm512_set1_epi32(*mb.add(8 + p)));
        }
        *acc = vnni::k4_step(*acc, joined(lo, hi, r), m, mb, yd);
    }
}

/// Q6_K rows: the VNNI tile's block step (`avx512_gemm::q6_step`; the codes' offset of 32
/// taken off with the 16-element activation sums).
#[inline(always)]
unsafe fn post_q6(
    b: usize,
    ab: *const u8,
    meta: *const i32,
    stride: usize,
    lo: &Sums,
    hi: &Sums,
    acc: &mut [__m512],
) {
    let bsum: [__m512i; 8] =
        std::array::from_fn(|p| _mm512_loadu_si512(ab.add(BS16_AT + 64 * p) as *const _));
    let yd = _mm512_loadu_ps(ab.add(YD_AT) as *const f32);
    for (r, acc) in acc.iter_mut().enumerate() {
        let mb = meta.add(r * stride + b * META);
        let mut bias = _mm512_setzero_si512();
        for (p, &bs) in bsum.iter().enumerate() {
            bias = _mm512_dpwssd_epi32(bias, bs, _mm512_set1_epi32(*mb.add(16 + p)));
        }
        *acc = vnni::q6_step(*acc, joined(lo, hi, r), bias, mb, yd);
    }
}

/// [`kernel_k`] over two token tiles (`tile` and the next, `nb` packed blocks on).
#[inline(always)]
unsafe fn kernel_k_pair(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[[f32; TOK]; MAX_ROWS]; 2],
    post: KPost,
) {
    let ng = groups(&codes);
    let mut sums: [Sums; 4] = std::array::from_fn(|_| Sums([[0; TOK]; ROW_TILE]));
    let mut acc = [[_mm512_setzero_ps(); MAX_ROWS]; 2];
    let tile1 = tile.add(nb * ACT_BLOCK);
    tiles_on(&CONFIG_K);
    for b in 0..nb {
        let ab = [tile.add(b * ACT_BLOCK), tile1.add(b * ACT_BLOCK)];
        for g in 0..ng {
            let rows = g * ROW_TILE..(g + 1) * ROW_TILE;
            let [lo, hi, lo1, hi1] = &mut sums;
            split_sums2(codes[g], b, ab[0], ab[1], [lo, hi, lo1, hi1]);
            let [acc0, acc1] = &mut acc;
            post(
                b,
                ab[0],
                meta[g],
                nb * META,
                lo,
                hi,
                &mut acc0[rows.clone()],
            );
            post(b, ab[1], meta[g], nb * META, lo1, hi1, &mut acc1[rows]);
        }
    }
    tiles_off();
    for (out, acc) in out.iter_mut().zip(acc) {
        for (o, a) in out.iter_mut().zip(acc).take(ng * ROW_TILE) {
            _mm512_storeu_ps(o.as_mut_ptr(), a);
        }
    }
}

/// The k-quant kernels: a frame ([`kernel_k`], [`kernel_k_pair`]) with a format's float steps,
/// compiled for AVX-512.
macro_rules! k_kernels {
    ($($name:ident = $frame:ident($post:ident) -> $out:ty;)+) => {$(
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
        unsafe fn $name(
            nb: usize,
            codes: [*const u8; R],
            meta: [*const i32; R],
            tile: *const u8,
            out: &mut $out,
        ) {
            $frame(nb, codes, meta, tile, out, $post)
        }
    )+};
}

k_kernels! {
    kernel_k4 = kernel_k(post_k4) -> [[f32; TOK]; MAX_ROWS];
    kernel_q6 = kernel_k(post_q6) -> [[f32; TOK]; MAX_ROWS];
    kernel_k4_2 = kernel_k_pair(post_k4) -> [[[f32; TOK]; MAX_ROWS]; 2];
    kernel_q6_2 = kernel_k_pair(post_q6) -> [[[f32; TOK]; MAX_ROWS]; 2];
}

/// Q8_0: one 32-deep tile product per block and group, two at a time in different tiles,
/// then the VNNI tile's block step (`avx512_gemm::q8_0_step`: `sum += s · (dw · da)`, block
/// order).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")]
unsafe fn kernel_q8_0(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
) {
    let ng = groups(&codes);
    let step = ROW_TILE * 32;
    let mut sums = [Sums([[0; TOK]; ROW_TILE]), Sums([[0; TOK]; ROW_TILE])];
    let mut acc = [_mm512_setzero_ps(); MAX_ROWS];
    tiles_on(&CONFIG_Q8);
    for b in 0..nb {
        let ab = tile.add(b * Q8_0_PACKED);
        let da = _mm512_loadu_ps(ab.add(512) as *const f32);
        let mut g = 0;
        while g < ng {
            let two = g + 1 < ng;
            let [s0, s1] = &mut sums;
            if two {
                asm!(
                    "tilezero tmm4",
                    "tilezero tmm5",
                    "tileloadd tmm1, [{t} + {w}*1]",
                    "tileloadd tmm0, [{a0} + {s}*1]",
                    "tileloadd tmm2, [{a1} + {s}*1]",
                    "tdpbsud tmm4, tmm0, tmm1",
                    "tdpbsud tmm5, tmm2, tmm1",
                    "tilestored [{c0} + {w}*1], tmm4",
                    "tilestored [{c1} + {w}*1], tmm5",
                    a0 = in(reg) codes[g].add(b * step),
                    a1 = in(reg) codes[g + 1].add(b * step),
                    s = in(reg) 32usize,
                    t = in(reg) ab,
                    w = in(reg) 64usize,
                    c0 = in(reg) s0.0.as_mut_ptr(),
                    c1 = in(reg) s1.0.as_mut_ptr(),
                    options(nostack),
                );
            } else {
                asm!(
                    "tilezero tmm4",
                    "tileloadd tmm1, [{t} + {w}*1]",
                    "tileloadd tmm0, [{a0} + {s}*1]",
                    "tdpbsud tmm4, tmm0, tmm1",
                    "tilestored [{c0} + {w}*1], tmm4",
                    a0 = in(reg) codes[g].add(b * step),
                    s = in(reg) 32usize,
                    t = in(reg) ab,
                    w = in(reg) 64usize,
                    c0 = in(reg) s0.0.as_mut_ptr(),
                    options(nostack),
                );
            }
            for (k, sums) in sums.iter().enumerate().take(1 + two as usize) {
                for (i, p) in sums.0.iter().enumerate() {
                    let r = (g + k) * ROW_TILE + i;
                    let mb = meta[g + k].add(i * 2 * nb + 2 * b);
                    let p = _mm512_load_si512(p.as_ptr() as *const _);
                    acc[r] = vnni::q8_0_step(acc[r], p, mb, da);
                }
            }
            g += 2;
        }
    }
    tiles_off();
    for (o, a) in out.iter_mut().zip(acc).take(ng * ROW_TILE) {
        _mm512_storeu_ps(o.as_mut_ptr(), a);
    }
}
