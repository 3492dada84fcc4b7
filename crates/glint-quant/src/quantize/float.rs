//! Plain float element types.

use glint_gguf::GgmlType;

use super::f32_to_f16;
use crate::error::QuantError;

fn scalars<const N: usize>(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    conv: impl Fn(f32) -> [u8; N],
) -> Result<(), QuantError> {
    if out.len() != src.len() * N {
        return Err(QuantError::BadLength {
            ty,
            what: "output bytes",
            expected: src.len() * N,
            found: out.len(),
        });
    }
    for (x, o) in src.iter().zip(out.chunks_exact_mut(N)) {
        o.copy_from_slice(&conv(*x));
    }
    Ok(())
}

pub(crate) fn quant_f32(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    scalars::<4>(GgmlType::F32, src, out, f32::to_le_bytes)
}

pub(crate) fn quant_f16(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    scalars::<2>(GgmlType::F16, src, out, |x| f32_to_f16(x).to_le_bytes())
}

/// f32 to bf16 as ggml's `ggml_compute_fp32_to_bf16`: round to nearest even on the bits, and
/// NaNs truncated and forced quiet (bit 6 of the result) instead of rounded, since rounding a
/// NaN's payload could carry into the exponent and produce infinity.
pub(crate) fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u as u64 + (0x7fff + ((u >> 16) & 1)) as u64) >> 16) as u16
}

pub(crate) fn quant_bf16(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    scalars::<2>(GgmlType::BF16, src, out, |x| {
        f32_to_bf16_bits(x).to_le_bytes()
    })
}
