//! `CudaBackend`: the device, its one stream, the compiled kernel modules, and the `Backend`
//! impl, which checks sizes on the host and hands each op to its family's launcher
//! (`elementwise.rs`, `quant.rs`, `moe.rs`, `attention.rs`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig,
    ValidAsZeroBits,
};
use glint_core::error::need;
use glint_core::{
    AttnParams, Backend, CacheType, CoreError, GgmlType, IndexerParams, Pages, Result, RopeParams,
    RouterParams, Rows, StepSizes,
};

use crate::buffers::{CudaBuf, CudaCache, CudaIds, CudaWeight};
use crate::compile::{self, Family};
use crate::device::{self, DeviceInfo};

pub struct CudaBackend {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    info: DeviceInfo,
    /// Each family's programs (quant.cu is several, compile.rs), searched in order by name.
    modules: HashMap<Family, Vec<Arc<CudaModule>>>,
    funcs: Mutex<HashMap<&'static str, CudaFunction>>,
    /// Recorded steps by key; `None` when graphs are off (eager execution).
    graphs: Option<Mutex<HashMap<u64, Recording>>>,
    /// Pinned buffers weight uploads stream through (made at the first upload).
    pub(crate) staging: Mutex<Option<crate::staging::Staging>>,
    pub(crate) quant: crate::quant::QuantState,
    /// Prompt-sized dense products on cuBLAS (gemm.rs).
    pub(crate) gemm: crate::gemm::GemmState,
    pub(crate) attn: crate::attention::AttnState,
    pub(crate) smem: crate::smem::SmemState,
    /// Launches carry the programmatic-dependent-launch attribute (launch.rs).
    pub(crate) pdl: bool,
    /// The second stream of `Backend::branches` (fork.rs).
    pub(crate) fork: crate::fork::ForkState,
}

/// What is known of a step key: seen once (run eagerly, so every lazily loaded kernel and
/// lazily grown scratch exists before a capture), or recorded.
enum Recording {
    Seen,
    Graph(Graph),
}

/// A CUDA graph, only ever touched under the `graphs` mutex (cudarc's type is not `Send`
/// because graph objects are not internally synchronised; the mutex serialises every use).
struct Graph(cudarc::driver::CudaGraph);
// SAFETY: see above: all access is serialised by the mutex that owns it.
unsafe impl Send for Graph {}

/// Key slots a recorded step is sized for are rounded up to this many, so a decode step
/// re-records once per 256 tokens of context, not once per token.
const KV_BUCKET: usize = 256;

/// Maps a driver error to a [`CoreError`] naming the op.
pub(crate) fn dev(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CoreError {
    move |e| CoreError::Device {
        op,
        msg: e.to_string(),
    }
}

/// A size as the `int` kernels take, or an error naming the op (a 2³¹ row count is a bug or a
/// hostile file, not something to truncate).
pub(crate) fn int(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| CoreError::Param {
        op,
        msg: format!("{v} does not fit a 32-bit kernel argument"),
    })
}

