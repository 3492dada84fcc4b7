//! The in-process communicator: the ranks are threads of one process sharing host memory.
//!
//! Each collective stages the rank's buffer into its slot, waits for every rank, computes its
//! result from the slots in rank order (`((x_0 + x_1) + x_2) + …`, the same on every rank, so
//! the ranks stay bit-identical and a run is reproducible), writes it back and waits again so no
//! slot is overwritten while another rank still reads it. It works with any backend through
//! `download`/`write`; it is meant for host-memory backends (a GPU step must use NCCL, see
//! [`Communicator::recordable`]).
//!
//! A rank that fails, panics or is dropped before the others wakes them with an error instead
//! of leaving them waiting, and no rank waits longer than the group's timeout.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use glint_core::{Backend, Result};

use crate::{comm_err, Communicator};

struct BarrierState {
    arrived: usize,
    generation: u64,
    /// Why the group was aborted (the first reason), if it was.
    aborted: Option<String>,
}

struct Shared {
    world: usize,
    timeout: Duration,
    slots: Vec<Mutex<Vec<f32>>>,
    state: Mutex<BarrierState>,
    cv: Condvar,
}

impl Shared {
    fn wait(&self, rank: usize, op: &'static str) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &st.aborted {
            return Err(comm_err(op, format!("rank {rank}: group aborted: {why}")));
        }
        let gen = st.generation;
        st.arrived += 1;
        if st.arrived == self.world {
            st.arrived = 0;
            st.generation += 1;
            self.cv.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            // Generation first: a barrier that completed counts even if a rank aborts later.
            if st.generation != gen {
                return Ok(());
            }
            if let Some(why) = &st.aborted {
                return Err(comm_err(op, format!("rank {rank}: group aborted: {why}")));
            }
            let now = Instant::now();
            if now >= deadline {
                let why = format!(
                    "rank {rank} waited {:.1} s at {op} for the other {} ranks",
                    self.timeout.as_secs_f64(),
                    self.world - 1
                );
                st.aborted = Some(why.clone());
                self.cv.notify_all();
                return Err(comm_err(op, why));
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn abort(&self, why: String) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.aborted.is_none() {
            st.aborted = Some(why);
        }
        self.cv.notify_all();
    }

    fn slot(&self, r: usize) -> std::sync::MutexGuard<'_, Vec<f32>> {
        self.slots[r].lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl LocalComm {
    /// The `world` ranks of a new group (rank `r` at index `r`); hand one to each rank thread.
    /// A collective waits at most `timeout` for the others.
    pub fn group(world: usize, timeout: Duration) -> Vec<LocalComm> {
        let world = world.max(1);
        let shared = Arc::new(Shared {
            world,
            timeout,
            slots: (0..world).map(|_| Mutex::new(Vec::new())).collect(),
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                aborted: None,
            }),
            cv: Condvar::new(),
        });
        (0..world)
            .map(|rank| LocalComm {
                shared: shared.clone(),
                rank,
                out: Mutex::new(Vec::new()),
            })
            .collect()
    }
}

/// One rank of an in-process group ([`LocalComm::group`]).
pub struct LocalComm {
    shared: Arc<Shared>,
    rank: usize,
    /// This rank's result before it is written back (reused: no allocation after the first
    /// collective of each size).
    out: Mutex<Vec<f32>>,
}

impl LocalComm {
    /// Wakes every rank waiting in a collective with an error naming `why` (a rank that failed
    /// calls it; dropping a rank does it too).
    pub fn abort(&self, why: impl Into<String>) {
        self.shared.abort(why.into());
    }

    /// Stages `src[..n]` into this rank's slot.
    fn stage<B: Backend>(&self, be: &B, src: &B::Buf, n: usize, op: &'static str) -> Result<()> {
        if be.buf_len(src) < n {
            return Err(comm_err(
                op,
                format!("buffer of {} floats, {n} asked", be.buf_len(src)),
            ));
        }
        let mut slot = self.shared.slot(self.rank);
        slot.resize(n, 0.0);
        be.download(src, &mut slot)
    }

