//! Flags shared by the commands that run the model: the KV cache type and the micro-batch.

use glm5_model::{CacheType, CacheTypes, SessionOptions};

#[derive(clap::Args, Debug, Clone)]
pub struct SessionArgs {
    /// KV cache element type: f32 (exact, the default), f16, bf16 or fp8 (E4M3 with a per-row
    /// scale); docs/cache-types.md measures each. Indexer keys use f16 with a bf16 cache.
    #[arg(long, default_value = "f32", value_parser = parse_cache_type)]
    pub cache_type: CacheType,
    /// Tokens per forward step: a prompt runs in chunks of this size, bounding prefill memory
    /// (llama.cpp's `-ub`).
    #[arg(long, default_value_t = SessionOptions::DEFAULT_UBATCH, value_parser = parse_ubatch)]
    pub ubatch: usize,
}

impl SessionArgs {
    pub fn options(&self, ctx_len: usize) -> SessionOptions {
        let index = match self.cache_type {
            CacheType::Bf16 => CacheType::F16,
            t => t,
        };
        SessionOptions {
            ubatch: self.ubatch,
            cache: CacheTypes {
                latent: self.cache_type,
                index,
            },
            ..SessionOptions::new(ctx_len)
        }
    }
}

fn parse_cache_type(s: &str) -> Result<CacheType, String> {
    s.parse()
}

fn parse_ubatch(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err("0 is not allowed: a step needs at least 1 token".into()),
        Err(e) => Err(format!("`{s}` is not a whole number: {e}")),
    }
}
