//! glint's dot products and matmul against candle-core's quantized CPU kernels (an independent
//! Rust port of ggml's), for the types both implement.
//!
//! Two comparisons per type: (1) candle's `vec_dot` on the very same weight and activation
//! bytes (only float accumulation order can differ), and (2) candle's `QMatMul` end to end,
//! where candle quantizes the activation itself and not as llama.cpp does today (Q8_0/Q8_1 with
//! `1/d` and ties-away rounding; Q8_K with the older `-128/max` scale and ties-away rounding),
//! so the end-to-end check feeds candle's own quantized activation to glint's kernel and then
//! only float accumulation order differs; glint's own activation path is checked loosely.

mod dotutil;

use candle_core::quantized::k_quants::{self, GgmlType as CandleType};
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul};
use candle_core::{Device, Module, Tensor};
use dotutil::{abs_dot, random_activations, random_weights, Rng};
use glint_gguf::GgmlType;
use glint_quant::dot::{self, Isa};
use glint_quant::{dequantize_to_vec, matmul, MatmulScratch, QWeight};

/// Copies bytes into storage aligned for any block struct and views them as candle blocks.
fn as_blocks<B: CandleType>(bytes: &[u8]) -> (Vec<u64>, usize) {
    let size = std::mem::size_of::<B>();
    assert_eq!(bytes.len() % size, 0);
    let mut buf = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut buf)[..bytes.len()].copy_from_slice(bytes);
    (buf, bytes.len() / size)
}

fn candle_dots<B: CandleType>(n: usize, w: &[u8], a: &[u8]) -> (f32, f32) {
    let (wb, nw) = as_blocks::<B>(w);
    let (ab, na) = as_blocks::<B::VecDotType>(a);
    // SAFETY: candle's blocks are #[repr(C)] with the ggml layout (size-asserted in candle and
    // equal to glint's); the buffers are 8-aligned and hold exactly nw / na blocks.
    let (ws, as_) = unsafe {
        (
            std::slice::from_raw_parts(wb.as_ptr() as *const B, nw),
            std::slice::from_raw_parts(ab.as_ptr() as *const B::VecDotType, na),
        )
    };
    (B::vec_dot(n, ws, as_), B::vec_dot_unopt(n, ws, as_))
}

/// candle's quantization of an activation row to `B`'s partner, as its QMatMul does it.
fn candle_act<B: CandleType>(x: &[f32]) -> Vec<u8> {
    let mut ys = vec![B::VecDotType::zeros(); x.len() / B::VecDotType::BLCK_SIZE];
    B::VecDotType::from_float(x, &mut ys);
    let bytes = std::mem::size_of_val(ys.as_slice());
    // SAFETY: plain-old-data #[repr(C)] blocks viewed as their bytes.
    unsafe { std::slice::from_raw_parts(ys.as_ptr() as *const u8, bytes).to_vec() }
}

type DotsFn = fn(usize, &[u8], &[u8]) -> (f32, f32);
type ActFn = fn(&[f32]) -> Vec<u8>;

fn pairs() -> Vec<(GgmlType, GgmlDType, DotsFn, ActFn)> {
    use k_quants::{
        BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
        BlockQ6K, BlockQ8_0,
    };
    vec![
        (
            GgmlType::Q4_0,
            GgmlDType::Q4_0,
            candle_dots::<BlockQ4_0>,
            candle_act::<BlockQ4_0>,
        ),
        (
            GgmlType::Q4_1,
            GgmlDType::Q4_1,
            candle_dots::<BlockQ4_1>,
            candle_act::<BlockQ4_1>,
        ),
        (
            GgmlType::Q5_0,
            GgmlDType::Q5_0,
            candle_dots::<BlockQ5_0>,
            candle_act::<BlockQ5_0>,
        ),
        (
            GgmlType::Q5_1,
            GgmlDType::Q5_1,
            candle_dots::<BlockQ5_1>,
            candle_act::<BlockQ5_1>,
        ),
        (
            GgmlType::Q8_0,
            GgmlDType::Q8_0,
            candle_dots::<BlockQ8_0>,
            candle_act::<BlockQ8_0>,
        ),
        (
            GgmlType::Q2_K,
            GgmlDType::Q2K,
            candle_dots::<BlockQ2K>,
            candle_act::<BlockQ2K>,
        ),
        (
            GgmlType::Q3_K,
            GgmlDType::Q3K,
            candle_dots::<BlockQ3K>,
            candle_act::<BlockQ3K>,
        ),
        (
            GgmlType::Q4_K,
            GgmlDType::Q4K,
            candle_dots::<BlockQ4K>,
            candle_act::<BlockQ4K>,
        ),
        (
            GgmlType::Q5_K,
            GgmlDType::Q5K,
            candle_dots::<BlockQ5K>,
            candle_act::<BlockQ5K>,
        ),
        (
            GgmlType::Q6_K,
            GgmlDType::Q6K,
            candle_dots::<BlockQ6K>,
            candle_act::<BlockQ6K>,
        ),
    ]
}

