//! GLM-5 from GGUF files: configuration, weight binding and the batched forward step. The
//! application layer (tokenizer, chat template, samplers, generation loop) is `glint-engine`.

pub mod config;
pub mod error;
pub mod model;
pub mod shard;
pub mod synth;
pub mod weights;

pub use config::{Arch, Config, IndexerConfig};
pub use error::{ModelError, Result};
pub use glint_core::CacheType;
pub use glint_core::{Backend, CpuBackend};
pub use glint_mla::{BatchPlan, CacheTypes, KvPool, Logits, SeqCache, StepLimits};
pub use model::{Glm5, Model, SessionOptions, StepState, Tap, TapFn};
pub use shard::Shard;
