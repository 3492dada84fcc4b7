//! IQ2_XXS and IQ3_XXS against Q8_K on AVX-512 with VBMI: the grid entries are looked up in
//! registers, not memory.
//!
//! The byte-per-coordinate grids need one scalar load per 8 (IQ2) or 4 (IQ3) weights plus the
//! inserts that assemble a vector from them, which kept these types compute-bound at a fifth
//! of the memory bandwidth. Here a block's 32 (64) grid indices are looked up at once in the
//! packed 16-bit code table held in eight registers (`vpermi2w`), after one byte permute of
//! the indices that puts each pair of groups' codes where one `vpmultishiftqb` (every byte
//! takes its code's bits) and one `vpermb` (code to magnitude) turn them into 64 weights.
//! Signs stay on the scalar side (`pdep` and a parity fold), whose ports are idle. The integer
//! sums are exact and each block's float step is the scalar reference's, in block order, so the
//! results are the reference's bits, as the AVX2 kernels' (which the selection falls back to
//! without VBMI) and the GEMM tiles' are.

use std::arch::x86_64::*;

use super::x86_util::*;
use crate::grids::{IQ2XXS_CODES, IQ2_LEVELS, IQ3XXS_CODES, IQ3XXS_LEVELS};

/// Whether this CPU has what these kernels use beyond the AVX-512 family's baseline.
pub fn available() -> bool {
    is_x86_feature_detected!("avx512vbmi")
}

/// A 256-entry u16 table in eight registers, 32 entries each.
type Table = [__m512i; 8];

#[inline(always)]
unsafe fn load_table(t: &[u16; 256]) -> Table {
    std::array::from_fn(|j| _mm512_loadu_si512(t.as_ptr().add(32 * j) as *const _))
}

/// `t[idx]` for 32 u16 indices below 256: four 64-entry two-register permutes, then bits 6
/// and 7 of the index choose among them.
#[inline(always)]
unsafe fn lookup(t: &Table, idx: __m512i) -> __m512i {
    let r0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);
    let r1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);
    let r2 = _mm512_permutex2var_epi16(t[4], idx, t[5]);
    let r3 = _mm512_permutex2var_epi16(t[6], idx, t[7]);
    let m6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    let m7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    let lo = _mm512_mask_mov_epi16(r0, m6, r1);
    let hi = _mm512_mask_mov_epi16(r2, m6, r3);
    _mm512_mask_mov_epi16(lo, m7, hi)
}

/// A `vpermb` table: byte i is the level of code `i & mask` (a byte's bits above its code
/// are the next code's; codes past the levels never occur).
unsafe fn level_table(levels: &[u8], mask: usize) -> __m512i {
    let t: [u8; 64] = std::array::from_fn(|i| levels.get(i & mask).copied().unwrap_or(0));
    _mm512_loadu_si512(t.as_ptr() as *const _)
}

/// Word-permute controls: lane `l` of control `c` reads word `f(c, l)`.
fn word_ctrl<const C: usize>(f: impl Fn(usize, usize) -> usize) -> [__m512i; C] {
    // SAFETY: plain loads of local arrays (AVX-512 F is checked by the caller's selection).
    std::array::from_fn(|c| {
        let w: [u16; 32] = std::array::from_fn(|l| f(c, l) as u16);
        unsafe { _mm512_loadu_si512(w.as_ptr() as *const _) }
    })
}

/// Byte-select control for `vpmultishiftqb`: byte b of every qword reads bits `f(b)`...+7.
unsafe fn shift_ctrl(f: impl Fn(usize) -> usize) -> __m512i {
    let t: [u8; 64] = std::array::from_fn(|i| f(i % 8) as u8);
    _mm512_loadu_si512(t.as_ptr() as *const _)
}

/// Sign masks of two 32-groups from their sign words, on the scalar side (the vector
/// shuffle units are the bottleneck here): the eight 7-bit fields are deposited one per byte
/// (`pdep`) and each byte's parity becomes its bit 7, which is what ggml's `ksigns_iq2xs`
/// table encodes.
#[inline(always)]
unsafe fn signs64(a: u32, b: u32) -> u64 {
    let v = (a & 0x0fff_ffff) as u64 | ((b & 0x0fff_ffff) as u64) << 28;
    let s = _pdep_u64(v, 0x7f7f_7f7f_7f7f_7f7f);
    let mut x = s ^ (s >> 4);
    x ^= x >> 2;
    x ^= x >> 1;
    s | ((x & 0x0101_0101_0101_0101) << 7)
}

/// A `vpermb` control for 32 bytes: byte `l` reads byte `f(l)`.
unsafe fn byte_ctrl(f: impl Fn(usize) -> usize) -> __m256i {
    let t: [u8; 32] = std::array::from_fn(|l| f(l) as u8);
    _mm256_loadu_si256(t.as_ptr() as *const _)
}

