//! `--tp N [--ep]` on `generate` and `logits`: tensor parallelism over N rank threads of this
//! process on the CPU, each holding its shard of the weights (glm5_model::shard) and meeting
//! the others through the in-process communicator (glint_tp::LocalComm) at the two
//! all-reduces of every layer and the all-gather of the logits. Every rank ends a step with the
//! same logits, so every rank runs the same command loop (same sampler, same seed) and stays in
//! step without sending tokens; only rank 0 prints or writes.

use std::sync::Arc;
use std::time::Duration;

use glint_gguf::Gguf;
use glint_tp::{Communicator, LocalComm};
use glm5_model::{CpuBackend, Glm5, Model, SessionOptions};

use super::session::Device;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(clap::Args, Debug, Clone)]
pub struct TpArgs {
    /// Tensor parallelism over N ranks (threads of this process, CPU only): attention split
    /// by heads, FFN and experts by their hidden dim, the output head by vocabulary.
    #[arg(long, default_value_t = 1, value_parser = parse_tp)]
    pub tp: usize,
    /// With --tp: split the routed experts whole across the ranks (expert parallelism)
    /// instead of each expert's hidden dim.
    #[arg(long)]
    pub ep: bool,
}

fn parse_tp(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is outside the allowed range 1..=64")),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TpCliError {
    #[error("--tp {0} with --device cuda: several GPUs through NCCL are not in this command yet (the CPU runs --tp in one process)")]
    Device(usize),
    #[error("--ep needs --tp 2 or more")]
    EpAlone,
}

/// A collective waits this long for the other ranks before failing (they run the same work,
/// so only a failed rank makes one wait long).
const RANK_TIMEOUT: Duration = Duration::from_secs(600);

impl TpArgs {
    /// Whether to run rank threads (`--tp` above 1); refuses what this command cannot do.
    pub fn active(&self, device: Device) -> Result<bool, TpCliError> {
        if self.tp <= 1 {
            return if self.ep {
                Err(TpCliError::EpAlone)
            } else {
                Ok(false)
            };
        }
        if device != Device::Cpu {
            return Err(TpCliError::Device(self.tp));
        }
        Ok(true)
    }
}

/// Loads one shard per rank thread and runs `f(rank, model)` on each; returns rank 0's
/// result. When a rank fails, the others are woken with an error; the error returned is the
/// failing rank's own (the others only report that the group was aborted).
pub fn run_ranks<T: Send>(
    gguf: &Gguf,
    tp: &TpArgs,
    opts: SessionOptions,
    f: impl Fn(usize, Glm5<'_, CpuBackend>) -> Result<T, BoxError> + Sync,
) -> Result<T, BoxError> {
    let comms = LocalComm::group(tp.tp, RANK_TIMEOUT);
    let results: Vec<Result<T, BoxError>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, c)| {
                let f = &f;
                s.spawn(move || {
                    let comm: Arc<dyn Communicator<CpuBackend>> = Arc::new(c);
                    let model = Model::load_tp(gguf, CpuBackend::new(), comm, tp.ep)?;
                    f(rank, Glm5::new(model, opts)?)
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
    let first = results.next().expect("at least one rank");
    match first {
        Ok(v) => Ok(v),
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
