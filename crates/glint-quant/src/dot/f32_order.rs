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

/// Defines `fn NAME(args) -> R { body }` whose body runs compiled with FMA where the CPU has
/// it. `f32::mul_add` rounds once wherever it runs, but in a build for baseline x86-64 it is a
/// call into libm for every element (60% of the scalar family's time in the model tests);
/// under `fma` it is one `vfmadd`, the same bits. The body must be a plain function (inlined
/// into the FMA copy), not a closure, which would keep its own baseline code.
macro_rules! fma_where_present {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("fma") {
                #[target_feature(enable = "fma")]
                unsafe fn with_fma($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                // SAFETY: the CPU has FMA (checked above), the only feature enabled.
                return unsafe { with_fma($($arg),*) };
            }
            body($($arg),*)
        }
    };
}

/// `Σ a[i]·b[i]` over `min(a.len(), b.len())` elements, in the order described above.
pub fn dot_f32_ordered(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar {
        // SAFETY: a family other than Scalar is only chosen when AVX2 + FMA are present.
        return unsafe { avx2_impl(&a[..n], &b[..n]) };
    }
    scalar_dot(&a[..n], &b[..n])
}

fma_where_present! {
    fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
        scalar_impl(a, b)
    }
}

fn hsum8(l: [f32; 8]) -> f32 {
    let q = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

#[inline(always)]
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

/// `out[i·stride] = dot_f32_ordered(rows[i·dim ..][..dim], x)` for every row: the same bits as
/// one call per row, with the AVX2 kernel taking four rows per pass over `x` (each row keeps
/// its own eight-lane accumulator in the same order), so `x` is loaded once per four rows.
pub fn dot_f32_ordered_rows(rows: &[f32], dim: usize, x: &[f32], out: &mut [f32], stride: usize) {
    let m = rows.len().checked_div(dim).unwrap_or(0);
    assert!(
        x.len() >= dim && (m == 0 || out.len() > (m - 1) * stride),
        "dot rows extents"
    );
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar && dim.is_multiple_of(8) {
        let mut i = 0;
        while i + 4 <= m {
            // SAFETY: AVX2 + FMA are present (non-scalar family); rows i..i+4 are in bounds.
            let d = unsafe { avx2_dot4(&rows[i * dim..(i + 4) * dim], dim, &x[..dim]) };
            for (r, v) in d.into_iter().enumerate() {
                out[(i + r) * stride] = v;
            }
            i += 4;
        }
        for r in i..m {
            out[r * stride] = dot_f32_ordered(&rows[r * dim..(r + 1) * dim], &x[..dim]);
        }
        return;
    }
    for r in 0..m {
        out[r * stride] = dot_f32_ordered(&rows[r * dim..(r + 1) * dim], &x[..dim]);
    }
}

/// `out[i·stride + j] = dot_f32_ordered(a_i, b_j)` for the `dim`-element rows `a_i` of `a` and
/// `b_j` of `b`: the same bits as one call per pair. The AVX2 path computes four `a` rows
/// against three `b` rows per pass: twelve independent accumulators, so both FMA pipes stay
/// busy with room over the FMA latency (eight chains, as a 4 × 2 tile has, would need every
/// FMA to issue the cycle its input is ready), and each load feeds three or four FMAs.
pub fn dot_f32_ordered_grid(a: &[f32], b: &[f32], dim: usize, out: &mut [f32], stride: usize) {
    let (m, n) = (
        a.len().checked_div(dim).unwrap_or(0),
        b.len().checked_div(dim).unwrap_or(0),
    );
    assert!(
        m == 0 || n == 0 || (stride >= n && out.len() >= (m - 1) * stride + n),
        "dot grid extents"
    );
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar && dim.is_multiple_of(8) {
        let one = |i: usize, j: usize| {
            dot_f32_ordered(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim])
        };
        let m4 = m / 4 * 4;
        let mut j = 0;
        if super::isa().vector() == Isa::Avx512 {
            while j + 6 <= n {
                for i in (0..m4).step_by(4) {
                    // SAFETY: AVX-512 F/DQ + FMA are present (AVX-512 family); rows i..i+4 of
                    // a and j..j+6 of b are in bounds.
                    let d = unsafe {
                        avx512_dot4x6(a.as_ptr().add(i * dim), b.as_ptr().add(j * dim), dim)
                    };
                    for (r, v) in d.into_iter().enumerate() {
                        out[(i + r) * stride + j..][..6].copy_from_slice(&v);
                    }
                }
                j += 6;
            }
        }
        while j + 3 <= n {
            for i in (0..m4).step_by(4) {
                // SAFETY: AVX2 + FMA are present (non-scalar family); rows i..i+4 of a and
                // j..j+3 of b are in bounds.
                let d =
                    unsafe { avx2_dot4x3(a.as_ptr().add(i * dim), b.as_ptr().add(j * dim), dim) };
                for (r, v) in d.into_iter().enumerate() {
                    out[(i + r) * stride + j..][..3].copy_from_slice(&v);
                }
            }
            j += 3;
        }
        if j + 2 <= n {
            for i in (0..m4).step_by(4) {
                // SAFETY: as above, for rows j..j+2 of b.
                let d =
                    unsafe { avx2_dot4x2(a.as_ptr().add(i * dim), b.as_ptr().add(j * dim), dim) };
                for (r, v) in d.into_iter().enumerate() {
                    out[(i + r) * stride + j..][..2].copy_from_slice(&v);
                }
            }
            j += 2;
        }
        let covered = j;
        for i in 0..m {
            let tail = if i < m4 { covered } else { 0 };
            for j in tail..n {
                out[i * stride + j] = one(i, j);
            }
        }
        return;
    }
    scalar_grid(a, b, dim, out, stride, m, n)
}

