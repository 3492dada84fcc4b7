//! AVX2 (+FMA, F16C) dot products.
//!
//! Integer parts are exact (products of a u8 weight code and an i8 activation summed with
//! `vpmaddubsw`, whose i16 pair sums cannot saturate for these formats: the largest is
//! 2 * 127 * 127 for IQ4 values), so each block's integer sum equals the scalar kernel's. The
//! per-block float scaling is accumulated in eight f32 lanes (Q8_0: llama.cpp's AVX2 order), or
//! for Q4_K/Q5_K/Q6_K folded per block into one f32 sum (`x86_util::k4_fold` / `q6_fold`, the
//! order `avx2_gemm`'s token-lane tiles can give each token too): either way a different order
//! from ggml's generic code, hence the small tolerance documented in the module above.
//!
//! Each safe wrapper checks the slice lengths before entering the `unsafe` kernel; they are only
//! handed out by [`kernel`] through `dot::kernel_for`, which first checks the CPU has AVX2.

// The multi-row kernels walk several per-row arrays (accumulators, scales, sums) with one
// row index; iterator chains over all of them would hide which row a step works on.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use glint_gguf::GgmlType;

use super::avx2_iq1::{iq1_m_cols, iq1_m_impl, iq1_s_cols, iq1_s_impl};
use super::avx2_iq_signed::{
    parity_one, signed_cols, signed_one, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs, SignedGrid,
};
use super::avx2_unit32::{unit32_rows_impl, Iq4Nl, Mxfp4, Unit32, Q41, Q50, Q51};
use super::x86_util::*;
use super::{VecDotColsFn, VecDotFn, VecDotRowsFn, COLS};
use crate::grids::KVALUES_IQ4NL;

/// The AVX2 kernel for `ty`, if there is one.
pub fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        IQ4_NL => iq4_nl,
        MXFP4 => mxfp4,
        Q8_0 => q8_0,
        Q2_K => q2_k,
        Q3_K => q3_k,
        Q4_K if !wide_int_mul() => q4_k_nw,
        Q5_K if !wide_int_mul() => q5_k_nw,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        IQ4_XS => iq4_xs,
        IQ2_XXS => iq2_xxs,
        IQ3_XXS => iq3_xxs,
        IQ1_S => iq1_s,
        IQ1_M => iq1_m,
        IQ2_XS => iq2_xs,
        IQ2_S => iq2_s,
        IQ3_S => iq3_s,
        F32 => f32_,
        F16 => f16_,
        BF16 => bf16_,
        _ => return None,
    })
}

/// The AVX2 multi-row kernel for `ty`, if there is one (see [`super::VecDotRowsFn`]).
pub fn rows_kernel(ty: GgmlType) -> Option<VecDotRowsFn> {
    use GgmlType::*;
    Some(match ty {
        Q8_0 => q8_0_rows,
        Q4_K if !wide_int_mul() => q4_k_nw_rows,
        Q5_K if !wide_int_mul() => q5_k_nw_rows,
        Q4_K => q4_k_rows,
        Q5_K => q5_k_rows,
        Q6_K => q6_k_rows,
        IQ4_XS => iq4_xs_rows,
        Q4_1 => q4_1_rows,
        Q5_0 => q5_0_rows,
        Q5_1 => q5_1_rows,
        IQ4_NL => iq4_nl_rows,
        MXFP4 => mxfp4_rows,
        _ => return None,
    })
}

/// The AVX2 multi-token kernel for `ty`, if there is one (see [`super::VecDotColsFn`]).
pub fn cols_kernel(ty: GgmlType) -> Option<VecDotColsFn> {
    use GgmlType::*;
    Some(match ty {
        Q8_0 => q8_0_cols,
        Q4_K => q4_k_cols,
        Q5_K => q5_k_cols,
        Q6_K => q6_k_cols,
        IQ1_S => iq1_s_c,
        IQ1_M => iq1_m_c,
        IQ2_XXS => iq2_xxs_c,
        IQ3_XXS => iq3_xxs_c,
        IQ2_XS => iq2_xs_c,
        IQ2_S => iq2_s_c,
        IQ3_S => iq3_s_c,
        _ => return None,
    })
}

/// A [`VecDotColsFn`] over `$imp(nb, w, [a; COLS], out)`, lengths checked.
macro_rules! cols_entry {
    ($name:ident, $imp:expr, $qk:expr, $wsize:expr, $asize:expr) => {
        fn $name(n: usize, w: &[u8], a: [&[u8]; COLS], out: &mut [f32; COLS]) {
            let nb = blocks(n, $qk, w, $wsize, a[0], $asize);
            for t in &a[1..] {
                blocks(n, $qk, w, $wsize, t, $asize);
            }
            // SAFETY: lengths checked above; the kernel's instruction set is checked by
            // `cols_kernel_for`.
            unsafe { $imp(nb, w.as_ptr(), a.map(|t| t.as_ptr()), out) }
        }
    };
}
pub(super) use cols_entry;

/// Asserts the rows hold `nb` blocks each; keeps the raw-pointer kernels in bounds.
#[inline(always)]
pub(super) fn blocks(n: usize, qk: usize, w: &[u8], wsize: usize, a: &[u8], asize: usize) -> usize {
    let nb = n / qk;
    assert!(
        n.is_multiple_of(qk) && w.len() >= nb * wsize && a.len() >= nb * asize,
        "dot row lengths"
    );
    nb
}

macro_rules! safe_kernel {
    ($name:ident, $imp:ident, $qk:expr, $wsize:expr, $asize:expr) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = blocks(n, $qk, w, $wsize, a, $asize);
            // SAFETY: lengths checked above; AVX2/FMA/F16C presence checked by `kernel_for`.
            unsafe { $imp(nb, w.as_ptr(), a.as_ptr()) }
        }
    };
}

