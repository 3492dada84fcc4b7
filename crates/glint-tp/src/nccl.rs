//! NCCL through cudarc, on the CUDA backend's own stream: every collective is enqueued after
//! the ops before it and before the ops after it, nothing waits on the host (except
//! [`Communicator::barrier`]), so a recorded step (a CUDA graph) captures the collectives too.
//! libnccl is loaded at run time: this builds without NCCL or a GPU.

use std::sync::Mutex;

use cudarc::nccl::safe::{Comm, Id, ReduceOp};
use glint_core::{Backend, Result};
use glint_cuda::{CudaBackend, CudaBuf};

use crate::{comm_err, Communicator};

/// The 128 bytes of an NCCL unique id: made by rank 0 ([`NcclComm::unique_id`]) and handed to
/// every rank (a rendezvous) before [`NcclComm::new`].
pub type NcclId = [std::ffi::c_char; 128];

fn nccl_err(op: &'static str) -> impl Fn(cudarc::nccl::result::NcclError) -> glint_core::CoreError {
    move |e| comm_err(op, format!("NCCL: {e:?}"))
}

/// One rank of an NCCL communicator bound to one [`CudaBackend`]'s stream.
pub struct NcclComm {
    /// NCCL communicators are not thread-safe: one caller at a time.
    comm: Mutex<Comm>,
    rank: usize,
    world: usize,
    /// One float the barrier all-reduces.
    token: Mutex<CudaBuf>,
}

// SAFETY: an ncclComm_t may be used from any thread as long as calls do not overlap, which the
// Mutex guarantees; the stream it holds is the backend's, which is itself Send + Sync.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

impl NcclComm {
    /// A new unique id (rank 0 makes it; the others receive it).
    pub fn unique_id() -> Result<NcclId> {
        Ok(*Id::new().map_err(nccl_err("ncclGetUniqueId"))?.internal())
    }

    /// Joins rank `rank` of `world` to the communicator of `id`, on `be`'s stream (blocks until
    /// every rank has joined, as `ncclCommInitRank` does).
    pub fn new(be: &CudaBackend, rank: usize, world: usize, id: NcclId) -> Result<Self> {
        let comm = Comm::from_rank(be.stream().clone(), rank, world, Id::uninit(id))
            .map_err(nccl_err("ncclCommInitRank"))?;
        Ok(Self {
            comm: Mutex::new(comm),
            rank,
            world,
            token: Mutex::new(be.alloc(1)?),
        })
    }

    /// One communicator per backend, each its own device, made in this process
    /// (`ncclCommInitAll`): one process driving every GPU of a node.
    pub fn for_devices(backends: &[CudaBackend]) -> Result<Vec<Self>> {
        let streams = backends.iter().map(|b| b.stream().clone()).collect();
        let comms = Comm::from_devices(streams).map_err(nccl_err("ncclCommInitAll"))?;
        let world = comms.len();
        comms
            .into_iter()
            .zip(backends)
            .enumerate()
            .map(|(rank, (comm, be))| {
                Ok(Self {
                    comm: Mutex::new(comm),
                    rank,
                    world,
                    token: Mutex::new(be.alloc(1)?),
                })
            })
            .collect()
    }

    fn comm(&self) -> std::sync::MutexGuard<'_, Comm> {
        self.comm.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn check_len(op: &'static str, have: usize, need: usize) -> Result<()> {
    if have < need {
        return Err(comm_err(
            op,
            format!("buffer of {have} floats, {need} needed"),
        ));
    }
    Ok(())
}

impl Communicator<CudaBackend> for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn recordable(&self) -> bool {
        true
    }

    fn all_reduce_sum(&self, be: &CudaBackend, buf: &mut CudaBuf, n: usize) -> Result<()> {
        check_len("ncclAllReduce", be.buf_len(buf), n)?;
        let mut view = buf.slice_mut().slice_mut(0..n);
        self.comm()
            .all_reduce_in_place(&mut view, &ReduceOp::Sum)
            .map_err(nccl_err("ncclAllReduce"))?;
        Ok(())
    }

    fn all_gather(
        &self,
        be: &CudaBackend,
        src: &CudaBuf,
        n: usize,
        dst: &mut CudaBuf,
    ) -> Result<()> {
        check_len("ncclAllGather", be.buf_len(src), n)?;
        check_len("ncclAllGather", be.buf_len(dst), n * self.world)?;
        let send = src.slice().slice(0..n);
        let mut recv = dst.slice_mut().slice_mut(0..n * self.world);
        self.comm()
            .all_gather(&send, &mut recv)
            .map_err(nccl_err("ncclAllGather"))?;
        Ok(())
    }

    fn reduce_scatter_sum(
        &self,
        be: &CudaBackend,
        src: &CudaBuf,
        n: usize,
        dst: &mut CudaBuf,
    ) -> Result<()> {
        check_len("ncclReduceScatter", be.buf_len(src), n * self.world)?;
        check_len("ncclReduceScatter", be.buf_len(dst), n)?;
        let send = src.slice().slice(0..n * self.world);
        let mut recv = dst.slice_mut().slice_mut(0..n);
        self.comm()
            .reduce_scatter(&send, &mut recv, &ReduceOp::Sum)
            .map_err(nccl_err("ncclReduceScatter"))?;
        Ok(())
    }

    fn broadcast(&self, be: &CudaBackend, buf: &mut CudaBuf, n: usize, root: usize) -> Result<()> {
        check_len("ncclBroadcast", be.buf_len(buf), n)?;
        if root >= self.world {
            return Err(comm_err(
                "ncclBroadcast",
                format!("root {root} of a group of {}", self.world),
            ));
        }
        let mut view = buf.slice_mut().slice_mut(0..n);
        self.comm()
            .broadcast_in_place(&mut view, root as i32)
            .map_err(nccl_err("ncclBroadcast"))?;
        Ok(())
    }

    /// An all-reduce of one float, then a wait for the stream: every rank has reached this
    /// point and every earlier collective of this rank has completed.
    fn barrier(&self, be: &CudaBackend) -> Result<()> {
        {
            let mut t = self.token.lock().unwrap_or_else(|p| p.into_inner());
            self.all_reduce_sum(be, &mut t, 1)?;
        }
        be.synchronize()
    }
}
