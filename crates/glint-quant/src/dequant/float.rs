//! Scalar (non-block) element types.
//!
//! The integer types are converted with Rust's `as f32` (round to nearest even), the same as
//! numpy's `astype(np.float32)`; they appear in GGUF files for index tensors, where an f32 view is
//! still handy for inspection.

use glint_gguf::GgmlType;
use half::f16;

use crate::error::QuantError;

/// Converts a little-endian array of `N`-byte scalars with `conv`, checking lengths first.
fn scalars<const N: usize>(
    ty: GgmlType,
    bytes: &[u8],
    out: &mut [f32],
    conv: impl Fn([u8; N]) -> f32,
) -> Result<(), QuantError> {
    if !bytes.len().is_multiple_of(N) {
        return Err(QuantError::BadLength {
            ty,
            what: "input bytes (not a whole number of elements)",
            expected: (bytes.len() / N + 1) * N,
            found: bytes.len(),
        });
    }
    if out.len() != bytes.len() / N {
        return Err(QuantError::BadLength {
            ty,
            what: "output elements",
            expected: bytes.len() / N,
            found: out.len(),
        });
    }
    for (c, y) in bytes.chunks_exact(N).zip(out.iter_mut()) {
        *y = conv(c.try_into().expect("chunks_exact yields N bytes"));
    }
    Ok(())
}

pub(crate) fn dequant_f32(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<4>(GgmlType::F32, b, o, f32::from_le_bytes)
}
pub(crate) fn dequant_f16(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<2>(GgmlType::F16, b, o, |c| f16::from_le_bytes(c).to_f32())
}
pub(crate) fn dequant_bf16(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    // A plain shift, like ggml: `half`'s conversion would quiet signalling NaNs.
    scalars::<2>(GgmlType::BF16, b, o, |c| {
        f32::from_bits((u16::from_le_bytes(c) as u32) << 16)
    })
}
pub(crate) fn dequant_f64(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<8>(GgmlType::F64, b, o, |c| f64::from_le_bytes(c) as f32)
}
pub(crate) fn dequant_i8(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<1>(GgmlType::I8, b, o, |c| i8::from_le_bytes(c) as f32)
}
pub(crate) fn dequant_i16(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<2>(GgmlType::I16, b, o, |c| i16::from_le_bytes(c) as f32)
}
pub(crate) fn dequant_i32(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<4>(GgmlType::I32, b, o, |c| i32::from_le_bytes(c) as f32)
}
pub(crate) fn dequant_i64(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    scalars::<8>(GgmlType::I64, b, o, |c| i64::from_le_bytes(c) as f32)
}
