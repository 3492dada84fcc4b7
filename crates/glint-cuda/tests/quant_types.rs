//! Every weight type glint-quant can multiply (a `vec_dot_type` in its table), on CUDA against
//! the CPU backend: `matmul` (1, 3, 9 and 40 tokens: 3 takes the batched per-unit kernel, 9 and
//! 40 the more-than-8-tokens path — the tensor cores for every block type, the per-unit kernels
//! for F32, F16, BF16 and Q8_1; a batch's rows bit-identical to each token alone),
//! `mul_mat_id` (both activation layouts; 3 tokens and more take the path that groups the pairs
//! by expert, 40 tokens make several tiles per expert) and `get_rows`, same weight bytes, same
//! activations. A token's `mul_mat_id` rows in a batch are bit-identical to the token alone;
//! a head-sized one-token product (staged weights) has the bits of the unstaged batch kernel;
//! a gate + up pair launch gives each output the bits of its own launch; a norm prepared for
//! its product (one launch with the quantization) gives the separate norm's and product's bits.
//! Needs a GPU.
#![cfg(feature = "cuda")]

use std::borrow::Cow;
use std::collections::BTreeSet;

use glint_core::{Backend, CpuBackend, GgmlType};
use glint_cuda::CudaBackend;
use half::f16;

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() >> 33) as u32 % n
    }
}

/// Offsets of the f16 super-scale of i-quant blocks glint-quant has no quantizer for.
fn f16_scale_offset(ty: GgmlType) -> Option<usize> {
    use GgmlType::*;
    match ty {
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S => Some(0),
        _ => None,
    }
}

/// `n_elems` valid elements of `ty`: quantized random floats where glint-quant has a quantizer,
/// else random bytes with the block scale rewritten to a finite, moderate f16.
fn weight_bytes(rng: &mut Rng, ty: GgmlType, n_elems: usize) -> Vec<u8> {
    if glint_quant::traits(ty).from_f32.is_some() {
        let v: Vec<f32> = (0..n_elems).map(|_| rng.f()).collect();
        return glint_quant::quantize_to_vec(ty, &v).expect("quantize");
    }
    let (bs, ts) = (ty.block_size(), ty.type_size());
    let mut b: Vec<u8> = (0..n_elems / bs * ts).map(|_| rng.next() as u8).collect();
    for blk in b.chunks_exact_mut(ts) {
        let d = f16::from_f32(0.002 + 0.02 * rng.f().abs());
        if let Some(off) = f16_scale_offset(ty) {
            blk[off..off + 2].copy_from_slice(&d.to_le_bytes());
        } else if ty == GgmlType::IQ1_M {
            // The f16 scale is the top nibble of each of the four u16 `scales` (bytes 48..56).
            let bits = d.to_bits();
            for i in 0..4 {
                let at = 48 + 2 * i;
                let s = u16::from_le_bytes([blk[at], blk[at + 1]]);
                let s = (s & 0x0fff) | (((bits >> (4 * i)) & 0xf) << 12);
                blk[at..at + 2].copy_from_slice(&s.to_le_bytes());
            }
        } else {
            panic!("{ty}: no quantizer and no known scale field");
        }
    }
    b
}

/// Byte offsets of the f16 scale and f16 min scale of types whose elements are
/// scale·q − min: each part is summed (and rounded) on its own, so both count.
fn scale_and_min_offsets(ty: GgmlType) -> Option<(usize, usize)> {
    use GgmlType::*;
    match ty {
        Q4_1 | Q5_1 | Q4_K | Q5_K => Some((0, 2)),
        Q2_K => Some((80, 82)),
        _ => None,
    }
}

/// Σ_j |term j| of one row's dot product: |w_j|·|x_j| with w_j decoded by glint-quant, and for
/// types with a min term |scale part_j|·|x_j| + |min part_j|·|x_j| (each decoded from a copy of
/// the row with the other f16 zeroed). Every partial sum either backend forms, in any order and
/// grouping, is at most this, so it bounds their f32 rounding (the magnitude of a block's
/// partial alone does not: sub-block terms of opposite sign cancel in it — a Q6_K element at
/// n = 40 differed by 2.6e-6 against 1.4e-6 from that). `w` and `x` are one row each.
fn abs_terms(ty: GgmlType, w: &[u8], x: &[f32]) -> f64 {
    let ts = ty.type_size();
    let abs_dot = |row: &[u8]| -> f64 {
        let d = glint_quant::dequantize_to_vec(ty, row).unwrap();
        d.iter().zip(x).map(|(a, b)| (a * b).abs() as f64).sum()
    };
    match scale_and_min_offsets(ty) {
        None => abs_dot(w),
        Some((d, m)) => [d, m]
            .iter()
            .map(|&zero| {
                let mut row = w.to_vec();
                for blk in row.chunks_exact_mut(ts) {
                    blk[zero..zero + 2].fill(0);
                }
                abs_dot(&row)
            })
            .sum(),
    }
}

/// Float partials per weight block either backend adds at most (kernels/quant.cu NSUB: 32-element
/// units; glint-quant's NVFP4 adds one per 16-element group).
fn units_per_block(ty: GgmlType) -> usize {
    match ty.block_size() {
        256 => 8,
        64 | 128 => 4,
        _ => 1,
    }
}

/// Tolerance of one output. Both backends form the same exact integer sums per block and the
/// same few-rounding float scalings of them, then add k partials in f32 in different orders
/// (k = units per row on the GPU, plus its 32-lane tree); the f32 summation error of each is at
/// most k·2⁻²⁴·Σ|term| (`abs_terms`). 4× that, for two sums with independent error and the
/// partials' own few-ulp differences: 4·(k + 32)·2⁻²⁴·Σ|term|.
fn tolerance(ty: GgmlType, cols: usize, abs_sum: f64) -> f64 {
    let k = cols / ty.block_size() * units_per_block(ty) + 32;
    4.0 * k as f64 * f64::from(f32::EPSILON / 2.0) * abs_sum + 1e-30
}

fn shapes(ty: GgmlType) -> Vec<(usize, usize)> {
    let bs = ty.block_size();
    if bs == 1 {
        // The conformance suite's odd widths, and widths of whole float4s (F32 takes
        // `*_f32x4` there), one as GLM-5's router (6144 columns, split over several warps).
        vec![(7, 4), (13, 5), (513, 37), (12, 5), (6144, 33)]
    } else {
        // Two blocks over 4 rows and over 3 (fewer than a warp group's 4), a wider,
        // 256-multiple row over a ragged row count, and rows long enough that several warps
        // split each (kernels/quant.cu `ks` = 4 for the 256-element types) over more rows
        // than one tensor-core tile holds.
        vec![
            (2 * bs, 4),
            (2 * bs, 3),
            (bs.max(256) * 3, 37),
            (bs.max(256) * 32, 70),
        ]
    }
}

fn check_close(what: &str, got: &[f32], want: &[f32], tol: &[f64]) {
    for (i, ((&g, &w), &t)) in got.iter().zip(want).zip(tol).enumerate() {
        let err = (g as f64 - w as f64).abs();
        assert!(
            err <= t && g.is_finite(),
            "{what}: element {i}: cuda {g} cpu {w} (error {err:e} > tolerance {t:e})"
        );
    }
}

/// The same weight bytes uploaded to both backends.
fn upload_both<'a>(
    cuda: &CudaBackend,
    cpu: &CpuBackend,
    name: &str,
    ty: GgmlType,
    dims: &[usize],
    wb: &'a [u8],
) -> (
    <CudaBackend as Backend>::Weight<'a>,
    <CpuBackend as Backend>::Weight<'a>,
) {
    let wc = cuda
        .upload_weight(name, ty, dims, Cow::Borrowed(wb))
        .unwrap_or_else(|e| panic!("cuda upload of {name} ({ty}, {dims:?}): {e}"));
    let wcpu = cpu
        .upload_weight(name, ty, dims, Cow::Borrowed(wb))
        .unwrap_or_else(|e| panic!("cpu upload of {name} ({ty}, {dims:?}): {e}"));
    (wc, wcpu)
}

