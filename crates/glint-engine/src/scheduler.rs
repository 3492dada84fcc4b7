//! Continuous batching over [`Model::step`]: requests join and leave between steps, each step
//! mixes the prompt chunks of new requests with one decode token of every running one, and
//! the KV pool is shared.
//! This is the loop `glint serve`'s engine thread drives.
//!
//! * **Admission** (vLLM's): a queued request starts when a sequence slot is free and the pool
//!   can hold the blocks of its tokens (prompt, plus what it already generated when it comes
//!   back from preemption) with a small watermark to spare; blocks for generated tokens are
//!   taken one at a time as the sequence grows. The queue is first come first served: a
//!   request that does not fit holds back the ones behind it.
//! * **Preemption by recompute**: when a running sequence needs a block and none is free (or
//!   evictable), the youngest running sequence (the latest submitted) gives its blocks back
//!   and goes to the front of the queue with its tokens and sampler state kept; when it is
//!   admitted again its prompt and generated tokens are prefilled again and it continues
//!   where it stopped. No token is sent twice. Every token's result is independent of the
//!   rest of the step and of how a prompt is chunked (batch invariance, CPU), so a preempted
//!   request's answer is the one it gives alone.
//! * **Prefix caching** ([`crate::prefix_cache`]): every full block is kept under the hash of
//!   the token prefix through it; a request whose prompt starts with cached blocks shares them
//!   (reference counts) and computes only the rest. At least the last token is always
//!   computed (its logits pick the first new token). Unreferenced cached blocks are evicted,
//!   least recently used first, when the pool needs space.
//! * Each step spends at most `max_tokens` tokens: decode tokens first (latency), then prompt
//!   chunks in arrival order.
//!
//! A request whose prompt + budget exceeds the pool or `max_ctx` is refused at
//! [`Scheduler::submit`], so every admitted request can finish once it is the oldest.

use std::collections::VecDeque;

use glm5_model::{
    Backend, BatchPlan, CacheTypes, KvPool, Logits, Model, ModelError, SeqCache, StepLimits,
    StepState,
};

use crate::prefix_cache::{chain_hash, PrefixCache, ROOT};
use crate::sampler::{SampleError, Sampler, SamplerConfig};

/// One generation request.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Tokens that end the request (not included in its output).
    pub stop_tokens: Vec<u32>,
}

/// What a step produced for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Token { id: u64, token: u32 },
    Finished { id: u64, reason: Finish },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    MaxTokens,
    Stop(u32),
}

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Sample(#[from] SampleError),
    #[error("request {id}: {needed} tokens of prompt + budget exceed the pool's {capacity}")]
    TooLarge {
        id: u64,
        needed: usize,
        capacity: usize,
    },
    #[error("request {id}: empty prompt")]
    EmptyPrompt { id: u64 },
}

impl From<glint_mla::MlaError> for SchedulerError {
    fn from(e: glint_mla::MlaError) -> Self {
        Self::Model(ModelError::from(e))
    }
}

/// How the scheduler is sized.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    /// Tokens per step.
    pub max_tokens: usize,
    /// Sequences per step.
    pub max_seqs: usize,
    /// Pool blocks and tokens per block.
    pub n_blocks: usize,
    pub block_size: usize,
    /// Longest prompt + generation of one request.
    pub max_ctx: usize,
    pub cache: CacheTypes,
    /// Keep full blocks for later requests with the same prefix.
    pub prefix_caching: bool,
}

/// Counters since the scheduler was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    /// Tokens fed to the model: prompt chunks, decode tokens, and recomputed tokens of
    /// preempted requests.
    pub computed_tokens: u64,
    /// Prompt tokens (of admissions, re-admissions included) found in the prefix cache and
    /// so not computed.
    pub prefix_hit_tokens: u64,
    /// Running sequences sent back to the queue for want of blocks.
    pub preemptions: u64,
}

/// A request with its state; queued or running.
struct Seq {
    req: Request,
    /// The prompt, then every sampled token (the last one is not in the cache yet).
    tokens: Vec<u32>,
    /// Its blocks and how many of `tokens` are cached (empty while queued).
    cache: SeqCache,
    sampler: Sampler,
    generated: usize,
    /// Submission order: the highest is the youngest, preempted first.
    arrival: u64,
    /// Prefix keys of the full blocks of `tokens` (extended as they fill).
    keys: Vec<u128>,
    /// Leading blocks of `cache.blocks` already offered to the prefix cache.
    offered: usize,
}

