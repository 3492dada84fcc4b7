//! Weight upload through a bounded pinned staging buffer: the mmapped file is copied in 32 MiB
//! pieces into one of two page-locked buffers while the other one's DMA to the device runs. Host
//! memory used by loading stays at 64 MiB whatever the model's size (the mmap's pages are the
//! file's and the kernel may drop them), and the copies run at DMA speed instead of through the
//! driver's own staging of pageable memory.

use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};
use glint_core::{CoreError, Result};

use crate::backend::{dev, CudaBackend};

const PIECE: usize = 32 << 20;

pub(crate) struct Staging {
    bufs: [PinnedHostSlice<u8>; 2],
    done: [Option<CudaEvent>; 2],
}

// SAFETY: the pinned buffers and events are only used under the backend's staging mutex.
unsafe impl Send for Staging {}

impl Staging {
    fn new(be: &CudaBackend) -> Result<Self> {
        let alloc = || {
            // SAFETY: every byte a copy reads is written first (upload below).
            unsafe { be.ctx.alloc_pinned::<u8>(PIECE) }.map_err(|e| CoreError::Device {
                op: "allocating the pinned upload buffer",
                msg: format!("{PIECE} bytes: {e}"),
            })
        };
        Ok(Self {
            bufs: [alloc()?, alloc()?],
            done: [None, None],
        })
    }
}

/// Copies `bytes` into `dst` (at least as long) through the staging buffers; returns once the
/// last piece is queued (the stream orders later kernels after it).
pub(crate) fn upload(be: &CudaBackend, bytes: &[u8], dst: &mut CudaSlice<u8>) -> Result<()> {
    let op = "uploading a weight";
    let mut guard = be.staging.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(Staging::new(be)?);
    }
    let st = guard.as_mut().expect("created above");
    for (i, piece) in bytes.chunks(PIECE).enumerate() {
        let k = i % 2;
        // The buffer's previous DMA must be finished before it is overwritten.
        if let Some(e) = st.done[k].take() {
            e.synchronize().map_err(dev(op))?;
        }
        let host = st.bufs[k].as_mut_slice().map_err(dev(op))?;
        host[..piece.len()].copy_from_slice(piece);
        let at = i * PIECE;
        let mut view = dst.slice_mut(at..at + piece.len());
        be.stream
            .memcpy_htod(&host[..piece.len()], &mut view)
            .map_err(dev(op))?;
        st.done[k] = Some(be.stream.record_event(None).map_err(dev(op))?);
    }
    Ok(())
}
