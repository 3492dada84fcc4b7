//! GGML block quantization formats.

pub mod blocks;
mod dequant;
pub mod dot;
pub mod error;
pub mod grids;
pub mod matmul;
pub mod moe_matmul;
mod quantize;
mod table;

pub use dequant::{e8m0_to_f32_half, iq1m_scale, q3k_scales, scale_min_k4, ue4m3_to_f32_half};
pub use error::QuantError;
pub use matmul::{matmul, MatmulScratch, QWeight};
pub use moe_matmul::mul_mat_id;
pub use table::{
    dequantize, dequantize_to_vec, element_count, quantize, quantize_to_vec, quantized_len, traits,
    FromF32Fn, ToF32Fn, TypeTraits,
};
