//! Flags shared by the commands that run the model: the KV cache type and the micro-batch.

use glm5_model::{CacheType, CacheTypes, SessionOptions};

#[derive(clap::Args, Debug, Clone)]
pub struct SessionArgs {
    /// KV cache element type: f32 (exact, the default), f16, bf16, fp8 (E4M3 with a per-row
    /// scale) or q8 (int8 with a per-row scale); docs/cache-types.md measures each. Indexer
    /// keys use f16 with a bf16 cache.
    #[arg(long, default_value = "f32", value_parser = parse_cache_type)]
    pub cache_type: CacheType,
    /// Element type of the indexer's keys alone, overriding the one `--cache-type` implies:
    /// f32, f16, fp8 or q8. q8 turns the CPU's scan over every cached key into integer
    /// multiply-adds against the query in 6-bit codes (about three times f32 keys' speed at
    /// long context, at the E4M3 precision DeepSeek's indexer is served at; docs/cache-types.md).
    #[arg(long, value_parser = parse_index_cache_type)]
    pub cache_type_index: Option<CacheType>,
    /// Tokens per forward step: a prompt runs in chunks of this size, bounding prefill memory
    /// (llama.cpp's `-ub`).
    #[arg(long, default_value_t = SessionOptions::DEFAULT_UBATCH, value_parser = parse_ubatch)]
    pub ubatch: usize,
    /// Where the model runs: `cpu`, or `cuda` / `cuda:N` for GPU N (needs a glint built with
    /// `--features cuda` and an NVIDIA driver).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub device: Device,
}

/// A device named by `--device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

pub(crate) fn parse_device(s: &str) -> Result<Device, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("cpu") {
        return Ok(Device::Cpu);
    }
    let rest = s
        .strip_prefix("cuda")
        .ok_or_else(|| format!("unknown device `{s}` (expected cpu, cuda or cuda:N)"))?;
    if rest.is_empty() {
        return Ok(Device::Cuda(0));
    }
    rest.strip_prefix(':')
        .and_then(|n| n.parse::<usize>().ok())
        .map(Device::Cuda)
        .ok_or_else(|| format!("`{s}`: expected cuda:N with N a GPU index, e.g. cuda:0"))
}

/// `--device cuda` in a glint built without the `cuda` feature.
#[cfg_attr(feature = "cuda", allow(dead_code))]
#[derive(Debug, thiserror::Error)]
#[error("--device cuda:{0}: this glint was built without CUDA support (rebuild with `cargo build --release -p glint-cli --features cuda`)")]
pub struct NoCuda(pub usize);

/// Runs `$body` with `$be` bound to the backend `$device` names; `$body` instantiates the
/// generic code for that backend, so every command is written once against `Backend`.
macro_rules! with_backend {
    ($device:expr, $be:ident => $body:expr) => {
        match $device {
            $crate::cmd::session::Device::Cpu => {
                let $be = glm5_model::CpuBackend::new();
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::cmd::session::Device::Cuda(n) => {
                let $be = glint_cuda::CudaBackend::new(n)?;
                $body
            }
            #[cfg(not(feature = "cuda"))]
            $crate::cmd::session::Device::Cuda(n) => Err($crate::cmd::session::NoCuda(n).into()),
        }
    };
}
pub(crate) use with_backend;

impl SessionArgs {
    pub fn options(&self, ctx_len: usize) -> SessionOptions {
        SessionOptions {
            ubatch: self.ubatch,
            cache: cache_types(self.cache_type, self.cache_type_index),
            ..SessionOptions::new(ctx_len)
        }
    }
}

/// The pool's element types from `--cache-type` and `--cache-type-index`: the indexer keys
/// take the latent type unless given, except f16 for a bf16 cache.
pub(crate) fn cache_types(latent: CacheType, index: Option<CacheType>) -> CacheTypes {
    let index = index.unwrap_or(match latent {
        CacheType::Bf16 => CacheType::F16,
        t => t,
    });
    CacheTypes { latent, index }
}

pub(crate) fn parse_cache_type(s: &str) -> Result<CacheType, String> {
    s.parse()
}

pub(crate) fn parse_index_cache_type(s: &str) -> Result<CacheType, String> {
    match s.parse()? {
        CacheType::Bf16 => Err(
            "indexer keys can be cached as f32, f16, fp8 or q8, not bf16 \
             (its 8-bit mantissa flips the indexer's near-ties)"
                .into(),
        ),
        t => Ok(t),
    }
}

fn parse_ubatch(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err("0 is not allowed: a step needs at least 1 token".into()),
        Err(e) => Err(format!("`{s}` is not a whole number: {e}")),
    }
}
