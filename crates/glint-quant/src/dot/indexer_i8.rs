//! The DSA indexer's score over int8 (q8-cached) keys: `score(t) = Σ_h w_h · ReLU(q_h · k_t)`
//! with both sides in int8, so every dot product is an exact integer.
//!
//! Why integers: at long context the scan is the largest part of a CPU decode step (32 heads ×
//! 128 multiply-adds for every cached key, 268 M at 64k), and it is compute-bound. `vpmaddwd`
//! does 16 multiply-adds an instruction against an FMA's 8, and an integer sum is the same in
//! any order, so the AVX2 kernel, the scalar loop and any later kernel give the same bits
//! without having to share a summation order. The query is quantized per head once per step
//! (`amax / 127`, as the key rows are), as DeepSeek's reference indexer quantizes both sides to
//! fp8 per 128 values.
//!
//! The float part is fixed: per key, for the heads in order, `acc += c_h · max(dot_h, 0)` (a
//! multiply then an add from `acc = 0`), with `c_h = w_h · s_h` the head weight times the
//! query scale, then `score = acc · k_scale`. The key's scale comes out of the ReLU because it
//! is positive. A dot is at most 128 · 127 · 127 < 2²⁴ for 128-wide heads, so it converts to
//! f32 exactly.

use super::Isa;

/// Quantizes the `w.len()` query heads `q [heads × dim]` for [`indexer_scores_i8`]: `codes`
/// gets each head's values as `round(x / s_h)` (half away from zero, ±127, NaN as 0) with
/// `s_h = max|x| / 127` over the head's finite values (1 when all are 0), and `coef` gets
/// `w_h · s_h`.
pub fn quantize_indexer_query(
    q: &[f32],
    w: &[f32],
    dim: usize,
    codes: &mut [i16],
    coef: &mut [f32],
) {
    let heads = w.len();
    assert!(
        q.len() >= heads * dim && codes.len() >= heads * dim && coef.len() >= heads,
        "indexer query extents"
    );
    for h in 0..heads {
        let row = &q[h * dim..(h + 1) * dim];
        let amax = row
            .iter()
            .filter(|x| x.is_finite())
            .fold(0f32, |m, &x| m.max(x.abs()));
        let s = if amax > 0.0 { amax / 127.0 } else { 1.0 };
        for (c, &x) in codes[h * dim..(h + 1) * dim].iter_mut().zip(row) {
            let v = (x / s).round();
            *c = if v.is_nan() {
                0
            } else {
                v.clamp(-127.0, 127.0) as i16
            };
        }
        coef[h] = w[h] * s;
    }
}

