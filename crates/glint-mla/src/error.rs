//! Errors of the attention layer.

use glint_core::CoreError;

#[derive(Debug, thiserror::Error)]
pub enum MlaError {
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The batch would write past the end of the KV cache.
    #[error("context overflow: {needed} tokens needed, the KV cache holds {ctx_len}")]
    ContextOverflow { needed: usize, ctx_len: usize },
    /// The batch does not continue the cache (positions must be contiguous).
    #[error("batch starts at position {start} but the cache holds {len} tokens")]
    Gap { start: usize, len: usize },
}

pub type Result<T> = std::result::Result<T, MlaError>;
