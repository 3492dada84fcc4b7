//! CPU dot products between one quantized weight row and one quantized activation row.
//!
//! Each weight type is paired with the activation format llama.cpp's CPU backend pairs it with on
//! x86 (`type_traits_cpu[..].vec_dot_type`): Q8_K for k-quants, i-quants and ternary types, Q8_0
//! for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4/NVFP4/Q1_0, Q8_1 for Q4_1/Q5_1, and the weight's own float
//! format for F32/F16/BF16 (llama.cpp rounds the activation to F16/BF16 too; so does glint, so
//! those results match llama.cpp's rather than an f32 x f32 dot). The activation is quantized once per matmul ([`quantize_activation`]) and every
//! row's dot product then runs on integers, which is both what makes these kernels fast and what
//! lets the results be compared with llama.cpp's.
//!
//! The scalar kernels mirror ggml's `ggml_vec_dot_*_generic` operation for operation, including
//! the order of the float accumulations, so they are the reference. The SIMD kernels compute the
//! same integer sums (exactly) but accumulate the per-block float terms in a different order, so
//! they agree with the scalar ones to a few f32 ulps of the sum of absolute block terms.

mod act;
#[cfg(target_arch = "x86_64")]
mod amx_gemm;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_gemm;
#[cfg(target_arch = "x86_64")]
mod avx2_iq1;
#[cfg(target_arch = "x86_64")]
mod avx2_iq_signed;
#[cfg(target_arch = "x86_64")]
mod avx2_unit32;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_gemm;
#[cfg(target_arch = "x86_64")]
mod avx512_gemm_signed;
#[cfg(target_arch = "x86_64")]
mod avx512_iq;
#[cfg(target_arch = "x86_64")]
mod avx512_iq1;
#[cfg(target_arch = "x86_64")]
mod avx512_unit32;
mod f32_order;
#[cfg(target_arch = "x86_64")]
mod gemm_tile;
mod indexer_i8;
mod scalar_float;
mod scalar_iq;
mod scalar_k;
mod scalar_legacy;
#[cfg(target_arch = "x86_64")]
mod x86_util;

use std::sync::OnceLock;

use glint_gguf::GgmlType;

use crate::error::QuantError;

pub use act::{activation_bytes, quantize_activation};
pub use f32_order::{
    axpy_rows_ordered, axpy_rows_ordered_heads, dot_f32_ordered, dot_f32_ordered_grid,
    dot_f32_ordered_rows, relu_weighted_sums8,
};
pub use indexer_i8::{indexer_scores_i8, IndexerQuery, INDEXER_MAX_DIM, INDEXER_QUERY_MAX};

/// Iterates the blocks of a weight row and its activation row in lock step. Blocks are read
/// unaligned by value so callers may pass any byte slice (mmap row offsets are not aligned).
fn pairs<'a, W: bytemuck::Pod, A: bytemuck::Pod>(
    w: &'a [u8],
    a: &'a [u8],
) -> impl Iterator<Item = (W, A)> + 'a {
    w.chunks_exact(std::mem::size_of::<W>())
        .zip(a.chunks_exact(std::mem::size_of::<A>()))
        .map(|(wb, ab)| {
            (
                bytemuck::pod_read_unaligned::<W>(wb),
                bytemuck::pod_read_unaligned::<A>(ab),
            )
        })
}

/// A dot-product kernel: `n` elements of weights (`w`, whole blocks of the weight type) against
/// `n` elements of activation (`a`, whole blocks of the partner type). Callers check lengths.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// Several consecutive weight rows against one activation row: `out[i]` is the dot product of
/// row `i` of `w` (`out.len()` rows of `n` elements, back to back) with `a`. Bit for bit what
/// the family's [`VecDotFn`] gives for each row alone, so a matvec that uses it returns the
/// same values as a batched matmul calling the single-row kernel (batch invariance); it exists
/// so a kernel can share each activation load between rows and keep more independent work in
/// flight. Callers check lengths as for [`VecDotFn`].
pub type VecDotRowsFn = fn(n: usize, w: &[u8], a: &[u8], out: &mut [f32]);

/// Activation rows a [`VecDotColsFn`] takes at once.
pub const COLS: usize = 4;