/// `out[t]` = the score of key row `t` of `keys [n × dim]` (int8 codes, scale `scales[t]`) for
/// the quantized query of [`quantize_indexer_query`] (`coef.len()` heads), `n = out.len()`.
pub fn indexer_scores_i8(
    codes: &[i16],
    coef: &[f32],
    dim: usize,
    keys: &[i8],
    scales: &[f32],
    out: &mut [f32],
) {
    let (heads, n) = (coef.len(), out.len());
    assert!(
        codes.len() >= heads * dim && keys.len() >= n * dim && scales.len() >= n,
        "indexer scores extents"
    );
    let mut t = 0;
    #[cfg(target_arch = "x86_64")]
    if super::isa() == Isa::Avx512
        && dim.is_multiple_of(4)
        && dim <= MAX_DIM
        && heads <= MAX_HEADS_512
    {
        // SAFETY: the AVX-512 family implies F/BW/VNNI; extents checked above; the kernel
        // reads keys 0..n and writes out[0..n] only (masked tails).
        let done = unsafe {
            avx512::scores(
                codes,
                coef,
                dim,
                keys.as_ptr(),
                scales.as_ptr(),
                out.as_mut_ptr(),
                n,
            )
        };
        if done {
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar && dim.is_multiple_of(16) && dim <= MAX_DIM {
        while t + 16 <= n {
            // SAFETY: AVX2 is present (non-scalar family); keys t..t+16, their scales and
            // outputs are in bounds, the codes hold every head (checked above).
            unsafe {
                avx2_scores16(
                    codes.as_ptr(),
                    coef,
                    dim,
                    keys.as_ptr().add(t * dim),
                    scales.as_ptr().add(t),
                    out.as_mut_ptr().add(t),
                )
            };
            t += 16;
        }
    }
    for t in t..n {
        out[t] = scalar_score(codes, coef, dim, &keys[t * dim..(t + 1) * dim], scales[t]);
    }
}

fn scalar_score(codes: &[i16], coef: &[f32], dim: usize, k: &[i8], scale: f32) -> f32 {
    let mut acc = 0f32;
    for (h, &c) in coef.iter().enumerate() {
        let q = &codes[h * dim..(h + 1) * dim];
        let dot: i32 = q.iter().zip(k).map(|(&a, &b)| a as i32 * b as i32).sum();
        acc += c * (dot as f32).max(0.0);
    }
    acc * scale
}

/// Widest head the SIMD kernels' transposed key buffers hold.
#[cfg(target_arch = "x86_64")]
const MAX_DIM: usize = 256;

/// Most heads the AVX-512 kernel's packed query holds (GLM-5 and DeepSeek-V3.2 have 32–64).
#[cfg(target_arch = "x86_64")]
const MAX_HEADS_512: usize = 64;

/// Sixteen keys against every head. The keys are first transposed into `kt`: for each pair of
/// dimensions `p`, two registers whose eight 32-bit lanes hold eight keys' `(k[2p], k[2p+1])`
/// as i16. Then one `vpmaddwd` by a broadcast pair of a head's codes adds that pair's products
/// for eight keys, so a head's dots come out one key per lane with no horizontal sums, and the
/// ReLU-weighted head sum runs in the same lanes. Four heads a pass: eight i32 accumulators,
/// each key register feeding four multiplies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_scores16(
    codes: *const i16,
    coef: &[f32],
    dim: usize,
    keys: *const i8,
    scales: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    // Written below for the first `dim` entries, the only ones read.
    let mut buf = std::mem::MaybeUninit::<[__m256i; MAX_DIM]>::uninit();
    let kt = buf.as_mut_ptr() as *mut __m256i;
    for g in 0..2 {
        for c in 0..dim / 16 {
            let x: [__m128i; 8] = std::array::from_fn(|l| {
                _mm_loadu_si128(keys.add((8 * g + l) * dim + 16 * c) as *const __m128i)
            });
            // 8 × 8 transpose of 16-bit units (a unit: one key's two bytes of one pair).
            // a[2m + hi]: keys 2m, 2m+1 interleaved, units 0..4 (hi 0) or 4..8 (hi 1).
            let a: [__m128i; 8] = std::array::from_fn(|i| {
                let (u, v) = (x[2 * (i / 2)], x[2 * (i / 2) + 1]);
                if i % 2 == 0 {
                    _mm_unpacklo_epi16(u, v)
                } else {
                    _mm_unpackhi_epi16(u, v)
                }
            });
            // b[4m + 2j + hi]: units 4j + 2hi, 4j + 2hi + 1 of keys 4m..4m+4.
            let b: [__m128i; 8] = std::array::from_fn(|i| {
                let (m, j, hi) = (i / 4, (i / 2) % 2, i % 2);
                let (u, v) = (a[4 * m + j], a[4 * m + 2 + j]);
                if hi == 0 {
                    _mm_unpacklo_epi32(u, v)
                } else {
                    _mm_unpackhi_epi32(u, v)
                }
            });
            for p in 0..8 {
                // Unit p: keys 0..4 from b[q], keys 4..8 from b[4 + q].
                let q = 2 * (p / 4) + (p % 4) / 2;
                let (u, v) = (b[q], b[4 + q]);
                let y = if p % 2 == 0 {
                    _mm_unpacklo_epi64(u, v)
                } else {
                    _mm_unpackhi_epi64(u, v)
                };
                kt.add(2 * (8 * c + p) + g).write(_mm256_cvtepi8_epi16(y));
            }
        }
    }
    let mut score = [_mm256_setzero_ps(); 2];
    let heads = coef.len();
    let mut h = 0;
    while h + 4 <= heads {
        heads_pass::<4>(codes.add(h * dim), &coef[h..h + 4], dim, kt, &mut score);
        h += 4;
    }
    while h < heads {
        heads_pass::<1>(codes.add(h * dim), &coef[h..h + 1], dim, kt, &mut score);
        h += 1;
    }
    for (g, s) in score.iter().enumerate() {
        let v = _mm256_mul_ps(*s, _mm256_loadu_ps(scales.add(8 * g)));
        _mm256_storeu_ps(out.add(8 * g), v);
    }
}

/// `N` heads (codes at `q`, `N × dim`) against the sixteen transposed keys at `kt`, then their
/// ReLU-weighted terms added to `score` in head order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn heads_pass<const N: usize>(
    q: *const i16,
    coef: &[f32],
    dim: usize,
    kt: *const std::arch::x86_64::__m256i,
    score: &mut [std::arch::x86_64::__m256; 2],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_si256(); 2]; N];
    for p in 0..dim / 2 {
        let (k0, k1) = (kt.add(2 * p).read(), kt.add(2 * p + 1).read());
        for (r, a) in acc.iter_mut().enumerate() {
            let qp = _mm256_set1_epi32((q.add(r * dim + 2 * p) as *const i32).read_unaligned());
            a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(k0, qp));
            a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(k1, qp));
        }
    }
    let z = _mm256_setzero_ps();
    for (a, &c) in acc.iter().zip(coef) {
        let c = _mm256_set1_ps(c);
        for g in 0..2 {
            let relu = _mm256_max_ps(_mm256_cvtepi32_ps(a[g]), z);
            score[g] = _mm256_add_ps(score[g], _mm256_mul_ps(c, relu));
        }
    }
}