/// A kernel written for `R` rows at a time (`$imp::<R>(nb, w, row_bytes, a) -> [f32; R]`,
/// each row computed exactly as `$imp::<1>` would) gives both the single-row entry point and
/// the multi-row one, which runs `$r` rows per pass and single rows for the remainder.
macro_rules! rows_kernel {
    ($name:ident, $rows:ident, $imp:ident, $r:expr, $qk:expr, $wsize:expr, $asize:expr) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = blocks(n, $qk, w, $wsize, a, $asize);
            // SAFETY: lengths checked above; AVX2/FMA/F16C presence checked by `kernel_for`.
            unsafe { $imp::<1>(nb, w.as_ptr(), nb * $wsize, a.as_ptr())[0] }
        }
        rows_entry!($rows, $r, $qk, $wsize, $asize, $imp::<{ $r }>, $imp::<1>);
    };
}

/// A multi-row entry point (`VecDotRowsFn`): `$group(nb, w, row_bytes, a) -> [f32; $r]` for
/// each pass of `$r` rows, `$one(nb, w, row_bytes, a) -> [f32; 1]` for the remaining rows.
/// Both must give each row its family's single-row bits; the caller's selection
/// (`rows_kernel_for`) checks the CPU features they need.
macro_rules! rows_entry {
    ($vis:vis $rows:ident, $r:expr, $qk:expr, $wsize:expr, $asize:expr, $group:expr, $one:expr) => {
        $vis fn $rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
            let nb = n / $qk;
            let rb = nb * $wsize;
            assert!(
                n.is_multiple_of($qk) && w.len() >= rb * out.len() && a.len() >= nb * $asize,
                "dot row lengths"
            );
            let mut groups = out.chunks_exact_mut($r);
            let mut wp = w.as_ptr();
            for o in &mut groups {
                // SAFETY: `$r` rows of `rb` bytes remain at `wp` (checked above); the CPU
                // features are checked by the selection.
                unsafe {
                    o.copy_from_slice(&$group(nb, wp, rb, a.as_ptr()));
                    wp = wp.add($r * rb);
                }
            }
            for o in groups.into_remainder() {
                // SAFETY: as above, one row.
                unsafe {
                    *o = $one(nb, wp, rb, a.as_ptr())[0];
                    wp = wp.add(rb);
                }
            }
        }
    };
}
pub(super) use rows_entry;

rows_kernel!(q8_0, q8_0_rows, q8_0_impl, 4, 32, 34, 34);
// Q4_K and Q5_K run one row a pass: measured (L2-resident, one core) two rows were no faster
// than one; with AVX2's sixteen vector registers two rows of Q5_K spilled to the stack.
rows_kernel!(q4_k, q4_k_rows, q4_k_impl, 1, 256, 144, 292);
rows_kernel!(q5_k, q5_k_rows, q5_k_impl, 1, 256, 176, 292);
rows_kernel!(q4_k_nw, q4_k_nw_rows, q4_k_narrow_impl, 1, 256, 144, 292);
rows_kernel!(q5_k_nw, q5_k_nw_rows, q5_k_narrow_impl, 1, 256, 176, 292);
rows_kernel!(q6_k, q6_k_rows, q6_k_impl, 2, 256, 210, 292);
safe_kernel!(iq4_xs, iq4_xs_one, 256, 136, 292);
cols_entry!(q8_0_cols, q8_0_cols_impl, 32, 34, 34);
cols_entry!(q4_k_cols, k4_cols_impl::<false>, 256, 144, 292);
cols_entry!(q5_k_cols, k4_cols_impl::<true>, 256, 176, 292);
cols_entry!(q6_k_cols, q6_k_cols_impl, 256, 210, 292);
safe_kernel!(q4_0, q4_0_impl, 32, 18, 34);
safe_kernel!(q2_k, q2_k_impl, 256, 84, 292);
safe_kernel!(q3_k, q3_k_impl, 256, 110, 292);
safe_kernel!(iq1_s, iq1_s_impl, 256, 50, 292);
safe_kernel!(iq1_m, iq1_m_impl, 256, 56, 292);
cols_entry!(iq1_s_c, iq1_s_cols, 256, 50, 292);
cols_entry!(iq1_m_c, iq1_m_cols, 256, 56, 292);

/// A [`Unit32`] type's single-row and multi-row entry points, both `unit32_rows_impl`. Two
/// rows a pass: measured on Zen 5 (32768 × 8192, one core) 10-20% faster than one; four were
/// 10-40% slower than one (the shared activation blocks and four rows' dots outgrow AVX2's
/// sixteen registers).
macro_rules! unit32_kernels {
    ($name:ident, $rows:ident, $t:ty) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let (ts, as_) = (<$t as Unit32>::TS, <$t as Unit32>::AS);
            let nb = blocks(n, 32, w, ts, a, as_);
            // SAFETY: lengths checked above; AVX2/FMA/F16C presence checked by `kernel_for`.
            unsafe { unit32_rows_impl::<$t, 1>(nb, w.as_ptr(), nb * ts, a.as_ptr())[0] }
        }
        rows_entry!(
            $rows,
            2,
            32,
            <$t as Unit32>::TS,
            <$t as Unit32>::AS,
            unit32_rows_impl::<$t, 2>,
            unit32_rows_impl::<$t, 1>
        );
    };
}

unit32_kernels!(q4_1, q4_1_rows, Q41);
unit32_kernels!(q5_0, q5_0_rows, Q50);
unit32_kernels!(q5_1, q5_1_rows, Q51);
unit32_kernels!(iq4_nl, iq4_nl_rows, Iq4Nl);
unit32_kernels!(mxfp4, mxfp4_rows, Mxfp4);
/// A [`SignedGrid`] type's one-token (`$kernel`) and multi-token entry points.
macro_rules! signed_kernels {
    ($one:ident, $cols:ident, $g:ty, $kernel:ident) => {
        fn $one(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = blocks(n, 256, w, <$g as SignedGrid>::TS, a, 292);
            // SAFETY: lengths checked above; AVX2/FMA/F16C presence checked by `kernel_for`.
            unsafe { $kernel::<$g>(nb, w.as_ptr(), a.as_ptr()) }
        }
        cols_entry!($cols, signed_cols::<$g>, 256, <$g as SignedGrid>::TS, 292);
    };
}

