//! What the GEMM tiles of every x86 family share (`avx512_gemm`, `avx2_gemm`): the token-tile
//! layout of packed activations, the per-thread scratch, and the driver that decodes a tile of
//! weight rows once and runs a format's kernel over every token tile. A family supplies, per
//! weight format, a [`Fmt`]: its row decoder and its register kernel.
//!
//! Both sides are repacked into thread-local scratch, never into the caller's memory: a tile of
//! 16 weight rows is decoded to bytes once and then met by every token tile (zero-copy weights
//! stay zero-copy), and the activations of a call are transposed once into token tiles.

use std::arch::x86_64::*;
use std::cell::RefCell;

use glint_gguf::GgmlType;

use super::{line_bytes, GemmOut, Line};

/// Tokens per tile: the 16 i32 lanes of a zmm register.
pub const TOK: usize = 16;
/// Weight rows decoded together (their codes and block constants stay in L1/L2 while every
/// token tile passes over them).
pub const ROW_TILE: usize = 16;
/// Most rows a vector kernel computes together against one activation load (each format picks
/// its own count up to this: more rows hide `vpdpbusd` latency, until accumulators spill), and
/// the row pointers every kernel gets.
pub const R: usize = 8;
/// Most rows a kernel returns: a whole-tile (AMX) kernel's [`GROUPS`] 16-row groups.
pub const MAX_ROWS: usize = GROUPS * ROW_TILE;
/// 16-row groups a whole-tile kernel takes in a call (their pointers the first of its [`R`]).
pub const GROUPS: usize = 4;
/// Bytes of one Q8_K block (d, 256 quants, 16 bsums).
pub const Q8K: usize = 292;
/// Packed bytes of one token tile for one block: 64 dword vectors of `q + 128`, the 16 scales,
/// 4 vectors of paired 32-element sums (Q4_K/Q5_K mins) and 8 of paired 16-element sums (Q6_K).
pub const ACT_BLOCK: usize = 64 * 64 + 64 + 4 * 64 + 8 * 64;
/// Where in a packed block the scales, the 32-element and the 16-element sums start.
pub const YD_AT: usize = 4096;
pub const BS32_AT: usize = YD_AT + 64;
pub const BS16_AT: usize = BS32_AT + 4 * 64;
/// Block constants of one row, as i32. Q4_K/Q5_K: eight sub-block scales, four mins pairs, the
/// correction, d and -dmin (f32 bits). Q6_K: sixteen scales, eight scale pairs, the correction
/// and d.
pub const META: usize = 32;

/// One weight format's tile: how its blocks and its partner's are laid out, and its kernels.
pub struct Fmt {
    pub ty: GgmlType,
    /// Elements per block (the partner's blocks are cut to the same size).
    pub qk: usize,
    /// Bytes of one partner (activation) block.
    pub act_block: usize,
    /// Packed bytes of one block of a token tile.
    pub packed: usize,
    /// Decoded code bytes of one row-block, or 0 when the kernel reads the codes in place.
    pub codes: usize,
    /// i32 block constants of one row-block.
    pub meta: usize,
    pub pack: fn(nb: usize, lanes: &[&[u8]], tile: &mut [u8]),
    pub decode: unsafe fn(nb: usize, row: *const u8, codes: &mut [u8], meta: &mut [i32]),
    pub kernel: Kernel,
    /// Rows the kernel computes together (at most [`R`]). A whole-tile kernel (`piece` > 0)
    /// takes [`MAX_ROWS`], and gets in `codes[g]` and `meta[g]` the first row of 16-row group
    /// `g` (its rows `piece` code bytes and `nb · meta` constants apart) for each group it has
    /// a row in (results of rows past the tile's end are dropped), null for the groups past
    /// them.
    pub rows: usize,
    /// 0: each row's codes are `codes` bytes back to back. Else the row tile's codes are
    /// interleaved in pieces of this many bytes, piece `i` of row `r` at `(i · ROW_TILE + r) ·
    /// piece` (what an AMX tile load reads as 16 rows at one stride); the decoder gets the
    /// buffer from row `r`'s first piece on.
    pub piece: usize,
    /// A whole-tile kernel over two token tiles at once, which the driver takes wherever two
    /// are left.
    pub pair: Option<Kernel2>,
    /// `(other, n)`: products of fewer than `n` activations run `other` instead, a format of
    /// the same packed layout and the same bits whose row decode costs less where few token
    /// tiles share it.
    pub fallback: Option<(&'static Fmt, usize)>,
}

impl Fmt {
    /// The format that runs a product of `n_acts` activations (see `fallback`).
    fn for_acts(&self, n_acts: usize) -> &Fmt {
        match self.fallback {
            Some((other, min)) if n_acts < min => other,
            _ => self,
        }
    }

