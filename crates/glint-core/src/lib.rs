//! The backend abstraction of glint: device buffers plus the ~25 coarse ops the MLA + MoE
//! models need, and the CPU implementation that doubles as the reference for other backends.

pub mod backend;
pub mod cache_type;
pub mod conformance;
pub mod cpu;
pub mod error;
pub mod params;
pub mod rope;

pub use backend::{rope_then_copy, unique_id, Backend, Branch, Branches, Pages};
pub use cache_type::CacheType;
pub use cpu::{CpuBackend, CpuWeight};
pub use error::{CoreError, Result};
pub use glint_gguf::GgmlType;
pub use params::{
    AttnParams, Gating, IndexerParams, RopeMode, RopeParams, RouterParams, Rows, StepSizes,
};