/// Σ over 64 weights of `scale(group) · grid · ±q8`, added to `sumi`: `grid` the 64 magnitudes,
/// `signs` one bit per weight, `ls` the two groups' scales as 16 + 16 i16 lanes.
#[inline(always)]
unsafe fn signed_sum(
    sumi: __m512i,
    grid: __m512i,
    q8: *const u8,
    signs: u64,
    ls: __m512i,
) -> __m512i {
    let q8 = _mm512_loadu_si512(q8 as *const _);
    // The signs go on the grid, with the activation's own sign folded in, and the activation's
    // magnitude is the unsigned operand: negating the activation would wrap Q8_K's -128.
    let flip = signs ^ _mm512_movepi8_mask(q8);
    let w = _mm512_mask_sub_epi8(grid, flip, _mm512_setzero_si512(), grid);
    _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(_mm512_abs_epi8(q8), w), ls)
}

#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2"
)]
pub unsafe fn iq2_xxs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = load_table(&IQ2XXS_CODES);
    let levels = level_table(&IQ2_LEVELS, 3);
    // Index bytes reordered so that the looked-up codes of pair p (groups 2p, 2p+1: codes
    // 8p..8p+7) sit in word p of qwords 0..7, where one `vpmultishiftqb` per pair expands
    // them; qword g's scale nibble (word 4g) into lanes 0-15 (group 2p) and 16-31 (2p+1).
    let order = byte_ctrl(|l| 8 * (l % 4) + l / 4);
    let scale_sel: [__m512i; 4] = word_ctrl(|p, l| 4 * (2 * p + l / 16));
    let coords: [__m512i; 4] = std::array::from_fn(|p| shift_ctrl(|b| 16 * p + 2 * b));
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 66), y.add(i * 292));
        prefetch_ahead(xb, 66);
        // Qword g of the 64 index bytes: group g's four grid indices, then its sign word.
        let qs = _mm512_loadu_si512(xb.add(2) as *const _);
        let idx = _mm256_permutexvar_epi8(order, _mm512_cvtepi64_epi32(qs));
        let codes = lookup(&table, _mm512_cvtepu8_epi16(idx));
        let ls = _mm512_add_epi64(
            _mm512_slli_epi64(_mm512_srli_epi64(qs, 60), 1),
            _mm512_set1_epi64(1),
        );
        let w = xb.add(2) as *const u32;
        // Two integer chains (exact, so their order is free): dpwssd's latency, not its
        // throughput, would bound one.
        let mut sumi = [_mm512_setzero_si512(); 2];
        for p in 0..4 {
            let signs = signs64(
                w.add(4 * p + 1).read_unaligned(),
                w.add(4 * p + 3).read_unaligned(),
            );
            let grid =
                _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(coords[p], codes), levels);
            let lsp = _mm512_permutexvar_epi16(scale_sel[p], ls);
            sumi[p % 2] = signed_sum(sumi[p % 2], grid, yb.add(4 + 64 * p), signs, lsp);
        }
        let bsum = _mm512_reduce_add_epi32(_mm512_add_epi32(sumi[0], sumi[1]));
        sumf += (f16_at(xb) * f32_at(yb)) * bsum as f32;
    }
    0.125 * sumf
}

#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2"
)]
pub unsafe fn iq3_xxs_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let table = load_table(&IQ3XXS_CODES);
    let levels = level_table(&IQ3XXS_LEVELS, 7);
    // Index bytes reordered so that codes 2k, 2k+1 of pair p sit in dword p % 2 of qword k
    // of register p / 2 (one `vpmultishiftqb` per pair expands them); aux word g's scale
    // (word 2g) into lanes 0-15 (group 2p) and 16-31 (group 2p+1).
    let order = byte_ctrl(|l| 16 * (l % 4 / 2) + 2 * (l / 4) + l % 2);
    let scale_sel: [__m512i; 4] = word_ctrl(|p, l| 2 * (2 * p + l / 16));
    let coords: [__m512i; 2] = std::array::from_fn(|h| shift_ctrl(|b| 32 * h + 4 * b));
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 98), y.add(i * 292));
        prefetch_ahead(xb, 98);
        let codes = [
            lookup(
                &table,
                _mm512_cvtepu8_epi16(_mm256_permutexvar_epi8(order, load256(xb.add(2)))),
            ),
            lookup(
                &table,
                _mm512_cvtepu8_epi16(_mm256_permutexvar_epi8(order, load256(xb.add(34)))),
            ),
        ];
        // Eight u32 aux words: four 7-bit sign fields and a 4-bit scale per 32-group.
        let aux = load256(xb.add(66));
        let ls = _mm512_castsi256_si512(_mm256_add_epi32(
            _mm256_slli_epi32(_mm256_srli_epi32(aux, 28), 1),
            _mm256_set1_epi32(1),
        ));
        let w = xb.add(66) as *const u32;
        let mut sumi = [_mm512_setzero_si512(); 2];
        for p in 0..4 {
            let signs = signs64(
                w.add(2 * p).read_unaligned(),
                w.add(2 * p + 1).read_unaligned(),
            );
            let c = _mm512_multishift_epi64_epi8(coords[p % 2], codes[p / 2]);
            let grid = _mm512_permutexvar_epi8(c, levels);
            let lsp = _mm512_permutexvar_epi16(scale_sel[p], ls);
            sumi[p % 2] = signed_sum(sumi[p % 2], grid, yb.add(4 + 64 * p), signs, lsp);
        }
        let bsum = _mm512_reduce_add_epi32(_mm512_add_epi32(sumi[0], sumi[1]));
        sumf += (f16_at(xb) * f32_at(yb)) * bsum as f32;
    }
    0.25 * sumf
}
