//! The GLM-5 / DeepSeek-V3 forward pass over the whole trunk, on any backend.
//!
//! [`Model`] is the immutable part (config, bound weights, RoPE tables): one per process, shared
//! by every request. A step runs a [`BatchPlan`] — tokens of many sequences at once — against a
//! paged [`KvPool`] with buffers from a [`StepState`] sized at load, so the step allocates
//! nothing. [`Glm5`] wraps the three for one sequence (`glint generate`, `glint logits`, tests):
//! it chunks a prompt into micro-batches of `ubatch` tokens, so prefill memory is bounded by the
//! micro-batch, not the prompt.

use glint_core::{Backend, Rows};
use glint_gguf::Gguf;
use glint_mla::{
    BatchPlan, CacheTypes, KvPool, Logits, MlaDims, MlaScratch, Rope, SeqCache, StepInputs,
    StepLimits,
};
use glint_moe::{FfnSizes, MoeScratch};
use glint_tp::Communicator;
use tracing::debug;

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::shard::Shard;
use crate::weights::{Ffn, ModelWeights};

/// The tensor-parallel part of a model: which shard it holds and the group it sums with.
struct Tp<B: Backend> {
    shard: Shard,
    comm: std::sync::Arc<dyn Communicator<B>>,
}

/// Config, weights and RoPE tables. Borrows the GGUF so CPU weights stay in the mmap; holds no
/// per-request state, so one model serves any number of sequences.
pub struct Model<'a, B: Backend> {
    be: B,
    cfg: Config,
    w: ModelWeights<'a, B>,
    dims: MlaDims,
    rope: Rope<B>,
    /// Which 3-D products have float weights (the backend's grouping path): per-head, experts.
    float_heads: bool,
    float_experts: bool,
    /// Tensor parallelism (None: this process holds the whole model).
    tp: Option<Tp<B>>,
}

/// Whether a 3-D weight of this type takes the backend's float grouping path (F32; F16 and
/// BF16 go through glint-quant's kernels like the block types).
fn is_float(ty: glint_core::GgmlType) -> bool {
    ty == glint_core::GgmlType::F32
}

/// Everything one step writes besides the cache: per-step inputs and scratch, sized once for
/// the [`StepLimits`] it was made with.
pub struct StepState<B: Backend> {
    inputs: StepInputs<B>,
    token_ids: B::Ids,
    /// `[max_tokens × d_model]` residual stream and two work buffers.
    h: B::Buf,
    x: B::Buf,
    y: B::Buf,
    /// `[max_logit_rows × n_vocab]`.
    logits: B::Buf,
    /// Tensor parallel: this rank's vocabulary slice of the logits and every rank's, gathered
    /// (`[max_logit_rows × n_vocab / world]`, `[world × …]`; empty without TP).
    logits_part: B::Buf,
    logits_gathered: B::Buf,
    max_logit_rows: usize,
    mla: MlaScratch<B>,
    moe: MoeScratch<B>,
    record_selections: bool,
    /// Per trunk layer, the selection of the last step (`[n × top_k]`), when recording.
    selections: Vec<Option<Vec<u32>>>,
    /// Part of the key a backend records this state's steps under.
    id: u64,
}

impl<B: Backend> StepState<B> {
    pub fn limits(&self) -> StepLimits {
        self.inputs.limits
    }
    pub fn block_size(&self) -> usize {
        self.inputs.block_size
    }
    /// Keep (or stop keeping) the indexer's key selections of each step.
    pub fn record_selections(&mut self, on: bool) {
        self.record_selections = on;
        self.selections.clear();
    }
    /// Per trunk layer, the key positions the DSA indexer selected in the last step
    /// (`[n_tokens × top_k]`), or None for a layer that attended to every visible key.
    pub fn selections(&self) -> &[Option<Vec<u32>>] {
        &self.selections
    }
}

impl<'a, B: Backend> Model<'a, B> {
    /// Reads the config and binds every trunk tensor by name (checking shapes).
    pub fn load(gguf: &'a Gguf, backend: B) -> Result<Self> {
        Self::load_inner(gguf, backend, None)
    }