fma_where_present! {
    #[allow(clippy::too_many_arguments)]
    fn scalar_grid(
        a: &[f32],
        b: &[f32],
        dim: usize,
        out: &mut [f32],
        stride: usize,
        m: usize,
        n: usize,
    ) {
        for i in 0..m {
            for j in 0..n {
                let (x, y) = (&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]);
                out[i * stride + j] = scalar_impl(x, y);
            }
        }
    }
}

/// The DSA indexer's head sums for up to eight keys: `out[j] = Σ_h ws[h]·ReLU(dots[8h + j])`,
/// the heads in order, each step a multiply then an add from 0 (ReLU as `f32::max(x, 0)`, NaN
/// to 0), for the `ws.len()` heads and `j < out.len()`. The AVX2 path runs the eight keys in
/// the lanes of one register (lanes past `out.len()` are computed and dropped).
pub fn relu_weighted_sums8(dots: &[f32], ws: &[f32], out: &mut [f32]) {
    assert!(
        dots.len() >= ws.len() * 8 && out.len() <= 8,
        "relu sums extents"
    );
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar {
        // SAFETY: AVX2 is present (non-scalar family); extents checked above.
        unsafe {
            use std::arch::x86_64::*;
            #[target_feature(enable = "avx2,fma")]
            unsafe fn run(dots: &[f32], ws: &[f32], out: &mut [f32]) {
                let z = _mm256_setzero_ps();
                let mut acc = z;
                for (h, &w) in ws.iter().enumerate() {
                    // maxps returns its second operand (0) for NaN, as f32::max does; a -0
                    // input cannot change a sum that starts at +0.
                    let d = _mm256_max_ps(_mm256_loadu_ps(dots.as_ptr().add(8 * h)), z);
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w), d));
                }
                let mut all = [0f32; 8];
                _mm256_storeu_ps(all.as_mut_ptr(), acc);
                out.copy_from_slice(&all[..out.len()]);
            }
            run(dots, ws, out);
        }
        return;
    }
    for (j, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (h, &w) in ws.iter().enumerate() {
            acc += w * dots[8 * h + j].max(0.0);
        }
        *o = acc;
    }
}

/// `o[j] += p[t]·v_t[j]` for the rows `v_t = vs[t·stride ..][..o.len()]`, `t` in order, each step
/// one fused multiply-add (`o[j] = p.mul_add(v, o[j])`, one rounding, as `vfmadd` does): the
/// same bits on every kernel family, with the AVX2 path holding `o` in registers across rows.
/// Fused rather than a multiply then an add because the separate add doubles the instructions
/// of the loop that is half of the attention's work, and on CPUs whose adds share the FMA ports
/// (Intel's) halves its rate.
pub fn axpy_rows_ordered(p: &[f32], vs: &[f32], stride: usize, o: &mut [f32]) {
    let n = o.len();
    assert!(
        p.is_empty() || vs.len() >= (p.len() - 1) * stride + n,
        "axpy rows extents"
    );
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar {
        // SAFETY: AVX2 is present (non-scalar family); extents checked above.
        unsafe { avx2_axpy_rows(p, vs, stride, o) };
        return;
    }
    scalar_axpy(p, vs, stride, o)
}