fn run_type(cuda: &CudaBackend, cpu: &CpuBackend, rng: &mut Rng, ty: GgmlType) {
    for (cols, rows) in shapes(ty) {
        let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
        // ---- matmul -----------------------------------------------------------------------
        let wb = weight_bytes(rng, ty, cols * rows);
        let (wc, wcpu) = upload_both(cuda, cpu, "w", ty, &[cols, rows], &wb);
        // 9 and 40 tokens: the batched kernels (for the block types the tensor-core one, over
        // one and two token tiles); F32 also 150, past where whole-float4 rows take
        // `matvec_wide_f32x4` (128 tokens; 150 leaves a partial last tile), and again the
        // opt-in `matvec_tile_f32x4` (tiles of 32 tokens and 32 rows: 33 rows leave one of one).
        let wide = if ty == GgmlType::F32 { Some(150) } else { None };
        for n in [1usize, 3, 9, 40].into_iter().chain(wide) {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f() * 2.0).collect();
            let mut want = vec![0.0f32; n * rows];
            cpu.matmul(&wcpu, &x, n, &mut want).expect("cpu matmul");
            let xd = cuda.upload(&x).unwrap();
            let mut yd = cuda.alloc(n * rows).unwrap();
            cuda.matmul(&wc, &xd, n, &mut yd).expect("cuda matmul");
            // The 150-token F32 products of whole float4 rows took the wide kernel (so the
            // bit checks below are between it and the one-token kernel), no other did.
            let wide = wide == Some(n) && cols.is_multiple_of(4);
            assert_eq!(
                cuda.takes_wide_f32(&wc, n),
                wide,
                "{ty} {cols}x{rows} n={n}"
            );
            let mut got = vec![0.0f32; n * rows];
            cuda.download(&yd, &mut got).unwrap();
            let tol: Vec<f64> = (0..n * rows)
                .map(|i| {
                    let (t, r) = (i / rows, i % rows);
                    let w = &wb[r * row_bytes..(r + 1) * row_bytes];
                    tolerance(ty, cols, abs_terms(ty, w, &x[t * cols..(t + 1) * cols]))
                })
                .collect();
            check_close(
                &format!("{ty} matmul {cols}x{rows} n={n}"),
                &got,
                &want,
                &tol,
            );
            // The wide F32 products again on the opt-in tile kernel: the same bits as the
            // warp-wide one (and so, below, as each token alone).
            if wide {
                std::env::set_var("GLINT_CUDA_F32_TILE", "1");
                let tiles = cuda.takes_f32_tiles();
                let mut yt = cuda.alloc(n * rows).unwrap();
                cuda.matmul(&wc, &xd, n, &mut yt)
                    .expect("cuda matmul, tiles");
                std::env::remove_var("GLINT_CUDA_F32_TILE");
                assert!(tiles, "{ty} {cols}x{rows}: matvec_tile_f32x4 did not run");
                let mut got_t = vec![0.0f32; n * rows];
                cuda.download(&yt, &mut got_t).unwrap();
                for (i, (a, b)) in got_t.iter().zip(&got).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{ty} matmul {cols}x{rows} n={n}: output {i}: tiles {a}, warp-wide {b}"
                    );
                }
            }
            // Batch invariance: the first and last tokens alone (`matvec1_*`) give the bits
            // they got in the batch (`matvec_*`, eight tokens a pass).
            for t in [0, n / 2, n - 1].into_iter().filter(|_| n > 1) {
                let x1 = cuda.upload(&x[t * cols..(t + 1) * cols]).unwrap();
                let mut y1 = cuda.alloc(rows).unwrap();
                cuda.matmul(&wc, &x1, 1, &mut y1)
                    .expect("cuda matmul, one token");
                let mut alone = vec![0.0f32; rows];
                cuda.download(&y1, &mut alone).unwrap();
                for (r, (a, b)) in alone.iter().zip(&got[t * rows..(t + 1) * rows]).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{ty} matmul {cols}x{rows} n={n}: token {t} row {r}: alone {a}, in the batch {b}"
                    );
                }
            }
        }

        // ---- get_rows (bit-identical: the same float expressions, no contraction) ---------
        let mut pick: Vec<u32> = (0..rows as u32).rev().collect();
        pick.push(0);
        pick.push(rows as u32 - 1);
        let mut want = vec![0.0f32; pick.len() * cols];
        cpu.get_rows(&wcpu, &pick, pick.len(), &mut want)
            .expect("cpu get_rows");
        let mut pick_past = pick.clone();
        pick_past.push(rows as u32 + 5); // past the end: zeros on CUDA
        let ids = cuda.upload_ids(&pick_past).unwrap();
        let mut out = cuda.alloc(pick_past.len() * cols).unwrap();
        cuda.write(&mut out, &vec![1.0; pick_past.len() * cols])
            .unwrap();
        cuda.get_rows(&wc, &ids, pick_past.len(), &mut out)
            .expect("cuda get_rows");
        let mut got = vec![0.0f32; pick_past.len() * cols];
        cuda.download(&out, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{ty} get_rows {cols}x{rows}: element {i}: cuda {g} cpu {w}"
            );
        }
        assert!(
            got[want.len()..].iter().all(|&v| v == 0.0),
            "{ty} get_rows: a row past the end must be zeros"
        );

        // ---- mul_mat_id ---------------------------------------------------------------------
        let slices = 3usize;
        let n_used = 2usize;
        let wb = weight_bytes(rng, ty, cols * rows * slices);
        let (wc, wcpu) = upload_both(cuda, cpu, "e", ty, &[cols, rows, slices], &wb);
        for n in [1usize, 3, 9, 40] {
            for per_slot in [false, true] {
                let sel: Vec<u32> = (0..n * n_used).map(|_| rng.below(slices as u32)).collect();
                let x_rows = if per_slot { n * n_used } else { n };
                let x: Vec<f32> = (0..x_rows * cols).map(|_| rng.f()).collect();
                let mut want = vec![0.0f32; n * n_used * rows];
                cpu.mul_mat_id(&wcpu, &sel, n_used, &x, per_slot, n, &mut want)
                    .expect("cpu mul_mat_id");
                let xd = cuda.upload(&x).unwrap();
                let mut yd = cuda.alloc(n * n_used * rows).unwrap();
                cuda.mul_mat_id(
                    &wc,
                    &cuda.upload_ids(&sel).unwrap(),
                    n_used,
                    &xd,
                    per_slot,
                    n,
                    &mut yd,
                )
                .expect("cuda mul_mat_id");
                let mut got = vec![0.0f32; n * n_used * rows];
                cuda.download(&yd, &mut got).unwrap();
                let tol: Vec<f64> = (0..n * n_used * rows)
                    .map(|i| {
                        let (p, r) = (i / rows, i % rows);
                        let g = sel[p] as usize * rows + r;
                        let w = &wb[g * row_bytes..(g + 1) * row_bytes];
                        let xr = if per_slot { p } else { p / n_used };
                        tolerance(ty, cols, abs_terms(ty, w, &x[xr * cols..(xr + 1) * cols]))
                    })
                    .collect();
                let what =
                    format!("{ty} mul_mat_id {cols}x{rows}x{slices} n={n} per_slot={per_slot}");
                check_close(&what, &got, &want, &tol);

                // Batch invariance: the first and last tokens alone (one token: the ungrouped
                // kernel) give the bits they got inside the batch.
                for t in [0, n - 1].into_iter().filter(|_| n > 1) {
                    let mm = MmId {
                        sel: &sel,
                        n_used,
                        x: &x,
                        per_slot,
                        cols,
                        rows,
                    };
                    assert_token_alone(cuda, &wc, &mm, &got, t, &what);
                }

                // An expert id past the last slice writes zeros there and leaves the rest.
                let mut bad = sel.clone();
                bad[0] = slices as u32 + 1;
                cuda.write(&mut yd, &vec![7.0; n * n_used * rows]).unwrap();
                cuda.mul_mat_id(
                    &wc,
                    &cuda.upload_ids(&bad).unwrap(),
                    n_used,
                    &xd,
                    per_slot,
                    n,
                    &mut yd,
                )
                .expect("cuda mul_mat_id, bad id");
                cuda.download(&yd, &mut got).unwrap();
                assert!(
                    got[..rows].iter().all(|&v| v == 0.0),
                    "{what}: bad id must give zeros"
                );
                check_close(
                    &format!("{what} (bad id)"),
                    &got[rows..],
                    &want[rows..],
                    &tol[rows..],
                );
            }
        }
    }
}

