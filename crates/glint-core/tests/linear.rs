//! Matmul ops against plain f64 loops written here: the F32 GEMM path (batch ≥ 8), the
//! row-parallel path (decode), the expert-indexed matmul, and quantized weights (Q8_0, checked
//! against the gguf-py-verified dequantizer with the activation-quantization error bound).

use std::borrow::Cow;

use glint_core::{Backend, CpuBackend, GgmlType};

fn rand_vec(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// y[t][r] = Σ_c w[(e·rows + r)·cols + c]·x[t][c] in f64.
fn reference(w: &[f32], e: usize, rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    (0..rows)
        .map(|r| {
            (0..cols)
                .map(|c| w[(e * rows + r) * cols + c] as f64 * x[c] as f64)
                .sum::<f64>() as f32
        })
        .collect()
}

fn check_f32_matmul(n: usize) {
    let (rows, cols) = (37, 64);
    let be = CpuBackend::new();
    let w = rand_vec(1, rows * cols);
    let x = rand_vec(2, n * cols);
    let wt = be
        .upload_weight("w", GgmlType::F32, &[cols, rows], Cow::Owned(f32_bytes(&w)))
        .unwrap();
    let mut y = be.alloc(n * rows).unwrap();
    be.matmul(&wt, &x, n, &mut y).unwrap();
    for t in 0..n {
        let want = reference(&w, 0, rows, cols, &x[t * cols..(t + 1) * cols]);
        for r in 0..rows {
            assert!(
                (y[t * rows + r] - want[r]).abs() < 1e-4,
                "n {n} t {t} r {r}"
            );
        }
    }
}

#[test]
fn f32_matmul_decode_path() {
    check_f32_matmul(1);
    check_f32_matmul(3);
}

#[test]
fn f32_matmul_gemm_path() {
    check_f32_matmul(8);
    check_f32_matmul(33);
}

#[test]
fn f32_mul_mat_id() {
    let (rows, cols, ne, n, k) = (5, 16, 4, 3, 2);
    let be = CpuBackend::new();
    let w = rand_vec(3, ne * rows * cols);
    let wt = be
        .upload_weight(
            "e",
            GgmlType::F32,
            &[cols, rows, ne],
            Cow::Owned(f32_bytes(&w)),
        )
        .unwrap();
    let ids = vec![3u32, 0, 1, 3, 2, 2];
    for per_slot in [false, true] {
        let x = rand_vec(4, if per_slot { n * k } else { n } * cols);
        let mut y = be.alloc(n * k * rows).unwrap();
        be.mul_mat_id(&wt, &ids, k, &x, per_slot, n, &mut y)
            .unwrap();
        for i in 0..n * k {
            let xr = if per_slot { i } else { i / k };
            let want = reference(
                &w,
                ids[i] as usize,
                rows,
                cols,
                &x[xr * cols..(xr + 1) * cols],
            );
            for r in 0..rows {
                assert!((y[i * rows + r] - want[r]).abs() < 1e-4);
            }
        }
    }
    // An expert id past the tensor is an error, not a panic.
    let mut y = be.alloc(rows).unwrap();
    assert!(be
        .mul_mat_id(&wt, &vec![4u32], 1, &rand_vec(5, cols), false, 1, &mut y)
        .is_err());
}

#[test]
fn q8_0_matmul_and_get_rows() {
    let (rows, cols, n) = (24, 96, 2);
    let be = CpuBackend::new();
    let wf = rand_vec(6, rows * cols);
    let q = glint_quant::quantize_to_vec(GgmlType::Q8_0, &wf).unwrap();
    let deq = glint_quant::dequantize_to_vec(GgmlType::Q8_0, &q).unwrap();
    let wt = be
        .upload_weight("q", GgmlType::Q8_0, &[cols, rows], Cow::Borrowed(&q))
        .unwrap();
    let x = rand_vec(7, n * cols);
    let mut y = be.alloc(n * rows).unwrap();
    be.matmul(&wt, &x, n, &mut y).unwrap();
    for t in 0..n {
        let want = reference(&deq, 0, rows, cols, &x[t * cols..(t + 1) * cols]);
        for r in 0..rows {
            // x is quantized to Q8_0 (|err| ≤ amax/254 per element): bound Σ|w|·amax/254.
            let bound: f32 = deq[r * cols..(r + 1) * cols]
                .iter()
                .map(|v| v.abs())
                .sum::<f32>()
                / 254.0
                + 1e-5;
            assert!((y[t * rows + r] - want[r]).abs() <= bound, "t {t} r {r}");
        }
    }
    let mut rowsout = be.alloc(2 * cols).unwrap();
    be.get_rows(&wt, &vec![5u32, 0], 2, &mut rowsout).unwrap();
    assert_eq!(&rowsout[..cols], &deq[5 * cols..6 * cols]);
    assert_eq!(&rowsout[cols..], &deq[..cols]);
}
