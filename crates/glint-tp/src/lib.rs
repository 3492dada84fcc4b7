//! Tensor and expert parallelism for glint.
//!
//! * [`Communicator`]: the collectives a tensor-parallel step needs (all-reduce sum,
//!   all-gather, reduce-scatter, broadcast, barrier), acting on a backend's own buffers and
//!   issued in the backend's order of work (for CUDA: its stream, so a recorded step captures
//!   them into the graph).
//! * [`LocalComm::group`]: an in-process communicator, one thread per rank (CPU tensor parallelism and
//!   the tests). It reduces in rank order, so every rank gets bit-identical sums and a run is
//!   reproducible.
//! * `NcclComm` (feature `cuda`): NCCL through cudarc on the CUDA backend's stream.
//! * [`Rendezvous`]: where the processes of a multi-node run meet (`--master HOST:PORT`),
//!   check they run the same world size on the same file, and receive the NCCL unique id.
//! * [`split`]: cutting a GGUF tensor into one rank's shard along a declared axis (never by
//!   file order), with block boundaries checked for quantized rows.

mod local;
#[cfg(feature = "cuda")]
mod nccl;
pub mod rendezvous;
pub mod split;

pub use local::LocalComm;
#[cfg(feature = "cuda")]
pub use nccl::{NcclComm, NcclId};
pub use rendezvous::{header_fingerprint, Rendezvous, RendezvousError};
pub use split::{cut, Cut, ShardError, Split};

use glint_core::{Backend, Result};

/// Collectives over the ranks of one tensor-parallel group, on buffers of backend `B`. Every
/// rank calls the same collectives in the same order with the same sizes; `n` counts floats
/// (the prefix of each buffer an op reads or writes, as for every backend op).
pub trait Communicator<B: Backend>: Send + Sync {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Whether the collectives may be recorded inside [`Backend::run_recorded`] (NCCL on the
    /// backend's stream: yes; a communicator that stages through host memory: no, and a step
    /// using it runs eagerly).
    fn recordable(&self) -> bool;
    /// `buf[i] ← Σ_r buf_r[i]` for `i < n` on every rank.
    fn all_reduce_sum(&self, be: &B, buf: &mut B::Buf, n: usize) -> Result<()>;
    /// `dst[r·n + i] ← src_r[i]` for `i < n` and every rank `r`, on every rank.
    fn all_gather(&self, be: &B, src: &B::Buf, n: usize, dst: &mut B::Buf) -> Result<()>;
    /// `dst[i] ← Σ_r src_r[rank·n + i]` for `i < n`: `src` holds `world_size · n` floats.
    fn reduce_scatter_sum(&self, be: &B, src: &B::Buf, n: usize, dst: &mut B::Buf) -> Result<()>;
    /// `buf[i] ← buf_root[i]` for `i < n` on every rank.
    fn broadcast(&self, be: &B, buf: &mut B::Buf, n: usize, root: usize) -> Result<()>;
    /// Returns once every rank has called it (and, on a device, every earlier collective of
    /// this rank has completed).
    fn barrier(&self, be: &B) -> Result<()>;
}

/// The error every communicator reports a failed collective with.
pub(crate) fn comm_err(op: &'static str, msg: impl Into<String>) -> glint_core::CoreError {
    glint_core::CoreError::Device {
        op,
        msg: msg.into(),
    }
}
