//! `--tp N [--ep]` on `generate` and `logits`. Every rank holds its shard of the weights
//! (glm5_model::shard) and meets the others at the two all-reduces of every layer and the
//! all-gather of the logits, so every rank ends a step with the same logits: every rank runs
//! the same command loop (same sampler, same seed) and stays in step without sending tokens;
//! only rank 0 prints or writes.
//!
//! * CPU: N rank threads of this process, through the in-process communicator.
//! * `--device cuda:D` (feature `cuda`): N rank threads driving GPUs D..D+N of this node,
//!   through NCCL (`ncclCommInitAll`): one process per node.
//! * `--device cuda:D --rank R --master HOST:PORT`: this process is rank R (GPU D) of a run
//!   whose processes meet at HOST:PORT (glint_tp::Rendezvous: world size and model file are
//!   checked, rank 0's NCCL id is handed out), for ranks on several machines.

use std::sync::Arc;
use std::time::Duration;

use glint_gguf::Gguf;
use glint_tp::{Communicator, LocalComm};
use glm5_model::{Backend, CpuBackend, Glm5, Model, SessionOptions};

use super::session::Device;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(clap::Args, Debug, Clone)]
pub struct TpArgs {
    /// Tensor parallelism over N ranks: attention split by heads, FFN and experts by their
    /// hidden dim, the output head by vocabulary (CPU: threads of this process; CUDA: GPUs).
    #[arg(long, default_value_t = 1, value_parser = parse_tp)]
    pub tp: usize,
    /// With --tp: split the routed experts whole across the ranks (expert parallelism)
    /// instead of each expert's hidden dim.
    #[arg(long)]
    pub ep: bool,
    /// With --master: this process's rank (0 listens at the master address).
    #[arg(long, requires = "master")]
    pub rank: Option<usize>,
    /// HOST:PORT where the processes of a multi-process run meet (needs --device cuda).
    #[arg(long, requires = "rank")]
    pub master: Option<String>,
    /// Seconds a process waits at the rendezvous for the others.
    #[arg(long, default_value_t = 300.0, value_parser = super::values::finite)]
    pub rdzv_timeout: f32,
}

pub(super) fn parse_tp(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is outside the allowed range 1..=64")),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TpCliError {
    #[error("--master: processes meet to share an NCCL id, which needs --device cuda (on the CPU, --tp {0} runs rank threads in this process)")]
    MasterNeedsCuda(usize),
    #[error("--rank {rank} is outside the allowed range 0..{tp} (--tp {tp})")]
    Rank { rank: usize, tp: usize },
    #[error("--ep needs --tp 2 or more")]
    EpAlone,
    #[error("--rdzv-timeout {0}: must be positive")]
    Timeout(f32),
}

/// A collective waits this long for the other ranks before failing (they run the same work,
/// so only a failed rank makes one wait long).
const RANK_TIMEOUT: Duration = Duration::from_secs(600);