signed_kernels!(iq2_xxs, iq2_xxs_c, Iq2Xxs, parity_one);
signed_kernels!(iq3_xxs, iq3_xxs_c, Iq3Xxs, parity_one);
signed_kernels!(iq2_xs, iq2_xs_c, Iq2Xs, signed_one);
signed_kernels!(iq2_s, iq2_s_c, Iq2S, signed_one);
signed_kernels!(iq3_s, iq3_s_c, Iq3S, signed_one);

/// Q8_0 keeps llama.cpp's AVX2 float order on each row (one eight-lane accumulator, blocks in
/// order, `hsum_float_8` at the end) because glm5-model's tests hold the Q8_0 path bit-identical
/// to llama.cpp's AVX2 build. The speed comes from rows instead: `R` rows share each activation
/// load and scale, and their accumulator chains are independent.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_impl<const R: usize>(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..nb {
        let yb = y.add(i * 34);
        let yd = f16_at(yb);
        let qy = load256(yb.add(2));
        for (r, a) in acc.iter_mut().enumerate() {
            let xb = x.add(r * rb + i * 34);
            // Blocks are 34 bytes, so one line ahead per two blocks covers the stream.
            if i % 2 == 0 {
                prefetch_rows_avx2::<R>(xb, rb, 64);
            }
            let d = _mm256_set1_ps(f16_at(xb) * yd);
            let p = dot_i8_avx2(load256(xb.add(2)), qy);
            *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *a);
        }
    }
    acc.map(|a| hsum_ps(a))
}

/// [`q8_0_impl`] (one row) for COLS activation rows: each weight block loaded once, every
/// token then running that kernel's operations on its own accumulator.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_cols_impl(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    let mut acc = [_mm256_setzero_ps(); COLS];
    for i in 0..nb {
        let xb = x.add(i * 34);
        if i % 2 == 0 {
            prefetch_ahead_avx2(xb, 64);
        }
        let (wd, qx) = (f16_at(xb), load256(xb.add(2)));
        for (t, a) in acc.iter_mut().enumerate() {
            let yb = y[t].add(i * 34);
            let d = _mm256_set1_ps(wd * f16_at(yb));
            let p = dot_i8_avx2(qx, load256(yb.add(2)));
            *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *a);
        }
    }
    *out = acc.map(|a| hsum_ps(a));
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let off = _mm256_set1_epi8(8);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 18), y.add(i * 34));
        prefetch_ahead_avx2(xb, 18);
        let d = _mm256_set1_ps(f16_at(xb) * f16_at(yb));
        let t = _mm_loadu_si128(xb.add(2) as *const __m128i);
        let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        let p = dot_i8_avx2(_mm256_sub_epi8(q, off), load256(yb.add(2)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc)
}

/// `vpshufb` control that spreads scale byte `2c` over the low 128-bit lane's eight i16 slots
/// and byte `2c + 1` over the high lane's (the two 16-weight groups of 32-weight chunk `c`).
/// With `high`, the byte lands in each slot's high byte (for a signed `>> 8`), else in its low
/// byte with a zero high byte (index 0x80 writes zero).
#[inline(always)]
pub(super) unsafe fn pair_spread(c: usize, high: bool) -> __m256i {
    let slot = |b: usize| -> i16 {
        if high {
            ((b << 8) | 0x80) as i16
        } else {
            (0x8000 | b) as i16
        }
    };
    _mm256_set_m128i(_mm_set1_epi16(slot(2 * c + 1)), _mm_set1_epi16(slot(2 * c)))
}

