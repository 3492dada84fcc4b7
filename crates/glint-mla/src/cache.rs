//! The latent KV cache: per layer, one `kv_lora + rope` row per token (normalised latent and
//! rotated shared rope key; V is a view of the latent part) and, for DSA layers, one indexer key
//! row per token. Buffers are allocated once for the whole context so decode never allocates.

use glint_core::Backend;

use crate::error::{MlaError, Result};

pub struct LayerCache<B: Backend> {
    /// `[ctx_len × (kv_lora + rope)]`.
    pub latent: B::Buf,
    /// `[ctx_len × indexer head_dim]` for layers with an indexer.
    pub index_k: Option<B::Buf>,
}

pub struct MlaCache<B: Backend> {
    pub layers: Vec<LayerCache<B>>,
    len: usize,
    ctx_len: usize,
}

impl<B: Backend> MlaCache<B> {
    /// `index_dims[l]` is the indexer key width of layer `l` (None for layers without indexer).
    pub fn new(
        backend: &B,
        ctx_len: usize,
        row: usize,
        index_dims: &[Option<usize>],
    ) -> Result<Self> {
        let size = |w: usize| {
            ctx_len.checked_mul(w).ok_or(MlaError::ContextOverflow {
                needed: ctx_len,
                ctx_len: usize::MAX / w.max(1),
            })
        };
        let layers = index_dims
            .iter()
            .map(|d| {
                Ok(LayerCache {
                    latent: backend.alloc(size(row)?)?,
                    index_k: match d {
                        Some(d) => Some(backend.alloc(size(*d)?)?),
                        None => None,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            len: 0,
            ctx_len,
        })
    }

    /// Tokens currently cached.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn ctx_len(&self) -> usize {
        self.ctx_len
    }
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Checks that `n` tokens at `start` fit and continue the cache (a `start` below the current
    /// length rewinds: later rows are simply overwritten). Call before running the layers.
    pub fn check_append(&self, start: usize, n: usize) -> Result<()> {
        if start > self.len {
            return Err(MlaError::Gap {
                start,
                len: self.len,
            });
        }
        if start + n > self.ctx_len {
            return Err(MlaError::ContextOverflow {
                needed: start + n,
                ctx_len: self.ctx_len,
            });
        }
        Ok(())
    }

    /// Records that rows `..start + n` are valid (after every layer wrote them).
    pub fn commit(&mut self, start: usize, n: usize) {
        self.len = start + n;
    }
}
