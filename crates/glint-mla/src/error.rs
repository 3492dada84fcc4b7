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
    /// Not enough free blocks: the caller can wait for a sequence to finish or preempt one.
    #[error("KV pool exhausted: {needed} blocks needed, {free} of {total} free")]
    PoolExhausted {
        needed: usize,
        free: usize,
        total: usize,
    },
    #[error("bad KV pool size: {0}")]
    BadPool(String),
    #[error("bad step plan: {0}")]
    Plan(String),
    #[error("step plan writes position {needed} but only {reserved} positions are reserved")]
    NotReserved { needed: usize, reserved: usize },
    #[error("step plan has {n} {what}, the step was sized for {limit}")]
    PlanTooLarge {
        what: &'static str,
        n: usize,
        limit: usize,
    },
    #[error("block table names block {block}, the pool has {n_blocks}")]
    BlockOutOfPool { block: u32, n_blocks: usize },
    /// A block table (a stale copy of a released sequence) names a free block.
    #[error("block {block} is not owned by any sequence (released, or never allocated)")]
    BlockNotOwned { block: u32 },
    /// Two tokens of one step would write the same cache row.
    #[error("step plan writes pool row {slot} twice (sequences {a} and {b} share block {block})")]
    SlotConflict {
        slot: u32,
        block: u32,
        a: usize,
        b: usize,
    },
    #[error("scratch for {what} needs {needed} floats, sized for {capacity}")]
    Scratch {
        what: &'static str,
        needed: usize,
        capacity: usize,
    },
}

pub type Result<T> = std::result::Result<T, MlaError>;
