//! `#[repr(C)]` layouts of every GGML block type, field for field as ggml's `ggml-common.h`.
//!
//! Kernels read blocks through these structs instead of byte offsets so that a layout mistake is
//! a compile error (the size asserts below) rather than silently shifted data. Multi-byte fields
//! are little-endian on disk; glint only targets little-endian machines (see the assert at the
//! bottom), so the in-memory structs can be viewed directly over mmap'd bytes.

#![allow(non_camel_case_types)]

use std::borrow::Cow;

use bytemuck::{Pod, Zeroable};
use glint_gguf::GgmlType;
use half::f16;

use crate::error::QuantError;

/// Elements in a k-quant / i-quant super-block.
pub const QK_K: usize = 256;
/// Elements in a legacy (Q4_0 ... Q8_1, IQ4_NL, MXFP4) block.
pub const QK32: usize = 32;
/// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K.
pub const K_SCALE_SIZE: usize = 12;

/// A GGML block: a fixed number of elements stored in a fixed number of bytes.
pub trait Block: Pod {
    /// The GGML type this block belongs to.
    const TYPE: GgmlType;
    /// Elements the block encodes.
    const QK: usize;
}

macro_rules! block {
    ($(#[$m:meta])* $name:ident, $ty:ident, $qk:expr, $bytes:expr, { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        impl Block for $name {
            const TYPE: GgmlType = GgmlType::$ty;
            const QK: usize = $qk;
        }
        const _: () = assert!(std::mem::size_of::<$name>() == $bytes);
    };
}

block!(
    /// 32 weights: `d * (q - 8)`, q in 4 bits.
    BlockQ4_0, Q4_0, QK32, 18, { d: f16, qs: [u8; 16] });
block!(
    /// 32 weights: `d * q + m`, q in 4 bits.
    BlockQ4_1, Q4_1, QK32, 20, { d: f16, m: f16, qs: [u8; 16] });
block!(
    /// 32 weights: `d * (q - 16)`, q in 5 bits (fifth bits packed in `qh`, bit j = element j).
    BlockQ5_0, Q5_0, QK32, 22, { d: f16, qh: [u8; 4], qs: [u8; 16] });
block!(
    /// 32 weights: `d * q + m`, q in 5 bits.
    BlockQ5_1, Q5_1, QK32, 24, { d: f16, m: f16, qh: [u8; 4], qs: [u8; 16] });
block!(
    /// 32 weights: `d * q`, q an i8. Also the activation partner of Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4.
    BlockQ8_0, Q8_0, QK32, 34, { d: f16, qs: [i8; 32] });
block!(
    /// Q8_0 plus `s = d * sum(qs)`, which lets Q4_1/Q5_1 dot products fold in their min.
    BlockQ8_1, Q8_1, QK32, 36, { d: f16, s: f16, qs: [i8; 32] });
block!(
    /// 16 groups of 16: `d * (scales & 15) * q - dmin * (scales >> 4)`, q in 2 bits.
    BlockQ2K, Q2_K, QK_K, 84, { scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16 });
block!(
    /// 16 groups of 16: `d * (s - 32) * (q - 4 * !hbit)`, 6-bit scales packed in 12 bytes.
    BlockQ3K, Q3_K, QK_K, 110, { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16 });
block!(
    /// 8 groups of 32: `d * sc * q - dmin * m`, 6-bit sc/m packed in 12 bytes.
    BlockQ4K, Q4_K, QK_K, 144, { d: f16, dmin: f16, scales: [u8; K_SCALE_SIZE], qs: [u8; 128] });
block!(
    /// Q4_K with a fifth bit per weight in `qh`.
    BlockQ5K, Q5_K, QK_K, 176, { d: f16, dmin: f16, scales: [u8; K_SCALE_SIZE], qh: [u8; 32], qs: [u8; 128] });
block!(
    /// 16 groups of 16: `d * scales * (q - 32)`, q in 6 bits (4 in `ql`, 2 in `qh`).
    BlockQ6K, Q6_K, QK_K, 210, { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 });
block!(
    /// Activation partner of k-quants and i-quants: f32 scale, i8 quants, sums per 16.
    BlockQ8K, Q8_K, QK_K, 292, { d: f32, qs: [i8; 256], bsums: [i16; 16] });
block!(
    /// 8 groups of 32; each u32 pair holds 4 grid indices, 4x7 sign bits and a 4-bit scale.
    BlockIQ2XXS, IQ2_XXS, QK_K, 66, { d: f16, qs: [u16; 32] });
block!(
    /// 32 u16 = 9-bit grid index + 7-bit sign index; 4-bit scales per 16.
    BlockIQ2XS, IQ2_XS, QK_K, 74, { d: f16, qs: [u16; 32], scales: [u8; 8] });
block!(
    /// `qs[0..32]` low grid bits, `qs[32..64]` explicit sign bytes, `qh` 2 high grid bits each.
    BlockIQ2S, IQ2_S, QK_K, 82, { d: f16, qs: [u8; 64], qh: [u8; 8], scales: [u8; 8] });
block!(
    /// `qs[0..64]` grid indices, `qs[64..96]` 8 u32 of 4x7 sign bits + 4-bit scale.
    BlockIQ3XXS, IQ3_XXS, QK_K, 98, { d: f16, qs: [u8; 96] });
block!(
    /// 9-bit grid indices (`qs` + `qh`), explicit sign bits, 4-bit scales per 32.
    BlockIQ3S, IQ3_S, QK_K, 110, { d: f16, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4] });
block!(
    /// 11-bit grid indices over {-1,0,1}; `qh` holds 3 high index bits x4, 3-bit scale, delta sign.
    BlockIQ1S, IQ1_S, QK_K, 50, { d: f16, qs: [u8; 32], qh: [u16; 8] });