#[test]
fn vec_dot_matches_candle_on_identical_bytes() {
    for (ty, _, candle, _) in pairs() {
        for seed in 0..6 {
            let n = 2048;
            let mut rng = Rng::new(seed + 100 * ty as u64);
            let w = random_weights(ty, n, &mut rng);
            let x = random_activations(n, &mut rng);
            let partner = dot::partner_type(ty).unwrap();
            let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
            dot::quantize_activation(partner, &x, &mut act).unwrap();
            let mag = abs_dot(
                &dequantize_to_vec(ty, &w).unwrap(),
                &dequantize_to_vec(partner, &act).unwrap(),
            );
            let tol = (n / ty.block_size() + 16) as f64 * f32::EPSILON as f64 * mag;
            let (c_simd, c_generic) = candle(n, &w, &act);
            for isa in Isa::all_available() {
                let ours = dot::vec_dot_with(isa, ty, n, &w, &act).unwrap();
                for (what, c) in [("vec_dot", c_simd), ("vec_dot_unopt", c_generic)] {
                    assert!(
                        ((ours - c) as f64).abs() <= tol,
                        "{ty} {isa:?} seed {seed}: glint {ours} vs candle {what} {c} (tol {tol})"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_matches_candle_qmatmul() {
    let (rows, cols) = (96, 1024);
    for (ty, dt, _, cact) in pairs() {
        let mut rng = Rng::new(ty as u64);
        let w = random_weights(ty, rows * cols, &mut rng);
        let x = random_activations(cols, &mut rng);
        let qt = qtensor_from_ggml(dt, &w, vec![rows, cols], &Device::Cpu).unwrap();
        let qm = QMatMul::from_qtensor(qt).unwrap();
        let xt = Tensor::from_vec(x.clone(), (1, cols), &Device::Cpu).unwrap();
        let theirs: Vec<f32> = qm
            .forward(&xt)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();

        let mut ours = vec![0f32; rows];
        let qw = QWeight::new(ty, cols, rows, &w).unwrap();
        matmul(&qw, &x, 1, &mut ours, &mut MatmulScratch::new()).unwrap();

        let wf = dequantize_to_vec(ty, &w).unwrap();
        let act_c = cact(&x);
        let partner = dot::partner_type(ty).unwrap();
        let af = dequantize_to_vec(partner, &act_c).unwrap();
        let rb = qw.row_bytes();
        for r in 0..rows {
            let wr = &wf[r * cols..(r + 1) * cols];
            // Same activation bytes as candle used: only accumulation order differs.
            let same_act = dot::vec_dot(ty, cols, &w[r * rb..(r + 1) * rb], &act_c).unwrap();
            let tol = (cols / ty.block_size() + 16) as f64 * f32::EPSILON as f64 * abs_dot(wr, &af);
            assert!(
                ((same_act - theirs[r]) as f64).abs() <= tol,
                "{ty} row {r}: glint on candle's activation {same_act} vs candle QMatMul {} (tol {tol})",
                theirs[r]
            );
            // glint's own (llama.cpp x86) activation quantization: quantization noise only.
            let loose = 1e-2 * abs_dot(wr, &x);
            assert!(
                ((ours[r] - theirs[r]) as f64).abs() <= loose,
                "{ty} row {r}: glint matmul {} vs candle QMatMul {} (tol {loose})",
                ours[r],
                theirs[r]
            );
        }
    }
}