impl Seq {
    /// Extends `keys` to every full block of `tokens[..n]`.
    fn key_blocks(&mut self, n: usize, bs: usize) {
        while self.keys.len() < n / bs {
            let i = self.keys.len();
            let parent = if i == 0 { ROOT } else { self.keys[i - 1] };
            self.keys
                .push(chain_hash(parent, &self.tokens[i * bs..(i + 1) * bs]));
        }
    }
}

pub struct Scheduler<'m, 'a, B: Backend> {
    model: &'m Model<'a, B>,
    pool: KvPool<B>,
    st: StepState<B>,
    cfg: SchedulerConfig,
    waiting: VecDeque<Seq>,
    /// Sorted by arrival.
    running: Vec<Seq>,
    prefix: PrefixCache,
    counters: SchedulerCounters,
    next_arrival: u64,
    logits: Vec<f32>,
}

impl<'m, 'a, B: Backend> Scheduler<'m, 'a, B> {
    pub fn new(model: &'m Model<'a, B>, cfg: SchedulerConfig) -> Result<Self, SchedulerError> {
        let limits = StepLimits {
            max_tokens: cfg.max_tokens,
            max_seqs: cfg.max_seqs,
            max_blocks: cfg.max_ctx.div_ceil(cfg.block_size),
        };
        let pool = model.new_pool(cfg.n_blocks, cfg.block_size, cfg.cache)?;
        let st = model.new_step_state(limits, cfg.block_size, cfg.max_seqs.min(cfg.max_tokens))?;
        let nv = model.config().n_vocab;
        Ok(Self {
            model,
            pool,
            st,
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            prefix: PrefixCache::new(cfg.n_blocks),
            counters: SchedulerCounters::default(),
            next_arrival: 0,
            logits: vec![0.0; cfg.max_seqs.min(cfg.max_tokens) * nv],
        })
    }

    /// Queues a request; it starts when a step has room for it.
    pub fn submit(&mut self, req: Request) -> Result<(), SchedulerError> {
        if req.prompt.is_empty() {
            return Err(SchedulerError::EmptyPrompt { id: req.id });
        }
        let needed = req.prompt.len().saturating_add(req.max_new_tokens);
        let capacity = self.request_capacity();
        if needed > capacity {
            return Err(SchedulerError::TooLarge {
                id: req.id,
                needed,
                capacity,
            });
        }
        let mut sampler = Sampler::new(req.sampler.clone());
        req.prompt.iter().for_each(|&t| sampler.accept(t));
        self.waiting.push_back(Seq {
            tokens: req.prompt.clone(),
            req,
            cache: SeqCache::default(),
            sampler,
            generated: 0,
            arrival: self.next_arrival,
            keys: Vec::new(),
            offered: 0,
        });
        self.next_arrival += 1;
        Ok(())
    }

