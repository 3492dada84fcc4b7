//! Small x86 helpers shared by the AVX2 and AVX-512 kernels.
//!
//! They are `#[inline(always)]` without their own `target_feature`, so they only ever run
//! inlined into a kernel that enables the features they use.

use std::arch::x86_64::*;

/// f16 bits to f32 with F16C (one `vcvtph2ps`), as ggml's `GGML_CPU_FP16_TO_FP32` on x86.
///
/// The move into the vector register is written as `asm!` on purpose: from the intrinsics
/// (`_mm_cvtsi32_si128`, `_mm_set1_epi16`, ...) LLVM sees that only the low 16 bits matter and
/// emits `vpinsrw` from memory into whatever register is free, often a kernel's float
/// accumulator. `vpinsrw` merges, so every block's scale then waits for the previous block's
/// FMA: a false dependency that serialised the AVX2 kernels (Q8_0 ran at a third of its
/// speed without AVX-512 in the target). `vmovd` from a general register writes the whole
/// register and depends on nothing.
#[inline(always)]
pub unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned() as u32;
    let v: __m128i;
    // SAFETY: `vmovd` only moves a value between registers; it is the VEX form, and every caller
    // is an AVX2 or AVX-512 kernel.
    std::arch::asm!(
        "vmovd {v}, {b:e}",
        v = out(xmm_reg) v,
        b = in(reg) bits,
        options(pure, nomem, nostack, preserves_flags)
    );
    _mm_cvtss_f32(_mm_cvtph_ps(v))
}

/// f32 read from an unaligned pointer.
#[inline(always)]
pub unsafe fn f32_at(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}

/// Horizontal sum of eight f32 lanes.
#[inline(always)]
pub unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Horizontal sum of eight i32 lanes (exact while the true sum fits in an i32).
#[inline(always)]
pub unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    _mm_cvtsi128_si32(s)
}

/// 0xFF in byte j where bit j of `w` is set, else 0 (a 32-bit mask spread to bytes: sign bits of
/// IQ2_S/IQ3_S groups, fifth bits of Q5_0/Q5_1).
#[inline(always)]
pub unsafe fn bit_bytes(w: u32) -> __m256i {
    let pick = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(w as i32), pick), bits);
    _mm256_cmpeq_epi8(b, bits)
}

/// 32 bytes from an unaligned pointer.
#[inline(always)]
pub unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Signed x signed 8-bit products summed in fours into i32 lanes (AVX2: sign trick +
/// `vpmaddubsw` + `vpmaddwd`). Exact while `|x| <= 127` or `|y| <= 127`, which Q8 activations
/// guarantee.
#[inline(always)]
pub unsafe fn dot_i8_avx2(x: __m256i, y: __m256i) -> __m256i {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// ggml's `ksigns_iq2xs` expanded: for each 7-bit sign index, eight bytes of +1 / -1 (the eighth
/// sign makes the number of minus signs even), ready for `vpsignb`.
pub static SIGNS_PM1: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let s = (i as u32) | (((i as u32).count_ones() & 1) << 7);
        let mut v = 0u64;
        let mut j = 0;
        while j < 8 {
            let b: u64 = if s & (1 << j) != 0 { 0xff } else { 0x01 };
            v |= b << (8 * j);
            j += 1;
        }
        t[i] = v;
        i += 1;
    }
    t
};

/// Unpacks the eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K block with ggml's
/// word-wide bit shuffle (equivalent to `get_scale_min_k4` for each j, but branch-free).
#[inline(always)]
pub fn k4_scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let u0 = u32::from_le_bytes([q[0], q[1], q[2], q[3]]);
    let u1 = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
    let u2 = u32::from_le_bytes([q[8], q[9], q[10], q[11]]);
    let mins_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let mins_lo = u1 & KMASK1;
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let sc_lo = u0 & KMASK1;
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[..4].copy_from_slice(&sc_lo.to_le_bytes());
    sc[4..].copy_from_slice(&sc_hi.to_le_bytes());
    mn[..4].copy_from_slice(&mins_lo.to_le_bytes());
    mn[4..].copy_from_slice(&mins_hi.to_le_bytes());
    (sc, mn)
}

/// `bsums[j] * mins[j / 2]` of a Q8_K block and a Q4_K/Q5_K block's mins, as eight i32 lanes
/// whose sum is the mins' integer contribution (kept in a vector so the per-block float scaling
/// needs no horizontal sum).
#[inline(always)]
pub unsafe fn mins_bsums_v(mins: &[u8; 8], bsums: *const u8) -> __m256i {
    let m = _mm_loadl_epi64(mins.as_ptr() as *const __m128i);
    let m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    _mm256_madd_epi16(m16, load256(bsums))
}

/// `scales[j] * bsums[j]` for the sixteen i8 scales of a Q6_K block, as eight i32 lanes.
#[inline(always)]
pub unsafe fn scales_bsums_v(scales: *const u8, bsums: *const u8) -> __m256i {
    let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scales as *const __m128i));
    _mm256_madd_epi16(s16, load256(bsums))
}