/// Q2_K: byte 0..16 scales (low nibble scale, high nibble min, one pair per 16 weights),
/// 16..80 two-bit codes (byte `l` of 32-byte half `k` holds weights `128k + 32j + l` in bits
/// `2j..2j+2`), then `d` and `dmin`. The mins term is `dmin * sum(min_j * bsums_j)`, done
/// with one `vpmaddwd` against the activation's 16-element sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 84), y.add(i * 292));
        prefetch_ahead_avx2(xb, 84);
        let yd = f32_at(yb);
        let packed = _mm_loadu_si128(xb as *const __m128i);
        let scales = _mm256_broadcastsi128_si256(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        let summs = _mm256_madd_epi16(mins, load256(yb.add(260)));
        let dmin = _mm256_set1_ps(yd * f16_at(xb.add(82)));
        acc_min = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(summs), acc_min);
        let mut sumi = _mm256_setzero_si256();
        for k in 0..2 {
            let q2 = load256(xb.add(16 + 32 * k));
            for j in 0..4 {
                let q = _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let p = _mm256_maddubs_epi16(q, load256(yb.add(4 + 128 * k + 32 * j)));
                let s = _mm256_shuffle_epi8(scales, pair_spread(4 * k + j, false));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        let d = _mm256_set1_ps(yd * f16_at(xb.add(80)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_min)
}

/// The sixteen Q3_K scales with the bias 32 removed, as i8 lanes: low nibbles in bytes 0..8
/// (two per byte, scales 0..8 then 8..16), high two bits in bytes 8..12 (scale `j` in byte
/// `8 + j % 4`, bits `2 * (j / 4)`). Done a word at a time so all sixteen come out of a few
/// shifts and masks.
#[inline(always)]
pub(super) unsafe fn q3k_scales_i8(p: *const u8) -> __m128i {
    const LO4: u32 = 0x0f0f_0f0f;
    const LO2: u32 = 0x0303_0303;
    let a0 = (p as *const u32).read_unaligned();
    let a1 = (p.add(4) as *const u32).read_unaligned();
    let hi = (p.add(8) as *const u32).read_unaligned();
    let v = _mm_set_epi32(
        (((a1 >> 4) & LO4) | (((hi >> 6) & LO2) << 4)) as i32,
        (((a0 >> 4) & LO4) | (((hi >> 4) & LO2) << 4)) as i32,
        ((a1 & LO4) | (((hi >> 2) & LO2) << 4)) as i32,
        ((a0 & LO4) | ((hi & LO2) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// Q3_K: weight = `(q2 | 4 * hbit) - 4` with q2 the two low bits (laid out as Q2_K's) and hbit
/// from `hmask`. The unsigned `q2 | 4 * hbit` (0..7) feeds `vpmaddubsw` directly; the `- 4`
/// is taken out afterwards as `4 * sum(scale_j * bsums_j)`, exact in integers, the same trick
/// the Q6_K kernel uses for its bias 32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3_k_impl(nb: usize, x: *const u8, y: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_bias = _mm256_setzero_ps();
    for i in 0..nb {
        let (xb, yb) = (x.add(i * 110), y.add(i * 292));
        prefetch_ahead_avx2(xb, 110);
        let d = _mm256_set1_ps(f32_at(yb) * f16_at(xb.add(108)));
        let sc = q3k_scales_i8(xb.add(96));
        let sb = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(yb.add(260)));
        let bias = _mm256_slli_epi32(sb, 2);
        acc_bias = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(bias), acc_bias);
        let scv = _mm256_broadcastsi128_si256(sc);
        let hm = load256(xb);
        let mut sumi = _mm256_setzero_si256();
        for k in 0..2 {
            let q2 = load256(xb.add(32 + 32 * k));
            for j in 0..4 {
                let c = 4 * k + j;
                let lo =
                    _mm256_and_si256(_mm256_srl_epi16(q2, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(c as i32)), one);
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                let p = _mm256_maddubs_epi16(q, load256(yb.add(4 + 32 * c)));
                let s = _mm256_srai_epi16(_mm256_shuffle_epi8(scv, pair_spread(c, true)), 8);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_bias)
}

/// `vpshufb` control copying i16 word `lo` over the low 128-bit lane and word `hi` (of the
/// high lane's own copy) over the high lane.
#[inline(always)]
unsafe fn words(lo: usize, hi: usize) -> __m256i {
    let w = |k: usize| (((2 * k + 1) << 8) | (2 * k)) as i16;
    _mm256_set_m128i(_mm_set1_epi16(w(hi)), _mm_set1_epi16(w(lo)))
}

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K block, one per byte, as words
/// (the bit shuffle of [`k4_scales_mins`] without the round trip through byte arrays).
#[inline(always)]
pub(super) unsafe fn k4_scales_mins_u64(q: *const u8) -> (u64, u64) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let u0 = (q as *const u32).read_unaligned();
    let u1 = (q.add(4) as *const u32).read_unaligned();
    let u2 = (q.add(8) as *const u32).read_unaligned();
    let mins_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let sc = (u0 & KMASK1) as u64 | (sc_hi as u64) << 32;
    let mn = (u1 & KMASK1) as u64 | (mins_hi as u64) << 32;
    (sc, mn)
}

/// The sub-block scales of a Q4_K/Q5_K block as i16 words, and its mins times the
/// activation's 16-element sums as eight i32 lanes (whose sum is the block's mins term).
#[inline(always)]
unsafe fn k4_block_start(xb: *const u8, bsums: __m256i) -> (__m128i, __m256i) {
    let (sc, mn) = k4_scales_mins_u64(xb.add(4));
    let m = _mm_cvtsi64_si128(mn as i64);
    let mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m)), bsums);
    (_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)), mins)
}

/// The block's two exact integer sums from its four scaled-product lanes and eight mins lanes:
/// both reductions share each shuffle.
#[inline(always)]
unsafe fn k4_block_sums(sumi: __m128i, mins: __m256i) -> (i32, i32) {
    let m = _mm_add_epi32(
        _mm256_castsi256_si128(mins),
        _mm256_extracti128_si256(mins, 1),
    );
    let v = _mm_hadd_epi32(sumi, m);
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b10_11_00_01));
    (_mm_cvtsi128_si32(v), _mm_extract_epi32(v, 2))
}

