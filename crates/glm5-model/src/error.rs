//! Errors of loading and running the model. Each names the tensor, key or limit at fault.

use glint_core::{CoreError, GgmlType};
use glint_gguf::GgufError;
use glint_mla::MlaError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("unknown architecture '{arch}' (supported: glm-dsa, deepseek2)")]
    UnknownArch { arch: String },
    #[error("bad model config: key '{key}': {msg}")]
    Config { key: String, msg: String },
    #[error("missing tensor '{name}'")]
    MissingTensor { name: String },
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor '{name}': type {ty} is not supported by the {backend} backend")]
    UnsupportedType {
        name: String,
        ty: GgmlType,
        backend: &'static str,
    },
    #[error("prompt past the context: {needed} tokens needed, context length is {ctx_len}")]
    ContextOverflow { needed: usize, ctx_len: usize },
    #[error("start position {start} is past the cached {cached} tokens")]
    Gap { start: usize, cached: usize },
    #[error("token id {token} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { token: u32, n_vocab: usize },
    #[error("empty token batch")]
    EmptyBatch,
    /// Checked before any weight is uploaded, so a too-large model fails in a second, not
    /// after minutes of copying.
    #[error("the model's weights need {need} bytes ({need_gib:.1} GiB) on {device} but only {free} bytes ({free_gib:.1} GiB) are free")]
    DoesNotFit {
        device: &'static str,
        need: u64,
        need_gib: f64,
        free: u64,
        free_gib: f64,
    },
    /// A tensor that cannot be split over the ranks of a tensor-parallel run.
    #[error("tensor parallelism: {0}")]
    Shard(#[from] glint_tp::ShardError),
    /// A communicator that does not match the shard it serves.
    #[error("tensor parallelism: {0}")]
    Tp(String),
    /// The cache pool or the step plan: pool exhausted, plan too large, bad block table.
    #[error(transparent)]
    Mla(MlaError),
}

impl From<MlaError> for ModelError {
    fn from(e: MlaError) -> Self {
        match e {
            MlaError::Core(c) => ModelError::Core(c),
            MlaError::ContextOverflow { needed, ctx_len } => {
                ModelError::ContextOverflow { needed, ctx_len }
            }
            MlaError::Gap { start, len } => ModelError::Gap { start, cached: len },
            other => ModelError::Mla(other),
        }
    }
}

pub type Result<T> = std::result::Result<T, ModelError>;