/// How far ahead of the block being read the weight stream is prefetched, in bytes, by the
/// AVX-512 kernels. Rows of a matvec chunk are contiguous, so this runs into the next rows; it
/// keeps enough DRAM reads in flight that the per-block arithmetic does not leave the memory
/// bus idle.
pub const PREFETCH_BYTES: usize = 1536;

/// The same for the AVX2 kernels. Measured on a Zen 3 EPYC (2 cores, 32768x8192 matvec,
/// docs/performance.md): 1536 bytes left one core at 8 GB/s on Q6_K against a 15-17 GB/s
/// probe, 12 KiB reached 15 GB/s (Q8_0 likewise); Q4_K did not move either way.
pub const PREFETCH_BYTES_AVX2: usize = 12288;

/// Prefetches `len` bytes starting `PREFETCH_BYTES` past `p` into L1, one line at a time.
/// Prefetches never fault, so running past the end of the weights is harmless.
#[inline(always)]
pub unsafe fn prefetch_ahead(p: *const u8, len: usize) {
    prefetch_by::<PREFETCH_BYTES>(p, len)
}

/// [`prefetch_ahead`] at the AVX2 kernels' distance, [`PREFETCH_BYTES_AVX2`].
#[inline(always)]
pub unsafe fn prefetch_ahead_avx2(p: *const u8, len: usize) {
    prefetch_by::<PREFETCH_BYTES_AVX2>(p, len)
}

#[inline(always)]
unsafe fn prefetch_by<const AHEAD: usize>(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        _mm_prefetch(p.wrapping_add(AHEAD + off) as *const i8, _MM_HINT_T0);
        off += 64;
    }
}

/// Prefetches into L2 every line of the `len` bytes at `p`: the same blocks of the next pass's
/// row, one pass (all of its rows) of the stream ahead.
///
/// For the multi-row kernels, whose rows are read side by side. Measured on Zen 5 (one core,
/// 32768 × 8192, the AVX-512 `Unit32` kernel): without software prefetch it read 6-7 GiB/s,
/// so the hardware prefetchers do not follow four interleaved row streams here. A
/// fixed distance, as the one-row kernels use, lands in this pass's other rows and leaves part
/// of the next pass unfetched (MXFP4 10 GiB/s); prefetching only the first and last byte of
/// the span skipped its middle line whenever it spans three (Q5_0 and Q5_1: 9 GiB/s). Every
/// line: 21-23 GiB/s for all five types. L2, not L1: a pass is 17-24 KB ahead, and Zen 4's L1
/// holds 32 KB.
#[inline(always)]
pub unsafe fn prefetch_next_pass(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        _mm_prefetch(p.wrapping_add(off) as *const i8, _MM_HINT_T1);
        off += 64;
    }
    _mm_prefetch(p.wrapping_add(len - 1) as *const i8, _MM_HINT_T1);
}

/// The prefetch of an `R`-row AVX-512 kernel reading `len` bytes at `xb` of a row (`rb` bytes
/// apart): one row streams at [`PREFETCH_BYTES`]; several rows prefetch the next pass's rows
/// ([`prefetch_next_pass`]), where a fixed distance would land in this pass's rows.
#[inline(always)]
pub unsafe fn prefetch_rows<const R: usize>(xb: *const u8, rb: usize, len: usize) {
    prefetch_rows_at::<R, PREFETCH_BYTES>(xb, rb, len)
}

/// [`prefetch_rows`] for the AVX2 kernels: one row at [`PREFETCH_BYTES_AVX2`].
#[inline(always)]
pub unsafe fn prefetch_rows_avx2<const R: usize>(xb: *const u8, rb: usize, len: usize) {
    prefetch_rows_at::<R, PREFETCH_BYTES_AVX2>(xb, rb, len)
}

#[inline(always)]
unsafe fn prefetch_rows_at<const R: usize, const AHEAD: usize>(
    xb: *const u8,
    rb: usize,
    len: usize,
) {
    if R == 1 {
        prefetch_by::<AHEAD>(xb, len);
    } else {
        prefetch_next_pass(xb.wrapping_add(R * rb), len);
    }
}

/// The float steps of every SIMD Q4_K/Q5_K kernel (AVX2 and AVX-512), one block at a time: the
/// block's exact integer sums `s` (scaled codes x activations) and `m` (mins x activation sums)
/// are scaled and added to the row's running sum in block order. Fixing the float work to these
/// two fused multiply-adds per block is what lets a family's one-token kernels, its multi-token
/// ones and its GEMM tiles (whose lanes are tokens) return the same bits for a token.
#[inline(always)]
pub unsafe fn k4_fold(acc: f32, yd: f32, xb: *const u8, s: i32, m: i32) -> f32 {
    let acc = (f16_at(xb) * yd).mul_add(s as f32, acc);
    (-f16_at(xb.add(2)) * yd).mul_add(m as f32, acc)
}

/// The float step of every SIMD Q6_K kernel, per block and in block order: the exact integer
/// `s - 32 * bias` (scaled codes x activations, less the codes' offset) times d x yd (see
/// [`k4_fold`] for why it is fixed).
#[inline(always)]
pub unsafe fn q6_fold(acc: f32, yd: f32, xb: *const u8, s: i32, bias: i32) -> f32 {
    (yd * f16_at(xb.add(208))).mul_add((s - (bias << 5)) as f32, acc)
}
