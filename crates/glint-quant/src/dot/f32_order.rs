//! The f32 × f32 dot product of F32 weights, in one summation order on every kernel family.
//!
//! llama.cpp's x86 CPU backend multiplies F32 weights by F32 activations with llamafile's
//! tinyBLAS whenever the inner dimension is a multiple of 8: one eight-lane accumulator per
//! output, `acc = fma(w[l..l+8], x[l..l+8], acc)` for `l = 0, 8, 16, ..`, then a horizontal sum
//! `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`. glint uses that order for every batch size and on
//! every kernel family (the scalar one emulates the lanes with `mul_add`, which rounds once, as
//! `vfmadd` does), so an F32 matmul gives the same bits as llama.cpp's, the same bits on an
//! AVX2 and an AVX-512 machine, and the same bits for a token alone or inside a batch.
//! Elements past the last multiple of 8 (llama.cpp then takes another kernel) are added one by
//! one with `mul_add` after the horizontal sum.

use super::Isa;

/// `Σ a[i]·b[i]` over `min(a.len(), b.len())` elements, in the order described above.
pub fn dot_f32_ordered(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar {
        // SAFETY: a family other than Scalar is only chosen when AVX2 + FMA are present.
        return unsafe { avx2_impl(&a[..n], &b[..n]) };
    }
    scalar_impl(&a[..n], &b[..n])
}

fn hsum8(l: [f32; 8]) -> f32 {
    let q = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

fn scalar_impl(a: &[f32], b: &[f32]) -> f32 {
    let n8 = a.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for (x, y) in a[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        for i in 0..8 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s = hsum8(acc);
    for i in n8..a.len() {
        s = a[i].mul_add(b[i], s);
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_impl(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n8 = a.len() / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        acc = _mm256_fmadd_ps(
            _mm256_loadu_ps(a.as_ptr().add(i)),
            _mm256_loadu_ps(b.as_ptr().add(i)),
            acc,
        );
        i += 8;
    }
    let mut s = super::x86_util::hsum_ps(acc);
    for j in n8..a.len() {
        s = a[j].mul_add(b[j], s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order written out with f64 products rounded the way one FMA rounds: an independent
    /// statement of tinyBLAS's accumulation for n = 8m.
    #[test]
    fn scalar_matches_lane_order_and_simd_matches_scalar() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        };
        for n in [0usize, 1, 7, 8, 9, 64, 96, 133, 6144] {
            let a: Vec<f32> = (0..n).map(|_| next()).collect();
            let b: Vec<f32> = (0..n).map(|_| next()).collect();
            let mut lanes = [0f32; 8];
            let n8 = n / 8 * 8;
            for i in 0..n8 {
                let l = i % 8;
                lanes[l] = (a[i] as f64 * b[i] as f64 + lanes[l] as f64) as f32;
            }
            let mut want = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
                + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
            for i in n8..n {
                want = (a[i] as f64 * b[i] as f64 + want as f64) as f32;
            }
            // The f64 product of two f32 is exact; the f64 add rounds once more than an FMA
            // would only when it is inexact (double rounding), which these inputs never hit.
            let got = scalar_impl(&a, &b);
            assert_eq!(got.to_bits(), want.to_bits(), "n {n}: {got} vs {want}");
            #[cfg(target_arch = "x86_64")]
            if Isa::Avx2.available() {
                let simd = unsafe { avx2_impl(&a, &b) };
                assert_eq!(simd.to_bits(), got.to_bits(), "n {n}: AVX2 vs scalar");
            }
        }
    }
}