fma_where_present! {
    fn scalar_axpy(p: &[f32], vs: &[f32], stride: usize, o: &mut [f32]) {
        let n = o.len();
        for (t, &pt) in p.iter().enumerate() {
            let v = &vs[t * stride..t * stride + n];
            for (oj, &vj) in o.iter_mut().zip(v) {
                *oj = pt.mul_add(vj, *oj);
            }
        }
    }
}

/// [`axpy_rows_ordered`] for several heads over the same rows: head `h` adds
/// `ps[h·p_stride + t]·v_t` (`t < count`) into `os[h·n ..][..n]`, for the `os.len() / n` heads.
/// The same bits as one call per head; the AVX2 path takes three heads at a time (pairs at the
/// end), so each row load feeds three FMAs.
pub fn axpy_rows_ordered_heads(
    ps: &[f32],
    p_stride: usize,
    count: usize,
    vs: &[f32],
    stride: usize,
    os: &mut [f32],
    n: usize,
) {
    let heads = os.len().checked_div(n).unwrap_or(0);
    assert!(
        heads == 0 || count == 0 || ps.len() >= (heads - 1) * p_stride + count,
        "axpy heads extents"
    );
    let mut h = 0;
    #[cfg(target_arch = "x86_64")]
    if super::isa() != Isa::Scalar && n.is_multiple_of(32) {
        assert!(
            count == 0 || vs.len() >= (count - 1) * stride + n,
            "axpy rows extents"
        );
        if super::isa().vector() == Isa::Avx512 && n.is_multiple_of(64) {
            while h + 4 <= heads {
                let p = |k: usize| &ps[(h + k) * p_stride..(h + k) * p_stride + count];
                let o = &mut os[h * n..(h + 4) * n];
                // SAFETY: AVX-512 F + FMA are present (AVX-512 family); extents checked above.
                unsafe { avx512_axpy4([p(0), p(1), p(2), p(3)], vs, stride, o, n) };
                h += 4;
            }
        }
        let p = |h: usize| &ps[h * p_stride..h * p_stride + count];
        // Three heads a pass while that leaves no single head (64 heads: twenty threes, two
        // twos), then pairs.
        while heads - h >= 3 && heads - h != 4 {
            let o = &mut os[h * n..(h + 3) * n];
            // SAFETY: AVX2 is present (non-scalar family); extents checked above.
            unsafe { avx2_axpy_heads([p(h), p(h + 1), p(h + 2)], vs, stride, o, n) };
            h += 3;
        }
        while h + 2 <= heads {
            let o = &mut os[h * n..(h + 2) * n];
            // SAFETY: as above.
            unsafe { avx2_axpy_heads([p(h), p(h + 1)], vs, stride, o, n) };
            h += 2;
        }
    }
    for h in h..heads {
        let p = &ps[h * p_stride..h * p_stride + count];
        axpy_rows_ordered(p, vs, stride, &mut os[h * n..(h + 1) * n]);
    }
}