block!(
    /// IQ1_S variant; the f16 super-scale is split over the top nibbles of the four u16 `scales`.
    BlockIQ1M, IQ1_M, QK_K, 56, { qs: [u8; 32], qh: [u8; 16], scales: [u8; 8] });
block!(
    /// 32 weights: `d * kvalues_iq4nl[q]`, q in 4 bits.
    BlockIQ4NL, IQ4_NL, QK32, 18, { d: f16, qs: [u8; 16] });
block!(
    /// 8 groups of 32: `d * (ls - 32) * kvalues_iq4nl[q]`, 6-bit ls split over `scales_l`/`scales_h`.
    BlockIQ4XS, IQ4_XS, QK_K, 136, { d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128] });
block!(
    /// Ternary: 5 trits per `qs` byte and 4 per `qh` byte, stored as fixed-point fractions of 243.
    BlockTQ1_0, TQ1_0, QK_K, 54, { qs: [u8; 48], qh: [u8; 4], d: f16 });
block!(
    /// Ternary: 2 bits per weight, `d * (q - 1)`.
    BlockTQ2_0, TQ2_0, QK_K, 66, { qs: [u8; 64], d: f16 });
block!(
    /// 32 FP4 (E2M1) weights sharing one E8M0 exponent `e`.
    BlockMXFP4, MXFP4, QK32, 17, { e: u8, qs: [u8; 16] });
block!(
    /// 64 FP4 (E2M1) weights in 4 sub-blocks of 16, each with an unsigned E4M3 scale.
    BlockNVFP4, NVFP4, 64, 36, { d: [u8; 4], qs: [u8; 32] });
block!(
    /// 128 weights of one bit each: `+d` or `-d`.
    BlockQ1_0, Q1_0, 128, 18, { d: f16, qs: [u8; 16] });

// The structs above are viewed directly over file bytes, which is only correct little-endian.
const _: () = assert!(cfg!(target_endian = "little"));

/// Views `bytes` as blocks without copying when the bytes are suitably aligned, else copies.
///
/// Tensor data in a GGUF mmap is 32-byte aligned at each tensor start, which covers every block
/// type, but slices handed in by callers (row offsets, `Vec<u8>` buffers) may not be; copying in
/// that case keeps the API safe without forcing every caller to align.
pub fn view_blocks<B: Block>(bytes: &[u8]) -> Result<Cow<'_, [B]>, QuantError> {
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return Err(QuantError::BadLength {
            ty: B::TYPE,
            what: "input bytes (not a whole number of blocks)",
            expected: (bytes.len() / size + 1) * size,
            found: bytes.len(),
        });
    }
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(s) => Ok(Cow::Borrowed(s)),
        Err(_) => {
            let mut v: Vec<B> = vec![B::zeroed(); bytes.len() / size];
            bytemuck::cast_slice_mut::<B, u8>(&mut v).copy_from_slice(bytes);
            Ok(Cow::Owned(v))
        }
    }
}

/// Mutable view of `bytes` as blocks; errors if the length or alignment does not fit.
///
/// Quantizers write through this; callers own the output buffer, so misalignment is reported
/// rather than papered over with a copy (use [`view_blocks_mut_or_copy`] to avoid that).
pub fn view_blocks_mut<B: Block>(bytes: &mut [u8]) -> Option<&mut [B]> {
    bytemuck::try_cast_slice_mut::<u8, B>(bytes).ok()
}

/// Runs `f` on `bytes` viewed as mutable blocks, going through an aligned scratch copy when the
/// caller's buffer is misaligned.
pub fn view_blocks_mut_or_copy<B: Block, R>(
    bytes: &mut [u8],
    f: impl FnOnce(&mut [B]) -> R,
) -> Result<R, QuantError> {
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return Err(QuantError::BadLength {
            ty: B::TYPE,
            what: "output bytes (not a whole number of blocks)",
            expected: (bytes.len() / size + 1) * size,
            found: bytes.len(),
        });
    }
    if let Some(blocks) = view_blocks_mut::<B>(bytes) {
        return Ok(f(blocks));
    }
    let mut tmp: Vec<B> = vec![B::zeroed(); bytes.len() / size];
    let r = f(&mut tmp);
    bytes.copy_from_slice(bytemuck::cast_slice(&tmp));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The struct sizes must agree with the type table in glint-gguf (itself taken from
    /// gguf-py's `GGML_QUANT_SIZES`), which is independent of the structs.
    #[test]
    fn sizes_match_gguf_table() {
        fn check<B: Block>() {
            assert_eq!(std::mem::size_of::<B>(), B::TYPE.type_size(), "{}", B::TYPE);
            assert_eq!(B::QK, B::TYPE.block_size(), "{}", B::TYPE);
        }
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIQ2XXS>();
        check::<BlockIQ2XS>();
        check::<BlockIQ2S>();
        check::<BlockIQ3XXS>();
        check::<BlockIQ3S>();
        check::<BlockIQ1S>();
        check::<BlockIQ1M>();
        check::<BlockIQ4NL>();
        check::<BlockIQ4XS>();
        check::<BlockTQ1_0>();
        check::<BlockTQ2_0>();
        check::<BlockMXFP4>();
        check::<BlockNVFP4>();
        check::<BlockQ1_0>();
    }

    #[test]
    fn misaligned_view_copies() {
        let buf = vec![0u8; 292 * 2 + 1];
        let v = view_blocks::<BlockQ8K>(&buf[1..]).unwrap();
        assert_eq!(v.len(), 2);
        assert!(view_blocks::<BlockQ8K>(&buf[..10]).is_err());
    }
}