/// Q4_K (`Q5` false) or Q5_K, `R` rows a pass: each activation vector is loaded once for all
/// rows, and each row's sub-block scales come from one `vpshufb` of a register instead of a
/// scalar broadcast. The float work is [`k4_fold`]'s, per block, so the GEMM tiles of
/// `avx2_gemm` (lanes are tokens) give each token these bits.
///
/// `WIDE` scales the pair sums with 256-bit `vpmaddwd`s, four instructions fewer a 64-weight
/// step than folding the halves first ([`fold_madd`]); that fold pays only where 256-bit
/// multiplies take two passes ([`wide_int_mul`]). Integer sums, so both give the same bits.
#[inline(always)]
unsafe fn k4_impl<const Q5: bool, const R: usize, const WIDE: bool>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let bs = if Q5 { 176 } else { 144 };
    let mut acc = [0f32; R];
    for i in 0..nb {
        let yb = y.add(i * 292);
        let bsums = load256(yb.add(260));
        let mut sc16 = [_mm_setzero_si128(); R];
        let mut mins = [_mm256_setzero_si256(); R];
        let mut qh = [_mm256_setzero_si256(); R];
        let mut sumi = [_mm_setzero_si128(); R];
        let mut sumw = [_mm256_setzero_si256(); R];
        let mut scw = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = x.add(r * rb + i * bs);
            prefetch_ahead_avx2(xb, bs);
            (sc16[r], mins[r]) = k4_block_start(xb, bsums);
            if WIDE {
                scw[r] = _mm256_broadcastsi128_si256(sc16[r]);
            }
            if Q5 {
                qh[r] = load256(xb.add(16));
            }
        }
        for j in 0..4 {
            let yl = load256(yb.add(4 + 64 * j));
            let yh = load256(yb.add(36 + 64 * j));
            for r in 0..R {
                let (lo, hi) = k4_codes::<Q5>(x.add(r * rb + i * bs), qh[r], j);
                let (pl, ph) = (_mm256_maddubs_epi16(lo, yl), _mm256_maddubs_epi16(hi, yh));
                if WIDE {
                    let sl = _mm256_shuffle_epi8(scw[r], words(2 * j, 2 * j));
                    let sh = _mm256_shuffle_epi8(scw[r], words(2 * j + 1, 2 * j + 1));
                    let p = _mm256_add_epi32(_mm256_madd_epi16(pl, sl), _mm256_madd_epi16(ph, sh));
                    sumw[r] = _mm256_add_epi32(sumw[r], p);
                } else {
                    let sl = _mm_shuffle_epi8(sc16[r], word(2 * j));
                    let sh = _mm_shuffle_epi8(sc16[r], word(2 * j + 1));
                    let p = _mm_add_epi32(fold_madd(pl, sl), fold_madd(ph, sh));
                    sumi[r] = _mm_add_epi32(sumi[r], p);
                }
            }
        }
        for r in 0..R {
            if WIDE {
                let w = sumw[r];
                sumi[r] = _mm_add_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            }
            let (s, m) = k4_block_sums(sumi[r], mins[r]);
            acc[r] = k4_fold(acc[r], f32_at(yb), x.add(r * rb + i * bs), s, m);
        }
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_impl<const R: usize>(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; R] {
    k4_impl::<false, R, true>(nb, x, rb, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_impl<const R: usize>(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; R] {
    k4_impl::<true, R, true>(nb, x, rb, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_narrow_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    k4_impl::<false, R, false>(nb, x, rb, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_narrow_impl<const R: usize>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    k4_impl::<true, R, false>(nb, x, rb, y)
}

/// Whether this CPU runs a 256-bit integer multiply in one pass. Not on AMD's 128-bit-datapath
/// cores that have AVX2: Excavator (family 0x15), Zen 1 and Zen+ (family 0x17 below model
/// 0x30) and Hygon's Zen 1 (family 0x18), where [`fold_madd`]'s halved multiplies are faster.
/// Measured on Zen 3 (docs/performance.md): the wide Q4_K/Q5_K step is 10-20% faster.
pub(super) fn wide_int_mul() -> bool {
    static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WIDE.get_or_init(|| {
        let (v, l1) = (__cpuid(0), __cpuid(1));
        let vendor = [v.ebx, v.edx, v.ecx].map(u32::to_le_bytes).concat();
        let base = (l1.eax >> 8) & 0xf;
        let family = base
            + if base == 0xf {
                (l1.eax >> 20) & 0xff
            } else {
                0
            };
        let model = ((l1.eax >> 4) & 0xf) | (((l1.eax >> 16) & 0xf) << 4);
        let narrow = match &vendor[..] {
            b"AuthenticAMD" => family < 0x17 || (family == 0x17 && model < 0x30),
            b"HygonGenuine" => family == 0x18,
            _ => false,
        };
        !narrow
    })
}

/// The codes of sub-blocks `2j` (low nibbles) and `2j + 1` (high nibbles) of the Q4_K/Q5_K
/// block at `xb`; for Q5_K their fifth bits are bits `2j` / `2j + 1` of the `qh` bytes, moved
/// to bit 4 by a compare and a mask (no shift carries a neighbouring byte's bits in).
#[inline(always)]
pub(super) unsafe fn k4_codes<const Q5: bool>(
    xb: *const u8,
    qh: __m256i,
    j: usize,
) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0f);
    let q4 = load256(xb.add(if Q5 { 48 } else { 16 } + 32 * j));
    let lo = _mm256_and_si256(q4, m4);
    let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
    if !Q5 {
        return (lo, hi);
    }
    let sixteen = _mm256_set1_epi8(16);
    let bit_lo = _mm256_set1_epi8(1 << (2 * j));
    let bit_hi = _mm256_set1_epi8((2u8 << (2 * j)) as i8);
    let h0 = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo);
    let h1 = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi);
    (
        _mm256_or_si256(lo, _mm256_and_si256(h0, sixteen)),
        _mm256_or_si256(hi, _mm256_and_si256(h1, sixteen)),
    )
}

/// `vpshufb` control copying i16 word `k` over a 128-bit register.
#[inline(always)]
unsafe fn word(k: usize) -> __m128i {
    _mm_set1_epi16((((2 * k + 1) << 8) | (2 * k)) as i16)
}

/// The i16 pair sums `p` of one sub-block folded to eight words (the two 128-bit halves
/// added, exact: at most 2 * 2 * 31 * 128 for 5-bit codes) and multiplied by the scale words
/// `s`: one 128-bit `vpmaddwd` instead of a 256-bit one, which Zen 1's single multiply pipe
/// runs in half the time.
#[inline(always)]
unsafe fn fold_madd(p: __m256i, s: __m128i) -> __m128i {
    _mm_madd_epi16(
        _mm_add_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)),
        s,
    )
}