/// One weight row against [`COLS`] activation rows: `out[t]` is the dot product of `w` with
/// `a[t]`, bit for bit what the family's [`VecDotFn`] gives for each alone (batch invariance).
/// It exists for prefill and batched decode, where every weight block would otherwise be
/// decoded again for each token: here it is decoded once for the [`COLS`]. Callers check
/// lengths as for [`VecDotFn`].
pub type VecDotColsFn = fn(n: usize, w: &[u8], a: [&[u8]; COLS], out: &mut [f32; COLS]);

/// Many weight rows against many activation rows in register tiles (prefill, batched decode):
/// `gemm(n, w, n_rows, act, n_acts, out)` multiplies the `n_rows` rows of `w` (back to back,
/// `n` elements each) with every `act(i)`, `i < n_acts`, and hands the results over a tile at a
/// time: `out(r0, i0, vals, lanes)` means `vals[k][j]` is row `r0 + k` . `act(i0 + j)` for
/// `j < lanes`. Every (row, activation) pair comes exactly once, bit for bit as the family's
/// [`VecDotFn`] gives it (batch invariance). Panics if a row or an activation is not `n`
/// elements long.
pub type GemmFn = for<'a> fn(
    n: usize,
    w: &[u8],
    n_rows: usize,
    act: &dyn Fn(usize) -> &'a [u8],
    n_acts: usize,
    out: &mut GemmOut,
);

/// A [`GemmFn`] in its two halves, so that a call's activations are packed into token tiles
/// once and then shared by every task that takes a share of the weight rows (instead of each
/// task packing them again). Tiles are `tile_bytes(n)` bytes, back to back; `pack(n, act,
/// count, tile)` packs `act(0..count)` (`count` ≤ 16) into one; `run(n, w, n_rows, packed,
/// n_acts, out)` is [`GemmFn`] over the tiles of `n_acts` packed activations.
#[derive(Clone, Copy)]
pub struct GemmParts {
    pub tile_bytes: fn(n: usize) -> usize,
    pub pack: GemmPackFn,
    pub run: fn(n: usize, w: &[u8], n_rows: usize, packed: &[u8], n_acts: usize, out: &mut GemmOut),
}

/// Packs `act(0..count)` (`count` ≤ 16 activations of `n` elements) into one token tile.
pub type GemmPackFn =
    for<'a> fn(n: usize, act: &dyn Fn(usize) -> &'a [u8], count: usize, tile: &mut [u8]);

/// Receives a [`GemmFn`]'s results a tile at a time: `(r0, i0, vals, lanes)`.
pub type GemmOut<'o> = dyn FnMut(usize, usize, &[[f32; 16]], usize) + 'o;

/// One cache line of scratch: GEMM token tiles are stored in these so that every vector load
/// of a tile is aligned to its width (a 32- or 64-byte load from an 8-byte aligned buffer
/// splits over two lines half or all of the time, which costs a second load each).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Line(pub [u8; 64]);

// SAFETY: 64 bytes, no padding, any bit pattern valid.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Line {}

/// The first `bytes` of `v` as bytes, growing it (zero-filled) as needed.
pub(crate) fn line_bytes(v: &mut Vec<Line>, bytes: usize) -> &mut [u8] {
    if v.len() * 64 < bytes {
        v.resize(bytes.div_ceil(64), Line([0; 64]));
    }
    &mut bytemuck::cast_slice_mut::<Line, u8>(v)[..bytes]
}

/// Which instruction-set family the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust, bit-for-bit the ggml generic kernels.
    Scalar,
    /// AVX2 + FMA (+F16C).
    Avx2,
    /// AVX-512 F/BW/VL/DQ with VNNI (`vpdpbusd`, `vpdpwssd`), plus BMI2.
    Avx512,
    /// [`Isa::Avx512`] with the GEMM tiles of Q4_K, Q5_K, Q6_K and Q8_0 on AMX-INT8 (where the
    /// CPU has it and the OS grants the tile registers); every other kernel is AVX-512's.
    Amx,
}

impl Isa {
    /// Whether this CPU can run the family.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("bmi2")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Amx => Isa::Avx512.available() && amx_gemm::available(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every family this CPU can run, best last.
    pub fn all_available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx]
            .into_iter()
            .filter(|i| i.available())
            .collect()
    }

    /// The family whose vector kernels this one runs: AMX only adds GEMM tiles to AVX-512.
    pub fn vector(self) -> Isa {
        match self {
            Isa::Amx => Isa::Avx512,
            other => other,
        }
    }

    fn best() -> Isa {
        *Isa::all_available().last().unwrap_or(&Isa::Scalar)
    }
}