    /// Rows decoded together: [`ROW_TILE`], or a whole-tile kernel's rows (a multiple of it).
    pub fn tile_rows(&self) -> usize {
        self.rows.max(ROW_TILE)
    }
}

pub type Kernel = unsafe fn(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[f32; TOK]; MAX_ROWS],
);

/// [`Kernel`] over the token tile at `tile` and the next one (`nb` packed blocks on), their
/// results in `out[0]` and `out[1]`.
pub type Kernel2 = unsafe fn(
    nb: usize,
    codes: [*const u8; R],
    meta: [*const i32; R],
    tile: *const u8,
    out: &mut [[[f32; TOK]; MAX_ROWS]; 2],
);

#[derive(Default)]
struct Scratch {
    /// Packed token tiles.
    act: Vec<Line>,
    /// Decoded codes of a row tile: `tile_rows` rows of `nb * codes` bytes.
    codes: Vec<u64>,
    /// Block constants of a row tile: `tile_rows` rows of `nb * meta` i32.
    meta: Vec<i32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The largest packed token tile of activations of `n` elements over `fmts`.
pub fn max_tile_bytes(fmts: &[&Fmt], n: usize) -> usize {
    fmts.iter()
        .map(|f| n.div_ceil(f.qk) * f.packed)
        .max()
        .unwrap_or(0)
}

/// Sizes this thread's scratch for calls of up to `n_acts` activations of `n` elements, in
/// every format of `fmts`, so that a step's calls within those sizes do not allocate.
pub fn reserve(fmts: &[&Fmt], n: usize, n_acts: usize) {
    SCRATCH.with_borrow_mut(|s| {
        for f in fmts {
            let nb = n.div_ceil(f.qk);
            line_bytes(&mut s.act, n_acts.div_ceil(TOK) * nb * f.packed);
            grow(&mut s.codes, f.tile_rows() * nb * f.codes);
            let meta = f.tile_rows() * nb * f.meta;
            if s.meta.len() < meta {
                s.meta.resize(meta, 0);
            }
        }
    });
}

/// The products of the `n_rows` rows of `w` (back to back, `n` elements each) and the `n_acts`
/// partner rows `act(i)`, handed to `out` tile by tile as [`GemmFn`] says. Each value is bit for
/// bit the family's one-token kernel's.
///
/// # Panics
/// If a row or activation is not `n` elements long.
pub fn gemm<'a>(
    f: &Fmt,
    n: usize,
    w: &[u8],
    n_rows: usize,
    act: &dyn Fn(usize) -> &'a [u8],
    n_acts: usize,
    out: &mut GemmOut,
) {
    let f = f.for_acts(n_acts);
    assert!(n.is_multiple_of(f.qk), "{} tile, n {n}", f.ty);
    let tile_bytes = n / f.qk * f.packed;
    let n_tiles = n_acts.div_ceil(TOK);
    SCRATCH.with_borrow_mut(|s| {
        let Scratch {
            act: buf,
            codes,
            meta,
        } = s;
        let packed = line_bytes(buf, n_tiles * tile_bytes);
        for (t, tile) in packed.chunks_exact_mut(tile_bytes).enumerate() {
            pack_lanes(f, n, act, t * TOK, TOK.min(n_acts - t * TOK), tile);
        }
        run_in(f, n, w, n_rows, packed, n_acts, codes, meta, out);
    });
}