#[test]
fn every_weight_type_matches_the_cpu_backend() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let want: BTreeSet<String> = GgmlType::ALL
        .iter()
        .filter(|&&t| glint_quant::traits(t).vec_dot_type.is_some())
        .map(|t| t.to_string())
        .collect();
    let mut covered = BTreeSet::new();
    for &ty in GgmlType::ALL {
        if glint_quant::traits(ty).vec_dot_type.is_none() {
            continue;
        }
        assert!(cuda.supports_weight_type(ty), "{ty}: not supported on CUDA");
        run_type(&cuda, &cpu, &mut rng, ty);
        covered.insert(ty.to_string());
        eprintln!("{ty}: ok");
    }
    assert_eq!(covered, want, "every type with a vec_dot_type is covered");
    assert!(covered.len() >= 28, "{} types covered", covered.len());
}

/// Sizes are checked on the host before anything is launched.
#[test]
fn shapes_are_checked() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let ty = GgmlType::Q8_0;
    let mut rng = Rng(1);
    let wb = weight_bytes(&mut rng, ty, 64 * 4);
    // A wrong byte length and a row that is not whole blocks are refused.
    assert!(cuda
        .upload_weight("w", ty, &[64, 4], Cow::Borrowed(&wb[..wb.len() - 1]))
        .is_err());
    assert!(cuda
        .upload_weight("w", ty, &[48, 4], Cow::Borrowed(&wb))
        .is_err());
    assert!(!cuda.supports_weight_type(GgmlType::I32));
    let w = cuda
        .upload_weight("w", ty, &[64, 4], Cow::Borrowed(&wb))
        .unwrap();
    let x = cuda.alloc(64).unwrap();
    let mut y = cuda.alloc(4).unwrap();
    assert!(cuda.matmul(&w, &x, 2, &mut y).is_err(), "x too short");
    let x2 = cuda.alloc(128).unwrap();
    assert!(cuda.matmul(&w, &x2, 2, &mut y).is_err(), "y too short");
    cuda.matmul(&w, &x, 1, &mut y).unwrap();
    cuda.synchronize().unwrap();
}

/// Products that read one activation share its quantization (crates/glint-cuda/src/quant.rs
/// `ActSlots`), so a buffer written between two products must be quantized again: by a host
/// write, by an in-place kernel (`add`), by a kernel writing it as its output (`rms_norm`),
/// and after more activations than there are slots have passed. Every product is checked
/// against the CPU backend on the values the buffer holds at that moment.
#[test]
fn a_rewritten_activation_is_quantized_again() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(7);
    let (cols, rows) = (512usize, 6usize);
    let tys = [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0];
    let wb: Vec<Vec<u8>> = tys
        .iter()
        .map(|&t| weight_bytes(&mut rng, t, cols * rows))
        .collect();
    let wc: Vec<_> = tys
        .iter()
        .zip(&wb)
        .map(|(&t, b)| {
            cuda.upload_weight("w", t, &[cols, rows], Cow::Borrowed(b))
                .unwrap()
        })
        .collect();
    let wcpu: Vec<_> = tys
        .iter()
        .zip(&wb)
        .map(|(&t, b)| {
            cpu.upload_weight("w", t, &[cols, rows], Cow::Borrowed(b))
                .unwrap()
        })
        .collect();
    // Every weight against the values x holds now, twice (the second a reuse).
    let check = |xd: &glint_cuda::CudaBuf, x: &[f32], what: &str| {
        for _ in 0..2 {
            for (i, &ty) in tys.iter().enumerate() {
                let mut want = vec![0.0f32; rows];
                cpu.matmul(&wcpu[i], &x.to_vec(), 1, &mut want).unwrap();
                let mut yd = cuda.alloc(rows).unwrap();
                cuda.matmul(&wc[i], xd, 1, &mut yd).unwrap();
                let mut got = vec![0.0f32; rows];
                cuda.download(&yd, &mut got).unwrap();
                let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
                let tol: Vec<f64> = (0..rows)
                    .map(|r| {
                        tolerance(
                            ty,
                            cols,
                            abs_terms(ty, &wb[i][r * row_bytes..(r + 1) * row_bytes], x),
                        )
                    })
                    .collect();
                check_close(&format!("{ty} after {what}"), &got, &want, &tol);
            }
        }
    };
    let mut x: Vec<f32> = (0..cols).map(|_| rng.f()).collect();
    let mut xd = cuda.upload(&x).unwrap();
    check(&xd, &x, "upload");
    x = (0..cols).map(|_| rng.f()).collect();
    cuda.write(&mut xd, &x).unwrap();
    check(&xd, &x, "a host write");
    let b: Vec<f32> = (0..cols).map(|_| rng.f()).collect();
    cuda.add(&mut xd, &cuda.upload(&b).unwrap(), cols).unwrap();
    x.iter_mut().zip(&b).for_each(|(v, w)| *v += w);
    check(&xd, &x, "an in-place add");
    let g: Vec<f32> = (0..cols).map(|_| 1.0 + rng.f()).collect();
    let src: Vec<f32> = (0..cols).map(|_| rng.f()).collect();
    cuda.rms_norm(
        &cuda.upload(&src).unwrap(),
        &cuda.upload(&g).unwrap(),
        1,
        cols,
        1e-6,
        &mut xd,
    )
    .unwrap();
    let mut normed = vec![0.0f32; cols];
    cuda.download(&xd, &mut normed).unwrap();
    check(&xd, &normed, "rms_norm into it");
    // More activations than slots in between: x's entry is evicted, then quantized afresh.
    for _ in 0..6 {
        let other: Vec<f32> = (0..cols).map(|_| rng.f()).collect();
        let od = cuda.upload(&other).unwrap();
        let mut yd = cuda.alloc(rows).unwrap();
        cuda.matmul(&wc[0], &od, 1, &mut yd).unwrap();
    }
    check(&xd, &normed, "six other activations");
}

/// More experts than the grouping kernel has threads (each thread then counts a run of
/// experts), most of them unused, some with many pairs: the grouped product equals the CPU's.
#[test]
fn grouping_many_experts_matches_the_cpu_backend() {
    // Q8_0: 1500 experts, eight-pair tiles of the per-unit kernel.
    grouping_case(GgmlType::Q8_0, 64, 5, 1500, 3, 600);
    // Then experts averaging 18 and 36 pairs: the tensor-core kernels' tiles of up to 32
    // pairs (full and partial), over more rows than one of their row tiles.
    grouping_case(GgmlType::Q4_K, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::Q5_K, 512, 70, 100, 3, 600);
    // Experts averaging 12 pairs over more than 64 rows: Q4_K's and Q5_K's 16-place tiles
    // (`mmq_*_wide16`), full and partial.
    grouping_case(GgmlType::Q4_K, 512, 70, 150, 3, 600);
    grouping_case(GgmlType::Q5_K, 512, 70, 150, 3, 600);
    grouping_case(GgmlType::Q6_K, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ4_XS, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::Q2_K, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::Q3_K, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ2_XXS, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ3_XXS, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ2_XS, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ2_S, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ3_S, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ1_S, 512, 70, 100, 3, 600);
    grouping_case(GgmlType::IQ1_M, 512, 70, 100, 3, 600);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ] {
        grouping_case(ty, 512, 70, 100, 3, 600);
    }
    // Q4_1 rows of 96: three units, one partial tensor-core step, with the Q8_1 min term.
    grouping_case(GgmlType::Q4_1, 96, 70, 50, 3, 600);
    // Q8_0 rows of 192 (attn_k_b's): six blocks, one partial tensor-core step.
    grouping_case(GgmlType::Q8_0, 192, 70, 50, 3, 600);
}

