//! Multi-head latent attention (MLA) of the DeepSeek-V3 / GLM-5 family and the DeepSeek sparse
//! attention (DSA) lightning indexer, written against `glint_core::Backend`.
//!
//! `layer::forward` is the absorbed form used for prefill and decode; `naive` is the decompressed
//! MHA form kept as a reference. The latent cache lives in `cache`.

pub mod cache;
pub mod error;
pub mod layer;
pub mod naive;

pub use cache::{LayerCache, MlaCache};
pub use error::{MlaError, Result};
pub use layer::{
    ensure, forward, Batch, IndexerDims, IndexerWeights, MlaDims, MlaScratch, MlaWeights, QProj,
    Rope,
};
