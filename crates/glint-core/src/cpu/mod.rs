//! The CPU backend: buffers are `Vec`s, weights borrow the mmapped GGUF bytes, ops run on rayon.

mod attention;
mod cache;
mod elementwise;
mod linear;
pub mod router;
mod topk;
mod weight;

use std::borrow::Cow;

use glint_gguf::GgmlType;
use rayon::prelude::*;

pub use cache::CpuCache;
pub use weight::{decode_to_f32, CpuWeight};

use crate::backend::{Backend, Pages};
use crate::cache_type::CacheType;
use crate::error::{need, try_zeroed, Result};
use crate::params::{AttnParams, IndexerParams, RopeParams, RouterParams, Rows, StepSizes};

thread_local! {
    /// Router scratch, kept so routing a warm step does not allocate.
    static ROUTE: std::cell::Cell<router::RouteScratch> =
        std::cell::Cell::new(router::RouteScratch::default());
}

/// CPU backend. Stateless: parallelism comes from rayon's global pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend
    }
}

impl Backend for CpuBackend {
    type Buf = Vec<f32>;
    type Ids = Vec<u32>;
    type Weight<'a> = CpuWeight<'a>;
    type Cache = CpuCache;

    fn name(&self) -> &'static str {
        "cpu"
    }
    fn supports_weight_type(&self, ty: GgmlType) -> bool {
        weight::decodable(ty)
    }

    fn run_step<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        // In place when already on a pool thread (an engine loop inside the pool).
        rayon::scope(|_| f())
    }

    fn prepare_step(&self, s: &StepSizes) -> Result<()> {
        // The kernel family is chosen once per process; choose it now, not inside a step.
        let _ = glint_quant::dot::isa();
        // Buffers live on whichever thread runs a row or starts a matmul: every pool thread
        // (an engine loop may run on one) and the caller.
        rayon::broadcast(|_| reserve_thread_scratch(s));
        reserve_thread_scratch(s);
        Ok(())
    }

    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        try_zeroed("buffer", len)
    }
    fn upload(&self, host: &[f32]) -> Result<Vec<f32>> {
        Ok(host.to_vec())
    }
    fn download(&self, buf: &Vec<f32>, out: &mut [f32]) -> Result<()> {
        need("download", "buf", out.len(), buf.len())?;
        out.copy_from_slice(&buf[..out.len()]);
        Ok(())
    }
    fn buf_len(&self, buf: &Vec<f32>) -> usize {
        buf.len()
    }
    fn upload_ids(&self, host: &[u32]) -> Result<Vec<u32>> {
        Ok(host.to_vec())
    }
    fn alloc_ids(&self, len: usize) -> Result<Vec<u32>> {
        try_zeroed("id buffer", len)
    }
    fn download_ids(&self, ids: &Vec<u32>, out: &mut [u32]) -> Result<()> {
        need("download_ids", "ids", out.len(), ids.len())?;
        out.copy_from_slice(&ids[..out.len()]);
        Ok(())
    }
    fn write(&self, buf: &mut Vec<f32>, host: &[f32]) -> Result<()> {
        need("write", "buf", host.len(), buf.len())?;
        buf[..host.len()].copy_from_slice(host);
        Ok(())
    }
    fn write_ids(&self, ids: &mut Vec<u32>, host: &[u32]) -> Result<()> {
        need("write_ids", "ids", host.len(), ids.len())?;
        ids[..host.len()].copy_from_slice(host);
        Ok(())
    }
    fn alloc_cache(&self, rows: usize, dim: usize, ty: CacheType) -> Result<CpuCache> {
        CpuCache::new(rows, dim, ty)
    }
    fn cache_set_rows(
        &self,
        src: &Vec<f32>,
        slots: &Vec<u32>,
        n: usize,
        cache: &mut CpuCache,
    ) -> Result<()> {
        let d = cache.dim;
        need("cache_set_rows", "slots", n, slots.len())?;
        need("cache_set_rows", "src", n * d, src.len())?;
        for i in 0..n {
            cache.write_row(slots[i] as usize, &src[i * d..(i + 1) * d])?;
        }
        Ok(())
    }
    fn cache_download(&self, cache: &CpuCache, out: &mut [f32]) -> Result<()> {
        let d = cache.dim.max(1);
        need("cache_download", "cache", out.len() / d, cache.rows)?;
        for (r, o) in out.chunks_exact_mut(d).enumerate() {
            cache.read_row("cache_download", r, o)?;
        }
        Ok(())
    }
    fn upload_weight<'a>(
        &self,
        name: &str,
        ty: GgmlType,
        dims: &[usize],
        bytes: Cow<'a, [u8]>,
    ) -> Result<CpuWeight<'a>> {
        CpuWeight::new(name, ty, dims, bytes)
    }

    fn matmul(&self, w: &CpuWeight<'_>, x: &Vec<f32>, n: usize, y: &mut Vec<f32>) -> Result<()> {
        linear::matmul(w, x, n, y)
    }
    fn mul_mat_id(
        &self,
        w: &CpuWeight<'_>,
        ids: &Vec<u32>,
        n_used: usize,
        x: &Vec<f32>,
        x_per_slot: bool,
        n: usize,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        linear::mul_mat_id(w, ids, n_used, x, x_per_slot, n, y)
    }
    fn get_rows(
        &self,
        w: &CpuWeight<'_>,
        ids: &Vec<u32>,
        n: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        linear::get_rows(w, ids, n, out)
    }

    fn rms_norm(
        &self,
        x: &Vec<f32>,
        w: &Vec<f32>,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        elementwise::rms_norm(x, w, rows, dim, eps, y)
    }
    fn layer_norm(
        &self,
        x: &Vec<f32>,
        w: &Vec<f32>,
        b: &Vec<f32>,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        elementwise::layer_norm(x, w, b, rows, dim, eps, y)
    }
    fn rope(
        &self,
        x: &mut Vec<f32>,
        pos: &Vec<u32>,
        inv_freq: &Vec<f32>,
        p: &RopeParams,
    ) -> Result<()> {
        elementwise::rope(x, pos, inv_freq, p)
    }
    fn silu_mul(&self, g: &Vec<f32>, u: &Vec<f32>, n: usize, out: &mut Vec<f32>) -> Result<()> {
        elementwise::silu_mul(g, u, n, out)
    }
    fn add(&self, a: &mut Vec<f32>, b: &Vec<f32>, n: usize) -> Result<()> {
        need("add", "a", n, a.len())?;
        need("add", "b", n, b.len())?;
        elementwise::add(&mut a[..n], &b[..n]);
        Ok(())
    }
    fn scale(&self, a: &mut Vec<f32>, s: f32, n: usize) -> Result<()> {
        need("scale", "a", n, a.len())?;
        a[..n].iter_mut().for_each(|x| *x *= s);
        Ok(())
    }
    fn copy2d(
        &self,
        src: &Vec<f32>,
        from: Rows,
        dst: &mut Vec<f32>,
        to: Rows,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        elementwise::copy2d(src, from, dst, to, rows, cols)
    }

    fn set_rows(
        &self,
        src: &Vec<f32>,
        dim: usize,
        slots: &Vec<u32>,
        n: usize,
        dst: &mut Vec<f32>,
    ) -> Result<()> {
        elementwise::set_rows(src, dim, slots, n, dst)
    }
    fn gather_rows(
        &self,
        src: &Vec<f32>,
        dim: usize,
        rows: &Vec<u32>,
        n: usize,
        dst: &mut Vec<f32>,
    ) -> Result<()> {
        elementwise::gather_rows(src, dim, rows, n, dst)
    }

    fn moe_route(
        &self,
        logits: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        n: usize,
        p: &RouterParams,
        ids: &mut Vec<u32>,
        weights: &mut Vec<f32>,
    ) -> Result<()> {
        need("moe_route", "logits", n * p.n_expert, logits.len())?;
        if let Some(b) = bias {
            need("moe_route", "bias", p.n_expert, b.len())?;
        }
        need("moe_route", "ids", n * p.n_used, ids.len())?;
        need("moe_route", "weights", n * p.n_used, weights.len())?;
        if p.n_used > p.n_expert || p.n_group == 0 || !p.n_expert.is_multiple_of(p.n_group) {
            return Err(crate::CoreError::Param {
                op: "moe_route",
                msg: format!(
                    "{} experts, {} used, {} groups",
                    p.n_expert, p.n_used, p.n_group
                ),
            });
        }
        let mut scratch = ROUTE.take();
        for t in 0..n {
            router::route_token_into(
                &logits[t * p.n_expert..(t + 1) * p.n_expert],
                bias.map(|b| b.as_slice()),
                p,
                &mut scratch,
                &mut ids[t * p.n_used..(t + 1) * p.n_used],
                &mut weights[t * p.n_used..(t + 1) * p.n_used],
            );
        }
        ROUTE.set(scratch);
        Ok(())
    }
    /// In place (the default body stages through host vectors; here the buffers are host
    /// memory, so an expert-parallel step allocates nothing either).
    fn moe_local_experts(
        &self,
        ids: &mut Vec<u32>,
        weights: &mut Vec<f32>,
        n_tokens: usize,
        n_used: usize,
        first: u32,
        count: u32,
    ) -> Result<()> {
        let len = n_tokens * n_used;
        need("moe_local_experts", "ids", len, ids.len())?;
        need("moe_local_experts", "weights", len, weights.len())?;
        for (id, w) in ids[..len].iter_mut().zip(&mut weights[..len]) {
            match id.checked_sub(first) {
                Some(local) if local < count => *id = local,
                _ => {
                    *id = 0;
                    *w = 0.0;
                }
            }
        }
        Ok(())
    }
    fn moe_combine(
        &self,
        y: &Vec<f32>,
        weights: &Vec<f32>,
        n: usize,
        k: usize,
        dim: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        need("moe_combine", "y", n * k * dim, y.len())?;
        need("moe_combine", "weights", n * k, weights.len())?;
        need("moe_combine", "out", n * dim, out.len())?;
        let token = |(t, o): (usize, &mut [f32])| {
            o.fill(0.0);
            for s in 0..k {
                let w = weights[t * k + s];
                let ys = &y[(t * k + s) * dim..(t * k + s + 1) * dim];
                o.iter_mut().zip(ys).for_each(|(a, b)| *a += w * b);
            }
        };
        let out = &mut out[..n * dim];
        // A prompt's combine reads n·k rows of the model width (100 MB for 512 tokens of
        // GLM-5): over the pool, a token a task, the same sums.
        if n * k * dim >= elementwise::PAR_MIN && dim > 0 {
            out.par_chunks_mut(dim).enumerate().for_each(token);
        } else if dim > 0 {
            out.chunks_mut(dim).enumerate().for_each(token);
        }
        Ok(())
    }
    fn indexer_scores(
        &self,
        q: &Vec<f32>,
        w: &Vec<f32>,
        keys: &CpuCache,
        pos: &Vec<u32>,
        pages: &Pages<'_, Self>,
        p: &IndexerParams,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        attention::indexer_scores(q, w, keys, pos, view(pages), p, out)
    }
    fn top_k(
        &self,
        x: &Vec<f32>,
        rows: usize,
        n: usize,
        k: usize,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        attention::top_k(x, rows, n, k, ids)
    }
    fn mla_attention(
        &self,
        q: &Vec<f32>,
        cache: &CpuCache,
        pos: &Vec<u32>,
        pages: &Pages<'_, Self>,
        selected: Option<&Vec<u32>>,
        p: &AttnParams,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let sel = selected.map(|s| s.as_slice());
        attention::mla_attention(q, cache, pos, view(pages), sel, p, out)
    }
}

/// Sizes this thread's scratch of every op for steps up to `s`.
fn reserve_thread_scratch(s: &StepSizes) {
    attention::reserve_scratch(s);
    elementwise::reserve_scratch(s);
    linear::reserve_scratch(s);
    ROUTE.with(|r| {
        let mut v = r.take();
        v.reserve(s.n_expert);
        r.set(v);
    });
}

fn view<'a>(p: &Pages<'a, CpuBackend>) -> attention::PageView<'a> {
    attention::PageView {
        tables: p.tables,
        token_seq: p.token_seq,
        max_blocks: p.max_blocks,
        block_size: p.block_size,
    }
}
