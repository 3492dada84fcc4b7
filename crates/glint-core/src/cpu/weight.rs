//! CPU weights: a zero-copy view of the GGUF bytes (or an owned copy for weights the loader had
//! to re-assemble), plus the row decoder the kernels share.

use std::borrow::Cow;

use glint_gguf::GgmlType;
use half::{bf16, f16};

use crate::error::{CoreError, Result};

pub(crate) enum Data<'a> {
    Bytes(Cow<'a, [u8]>),
    /// F32 weights whose bytes were not 4-byte aligned (or were handed over owned) are kept as
    /// floats so the GEMM can read them in place.
    F32(Vec<f32>),
}

/// A weight bound on the CPU backend.
pub struct CpuWeight<'a> {
    pub(crate) ty: GgmlType,
    pub(crate) cols: usize,
    pub(crate) rows: usize,
    pub(crate) slices: usize,
    pub(crate) data: Data<'a>,
    row_bytes: usize,
}

impl<'a> CpuWeight<'a> {
    pub(crate) fn new(
        name: &str,
        ty: GgmlType,
        dims: &[usize],
        bytes: Cow<'a, [u8]>,
    ) -> Result<Self> {
        if dims.is_empty() || dims.len() > 3 {
            return Err(CoreError::Param {
                op: "upload_weight",
                msg: format!("{name}: {} dims, expected 1 to 3", dims.len()),
            });
        }
        let cols = dims[0];
        let rows = dims.get(1).copied().unwrap_or(1);
        let slices = dims.get(2).copied().unwrap_or(1);
        let row_bytes = ty.row_bytes(cols as u64).ok_or_else(|| CoreError::Param {
            op: "upload_weight",
            msg: format!("{name}: row of {cols} elements is not whole blocks of {ty}"),
        })? as usize;
        let expected = row_bytes
            .checked_mul(rows)
            .and_then(|v| v.checked_mul(slices))
            .ok_or_else(|| CoreError::Param {
                op: "upload_weight",
                msg: format!("{name}: size overflows"),
            })?;
        if bytes.len() != expected {
            return Err(CoreError::Param {
                op: "upload_weight",
                msg: format!("{name}: {} bytes, expected {expected}", bytes.len()),
            });
        }
        let data = if ty == GgmlType::F32 {
            match bytemuck::try_cast_slice::<u8, f32>(&bytes) {
                Ok(_) if matches!(bytes, Cow::Borrowed(_)) => Data::Bytes(bytes),
                _ => Data::F32(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ),
            }
        } else {
            Data::Bytes(bytes)
        };
        Ok(Self {
            ty,
            cols,
            rows,
            slices,
            data,
            row_bytes,
        })
    }

    /// The whole tensor as f32 when it is stored as F32.
    pub(crate) fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            Data::Bytes(b) if self.ty == GgmlType::F32 => bytemuck::try_cast_slice(b).ok(),
            Data::Bytes(_) => None,
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Bytes(b) => b,
            Data::F32(v) => bytemuck::cast_slice(v),
        }
    }

    /// Decodes global row `r` (slice-major: row `r` of slice `e` is `e·rows + r`) to f32.
    pub(crate) fn decode_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let b = &self.bytes()[r * self.row_bytes..(r + 1) * self.row_bytes];
        decode(self.ty, b, &mut out[..self.cols])
    }

    pub(crate) fn total_rows(&self) -> usize {
        self.rows * self.slices
    }
}

/// Types this backend accepts as weights: floats and block formats. Integer tensors decode, but
/// a model weight stored as integers is a malformed file, so it is refused by name at load time.
pub(crate) fn decodable(ty: GgmlType) -> bool {
    !matches!(
        ty,
        GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64
    ) && glint_quant::traits(ty).to_f32.is_some()
}

/// Decodes a whole tensor to f32 on the host (norm weights, legacy fused tensors).
pub fn decode_to_f32(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let expected = ty
        .row_bytes(out.len() as u64)
        .ok_or(CoreError::UnsupportedType { op: "decode", ty })? as usize;
    crate::error::need("decode", "bytes", expected, bytes.len())?;
    decode(ty, &bytes[..expected], out)
}

/// Decodes one row of any supported type to f32.
pub(crate) fn decode(ty: GgmlType, b: &[u8], out: &mut [f32]) -> Result<()> {
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        _ => glint_quant::dequantize(ty, b, out)?,
    }
    Ok(())
}