fn grouping_case(ty: GgmlType, cols: usize, rows: usize, slices: usize, n_used: usize, n: usize) {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(7);
    let wb = weight_bytes(&mut rng, ty, cols * rows * slices);
    let dims = [cols, rows, slices];
    let (wc, wcpu) = upload_both(&cuda, &cpu, "e", ty, &dims, &wb);
    // Half the choices among the first 8 experts (full tiles and partial ones), the rest
    // spread over all of them; one id past the end.
    let mut sel: Vec<u32> = (0..n * n_used)
        .map(|i| {
            if i % 2 == 0 {
                rng.below(8)
            } else {
                rng.below(slices as u32)
            }
        })
        .collect();
    let x: Vec<f32> = (0..n * cols).map(|_| rng.f()).collect();
    let mut want = vec![0.0f32; n * n_used * rows];
    cpu.mul_mat_id(&wcpu, &sel, n_used, &x, false, n, &mut want)
        .unwrap();
    sel[5] = slices as u32;
    want[5 * rows..6 * rows].fill(0.0);
    let mut yd = cuda.alloc(n * n_used * rows).unwrap();
    cuda.write(&mut yd, &vec![3.0; n * n_used * rows]).unwrap();
    cuda.mul_mat_id(
        &wc,
        &cuda.upload_ids(&sel).unwrap(),
        n_used,
        &cuda.upload(&x).unwrap(),
        false,
        n,
        &mut yd,
    )
    .unwrap();
    let mut got = vec![0.0f32; n * n_used * rows];
    cuda.download(&yd, &mut got).unwrap();
    let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
    let tol: Vec<f64> = (0..n * n_used * rows)
        .map(|i| {
            let (p, r) = (i / rows, i % rows);
            if sel[p] as usize >= slices {
                return 0.0;
            }
            let g = sel[p] as usize * rows + r;
            let xr = p / n_used;
            tolerance(
                ty,
                cols,
                abs_terms(
                    ty,
                    &wb[g * row_bytes..(g + 1) * row_bytes],
                    &x[xr * cols..(xr + 1) * cols],
                ),
            )
        })
        .collect();
    check_close(
        &format!("{ty} mul_mat_id over {slices} experts"),
        &got,
        &want,
        &tol,
    );
    // Batch invariance: pairs alone (the one-token kernel) give the bits of the grouped run.
    let mm = MmId {
        sel: &sel,
        n_used,
        x: &x,
        per_slot: false,
        cols,
        rows,
    };
    for t in [0usize, 1, n / 2, n - 1] {
        assert_token_alone(&cuda, &wc, &mm, &got, t, &format!("{ty} grouped"));
    }
}

/// The inputs of one `mul_mat_id` call: expert ids, the activation rows and their layout.
struct MmId<'a> {
    sel: &'a [u32],
    n_used: usize,
    x: &'a [f32],
    per_slot: bool,
    cols: usize,
    rows: usize,
}

/// Token `t` of a `mul_mat_id` batch, run alone (one token: the ungrouped kernel), gives the
/// bits it got in the batch (`got`).
fn assert_token_alone(
    cuda: &CudaBackend,
    w: &<CudaBackend as Backend>::Weight<'_>,
    mm: &MmId,
    got: &[f32],
    t: usize,
    what: &str,
) {
    let (n_used, cols, rows) = (mm.n_used, mm.cols, mm.rows);
    let sel1 = &mm.sel[t * n_used..(t + 1) * n_used];
    let xr = if mm.per_slot { n_used } else { 1 };
    let x1 = &mm.x[t * xr * cols..(t + 1) * xr * cols];
    let mut y1 = cuda.alloc(n_used * rows).unwrap();
    cuda.mul_mat_id(
        w,
        &cuda.upload_ids(sel1).unwrap(),
        n_used,
        &cuda.upload(x1).unwrap(),
        mm.per_slot,
        1,
        &mut y1,
    )
    .expect("cuda mul_mat_id, one token");
    let mut alone = vec![0.0f32; n_used * rows];
    cuda.download(&y1, &mut alone).unwrap();
    let batch = &got[t * n_used * rows..(t + 1) * n_used * rows];
    for (i, (a, b)) in alone.iter().zip(batch).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: token {t} element {i}: alone {a}, in the batch {b}"
        );
    }
}

/// A one-token product of at least 65,536 rows (the output head) stages its weights in shared
/// memory (`matvec1s_*`, crates/glint-cuda/src/quant.rs `stages`): for every block type, on a
/// ragged row count and a row that ends inside a 1024-element pass, it agrees with the CPU
/// backend and gives the bits of the unstaged batched kernel (`matvec_*`, three tokens).
#[test]
fn staged_products_match_the_cpu_backend_and_the_unstaged_bits() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x5eed_57a6);
    let rows = 65536 + 3;
    for &ty in GgmlType::ALL {
        if ty.block_size() == 1
            || ty == GgmlType::Q8_1
            || glint_quant::traits(ty).vec_dot_type.is_none()
        {
            continue;
        }
        let cols = 1024 + ty.block_size().max(256);
        let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
        let wb = weight_bytes(&mut rng, ty, cols * rows);
        let (wc, wcpu) = upload_both(&cuda, &cpu, "head", ty, &[cols, rows], &wb);
        let n = 3;
        let x: Vec<f32> = (0..n * cols).map(|_| rng.f() * 2.0).collect();
        let mut want = vec![0.0f32; rows];
        cpu.matmul(&wcpu, &x[..cols].to_vec(), 1, &mut want)
            .expect("cpu matmul");
        let x1 = cuda.upload(&x[..cols]).unwrap();
        let mut y1 = cuda.alloc(rows).unwrap();
        cuda.matmul(&wc, &x1, 1, &mut y1).expect("cuda matmul");
        let mut got = vec![0.0f32; rows];
        cuda.download(&y1, &mut got).unwrap();
        let tol: Vec<f64> = (0..rows)
            .map(|r| {
                tolerance(
                    ty,
                    cols,
                    abs_terms(ty, &wb[r * row_bytes..(r + 1) * row_bytes], &x[..cols]),
                )
            })
            .collect();
        check_close(
            &format!("{ty} staged matmul {cols}x{rows}"),
            &got,
            &want,
            &tol,
        );
        let xn = cuda.upload(&x).unwrap();
        let mut yn = cuda.alloc(n * rows).unwrap();
        cuda.matmul(&wc, &xn, n, &mut yn)
            .expect("cuda matmul, 3 tokens");
        let mut batch = vec![0.0f32; n * rows];
        cuda.download(&yn, &mut batch).unwrap();
        for (r, (a, b)) in got.iter().zip(&batch[..rows]).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{ty} {cols}x{rows} row {r}: staged {a}, unstaged batch {b}"
            );
        }
        eprintln!("{ty}: staged ok");
    }
}

