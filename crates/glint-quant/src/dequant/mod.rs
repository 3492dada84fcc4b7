//! Block formats to f32, one function per GGML type.
//!
//! Each kernel evaluates exactly the float expressions ggml's `dequantize_row_*` and gguf-py's
//! `dequantize_blocks` evaluate (same products in the same order, no fused multiply-add), so the
//! outputs are bit-identical to both references rather than merely close.

mod float;
mod fp4;
mod iquants;
mod kquants;
mod legacy;
mod ternary;

pub(crate) use float::*;
pub(crate) use fp4::*;
pub(crate) use iquants::*;
pub(crate) use kquants::*;
pub(crate) use legacy::*;
pub(crate) use ternary::*;

pub use fp4::{e8m0_to_f32_half, ue4m3_to_f32_half};
pub use iquants::iq1m_scale;
pub use kquants::{q3k_scales, scale_min_k4};

use crate::blocks::{view_blocks, Block};
use crate::error::QuantError;

/// Checks that `out` holds exactly the elements encoded in `bytes`, then runs `f` once per block
/// with that block's slice of `out`.
pub(crate) fn per_block<B: Block>(
    bytes: &[u8],
    out: &mut [f32],
    f: impl Fn(&B, &mut [f32]),
) -> Result<(), QuantError> {
    let blocks = view_blocks::<B>(bytes)?;
    let n = blocks.len() * B::QK;
    if out.len() != n {
        return Err(QuantError::BadLength {
            ty: B::TYPE,
            what: "output elements",
            expected: n,
            found: out.len(),
        });
    }
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(B::QK)) {
        f(b, y);
    }
    Ok(())
}
