//! Reference dot products for float weights (F32, F16, BF16) against activations converted to
//! the same format, as llama.cpp's CPU backend pairs them (`vec_dot_type` F32/F16/BF16).
//!
//! Mirrors ggml's generic `ggml_vec_dot_f32/f16/bf16`: each product is formed in f32 (exact for
//! F16 and BF16 inputs) and summed in f64 (`ggml_float`), then rounded once to f32.

use half::{bf16, f16};

pub fn dot_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        let x = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        let y = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        sum += (x * y) as f64;
    }
    sum as f32
}

pub fn dot_f16(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        let x = f16::from_le_bytes([x[0], x[1]]).to_f32();
        let y = f16::from_le_bytes([y[0], y[1]]).to_f32();
        sum += (x * y) as f64;
    }
    sum as f32
}

pub fn dot_bf16(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        let x = bf16::from_le_bytes([x[0], x[1]]).to_f32();
        let y = bf16::from_le_bytes([y[0], y[1]]).to_f32();
        sum += (x * y) as f64;
    }
    sum as f32
}
