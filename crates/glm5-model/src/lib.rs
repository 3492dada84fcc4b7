//! GLM-5 from GGUF files: configuration, forward pass, tokenizer, chat template, samplers and
//! the generation loop.

pub mod chat;
pub mod config;
pub mod error;
pub mod generate;
pub mod model;
pub mod sampler;
pub mod tokenizer;
pub mod weights;

pub use config::{Arch, Config, IndexerConfig};
pub use error::{ModelError, Result};
pub use glint_core::CacheType;
pub use glint_core::{Backend, CpuBackend};
pub use glint_mla::{BatchPlan, CacheTypes, KvPool, Logits, SeqCache, StepLimits};
pub use model::{Glm5, Model, SessionOptions, StepState, Tap, TapFn};