    /// Loads rank `comm.rank()`'s shard of a tensor-parallel model over `comm.world_size()`
    /// ranks (the plan in [`crate::shard`]; `ep`: routed experts split whole across ranks).
    /// Every rank then runs the same steps; each layer ends its attention and its FFN with an
    /// all-reduce of the partial sums, and the logits are all-gathered, so every rank gets the
    /// same logits. At world size 1 the collectives still run (an all-reduce of one rank, a
    /// gather of one slice), which is how a communicator is checked on one device; without a
    /// communicator ([`Self::load`]) there are none.
    pub fn load_tp(
        gguf: &'a Gguf,
        backend: B,
        comm: std::sync::Arc<dyn Communicator<B>>,
        ep: bool,
    ) -> Result<Self> {
        let shard = Shard::new(comm.rank(), comm.world_size(), ep);
        if shard.rank >= shard.world {
            return Err(ModelError::Tp(format!(
                "rank {} of a group of {}",
                shard.rank, shard.world
            )));
        }
        Self::load_inner(gguf, backend, Some(Tp { shard, comm }))
    }

    /// The shard this model holds (`Shard::FULL` without tensor parallelism).
    pub fn shard(&self) -> Shard {
        self.tp.as_ref().map_or(Shard::FULL, |t| t.shard)
    }