/// A gate and an up projection of one token run as one launch (`matmul_pair`,
/// `mul_mat_id_planned_pair`: grid.z = 2): for every weight type, each output agrees with the
/// CPU backend and has the bits of its own launch; a pair of unlike shapes falls back to two.
#[test]
fn pair_launches_match_the_cpu_backend_and_their_single_launches() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x9a12_0f3e);
    let (rows, slices, n_used) = (37usize, 5usize, 3usize);
    for &ty in GgmlType::ALL {
        if glint_quant::traits(ty).vec_dot_type.is_none() {
            continue;
        }
        let cols = 2 * ty.block_size().max(256);
        let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
        let x: Vec<f32> = (0..cols).map(|_| rng.f() * 2.0).collect();
        let xd = cuda.upload(&x).unwrap();
        let sel: Vec<u32> = (0..n_used).map(|i| ((i * 2 + 1) % slices) as u32).collect();
        let sel_d = cuda.upload_ids(&sel).unwrap();
        let mut plan = cuda
            .alloc_ids(cuda.moe_plan_len(1, n_used, slices))
            .unwrap();
        cuda.moe_plan(&sel_d, 1, n_used, slices, &mut plan).unwrap();
        for (dims, pairs) in [(vec![cols, rows], 1), (vec![cols, rows, slices], n_used)] {
            let elems = cols * rows * dims.get(2).copied().unwrap_or(1);
            let (ab, bb) = (
                weight_bytes(&mut rng, ty, elems),
                weight_bytes(&mut rng, ty, elems),
            );
            let (ac, acpu) = upload_both(&cuda, &cpu, "gate", ty, &dims, &ab);
            let (bc, bcpu) = upload_both(&cuda, &cpu, "up", ty, &dims, &bb);
            let len = pairs * rows;
            let (mut ya, mut yb) = (cuda.alloc(len).unwrap(), cuda.alloc(len).unwrap());
            let (mut sa, mut sb) = (cuda.alloc(len).unwrap(), cuda.alloc(len).unwrap());
            let (mut wa, mut wb) = (vec![0.0f32; len], vec![0.0f32; len]);
            let expert = dims.len() == 3;
            if expert {
                cuda.mul_mat_id_planned_pair(
                    &ac, &bc, &sel_d, &plan, n_used, &xd, false, 1, &mut ya, &mut yb,
                )
                .expect("cuda pair");
                cuda.mul_mat_id(&ac, &sel_d, n_used, &xd, false, 1, &mut sa)
                    .unwrap();
                cuda.mul_mat_id(&bc, &sel_d, n_used, &xd, false, 1, &mut sb)
                    .unwrap();
                cpu.mul_mat_id(&acpu, &sel, n_used, &x, false, 1, &mut wa)
                    .unwrap();
                cpu.mul_mat_id(&bcpu, &sel, n_used, &x, false, 1, &mut wb)
                    .unwrap();
            } else {
                cuda.matmul_pair(&ac, &bc, &xd, 1, &mut ya, &mut yb)
                    .expect("cuda pair");
                cuda.matmul(&ac, &xd, 1, &mut sa).unwrap();
                cuda.matmul(&bc, &xd, 1, &mut sb).unwrap();
                cpu.matmul(&acpu, &x, 1, &mut wa).unwrap();
                cpu.matmul(&bcpu, &x, 1, &mut wb).unwrap();
            }
            for (name, bytes, y, single, want) in
                [("gate", &ab, &ya, &sa, &wa), ("up", &bb, &yb, &sb, &wb)]
            {
                let (mut got, mut alone) = (vec![0.0f32; len], vec![0.0f32; len]);
                cuda.download(y, &mut got).unwrap();
                cuda.download(single, &mut alone).unwrap();
                let tol: Vec<f64> = (0..len)
                    .map(|i| {
                        let e = if expert { sel[i / rows] as usize } else { 0 };
                        let g = e * rows + i % rows;
                        tolerance(
                            ty,
                            cols,
                            abs_terms(ty, &bytes[g * row_bytes..][..row_bytes], &x),
                        )
                    })
                    .collect();
                let what = format!("{ty} {name} of a pair, {dims:?}");
                check_close(&what, &got, want, &tol);
                for (i, (a, b)) in got.iter().zip(&alone).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{what} output {i}: {a} vs alone {b}"
                    );
                }
            }
        }
        // Unlike shapes: two launches, each right.
        let short = weight_bytes(&mut rng, ty, cols * (rows - 1));
        let long = weight_bytes(&mut rng, ty, cols * rows);
        let (sc, scpu) = upload_both(&cuda, &cpu, "short", ty, &[cols, rows - 1], &short);
        let (lc, lcpu) = upload_both(&cuda, &cpu, "long", ty, &[cols, rows], &long);
        let (mut ys, mut yl) = (cuda.alloc(rows - 1).unwrap(), cuda.alloc(rows).unwrap());
        cuda.matmul_pair(&sc, &lc, &xd, 1, &mut ys, &mut yl)
            .expect("cuda pair of unlike shapes");
        for (bytes, w, y, r) in [(&short, &scpu, &ys, rows - 1), (&long, &lcpu, &yl, rows)] {
            let mut want = vec![0.0f32; r];
            cpu.matmul(w, &x, 1, &mut want).unwrap();
            let mut got = vec![0.0f32; r];
            cuda.download(y, &mut got).unwrap();
            let tol: Vec<f64> = (0..r)
                .map(|i| {
                    tolerance(
                        ty,
                        cols,
                        abs_terms(ty, &bytes[i * row_bytes..][..row_bytes], &x),
                    )
                })
                .collect();
            check_close(&format!("{ty} unlike pair, {r} rows"), &got, &want, &tol);
        }
        eprintln!("{ty}: pairs ok");
    }
}

/// SwiGLU's down projection with the gate computed by the activation quantizer
/// (`matmul_glu`, `mul_mat_id_planned_glu`: `quantize_act_*_glu`): for every weight type, 1
/// and 3 tokens, h has the bits of `silu_mul` and is within 4 ulps of the CPU's, y has the
/// bits of `silu_mul` then the product and agrees with the CPU's product of that h.
#[test]
fn gated_down_projections_match_the_cpu_backend_and_the_separate_ops() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x6a7e_d0c5);
    let (rows, slices, n_used) = (29usize, 4usize, 2usize);
    for &ty in GgmlType::ALL {
        if glint_quant::traits(ty).vec_dot_type.is_none() {
            continue;
        }
        let cols = 2 * ty.block_size().max(256);
        let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
        for n in [1usize, 3] {
            for expert in [false, true] {
                let dims = if expert {
                    vec![cols, rows, slices]
                } else {
                    vec![cols, rows]
                };
                let x_rows = if expert { n * n_used } else { n };
                let wb = weight_bytes(&mut rng, ty, cols * rows * if expert { slices } else { 1 });
                let (wc, wcpu) = upload_both(&cuda, &cpu, "down", ty, &dims, &wb);
                let g: Vec<f32> = (0..x_rows * cols).map(|_| rng.f() * 4.0).collect();
                let u: Vec<f32> = (0..x_rows * cols).map(|_| rng.f()).collect();
                let sel: Vec<u32> = (0..n * n_used).map(|_| rng.below(slices as u32)).collect();
                let (gd, ud) = (cuda.upload(&g).unwrap(), cuda.upload(&u).unwrap());
                let sel_d = cuda.upload_ids(&sel).unwrap();
                let mut plan = cuda
                    .alloc_ids(cuda.moe_plan_len(n, n_used, slices))
                    .unwrap();
                cuda.moe_plan(&sel_d, n, n_used, slices, &mut plan).unwrap();
                let len = x_rows * rows;
                let (mut h, mut y) = (cuda.alloc(x_rows * cols).unwrap(), cuda.alloc(len).unwrap());
                let (mut h2, mut y2) =
                    (cuda.alloc(x_rows * cols).unwrap(), cuda.alloc(len).unwrap());
                let (mut hc, mut yc) = (vec![0.0f32; x_rows * cols], vec![0.0f32; len]);
                // The CPU's h (the trait's default: its silu_mul); its y is not compared.
                cuda.silu_mul(&gd, &ud, x_rows * cols, &mut h2).unwrap();
                if expert {
                    cuda.mul_mat_id_planned_glu(
                        &wc, &sel_d, &plan, n_used, &gd, &ud, n, cols, &mut h, &mut y,
                    )
                    .expect("cuda mul_mat_id_planned_glu");
                    cuda.mul_mat_id(&wc, &sel_d, n_used, &h2, true, n, &mut y2)
                        .unwrap();
                    cpu.mul_mat_id_planned_glu(
                        &wcpu, &sel, &sel, n_used, &g, &u, n, cols, &mut hc, &mut yc,
                    )
                    .unwrap();
                } else {
                    cuda.matmul_glu(&wc, &gd, &ud, n, cols, &mut h, &mut y)
                        .expect("cuda matmul_glu");
                    cuda.matmul(&wc, &h2, n, &mut y2).unwrap();
                    cpu.matmul_glu(&wcpu, &g, &u, n, cols, &mut hc, &mut yc)
                        .unwrap();
                }
                let what = format!("{ty} gated down, {dims:?}, {n} tokens");
                let mut got = [vec![0.0f32; x_rows * cols], vec![0.0f32; x_rows * cols]];
                cuda.download(&h, &mut got[0]).unwrap();
                cuda.download(&h2, &mut got[1]).unwrap();
                assert!(
                    got[0]
                        .iter()
                        .zip(&got[1])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: h differs from silu_mul's"
                );
                let mut gy = [vec![0.0f32; len], vec![0.0f32; len]];
                cuda.download(&y, &mut gy[0]).unwrap();
                cuda.download(&y2, &mut gy[1]).unwrap();
                for (i, (a, b)) in gy[0].iter().zip(&gy[1]).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{what} output {i}: {a} vs separate {b}"
                    );
                }
                // Against the CPU: h within a few ulps of its silu (the two expf differ), and
                // y against the CPU's product of the GPU's h (an ulp of h can move a rounding
                // of the activation quantization, which the tolerance does not cover).
                for (i, (a, b)) in got[0].iter().zip(&hc).enumerate() {
                    let lim = 4.0 * f32::EPSILON * b.abs().max(f32::MIN_POSITIVE);
                    assert!((a - b).abs() <= lim, "{what}: h[{i}] {a}, the CPU's {b}");
                }
                let mut want = vec![0.0f32; len];
                if expert {
                    cpu.mul_mat_id(&wcpu, &sel, n_used, &got[0], true, n, &mut want)
                        .unwrap();
                } else {
                    cpu.matmul(&wcpu, &got[0], n, &mut want).unwrap();
                }
                let tol: Vec<f64> = (0..len)
                    .map(|i| {
                        let (p, r) = (i / rows, i % rows);
                        let e = if expert { sel[p] as usize } else { 0 };
                        let w = &wb[(e * rows + r) * row_bytes..][..row_bytes];
                        tolerance(
                            ty,
                            cols,
                            abs_terms(ty, w, &got[0][p * cols..(p + 1) * cols]),
                        )
                    })
                    .collect();
                check_close(&what, &gy[0], &want, &tol);
            }
        }
        eprintln!("{ty}: gated down ok");
    }
}