/// One thread per element, 256 to a block.
pub(crate) fn grid_1d(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).max(1) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `blocks` blocks of `threads` threads.
pub(crate) fn grid_rows(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `GLINT_CUDA_PREFETCH=BYTES`: how much of its weight rows a product's block asks L2 for before
/// it waits on the kernel before it (kernels/common.cuh `glint_prefetch_bytes`, 0 = off); unset
/// keeps the kernels' default. A per-module constant, so comparing settings needs no recompile.
fn set_prefetch_bytes(
    modules: &HashMap<Family, Vec<Arc<CudaModule>>>,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    let Ok(v) = std::env::var("GLINT_CUDA_PREFETCH") else {
        return Ok(());
    };
    let bytes: u32 = v.trim().parse().map_err(|_| CoreError::Param {
        op: "GLINT_CUDA_PREFETCH",
        msg: format!("{v:?} is not a byte count (0 turns the weight prefetch off)"),
    })?;
    for m in modules.values().flatten() {
        // Families without a product may have dropped the unused constant.
        let Ok(mut sym) = m.get_global("glint_prefetch_bytes", stream) else {
            continue;
        };
        // SAFETY: the symbol is one `unsigned int` (4 bytes, checked by transmute_mut's length).
        let mut word = unsafe { sym.transmute_mut::<u32>(1) }.ok_or_else(|| CoreError::Device {
            op: "GLINT_CUDA_PREFETCH",
            msg: "glint_prefetch_bytes is not 4 bytes".into(),
        })?;
        stream
            .memcpy_htod(&[bytes], &mut word)
            .map_err(dev("GLINT_CUDA_PREFETCH"))?;
    }
    tracing::info!(bytes, "weight prefetch per block set");
    Ok(())
}

impl CudaBackend {
    /// Opens `cuda:ordinal`, compiles (or loads from the cache) every kernel family.
    pub fn new(ordinal: usize) -> Result<Self> {
        let (ctx, info) = device::open(ordinal)?;
        // A stream of its own: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream().map_err(dev("creating a CUDA stream"))?;
        let fork = crate::fork::ForkState::new(&ctx)?;
        let (major, minor) = info.compute_capability;
        let arch =
            compile::sass_arch_for(major, minor).unwrap_or_else(|| compile::arch_for(major, minor));
        let mut modules = HashMap::new();
        for (fam, ptxs) in compile::compile_all(&arch, &info.driver)? {
            let ms = ptxs
                .into_iter()
                .map(|ptx| {
                    ctx.load_module(ptx).map_err(|e| CoreError::Device {
                        op: "loading CUDA kernels",
                        msg: format!("kernels/{}: {e}", fam.file()),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            modules.insert(fam, ms);
        }
        set_prefetch_bytes(&modules, &stream)?;
        tracing::info!(
            device = %info.name,
            cc = ?info.compute_capability,
            driver = %info.driver,
            mem_gib = info.total_mem as f64 / (1u64 << 30) as f64,
            "CUDA backend ready"
        );
        Ok(Self {
            quant: crate::quant::QuantState::default(),
            gemm: crate::gemm::GemmState::default(),
            attn: crate::attention::AttnState::default(),
            smem: crate::smem::SmemState::default(),
            ctx,
            stream,
            info,
            modules,
            funcs: Mutex::new(HashMap::new()),
            graphs: graphs_default().then(|| Mutex::new(HashMap::new())),
            staging: Mutex::new(None),
            pdl: crate::launch::pdl_default(major),
            fork,
        })
    }

    /// Turns step recording (CUDA graphs) on or off; on by default unless `GLINT_CUDA_GRAPHS=0`.
    pub fn with_graphs(mut self, on: bool) -> Self {
        self.graphs = on.then(|| Mutex::new(HashMap::new()));
        self
    }

    /// Dense products of `min_tokens` tokens and more on cuBLAS in bf16 (gemm.rs: faster
    /// prompts, but a token's bits then depend on its batch); `None` turns that off. The
    /// default is `GLINT_CUDA_GEMM_MIN`, off when unset.
    pub fn with_prompt_gemm(self, min_tokens: Option<usize>) -> Self {
        self.gemm.min_tokens.store(
            min_tokens.map_or(usize::MAX, |n| n.max(1)),
            std::sync::atomic::Ordering::Relaxed,
        );
        self
    }

    /// Number of recorded steps (tests, logs).
    pub fn recorded_steps(&self) -> usize {
        self.graphs.as_ref().map_or(0, |g| {
            g.lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter(|r| matches!(r, Recording::Graph(_)))
                .count()
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The one stream every op of this backend is issued on, in order: work another library
    /// issues on it (NCCL collectives) is ordered with the ops and captured with them.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for every launched op (tests, timing; never inside a step).
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(dev("synchronize"))
    }

    /// Device-to-device copy bandwidth in GB/s over 1 GiB (read + write bytes), best of five:
    /// what a memory-bound kernel can at most stream.
    pub fn copy_bandwidth(&self) -> Result<f64> {
        let n = 1usize << 30;
        let src = self.zeros::<u8>("bandwidth probe", n)?;
        let mut dst = self.zeros::<u8>("bandwidth probe", n)?;
        let op = "bandwidth probe";
        self.stream.memcpy_dtod(&src, &mut dst).map_err(dev(op))?;
        self.synchronize()?;
        let mut best = 0f64;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            self.stream.memcpy_dtod(&src, &mut dst).map_err(dev(op))?;
            self.synchronize()?;
            best = best.max(2.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        Ok(best)
    }

    /// A launch of `f` on this backend's stream (launch.rs).
    pub(crate) fn launch<'a>(&'a self, f: &'a CudaFunction) -> crate::launch::Launch<'a> {
        crate::launch::Launch::new(self, f)
    }

    /// The kernel `name` of `fam`, looked up once.
    pub(crate) fn func(&self, fam: Family, name: &'static str) -> Result<CudaFunction> {
        let mut funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = funcs.get(name) {
            return Ok(f.clone());
        }
        let mut last = None;
        let found = self.modules[&fam]
            .iter()
            .find_map(|m| match m.load_function(name) {
                Ok(f) => Some(f),
                Err(e) => {
                    last = Some(e);
                    None
                }
            });
        let f = found.ok_or_else(|| CoreError::Device {
            op: "loading a CUDA kernel",
            msg: format!("{name} in kernels/{}: {last:?}", fam.file()),
        })?;
        funcs.insert(name, f.clone());
        Ok(f)
    }

    /// A zeroed device allocation of `len` elements (at least one, which cudarc needs).
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        what: &'static str,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.cur_stream()
            .alloc_zeros::<T>(len.max(1))
            .map_err(|e| CoreError::Device {
                op: "allocating device memory",
                msg: format!(
                    "{what}: {} bytes: {e}",
                    len as u128 * std::mem::size_of::<T>() as u128
                ),
            })
    }
}

/// Forgets the quantized activations when a step ends, however it ends.
struct ForgetOnDrop<'a>(&'a crate::quant::QuantState);

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.forget();
    }
}

fn graphs_default() -> bool {
    std::env::var("GLINT_CUDA_GRAPHS").map_or(true, |v| v != "0")
}

impl Backend for CudaBackend {
    type Buf = CudaBuf;
    type Ids = CudaIds;
    type Weight<'a> = CudaWeight;
    type Cache = CudaCache;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_memory(&self) -> Option<(u64, u64)> {
        let _ = self.ctx.bind_to_thread();
        cudarc::driver::result::mem_get_info()
            .ok()
            .map(|(free, total)| (free as u64, total as u64))
    }

    fn bandwidth_probe(&self) -> Option<Result<f64>> {
        Some(self.copy_bandwidth())
    }

    fn supports_weight_type(&self, ty: GgmlType) -> bool {
        crate::quant::supports(ty)
    }

    fn run_recorded<E: From<CoreError>>(
        &self,
        key: u64,
        f: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        // Quantized activations are reused only within a step (crates/glint-cuda/src/quant.rs).
        self.quant.forget();
        let _forget = ForgetOnDrop(&self.quant);
        let Some(graphs) = &self.graphs else {
            return f();
        };
        let mut graphs = graphs.lock().unwrap_or_else(|p| p.into_inner());
        match graphs.get(&key) {
            None => {
                graphs.insert(key, Recording::Seen);
                drop(graphs);
                f()
            }
            Some(Recording::Graph(g)) => Ok(g.0.launch().map_err(dev("replaying a CUDA graph"))?),
            Some(Recording::Seen) => {
                let op = "recording a CUDA graph";
                self.stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(dev(op))?;
                let ran = f();
                let ended = self.stream.end_capture(CUgraphInstantiate_flags(0));
                ran?;
                let g = ended.map_err(dev(op))?.ok_or(CoreError::Device {
                    op,
                    msg: "the capture recorded nothing".into(),
                })?;
                g.launch().map_err(dev("replaying a CUDA graph"))?;
                tracing::debug!(key, "recorded a step as a CUDA graph");
                graphs.insert(key, Recording::Graph(Graph(g)));
                Ok(())
            }
        }
    }

    fn branch_begin(&self) -> Result<()> {
        crate::fork::begin(self)
    }
    fn branch_to(&self, to: glint_core::Branch) -> Result<()> {
        crate::fork::to(self, to)
    }
    fn branch_end(&self) -> Result<()> {
        crate::fork::end(self)
    }

    fn kv_bucket(&self, max_seen: usize, capacity: usize) -> usize {
        if self.graphs.is_none() {
            return max_seen;
        }
        max_seen
            .div_ceil(KV_BUCKET)
            .saturating_mul(KV_BUCKET)
            .min(capacity)
            .max(max_seen)
    }

    fn prepare_step(&self, s: &StepSizes) -> Result<()> {
        self.quant.prepare(self, s)?;
        self.attn.prepare(self, s)
    }

    // ---- memory ----------------------------------------------------------------------------
    fn alloc(&self, len: usize) -> Result<CudaBuf> {
        Ok(CudaBuf::new(self.zeros("buffer", len)?, len))
    }
    fn upload(&self, host: &[f32]) -> Result<CudaBuf> {
        let mut b = self.alloc(host.len())?;
        self.write(&mut b, host)?;
        Ok(b)
    }
    fn download(&self, buf: &CudaBuf, out: &mut [f32]) -> Result<()> {
        need("download", "buffer", out.len(), buf.len)?;
        if out.is_empty() {
            return Ok(());
        }
        let view = buf.data().slice(..out.len());
        self.stream
            .memcpy_dtoh(&view, out)
            .map_err(dev("download"))?;
        self.synchronize()
    }
    fn buf_len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }
    fn upload_ids(&self, host: &[u32]) -> Result<CudaIds> {
        let mut b = self.alloc_ids(host.len())?;
        self.write_ids(&mut b, host)?;
        Ok(b)
    }
    fn alloc_ids(&self, len: usize) -> Result<CudaIds> {
        Ok(CudaIds {
            data: self.zeros("id buffer", len)?,
            len,
        })
    }
    fn download_ids(&self, ids: &CudaIds, out: &mut [u32]) -> Result<()> {
        need("download_ids", "ids", out.len(), ids.len)?;
        if out.is_empty() {
            return Ok(());
        }
        let view = ids.data.slice(..out.len());
        self.stream
            .memcpy_dtoh(&view, out)
            .map_err(dev("download_ids"))?;
        self.synchronize()
    }
    fn write(&self, buf: &mut CudaBuf, host: &[f32]) -> Result<()> {
        need("write", "buffer", host.len(), buf.len)?;
        if host.is_empty() {
            return Ok(());
        }
        let mut view = buf.data_mut().slice_mut(..host.len());
        self.stream
            .memcpy_htod(host, &mut view)
            .map_err(dev("write"))
    }
    fn write_ids(&self, ids: &mut CudaIds, host: &[u32]) -> Result<()> {
        need("write_ids", "ids", host.len(), ids.len)?;
        if host.is_empty() {
            return Ok(());
        }
        let mut view = ids.data.slice_mut(..host.len());
        self.stream
            .memcpy_htod(host, &mut view)
            .map_err(dev("write_ids"))
    }
    fn alloc_cache(&self, rows: usize, dim: usize, ty: CacheType) -> Result<CudaCache> {
        let bytes = CudaCache::bytes(rows, dim, ty).ok_or(CoreError::Param {
            op: "alloc_cache",
            msg: format!("{rows} rows of {dim} values overflow"),
        })?;
        Ok(CudaCache {
            data: self.zeros("KV cache", bytes)?,
            rows,
            dim,
            ty,
        })
    }
    fn cache_set_rows(
        &self,
        src: &CudaBuf,
        slots: &CudaIds,
        n: usize,
        cache: &mut CudaCache,
    ) -> Result<()> {
        crate::elementwise::cache_set_rows(self, src, slots, n, cache)
    }
    fn cache_download(&self, cache: &CudaCache, out: &mut [f32]) -> Result<()> {
        crate::elementwise::cache_download(self, cache, out)
    }
    fn upload_weight<'a>(
        &self,
        name: &str,
        ty: GgmlType,
        dims: &[usize],
        bytes: Cow<'a, [u8]>,
    ) -> Result<CudaWeight> {
        crate::quant::upload_weight(self, name, ty, dims, &bytes)
    }

    // ---- linear algebra ---------------------------------------------------------------------
    fn matmul(&self, w: &CudaWeight, x: &CudaBuf, n: usize, y: &mut CudaBuf) -> Result<()> {
        crate::quant::matmul(self, w, x, n, y)
    }
    fn mul_mat_id(
        &self,
        w: &CudaWeight,
        ids: &CudaIds,
        n_used: usize,
        x: &CudaBuf,
        x_per_slot: bool,
        n: usize,
        y: &mut CudaBuf,
    ) -> Result<()> {
        crate::quant::mul_mat_id(self, w, ids, n_used, x, x_per_slot, n, y)
    }
    fn per_head_matmul(
        &self,
        w: &CudaWeight,
        head_ids: &CudaIds,
        n_heads: usize,
        x: &CudaBuf,
        n_tokens: usize,
        y: &mut CudaBuf,
    ) -> Result<()> {
        if crate::quant::per_head_on_cublas(self, w, n_heads, x, n_tokens, y)? {
            return Ok(());
        }
        crate::quant::per_head(self, w, head_ids, n_heads, x, n_tokens, y)
    }
    fn matmul_pair(
        &self,
        a: &CudaWeight,
        b: &CudaWeight,
        x: &CudaBuf,
        n: usize,
        ya: &mut CudaBuf,
        yb: &mut CudaBuf,
    ) -> Result<()> {
        crate::quant::matmul_pair(self, a, b, x, n, ya, yb)
    }
    fn mul_mat_id_planned_pair(
        &self,
        a: &CudaWeight,
        b: &CudaWeight,
        ids: &CudaIds,
        _plan: &CudaIds,
        n_used: usize,
        x: &CudaBuf,
        x_per_slot: bool,
        n: usize,
        ya: &mut CudaBuf,
        yb: &mut CudaBuf,
    ) -> Result<()> {
        crate::quant::mul_mat_id_pair(self, a, b, ids, n_used, x, x_per_slot, n, ya, yb)
    }
    fn matmul_glu(
        &self,
        w: &CudaWeight,
        g: &CudaBuf,
        u: &CudaBuf,
        n: usize,
        d_ff: usize,
        h: &mut CudaBuf,
        y: &mut CudaBuf,
    ) -> Result<()> {
        if d_ff != w.cols() || !crate::quant::glu_activation(self, w, g, u, n, h)? {
            self.silu_mul(g, u, n * d_ff, h)?;
        }
        crate::quant::matmul(self, w, h, n, y)
    }
    fn mul_mat_id_planned_glu(
        &self,
        w: &CudaWeight,
        ids: &CudaIds,
        _plan: &CudaIds,
        n_used: usize,
        g: &CudaBuf,
        u: &CudaBuf,
        n: usize,
        d_ff: usize,
        h: &mut CudaBuf,
        y: &mut CudaBuf,
    ) -> Result<()> {
        let rows = n * n_used;
        if d_ff != w.cols() || !crate::quant::glu_activation(self, w, g, u, rows, h)? {
            self.silu_mul(g, u, rows * d_ff, h)?;
        }
        crate::quant::mul_mat_id(self, w, ids, n_used, h, true, n, y)
    }
    fn get_rows(&self, w: &CudaWeight, ids: &CudaIds, n: usize, out: &mut CudaBuf) -> Result<()> {
        crate::quant::get_rows(self, w, ids, n, out)
    }

    // ---- element-wise and row-wise ----------------------------------------------------------
    fn rms_norm(
        &self,
        x: &CudaBuf,
        w: &CudaBuf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::norm(self, x, w, None, rows, dim, eps, y)
    }
    fn layer_norm(
        &self,
        x: &CudaBuf,
        w: &CudaBuf,
        b: &CudaBuf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::norm(self, x, w, Some(b), rows, dim, eps, y)
    }
    fn rope(
        &self,
        x: &mut CudaBuf,
        positions: &CudaIds,
        inv_freq: &CudaBuf,
        p: &RopeParams,
    ) -> Result<()> {
        crate::elementwise::rope(self, x, positions, inv_freq, p)
    }
    fn rope_split_for(
        &self,
        x: &mut CudaBuf,
        positions: &CudaIds,
        inv_freq: &CudaBuf,
        p: &RopeParams,
        cols: usize,
        y: &mut CudaBuf,
        next: &CudaWeight,
    ) -> Result<()> {
        if self.rope_split_fused(x, positions, inv_freq, p, cols, y, next)? {
            return Ok(());
        }
        glint_core::rope_then_copy(self, x, positions, inv_freq, p, cols, y)
    }
    fn add_rms_norm(
        &self,
        h: &mut CudaBuf,
        d: &CudaBuf,
        w: &CudaBuf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::add_rms_norm(self, h, d, w, rows, dim, eps, y)
    }
    fn rms_norm_for(
        &self,
        x: &CudaBuf,
        w: &CudaBuf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut CudaBuf,
        next: &CudaWeight,
    ) -> Result<()> {
        use crate::quant::{norm_activation, NormIn};
        if norm_activation(self, NormIn::Plain(x), w, rows, dim, eps, y, next)? {
            return Ok(());
        }
        self.rms_norm(x, w, rows, dim, eps, y)
    }
    fn add_rms_norm_for(
        &self,
        h: &mut CudaBuf,
        d: &CudaBuf,
        w: &CudaBuf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut CudaBuf,
        next: &CudaWeight,
    ) -> Result<()> {
        use crate::quant::{norm_activation, NormIn};
        if norm_activation(self, NormIn::Add(h, d), w, rows, dim, eps, y, next)? {
            return Ok(());
        }
        self.add_rms_norm(h, d, w, rows, dim, eps, y)
    }
    fn indexer_k_rows(
        &self,
        raw: &CudaBuf,
        w: &CudaBuf,
        b: &CudaBuf,
        eps: f32,
        rope: &RopeParams,
        positions: &CudaIds,
        inv_freq: &CudaBuf,
        slots: &CudaIds,
        cache: &mut CudaCache,
        out: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::indexer_k_rows(
            self, raw, w, b, eps, rope, positions, inv_freq, slots, cache, out,
        )
    }
    fn mla_kv_rows(
        &self,
        kv: &mut CudaBuf,
        norm: &CudaBuf,
        eps: f32,
        kv_lora: usize,
        rope: &RopeParams,
        positions: &CudaIds,
        inv_freq: &CudaBuf,
        slots: &CudaIds,
        cache: &mut CudaCache,
        _scratch: [&mut CudaBuf; 2],
    ) -> Result<()> {
        crate::elementwise::mla_kv_rows(
            self, kv, norm, eps, kv_lora, rope, positions, inv_freq, slots, cache,
        )
    }
    fn silu_mul(&self, gate: &CudaBuf, up: &CudaBuf, n: usize, out: &mut CudaBuf) -> Result<()> {
        crate::elementwise::silu_mul(self, gate, up, n, out)
    }
    fn add(&self, a: &mut CudaBuf, b: &CudaBuf, n: usize) -> Result<()> {
        crate::elementwise::add(self, a, b, n)
    }
    fn scale(&self, a: &mut CudaBuf, s: f32, n: usize) -> Result<()> {
        crate::elementwise::scale(self, a, s, n)
    }
    fn copy2d(
        &self,
        src: &CudaBuf,
        from: Rows,
        dst: &mut CudaBuf,
        to: Rows,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        crate::elementwise::copy2d(self, src, from, dst, to, rows, cols)
    }
    fn set_rows(
        &self,
        src: &CudaBuf,
        dim: usize,
        slots: &CudaIds,
        n: usize,
        dst: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::set_rows(self, src, dim, slots, n, dst)
    }
    fn gather_rows(
        &self,
        src: &CudaBuf,
        dim: usize,
        rows: &CudaIds,
        n: usize,
        dst: &mut CudaBuf,
    ) -> Result<()> {
        crate::elementwise::gather_rows(self, src, dim, rows, n, dst)
    }

    // ---- coarse fused ops -------------------------------------------------------------------
    fn moe_route(
        &self,
        logits: &CudaBuf,
        bias: Option<&CudaBuf>,
        n_tokens: usize,
        p: &RouterParams,
        ids: &mut CudaIds,
        weights: &mut CudaBuf,
    ) -> Result<()> {
        crate::moe::route(self, logits, bias, n_tokens, p, ids, weights)
    }
    fn moe_combine(
        &self,
        y: &CudaBuf,
        weights: &CudaBuf,
        n_tokens: usize,
        n_used: usize,
        dim: usize,
        out: &mut CudaBuf,
    ) -> Result<()> {
        crate::moe::combine(self, y, weights, n_tokens, n_used, dim, None, out)
    }
    fn moe_combine_add(
        &self,
        y: &CudaBuf,
        weights: &CudaBuf,
        n_tokens: usize,
        n_used: usize,
        dim: usize,
        add: &CudaBuf,
        out: &mut CudaBuf,
    ) -> Result<()> {
        crate::moe::combine(self, y, weights, n_tokens, n_used, dim, Some(add), out)
    }
    fn moe_local_experts(
        &self,
        ids: &mut CudaIds,
        weights: &mut CudaBuf,
        n_tokens: usize,
        n_used: usize,
        first: u32,
        count: u32,
    ) -> Result<()> {
        crate::moe::local_experts(self, ids, weights, n_tokens, n_used, first, count)
    }
    fn indexer_scores(
        &self,
        q: &CudaBuf,
        w: &CudaBuf,
        keys: &CudaCache,
        positions: &CudaIds,
        pages: &Pages<'_, Self>,
        p: &IndexerParams,
        out: &mut CudaBuf,
    ) -> Result<()> {
        crate::attention::indexer_scores(self, q, w, keys, positions, pages, p, out, None)
    }
    fn indexer_scratch_len(&self, n_tokens: usize, n_kv: usize) -> usize {
        crate::attention::indexer_scratch_len(n_tokens, n_kv)
    }
    fn indexer_select(
        &self,
        q: &CudaBuf,
        w: &CudaBuf,
        keys: &CudaCache,
        positions: &CudaIds,
        pages: &Pages<'_, Self>,
        p: &IndexerParams,
        top_k: usize,
        scratch: &mut CudaBuf,
        out: &mut CudaIds,
    ) -> Result<()> {
        crate::attention::indexer_select(self, q, w, keys, positions, pages, p, top_k, scratch, out)
    }
    fn top_k(&self, x: &CudaBuf, rows: usize, n: usize, k: usize, ids: &mut CudaIds) -> Result<()> {
        crate::attention::top_k(self, x, rows, n, k, ids)
    }
    fn mla_attention(
        &self,
        q: &CudaBuf,
        cache: &CudaCache,
        positions: &CudaIds,
        pages: &Pages<'_, Self>,
        selected: Option<&CudaIds>,
        p: &AttnParams,
        out: &mut CudaBuf,
    ) -> Result<()> {
        crate::attention::mla_attention(self, q, None, cache, positions, pages, selected, p, out)
    }
    fn mla_attention_parts(
        &self,
        q_lat: &CudaBuf,
        q_pe: &CudaBuf,
        pe: Rows,
        _q: &mut CudaBuf,
        cache: &CudaCache,
        positions: &CudaIds,
        pages: &Pages<'_, Self>,
        selected: Option<&CudaIds>,
        p: &AttnParams,
        out: &mut CudaBuf,
    ) -> Result<()> {
        let qp = Some((q_pe, pe));
        crate::attention::mla_attention(self, q_lat, qp, cache, positions, pages, selected, p, out)
    }
}