/// The 32 six-bit codes (0..64) of chunk `k` of a Q6_K half: low four bits from `ql` (its low
/// nibbles for k < 2, else its high ones), bits 2k..2k+2 of `qh` as bits 4..6 — masked in place
/// first so no shift carries a neighbouring byte's bits in.
#[inline(always)]
pub(super) unsafe fn q6k_codes(ql: __m256i, qh: __m256i, k: usize, m4: __m256i) -> __m256i {
    let low = if k < 2 {
        _mm256_and_si256(ql, m4)
    } else {
        _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4)
    };
    let hm = _mm256_and_si256(qh, _mm256_set1_epi8((3u8 << (2 * k)) as i8));
    let high = match k {
        0 => _mm256_slli_epi16(hm, 4),
        1 => _mm256_slli_epi16(hm, 2),
        2 => hm,
        _ => _mm256_srli_epi16(hm, 2),
    };
    _mm256_or_si256(low, high)
}

/// [`q4_k_impl`] (`Q5` false) or [`q5_k_impl`], one row, for COLS activation rows: a block's
/// scales, mins and codes are decoded once, then each token runs that kernel's operations, in
/// its order, on its own accumulators.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k4_cols_impl<const Q5: bool>(
    nb: usize,
    x: *const u8,
    y: [*const u8; COLS],
    out: &mut [f32; COLS],
) {
    let bs = if Q5 { 176 } else { 144 };
    let mut acc = [0f32; COLS];
    for i in 0..nb {
        let xb = x.add(i * bs);
        prefetch_ahead_avx2(xb, bs);
        let (sc, mn) = k4_scales_mins_u64(xb.add(4));
        let m = _mm_cvtsi64_si128(mn as i64);
        let m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
        let sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64));
        let qh = if Q5 {
            load256(xb.add(16))
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = [_mm_setzero_si128(); COLS];
        for j in 0..4 {
            let (lo, hi) = k4_codes::<Q5>(xb, qh, j);
            let sl = _mm_shuffle_epi8(sc16, word(2 * j));
            let sh = _mm_shuffle_epi8(sc16, word(2 * j + 1));
            for (t, s) in sumi.iter_mut().enumerate() {
                let yb = y[t].add(i * 292);
                let pl = fold_madd(_mm256_maddubs_epi16(lo, load256(yb.add(4 + 64 * j))), sl);
                let ph = fold_madd(_mm256_maddubs_epi16(hi, load256(yb.add(36 + 64 * j))), sh);
                *s = _mm_add_epi32(*s, _mm_add_epi32(pl, ph));
            }
        }
        for t in 0..COLS {
            let yb = y[t].add(i * 292);
            let mins = _mm256_madd_epi16(m16, load256(yb.add(260)));
            let (s, m) = k4_block_sums(sumi[t], mins);
            acc[t] = k4_fold(acc[t], f32_at(yb), xb, s, m);
        }
    }
    *out = acc;
}

/// Q6_K, `R` rows a pass. The bias 32 of every code is taken out in integers, as
/// `32 * sum(scale_j * bsums_j)` subtracted from the block's sum, so each block costs one
/// reduction and one FMA ([`q6_fold`]). Chunk `k` of half `h` covers 16-weight groups `8h + 2k` (low lane)
/// and `8h + 2k + 1` (high lane), whose scales one `vpshufb` of that half's scale words gives.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_impl<const R: usize>(nb: usize, x: *const u8, rb: usize, y: *const u8) -> [f32; R] {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [0f32; R];
    for i in 0..nb {
        let yb = y.add(i * 292);
        let yd = f32_at(yb);
        let bsums = load256(yb.add(260));
        let mut sc_half = [[_mm256_setzero_si256(); 2]; R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = x.add(r * rb + i * 210);
            prefetch_rows_avx2::<R>(xb, rb, 210);
            let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(xb.add(192) as *const __m128i));
            sumi[r] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(s16, bsums), 5),
            );
            sc_half[r] = [lanes_of(s16, 0), lanes_of(s16, 1)];
        }
        for h in 0..2 {
            for k in 0..4 {
                let q8 = load256(yb.add(4 + 128 * h + 32 * k));
                for r in 0..R {
                    let xb = x.add(r * rb + i * 210);
                    let ql = load256(xb.add(64 * h + 32 * (k % 2)));
                    let qh = load256(xb.add(128 + 32 * h));
                    let p = _mm256_maddubs_epi16(q6k_codes(ql, qh, k, m4), q8);
                    let s = _mm256_shuffle_epi8(sc_half[r][h], words(2 * k, 2 * k + 1));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, s));
                }
            }
        }
        for r in 0..R {
            acc[r] = q6_fold(acc[r], yd, x.add(r * rb + i * 210), hsum_epi32(sumi[r]), 0);
        }
    }
    acc
}

/// 128-bit lane `k` of `v` in both lanes (`vinserti128`; Zen 1 splits `vperm2i128` into 8
/// macro-ops).
#[inline(always)]
unsafe fn lanes_of(v: __m256i, k: usize) -> __m256i {
    let h = if k == 0 {
        _mm256_castsi256_si128(v)
    } else {
        _mm256_extracti128_si256(v, 1)
    };
    _mm256_set_m128i(h, h)
}

/// [`q6_k_impl`] (one row) for COLS activation rows: a block's 6-bit codes and scale words are
/// built once per chunk, then each token runs that kernel's operations, in its order, on its
/// own accumulators.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_cols_impl(nb: usize, x: *const u8, y: [*const u8; COLS], out: &mut [f32; COLS]) {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [0f32; COLS];
    for i in 0..nb {
        let xb = x.add(i * 210);
        prefetch_ahead_avx2(xb, 210);
        let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(xb.add(192) as *const __m128i));
        let sc_half = [lanes_of(s16, 0), lanes_of(s16, 1)];
        let sumi0 = |t: usize| {
            let bsums = load256(y[t].add(i * 292 + 260));
            _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(s16, bsums), 5),
            )
        };
        let mut sumi: [__m256i; COLS] = std::array::from_fn(sumi0);
        for h in 0..2 {
            let qh = load256(xb.add(128 + 32 * h));
            for k in 0..4 {
                let w = q6k_codes(load256(xb.add(64 * h + 32 * (k % 2))), qh, k, m4);
                let s = _mm256_shuffle_epi8(sc_half[h], words(2 * k, 2 * k + 1));
                for (t, acc_i) in sumi.iter_mut().enumerate() {
                    let q8 = load256(y[t].add(i * 292 + 4 + 128 * h + 32 * k));
                    let p = _mm256_maddubs_epi16(w, q8);
                    *acc_i = _mm256_add_epi32(*acc_i, _mm256_madd_epi16(p, s));
                }
            }
        }
        for t in 0..COLS {
            acc[t] = q6_fold(
                acc[t],
                f32_at(y[t].add(i * 292)),
                xb,
                hsum_epi32(sumi[t]),
                0,
            );
        }
    }
    *out = acc;
}

