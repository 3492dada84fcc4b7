//! glint: run GLM-5 from GGUF files.
//!
//! This facade re-exports the workspace crates so an application can depend on one package;
//! each crate is also usable on its own.

pub use glint_core as core;
/// The CUDA backend (feature `cuda`): `glint::cuda::CudaBackend::new(0)`.
#[cfg(feature = "cuda")]
pub use glint_cuda as cuda;
pub use glint_engine as engine;
pub use glint_gguf as gguf;
pub use glint_mla as mla;
pub use glint_moe as moe;
pub use glint_quant as quant;
pub use glm5_model as model;
