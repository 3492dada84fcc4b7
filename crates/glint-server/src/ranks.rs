//! `glint serve --tp N [--ep]`: the engine on N ranks, each holding its shard of the weights
//! and its own KV pool and scheduler.
//!
//! Rank 0 (the leader) runs the engine loop of [`crate::engine`] and talks to the HTTP side;
//! every other rank (a follower) runs a scheduler that is kept identical to the leader's by
//! replaying the leader's operations in the leader's order: submit, cancel, step. The
//! scheduler is deterministic (its pool, prefix cache and preemption depend only on that
//! sequence) and every rank ends a step with the same logits (the head's all-gather), so each
//! rank samples the same tokens from the same seeds: the pools stay block-for-block equal and
//! the steps' collectives pair up, without tokens or block tables ever being sent. Only the
//! leader reports events.
//!
//! A rank that fails a step or goes away stops the whole engine (its collectives would
//! otherwise leave the others waiting): running requests get an error, `/health` reports the
//! engine down.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use glint_engine::scheduler::{Request, Scheduler, SchedulerConfig};
use glint_gguf::Gguf;
use glint_tp::{Communicator, LocalComm};
use glm5_model::{Backend, CpuBackend, Model};

use crate::engine::Body;

/// How the model is split across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    /// Ranks (1: no split).
    pub tp: usize,
    /// Routed experts split whole across the ranks instead of by their hidden dim.
    pub ep: bool,
}

impl Default for Parallel {
    fn default() -> Self {
        Self { tp: 1, ep: false }
    }
}

/// A collective waits this long for the other ranks (they run the same steps, so only a
/// failed rank makes one wait long).
const RANK_TIMEOUT: Duration = Duration::from_secs(600);

/// What the leader did to its scheduler, for the followers to do to theirs.
pub(crate) enum Op {
    Submit(Request),
    Cancel(u64),
    Step,
}

/// The leader's side of the followers' operation queues (empty without `--tp`).
#[derive(Default)]
pub(crate) struct Mirror {
    followers: Vec<mpsc::Sender<Op>>,
}

/// A follower stopped (it failed a step or its thread ended).
#[derive(Debug)]
pub(crate) struct RankGone(pub usize);

impl std::fmt::Display for RankGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tensor-parallel rank {} stopped", self.0)
    }
}

impl Mirror {
    pub(crate) fn is_empty(&self) -> bool {
        self.followers.is_empty()
    }

    /// Sends `op` (made once per follower) to every follower.
    pub(crate) fn send(&self, op: impl Fn() -> Op) -> Result<(), RankGone> {
        for (i, f) in self.followers.iter().enumerate() {
            f.send(op()).map_err(|_| RankGone(i + 1))?;
        }
        Ok(())
    }
}

/// The engine thread's work for `parallel.tp` rank threads on the CPU, through the in-process
/// communicator.
pub(crate) fn on_cpu(parallel: Parallel, cfg: SchedulerConfig) -> impl FnOnce(&Gguf, Body) + Send {
    move |gguf, body| {
        let ranks = LocalComm::group(parallel.tp, RANK_TIMEOUT)
            .into_iter()
            .map(|c| {
                (
                    CpuBackend::new(),
                    Arc::new(c) as Arc<dyn Communicator<CpuBackend>>,
                )
            })
            .collect();
        run_ranks(gguf, parallel.ep, cfg, ranks, body)
    }
}

/// The engine thread's work for `parallel.tp` ranks on GPUs `first..first + tp`, through NCCL.
#[cfg(feature = "cuda")]
pub(crate) fn on_cuda(
    first: usize,
    parallel: Parallel,
    cfg: SchedulerConfig,
) -> impl FnOnce(&Gguf, Body) + Send {
    move |gguf, body| {
        use glint_cuda::CudaBackend;
        let end = first + parallel.tp;
        let opened = (first..end)
            .map(CudaBackend::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("opening the devices: {e}"))
            .and_then(|bes| {
                let comms = glint_tp::NcclComm::for_devices(&bes)
                    .map_err(|e| format!("NCCL over cuda:{first}..{end}: {e}"))?;
                Ok(bes
                    .into_iter()
                    .zip(comms)
                    .map(|(b, c)| (b, Arc::new(c) as Arc<dyn Communicator<CudaBackend>>))
                    .collect())
            });
        match opened {
            Ok(ranks) => run_ranks(gguf, parallel.ep, cfg, ranks, body),
            Err(e) => body.failed(e),
        }
    }
}

