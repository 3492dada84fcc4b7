//! `Backend::branches` on a second stream.
//!
//! A one-token step is a chain of launches of a few microseconds each, most of them far from
//! filling the GPU, so two independent chains of a layer (the indexer's keys, scores and top-k
//! beside the query path; the shared expert beside the router and the routed experts) run
//! side by side when one is issued on a second stream. The side stream waits on an event
//! recorded on the main stream at the fork (and again before a `side_after_main` piece); the
//! main stream waits on one recorded on the side stream at the join. Stream capture follows
//! these edges, so a recorded step holds the two chains as parallel paths of its graph.
//!
//! What the branches share is the backend's scratch: launches read the current stream from
//! here, allocations go to it, and the quantized-activation slots (quant.rs) keep, during a
//! fork, which chain touched and wrote each slot, so neither chain finds a quantization the
//! other may not have written yet, nor evicts a slot the other uses. The expert-grouping scratch and the attention partials belong to the
//! main stream; an op needing them on the side stream is an error, not a race.
//! `GLINT_CUDA_FORK=0` issues both branches on the main stream (to measure what this gains).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use glint_core::{Branch, CoreError, Result};

use crate::backend::{dev, CudaBackend};

pub(crate) struct ForkState {
    side: Arc<CudaStream>,
    /// Recorded on the main stream at the fork and before a side piece that waits for it.
    fork_ev: CudaEvent,
    join_ev: CudaEvent,
    /// Open `branches` calls: the outer one forks and joins; nested ones run in the chain
    /// they were called from.
    depth: AtomicUsize,
    /// Ops are being issued for the side chain.
    on_side: AtomicBool,
    enabled: bool,
}

// SAFETY: the events are recorded and waited on only between an outermost branch_begin and
// its branch_end, on the one thread issuing the step (the step's ops are one thread's in any
// case: they share one stream's order); the driver's handles may be used from any thread.
unsafe impl Send for ForkState {}
unsafe impl Sync for ForkState {}

impl ForkState {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let op = "creating the second CUDA stream";
        Ok(Self {
            side: ctx.new_stream().map_err(dev(op))?,
            fork_ev: ctx.new_event(None).map_err(dev(op))?,
            join_ev: ctx.new_event(None).map_err(dev(op))?,
            depth: AtomicUsize::new(0),
            on_side: AtomicBool::new(false),
            enabled: std::env::var("GLINT_CUDA_FORK").map_or(true, |v| v != "0"),
        })
    }

    /// Which chain ops are issued for: `None` outside a fork, `Some(0)` main, `Some(1)` side.
    pub(crate) fn branch(&self) -> Option<u8> {
        if self.depth.load(Ordering::Acquire) == 0 {
            None
        } else if self.on_side.load(Ordering::Acquire) {
            Some(1)
        } else {
            Some(0)
        }
    }

    /// An error naming `op` when it is issued on the side stream: the scratch it needs belongs
    /// to the main stream.
    pub(crate) fn main_only(&self, op: &'static str) -> Result<()> {
        if self.branch() == Some(1) {
            return Err(CoreError::Param {
                op,
                msg: "needs scratch of the main stream; issue it in the main chain of \
                      Backend::branches"
                    .into(),
            });
        }
        Ok(())
    }
}

impl CudaBackend {
    /// The stream ops are issued on now: the side stream inside a side piece.
    pub(crate) fn cur_stream(&self) -> &Arc<CudaStream> {
        if self.fork.on_side.load(Ordering::Acquire) {
            &self.fork.side
        } else {
            &self.stream
        }
    }
}

/// The side stream waits for the main stream's work issued so far.
fn side_waits_main(be: &CudaBackend, op: &'static str) -> Result<()> {
    let f = &be.fork;
    f.fork_ev.record(&be.stream).map_err(dev(op))?;
    f.side.wait(&f.fork_ev).map_err(dev(op))
}

pub(crate) fn begin(be: &CudaBackend) -> Result<()> {
    let f = &be.fork;
    if !f.enabled || f.depth.fetch_add(1, Ordering::AcqRel) > 0 {
        return Ok(());
    }
    be.quant.fork_edge();
    let r = side_waits_main(be, "forking a step onto a second stream");
    if r.is_err() {
        // No fork happened: `branches` returns before its `branch_end`.
        f.depth.store(0, Ordering::Release);
    }
    r
}

pub(crate) fn to(be: &CudaBackend, to: Branch) -> Result<()> {
    let f = &be.fork;
    if !f.enabled || f.depth.load(Ordering::Acquire) != 1 {
        return Ok(());
    }
    if to == Branch::SideAfterMain {
        side_waits_main(be, "ordering a step's second stream after its first")?;
        be.quant.side_sees_main();
    }
    f.on_side.store(to != Branch::Main, Ordering::Release);
    Ok(())
}

pub(crate) fn end(be: &CudaBackend) -> Result<()> {
    let f = &be.fork;
    if !f.enabled || f.depth.fetch_sub(1, Ordering::AcqRel) != 1 {
        return Ok(());
    }
    f.on_side.store(false, Ordering::Release);
    be.quant.fork_edge();
    let op = "joining a step's second stream";
    f.join_ev.record(&f.side).map_err(dev(op))?;
    be.stream.wait(&f.join_ev).map_err(dev(op))
}