    fn load_inner(gguf: &'a Gguf, backend: B, tp: Option<Tp<B>>) -> Result<Self> {
        let cfg = Config::from_gguf(gguf)?;
        let shard = tp.as_ref().map_or(Shard::FULL, |t| t.shard);
        let weight_bytes: u64 = crate::shard::local_bytes(gguf, shard);
        if let Some((free, total)) = backend.device_memory() {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            // Weights plus 5% for the cache pool and scratch the caller sizes next (those
            // allocations name their own sizes if they fail).
            if weight_bytes + weight_bytes / 20 > free {
                return Err(ModelError::DoesNotFit {
                    device: backend.name(),
                    need: weight_bytes,
                    need_gib: gib(weight_bytes),
                    free,
                    free_gib: gib(free),
                });
            }
            tracing::info!(
                device = backend.name(),
                weights_gib = gib(weight_bytes),
                free_gib = gib(free),
                total_gib = gib(total),
                "uploading weights"
            );
        }
        if backend.device_memory().is_none() {
            // Host backends compute from the mapped file in place: read it in now rather than
            // on the first tokens (Gguf::prefetch).
            gguf.prefetch();
        }
        let t = std::time::Instant::now();
        let w = ModelWeights::bind_shard(gguf, &backend, &cfg, shard)?;
        tracing::info!(
            backend = backend.name(),
            weights_gib = weight_bytes as f64 / (1u64 << 30) as f64,
            secs = t.elapsed().as_secs_f64(),
            "weights bound"
        );
        let dims = MlaDims {
            d_model: cfg.d_model,
            // A shard runs its own heads (bind_shard refused a count that does not divide).
            n_heads: cfg.n_heads / shard.world,
            q_lora: cfg.q_lora,
            kv_lora: cfg.kv_lora,
            nope: cfg.nope,
            rope: cfg.rope_dim,
            v_dim: cfg.v_dim,
            eps: cfg.rms_eps,
            scale: cfg.attn_scale,
        };
        let freqs = glint_core::rope::inv_freq(cfg.rope_theta, cfg.rope_dim, cfg.yarn.as_ref());
        let rope = Rope {
            inv_freq: backend.upload(&freqs)?,
            attn_factor: 1.0,
            mode: glint_core::RopeMode::Interleaved,
        };
        let float = |part: &str| {
            gguf.tensors()
                .iter()
                .any(|t| t.name.contains(part) && is_float(t.ty))
        };
        // A legacy fused kv_b is split on the host into F32 per-head weights.
        let float_heads = float("attn_k_b") || float("attn_v_b") || float("attn_kv_b");
        let float_experts = float("_exps");
        debug!(arch = ?cfg.arch, layers = cfg.n_layer, "model loaded");
        Ok(Self {
            be: backend,
            cfg,
            w,
            dims,
            rope,
            float_heads,
            float_experts,
            tp,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn backend(&self) -> &B {
        &self.be
    }

    /// A pool of `n_blocks` cache blocks of `block_size` tokens for every trunk layer.
    pub fn new_pool(
        &self,
        n_blocks: usize,
        block_size: usize,
        types: CacheTypes,
    ) -> Result<KvPool<B>> {
        let index_dims: Vec<Option<usize>> = (0..self.cfg.n_layer)
            .map(|_| self.cfg.indexer.as_ref().map(|ix| ix.head_dim))
            .collect();
        let per_token: usize = index_dims
            .iter()
            .map(|ix| {
                types.latent.row_bytes(self.dims.row()) + ix.map_or(0, |d| types.index.row_bytes(d))
            })
            .sum();
        tracing::info!(
            backend = self.be.name(),
            tokens = n_blocks.saturating_mul(block_size),
            latent = %types.latent,
            index = %types.index,
            gib = (per_token as f64) * (n_blocks * block_size) as f64 / (1u64 << 30) as f64,
            "KV cache pool"
        );
        Ok(KvPool::new(
            &self.be,
            n_blocks,
            block_size,
            self.dims.row(),
            &index_dims,
            types,
        )?)
    }

    /// Buffers for steps of up to `limits` with at most `max_logit_rows` logits rows.
    pub fn new_step_state(
        &self,
        limits: StepLimits,
        block_size: usize,
        max_logit_rows: usize,
    ) -> Result<StepState<B>> {
        let be = &self.be;
        let c = &self.cfg;
        let n = limits.max_tokens;
        let kv_cap = limits.max_blocks.saturating_mul(block_size);
        let bytes = |what: &str, floats: Option<usize>| {
            floats.ok_or_else(|| ModelError::Config {
                key: what.into(),
                msg: format!("step buffers for {limits:?} overflow"),
            })
        };
        let d = bytes("d_model", n.checked_mul(c.d_model))?;
        let logits_len = bytes("n_vocab", max_logit_rows.checked_mul(c.n_vocab))?;
        let shard = self.shard();
        let part_len = if self.tp.is_some() {
            logits_len / shard.world
        } else {
            0
        };
        let ix = c.indexer.as_ref().map(|ix| glint_mla::IndexerDims {
            n_heads: ix.n_heads,
            head_dim: ix.head_dim,
            top_k: ix.top_k,
            rope_mode: ix.rope_mode,
            eps: ix.eps,
        });
        let ffn = FfnSizes {
            max_tokens: n,
            d_model: c.d_model,
            dense_d_ff: c.d_ff.max(c.d_ff_exp * c.n_expert_shared) / shard.world,
            n_expert: c.n_expert,
            n_used: c.n_expert_used,
            expert_d_ff: if shard.ep {
                c.d_ff_exp
            } else {
                c.d_ff_exp / shard.world
            },
            shared_d_ff: c.d_ff_exp * c.n_expert_shared / shard.world,
        };
        // What the step's scratch takes of a device's memory (the memory report: weights and
        // the pool are logged at load and at `new_pool`). The CPU's is sized per thread.
        let free_before = be.device_memory().map(|(free, _)| free);
        be.prepare_step(&self.step_sizes(n, kv_cap, max_logit_rows))?;
        let st = StepState {
            inputs: StepInputs::new(be, limits, block_size, self.dims.n_heads)?,
            token_ids: be.alloc_ids(n)?,
            h: be.alloc(d)?,
            x: be.alloc(d)?,
            y: be.alloc(d)?,
            logits: be.alloc(logits_len)?,
            logits_part: be.alloc(part_len)?,
            logits_gathered: be.alloc(if part_len == 0 { 0 } else { logits_len })?,
            max_logit_rows,
            mla: MlaScratch::new(be, &self.dims, ix.as_ref(), n, kv_cap)?,
            moe: MoeScratch::new(be, &ffn)?,
            record_selections: false,
            selections: Vec::new(),
            id: glint_core::unique_id(),
        };
        if let (Some(before), Some((after, _))) = (free_before, be.device_memory()) {
            tracing::info!(
                backend = be.name(),
                max_tokens = n,
                kv_capacity = kv_cap,
                gib = before.saturating_sub(after) as f64 / (1u64 << 30) as f64,
                "step scratch"
            );
        }
        Ok(st)
    }

    /// The largest op shapes a step of `n` tokens over `kv_cap` keys can reach.
    fn step_sizes(&self, n: usize, kv_cap: usize, logit_rows: usize) -> glint_core::StepSizes {
        let c = &self.cfg;
        let d = &self.dims;
        let ix = c.indexer.as_ref();
        let shared_ff = c.d_ff_exp * c.n_expert_shared.max(1);
        // Activation (rows, cols) of every matmul kind: token-wide projections (the widest
        // input among d_model, q_lora, the attention output, the dense and shared FFN), the
        // head over the logits rows, the per-head absorption products, and the routed experts'
        // down projection (one row per chosen expert).
        let token_cols = [c.d_model, d.q_lora, d.n_heads * d.v_dim, c.d_ff, shared_ff]
            .into_iter()
            .max()
            .unwrap_or(0);
        let act_shapes = [
            (n, token_cols),
            (logit_rows, c.d_model),
            (n * d.n_heads, d.nope.max(d.kv_lora)),
            (n * c.n_expert_used, c.d_ff_exp),
            (n, c.d_model),
        ];
        let max_slice_rows = [d.kv_lora, d.v_dim, c.d_model, 2 * c.d_ff_exp]
            .into_iter()
            .max()
            .unwrap_or(0);
        let (mut slots, mut cols, mut rows) = (0, 0, 0);
        if self.float_heads {
            slots = n * d.n_heads;
            cols = d.nope.max(d.kv_lora);
            rows = d.kv_lora.max(d.v_dim);
        }
        if self.float_experts {
            slots = slots.max(n * c.n_expert_used);
            cols = cols.max(c.d_model).max(c.d_ff_exp);
            rows = rows.max(c.d_model).max(2 * c.d_ff_exp);
        }
        let all_indexed = ix.is_some() && d.q_lora > 0;
        glint_core::StepSizes {
            max_tokens: n.max(logit_rows),
            kv_capacity: kv_cap,
            max_gathered_keys: match ix {
                Some(ix) if all_indexed => ix.top_k.min(kv_cap),
                _ => kv_cap,
            },
            max_heads: d.n_heads.max(ix.map_or(0, |ix| ix.n_heads)),
            max_key_row: d.row().max(ix.map_or(0, |ix| ix.head_dim)),
            act_shapes,
            max_slice_rows,
            n_expert: c.n_expert,
            n_used: c.n_expert_used,
            grouped_slots: slots,
            grouped_cols: cols,
            grouped_rows: rows,
            rope_pairs: d.rope / 2,
        }
    }

    /// Runs one step: writes the plan's rows into `pool` and the logits of the plan's logit rows
    /// (`logit_rows().len() × n_vocab`, in order) into `logits`. The plan is checked first
    /// (sizes, token ids, block ids), so a refused plan leaves the pool as it was.
    pub fn step(
        &self,
        plan: &BatchPlan,
        pool: &mut KvPool<B>,
        st: &mut StepState<B>,
        logits: &mut [f32],
    ) -> Result<()> {
        if self.tp.is_some() {
            // Ranks wait for each other inside a step: on the calling thread, never on a
            // worker of a pool the ranks share (two ranks holding both workers of a two-core
            // pool while a third waits for one would never meet).
            return self.step_inner(plan, pool, st, logits, None);
        }
        self.be
            .run_step(|| self.step_inner(plan, pool, st, logits, None))
    }

    /// [`Self::step`] with `tap` shown (and allowed to overwrite) the hidden states
    /// (`n_tokens × d_model`) at each [`Tap`] point of each trunk layer.
    pub fn step_tapped(
        &self,
        plan: &BatchPlan,
        pool: &mut KvPool<B>,
        st: &mut StepState<B>,
        logits: &mut [f32],
        tap: &mut TapFn<'_>,
    ) -> Result<()> {
        self.step_inner(plan, pool, st, logits, Some(tap))
    }

    fn check_plan(&self, plan: &BatchPlan, pool: &KvPool<B>, st: &StepState<B>) -> Result<()> {
        plan.validate(&st.inputs.limits, &pool.blocks)?;
        if plan.logit_rows().len() > st.max_logit_rows {
            return Err(ModelError::Mla(glint_mla::MlaError::PlanTooLarge {
                what: "logits rows",
                n: plan.logit_rows().len(),
                limit: st.max_logit_rows,
            }));
        }
        let nv = self.cfg.n_vocab;
        if let Some(&t) = plan.tokens().iter().find(|&&t| t as usize >= nv) {
            return Err(ModelError::TokenOutOfRange {
                token: t,
                n_vocab: nv,
            });
        }
        if pool.block_size() != st.inputs.block_size {
            return Err(ModelError::Mla(glint_mla::MlaError::Plan(format!(
                "pool block size {} but step state made for {}",
                pool.block_size(),
                st.inputs.block_size
            ))));
        }
        Ok(())
    }

    fn step_inner(
        &self,
        plan: &BatchPlan,
        pool: &mut KvPool<B>,
        st: &mut StepState<B>,
        logits_out: &mut [f32],
        mut tap: Option<&mut TapFn<'_>>,
    ) -> Result<()> {
        self.check_plan(plan, pool, st)?;
        let nv = self.cfg.n_vocab;
        let rows = plan.logit_rows().len();
        if logits_out.len() != rows * nv {
            return Err(ModelError::Mla(glint_mla::MlaError::Plan(format!(
                "logits output holds {} floats, the plan's {rows} rows need {}",
                logits_out.len(),
                rows * nv
            ))));
        }
        let be = &self.be;
        let n = plan.n_tokens();
        st.inputs.write(be, plan)?;
        be.write_ids(&mut st.token_ids, plan.tokens())?;
        let cap = st.inputs.kv_capacity();
        st.inputs.max_seen = be
            .kv_bucket(st.inputs.max_seen, cap)
            .clamp(st.inputs.max_seen, cap);
        // A communicator that stages through the host cannot be recorded (expert parallelism's
        // id remap, `moe_local_experts`, is a kernel on the backend that records).
        let tp_eager = self.tp.as_ref().is_some_and(|t| !t.comm.recordable());
        if tap.is_some() || st.record_selections || tp_eager {
            // Reads back to the host between layers: never recorded.
            self.device_ops(n, rows, pool, st, &mut tap)?;
        } else {
            // Everything the ops take as arguments: sizes, and the buffers' owners.
            let key = [
                n,
                rows,
                st.inputs.max_seen,
                st.id as usize,
                pool.id() as usize,
            ]
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &v| {
                (h ^ v as u64).wrapping_mul(0x0100_0000_01b3)
            });
            be.run_recorded(key, &mut || self.device_ops(n, rows, pool, st, &mut None))?;
        }
        if rows == 0 {
            return Ok(());
        }
        be.download(&st.logits, logits_out)?;
        Ok(())
    }

    /// The device part of a step: embedding, every layer, and the head of the logit rows into
    /// `st.logits`. Its op arguments depend only on `(n, rows, max_seen)` and on the buffers of
    /// `st` and `pool`, which is what lets a backend record it (see `Backend::run_recorded`).
    fn device_ops(
        &self,
        n: usize,
        rows: usize,
        pool: &mut KvPool<B>,
        st: &mut StepState<B>,
        tap: &mut Option<&mut TapFn<'_>>,
    ) -> Result<()> {
        let be = &self.be;
        let d = self.cfg.d_model;
        be.get_rows(&self.w.token_embd, &st.token_ids, n, &mut st.h)?;
        let eps = self.cfg.rms_eps;
        st.selections.clear();
        // Whether st.x already holds this layer's attn_norm(h): the previous layer's residual
        // add and this norm ran as one op (`add_rms_norm`; not when a tap reads h between).
        let mut normed = false;
        for (l, lw) in self.w.layers.iter().enumerate() {
            if !normed {
                let next = lw.attn.input_product();
                be.rms_norm_for(&st.h, &lw.attn_norm, n, d, eps, &mut st.x, next)?;
            }
            glint_mla::forward(
                be,
                &lw.attn,
                &self.dims,
                &self.rope,
                &st.x,
                &st.inputs,
                &mut pool.layers[l],
                &mut st.mla,
                &mut st.y,
            )?;
            if st.record_selections {
                let sel = match st.mla.selection() {
                    Some((ids, k)) => {
                        let mut v = vec![0u32; n * k];
                        be.download_ids(ids, &mut v)?;
                        Some(v)
                    }
                    None => None,
                };
                st.selections.push(sel);
            }
            // Tensor parallel: each rank's heads gave a partial attention output.
            self.all_reduce(&mut st.y, n * d)?;
            if let Some(t) = tap.as_mut() {
                be.add(&mut st.h, &st.y, n * d)?;
                tap_hidden(be, &mut st.h, n * d, |h| t(Tap::FfnInput, l, h))?;
                be.rms_norm_for(
                    &st.h,
                    &lw.ffn_norm,
                    n,
                    d,
                    eps,
                    &mut st.x,
                    lw.ffn.input_product(),
                )?;
            } else {
                let next = lw.ffn.input_product();
                be.add_rms_norm_for(&mut st.h, &st.y, &lw.ffn_norm, n, d, eps, &mut st.x, next)?;
            }
            match &lw.ffn {
                Ffn::Dense(m) => glint_moe::mlp(be, m, &st.x, n, &mut st.moe, &mut st.y)?,
                Ffn::Moe(m) => glint_moe::moe(be, m, &st.x, n, d, &mut st.moe, &mut st.y)?,
            }
            // Tensor parallel: each rank's FFN columns (or experts) gave a partial output.
            self.all_reduce(&mut st.y, n * d)?;
            match (tap.as_mut(), self.w.layers.get(l + 1)) {
                (None, Some(next)) => {
                    let w = next.attn.input_product();
                    be.add_rms_norm_for(
                        &mut st.h,
                        &st.y,
                        &next.attn_norm,
                        n,
                        d,
                        eps,
                        &mut st.x,
                        w,
                    )?;
                    normed = true;
                }
                (t, _) => {
                    be.add(&mut st.h, &st.y, n * d)?;
                    if let Some(t) = t {
                        tap_hidden(be, &mut st.h, n * d, |h| t(Tap::LayerOutput, l, h))?;
                    }
                }
            }
        }
        if rows == 0 {
            return Ok(());
        }
        // Final norm and head of the rows that need logits only.
        be.gather_rows(&st.h, d, &st.inputs.logit_rows, rows, &mut st.y)?;
        let head = &self.w.output;
        be.rms_norm_for(&st.y, &self.w.output_norm, rows, d, eps, &mut st.x, head)?;
        match &self.tp {
            None => be.matmul(&self.w.output, &st.x, rows, &mut st.logits)?,
            Some(tp) => {
                // Vocabulary-parallel head: this rank's rows of the vocabulary, gathered
                // rank-major, then laid out row by row (rank r's slice at columns r·nv/w).
                let w = tp.shard.world;
                let (nv, part) = (self.cfg.n_vocab, self.cfg.n_vocab / w);
                be.matmul(&self.w.output, &st.x, rows, &mut st.logits_part)?;
                tp.comm
                    .all_gather(be, &st.logits_part, rows * part, &mut st.logits_gathered)?;
                for r in 0..w {
                    be.copy2d(
                        &st.logits_gathered,
                        Rows::of(part).at(r * rows * part),
                        &mut st.logits,
                        Rows::of(nv).at(r * part),
                        rows,
                        part,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Completes a sublayer's partial sums across the tensor-parallel group (nothing to do
    /// without one).
    fn all_reduce(&self, buf: &mut B::Buf, n: usize) -> Result<()> {
        if let Some(tp) = &self.tp {
            tp.comm.all_reduce_sum(&self.be, buf, n)?;
        }
        Ok(())
    }
}

/// How a single-sequence [`Glm5`] is sized.
#[derive(Debug, Clone, Copy)]
pub struct SessionOptions {
    /// Context length (tokens the cache holds).
    pub ctx_len: usize,
    /// Tokens per step: prompts are processed in chunks of this size (llama.cpp's `-ub`).
    pub ubatch: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// Element types of the latent and indexer-key caches.
    pub cache: CacheTypes,
}

impl SessionOptions {
    pub const DEFAULT_UBATCH: usize = 512;
    pub const DEFAULT_BLOCK_SIZE: usize = 64;
    pub fn new(ctx_len: usize) -> Self {
        Self {
            ctx_len,
            ubatch: Self::DEFAULT_UBATCH,
            block_size: Self::DEFAULT_BLOCK_SIZE,
            cache: CacheTypes::default(),
        }
    }
}

/// A model plus the cache of one sequence: the API of `glint generate` and `glint logits`.
pub struct Glm5<'a, B: Backend> {
    model: Model<'a, B>,
    pool: KvPool<B>,
    seq: SeqCache,
    st: StepState<B>,
    opts: SessionOptions,
    /// Per layer and chunk, what [`StepState::selections`] recorded, when recording.
    record_selections: bool,
    selections: Vec<Option<Vec<u32>>>,
}

impl<'a, B: Backend> Glm5<'a, B> {
    /// Loads the model with a cache for `ctx_len` tokens and default micro-batch and block size.
    pub fn load(gguf: &'a Gguf, backend: B, ctx_len: usize) -> Result<Self> {
        Self::load_with(gguf, backend, SessionOptions::new(ctx_len))
    }

    pub fn load_with(gguf: &'a Gguf, backend: B, opts: SessionOptions) -> Result<Self> {
        let model = Model::load(gguf, backend)?;
        Self::new(model, opts)
    }

    pub fn new(model: Model<'a, B>, opts: SessionOptions) -> Result<Self> {
        if opts.ubatch == 0 || opts.block_size == 0 {
            return Err(ModelError::Config {
                key: "ubatch/block_size".into(),
                msg: format!("must be positive, got {opts:?}"),
            });
        }
        let n_blocks = opts.ctx_len.div_ceil(opts.block_size);
        let ubatch = opts.ubatch.min(opts.ctx_len.max(1));
        let limits = StepLimits {
            max_tokens: ubatch,
            max_seqs: 1,
            max_blocks: n_blocks,
        };
        let pool = model.new_pool(n_blocks, opts.block_size, opts.cache)?;
        let st = model.new_step_state(limits, opts.block_size, ubatch)?;
        Ok(Self {
            model,
            pool,
            seq: SeqCache::default(),
            st,
            opts,
            record_selections: false,
            selections: Vec::new(),
        })
    }

    pub fn config(&self) -> &Config {
        self.model.config()
    }
    pub fn model(&self) -> &Model<'a, B> {
        &self.model
    }
    pub fn backend(&self) -> &B {
        self.model.backend()
    }
    pub fn ctx_len(&self) -> usize {
        self.opts.ctx_len
    }
    pub fn cache_len(&self) -> usize {
        self.seq.len
    }
    /// Keep (or stop keeping) the indexer's key selections of each call; see [`Self::selections`].
    pub fn record_selections(&mut self, on: bool) {
        self.record_selections = on;
        self.st.record_selections(on);
        self.selections.clear();
    }

    /// Per trunk layer, the key positions the DSA indexer selected for each token of the last
    /// call (`[n_tokens × top_k]`, order unspecified; entries past a row's position are unused),
    /// or None for a layer that attended to every visible key. Rows of a chunk that attended
    /// densely list their visible keys in order, padded with `u32::MAX`. Empty unless recording.
    pub fn selections(&self) -> &[Option<Vec<u32>>] {
        &self.selections
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        self.seq.len = 0;
    }

    /// Logits for every position of `tokens` (`tokens.len() × n_vocab`, row-major).
    pub fn forward(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>> {
        self.run(tokens, start_pos, Logits::All, None)
    }

    /// Logits of the last position only (`n_vocab` floats).
    pub fn forward_last(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>> {
        self.run(tokens, start_pos, Logits::Last, None)
    }

    /// Like [`Self::forward`], but calls `tap` with the hidden states (`tokens.len() × d_model`,
    /// row-major) at each [`Tap`] point of each trunk layer; whatever `tap` leaves in the slice
    /// continues through the model. Comparing layer by layer against another engine's
    /// intermediate tensors (llama.cpp's `ffn_inp-L`, `l_out-L`), and overwriting ours with
    /// theirs, confines an ulp-level difference to the sublayer where it arises instead of letting
    /// it compound through the following layers (teacher forcing of the hidden states). The
    /// tokens run as one step, so they must fit the micro-batch.
    pub fn forward_tapped(
        &mut self,
        tokens: &[u32],
        start_pos: usize,
        tap: &mut TapFn<'_>,
    ) -> Result<Vec<f32>> {
        if tokens.len() > self.st.limits().max_tokens {
            return Err(ModelError::Mla(glint_mla::MlaError::PlanTooLarge {
                what: "tokens in a tapped call",
                n: tokens.len(),
                limit: self.st.limits().max_tokens,
            }));
        }
        self.run(tokens, start_pos, Logits::All, Some(tap))
    }

    fn run(
        &mut self,
        tokens: &[u32],
        start: usize,
        want: Logits,
        mut tap: Option<&mut TapFn<'_>>,
    ) -> Result<Vec<f32>> {
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::EmptyBatch);
        }
        if start > self.seq.len {
            return Err(ModelError::Gap {
                start,
                cached: self.seq.len,
            });
        }
        if start + n > self.opts.ctx_len {
            return Err(ModelError::ContextOverflow {
                needed: start + n,
                ctx_len: self.opts.ctx_len,
            });
        }
        let nv = self.model.cfg.n_vocab;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= nv) {
            return Err(ModelError::TokenOutOfRange {
                token: t,
                n_vocab: nv,
            });
        }
        self.pool.reserve(&mut self.seq, start + n)?;
        let before = self.seq.len;
        self.seq.len = start;
        let out_rows = if want == Logits::All { n } else { 1 };
        let mut out = vec![0f32; out_rows * nv];
        let mut chunk_sel: Vec<Vec<Option<Vec<u32>>>> = Vec::new();
        let ub = self.st.limits().max_tokens;
        let mut done = 0;
        while done < n {
            let m = ub.min(n - done);
            let last = done + m == n;
            let chunk_want = match want {
                Logits::All => Logits::All,
                _ if last => Logits::Last,
                _ => Logits::None,
            };
            let mut plan = BatchPlan::new(self.opts.block_size);
            let r = plan
                .push(&self.seq, &tokens[done..done + m], start + done, chunk_want)
                .map_err(ModelError::from)
                .and_then(|_| {
                    let rows = plan.logit_rows().len();
                    let lo = if want == Logits::All { done * nv } else { 0 };
                    let dst = &mut out[lo..lo + rows * nv];
                    match tap.as_mut() {
                        Some(t) => {
                            self.model
                                .step_tapped(&plan, &mut self.pool, &mut self.st, dst, t)
                        }
                        None => self.model.step(&plan, &mut self.pool, &mut self.st, dst),
                    }
                });
            if let Err(e) = r {
                // A refused first chunk wrote nothing: the cache is as it was. After that, rows
                // from `start` on may have been overwritten: only those before it stay valid.
                self.seq.len = if done == 0 && refused(&e) {
                    before
                } else {
                    start
                };
                return Err(e);
            }
            if self.record_selections {
                chunk_sel.push(self.st.selections().to_vec());
            }
            done += m;
            self.seq.len = start + done;
        }
        if self.record_selections {
            self.selections = self.merge_selections(&chunk_sel, tokens.len(), start);
        }
        Ok(out)
    }

    /// Joins the per-chunk selections of one call into per-call rows (see [`Self::selections`]).
    fn merge_selections(
        &self,
        chunks: &[Vec<Option<Vec<u32>>>],
        n: usize,
        start: usize,
    ) -> Vec<Option<Vec<u32>>> {
        let Some(k) = self.model.cfg.indexer.as_ref().map(|ix| ix.top_k) else {
            return vec![None; self.model.cfg.n_layer];
        };
        let ub = self.st.limits().max_tokens;
        (0..self.model.cfg.n_layer)
            .map(|l| {
                if chunks.iter().all(|c| c[l].is_none()) {
                    return None;
                }
                let mut rows = Vec::with_capacity(n * k);
                for (ci, c) in chunks.iter().enumerate() {
                    let m = ub.min(n - ci * ub);
                    match &c[l] {
                        Some(v) => rows.extend_from_slice(&v[..m * k]),
                        None => {
                            for i in 0..m {
                                let pos = (start + ci * ub + i) as u32;
                                rows.extend(
                                    (0..k as u32).map(|t| if t <= pos { t } else { u32::MAX }),
                                );
                            }
                        }
                    }
                }
                Some(rows)
            })
            .collect()
    }
}

/// Whether a step failed in its up-front checks (so it wrote nothing).
fn refused(e: &ModelError) -> bool {
    matches!(
        e,
        ModelError::Mla(_) | ModelError::TokenOutOfRange { .. } | ModelError::Gap { .. }
    )
}

/// The callback of [`Glm5::forward_tapped`] and [`Model::step_tapped`]: (where, trunk layer, hidden states).
pub type TapFn<'t> = dyn FnMut(Tap, usize, &mut [f32]) + 't;

/// Where [`Glm5::forward_tapped`] shows the hidden states of a trunk layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tap {
    /// After the attention residual add: the FFN's input before its norm (llama.cpp `ffn_inp-L`).
    FfnInput,
    /// After the FFN residual add: the layer's output (llama.cpp `l_out-L`).
    LayerOutput,
}

/// Round-trips `len` hidden floats through the host so a tap can read and overwrite them.
fn tap_hidden<B: Backend>(
    be: &B,
    h: &mut B::Buf,
    len: usize,
    f: impl FnOnce(&mut [f32]),
) -> Result<()> {
    let mut host = vec![0f32; len];
    be.download(h, &mut host)?;
    f(&mut host);
    be.write(h, &host)?;
    Ok(())
}