    /// Requests queued or running.
    pub fn pending(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Requests queued, not yet admitted (preempted ones included).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests admitted (holding blocks).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Pool blocks a request could get now: free ones plus cached blocks no sequence holds
    /// (evicted on demand).
    pub fn free_blocks(&self) -> usize {
        self.pool.blocks.n_free() + self.prefix.n_evictable()
    }

    pub fn total_blocks(&self) -> usize {
        self.pool.blocks.n_blocks()
    }

    /// Blocks the prefix cache holds (shared with running sequences or evictable).
    pub fn cached_blocks(&self) -> usize {
        self.prefix.len()
    }

    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    /// The pool (tests read its reference counts).
    pub fn pool(&self) -> &KvPool<B> {
        &self.pool
    }

    /// Drops every cached block no sequence holds; returns how many went back to the pool.
    pub fn clear_prefix_cache(&mut self) -> Result<usize, SchedulerError> {
        Ok(self.prefix.evict_all(&mut self.pool.blocks)?)
    }

    /// The most prompt + new tokens one request may ask for.
    pub fn request_capacity(&self) -> usize {
        self.cfg.max_ctx.min(self.pool.capacity())
    }

    /// Drops request `id` wherever it is (queued or running) and returns its blocks to the
    /// pool; no event is reported for it. Returns whether it was found. Called between steps
    /// (a client went away, a stop string matched), so the next step no longer carries it.
    pub fn cancel(&mut self, id: u64) -> Result<bool, SchedulerError> {
        if let Some(i) = self.waiting.iter().position(|r| r.req.id == id) {
            self.waiting.remove(i);
            return Ok(true);
        }
        if let Some(i) = self.running.iter().position(|r| r.req.id == id) {
            let mut r = self.running.remove(i);
            self.release(&mut r.cache)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Admits what fits, runs one step, samples, and reports tokens and finished requests.
    pub fn step(&mut self) -> Result<Vec<Event>, SchedulerError> {
        self.step_observed(|_, _, _| {})
    }

    /// [`Self::step`], calling `observe(id, logits, token)` for every token sampled this step
    /// (stop tokens included) with the model's raw logits row it was sampled from — before
    /// penalties and temperature (the server's logprobs).
    pub fn step_observed(
        &mut self,
        mut observe: impl FnMut(u64, &[f32], u32),
    ) -> Result<Vec<Event>, SchedulerError> {
        // Running sequences first (growing, preempting); new ones only when nobody had to
        // be preempted, so a request is not admitted just to be sent back.
        if !self.grow()? {
            self.admit()?;
        }
        let mut events = Vec::new();
        if self.running.is_empty() {
            return Ok(events);
        }
        let mut plan = BatchPlan::new(self.pool.block_size());
        let mut budget = self.cfg.max_tokens;
        // (running index) of the rows that asked for logits, in plan order.
        let mut rows = Vec::new();
        // Tokens each running sequence feeds this step.
        let mut fed = vec![0usize; self.running.len()];
        // Decode tokens first, then prompt (or recompute) chunks, each in arrival order.
        for decode in [true, false] {
            for (i, r) in self.running.iter().enumerate() {
                let left = r.tokens.len() - r.cache.len;
                if budget == 0 || (left == 1) != decode {
                    continue;
                }
                let m = budget.min(left);
                let last = m == left;
                let chunk = &r.tokens[r.cache.len..r.cache.len + m];
                let want = if last { Logits::Last } else { Logits::None };
                plan.push(&r.cache, chunk, r.cache.len, want)?;
                if last {
                    rows.push(i);
                }
                fed[i] = m;
                budget -= m;
            }
        }
        let nv = self.model.config().n_vocab;
        let out = &mut self.logits[..plan.logit_rows().len() * nv];
        self.model.step(&plan, &mut self.pool, &mut self.st, out)?;
        self.counters.computed_tokens += fed.iter().sum::<usize>() as u64;
        let bs = self.pool.block_size();
        for (i, r) in self.running.iter_mut().enumerate() {
            r.cache.len += fed[i];
            if self.cfg.prefix_caching {
                // Blocks filled by this step, for later requests with the same prefix.
                let full = r.cache.len / bs;
                r.key_blocks(r.cache.len, bs);
                while r.offered < full {
                    let b = r.offered;
                    let parent = if b == 0 { ROOT } else { r.keys[b - 1] };
                    self.prefix.insert(
                        &mut self.pool.blocks,
                        r.keys[b],
                        parent,
                        &r.tokens[b * bs..(b + 1) * bs],
                        r.cache.blocks[b],
                    )?;
                    r.offered += 1;
                }
            }
        }
        let mut done = Vec::new();
        for (row, &i) in rows.iter().enumerate() {
            let r = &mut self.running[i];
            let row = &out[row * nv..(row + 1) * nv];
            let token = r.sampler.sample(row)?;
            observe(r.req.id, row, token);
            if r.req.stop_tokens.contains(&token) {
                events.push(Event::Finished {
                    id: r.req.id,
                    reason: Finish::Stop(token),
                });
                done.push(i);
                continue;
            }
            events.push(Event::Token {
                id: r.req.id,
                token,
            });
            r.generated += 1;
            if r.generated >= r.req.max_new_tokens {
                events.push(Event::Finished {
                    id: r.req.id,
                    reason: Finish::MaxTokens,
                });
                done.push(i);
            } else {
                r.sampler.accept(token);
                r.tokens.push(token);
            }
        }
        done.sort_unstable();
        for &i in done.iter().rev() {
            let mut r = self.running.remove(i);
            self.release(&mut r.cache)?;
        }
        Ok(events)
    }

    /// Returns `seq`'s blocks (last first, so a sequence's tail is evicted before its
    /// prefix) and empties it.
    fn release(&mut self, seq: &mut SeqCache) -> Result<(), SchedulerError> {
        for &b in seq.blocks.iter().rev() {
            self.pool.blocks.release(b)?;
            self.prefix.released(&self.pool.blocks, b);
        }
        seq.blocks.clear();
        seq.len = 0;
        Ok(())
    }

    /// `n` blocks, evicting unreferenced cached blocks as needed; None (and no change but
    /// evictions) when even that is not enough.
    fn alloc(&mut self, n: usize) -> Result<Option<Vec<u32>>, SchedulerError> {
        if n > self.free_blocks() {
            return Ok(None);
        }
        while self.pool.blocks.n_free() < n {
            if !self.prefix.evict_lru(&mut self.pool.blocks)? {
                return Ok(None);
            }
        }
        Ok(Some(self.pool.blocks.alloc(n)?))
    }

    /// Blocks the pool should keep free when admitting next to running sequences, so they
    /// can grow a while before anyone is preempted (vLLM's 1%).
    fn watermark(&self) -> usize {
        if self.running.is_empty() {
            0
        } else {
            self.pool.blocks.n_blocks().div_ceil(100)
        }
    }

    /// Moves queued requests into the running set, first come first served, while a sequence
    /// slot and the blocks of their tokens (less prefix-cache hits) are free.
    fn admit(&mut self) -> Result<(), SchedulerError> {
        let bs = self.pool.block_size();
        while self.running.len() < self.cfg.max_seqs {
            let Some(s) = self.waiting.front_mut() else {
                break;
            };
            let n = s.tokens.len();
            // Cached blocks this request can use: full blocks before its last token.
            let mut hits = Vec::new();
            if self.cfg.prefix_caching {
                s.key_blocks(n, bs);
                for b in 0..(n - 1) / bs {
                    let parent = if b == 0 { ROOT } else { s.keys[b - 1] };
                    match self
                        .prefix
                        .lookup(s.keys[b], parent, &s.tokens[b * bs..(b + 1) * bs])
                    {
                        Some(block) => hits.push(block),
                        None => break,
                    }
                }
            }
            let need = n.div_ceil(bs) - hits.len();
            // Hits that are evictable now stop being free once taken.
            let taken = hits
                .iter()
                .filter(|&&b| self.prefix.is_evictable(b))
                .count();
            if need + self.watermark() + taken > self.free_blocks() {
                break; // wait for blocks (a running request finishing)
            }
            for &b in &hits {
                self.pool.blocks.retain(b)?;
                self.prefix.touch(b);
            }
            let Some(fresh) = self.alloc(need)? else {
                unreachable!("checked above: {need} blocks are free or evictable");
            };
            let mut s = self.waiting.pop_front().expect("front exists");
            s.cache.len = hits.len() * bs;
            s.offered = hits.len();
            self.counters.prefix_hit_tokens += s.cache.len as u64;
            s.cache.blocks = hits;
            s.cache.blocks.extend(fresh);
            let at = self.running.partition_point(|r| r.arrival < s.arrival);
            self.running.insert(at, s);
        }
        Ok(())
    }

    /// Gives every running sequence the blocks for the tokens it feeds next, oldest first;
    /// when the pool is out, preempts the youngest (which may be the one asking). Returns
    /// whether it preempted.
    fn grow(&mut self) -> Result<bool, SchedulerError> {
        let bs = self.pool.block_size();
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() {
            let need = self.running[i]
                .tokens
                .len()
                .div_ceil(bs)
                .saturating_sub(self.running[i].cache.blocks.len());
            if need == 0 {
                i += 1;
                continue;
            }
            match self.alloc(need)? {
                Some(b) => {
                    self.running[i].cache.blocks.extend(b);
                    i += 1;
                }
                None => {
                    let youngest = self.running.len() - 1;
                    let mut s = self.running.pop().expect("running is not empty");
                    self.release(&mut s.cache)?;
                    s.offered = 0;
                    self.counters.preemptions += 1;
                    preempted = true;
                    tracing::debug!(id = s.req.id, tokens = s.tokens.len(), "preempted");
                    self.waiting.push_front(s);
                    if youngest == i {
                        break;
                    }
                }
            }
        }
        Ok(preempted)
    }
}