/// Packs `act(first..first + count)` (at most [`TOK`]) into one token tile.
pub fn pack_lanes<'a>(
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

/// The weight side of [`gemm`] against already packed token tiles (`n_acts` activations), in
/// this thread's scratch.
pub fn run(
    f: &Fmt,
    n: usize,
    w: &[u8],
    n_rows: usize,
    packed: &[u8],
    n_acts: usize,
    out: &mut GemmOut,
) {
    let f = f.for_acts(n_acts);
    SCRATCH.with_borrow_mut(|s| {
        let Scratch { codes, meta, .. } = s;
        run_in(f, n, w, n_rows, packed, n_acts, codes, meta, out)
    })
}

#[allow(clippy::too_many_arguments)]
fn run_in(
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
    let tile_rows = f.tile_rows();
    grow(codes, tile_rows * row_codes);
    if meta.len() < tile_rows * row_meta {
        meta.resize(tile_rows * row_meta, 0);
    }
    let codes = bytemuck::cast_slice_mut::<u64, u8>(codes);
    // Where row `r` of a row tile starts in the scratch (see `Fmt::piece`).
    let row_start = |r: usize| match f.piece {
        0 => r * row_codes,
        piece => r / ROW_TILE * ROW_TILE * row_codes + r % ROW_TILE * piece,
    };
    let mut res = [[0f32; TOK]; MAX_ROWS];
    let mut res2 = [[[0f32; TOK]; MAX_ROWS]; 2];
    for r0 in (0..n_rows).step_by(tile_rows) {
        let rows = tile_rows.min(n_rows - r0);
        for r in 0..rows {
            let row = &w[(r0 + r) * rb..(r0 + r + 1) * rb];
            let c = match f.piece {
                0 => &mut codes[r * row_codes..(r + 1) * row_codes],
                _ => &mut codes[row_start(r)..(r / ROW_TILE + 1) * ROW_TILE * row_codes],
            };
            let m = &mut meta[r * row_meta..(r + 1) * row_meta];
            // SAFETY: `row` is nb blocks of `ty`, `c` and `m` hold nb blocks' worth; the
            // format's family is what selected this path.
            unsafe { (f.decode)(nb, row.as_ptr(), c, m) };
        }
        let code_ptr = |r: usize| {
            if f.codes == 0 {
                w[(r0 + r) * rb..].as_ptr()
            } else {
                codes[row_start(r)..].as_ptr()
            }
        };
        let mut t = 0;
        while t < n_tiles {
            let pair = f.pair.filter(|_| t + 1 < n_tiles);
            let tiles = 1 + pair.is_some() as usize;
            let tile = &packed[t * tile_bytes..(t + tiles) * tile_bytes];
            let valid = |t: usize| TOK.min(n_acts - t * TOK);
            let mut r = 0;
            while r < rows {
                let take = f.rows.min(rows - r);
                if t == 0 {
                    // The next row tile's weights, a group at a time, so its decode finds
                    // them in cache instead of stalling on memory between compute bursts.
                    let next = (r0 + tile_rows + r).min(n_rows);
                    let end = (next + take).min(n_rows);
                    prefetch(&w[next * rb..end * rb]);
                }
                // Rows past `take` repeat the last valid row; a whole-tile kernel gets the first
                // row of each 16-row group it has rows in, null for the groups past them.
                let row_at = |k: usize| match f.piece {
                    0 => (k < f.rows).then(|| r + k.min(take - 1)),
                    _ => (k < GROUPS && k * ROW_TILE < take).then_some(r + k * ROW_TILE),
                };
                let cp: [*const u8; R] =
                    std::array::from_fn(|k| row_at(k).map_or(std::ptr::null(), code_ptr));
                let mp: [*const i32; R] = std::array::from_fn(|k| {
                    row_at(k).map_or(std::ptr::null(), |r| meta[r * row_meta..].as_ptr())
                });
                // SAFETY: every non-null pointer covers nb blocks (the scratch holds the tile's
                // rows, in whole 16-row groups); rows past `take` give results that are
                // dropped; `tile` holds nb packed blocks a token tile.
                match pair {
                    Some(k2) => {
                        unsafe { k2(nb, cp, mp, tile.as_ptr(), &mut res2) };
                        out(r0 + r, t * TOK, &res2[0][..take], valid(t));
                        out(r0 + r, (t + 1) * TOK, &res2[1][..take], valid(t + 1));
                    }
                    None => {
                        unsafe { (f.kernel)(nb, cp, mp, tile.as_ptr(), &mut res) };
                        out(r0 + r, t * TOK, &res[..take], valid(t));
                    }
                }
                r += take;
            }
            t += tiles;
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
/// (XORed with `FLIP`: `0x8080_8080` stores `q + 128` for kernels that need unsigned bytes),
/// then the tokens' scales, then their 32-element sums in i16 pairs. Lanes past the last token
/// are zero, which adds nothing to any lane that is kept.
pub fn pack_tile<const FLIP: u32>(nb: usize, lanes: &[&[u8]], tile: &mut [u8]) {
    tile.fill(0);
    for (t, a) in lanes.iter().enumerate() {
        for b in 0..nb {
            let src = &a[b * Q8K..(b + 1) * Q8K];
            let dst = &mut tile[b * ACT_BLOCK..(b + 1) * ACT_BLOCK];
            for q in 0..64 {
                let v = u32::from_le_bytes(src[4 + 4 * q..8 + 4 * q].try_into().unwrap());
                let o = (q * TOK + t) * 4;
                dst[o..o + 4].copy_from_slice(&(v ^ FLIP).to_le_bytes());
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

/// Packed bytes of one Q8_0 block of a token tile: 8 dword vectors of `q + 128`, the scales.
pub const Q8_0_PACKED: usize = 8 * 64 + 64;

/// [`pack_tile`] for Q8_0 activations (32-element blocks, f16 scale first).
pub fn pack_tile_q8_0(nb: usize, lanes: &[&[u8]], tile: &mut [u8]) {
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

/// A family's entry points over its formats: `gemm_kernel`, `gemm_parts`, `max_tile_bytes` and
/// `reserve`, each matching the type to its [`Fmt`] static.
macro_rules! tile_entries {
    ($($ty:ident => $f:ident),+ $(,)?) => {
        static FORMATS: &[&$crate::dot::gemm_tile::Fmt] = &[$(&$f),+];

        /// The GEMM tile for `ty`, if there is one (the caller has checked the CPU has the
        /// family).
        pub fn gemm_kernel(ty: GgmlType) -> Option<$crate::dot::GemmFn> {
            match ty {
                $(GgmlType::$ty => Some(|n, w, rows, act, n_acts, out| {
                    $crate::dot::gemm_tile::gemm(&$f, n, w, rows, act, n_acts, out)
                }),)+
                _ => None,
            }
        }

        /// [`gemm_kernel`] in its two halves (see [`GemmParts`](crate::dot::GemmParts)).
        pub fn gemm_parts(ty: GgmlType) -> Option<$crate::dot::GemmParts> {
            use $crate::dot::gemm_tile as t;
            match ty {
                $(GgmlType::$ty => Some($crate::dot::GemmParts {
                    tile_bytes: |n| n / $f.qk * $f.packed,
                    pack: |n, act, count, tile| t::pack_lanes(&$f, n, act, 0, count, tile),
                    run: |n, w, rows, packed, n_acts, out| {
                        t::run(&$f, n, w, rows, packed, n_acts, out)
                    },
                }),)+
                _ => None,
            }
        }

        /// The largest packed token tile of activations of `n` elements over this family's
        /// formats.
        pub fn max_tile_bytes(n: usize) -> usize {
            $crate::dot::gemm_tile::max_tile_bytes(FORMATS, n)
        }

        /// Sizes this thread's scratch for calls of up to `n_acts` activations of `n` elements
        /// in every format of this family.
        pub fn reserve(n: usize, n_acts: usize) {
            $crate::dot::gemm_tile::reserve(FORMATS, n, n_acts)
        }
    };
}
pub(super) use tile_entries;