/// One thread per rank: rank 0 loads its shard and becomes the leader (`body`), the others
/// load theirs and follow. The leader reports ready only once every rank has loaded; a rank
/// that fails to load fails the start with its own error.
fn run_ranks<B: Backend + 'static>(
    gguf: &Gguf,
    ep: bool,
    cfg: SchedulerConfig,
    ranks: Vec<(B, Arc<dyn Communicator<B>>)>,
    body: Body,
) {
    let (loaded_tx, loaded_rx) = mpsc::channel::<(usize, Result<(), String>)>();
    let mut followers = Vec::new();
    std::thread::scope(|s| {
        let mut ranks = ranks.into_iter().enumerate();
        let Some((_, (be0, comm0))) = ranks.next() else {
            return body.failed("no ranks".into());
        };
        for (rank, (be, comm)) in ranks {
            let (tx, rx) = mpsc::channel::<Op>();
            followers.push(tx);
            let loaded = loaded_tx.clone();
            std::thread::Builder::new()
                .name(format!("glint-rank{rank}"))
                .spawn_scoped(s, move || {
                    let model = match Model::load_tp(gguf, be, comm, ep) {
                        Ok(m) => m,
                        Err(e) => {
                            let _ = loaded.send((rank, Err(format!("loading the model: {e}"))));
                            return;
                        }
                    };
                    match Scheduler::new(&model, cfg) {
                        Ok(sched) => {
                            let _ = loaded.send((rank, Ok(())));
                            drop(loaded);
                            follow(rank, sched, rx);
                        }
                        Err(e) => {
                            let _ = loaded.send((rank, Err(format!("sizing the scheduler: {e}"))));
                        }
                    }
                })
                .expect("spawning a rank thread");
        }
        drop(loaded_tx);
        let n_followers = followers.len();
        let mirror = Mirror {
            followers: std::mem::take(&mut followers),
        };
        let model = match Model::load_tp(gguf, be0, comm0, ep) {
            Ok(m) => m,
            Err(e) => return body.failed(format!("loading the model (rank 0): {e}")),
        };
        let sched = match Scheduler::new(&model, cfg) {
            Ok(s) => s,
            Err(e) => return body.failed(format!("sizing the scheduler: {e}")),
        };
        for _ in 0..n_followers {
            match loaded_rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((rank, Err(e))) => return body.failed(format!("rank {rank}: {e}")),
                Err(_) => return body.failed("a rank thread ended while loading".into()),
            }
        }
        tracing::info!(ranks = n_followers + 1, ep, "every rank loaded its shard");
        body.serve(sched, model.config().n_vocab, mirror);
    });
}

/// A follower: applies the leader's operations to its own scheduler until the leader hangs
/// up, or a step fails (then it leaves, which wakes the leader's collectives with an error).
fn follow<B: Backend>(rank: usize, mut sched: Scheduler<'_, '_, B>, ops: mpsc::Receiver<Op>) {
    while let Ok(op) = ops.recv() {
        match op {
            Op::Submit(r) => {
                // Refused on the leader too (same state): nothing to do.
                let _ = sched.submit(r);
            }
            Op::Cancel(id) => {
                if let Err(e) = sched.cancel(id) {
                    tracing::error!(rank, id, error = %e, "cancel failed on a follower");
                    return;
                }
            }
            Op::Step => {
                if let Err(e) = sched.step() {
                    tracing::error!(rank, error = %e, "step failed on a follower; the engine stops");
                    return;
                }
            }
        }
    }
}