/// The norm prepared for the product that reads it (`rms_norm_for`, `add_rms_norm_for`: for
/// a Q8_K-partner weight, kernels/quant.cu `rms_norm_q8_k`, the norm and the quantization in
/// one launch; other partners take the plain norm): y (and h) have the bits of the separate
/// norm, the product that follows has the bits of the product after the separate norm (it
/// reads the quantization the norm's launch filed), and agrees with the CPU's product of y.
#[test]
fn normed_products_match_the_cpu_backend_and_the_separate_ops() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x4e0e_a11c);
    let rows = 37usize;
    // Q8_K partners (the fused kernel) and Q8_0 (the plain norm, then the product's quantizer).
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
        GgmlType::Q8_0,
    ] {
        // GLM-5's q_lora and d_model (rows kept in registers) and a 256-wide row.
        for dim in [256usize, 2048, 6144] {
            let row_bytes = ty.row_bytes(dim as u64).unwrap() as usize;
            let wb = weight_bytes(&mut rng, ty, dim * rows);
            let (wc, wcpu) = upload_both(&cuda, &cpu, "next", ty, &[dim, rows], &wb);
            let g: Vec<f32> = (0..dim).map(|_| 1.0 + rng.f() * 0.5).collect();
            let gd = cuda.upload(&g).unwrap();
            for n in [1usize, 3] {
                for add in [false, true] {
                    let x: Vec<f32> = (0..n * dim).map(|_| rng.f() * 3.0).collect();
                    let d: Vec<f32> = (0..n * dim).map(|_| rng.f()).collect();
                    let dd = cuda.upload(&d).unwrap();
                    let (mut h1, mut h2) = (cuda.upload(&x).unwrap(), cuda.upload(&x).unwrap());
                    let (mut y1, mut y2) =
                        (cuda.alloc(n * dim).unwrap(), cuda.alloc(n * dim).unwrap());
                    if add {
                        cuda.add_rms_norm_for(&mut h1, &dd, &gd, n, dim, 1e-5, &mut y1, &wc)
                            .expect("add_rms_norm_for");
                        cuda.add_rms_norm(&mut h2, &dd, &gd, n, dim, 1e-5, &mut y2)
                            .unwrap();
                    } else {
                        cuda.rms_norm_for(&h1, &gd, n, dim, 1e-5, &mut y1, &wc)
                            .expect("rms_norm_for");
                        cuda.rms_norm(&h2, &gd, n, dim, 1e-5, &mut y2).unwrap();
                    }
                    let (mut o1, mut o2) =
                        (cuda.alloc(n * rows).unwrap(), cuda.alloc(n * rows).unwrap());
                    cuda.matmul(&wc, &y1, n, &mut o1)
                        .expect("product after rms_norm_for");
                    cuda.matmul(&wc, &y2, n, &mut o2).unwrap();
                    let what = format!("{ty} normed product, {dim} wide, {n} tokens, add {add}");
                    let get = |b: &<CudaBackend as Backend>::Buf, len: usize| {
                        let mut v = vec![0.0f32; len];
                        cuda.download(b, &mut v).unwrap();
                        v
                    };
                    let same = |a: &[f32], b: &[f32], part: &str| {
                        for (i, (p, q)) in a.iter().zip(b).enumerate() {
                            assert_eq!(
                                p.to_bits(),
                                q.to_bits(),
                                "{what}: {part}[{i}] {p} vs separate {q}"
                            );
                        }
                    };
                    let ys = get(&y1, n * dim);
                    same(&ys, &get(&y2, n * dim), "y");
                    same(&get(&h1, n * dim), &get(&h2, n * dim), "h");
                    let out = get(&o1, n * rows);
                    same(&out, &get(&o2, n * rows), "product");
                    let mut want = vec![0.0f32; n * rows];
                    cpu.matmul(&wcpu, &ys, n, &mut want).unwrap();
                    let tol: Vec<f64> = (0..n * rows)
                        .map(|i| {
                            let (t, r) = (i / rows, i % rows);
                            let w = &wb[r * row_bytes..(r + 1) * row_bytes];
                            tolerance(ty, dim, abs_terms(ty, w, &ys[t * dim..(t + 1) * dim]))
                        })
                        .collect();
                    check_close(&what, &out, &want, &tol);
                }
            }
        }
        eprintln!("{ty}: normed products ok");
    }
}

/// Bound on |cuBLAS − reference| for one output of a prompt-sized product (crates/glint-cuda/
/// src/gemm.rs), the reference being the exact product of the bf16-rounded operands
/// ([`exact_rows`]): what is left is cuBLAS' f32 sums in any order, at most
/// (cols + 32)·2⁻²⁴ of Σ|w·x|.
fn gemm_tolerance(cols: usize, abs_sum: f64) -> f64 {
    1.01 * (cols + 32) as f64 * 2f64.powi(-24) * abs_sum + 1e-30
}