/// The kernel family used by [`vec_dot`] and the matmuls: the best the CPU has, unless the
/// environment variable `GLINT_CPU_KERNEL=scalar|avx2|avx512|amx` asks for another (so tests and
/// benchmarks can cover each path on one machine). Chosen once per process.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let best = Isa::best();
        let Ok(req) = std::env::var("GLINT_CPU_KERNEL") else {
            return best;
        };
        let want = match req.to_ascii_lowercase().as_str() {
            "scalar" => Isa::Scalar,
            "avx2" => Isa::Avx2,
            "avx512" => Isa::Avx512,
            "amx" => Isa::Amx,
            other => {
                tracing::warn!(
                    value = other,
                    "GLINT_CPU_KERNEL not one of scalar|avx2|avx512|amx; using {best:?}"
                );
                return best;
            }
        };
        if want.available() {
            want
        } else {
            tracing::warn!("GLINT_CPU_KERNEL={req} not supported by this CPU; using {best:?}");
            best
        }
    })
}

/// The activation format llama.cpp's x86 CPU backend pairs with weights of type `ty`, or `None`
/// when glint has no dot kernel for `ty`.
pub fn partner_type(ty: GgmlType) -> Option<GgmlType> {
    use GgmlType::*;
    Some(match ty {
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | MXFP4 | NVFP4 | Q1_0 => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S
        | IQ1_M | IQ4_XS | TQ1_0 | TQ2_0 => Q8_K,
        _ => return None,
    })
}

/// The portable reference kernel for `ty` (mirrors `ggml_vec_dot_<ty>_<partner>_generic`).
pub fn scalar_kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        F32 => scalar_float::dot_f32,
        F16 => scalar_float::dot_f16,
        BF16 => scalar_float::dot_bf16,
        Q4_0 => scalar_legacy::dot_q4_0,
        Q4_1 => scalar_legacy::dot_q4_1,
        Q5_0 => scalar_legacy::dot_q5_0,
        Q5_1 => scalar_legacy::dot_q5_1,
        Q8_0 => scalar_legacy::dot_q8_0,
        IQ4_NL => scalar_legacy::dot_iq4_nl,
        MXFP4 => scalar_legacy::dot_mxfp4,
        NVFP4 => scalar_legacy::dot_nvfp4,
        Q1_0 => scalar_legacy::dot_q1_0,
        Q2_K => scalar_k::dot_q2_k,
        Q3_K => scalar_k::dot_q3_k,
        Q4_K => scalar_k::dot_q4_k,
        Q5_K => scalar_k::dot_q5_k,
        Q6_K => scalar_k::dot_q6_k,
        TQ1_0 => scalar_k::dot_tq1_0,
        TQ2_0 => scalar_k::dot_tq2_0,
        IQ2_XXS => scalar_iq::dot_iq2_xxs,
        IQ2_XS => scalar_iq::dot_iq2_xs,
        IQ2_S => scalar_iq::dot_iq2_s,
        IQ3_XXS => scalar_iq::dot_iq3_xxs,
        IQ3_S => scalar_iq::dot_iq3_s,
        IQ1_S => scalar_iq::dot_iq1_s,
        IQ1_M => scalar_iq::dot_iq1_m,
        IQ4_XS => scalar_iq::dot_iq4_xs,
        _ => return None,
    })
}

/// The kernel for `ty` in family `isa`: the SIMD one where that family has one for `ty`, else
/// the scalar one. `None` when `ty` has no dot kernel at all, or `isa` is not available here.
pub fn kernel_for(ty: GgmlType, isa: Isa) -> Option<VecDotFn> {
    if !isa.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let simd = match isa {
            Isa::Scalar => None,
            Isa::Avx2 => avx2::kernel(ty),
            Isa::Avx512 | Isa::Amx => avx512::kernel(ty).or_else(|| avx2::kernel(ty)),
        };
        if simd.is_some() {
            return simd;
        }
    }
    scalar_kernel(ty)
}