/// The AVX-512 VNNI scan: `vpdpbusd` multiplies 64 byte pairs and adds them into sixteen i32
/// lanes in one instruction (the AVX2 kernel needs a `vpmaddwd` and a `vpaddd` for 16 pairs).
/// Its first operand is unsigned, so the keys go in as `k + 128` (`k ^ 0x80`, exact for every
/// i8) and each head's accumulator starts at `−128 · Σ q_h`, which leaves the exact dot. Sixteen
/// keys a tile, transposed so lane `l` of word `p` holds dimensions `4p..4p+4` of key `l`: a
/// head's dots come out one key per lane and the ReLU-weighted sum runs in head order, the
/// same float steps as the scalar loop.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{MAX_DIM, MAX_HEADS_512};

    /// Heads a pass: each transposed key word feeds this many independent accumulators.
    const HEADS_PASS: usize = 8;

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn scores(
        codes: &[i16],
        coef: &[f32],
        dim: usize,
        keys: *const i8,
        scales: *const f32,
        out: *mut f32,
        n: usize,
    ) -> bool {
        let (heads, words) = (coef.len(), dim / 4);
        // The query as int8 and the −128·Σq start per head. Done per call (a call is one cache
        // block of keys), 32 codes an instruction, so it stays a few percent of the scan. Codes
        // from `quantize_indexer_query` are within ±127; any others (this is a public function)
        // would not narrow exactly, so the call returns false and the AVX2 kernel takes it.
        let mut wide: __mmask32 = 0;
        let mut qw = [0u32; MAX_HEADS_512 * MAX_DIM / 4];
        let mut start = [0i32; MAX_HEADS_512];
        let ones = _mm512_set1_epi16(1);
        for (h, st) in start.iter_mut().enumerate().take(heads) {
            let mut sum = _mm512_setzero_si512();
            for c in (0..dim).step_by(32) {
                let m: __mmask32 = if dim - c >= 32 {
                    !0
                } else {
                    (1 << (dim - c)) - 1
                };
                let v = _mm512_maskz_loadu_epi16(m, codes.as_ptr().add(h * dim + c));
                wide |= _mm512_cmpgt_epi16_mask(_mm512_abs_epi16(v), _mm512_set1_epi16(127));
                sum = _mm512_add_epi32(sum, _mm512_madd_epi16(v, ones));
                let dst = (qw.as_mut_ptr() as *mut i8).add(h * dim + c);
                _mm512_mask_cvtepi16_storeu_epi8(dst, m, v);
            }
            *st = -128 * _mm512_reduce_add_epi32(sum);
        }
        if wide != 0 {
            return false;
        }
        let mut buf = std::mem::MaybeUninit::<[__m512i; MAX_DIM / 4]>::uninit();
        let kt = buf.as_mut_ptr() as *mut __m512i;
        let mut t = 0;
        while t < n {
            let nk = (n - t).min(16);
            transpose_keys(keys.add(t * dim), dim, nk, kt);
            let mut score = _mm512_setzero_ps();
            let mut h = 0;
            while h + HEADS_PASS <= heads {
                heads_pass::<HEADS_PASS>(&qw, &start, coef, h, words, kt, &mut score);
                h += HEADS_PASS;
            }
            while h < heads {
                heads_pass::<1>(&qw, &start, coef, h, words, kt, &mut score);
                h += 1;
            }
            let m: __mmask16 = if nk == 16 { 0xffff } else { (1 << nk) - 1 };
            let s = _mm512_maskz_loadu_ps(m, scales.add(t));
            _mm512_mask_storeu_ps(out.add(t), m, _mm512_mul_ps(score, s));
            t += nk;
        }
        true
    }

    /// Writes `kt[p]` (p < dim/4) for the `nk ≤ 16` keys at `keys` (`dim` bytes apart): lane `l`
    /// is key `l`'s word `p` plus 128 in every byte; lanes from `nk` on are filler.
    #[inline(always)]
    unsafe fn transpose_keys(keys: *const i8, dim: usize, nk: usize, kt: *mut __m512i) {
        let bias = _mm512_set1_epi8(-128);
        let words = dim / 4;
        for c in 0..words.div_ceil(16) {
            let wn = (words - 16 * c).min(16);
            let wm: __mmask16 = if wn == 16 { 0xffff } else { (1 << wn) - 1 };
            let a: [__m512i; 16] = std::array::from_fn(|l| {
                if l < nk {
                    let row = keys.add(l * dim + 64 * c) as *const i32;
                    _mm512_xor_si512(_mm512_maskz_loadu_epi32(wm, row), bias)
                } else {
                    bias
                }
            });
            // 16 × 16 transpose of 32-bit words: pairs, then quads within 128-bit lanes, then
            // the 128-bit lanes across four registers.
            let b: [__m512i; 16] = std::array::from_fn(|i| {
                let (x, y) = (a[i & !1], a[i | 1]);
                if i % 2 == 0 {
                    _mm512_unpacklo_epi32(x, y)
                } else {
                    _mm512_unpackhi_epi32(x, y)
                }
            });
            // c[4g + k]: in 128-bit lane L, word 4L + k of keys 4g..4g+4.
            let c4: [__m512i; 16] = std::array::from_fn(|i| {
                let (g, k) = (i / 4, i % 4);
                let (x, y) = (b[4 * g + k / 2], b[4 * g + 2 + k / 2]);
                if k % 2 == 0 {
                    _mm512_unpacklo_epi64(x, y)
                } else {
                    _mm512_unpackhi_epi64(x, y)
                }
            });
            for k in 0..4 {
                let d0 = _mm512_shuffle_i32x4::<0x44>(c4[k], c4[4 + k]);
                let d1 = _mm512_shuffle_i32x4::<0xee>(c4[k], c4[4 + k]);
                let d2 = _mm512_shuffle_i32x4::<0x44>(c4[8 + k], c4[12 + k]);
                let d3 = _mm512_shuffle_i32x4::<0xee>(c4[8 + k], c4[12 + k]);
                let o = [
                    _mm512_shuffle_i32x4::<0x88>(d0, d2),
                    _mm512_shuffle_i32x4::<0xdd>(d0, d2),
                    _mm512_shuffle_i32x4::<0x88>(d1, d3),
                    _mm512_shuffle_i32x4::<0xdd>(d1, d3),
                ];
                for (lane, v) in o.into_iter().enumerate() {
                    let j = 4 * lane + k;
                    if j < wn {
                        kt.add(16 * c + j).write(v);
                    }
                }
            }
        }
    }

    /// Heads `h..h + N` against the transposed tile, their ReLU-weighted terms added to
    /// `score` in head order.
    #[inline(always)]
    unsafe fn heads_pass<const N: usize>(
        qw: &[u32],
        start: &[i32],
        coef: &[f32],
        h: usize,
        words: usize,
        kt: *const __m512i,
        score: &mut __m512,
    ) {
        let mut acc: [__m512i; N] = std::array::from_fn(|r| _mm512_set1_epi32(start[h + r]));
        let q = qw.as_ptr().add(h * words);
        for p in 0..words {
            let k = kt.add(p).read();
            for (r, a) in acc.iter_mut().enumerate() {
                let qp = _mm512_set1_epi32(q.add(r * words + p).read() as i32);
                *a = _mm512_dpbusd_epi32(*a, k, qp);
            }
        }
        let z = _mm512_setzero_ps();
        for (r, a) in acc.iter().enumerate() {
            let relu = _mm512_max_ps(_mm512_cvtepi32_ps(*a), z);
            *score = _mm512_add_ps(*score, _mm512_mul_ps(_mm512_set1_ps(coef[h + r]), relu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The score written out from its definition: i64 dots, f64 never (the float steps are the
    /// specified f32 ones), for any kernel family.
    fn want(codes: &[i16], coef: &[f32], dim: usize, k: &[i8], scale: f32) -> f32 {
        let mut acc = 0f32;
        for (h, &c) in coef.iter().enumerate() {
            let mut dot = 0i64;
            for i in 0..dim {
                dot += codes[h * dim + i] as i64 * k[i] as i64;
            }
            let relu = if dot > 0 { dot as f32 } else { 0.0 };
            acc += c * relu;
        }
        acc * scale
    }

    #[test]
    fn scores_equal_the_definition_on_every_family() {
        let mut seed = 0x5851_f42d_4c95_7f2du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (heads, dim, n) in [
            (32, 128, 53),
            (5, 16, 16),
            (7, 48, 35),
            (3, 10, 9),
            (1, 256, 17),
            (13, 64, 40),
        ] {
            let q: Vec<f32> = (0..heads * dim)
                .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0)
                .collect();
            let w: Vec<f32> = (0..heads)
                .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.3)
                .collect();
            let mut keys: Vec<i8> = (0..n * dim).map(|_| (next() >> 56) as i8).collect();
            // Extremes: a row of -128 is never written by the cache (codes stop at ±127) but the
            // kernel must not overflow on ±127 everywhere.
            keys[..dim].fill(127);
            keys[dim..2 * dim].fill(-127);
            for k in keys.iter_mut() {
                *k = (*k).max(-127);
            }
            let scales: Vec<f32> = (0..n).map(|t| 0.01 + t as f32 * 1e-3).collect();
            let mut codes = vec![0i16; heads * dim];
            let mut coef = vec![0f32; heads];
            quantize_indexer_query(&q, &w, dim, &mut codes, &mut coef);
            // One head at full scale so the largest dot (dim · 127 · 127) is reached; with 7
            // heads, codes no quantized query has (the call is public), which the AVX-512 kernel
            // must hand on rather than narrow.
            codes[..dim].fill(127);
            if heads == 7 {
                codes[dim + 3] = 300;
                codes[2 * dim + 1] = -129;
            }
            let mut got = vec![0f32; n];
            indexer_scores_i8(&codes, &coef, dim, &keys, &scales, &mut got);
            for t in 0..n {
                let w = want(&codes, &coef, dim, &keys[t * dim..(t + 1) * dim], scales[t]);
                assert_eq!(
                    got[t].to_bits(),
                    w.to_bits(),
                    "key {t} of {n}, {heads} heads x {dim}: {} vs {w}",
                    got[t]
                );
            }
        }
    }

    #[test]
    fn query_codes_round_half_away_and_saturate() {
        let q = [1.0f32, -0.5, 0.25, f32::NAN, f32::INFINITY, -2.0, 0.0, 0.0];
        let w = [2.0f32, -1.0];
        let (mut codes, mut coef) = ([0i16; 8], [0f32; 2]);
        quantize_indexer_query(&q, &w, 4, &mut codes, &mut coef);
        // Head 0: amax 1 → s = 1/127; 0.25·127 = 31.75 → 32; -0.5·127 = -63.5 → -64.
        assert_eq!(&codes[..4], &[127, -64, 32, 0]);
        assert_eq!(coef[0], 2.0 * (1.0 / 127.0));
        // Head 1: finite amax 2 → s = 2/127; inf saturates; zeros stay 0.
        assert_eq!(&codes[4..], &[127, -127, 0, 0]);
        assert_eq!(coef[1], -(2.0 / 127.0));
    }
}