/// Rounded to bf16 as gemm.rs's kernels round (to nearest even), by the half crate.
fn bf16_round(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

/// `w`'s rows `pick` (rows of `cols` elements of `ty`) times `x` (`n` rows) in f64, from
/// glint-quant's dequantizer (checked against gguf-py in glint-quant's tests), with both
/// operands rounded to bf16 first unless the weight is F32 (cuBLAS' f32 GEMM then): the
/// product and Σ|w·x| per (token, picked row).
fn exact_rows(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    pick: &[usize],
    x: &[f32],
    n: usize,
) -> Vec<(f64, f64)> {
    let round = |v: f32| {
        if ty == GgmlType::F32 {
            v
        } else {
            bf16_round(v)
        }
    };
    let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
    let deq: Vec<Vec<f32>> = pick
        .iter()
        .map(|&r| {
            let row = &w[r * row_bytes..(r + 1) * row_bytes];
            let d = glint_quant::dequantize_to_vec(ty, row).unwrap();
            d.into_iter().map(round).collect()
        })
        .collect();
    let mut out = Vec::with_capacity(n * pick.len());
    for t in 0..n {
        let xt: Vec<f32> = x[t * cols..(t + 1) * cols]
            .iter()
            .map(|&v| round(v))
            .collect();
        for d in &deq {
            out.push(d.iter().zip(&xt).fold((0.0, 0.0), |(s, m), (&a, &b)| {
                let p = a as f64 * b as f64;
                (s + p, m + p.abs())
            }));
        }
    }
    out
}

/// Products of 130 tokens, on a backend that sends 128 and more to cuBLAS, of every weight type
/// the cuBLAS path takes, every row and token against the exact product of the bf16-rounded operands:
/// a wrong layout, transpose, leading dimension or rounding shows at once (a wrong row's
/// value is ~√cols·|w·x| away, the bound (cols + 32)·2⁻²⁴·Σ|w·x|).
#[test]
fn prompt_products_on_cublas_match_the_exact_product() {
    let cuda = CudaBackend::new(0)
        .expect("CUDA device 0")
        .with_prompt_gemm(Some(128));
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let n = 130;
    for &ty in GgmlType::ALL {
        if glint_quant::traits(ty).vec_dot_type.is_none()
            || matches!(ty, GgmlType::F16 | GgmlType::Q8_1)
        {
            continue;
        }
        let bs = ty.block_size();
        let shapes = if bs == 1 {
            vec![(514, 5), (6144, 33)]
        } else {
            vec![(2 * bs, 3), (bs.max(256) * 3, 37)]
        };
        for (cols, rows) in shapes {
            let wb = weight_bytes(&mut rng, ty, cols * rows);
            let wc = cuda
                .upload_weight("w", ty, &[cols, rows], Cow::Borrowed(&wb))
                .unwrap();
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f() * 2.0).collect();
            let xd = cuda.upload(&x).unwrap();
            let mut yd = cuda.alloc(n * rows).unwrap();
            cuda.matmul(&wc, &xd, n, &mut yd).expect("cuda matmul");
            let mut got = vec![0.0f32; n * rows];
            cuda.download(&yd, &mut got).unwrap();
            let all: Vec<usize> = (0..rows).collect();
            let want = exact_rows(ty, &wb, cols, &all, &x, n);
            for (i, (&g, &(s, m))) in got.iter().zip(&want).enumerate() {
                let tol = gemm_tolerance(cols, m);
                assert!(
                    (g as f64 - s).abs() <= tol && g.is_finite(),
                    "{ty} {cols}x{rows}, {n} tokens: token {} row {}: cuda {g}, reference {s} \
                     (tolerance {tol:e})",
                    i / rows,
                    i % rows
                );
            }
        }
        eprintln!("{ty}: ok");
    }
}

/// Per-head products (`per_head_matmul`, MLA's `attn_k_b` / `attn_v_b`: `y[t][h] = W[h] ·
/// x[t][h]`) of 130 tokens on cuBLAS as one strided batch, every head, row and token against
/// the exact product of the bf16-rounded operands: a head's slice, input or output at the
/// wrong stride gives another head's values.
#[test]
fn per_head_products_on_cublas_match_the_exact_product() {
    let cuda = CudaBackend::new(0)
        .expect("CUDA device 0")
        .with_prompt_gemm(Some(128));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (n, heads, rows) = (130, 4, 24);
    for ty in [
        GgmlType::F32,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let cols = if ty.block_size() == 1 { 136 } else { 512 };
        let wb = weight_bytes(&mut rng, ty, cols * rows * heads);
        let wc = cuda
            .upload_weight("w", ty, &[cols, rows, heads], Cow::Borrowed(&wb))
            .unwrap();
        let x: Vec<f32> = (0..n * heads * cols).map(|_| rng.f() * 2.0).collect();
        let ids: Vec<u32> = (0..n * heads).map(|i| (i % heads) as u32).collect();
        let idd = cuda.upload_ids(&ids).unwrap();
        let xd = cuda.upload(&x).unwrap();
        let mut yd = cuda.alloc(n * heads * rows).unwrap();
        cuda.per_head_matmul(&wc, &idd, heads, &xd, n, &mut yd)
            .expect("cuda per_head_matmul");
        let mut got = vec![0.0f32; n * heads * rows];
        cuda.download(&yd, &mut got).unwrap();
        let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
        for h in 0..heads {
            let wh = &wb[h * rows * row_bytes..(h + 1) * rows * row_bytes];
            // Head h's inputs: token t's row h.
            let xh: Vec<f32> = (0..n)
                .flat_map(|t| {
                    x[(t * heads + h) * cols..(t * heads + h + 1) * cols]
                        .iter()
                        .copied()
                })
                .collect();
            let all: Vec<usize> = (0..rows).collect();
            let want = exact_rows(ty, wh, cols, &all, &xh, n);
            for t in 0..n {
                for r in 0..rows {
                    let (s, m) = want[t * rows + r];
                    let g = got[(t * heads + h) * rows + r];
                    let tol = gemm_tolerance(cols, m);
                    assert!(
                        (g as f64 - s).abs() <= tol && g.is_finite(),
                        "{ty} head {h} token {t} row {r}: cuda {g}, reference {s} (tolerance {tol:e})"
                    );
                }
            }
        }
        eprintln!("{ty} per head: ok");
    }
}

/// A weight of more than gemm.rs's 128 Mi-element scratch (2048 × 65540 Q4_K, 134 M) is
/// decoded and multiplied in row chunks of 65536 rows: rows on both sides of the boundary and
/// the last ones, against the exact product of the bf16-rounded operands. The rows repeat
/// with period 7, which 65536 is not a multiple of, so a chunk written at the wrong offset
/// gives another row's values.
#[test]
fn a_weight_past_the_scratch_is_multiplied_in_row_chunks() {
    let cuda = CudaBackend::new(0)
        .expect("CUDA device 0")
        .with_prompt_gemm(Some(128));
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (ty, cols, rows, n) = (GgmlType::Q4_K, 2048, 65540, 128);
    let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
    let base = weight_bytes(&mut rng, ty, cols * 7);
    let wb: Vec<u8> = (0..rows)
        .flat_map(|r| {
            base[(r % 7) * row_bytes..(r % 7 + 1) * row_bytes]
                .iter()
                .copied()
        })
        .collect();
    let wc = cuda
        .upload_weight("w", ty, &[cols, rows], Cow::Borrowed(&wb))
        .unwrap();
    let x: Vec<f32> = (0..n * cols).map(|_| rng.f()).collect();
    let xd = cuda.upload(&x).unwrap();
    let mut yd = cuda.alloc(n * rows).unwrap();
    cuda.matmul(&wc, &xd, n, &mut yd).expect("cuda matmul");
    let mut got = vec![0.0f32; n * rows];
    cuda.download(&yd, &mut got).unwrap();
    let pick = [0, 1, 65533, 65534, 65535, 65536, 65537, 65538, 65539];
    let want = exact_rows(ty, &wb, cols, &pick, &x, n);
    for t in 0..n {
        for (j, &r) in pick.iter().enumerate() {
            let (s, m) = want[t * pick.len() + j];
            let g = got[t * rows + r];
            let tol = gemm_tolerance(cols, m);
            assert!(
                (g as f64 - s).abs() <= tol,
                "token {t} row {r}: cuda {g}, reference {s} (tolerance {tol:e})"
            );
        }
    }
}

