//! MLA attention, the DSA indexer and top-k on the device (kernels/mla.cu, kernels/indexer.cu).
// TODO(helper): being written.
#![allow(clippy::too_many_arguments)]

use glint_core::{AttnParams, CoreError, IndexerParams, Pages, Result, StepSizes};

use crate::backend::CudaBackend;
use crate::buffers::{CudaBuf, CudaCache, CudaIds};

/// Per-backend scratch of attention and the indexer.
#[derive(Default)]
pub struct AttnState {}

impl AttnState {
    pub(crate) fn prepare(&self, be: &CudaBackend, s: &StepSizes) -> Result<()> {
        let _ = (be, s);
        Ok(())
    }
}

fn todo_err(op: &'static str) -> CoreError {
    CoreError::Device {
        op,
        msg: "not yet implemented on CUDA".into(),
    }
}

pub(crate) fn indexer_scores(
    be: &CudaBackend,
    q: &CudaBuf,
    w: &CudaBuf,
    keys: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    p: &IndexerParams,
    out: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, q, w, keys, positions, pages, p, out);
    Err(todo_err("indexer_scores"))
}

pub(crate) fn indexer_scratch_len(n_tokens: usize, n_kv: usize) -> usize {
    n_tokens * n_kv
}

pub(crate) fn indexer_select(
    be: &CudaBackend,
    q: &CudaBuf,
    w: &CudaBuf,
    keys: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    p: &IndexerParams,
    top_k: usize,
    scratch: &mut CudaBuf,
    out: &mut CudaIds,
) -> Result<()> {
    let _ = (be, q, w, keys, positions, pages, p, top_k, scratch, out);
    Err(todo_err("indexer_select"))
}

pub(crate) fn top_k(
    be: &CudaBackend,
    x: &CudaBuf,
    rows: usize,
    n: usize,
    k: usize,
    ids: &mut CudaIds,
) -> Result<()> {
    let _ = (be, x, rows, n, k, ids);
    Err(todo_err("top_k"))
}

pub(crate) fn mla_attention(
    be: &CudaBackend,
    q: &CudaBuf,
    cache: &CudaCache,
    positions: &CudaIds,
    pages: &Pages<'_, CudaBackend>,
    selected: Option<&CudaIds>,
    p: &AttnParams,
    out: &mut CudaBuf,
) -> Result<()> {
    let _ = (be, q, cache, positions, pages, selected, p, out);
    Err(todo_err("mla_attention"))
}
