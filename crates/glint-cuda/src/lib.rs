//! The CUDA backend of glint: a second implementation of [`glint_core::Backend`], so the one
//! GLM-5 model runs on NVIDIA GPUs unchanged.
//!
//! The CUDA libraries (driver, NVRTC, cuBLAS) are loaded at run time, so this crate builds on
//! any machine; [`CudaBackend::new`] on a machine without them returns an error saying which
//! one is missing, never a panic. Kernels are `kernels/*.cu`, compiled by NVRTC for the GPU
//! found and cached on disk ([`compile`]). Everything runs on one stream in issue order, except
//! the two branches of `Backend::concurrently` (a second stream from a fork to a join), so a
//! step is a short series of launch chains that a CUDA graph can record.

mod attention;
mod backend;
mod buffers;
pub mod compile;
mod device;
mod elementwise;
mod fork;
mod gemm;
mod launch;
mod moe;
mod quant;
pub mod quant_tables;
mod smem;
mod staging;

pub use backend::CudaBackend;
pub use buffers::{CudaBuf, CudaCache, CudaIds, CudaWeight};
pub use device::{device_count, DeviceInfo};