/// GLM-5's per-head products in decode (`attn_k_b`: 64 heads of 512 rows × 192 columns,
/// `attn_v_b`: 64 × 256 × 512) and a 4-row one, for the types whose one-token product takes
/// `mmid_short` (several row groups a warp): against the CPU backend, and a token alone with
/// the bits it gets in a batch of three (the grouped per-unit kernel, kernels/quant.cu
/// `matvec_*`, whose sum order `mmid_short` keeps).
#[test]
fn short_per_head_rows_match_the_cpu_backend_and_the_batch() {
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x5eed_f00d_4ead);
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL] {
        for (cols, rows, heads) in [(192usize, 512usize, 64usize), (512, 256, 64), (64, 4, 3)] {
            let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
            let wb = weight_bytes(&mut rng, ty, cols * rows * heads);
            let (wc, wcpu) = upload_both(&cuda, &cpu, "kb", ty, &[cols, rows, heads], &wb);
            // 3 tokens: pairs grouped into one 8-pair tile a head; 40: the tensor-core tiles
            // (more pairs than 8 a head), grouped by head without reading the ids.
            for n in [3usize, 40] {
                let x: Vec<f32> = (0..n * heads * cols).map(|_| rng.f()).collect();
                let ids: Vec<u32> = (0..n * heads).map(|i| (i % heads) as u32).collect();
                let what = format!("{ty} per-head {cols}x{rows}x{heads} n={n}");
                let mut want = vec![0.0f32; n * heads * rows];
                let cpu_ids = cpu.upload_ids(&ids).unwrap();
                cpu.per_head_matmul(&wcpu, &cpu_ids, heads, &x, n, &mut want)
                    .expect("cpu per_head_matmul");
                let run = |tokens: usize, xs: &[f32]| {
                    let xd = cuda.upload(xs).unwrap();
                    let idd = cuda.upload_ids(&ids[..tokens * heads]).unwrap();
                    let mut yd = cuda.alloc(tokens * heads * rows).unwrap();
                    cuda.per_head_matmul(&wc, &idd, heads, &xd, tokens, &mut yd)
                        .expect("cuda per_head_matmul");
                    let mut got = vec![0.0f32; tokens * heads * rows];
                    cuda.download(&yd, &mut got).unwrap();
                    got
                };
                let batch = run(n, &x);
                let tol: Vec<f64> = (0..n * heads * rows)
                    .map(|i| {
                        let (p, r) = (i / rows, i % rows);
                        let g = (p % heads) * rows + r;
                        let w = &wb[g * row_bytes..(g + 1) * row_bytes];
                        tolerance(ty, cols, abs_terms(ty, w, &x[p * cols..(p + 1) * cols]))
                    })
                    .collect();
                check_close(&what, &batch, &want, &tol);
                for t in 0..n {
                    let xs = &x[t * heads * cols..(t + 1) * heads * cols];
                    let alone = run(1, xs);
                    let inside = &batch[t * heads * rows..(t + 1) * heads * rows];
                    for (i, (a, b)) in alone.iter().zip(inside).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{what}: token {t} output {i}: alone {a}, in the batch {b}"
                        );
                    }
                }
            }
        }
    }
}

/// The absorbed query's two parts in one launch (`rope_split_for`: RoPE of each head's last
/// dims, its first `cols` copied out and quantized for the per-head product that reads them):
/// the rotated query, the copy and the product after it bit-identical to `rope`, `copy2d` and
/// the product's own quantizer; the product against the CPU backend's. GLM-5's shape (64
/// heads of 192 + 64, `attn_k_b` 512 rows) and a small one, for the partners the launch
/// quantizes (Q8_0: Q8_0 and Q4_0 weights; Q8_1: Q4_1) and one it leaves to the separate ops
/// (Q4_K's Q8_K).
#[test]
fn split_queries_match_the_cpu_backend_and_the_separate_ops() {
    use glint_core::{RopeMode, RopeParams, Rows};
    let cuda = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new();
    let mut rng = Rng(0x0e5e_5917_7a11);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q4_K,
    ] {
        // (heads, nope, rope, rows of the per-head weight, mode)
        let glm5 = (64usize, 192usize, 64usize, 512usize, RopeMode::Interleaved);
        let small = (3, 64, 16, 4, RopeMode::Neox);
        for (heads, nope, n_rot, rows, mode) in [glm5, small] {
            let cols = if ty == GgmlType::Q4_K { 256 } else { nope };
            let head_dim = cols + n_rot;
            let row_bytes = ty.row_bytes(cols as u64).unwrap() as usize;
            let wb = weight_bytes(&mut rng, ty, cols * rows * heads);
            let (wc, wcpu) = upload_both(&cuda, &cpu, "kb", ty, &[cols, rows, heads], &wb);
            let inv: Vec<f32> = (0..n_rot / 2)
                .map(|i| 10000f32.powf(-(2.0 * i as f32) / n_rot as f32))
                .collect();
            let invd = cuda.upload(&inv).unwrap();
            for n in [1usize, 3] {
                let what =
                    format!("{ty} split query, {heads} heads of {cols} + {n_rot}, {n} tokens");
                let x: Vec<f32> = (0..n * heads * head_dim).map(|_| rng.f() * 2.0).collect();
                let posd = cuda.upload_ids(&[7u32, 300, 4000][..n]).unwrap();
                let ids: Vec<u32> = (0..n * heads).map(|i| (i % heads) as u32).collect();
                let idd = cuda.upload_ids(&ids).unwrap();
                let p = RopeParams {
                    n_tokens: n,
                    n_heads: heads,
                    head_dim,
                    offset: cols,
                    n_rot,
                    mode,
                    attn_factor: 1.0,
                };
                let (mut q1, mut q2) = (cuda.upload(&x).unwrap(), cuda.upload(&x).unwrap());
                let (mut y1, mut y2) = (
                    cuda.alloc(n * heads * cols).unwrap(),
                    cuda.alloc(n * heads * cols).unwrap(),
                );
                // The one-launch path where it applies (checked, so a silent fallback to the
                // separate ops cannot pass as the fused kernel's bits), else the trait's.
                let fused = cuda
                    .rope_split_fused(&mut q1, &posd, &invd, &p, cols, &mut y1, &wc)
                    .expect("rope_split_fused");
                assert_eq!(fused, ty != GgmlType::Q4_K, "{what}: one launch");
                if !fused {
                    cuda.rope_split_for(&mut q1, &posd, &invd, &p, cols, &mut y1, &wc)
                        .expect("rope_split_for");
                }
                cuda.rope(&mut q2, &posd, &invd, &p).unwrap();
                cuda.copy2d(
                    &q2,
                    Rows::of(head_dim),
                    &mut y2,
                    Rows::of(cols),
                    n * heads,
                    cols,
                )
                .unwrap();
                let (mut o1, mut o2) = (
                    cuda.alloc(n * heads * rows).unwrap(),
                    cuda.alloc(n * heads * rows).unwrap(),
                );
                cuda.per_head_matmul(&wc, &idd, heads, &y1, n, &mut o1)
                    .expect("product after rope_split_for");
                cuda.per_head_matmul(&wc, &idd, heads, &y2, n, &mut o2)
                    .unwrap();
                let get = |b: &<CudaBackend as Backend>::Buf, len: usize| {
                    let mut v = vec![0.0f32; len];
                    cuda.download(b, &mut v).unwrap();
                    v
                };
                let same = |a: &[f32], b: &[f32], part: &str| {
                    for (i, (u, v)) in a.iter().zip(b).enumerate() {
                        assert_eq!(
                            u.to_bits(),
                            v.to_bits(),
                            "{what}: {part}[{i}] {u} vs separate {v}"
                        );
                    }
                };
                same(&get(&q1, x.len()), &get(&q2, x.len()), "q");
                let ys = get(&y1, n * heads * cols);
                same(&ys, &get(&y2, n * heads * cols), "y");
                for (i, &v) in ys.iter().enumerate() {
                    let (r, c) = (i / cols, i % cols);
                    assert_eq!(v, x[r * head_dim + c], "{what}: y[{i}] is not x's value");
                }
                let out = get(&o1, n * heads * rows);
                same(&out, &get(&o2, n * heads * rows), "product");
                let mut want = vec![0.0f32; n * heads * rows];
                let cpu_ids = cpu.upload_ids(&ids).unwrap();
                cpu.per_head_matmul(&wcpu, &cpu_ids, heads, &ys, n, &mut want)
                    .expect("cpu per_head_matmul");
                let tol: Vec<f64> = (0..n * heads * rows)
                    .map(|i| {
                        let (pair, r) = (i / rows, i % rows);
                        let g = (pair % heads) * rows + r;
                        let w = &wb[g * row_bytes..(g + 1) * row_bytes];
                        tolerance(
                            ty,
                            cols,
                            abs_terms(ty, w, &ys[pair * cols..(pair + 1) * cols]),
                        )
                    })
                    .collect();
                check_close(&what, &out, &want, &tol);
            }
        }
        eprintln!("{ty}: split queries ok");
    }
}
