//! The type table: one row per GGML type, like ggml's `type_traits` / `type_traits_cpu`.
//!
//! Adding a GGML type means adding one row here plus its kernels; nothing else in the crate
//! switches on the type. Rows are built with `..TypeTraits::EMPTY` so that new columns (the CPU
//! dot product, GPU kernels) can be added without touching every row.

// Rows spell out every column today but keep `..TypeTraits::EMPTY` so a new column only needs
// a default in EMPTY.
#![allow(clippy::needless_update)]

use glint_gguf::GgmlType;

use crate::dequant::*;
use crate::error::QuantError;
use crate::quantize::*;

/// Decodes whole blocks of `bytes` into `out` (exactly `blocks * block_size` elements).
pub type ToF32Fn = fn(&[u8], &mut [f32]) -> Result<(), QuantError>;
/// Encodes `src` (a multiple of the block size) into `out` (exactly the encoded length).
pub type FromF32Fn = fn(&[f32], &mut [u8]) -> Result<(), QuantError>;

/// Everything glint knows how to do with one GGML type.
#[derive(Clone, Copy, Debug)]
pub struct TypeTraits {
    pub ty: GgmlType,
    /// Dequantizer, bit-identical to gguf-py / llama.cpp. `None`: no format definition we trust.
    pub to_f32: Option<ToF32Fn>,
    /// Reference quantizer, byte-identical to llama.cpp's `ggml_quantize_chunk` without imatrix.
    pub from_f32: Option<FromF32Fn>,
    /// The format the activation is quantized to for this type's CPU dot product (ggml-cpu's
    /// x86 `vec_dot_type`). `None` for types that are never a matmul weight (Q8_K, integers).
    pub vec_dot_type: Option<GgmlType>,
    /// CPU dot product of one weight row with one `vec_dot_type` activation row (the best kernel
    /// this CPU has; see `dot`). Unchecked lengths: prefer `dot::vec_dot` outside hot loops.
    pub vec_dot: Option<crate::dot::VecDotFn>,
}

impl TypeTraits {
    /// Base row for struct-update syntax; `ty` is overwritten by every row.
    const EMPTY: TypeTraits = TypeTraits {
        ty: GgmlType::F32,
        to_f32: None,
        from_f32: None,
        vec_dot_type: None,
        vec_dot: None,
    };
}

use GgmlType as T;

macro_rules! row {
    ($ty:ident, $to:expr, $from:expr, $vdt:expr) => {
        TypeTraits {
            ty: T::$ty,
            to_f32: $to,
            from_f32: $from,
            vec_dot_type: $vdt,
            vec_dot: crate::dot::table_kernel(T::$ty),
            ..TypeTraits::EMPTY
        }
    };
}

/// One row per entry of [`GgmlType::ALL`], in the same order (checked by a test).
static TABLE: &[TypeTraits] = &[
    row!(F32, Some(dequant_f32), Some(quant_f32), Some(T::F32)),
    row!(F16, Some(dequant_f16), Some(quant_f16), Some(T::F16)),
    row!(Q4_0, Some(dequant_q4_0), Some(quant_q4_0), Some(T::Q8_0)),
    row!(Q4_1, Some(dequant_q4_1), Some(quant_q4_1), Some(T::Q8_1)),
    row!(Q5_0, Some(dequant_q5_0), Some(quant_q5_0), Some(T::Q8_0)),
    row!(Q5_1, Some(dequant_q5_1), Some(quant_q5_1), Some(T::Q8_1)),
    row!(Q8_0, Some(dequant_q8_0), Some(quant_q8_0), Some(T::Q8_0)),
    row!(Q8_1, Some(dequant_q8_1), Some(quant_q8_1), Some(T::Q8_1)),
    row!(Q2_K, Some(dequant_q2_k), Some(quant_q2_k), Some(T::Q8_K)),
    row!(Q3_K, Some(dequant_q3_k), Some(quant_q3_k), Some(T::Q8_K)),
    row!(Q4_K, Some(dequant_q4_k), Some(quant_q4_k), Some(T::Q8_K)),
    row!(Q5_K, Some(dequant_q5_k), Some(quant_q5_k), Some(T::Q8_K)),
    row!(Q6_K, Some(dequant_q6_k), Some(quant_q6_k), Some(T::Q8_K)),
    row!(Q8_K, Some(dequant_q8_k), Some(quant_q8_k), None),
    row!(IQ2_XXS, Some(dequant_iq2_xxs), None, Some(T::Q8_K)),
    row!(IQ2_XS, Some(dequant_iq2_xs), None, Some(T::Q8_K)),
    row!(IQ3_XXS, Some(dequant_iq3_xxs), None, Some(T::Q8_K)),
    row!(IQ1_S, Some(dequant_iq1_s), None, Some(T::Q8_K)),
    row!(
        IQ4_NL,
        Some(dequant_iq4_nl),
        Some(quant_iq4_nl),
        Some(T::Q8_0)
    ),
    row!(IQ3_S, Some(dequant_iq3_s), None, Some(T::Q8_K)),
    row!(IQ2_S, Some(dequant_iq2_s), None, Some(T::Q8_K)),
    row!(
        IQ4_XS,
        Some(dequant_iq4_xs),
        Some(quant_iq4_xs),
        Some(T::Q8_K)
    ),
    row!(I8, Some(dequant_i8), None, None),
    row!(I16, Some(dequant_i16), None, None),
    row!(I32, Some(dequant_i32), None, None),
    row!(I64, Some(dequant_i64), None, None),
    row!(F64, Some(dequant_f64), None, None),
    row!(IQ1_M, Some(dequant_iq1_m), None, Some(T::Q8_K)),
    row!(BF16, Some(dequant_bf16), Some(quant_bf16), Some(T::BF16)),
    row!(TQ1_0, Some(dequant_tq1_0), Some(quant_tq1_0), Some(T::Q8_K)),
    row!(TQ2_0, Some(dequant_tq2_0), Some(quant_tq2_0), Some(T::Q8_K)),
    row!(MXFP4, Some(dequant_mxfp4), Some(quant_mxfp4), Some(T::Q8_0)),
    row!(NVFP4, Some(dequant_nvfp4), Some(quant_nvfp4), Some(T::Q8_0)),
    row!(Q1_0, Some(dequant_q1_0), Some(quant_q1_0), Some(T::Q8_0)),
];