/// What a command runs on each rank, written once for every backend.
pub trait RankBody<T>: Sync {
    fn run<B: Backend>(&self, rank: usize, model: Glm5<'_, B>) -> Result<T, BoxError>;
}

impl TpArgs {
    /// Whether the command runs as ranks (`--tp` above 1 or `--master`); refuses what it
    /// cannot do before anything loads.
    pub fn active(&self, device: Device) -> Result<bool, TpCliError> {
        if let Some(rank) = self.rank {
            if device == Device::Cpu {
                return Err(TpCliError::MasterNeedsCuda(self.tp));
            }
            if rank >= self.tp {
                return Err(TpCliError::Rank { rank, tp: self.tp });
            }
            if self.rdzv_timeout.is_nan() || self.rdzv_timeout <= 0.0 {
                return Err(TpCliError::Timeout(self.rdzv_timeout));
            }
            return Ok(true);
        }
        if self.tp <= 1 {
            return if self.ep {
                Err(TpCliError::EpAlone)
            } else {
                Ok(false)
            };
        }
        Ok(true)
    }
}

/// Runs `body` on the ranks `tp` and `device` describe; returns `(rank, result)` of rank 0
/// (ranks in this process) or of this process's rank (`--master`). When a rank fails, the
/// others are woken with an error; the error returned is the failing rank's own.
pub fn run_ranks<T: Send>(
    gguf: &Gguf,
    tp: &TpArgs,
    device: Device,
    opts: SessionOptions,
    body: &impl RankBody<T>,
) -> Result<(usize, T), BoxError> {
    match device {
        Device::Cpu => {
            let comms = LocalComm::group(tp.tp, RANK_TIMEOUT);
            let ranks = comms
                .into_iter()
                .map(|c| {
                    (
                        CpuBackend::new(),
                        Arc::new(c) as Arc<dyn Communicator<CpuBackend>>,
                    )
                })
                .collect();
            threads(gguf, tp.ep, opts, ranks, body)
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(first) => cuda::run(gguf, tp, first, opts, body),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) => Err(super::session::NoCuda(n).into()),
    }
}

/// One thread per `(backend, communicator)`, each loading its shard and running `body`.
fn threads<B: Backend + 'static, T: Send>(
    gguf: &Gguf,
    ep: bool,
    opts: SessionOptions,
    ranks: Vec<(B, Arc<dyn Communicator<B>>)>,
    body: &impl RankBody<T>,
) -> Result<(usize, T), BoxError> {
    let results: Vec<Result<T, BoxError>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .enumerate()
            .map(|(rank, (be, comm))| {
                s.spawn(move || {
                    let model = Model::load_tp(gguf, be, comm, ep)?;
                    body.run(rank, Glm5::new(model, opts)?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a rank thread panicked".into()))
            })
            .collect()
    });
    let mut results = results.into_iter();
    match results.next().expect("at least one rank") {
        Ok(v) => Ok((0, v)),
        Err(e0) => {
            let secondary = |e: &BoxError| {
                let m = e.to_string();
                m.contains("group aborted") || m.contains("left the group")
            };
            if !secondary(&e0) {
                return Err(e0);
            }
            Err(results
                .filter_map(Result::err)
                .find(|e| !secondary(e))
                .unwrap_or(e0))
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use glint_cuda::CudaBackend;
    use glint_tp::{header_fingerprint, NcclComm, Rendezvous};

    pub fn run<T: Send>(
        gguf: &Gguf,
        tp: &TpArgs,
        first: usize,
        opts: SessionOptions,
        body: &impl RankBody<T>,
    ) -> Result<(usize, T), BoxError> {
        let (Some(rank), Some(master)) = (tp.rank, tp.master.as_ref()) else {
            // Every GPU of this process one rank (ncclCommInitAll).
            let bes = (first..first + tp.tp)
                .map(CudaBackend::new)
                .collect::<Result<Vec<_>, _>>()?;
            let comms = NcclComm::for_devices(&bes)?;
            let ranks = bes
                .into_iter()
                .zip(comms)
                .map(|(b, c)| (b, Arc::new(c) as Arc<dyn Communicator<CudaBackend>>))
                .collect();
            return threads(gguf, tp.ep, opts, ranks, body);
        };
        // This process is one rank: meet the others, then NCCL over the id rank 0 made.
        let be = CudaBackend::new(first)?;
        let rdzv = Rendezvous {
            master: master.clone(),
            rank,
            world: tp.tp,
            timeout: Duration::from_secs_f32(tp.rdzv_timeout),
        };
        let bytes = rdzv.join(header_fingerprint(gguf), || {
            NcclComm::unique_id()
                .map(|id| id.iter().map(|&c| c as u8).collect())
                .map_err(|e| e.to_string())
        })?;
        if bytes.len() != 128 {
            return Err(format!(
                "rendezvous: rank 0 sent {} bytes, an NCCL id is 128",
                bytes.len()
            )
            .into());
        }
        let id: glint_tp::NcclId = std::array::from_fn(|i| bytes[i] as _);
        let comm = NcclComm::new(&be, rank, tp.tp, id)?;
        let model = Model::load_tp(gguf, be, Arc::new(comm), tp.ep)?;
        Ok((rank, body.run(rank, Glm5::new(model, opts)?)?))
    }
}