/// The multi-row kernel family `isa` has for `ty`, if any; it agrees bit for bit with
/// [`kernel_for`]`(ty, isa)` on every row. `None` means: call the single-row kernel per row.
pub fn rows_kernel_for(ty: GgmlType, isa: Isa) -> Option<VecDotRowsFn> {
    if !isa.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Scalar => None,
            Isa::Avx2 => avx2::rows_kernel(ty),
            // AVX-512's own where it has one (each row the bits of this family's single-row
            // kernel, see `avx512::rows_kernel`); else AVX2's, only where the single-row kernel
            // is AVX2's too.
            Isa::Avx512 | Isa::Amx => avx512::rows_kernel(ty).or_else(|| {
                avx512::kernel(ty)
                    .is_none()
                    .then(|| avx2::rows_kernel(ty))
                    .flatten()
            }),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        None
    }
}

/// The multi-token kernel family `isa` has for `ty`, if any; it agrees bit for bit with
/// [`kernel_for`]`(ty, isa)` on every token. `None` means: call the single kernel per token.
pub fn cols_kernel_for(ty: GgmlType, isa: Isa) -> Option<VecDotColsFn> {
    if !isa.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Scalar => None,
            Isa::Avx2 => avx2::cols_kernel(ty),
            // AVX2's only where AVX-512 falls back to the AVX2 single kernel, so both agree.
            Isa::Avx512 if avx512::kernel(ty).is_none() => avx2::cols_kernel(ty),
            Isa::Avx512 | Isa::Amx => avx512::cols_kernel(ty),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        None
    }
}

/// The GEMM tile family `isa` has for `ty`, if any; it agrees bit for bit with
/// [`kernel_for`]`(ty, isa)` on every (row, token).
pub fn gemm_kernel_for(ty: GgmlType, isa: Isa) -> Option<GemmFn> {
    if !isa.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Amx => amx_gemm::gemm_kernel(ty).or_else(|| avx512_gemm::gemm_kernel(ty)),
            Isa::Avx512 => avx512_gemm::gemm_kernel(ty),
            Isa::Avx2 => avx2_gemm::gemm_kernel(ty),
            Isa::Scalar => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        None
    }
}

/// Sizes the calling thread's GEMM tile scratch for products of up to `n_acts` activations of
/// `n` elements (every format [`isa`] has a tile for), so that calls within those sizes do not
/// allocate. Nothing when the family has no tiles.
pub fn reserve_gemm(n: usize, n_acts: usize) {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        Isa::Amx => {
            amx_gemm::reserve(n, n_acts);
            avx512_gemm::reserve(n, n_acts)
        }
        Isa::Avx512 => avx512_gemm::reserve(n, n_acts),
        Isa::Avx2 => avx2_gemm::reserve(n, n_acts),
        Isa::Scalar => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (n, n_acts);
}

/// The largest [`GemmParts::tile_bytes`] of any type [`isa`] has a tile for, for activations of
/// `n` elements; 0 when the family has no tiles.
pub fn gemm_max_tile_bytes(n: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        Isa::Amx => amx_gemm::max_tile_bytes(n).max(avx512_gemm::max_tile_bytes(n)),
        Isa::Avx512 => avx512_gemm::max_tile_bytes(n),
        Isa::Avx2 => avx2_gemm::max_tile_bytes(n),
        Isa::Scalar => 0,
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = n;
        0
    }
}

/// The GEMM tile [`isa`] selects for `ty`, if it has one.
pub fn gemm_kernel(ty: GgmlType) -> Option<GemmFn> {
    gemm_kernel_for(ty, isa())
}

/// [`gemm_kernel`] in its two halves (see [`GemmParts`]); the same bits.
pub fn gemm_parts(ty: GgmlType) -> Option<GemmParts> {
    #[cfg(target_arch = "x86_64")]
    match isa() {
        Isa::Amx => amx_gemm::gemm_parts(ty).or_else(|| avx512_gemm::gemm_parts(ty)),
        Isa::Avx512 => avx512_gemm::gemm_parts(ty),
        Isa::Avx2 => avx2_gemm::gemm_parts(ty),
        Isa::Scalar => None,
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        None
    }
}

/// The multi-token kernel [`isa`] selects for `ty`, if it has one.
pub fn cols_kernel(ty: GgmlType) -> Option<VecDotColsFn> {
    cols_kernel_for(ty, isa())
}