    /// Checks every slot holds `n` floats (every rank asked for the same size).
    fn check_sizes(&self, n: usize, op: &'static str) -> Result<()> {
        for r in 0..self.shared.world {
            let got = self.shared.slot(r).len();
            if got != n {
                return Err(comm_err(
                    op,
                    format!(
                        "rank {} passed {n} floats, rank {r} passed {got}",
                        self.rank
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The shape of every collective: (staged before the call) meet, compute from the slots, meet again. A
    /// failure in between aborts the group so the others do not wait for this rank.
    fn collective(
        &self,
        op: &'static str,
        staged: Result<()>,
        compute: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let r = staged.and_then(|_| self.shared.wait(self.rank, op));
        let r = r.and_then(|_| compute());
        if let Err(e) = &r {
            self.abort(format!("rank {} failed in {op}: {e}", self.rank));
            return r;
        }
        self.shared.wait(self.rank, op)
    }
}

impl Drop for LocalComm {
    fn drop(&mut self) {
        self.shared
            .abort(format!("rank {} left the group", self.rank));
    }
}

impl<B: Backend> Communicator<B> for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.shared.world
    }
    fn recordable(&self) -> bool {
        false
    }

    fn all_reduce_sum(&self, be: &B, buf: &mut B::Buf, n: usize) -> Result<()> {
        const OP: &str = "all_reduce";
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        self.collective(OP, self.stage(be, buf, n, OP), || {
            self.check_sizes(n, OP)?;
            out.clear();
            out.extend_from_slice(&self.shared.slot(0));
            for r in 1..self.shared.world {
                for (o, x) in out.iter_mut().zip(self.shared.slot(r).iter()) {
                    *o += *x;
                }
            }
            be.write(buf, &out)
        })
    }

    fn all_gather(&self, be: &B, src: &B::Buf, n: usize, dst: &mut B::Buf) -> Result<()> {
        const OP: &str = "all_gather";
        let w = self.shared.world;
        if be.buf_len(dst) < w * n {
            return Err(comm_err(
                OP,
                format!("destination of {} floats, {w}×{n} needed", be.buf_len(dst)),
            ));
        }
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        self.collective(OP, self.stage(be, src, n, OP), || {
            self.check_sizes(n, OP)?;
            out.clear();
            for r in 0..w {
                out.extend_from_slice(&self.shared.slot(r));
            }
            be.write(dst, &out)
        })
    }

    fn reduce_scatter_sum(&self, be: &B, src: &B::Buf, n: usize, dst: &mut B::Buf) -> Result<()> {
        const OP: &str = "reduce_scatter";
        let w = self.shared.world;
        let lo = self.rank * n;
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        self.collective(OP, self.stage(be, src, w * n, OP), || {
            self.check_sizes(w * n, OP)?;
            out.clear();
            out.extend_from_slice(&self.shared.slot(0)[lo..lo + n]);
            for r in 1..w {
                let s = self.shared.slot(r);
                for (o, x) in out.iter_mut().zip(&s[lo..lo + n]) {
                    *o += *x;
                }
            }
            be.write(dst, &out)
        })
    }

    fn broadcast(&self, be: &B, buf: &mut B::Buf, n: usize, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        if root >= self.shared.world {
            return Err(comm_err(
                OP,
                format!("root {root} of a group of {}", self.shared.world),
            ));
        }
        let me = self.rank;
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        self.collective(
            OP,
            if me == root {
                self.stage(be, buf, n, OP)
            } else {
                Ok(())
            },
            || {
                if me == root {
                    return Ok(());
                }
                let s = self.shared.slot(root);
                if s.len() != n {
                    return Err(comm_err(
                        OP,
                        format!("rank {me} asked {n} floats, root {root} sent {}", s.len()),
                    ));
                }
                out.clear();
                out.extend_from_slice(&s);
                drop(s);
                be.write(buf, &out)
            },
        )
    }

    fn barrier(&self, _be: &B) -> Result<()> {
        self.shared.wait(self.rank, "barrier")
    }
}