/// `H` heads' [`avx2_axpy_rows`] sharing the row loads, 32 elements a pass: each row load feeds
/// `H` FMAs, `4·H` add chains side by side. Three heads (twelve accumulators, three broadcasts
/// and the row: all sixteen registers) take 7 loads for 12 FMAs where two took 6 for 8. An
/// element's sum is the same chain in row order as one head alone, so the bits are its. `n`
/// is a multiple of 32; `o` holds the heads' outputs back to back, each `p[h]` one weight a row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_axpy_heads<const H: usize>(
    p: [&[f32]; H],
    vs: &[f32],
    stride: usize,
    o: &mut [f32],
    n: usize,
) {
    use std::arch::x86_64::*;
    let (op, vp, rows) = (o.as_mut_ptr(), vs.as_ptr(), p[0].len());
    debug_assert!(p.iter().all(|ph| ph.len() == rows) && o.len() >= H * n);
    for j in (0..n).step_by(32) {
        let mut acc: [[__m256; 4]; H] = std::array::from_fn(|h| {
            std::array::from_fn(|c| _mm256_loadu_ps(op.add(h * n + j + 8 * c)))
        });
        for t in 0..rows {
            let q: [__m256; H] = std::array::from_fn(|h| _mm256_set1_ps(*p[h].get_unchecked(t)));
            for c in 0..4 {
                let v = _mm256_loadu_ps(vp.add(t * stride + j + 8 * c));
                for (a, &qh) in acc.iter_mut().zip(&q) {
                    a[c] = _mm256_fmadd_ps(qh, v, a[c]);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            for (c, &x) in a.iter().enumerate() {
                _mm256_storeu_ps(op.add(h * n + j + 8 * c), x);
            }
        }
    }
}

/// Four heads' [`axpy_rows_ordered`] sharing the row loads, 64 elements (four 512-bit
/// registers a head) at a time: each row load feeds four FMAs and sixteen add chains run side
/// by side. An element's sum is the same chain of fused multiply-adds in row order as in the
/// AVX2 and scalar paths, so the bits are theirs. `n` is a multiple of 64; `o` holds the four
/// heads' outputs back to back.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn avx512_axpy4(p: [&[f32]; 4], vs: &[f32], stride: usize, o: &mut [f32], n: usize) {
    use std::arch::x86_64::*;
    let op = o.as_mut_ptr();
    for j in (0..n).step_by(64) {
        let mut acc: [[__m512; 4]; 4] = std::array::from_fn(|h| {
            std::array::from_fn(|c| _mm512_loadu_ps(op.add(h * n + j + 16 * c)))
        });
        for t in 0..p[0].len() {
            let v: [__m512; 4] =
                std::array::from_fn(|c| _mm512_loadu_ps(vs.as_ptr().add(t * stride + j + 16 * c)));
            for (h, acc) in acc.iter_mut().enumerate() {
                let q = _mm512_set1_ps(*p[h].get_unchecked(t));
                for c in 0..4 {
                    acc[c] = _mm512_fmadd_ps(q, v[c], acc[c]);
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(op.add(h * n + j + 16 * c), *a);
            }
        }
    }
}

/// Rows `a..a+4·dim` against `b..b+6·dim`, each pair in [`dot_f32_ordered`]'s lane order: a
/// 512-bit accumulator holds two `b` rows' eight lanes side by side (the same `a` step
/// broadcast to both halves), so each FMA does two pairs' steps and every lane sees the same
/// products in the same order as the AVX2 kernel's; the halves are then summed as it sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn avx512_dot4x6(a: *const f32, b: *const f32, dim: usize) -> [[f32; 6]; 4] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 3]; 4];
    let mut l = 0;
    while l < dim {
        let bv: [__m512; 3] = std::array::from_fn(|c| {
            let lo = _mm256_loadu_ps(b.add(2 * c * dim + l));
            let hi = _mm256_loadu_ps(b.add((2 * c + 1) * dim + l));
            _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
        });
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = _mm512_broadcast_f32x8(_mm256_loadu_ps(a.add(r * dim + l)));
            for c in 0..3 {
                acc[c] = _mm512_fmadd_ps(av, bv[c], acc[c]);
            }
        }
        l += 8;
    }
    let mut out = [[0f32; 6]; 4];
    for c in 0..3 {
        let halves = acc.map(|r| {
            [
                _mm512_castps512_ps256(r[c]),
                _mm512_extractf32x8_ps::<1>(r[c]),
            ]
        });
        for (o, s) in out.iter_mut().zip(hsum8x(halves)) {
            o[2 * c..2 * c + 2].copy_from_slice(&s);
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_dot4(rows: &[f32], dim: usize, x: &[f32]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let (r0, r1, r2, r3) = (
        rows.as_ptr(),
        rows.as_ptr().add(dim),
        rows.as_ptr().add(2 * dim),
        rows.as_ptr().add(3 * dim),
    );
    let mut a = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < dim {
        let xv = _mm256_loadu_ps(x.as_ptr().add(i));
        a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(r0.add(i)), xv, a[0]);
        a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(r1.add(i)), xv, a[1]);
        a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(r2.add(i)), xv, a[2]);
        a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(r3.add(i)), xv, a[3]);
        i += 8;
    }
    a.map(|v| super::x86_util::hsum_ps(v))
}

/// Rows `a..a+4·dim` against `b..b+2·dim`, each pair in [`dot_f32_ordered`]'s lane order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_dot4x2(a: *const f32, b: *const f32, dim: usize) -> [[f32; 2]; 4] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    let mut l = 0;
    while l < dim {
        let b0 = _mm256_loadu_ps(b.add(l));
        let b1 = _mm256_loadu_ps(b.add(dim + l));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = _mm256_loadu_ps(a.add(r * dim + l));
            acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
        }
        l += 8;
    }
    hsum8x(acc)
}

