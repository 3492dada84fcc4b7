//! Reference quantizers: f32 to GGML blocks, byte-identical to llama.cpp.
//!
//! The output matches what `ggml_quantize_chunk` writes without an importance matrix (for most
//! types that is the `quantize_row_*_ref` function; for IQ4_NL it is `quantize_iq4_nl`, which
//! searches 15 scales where the `_ref` variant searches none). Byte identity matters because
//! GGUF files we write should be indistinguishable from llama.cpp's, and because it lets tests
//! compare bytes instead of tolerances. To get it, every helper repeats ggml's float operations in
//! ggml's order, in f32, without fused multiply-add, and rounds the way ggml rounds.

mod float;
mod fp4;
mod iq4;
mod kquants;
mod legacy;
mod ternary;

pub(crate) use float::*;
pub(crate) use fp4::*;
pub(crate) use iq4::*;
pub(crate) use kquants::*;
pub(crate) use legacy::*;
pub(crate) use ternary::*;

use half::f16;

use crate::blocks::{view_blocks_mut_or_copy, Block};
use crate::error::QuantError;

/// ggml's `nearest_int`: round-half-even to an integer via the 1.5 * 2^23 magic constant.
///
/// Only meaningful for |x| <= 2^22 (ggml asserts that in debug builds); outside that range it
/// returns the same garbage ggml's release build returns, which keeps us byte-identical.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12582912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// f32 to f16 bits as ggml's `GGML_FP32_TO_FP16`: round to nearest even, overflow to infinity,
/// and every NaN to the single quiet NaN 0x7E00 (with the input's sign).
#[inline]
pub(crate) fn f32_to_f16(x: f32) -> f16 {
    if x.is_nan() {
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        return f16::from_bits(sign | 0x7e00);
    }
    f16::from_f32(x)
}

/// Checks `src`/`out` lengths for block type `B` and runs `f` once per block.
pub(crate) fn per_block<B: Block>(
    src: &[f32],
    out: &mut [u8],
    f: impl Fn(&[f32], &mut B),
) -> Result<(), QuantError> {
    if !src.len().is_multiple_of(B::QK) {
        return Err(QuantError::NotBlockAligned {
            ty: B::TYPE,
            n: src.len(),
            block: B::QK,
        });
    }
    let expected = src.len() / B::QK * std::mem::size_of::<B>();
    if out.len() != expected {
        return Err(QuantError::BadLength {
            ty: B::TYPE,
            what: "output bytes",
            expected,
            found: out.len(),
        });
    }
    view_blocks_mut_or_copy::<B, ()>(out, |blocks| {
        for (x, y) in src.chunks_exact(B::QK).zip(blocks.iter_mut()) {
            f(x, y);
        }
    })
}
