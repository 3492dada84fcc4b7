//! The `Backend` trait: the device buffers and the coarse ops the MLA + MoE models are written
//! against, once. A backend owns its memory; model code only moves handles around and never
//! touches floats on the host except to upload inputs and download logits.
//!
//! Conventions shared by every op:
//! * buffers are flat and row-major; a "[n × d]" buffer holds `n` rows of `d` values;
//! * buffers may be longer than the op needs (they are reused across batches); ops read and write
//!   only the prefix they are told about;
//! * a weight is a GGUF tensor `{ne0 = cols, ne1 = rows, ne2 = slices}`: row `r` of slice `e` holds
//!   `cols` values, and a linear layer computes `y[r] = Σ_c W[r][c]·x[c]`;
//! * sizes in op arguments are what the host knows before the step (token counts, capacities);
//!   what changes per step (ids, positions, cache slots, block tables) lives in device buffers
//!   written with `write_ids` before the step, so a recorded step (a CUDA graph) stays valid;
//! * ids in device buffers are the caller's check (the host validates them before writing);
//!   a backend only promises memory safety for ids that are out of range.

use std::borrow::Cow;

use glint_gguf::GgmlType;

use crate::cache_type::CacheType;
use crate::error::{CoreError, Result};
use crate::params::{AttnParams, IndexerParams, RopeParams, RouterParams, Rows, StepSizes};

pub trait Backend: Send + Sync {
    /// A device buffer of f32.
    type Buf: Send + Sync;
    /// A device buffer of u32 (token ids, positions, expert ids, selected key indices).
    type Ids: Send + Sync;
    /// A weight bound once at load time. The lifetime lets the CPU backend keep a zero-copy view
    /// of the mmapped file; a GPU backend copies the bytes to the device and ignores it.
    type Weight<'a>: Send + Sync;
    /// A paged cache pool: rows of a fixed width stored as a [`CacheType`]; attention and the
    /// indexer read it, `cache_set_rows` writes it.
    type Cache: Send + Sync;

    fn name(&self) -> &'static str;
    /// Whether `upload_weight` + the matmul ops accept this GGML type.
    fn supports_weight_type(&self, ty: GgmlType) -> bool;

    /// Runs one step's worth of ops: where the backend wants them issued from. The default
    /// runs `f` here; the CPU backend runs it on a thread of its pool, so each op's parallel
    /// loop starts on a worker instead of waking one and waiting for it (which, for decode's
    /// many small ops, costs more than the ops).
    fn run_step<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Runs the device part of a step, `f`: ops whose every argument (sizes, buffers) is fixed
    /// by `key`, reading per-step values only from buffers written before it. A GPU backend
    /// records `f` once per key (a CUDA graph) and from then on replays the recording without
    /// calling `f`; the default calls `f`. The caller guarantees `f` neither allocates nor
    /// reads back to the host, and that equal keys mean equal op sequences.
    fn run_recorded<E: From<crate::error::CoreError>>(
        &self,
        key: u64,
        f: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let _ = key;
        f()
    }