/// Rows `a..a+4·dim` against `b..b+3·dim`, each pair in [`dot_f32_ordered`]'s lane order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_dot4x3(a: *const f32, b: *const f32, dim: usize) -> [[f32; 3]; 4] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 3]; 4];
    let mut l = 0;
    while l < dim {
        let bv: [__m256; 3] = std::array::from_fn(|c| _mm256_loadu_ps(b.add(c * dim + l)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = _mm256_loadu_ps(a.add(r * dim + l));
            for c in 0..3 {
                acc[c] = _mm256_fmadd_ps(av, bv[c], acc[c]);
            }
        }
        l += 8;
    }
    let front = hsum8x(acc.map(|r| [r[0], r[1]]));
    let z = _mm256_setzero_ps();
    let back = hsum8x([
        [acc[0][2], acc[1][2]],
        [acc[2][2], acc[3][2]],
        [z, z],
        [z, z],
    ]);
    let third = [back[0][0], back[0][1], back[1][0], back[1][1]];
    std::array::from_fn(|r| [front[r][0], front[r][1], third[r]])
}

/// [`super::x86_util::hsum_ps`] of eight accumulators at once, by transposing: the same adds
/// on the same lane pairs, `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`, in 15 vector operations
/// instead of eight separate 6-operation reductions.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum8x(acc: [[std::arch::x86_64::__m256; 2]; 4]) -> [[f32; 2]; 4] {
    use std::arch::x86_64::*;
    let v = [
        acc[0][0], acc[0][1], acc[1][0], acc[1][1], acc[2][0], acc[2][1], acc[3][0], acc[3][1],
    ];
    // s[k] = [v[2k].lo + v[2k].hi, v[2k+1].lo + v[2k+1].hi]: lanes l_i + l_(i+4).
    let s: [__m256; 4] = std::array::from_fn(|k| {
        let (a, b) = (v[2 * k], v[2 * k + 1]);
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        )
    });
    // t: per 128-bit lane, (q0 + q2, q1 + q3) of two vectors.
    let t: [__m256; 2] = std::array::from_fn(|k| {
        let (a, b) = (s[2 * k], s[2 * k + 1]);
        _mm256_add_ps(
            _mm256_shuffle_ps::<0b01_00_01_00>(a, b),
            _mm256_shuffle_ps::<0b11_10_11_10>(a, b),
        )
    });
    // r lanes: v0 v2 v4 v6 | v1 v3 v5 v7.
    let r = _mm256_add_ps(
        _mm256_shuffle_ps::<0b10_00_10_00>(t[0], t[1]),
        _mm256_shuffle_ps::<0b11_01_11_01>(t[0], t[1]),
    );
    let mut o = [0f32; 8];
    _mm256_storeu_ps(o.as_mut_ptr(), r);
    [[o[0], o[4]], [o[1], o[5]], [o[2], o[6]], [o[3], o[7]]]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_axpy_rows(p: &[f32], vs: &[f32], stride: usize, o: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = o.len();
    let n8 = n / 8 * 8;
    let mut j = 0;
    // Four runs of eight at once: each element's sum is still one chain in row order, but four
    // chains interleave instead of every add waiting on the one before it.
    while j + 32 <= n8 {
        let mut acc: [__m256; 4] =
            std::array::from_fn(|c| _mm256_loadu_ps(o.as_ptr().add(j + 8 * c)));
        for (t, &pt) in p.iter().enumerate() {
            let pv = _mm256_set1_ps(pt);
            for (c, a) in acc.iter_mut().enumerate() {
                let v = _mm256_loadu_ps(vs.as_ptr().add(t * stride + j + 8 * c));
                *a = _mm256_fmadd_ps(pv, v, *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.as_mut_ptr().add(j + 8 * c), *a);
        }
        j += 32;
    }
    while j < n8 {
        let mut acc = _mm256_loadu_ps(o.as_ptr().add(j));
        for (t, &pt) in p.iter().enumerate() {
            let v = _mm256_loadu_ps(vs.as_ptr().add(t * stride + j));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(pt), v, acc);
        }
        _mm256_storeu_ps(o.as_mut_ptr().add(j), acc);
        j += 8;
    }
    for (t, &pt) in p.iter().enumerate() {
        for jj in n8..n {
            o[jj] = pt.mul_add(vs[t * stride + jj], o[jj]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_kernels_equal_one_at_a_time() {
        let mut seed = 0x2545f4914f6cdd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        };
        for (m, dim) in [(1, 8), (4, 64), (7, 576), (9, 13)] {
            let rows: Vec<f32> = (0..m * dim).map(|_| next()).collect();
            let x: Vec<f32> = (0..dim).map(|_| next()).collect();
            let mut out = vec![0f32; m * 3];
            dot_f32_ordered_rows(&rows, dim, &x, &mut out, 3);
            for r in 0..m {
                let want = dot_f32_ordered(&rows[r * dim..(r + 1) * dim], &x);
                assert_eq!(out[r * 3].to_bits(), want.to_bits(), "row {r} of {m}x{dim}");
            }
        }
        // n covers 4 × 3 tiles alone (6), with a 4 × 2 tile after them (5, 8) and with single
        // pairs after them (7); m covers rows past the last four (7, 9). On the AVX-512 family
        // 4 × 6 tiles come first (6, 7, 8, 13, 15).
        for (m, n, dim) in [
            (1, 1, 8),
            (8, 6, 576),
            (7, 5, 64),
            (5, 3, 13),
            (4, 7, 16),
            (9, 8, 24),
            (8, 15, 64),
            (5, 13, 576),
        ] {
            let a: Vec<f32> = (0..m * dim).map(|_| next()).collect();
            let b: Vec<f32> = (0..n * dim).map(|_| next()).collect();
            let mut out = vec![0f32; m * (n + 2)];
            dot_f32_ordered_grid(&a, &b, dim, &mut out, n + 2);
            for i in 0..m {
                for j in 0..n {
                    let want =
                        dot_f32_ordered(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]);
                    assert_eq!(
                        out[i * (n + 2) + j].to_bits(),
                        want.to_bits(),
                        "({i}, {j}) of {m}x{n}x{dim}"
                    );
                }
            }
        }
        for heads in [1, 7, 32] {
            let mut dots: Vec<f32> = (0..heads * 8).map(|_| next()).collect();
            dots[3] = f32::NAN;
            dots[5] = -0.0;
            let ws: Vec<f32> = (0..heads).map(|_| next()).collect();
            let mut got = [0f32; 8];
            relu_weighted_sums8(&dots, &ws, &mut got);
            let mut part = [0f32; 3];
            relu_weighted_sums8(&dots, &ws, &mut part);
            assert_eq!(
                part.map(f32::to_bits),
                [got[0], got[1], got[2]].map(f32::to_bits)
            );
            for (j, g) in got.iter().enumerate() {
                let mut want = 0f32;
                for h in 0..heads {
                    let d = dots[8 * h + j];
                    want += ws[h] * if d > 0.0 { d } else { 0.0 };
                }
                assert_eq!(g.to_bits(), want.to_bits(), "key {j} of 8, {heads} heads");
            }
        }
        for (heads, t_n, n) in [
            (5, 8, 512),
            (2, 3, 64),
            (3, 2, 13),
            (9, 5, 128),
            (6, 4, 192),
        ] {
            let ps: Vec<f32> = (0..heads * (t_n + 3)).map(|_| next()).collect();
            let vs: Vec<f32> = (0..t_n * (n + 5)).map(|_| next()).collect();
            let mut os: Vec<f32> = (0..heads * n).map(|_| next()).collect();
            let mut want = os.clone();
            for h in 0..heads {
                for t in 0..t_n {
                    for j in 0..n {
                        // std's mul_add: one rounding, the definition the kernels follow.
                        let (p, v) = (ps[h * (t_n + 3) + t], vs[t * (n + 5) + j]);
                        want[h * n + j] = p.mul_add(v, want[h * n + j]);
                    }
                }
            }
            axpy_rows_ordered_heads(&ps, t_n + 3, t_n, &vs, n + 5, &mut os, n);
            assert_eq!(
                os.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{heads} heads x {t_n} rows of {n}"
            );
        }
        for (t_n, n) in [(1, 8), (5, 512), (3, 13), (8, 40), (2, 100)] {
            let p: Vec<f32> = (0..t_n).map(|_| next()).collect();
            let vs: Vec<f32> = (0..t_n * (n + 5)).map(|_| next()).collect();
            let mut o: Vec<f32> = (0..n).map(|_| next()).collect();
            let mut want = o.clone();
            for t in 0..t_n {
                for j in 0..n {
                    want[j] = p[t].mul_add(vs[t * (n + 5) + j], want[j]);
                }
            }
            axpy_rows_ordered(&p, &vs, n + 5, &mut o);
            assert_eq!(
                o.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{t_n} rows of {n}"
            );
        }
    }

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
