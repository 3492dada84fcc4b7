//! Continuous batching over [`Model::step`]: requests join and leave between steps, each step
//! mixes the prompt chunks of new requests with one decode token of every running one, and
//! the KV pool is shared. This is the loop `glint serve`'s engine thread drives.
//!
//! A request is admitted only when the pool can hold its whole budget (prompt + max new
//! tokens), so a running request never runs out of blocks (no preemption needed yet). Each
//! step spends at most `max_tokens` tokens: decode tokens first (latency), then prompt chunks
//! in arrival order.

use std::collections::VecDeque;

use glm5_model::{
    Backend, BatchPlan, CacheTypes, KvPool, Logits, Model, ModelError, SeqCache, StepLimits,
    StepState,
};

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
}

struct Running {
    req: Request,
    seq: SeqCache,
    sampler: Sampler,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    /// The token to feed next (sampled, not yet in the cache).
    next: Option<u32>,
    generated: usize,
}

pub struct Scheduler<'m, 'a, B: Backend> {
    model: &'m Model<'a, B>,
    pool: KvPool<B>,
    st: StepState<B>,
    cfg: SchedulerConfig,
    waiting: VecDeque<Request>,
    running: Vec<Running>,
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
        self.waiting.push_back(req);
        Ok(())
    }

    /// Requests queued or running.
    pub fn pending(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Requests queued, not yet admitted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests admitted (holding blocks).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Pool blocks free, and in all.
    pub fn free_blocks(&self) -> usize {
        self.pool.blocks.n_free()
    }

    pub fn total_blocks(&self) -> usize {
        self.pool.blocks.n_blocks()
    }

    /// The most prompt + new tokens one request may ask for.
    pub fn request_capacity(&self) -> usize {
        self.cfg.max_ctx.min(self.pool.capacity())
    }

    /// Drops request `id` wherever it is (queued or running) and returns its blocks to the
    /// pool; no event is reported for it. Returns whether it was found. Called between steps
    /// (a client went away, a stop string matched), so the next step no longer carries it.
    pub fn cancel(&mut self, id: u64) -> Result<bool, SchedulerError> {
        if let Some(i) = self.waiting.iter().position(|r| r.id == id) {
            self.waiting.remove(i);
            return Ok(true);
        }
        if let Some(i) = self.running.iter().position(|r| r.req.id == id) {
            let mut r = self.running.remove(i);
            self.pool.release(&mut r.seq).map_err(ModelError::from)?;
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
        self.admit();
        let mut events = Vec::new();
        if self.running.is_empty() {
            return Ok(events);
        }
        let mut plan = BatchPlan::new(self.pool.block_size());
        let mut budget = self.cfg.max_tokens;
        // (running index) of the rows that asked for logits, in plan order.
        let mut rows = Vec::new();
        // What each running request feeds this step: its decode token, or prompt tokens.
        let mut decoded = vec![false; self.running.len()];
        let mut fed = vec![0usize; self.running.len()];
        for (i, r) in self.running.iter().enumerate() {
            if let Some(t) = r.next {
                if budget == 0 {
                    break;
                }
                plan.push(&r.seq, &[t], r.seq.len, Logits::Last)
                    .map_err(ModelError::from)?;
                rows.push(i);
                decoded[i] = true;
                budget -= 1;
            }
        }
        for (i, r) in self.running.iter().enumerate() {
            if r.next.is_none() && budget > 0 {
                let m = budget.min(r.req.prompt.len() - r.prefilled);
                let last = r.prefilled + m == r.req.prompt.len();
                let chunk = &r.req.prompt[r.prefilled..r.prefilled + m];
                let want = if last { Logits::Last } else { Logits::None };
                plan.push(&r.seq, chunk, r.seq.len, want)
                    .map_err(ModelError::from)?;
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
        // Advance every sequence by what it fed.
        for (i, r) in self.running.iter_mut().enumerate() {
            if decoded[i] {
                if let Some(t) = r.next.take() {
                    r.seq.len += 1;
                    r.sampler.accept(t);
                }
            } else {
                r.prefilled += fed[i];
                r.seq.len += fed[i];
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
            if r.generated == r.req.max_new_tokens {
                events.push(Event::Finished {
                    id: r.req.id,
                    reason: Finish::MaxTokens,
                });
                done.push(i);
            } else {
                r.next = Some(token);
            }
        }
        done.sort_unstable();
        for &i in done.iter().rev() {
            let mut r = self.running.remove(i);
            self.pool.release(&mut r.seq).map_err(ModelError::from)?;
        }
        Ok(events)
    }

    /// Moves queued requests into the running set while a sequence slot and the blocks for
    /// their whole budget are free.
    fn admit(&mut self) {
        while self.running.len() < self.cfg.max_seqs {
            let Some(req) = self.waiting.front() else {
                break;
            };
            let mut seq = SeqCache::default();
            if self
                .pool
                .reserve(&mut seq, req.prompt.len() + req.max_new_tokens)
                .is_err()
            {
                break; // wait for a running request to finish
            }
            let req = self.waiting.pop_front().expect("front exists");
            let mut sampler = Sampler::new(req.sampler.clone());
            req.prompt.iter().for_each(|&t| sampler.accept(t));
            self.running.push(Running {
                req,
                seq,
                sampler,
                prefilled: 0,
                next: None,
                generated: 0,
            });
        }
    }
}