    /// Issues ops as two chains that a backend may run at the same time (`f` places each
    /// piece on one through [`Branches`]): a decode step's small launches leave most of a GPU
    /// idle, so the indexer's keys, scores and top-k run beside the query path, the shared
    /// expert beside the router and the routed experts. A chain sees everything issued before
    /// the call and, for a [`Branches::side_after_main`] piece, the main chain's pieces issued
    /// before it; otherwise neither chain may read or write what the other writes, and nothing
    /// the ops use may be allocated inside. Work issued after the call sees both chains. The
    /// default runs the pieces in the order given.
    fn branches<R, E: From<crate::error::CoreError>>(
        &self,
        f: impl FnOnce(&Branches<'_, Self>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        Self: Sized,
    {
        self.branch_begin()?;
        let r = f(&Branches { be: self });
        // Ended whatever `f` returned: a recording must not end with a chain still open.
        let ended = self.branch_end();
        let r = r?;
        ended?;
        Ok(r)
    }

    /// `side` beside `main` ([`Backend::branches`] with one piece each).
    fn concurrently<R, E: From<crate::error::CoreError>>(
        &self,
        side: impl FnOnce() -> std::result::Result<(), E>,
        main: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        Self: Sized,
    {
        self.branches(|b| {
            b.side(side)?;
            b.main(main)
        })
    }

    /// [`Backend::branches`]' steps, for a backend that runs the chains apart (the default
    /// does nothing): the chains fork from everything issued so far.
    fn branch_begin(&self) -> Result<()> {
        Ok(())
    }
    /// Later ops go to `to` (the side chain waiting first for the main chain so far, for
    /// [`Branch::SideAfterMain`]).
    fn branch_to(&self, to: Branch) -> Result<()> {
        let _ = to;
        Ok(())
    }
    /// The chains join: later ops see both.
    fn branch_end(&self) -> Result<()> {
        Ok(())
    }

    /// The key count a step's ops are sized for, given the most keys one of its tokens sees
    /// (`max_seen`) and the step state's key capacity. The default is `max_seen`; a backend
    /// that records steps rounds it up so that decode steps over a growing context share one
    /// recording (ops see more key slots, masked by position, with the same result).
    fn kv_bucket(&self, max_seen: usize, capacity: usize) -> usize {
        let _ = capacity;
        max_seen
    }

    /// Sizes the backend's own scratch for steps up to `s`, once at load (default: nothing to
    /// size). After it, a step within those sizes allocates nothing.
    fn prepare_step(&self, s: &StepSizes) -> Result<()> {
        let _ = s;
        Ok(())
    }

    /// (free, total) bytes of the backend's own memory, where it has a fixed amount (a GPU);
    /// `None` for host memory. Loading checks the weights fit before uploading any.
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }

    /// Streaming bandwidth of the backend's own memory in GB/s (bytes read + written per
    /// second by a large device copy), measured now; `None` for host memory, which the caller
    /// probes itself. A roofline is weight bytes per token over this.
    fn bandwidth_probe(&self) -> Option<Result<f64>> {
        None
    }

    // ---- memory ----------------------------------------------------------------------------
    /// A zero-filled buffer of `len` floats.
    fn alloc(&self, len: usize) -> Result<Self::Buf>;
    fn upload(&self, host: &[f32]) -> Result<Self::Buf>;
    /// Copies the first `out.len()` floats of `buf` to the host.
    fn download(&self, buf: &Self::Buf, out: &mut [f32]) -> Result<()>;
    fn buf_len(&self, buf: &Self::Buf) -> usize;
    fn upload_ids(&self, host: &[u32]) -> Result<Self::Ids>;
    /// A zero-filled id buffer of `len` entries (outputs of `moe_route` / `top_k`).
    fn alloc_ids(&self, len: usize) -> Result<Self::Ids>;
    /// Copies the first `out.len()` ids of `ids` to the host.
    fn download_ids(&self, ids: &Self::Ids, out: &mut [u32]) -> Result<()>;
    /// Overwrites the first `host.len()` floats of an existing buffer (no allocation).
    fn write(&self, buf: &mut Self::Buf, host: &[f32]) -> Result<()>;
    /// Overwrites the first `host.len()` ids of an existing id buffer: how per-step values (token
    /// ids, positions, slots, block tables) reach the device without new allocations.
    fn write_ids(&self, ids: &mut Self::Ids, host: &[u32]) -> Result<()>;
    /// A zero-filled cache of `rows` rows of `dim` values stored as `ty`.
    fn alloc_cache(&self, rows: usize, dim: usize, ty: CacheType) -> Result<Self::Cache>;
    /// Row `i < n` of `src [n × dim]` goes, rounded to the cache's type, to cache row
    /// `slots[i]`.
    fn cache_set_rows(
        &self,
        src: &Self::Buf,
        slots: &Self::Ids,
        n: usize,
        cache: &mut Self::Cache,
    ) -> Result<()>;
    /// The first `out.len() / dim` rows of the cache, decoded to f32 (tests, debugging).
    fn cache_download(&self, cache: &Self::Cache, out: &mut [f32]) -> Result<()>;
    /// Binds a GGUF tensor. `dims` is in GGUF order (`ne0` first). Validates the byte length.
    fn upload_weight<'a>(
        &self,
        name: &str,
        ty: GgmlType,
        dims: &[usize],
        bytes: Cow<'a, [u8]>,
    ) -> Result<Self::Weight<'a>>;

    // ---- linear algebra ---------------------------------------------------------------------
    /// `y[t][r] = Σ_c W[r][c]·x[t][c]` for `t < n_tokens`; `W` is 2-D `{cols, rows}`.
    fn matmul(
        &self,
        w: &Self::Weight<'_>,
        x: &Self::Buf,
        n_tokens: usize,
        y: &mut Self::Buf,
    ) -> Result<()>;
    /// Expert-indexed matmul (ggml `mul_mat_id`) over a 3-D weight `{cols, rows, n_slices}`:
    /// `y[t][k] = W[ids[t·n_used + k]] · x'` where `x'` is `x[t]` (`x_per_slot = false`) or
    /// `x[t][k]` (`x_per_slot = true`). Also serves per-head batched products (ids = head index).
    #[allow(clippy::too_many_arguments)]
    fn mul_mat_id(
        &self,
        w: &Self::Weight<'_>,
        ids: &Self::Ids,
        n_used: usize,
        x: &Self::Buf,
        x_per_slot: bool,
        n_tokens: usize,
        y: &mut Self::Buf,
    ) -> Result<()>;
    /// Ids a routing plan for `n_tokens × n_used` expert choices over `n_expert` experts needs
    /// (see [`Self::moe_plan`]).
    fn moe_plan_len(&self, n_tokens: usize, n_used: usize, n_expert: usize) -> usize {
        n_tokens * n_used + n_expert + 1
    }
    /// Fusion point: groups the (token, slot) pairs of `ids` by expert once per MoE layer, so
    /// the gate, up and down products ([`Self::mul_mat_id_planned`]) reuse it. The default
    /// writes nothing: the CPU's `mul_mat_id` groups internally.
    fn moe_plan(
        &self,
        ids: &Self::Ids,
        n_tokens: usize,
        n_used: usize,
        n_expert: usize,
        plan: &mut Self::Ids,
    ) -> Result<()> {
        let _ = (ids, n_tokens, n_used, n_expert, plan);
        Ok(())
    }
    /// [`Self::mul_mat_id`] with the plan [`Self::moe_plan`] made from the same `ids`.
    #[allow(clippy::too_many_arguments)]
    fn mul_mat_id_planned(
        &self,
        w: &Self::Weight<'_>,
        ids: &Self::Ids,
        plan: &Self::Ids,
        n_used: usize,
        x: &Self::Buf,
        x_per_slot: bool,
        n_tokens: usize,
        y: &mut Self::Buf,
    ) -> Result<()> {
        let _ = plan;
        self.mul_mat_id(w, ids, n_used, x, x_per_slot, n_tokens, y)
    }
    /// `ya = A·x` and `yb = B·x` for one `x` (a gate and an up projection): what two
    /// [`Self::matmul`] calls give, bit for bit; a backend may run them as one launch.
    #[allow(clippy::too_many_arguments)]
    fn matmul_pair(
        &self,
        a: &Self::Weight<'_>,
        b: &Self::Weight<'_>,
        x: &Self::Buf,
        n_tokens: usize,
        ya: &mut Self::Buf,
        yb: &mut Self::Buf,
    ) -> Result<()> {
        self.matmul(a, x, n_tokens, ya)?;
        self.matmul(b, x, n_tokens, yb)
    }
    /// [`Self::mul_mat_id_planned`] of two weights over the same ids, plan and `x`: what two
    /// calls give, bit for bit; a backend may run them as one launch.
    #[allow(clippy::too_many_arguments)]
    fn mul_mat_id_planned_pair(
        &self,
        a: &Self::Weight<'_>,
        b: &Self::Weight<'_>,
        ids: &Self::Ids,
        plan: &Self::Ids,
        n_used: usize,
        x: &Self::Buf,
        x_per_slot: bool,
        n_tokens: usize,
        ya: &mut Self::Buf,
        yb: &mut Self::Buf,
    ) -> Result<()> {
        self.mul_mat_id_planned(a, ids, plan, n_used, x, x_per_slot, n_tokens, ya)?;
        self.mul_mat_id_planned(b, ids, plan, n_used, x, x_per_slot, n_tokens, yb)
    }
    /// SwiGLU's down projection: `h = silu(g) ⊙ u` over `n_tokens × d_ff` (what
    /// [`Self::silu_mul`] writes), then `y = W·h` (what [`Self::matmul`] gives); a backend may
    /// compute h where it prepares h for the product, one pass fewer.
    #[allow(clippy::too_many_arguments)]
    fn matmul_glu(
        &self,
        w: &Self::Weight<'_>,
        g: &Self::Buf,
        u: &Self::Buf,
        n_tokens: usize,
        d_ff: usize,
        h: &mut Self::Buf,
        y: &mut Self::Buf,
    ) -> Result<()> {
        self.silu_mul(g, u, n_tokens * d_ff, h)?;
        self.matmul(w, h, n_tokens, y)
    }
    /// The routed experts' down projection: `h = silu(g) ⊙ u` over `n_tokens × n_used × d_ff`,
    /// then [`Self::mul_mat_id_planned`] of `w` over h, one row a slot (x per slot).
    #[allow(clippy::too_many_arguments)]
    fn mul_mat_id_planned_glu(
        &self,
        w: &Self::Weight<'_>,
        ids: &Self::Ids,
        plan: &Self::Ids,
        n_used: usize,
        g: &Self::Buf,
        u: &Self::Buf,
        n_tokens: usize,
        d_ff: usize,
        h: &mut Self::Buf,
        y: &mut Self::Buf,
    ) -> Result<()> {
        self.silu_mul(g, u, n_tokens * n_used * d_ff, h)?;
        self.mul_mat_id_planned(w, ids, plan, n_used, h, true, n_tokens, y)
    }
    /// Row gather from a (possibly quantized) 2-D weight: `out[i] = W[ids[i]]` as f32.
    fn get_rows(
        &self,
        w: &Self::Weight<'_>,
        ids: &Self::Ids,
        n: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;

    // ---- element-wise and row-wise ----------------------------------------------------------
    /// `y[i] = w ⊙ x[i] / sqrt(mean(x[i]²) + eps)` for each of `rows` rows of width `dim`.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm(
        &self,
        x: &Self::Buf,
        w: &Self::Buf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<()>;
    /// The DSA indexer's new key rows, in one op where a backend can: `out = layer_norm(raw)`
    /// (weight `w`, bias `b`, `eps`, rows of `rope.head_dim`), RoPE'd in place (`rope`), and
    /// row `i < rope.n_tokens` written, rounded to the cache's type, to cache row `slots[i]`
    /// (the default: `layer_norm`, `rope`, `cache_set_rows`).
    #[allow(clippy::too_many_arguments)]
    fn indexer_k_rows(
        &self,
        raw: &Self::Buf,
        w: &Self::Buf,
        b: &Self::Buf,
        eps: f32,
        rope: &RopeParams,
        positions: &Self::Ids,
        inv_freq: &Self::Buf,
        slots: &Self::Ids,
        cache: &mut Self::Cache,
        out: &mut Self::Buf,
    ) -> Result<()> {
        let (n, dim) = (rope.n_tokens, rope.n_heads * rope.head_dim);
        self.layer_norm(raw, w, b, n, dim, eps, out)?;
        self.rope(out, positions, inv_freq, rope)?;
        self.cache_set_rows(out, slots, n, cache)
    }
    /// The residual add and the next RMSNorm in one op where a backend can: `h[i] += d[i]`
    /// over `rows × dim`, then `y = rms_norm(h)` (as [`Backend::add`] then
    /// [`Backend::rms_norm`], which is the default).
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm(
        &self,
        h: &mut Self::Buf,
        d: &Self::Buf,
        w: &Self::Buf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<()> {
        self.add(h, d, rows * dim)?;
        self.rms_norm(h, w, rows, dim, eps, y)
    }
    /// [`Backend::rms_norm`] whose output a product with `next` reads next: a backend that
    /// quantizes activations for its products may do so for `next` in the norm's launch (the
    /// CUDA backend: one launch where there were two). y is the same either way; the default
    /// is `rms_norm`.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_for(
        &self,
        x: &Self::Buf,
        w: &Self::Buf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Self::Buf,
        next: &Self::Weight<'_>,
    ) -> Result<()> {
        let _ = next;
        self.rms_norm(x, w, rows, dim, eps, y)
    }
    /// [`Backend::add_rms_norm`] whose output a product with `next` reads next (see
    /// [`Backend::rms_norm_for`]); the default is `add_rms_norm`.
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm_for(
        &self,
        h: &mut Self::Buf,
        d: &Self::Buf,
        w: &Self::Buf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Self::Buf,
        next: &Self::Weight<'_>,
    ) -> Result<()> {
        let _ = next;
        self.add_rms_norm(h, d, w, rows, dim, eps, y)
    }
    /// LayerNorm with weight and bias (mean-centred, biased variance).
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        x: &Self::Buf,
        w: &Self::Buf,
        b: &Self::Buf,
        rows: usize,
        dim: usize,
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<()>;
    /// Rotates, in place, dims `[offset, offset + n_rot)` of every head of `x`
    /// (`[n_tokens × n_heads × head_dim]`), token `t` at angle `positions[t]·inv_freq[i]`.
    fn rope(
        &self,
        x: &mut Self::Buf,
        positions: &Self::Ids,
        inv_freq: &Self::Buf,
        p: &RopeParams,
    ) -> Result<()>;
    /// An absorbed-MLA query's two parts, in one op where a backend can: `x`
    /// (`[n_tokens × n_heads × head_dim]`) rotated in place as [`Backend::rope`] does with `p`,
    /// and the first `cols` values of each of its heads copied to `y` (`[n_tokens · n_heads ×
    /// cols]`), the rows a per-head product with `next` reads next: a backend that quantizes
    /// activations for its products may do so in the same launch (the CUDA backend: one launch
    /// where rope, the copy and the quantizer were three, on the query's critical path). The
    /// copy sees `x` after the rotation; the default runs `rope`, then `copy2d`.
    #[allow(clippy::too_many_arguments)]
    fn rope_split_for(
        &self,
        x: &mut Self::Buf,
        positions: &Self::Ids,
        inv_freq: &Self::Buf,
        p: &RopeParams,
        cols: usize,
        y: &mut Self::Buf,
        next: &Self::Weight<'_>,
    ) -> Result<()> {
        let _ = next;
        rope_then_copy(self, x, positions, inv_freq, p, cols, y)
    }
    /// An MLA layer's new latent cache rows, in one op where a backend can: `kv [n × row]`
    /// (`attn_kv_a`'s output, `row = kv_lora + rope.n_rot`) becomes, in place, its RMS-normed
    /// latent part (weight `norm`, `eps`) followed by its RoPE'd key part (`rope`: one head of
    /// `row`, offset `kv_lora`), and row `i < n` goes, rounded to the cache's type, to cache row
    /// `slots[i]`. The default runs `copy2d`, `rms_norm`, `copy2d`, `rope` and
    /// `cache_set_rows` through `scratch` (two buffers of at least `n · kv_lora`); a backend
    /// that fuses them leaves `scratch` alone.
    #[allow(clippy::too_many_arguments)]
    fn mla_kv_rows(
        &self,
        kv: &mut Self::Buf,
        norm: &Self::Buf,
        eps: f32,
        kv_lora: usize,
        rope: &RopeParams,
        positions: &Self::Ids,
        inv_freq: &Self::Buf,
        slots: &Self::Ids,
        cache: &mut Self::Cache,
        scratch: [&mut Self::Buf; 2],
    ) -> Result<()> {
        let (n, row) = (rope.n_tokens, rope.head_dim);
        let [raw, normed] = scratch;
        self.copy2d(kv, Rows::of(row), raw, Rows::of(kv_lora), n, kv_lora)?;
        self.rms_norm(raw, norm, n, kv_lora, eps, normed)?;
        self.copy2d(normed, Rows::of(kv_lora), kv, Rows::of(row), n, kv_lora)?;
        self.rope(kv, positions, inv_freq, rope)?;
        self.cache_set_rows(kv, slots, n, cache)
    }
    /// `out[i] = silu(gate[i])·up[i]` for `i < n` (SwiGLU, in f32).
    fn silu_mul(
        &self,
        gate: &Self::Buf,
        up: &Self::Buf,
        n: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// `a[i] += b[i]` for `i < n`.
    fn add(&self, a: &mut Self::Buf, b: &Self::Buf, n: usize) -> Result<()>;
    /// `a[i] *= s` for `i < n`.
    fn scale(&self, a: &mut Self::Buf, s: f32, n: usize) -> Result<()>;
    /// Strided 2-D copy: `rows` rows of `cols` values, row `r` from `src[from.off +
    /// r·from.stride ..]` to `dst[to.off + r·to.stride ..]`. Slicing and concatenation are
    /// this.
    fn copy2d(
        &self,
        src: &Self::Buf,
        from: Rows,
        dst: &mut Self::Buf,
        to: Rows,
        rows: usize,
        cols: usize,
    ) -> Result<()>;

    /// Scatter: row `i < n` of `src [n × dim]` goes to row `slots[i]` of `dst`. Cache writes
    /// are this op, so where a token lands is device data, not an op argument.
    fn set_rows(
        &self,
        src: &Self::Buf,
        dim: usize,
        slots: &Self::Ids,
        n: usize,
        dst: &mut Self::Buf,
    ) -> Result<()>;
    /// Gather: row `i < n` of `dst` is row `rows[i]` of `src [· × dim]`.
    fn gather_rows(
        &self,
        src: &Self::Buf,
        dim: usize,
        rows: &Self::Ids,
        n: usize,
        dst: &mut Self::Buf,
    ) -> Result<()>;

    // ---- coarse fused ops -------------------------------------------------------------------
    /// MoE routing for `n_tokens` rows of router logits `[n × n_expert]`: gating function,
    /// selection bias, group-limited top-k, renormalisation and scaling. Writes
    /// `ids [n × n_used]` and `weights [n × n_used]`.
    fn moe_route(
        &self,
        logits: &Self::Buf,
        bias: Option<&Self::Buf>,
        n_tokens: usize,
        p: &RouterParams,
        ids: &mut Self::Ids,
        weights: &mut Self::Buf,
    ) -> Result<()>;
    /// `out[t] = Σ_k weights[t][k]·y[t][k]` for expert outputs `y [n × n_used × dim]`.
    fn moe_combine(
        &self,
        y: &Self::Buf,
        weights: &Self::Buf,
        n_tokens: usize,
        n_used: usize,
        dim: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// [`Self::moe_combine`], then `out += add` (the shared expert's output): what the two
    /// give, bit for bit; a backend may do both in one pass.
    #[allow(clippy::too_many_arguments)]
    fn moe_combine_add(
        &self,
        y: &Self::Buf,
        weights: &Self::Buf,
        n_tokens: usize,
        n_used: usize,
        dim: usize,
        add: &Self::Buf,
        out: &mut Self::Buf,
    ) -> Result<()> {
        self.moe_combine(y, weights, n_tokens, n_used, dim, out)?;
        self.add(out, add, n_tokens * dim)
    }
    /// Expert parallelism: this rank holds experts `first .. first + count` of the routed set.
    /// For each of the `n_tokens × n_used` choices, an expert it holds becomes its local index
    /// (`id − first`) and keeps its weight; any other becomes local expert 0 with weight 0, so
    /// `moe_combine` adds exactly the held experts' share and the ranks' shares sum to the
    /// whole. The default body goes through the host (`download_ids`/`write`): exact on any
    /// backend, free on the CPU; a backend that records steps overrides it with a kernel.
    #[allow(clippy::too_many_arguments)]
    fn moe_local_experts(
        &self,
        ids: &mut Self::Ids,
        weights: &mut Self::Buf,
        n_tokens: usize,
        n_used: usize,
        first: u32,
        count: u32,
    ) -> Result<()> {
        let len = n_tokens * n_used;
        let mut host_ids = vec![0u32; len];
        let mut host_w = vec![0f32; len];
        self.download_ids(ids, &mut host_ids)?;
        self.download(weights, &mut host_w)?;
        for (id, w) in host_ids.iter_mut().zip(host_w.iter_mut()) {
            match id.checked_sub(first) {
                Some(local) if local < count => *id = local,
                _ => {
                    *id = 0;
                    *w = 0.0;
                }
            }
        }
        self.write_ids(ids, &host_ids)?;
        self.write(weights, &host_w)
    }
    /// DSA lightning-indexer scores `out [n × n_kv]`:
    /// `out[s][t] = Σ_j w[s][j]·ReLU(q[s][j]·k[t])` for `t ≤ pos[s]`, `−∞` otherwise, where
    /// `k[t]` is logical key `t` of token `s`'s sequence, found through `pages` in the paged
    /// indexer-key pool `keys [rows × head_dim]`. `q` is `[n × n_heads × head_dim]`, `w`
    /// `[n × n_heads]` (already scaled); `p.n_kv` is the step's key capacity.
    #[allow(clippy::too_many_arguments)]
    fn indexer_scores(
        &self,
        q: &Self::Buf,
        w: &Self::Buf,
        keys: &Self::Cache,
        positions: &Self::Ids,
        pages: &Pages<'_, Self>,
        p: &IndexerParams,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// Floats of scratch [`Self::indexer_select`] needs for `n_tokens` queries over `n_kv`
    /// keys: the score matrix of the default body. A fused backend returns 0.
    fn indexer_scratch_len(&self, n_tokens: usize, n_kv: usize) -> usize {
        n_tokens * n_kv
    }
    /// Fusion point: the `top_k` logical key indices of each query by indexer score
    /// (`out [n × top_k]`, order unspecified). The default scores into `scratch`
    /// (`indexer_scratch_len` floats) and takes `top_k`; a GPU fuses both without the matrix.
    #[allow(clippy::too_many_arguments)]
    fn indexer_select(
        &self,
        q: &Self::Buf,
        w: &Self::Buf,
        keys: &Self::Cache,
        positions: &Self::Ids,
        pages: &Pages<'_, Self>,
        p: &IndexerParams,
        top_k: usize,
        scratch: &mut Self::Buf,
        out: &mut Self::Ids,
    ) -> Result<()> {
        self.indexer_scores(q, w, keys, positions, pages, p, scratch)?;
        self.top_k(scratch, p.n_tokens, p.n_kv, top_k, out)
    }
    /// Fusion point: per-head batched product `y[t][h] = W[h] · x[t][h]` over a 3-D weight
    /// `{cols, rows, n_heads}`. The default is `mul_mat_id` with `head_ids` (`[n × n_heads]`,
    /// `h` at every `t·n_heads + h`), which a fused backend does not need to read.
    #[allow(clippy::too_many_arguments)]
    fn per_head_matmul(
        &self,
        w: &Self::Weight<'_>,
        head_ids: &Self::Ids,
        n_heads: usize,
        x: &Self::Buf,
        n_tokens: usize,
        y: &mut Self::Buf,
    ) -> Result<()> {
        self.mul_mat_id(w, head_ids, n_heads, x, true, n_tokens, y)
    }
    /// Indices of the `k` largest values of each of `rows` rows of width `n` (`k ≤ n`), in an
    /// unspecified order; the set is deterministic, with ties going to the lower index.
    fn top_k(
        &self,
        x: &Self::Buf,
        rows: usize,
        n: usize,
        k: usize,
        ids: &mut Self::Ids,
    ) -> Result<()>;
    /// Absorbed-MLA attention: MQA over the paged latent pool `cache` (rows of `dk`) (one shared K
    /// row per token; V = its first `dv` values), output `[n × n_heads × dv]`; `q` is
    /// `[n × n_heads × dk]`. Query `s` sees logical key `t` of its sequence (row found through
    /// `pages`) iff `t ≤ positions[s]` and, when `selected` is given (`[n × p.n_selected]`
    /// logical key indices), `t` is among its selected keys. A query that sees at most
    /// `n_selected` keys attends to all of them in order (the selection would pick them all),
    /// so its result does not depend on what else is in the step.
    #[allow(clippy::too_many_arguments)]
    fn mla_attention(
        &self,
        q: &Self::Buf,
        cache: &Self::Cache,
        positions: &Self::Ids,
        pages: &Pages<'_, Self>,
        selected: Option<&Self::Ids>,
        p: &AttnParams,
        out: &mut Self::Buf,
    ) -> Result<()>;
    /// [`Backend::mla_attention`] with the query rows in the two parts absorbed MLA makes: row
    /// r's first `p.dv` values are row r of `q_lat` (`[n_tokens·n_heads × dv]`), its last
    /// `p.dk − p.dv` row r of `q_pe` laid out as `pe` (the RoPE'd part, inside the projected
    /// query's rows). The default assembles them into `q` (scratch, `[rows × dk]`) with two
    /// [`Backend::copy2d`] and runs `mla_attention`; a backend may read the parts where they
    /// are (the CUDA backend: two launches fewer a layer). The same result either way.
    #[allow(clippy::too_many_arguments)]
    fn mla_attention_parts(
        &self,
        q_lat: &Self::Buf,
        q_pe: &Self::Buf,
        pe: Rows,
        q: &mut Self::Buf,
        cache: &Self::Cache,
        positions: &Self::Ids,
        pages: &Pages<'_, Self>,
        selected: Option<&Self::Ids>,
        p: &AttnParams,
        out: &mut Self::Buf,
    ) -> Result<()> {
        let Some(dr) = p.dk.checked_sub(p.dv) else {
            return Err(CoreError::Param {
                op: "mla_attention",
                msg: format!("dv {} > dk {}", p.dv, p.dk),
            });
        };
        let rows = p.n_tokens * p.n_heads;
        self.copy2d(q_lat, Rows::of(p.dv), q, Rows::of(p.dk), rows, p.dv)?;
        self.copy2d(q_pe, pe, q, Rows::of(p.dk).at(p.dv), rows, dr)?;
        self.mla_attention(q, cache, positions, pages, selected, p, out)
    }
}

/// Where [`Backend::branch_to`] sends the ops after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    Main,
    Side,
    /// The side chain, after the main chain's ops issued so far.
    SideAfterMain,
}

/// The pieces of a [`Backend::branches`] call: each closure runs at once, its ops issued on
/// the named chain.
pub struct Branches<'a, B: Backend> {
    be: &'a B,
}

impl<B: Backend> Branches<'_, B> {
    pub fn main<R, E: From<CoreError>>(
        &self,
        f: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        self.be.branch_to(Branch::Main)?;
        f()
    }

    pub fn side<R, E: From<CoreError>>(
        &self,
        f: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        self.be.branch_to(Branch::Side)?;
        f()
    }

    /// A side piece that reads what the main chain's earlier pieces wrote.
    pub fn side_after_main<R, E: From<CoreError>>(
        &self,
        f: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        self.be.branch_to(Branch::SideAfterMain)?;
        f()
    }
}

/// [`Backend::rope_split_for`] as separate ops, `rope` then `copy2d`: the trait's default, and
/// what a backend that fuses them runs where its fused launch does not apply.
pub fn rope_then_copy<B: Backend + ?Sized>(
    be: &B,
    x: &mut B::Buf,
    positions: &B::Ids,
    inv_freq: &B::Buf,
    p: &RopeParams,
    cols: usize,
    y: &mut B::Buf,
) -> Result<()> {
    be.rope(x, positions, inv_freq, p)?;
    let rows = p.n_tokens * p.n_heads;
    be.copy2d(x, Rows::of(p.head_dim), y, Rows::of(cols), rows, cols)
}

/// A process-unique id for objects whose device buffers a recorded step refers to (step
/// states, cache pools): part of the recording key, so a new object at a reused address never
/// replays another's recording.
pub fn unique_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Where each token's keys live in a paged pool: logical key `t` of the sequence of token `s`
/// is pool row `tables[seq·max_blocks + t / block_size]·block_size + t % block_size`, with
/// `seq = token_seq[s]`.
pub struct Pages<'a, B: Backend + ?Sized> {
    /// `[n_seqs × max_blocks]` physical block ids, one row per sequence of the step.
    pub tables: &'a B::Ids,
    /// `[n_tokens]` the sequence (row of `tables`) of each token.
    pub token_seq: &'a B::Ids,
    pub max_blocks: usize,
    pub block_size: usize,
}
