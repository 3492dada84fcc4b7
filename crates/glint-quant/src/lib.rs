//! GGML block quantization formats.

pub mod blocks;
pub mod error;

pub use error::QuantError;
