//! Device buffers. Each carries its logical length: cudarc cannot allocate zero bytes, and
//! buffers are reused across steps with fewer elements than they hold.

use cudarc::driver::CudaSlice;
use glint_core::{CacheType, GgmlType};

pub struct CudaBuf {
    pub(crate) data: CudaSlice<f32>,
    pub(crate) len: usize,
}

pub struct CudaIds {
    pub(crate) data: CudaSlice<u32>,
    pub(crate) len: usize,
}

/// The device memory behind a buffer, for libraries that issue their own work on the
/// backend's stream ([`crate::CudaBackend::stream`]): NCCL collectives in glint-tp.
impl CudaBuf {
    pub fn slice(&self) -> &CudaSlice<f32> {
        &self.data
    }
    pub fn slice_mut(&mut self) -> &mut CudaSlice<f32> {
        &mut self.data
    }
}

/// A weight copied to the device as its GGUF bytes (quantized blocks stay quantized).
pub struct CudaWeight {
    pub(crate) data: CudaSlice<u8>,
    pub(crate) name: String,
    pub(crate) ty: GgmlType,
    /// GGUF order: `[cols, rows, slices]` (missing dims are 1).
    pub(crate) dims: [usize; 3],
}

impl CudaWeight {
    pub fn cols(&self) -> usize {
        self.dims[0]
    }
    pub fn rows(&self) -> usize {
        self.dims[1]
    }
    pub fn slices(&self) -> usize {
        self.dims[2]
    }
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A paged cache pool: `rows × dim` codes of `ty`, then (fp8) one f32 scale per row at a
/// 16-byte aligned offset (the layout `kernels/common.cuh`'s `cache_load` reads).
pub struct CudaCache {
    pub(crate) data: CudaSlice<u8>,
    pub(crate) rows: usize,
    pub(crate) dim: usize,
    pub(crate) ty: CacheType,
}

impl CudaCache {
    pub(crate) fn bytes(rows: usize, dim: usize, ty: CacheType) -> Option<usize> {
        let n = rows.checked_mul(dim)?;
        Some(match ty {
            CacheType::F32 => n.checked_mul(4)?,
            CacheType::F16 | CacheType::Bf16 => n.checked_mul(2)?,
            CacheType::Fp8 | CacheType::Q8 => n
                .div_ceil(16)
                .checked_mul(16)?
                .checked_add(rows.checked_mul(4)?)?,
        })
    }
    /// The type code `kernels/common.cuh` uses (`CACHE_F32` ...).
    pub(crate) fn code(&self) -> i32 {
        CacheType::ALL
            .iter()
            .position(|&t| t == self.ty)
            .unwrap_or(0) as i32
    }
    pub fn cache_type(&self) -> CacheType {
        self.ty
    }
}