/// The multi-row kernel [`isa`] selects for `ty`, if it has one.
pub fn rows_kernel(ty: GgmlType) -> Option<VecDotRowsFn> {
    rows_kernel_for(ty, isa())
}

/// Whether family `isa` has a dedicated SIMD kernel for `ty` (else it falls back to scalar).
pub fn has_simd_kernel(ty: GgmlType, isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Scalar => false,
            Isa::Avx2 => avx2::kernel(ty).is_some(),
            Isa::Avx512 | Isa::Amx => avx512::kernel(ty).is_some() || avx2::kernel(ty).is_some(),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ty, isa);
        false
    }
}

/// The kernel [`isa`] selects for `ty`.
pub fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    kernel_for(ty, isa())
}

/// Checks that `w` and `a` hold exactly `n` elements of `ty` and of its partner.
pub(crate) fn check_dot_args(
    ty: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
) -> Result<GgmlType, QuantError> {
    let partner = partner_type(ty).ok_or(QuantError::Unsupported { ty, op: "vec_dot" })?;
    let blk = ty.block_size();
    if !n.is_multiple_of(blk) || !n.is_multiple_of(partner.block_size()) {
        return Err(QuantError::NotBlockAligned {
            ty,
            n,
            block: blk.max(partner.block_size()),
        });
    }
    let w_len = n / blk * ty.type_size();
    if w.len() != w_len {
        return Err(QuantError::BadLength {
            ty,
            what: "weight row bytes",
            expected: w_len,
            found: w.len(),
        });
    }
    let a_len = n / partner.block_size() * partner.type_size();
    if a.len() != a_len {
        return Err(QuantError::BadLength {
            ty: partner,
            what: "activation row bytes",
            expected: a_len,
            found: a.len(),
        });
    }
    Ok(partner)
}

/// Dot product of `n` weights of type `ty` with `n` activations already quantized to
/// [`partner_type`]`(ty)` (see [`quantize_activation`]), with the kernel family [`isa`] picks.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
    vec_dot_with(isa(), ty, n, w, a)
}

/// [`vec_dot`] with an explicit kernel family (falls back to scalar for types the family lacks).
pub fn vec_dot_with(
    isa: Isa,
    ty: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
) -> Result<f32, QuantError> {
    check_dot_args(ty, n, w, a)?;
    let k = kernel_for(ty, isa).ok_or(QuantError::Unsupported {
        ty,
        op: "vec_dot on this CPU",
    })?;
    Ok(k(n, w, a))
}

/// Defines one run-time-dispatched kernel per type (the [`kernel`] choice, looked up once) and
/// the const lookup the type table uses to fill its `vec_dot` column.
macro_rules! dispatched {
    ($($name:ident => $ty:ident),* $(,)?) => {
        mod auto {
            use super::*;
            $(
                pub fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                    static K: OnceLock<VecDotFn> = OnceLock::new();
                    let k = K.get_or_init(|| kernel(GgmlType::$ty).unwrap_or(|_, _, _| f32::NAN));
                    k(n, w, a)
                }
            )*
        }

        /// The `vec_dot` entry of the type table: the kernel [`isa`] selects for `ty`, or `None`
        /// if `ty` has no dot product. Unchecked: `w` and `a` must hold exactly `n` elements of
        /// the type and of its [`partner_type`] (use [`vec_dot`] for a checked call).
        pub const fn table_kernel(ty: GgmlType) -> Option<VecDotFn> {
            match ty {
                $(GgmlType::$ty => Some(auto::$name as VecDotFn),)*
                _ => None,
            }
        }
    };
}

dispatched! {
    f32_ => F32, f16_ => F16, bf16_ => BF16,
    q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0,
    iq4_nl => IQ4_NL, mxfp4 => MXFP4, nvfp4 => NVFP4, q1_0 => Q1_0,
    q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
    tq1_0 => TQ1_0, tq2_0 => TQ2_0,
    iq2_xxs => IQ2_XXS, iq2_xs => IQ2_XS, iq2_s => IQ2_S, iq3_xxs => IQ3_XXS, iq3_s => IQ3_S,
    iq1_s => IQ1_S, iq1_m => IQ1_M, iq4_xs => IQ4_XS,
}
