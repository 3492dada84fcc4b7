//! Device buffers. Each carries its logical length: cudarc cannot allocate zero bytes, and
//! buffers are reused across steps with fewer elements than they hold.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaSlice;
use glint_core::{CacheType, GgmlType};

pub struct CudaBuf {
    data: CudaSlice<f32>,
    pub(crate) len: usize,
    /// A number no other buffer state has had: drawn afresh whenever the buffer may be
    /// written (every write goes through `data_mut`), so a quantized copy of the activation
    /// tagged with it is known to still match (crates/glint-cuda/src/quant.rs, `ActSlots`).
    version: u64,
}

pub struct CudaIds {
    pub(crate) data: CudaSlice<u32>,
    pub(crate) len: usize,
}

fn fresh_version() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl CudaBuf {
    pub(crate) fn new(data: CudaSlice<f32>, len: usize) -> Self {
        Self {
            data,
            len,
            version: fresh_version(),
        }
    }
    pub(crate) fn data(&self) -> &CudaSlice<f32> {
        &self.data
    }
    /// The memory, for a kernel or copy that writes it.
    pub(crate) fn data_mut(&mut self) -> &mut CudaSlice<f32> {
        self.version = fresh_version();
        &mut self.data
    }
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
    /// [`Self::data_mut`] with the state the write makes, for a kernel that also leaves a
    /// quantized copy of what it writes.
    pub(crate) fn data_mut_versioned(&mut self) -> (u64, &mut CudaSlice<f32>) {
        self.version = fresh_version();
        (self.version, &mut self.data)
    }
}

/// The device memory behind a buffer, for libraries that issue their own work on the
/// backend's stream ([`crate::CudaBackend::stream`]): NCCL collectives in glint-tp.
impl CudaBuf {
    pub fn slice(&self) -> &CudaSlice<f32> {
        &self.data
    }
    pub fn slice_mut(&mut self) -> &mut CudaSlice<f32> {
        self.data_mut()
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
