//! Multi-head latent attention (MLA) of the DeepSeek-V3 / GLM-5 family and the DeepSeek sparse
//! attention (DSA) lightning indexer, written against `glint_core::Backend`.
//!
//! `layer::forward` is the absorbed form used for prefill and decode; `kv_b` splits a legacy fused
//! `attn_kv_b` by slot. The paged latent cache lives in
//! `cache`, and `plan` describes one batched step.

pub mod cache;
pub mod error;
pub mod kv_b;
pub mod layer;
pub mod plan;

pub use cache::{BlockAllocator, CacheTypes, KvPool, PoolLayer, SeqCache};
pub use error::{MlaError, Result};
pub use kv_b::split_kv_b;
pub use layer::{
    forward, IndexerDims, IndexerWeights, MlaDims, MlaScratch, MlaWeights, QProj, Rope,
};
pub use plan::{BatchPlan, Logits, StepInputs, StepLimits};