/// The eight scales of an IQ4_XS block (bias 32 removed) as i16 words, in both 128-bit lanes:
/// low four bits from `scales_l` (two per byte), high two from `scales_h` (two bits each), the
/// latter moved into place by one multiply that shifts each word by its own amount.
#[inline(always)]
unsafe fn iq4xs_scales16(xb: *const u8) -> __m256i {
    let l = _mm_cvtsi32_si128((xb.add(4) as *const u32).read_unaligned() as i32);
    let m4 = _mm_set1_epi8(0x0f);
    let lo = _mm_unpacklo_epi8(
        _mm_and_si128(l, m4),
        _mm_and_si128(_mm_srli_epi16(l, 4), m4),
    );
    let h = _mm_set1_epi16((xb.add(2) as *const u16).read_unaligned() as i16);
    // Word j times 2^(14 - 2j) puts bits 2j..2j+2 of scales_h at bits 14..16; >> 10 to 4..6.
    let pow = _mm_set_epi16(1, 4, 16, 64, 256, 1024, 4096, 16384);
    let hi = _mm_and_si128(
        _mm_srli_epi16(_mm_mullo_epi16(h, pow), 10),
        _mm_set1_epi16(0x30),
    );
    let s = _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(lo), hi), _mm_set1_epi16(32));
    _mm256_broadcastsi128_si256(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_one(nb: usize, x: *const u8, y: *const u8) -> f32 {
    iq4_xs_impl::<1, false>(nb, x, 0, y)[0]
}

thread_local! {
    /// The activation of an [`iq4_xs_rows`] call in the kernel's order.
    static IQ4_ACT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// IQ4_XS, many rows: the activation is put once per call into the order the kernel pairs with
/// each 32-byte load of codes (in every 64 bytes of a block's quants the second and third
/// 16-byte quarters swapped), so every row's step reads it with two 256-bit loads instead of
/// four 16-byte loads and two inserts: a fifth of the step's instructions, for 8 KB copied per
/// call. The same products and sums as [`iq4_xs`], so the same bits.
fn iq4_xs_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    let nb = n / 256;
    let rb = nb * 136;
    assert!(
        n.is_multiple_of(256) && w.len() >= rb * out.len() && a.len() >= nb * 292,
        "dot row lengths"
    );
    let mut y = IQ4_ACT.take();
    y.clear();
    y.extend_from_slice(&a[..nb * 292]);
    for b in y.chunks_exact_mut(292) {
        for g in 0..4 {
            let (q1, q2) = b[20 + 64 * g..52 + 64 * g].split_at_mut(16);
            q1.swap_with_slice(q2);
        }
    }
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: row `r` has `rb` bytes (checked above), `y` holds `nb` activation blocks;
        // AVX2/FMA/F16C presence checked by `rows_kernel_for`.
        *o = unsafe { iq4_xs_impl::<1, true>(nb, w.as_ptr().add(r * rb), rb, y.as_ptr())[0] };
    }
    IQ4_ACT.set(y);
}

/// IQ4_XS, `R` rows a pass (one is used: two were faster from L2 but slower from DRAM, one
/// core, 32768x8192: 6.3-6.5 against 7.7-7.9 GB/s); `PERMUTED` takes the activation in
/// [`iq4_xs_rows`]'s order. A 32-byte load of codes holds sub-blocks `2p` (low lane) and
/// `2p + 1` (high lane), low nibbles being their first 16 weights and high nibbles the last
/// 16. Instead of moving the weights into sub-block order, the activation is permuted to match
/// (once, for all `R` rows), and each product vector then needs one scale per lane.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_impl<const R: usize, const PERMUTED: bool>(
    nb: usize,
    x: *const u8,
    rb: usize,
    y: *const u8,
) -> [f32; R] {
    let m4 = _mm256_set1_epi8(0x0f);
    let values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..nb {
        let yb = y.add(i * 292);
        let mut sc16 = [_mm256_setzero_si256(); R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xb = x.add(r * rb + i * 136);
            prefetch_rows_avx2::<R>(xb, rb, 136);
            sc16[r] = iq4xs_scales16(xb);
        }
        for p in 0..4 {
            // Two 16-byte loads a register (`vinserti128` from memory): Zen 1 splits the
            // cross-lane `vperm2i128` into 8 macro-ops.
            let half = |o: usize| _mm_loadu_si128(yb.add(o) as *const __m128i);
            let (ylo, yhi) = if PERMUTED {
                (load256(yb.add(4 + 64 * p)), load256(yb.add(36 + 64 * p)))
            } else {
                (
                    _mm256_set_m128i(half(36 + 64 * p), half(4 + 64 * p)),
                    _mm256_set_m128i(half(52 + 64 * p), half(20 + 64 * p)),
                )
            };
            for r in 0..R {
                let q = load256(x.add(r * rb + i * 136 + 8 + 32 * p));
                let vl = _mm256_shuffle_epi8(values, _mm256_and_si256(q, m4));
                let vh = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
                let pl = _mm256_maddubs_epi16(_mm256_sign_epi8(vl, vl), _mm256_sign_epi8(ylo, vl));
                let ph = _mm256_maddubs_epi16(_mm256_sign_epi8(vh, vh), _mm256_sign_epi8(yhi, vh));
                let s = _mm256_shuffle_epi8(sc16[r], words(2 * p, 2 * p + 1));
                let both = _mm256_add_epi32(_mm256_madd_epi16(pl, s), _mm256_madd_epi16(ph, s));
                sumi[r] = _mm256_add_epi32(sumi[r], both);
            }
        }
        let yd = f32_at(yb);
        for r in 0..R {
            let d = _mm256_set1_ps(yd * f16_at(x.add(r * rb + i * 136)));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    acc.map(|a| hsum_ps(a))
}

/// Float rows (F32 / F16 / BF16 weights against activations of the same format). ggml's x86
/// kernels also accumulate these in f32 vector lanes; the scalar reference mirrors its generic
/// code (f64 sum), so the two differ by f32 rounding of the partial sums.
fn f32_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 4 * n && a.len() >= 4 * n, "dot row lengths");
    // SAFETY: lengths checked; AVX2/FMA presence checked by `kernel_for`.
    unsafe { float_impl::<4>(n, w.as_ptr(), a.as_ptr()) }
}