/// The table row for `ty`.
pub fn traits(ty: GgmlType) -> &'static TypeTraits {
    // ALL is in id order and TABLE mirrors it; ids are small so a scan is cheap and avoids a
    // second hand-maintained index.
    let i = GgmlType::ALL
        .iter()
        .position(|&t| t == ty)
        .expect("every GgmlType is in GgmlType::ALL");
    &TABLE[i]
}

/// Bytes needed to store `n_elems` elements of `ty`.
pub fn quantized_len(ty: GgmlType, n_elems: usize) -> Result<usize, QuantError> {
    let block = ty.block_size();
    if !n_elems.is_multiple_of(block) {
        return Err(QuantError::NotBlockAligned {
            ty,
            n: n_elems,
            block,
        });
    }
    Ok(n_elems / block * ty.type_size())
}

/// Elements encoded in `n_bytes` bytes of `ty`.
pub fn element_count(ty: GgmlType, n_bytes: usize) -> Result<usize, QuantError> {
    let size = ty.type_size();
    if !n_bytes.is_multiple_of(size) {
        return Err(QuantError::BadLength {
            ty,
            what: "input bytes (not a whole number of blocks)",
            expected: (n_bytes / size + 1) * size,
            found: n_bytes,
        });
    }
    Ok(n_bytes / size * ty.block_size())
}

/// Decodes `bytes` of type `ty` into `out`, which must hold exactly the encoded element count.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let f = traits(ty).to_f32.ok_or(QuantError::Unsupported {
        ty,
        op: "dequantize",
    })?;
    f(bytes, out)
}

/// Decodes `bytes` of type `ty` into a new vector.
pub fn dequantize_to_vec(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    let f = traits(ty).to_f32.ok_or(QuantError::Unsupported {
        ty,
        op: "dequantize",
    })?;
    let mut out = vec![0.0; element_count(ty, bytes.len())?];
    f(bytes, &mut out)?;
    Ok(out)
}

/// Encodes `src` as `ty` into `out`, which must be exactly `quantized_len(ty, src.len())` bytes.
pub fn quantize(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let f = traits(ty)
        .from_f32
        .ok_or(QuantError::Unsupported { ty, op: "quantize" })?;
    f(src, out)
}

/// Encodes `src` as `ty` into a new vector.
pub fn quantize_to_vec(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let f = traits(ty)
        .from_f32
        .ok_or(QuantError::Unsupported { ty, op: "quantize" })?;
    let mut out = vec![0u8; quantized_len(ty, src.len())?];
    f(src, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_follow_all() {
        assert_eq!(TABLE.len(), GgmlType::ALL.len());
        for (row, &ty) in TABLE.iter().zip(GgmlType::ALL) {
            assert_eq!(row.ty, ty);
            assert!(std::ptr::eq(traits(ty), row));
        }
    }
}
