//! `Backend::concurrently` on a second stream.
//!
//! A one-token step is a chain of launches of a few microseconds each, most of them far from
//! filling the GPU, so two independent chains of a layer (the indexer's keys, scores and top-k
//! beside the query path; the shared expert beside the router and the routed experts) run
//! side by side when one is issued on a second stream. The side stream waits on an event
//! recorded on the main stream at the fork; the main stream waits on one recorded on the side
//! stream at the join. Stream capture follows both edges, so a recorded step holds the two
//! branches as parallel paths of its graph.
//!
//! What the branches share is the backend's scratch: launches read the current stream from
//! here, allocations go to it, and the quantized-activation slots (quant.rs) keep, during a
//! fork, which branch touched and wrote each slot, so neither branch reuses or evicts a slot
//! the other one uses. The expert-grouping scratch and the attention partials belong to the
//! main stream; an op needing them on the side stream is an error, not a race.
//! `GLINT_CUDA_FORK=0` issues both branches on the main stream (to measure what this gains).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use glint_core::{CoreError, Result};

use crate::backend::{dev, CudaBackend};

pub(crate) struct ForkState {
    side: Arc<CudaStream>,
    fork_ev: CudaEvent,
    join_ev: CudaEvent,
    /// A fork is open (`concurrently` runs); a nested one runs serially in its branch.
    open: AtomicBool,
    /// Ops are being issued for the side branch.
    on_side: AtomicBool,
    enabled: bool,
}

// SAFETY: the events are only recorded and waited on by the thread inside `concurrently`, which
// `open` makes exclusive; the driver's event and stream handles may be used from any thread.
unsafe impl Send for ForkState {}
unsafe impl Sync for ForkState {}

impl ForkState {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let op = "creating the second CUDA stream";
        Ok(Self {
            side: ctx.new_stream().map_err(dev(op))?,
            fork_ev: ctx.new_event(None).map_err(dev(op))?,
            join_ev: ctx.new_event(None).map_err(dev(op))?,
            open: AtomicBool::new(false),
            on_side: AtomicBool::new(false),
            enabled: std::env::var("GLINT_CUDA_FORK").map_or(true, |v| v != "0"),
        })
    }

    /// Which branch ops are issued for: `None` outside a fork, `Some(0)` main, `Some(1)` side.
    pub(crate) fn branch(&self) -> Option<u8> {
        if !self.open.load(Ordering::Acquire) {
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
                msg: "needs scratch of the main stream; issue it in the main branch of \
                      Backend::concurrently"
                    .into(),
            });
        }
        Ok(())
    }
}

impl CudaBackend {
    /// The stream ops are issued on now: the side stream inside a fork's side branch.
    pub(crate) fn cur_stream(&self) -> &Arc<CudaStream> {
        if self.fork.on_side.load(Ordering::Acquire) {
            &self.fork.side
        } else {
            &self.stream
        }
    }
}

pub(crate) fn concurrently<R, E: From<CoreError>>(
    be: &CudaBackend,
    side: impl FnOnce() -> std::result::Result<(), E>,
    main: impl FnOnce() -> std::result::Result<R, E>,
) -> std::result::Result<R, E> {
    let f = &be.fork;
    if !f.enabled || f.open.swap(true, Ordering::AcqRel) {
        side()?;
        return main();
    }
    let r = forked(be, side, main);
    f.open.store(false, Ordering::Release);
    r
}

fn forked<R, E: From<CoreError>>(
    be: &CudaBackend,
    side: impl FnOnce() -> std::result::Result<(), E>,
    main: impl FnOnce() -> std::result::Result<R, E>,
) -> std::result::Result<R, E> {
    let f = &be.fork;
    let op = "forking a step onto a second stream";
    f.fork_ev.record(&be.stream).map_err(dev(op))?;
    f.side.wait(&f.fork_ev).map_err(dev(op))?;
    be.quant.fork_edge();
    f.on_side.store(true, Ordering::Release);
    let s = side();
    f.on_side.store(false, Ordering::Release);
    let m = s.and_then(|()| main());
    // Joined whatever the branches returned: a capture must not end with the side stream
    // still forked from it.
    let op = "joining a step's second stream";
    let joined = f
        .join_ev
        .record(&f.side)
        .and_then(|()| be.stream.wait(&f.join_ev))
        .map_err(dev(op));
    be.quant.fork_edge();
    let r = m?;
    joined?;
    Ok(r)
}