fn f16_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 2 * n && a.len() >= 2 * n, "dot row lengths");
    // SAFETY: as above (F16C too).
    unsafe { float_impl::<2>(n, w.as_ptr(), a.as_ptr()) }
}

fn bf16_(n: usize, w: &[u8], a: &[u8]) -> f32 {
    assert!(w.len() >= 2 * n && a.len() >= 2 * n, "dot row lengths");
    // SAFETY: as above.
    unsafe { float_impl::<3>(n, w.as_ptr(), a.as_ptr()) }
}

/// Eight elements at `p` as f32: `KIND` 4 = f32, 2 = f16, 3 = bf16.
#[inline(always)]
unsafe fn load8<const KIND: usize>(p: *const u8) -> __m256 {
    match KIND {
        4 => _mm256_loadu_ps(p as *const f32),
        2 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        _ => _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
            16,
        )),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_impl<const KIND: usize>(n: usize, x: *const u8, y: *const u8) -> f32 {
    let es = if KIND == 4 { 4 } else { 2 };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        prefetch_ahead_avx2(x.add(i * es), 32 * es);
        for (k, a) in acc.iter_mut().enumerate() {
            let off = (i + 8 * k) * es;
            *a = _mm256_fmadd_ps(load8::<KIND>(x.add(off)), load8::<KIND>(y.add(off)), *a);
        }
        i += 32;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum_ps(v);
    let scalar = match KIND {
        4 => super::scalar_float::dot_f32,
        2 => super::scalar_float::dot_f16,
        _ => super::scalar_float::dot_bf16,
    };
    if i < n {
        let rest = n - i;
        sum += scalar(
            rest,
            std::slice::from_raw_parts(x.add(i * es), rest * es),
            std::slice::from_raw_parts(y.add(i * es), rest * es),
        );
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::{self, Isa};

    /// Both Q4_K/Q5_K steps against the scalar kernel (bound as in tests/dot_simd.rs: a few ulps
    /// of the sum of |products|, since only the float order differs), and against each other
    /// bit for bit (their integer sums are exact, the float work the same): whichever of the
    /// two this CPU picks, the other is exercised here too.
    #[test]
    fn wide_and_narrow_k4_steps_equal_the_scalar_kernel() {
        if !(is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"))
        {
            return;
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (ty, bs) in [(GgmlType::Q4_K, 144), (GgmlType::Q5_K, 176)] {
            for nb in [1usize, 3, 8] {
                let n = 256 * nb;
                let mut w: Vec<u8> = (0..nb * bs).map(|_| next() as u8).collect();
                for b in w.chunks_mut(bs) {
                    let d = half::f16::from_f32((next() % 1000) as f32 * 1e-4 + 1e-4);
                    let m = half::f16::from_f32((next() % 1000) as f32 * 1e-4);
                    b[..2].copy_from_slice(&d.to_le_bytes());
                    b[2..4].copy_from_slice(&m.to_le_bytes());
                }
                let x: Vec<f32> = (0..n)
                    .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0)
                    .collect();
                let mut act = vec![0u8; dot::activation_bytes(GgmlType::Q8_K, n).unwrap()];
                dot::quantize_activation(GgmlType::Q8_K, &x, &mut act).unwrap();
                let scalar = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap();
                // SAFETY: AVX2/FMA/F16C checked above; `nb` blocks of weights and activations.
                let (wide, narrow) = unsafe {
                    let (p, a) = (w.as_ptr(), act.as_ptr());
                    if ty == GgmlType::Q4_K {
                        (
                            q4_k_impl::<1>(nb, p, 0, a)[0],
                            q4_k_narrow_impl::<1>(nb, p, 0, a)[0],
                        )
                    } else {
                        (
                            q5_k_impl::<1>(nb, p, 0, a)[0],
                            q5_k_narrow_impl::<1>(nb, p, 0, a)[0],
                        )
                    }
                };
                let wd = crate::dequantize_to_vec(ty, &w).unwrap();
                let ad = crate::dequantize_to_vec(GgmlType::Q8_K, &act).unwrap();
                let mag: f64 = wd.iter().zip(&ad).map(|(a, b)| (a * b).abs() as f64).sum();
                let tol = (nb + 16) as f64 * f32::EPSILON as f64 * mag;
                assert_eq!(wide.to_bits(), narrow.to_bits(), "{ty} nb {nb}");
                assert!(
                    ((wide - scalar) as f64).abs() <= tol,
                    "{ty} nb {nb}: {wide} vs scalar {scalar} (tol {tol})"
                );
            }
        }
    }
}
