//! The GLM-5 / DeepSeek-V3 forward pass over the whole trunk, on any backend.

use glint_core::Backend;
use glint_gguf::Gguf;
use glint_mla::{ensure, Batch, MlaCache, MlaDims, MlaScratch, Rope};
use glint_moe::MoeScratch;
use tracing::debug;

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::weights::{Ffn, ModelWeights};

/// A loaded model plus its KV cache. Borrows the GGUF so CPU weights stay in the mmap.
pub struct Glm5<'a, B: Backend> {
    be: B,
    cfg: Config,
    w: ModelWeights<'a, B>,
    dims: MlaDims,
    rope: Rope<B>,
    cache: MlaCache<B>,
    scratch: Scratch<B>,
    /// When set, the indexer's per-layer key selections of the last call are kept (debugging,
    /// comparing with another implementation's top-k).
    record_selections: bool,
    selections: Vec<Option<Vec<u32>>>,
}

/// Per-call buffers kept between calls (decode does not allocate; they only grow).
struct Scratch<B: Backend> {
    h: B::Buf,
    x: B::Buf,
    y: B::Buf,
    logits: B::Buf,
    mla: MlaScratch<B>,
    moe: MoeScratch<B>,
}

impl<'a, B: Backend> Glm5<'a, B> {
    /// Reads the config, binds every trunk tensor by name (checking shapes) and allocates a KV
    /// cache for `ctx_len` tokens.
    pub fn load(gguf: &'a Gguf, backend: B, ctx_len: usize) -> Result<Self> {
        let cfg = Config::from_gguf(gguf)?;
        let w = ModelWeights::bind(gguf, &backend, &cfg)?;
        let dims = MlaDims {
            d_model: cfg.d_model,
            n_heads: cfg.n_heads,
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
        let index_dims: Vec<Option<usize>> = (0..cfg.n_layer)
            .map(|_| cfg.indexer.as_ref().map(|ix| ix.head_dim))
            .collect();
        let cache = MlaCache::new(&backend, ctx_len, dims.row(), &index_dims)?;
        let scratch = Scratch {
            h: backend.alloc(0)?,
            x: backend.alloc(0)?,
            y: backend.alloc(0)?,
            logits: backend.alloc(0)?,
            mla: MlaScratch::new(&backend)?,
            moe: MoeScratch::new(&backend)?,
        };
        debug!(arch = ?cfg.arch, layers = cfg.n_layer, ctx_len, "model loaded");
        Ok(Self {
            be: backend,
            cfg,
            w,
            dims,
            rope,
            cache,
            scratch,
            record_selections: false,
            selections: Vec::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn backend(&self) -> &B {
        &self.be
    }
    pub fn ctx_len(&self) -> usize {
        self.cache.ctx_len()
    }
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }
    /// Keep (or stop keeping) the indexer's key selections of each call; see [`Self::selections`].
    pub fn record_selections(&mut self, on: bool) {
        self.record_selections = on;
        self.selections.clear();
    }

    /// Per trunk layer, the key indices the DSA indexer selected in the last call
    /// (`[n_tokens × top_k]`, descending score; entries past a row's position are unused), or
    /// None for a layer that attended to every visible key. Empty unless recording is on.
    pub fn selections(&self) -> &[Option<Vec<u32>>] {
        &self.selections
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        self.cache.reset();
    }

    /// Logits for every position of `tokens` (`tokens.len() × n_vocab`, row-major).
    pub fn forward(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>> {
        self.run(tokens, start_pos, false)
    }

    /// Logits of the last position only (`n_vocab` floats).
    pub fn forward_last(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>> {
        self.run(tokens, start_pos, true)
    }

    /// Like [`Self::forward`], but calls `tap` with the hidden states (`tokens.len() × d_model`,
    /// row-major) at each [`Tap`] point of each trunk layer; whatever `tap` leaves in the slice
    /// continues through the model. Comparing layer by layer against another engine's
    /// intermediate tensors (llama.cpp's `ffn_inp-L`, `l_out-L`), and overwriting ours with
    /// theirs, confines an ulp-level difference to the sublayer where it arises instead of letting
    /// it compound through the following layers (teacher forcing of the hidden states).
    pub fn forward_tapped(
        &mut self,
        tokens: &[u32],
        start_pos: usize,
        tap: &mut TapFn<'_>,
    ) -> Result<Vec<f32>> {
        self.run_inner(tokens, start_pos, false, Some(tap))
    }

    fn run(&mut self, tokens: &[u32], start: usize, last_only: bool) -> Result<Vec<f32>> {
        self.run_inner(tokens, start, last_only, None)
    }

    fn run_inner(
        &mut self,
        tokens: &[u32],
        start: usize,
        last_only: bool,
        mut tap: Option<&mut TapFn<'_>>,
    ) -> Result<Vec<f32>> {
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::EmptyBatch);
        }
        let nv = self.cfg.n_vocab;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= nv) {
            return Err(ModelError::TokenOutOfRange {
                token: t,
                n_vocab: nv,
            });
        }
        self.cache.check_append(start, n)?;
        let be = &self.be;
        let d = self.cfg.d_model;
        let sc = &mut self.scratch;
        ensure(be, &mut sc.h, n * d)?;
        ensure(be, &mut sc.x, n * d)?;
        ensure(be, &mut sc.y, n * d)?;
        let ids = be.upload_ids(tokens)?;
        be.get_rows(&self.w.token_embd, &ids, n, &mut sc.h)?;
        let batch = Batch::new(be, start, n, self.cfg.n_heads)?;
        let eps = self.cfg.rms_eps;
        self.selections.clear();
        for (l, lw) in self.w.layers.iter().enumerate() {
            be.rms_norm(&sc.h, &lw.attn_norm, n, d, eps, &mut sc.x)?;
            glint_mla::forward(
                be,
                &lw.attn,
                &self.dims,
                &self.rope,
                &sc.x,
                &batch,
                &mut self.cache.layers[l],
                &mut sc.mla,
                &mut sc.y,
            )?;
            if self.record_selections {
                let sel = match sc.mla.selection() {
                    Some((ids, k)) => {
                        let mut v = vec![0u32; n * k];
                        be.download_ids(ids, &mut v)?;
                        Some(v)
                    }
                    None => None,
                };
                self.selections.push(sel);
            }
            be.add(&mut sc.h, &sc.y, n * d)?;
            if let Some(t) = tap.as_mut() {
                tap_hidden(be, &mut sc.h, n * d, |h| t(Tap::FfnInput, l, h))?;
            }
            be.rms_norm(&sc.h, &lw.ffn_norm, n, d, eps, &mut sc.x)?;
            match &lw.ffn {
                Ffn::Dense(m) => glint_moe::mlp(be, m, &sc.x, n, &mut sc.moe, &mut sc.y)?,
                Ffn::Moe(m) => glint_moe::moe(be, m, &sc.x, n, d, &mut sc.moe, &mut sc.y)?,
            }
            be.add(&mut sc.h, &sc.y, n * d)?;
            if let Some(t) = tap.as_mut() {
                tap_hidden(be, &mut sc.h, n * d, |h| t(Tap::LayerOutput, l, h))?;
            }
        }
        self.cache.commit(start, n);

        // Final norm of the rows we need (the last one only, or all), into x.
        let rows = if last_only { 1 } else { n };
        let first = n - rows;
        be.copy2d(&sc.h, first * d, d, &mut sc.y, 0, d, rows, d)?;
        be.rms_norm(&sc.y, &self.w.output_norm, rows, d, eps, &mut sc.x)?;
        ensure(be, &mut sc.logits, rows * nv)?;
        be.matmul(&self.w.output, &sc.x, rows, &mut sc.logits)?;
        let mut out = vec![0f32; rows * nv];
        be.download(&sc.logits, &mut out)?;
        Ok(out)
    }
}

/// The callback of [`Glm5::forward_tapped`]: (where, trunk layer, hidden states).
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
    let mut host = vec![0f32; be.buf_len(h)];
    be.download(h, &mut host)?;
    f(&mut host[..len]);
    *h = be.upload(&host)?;
    Ok(())
}
