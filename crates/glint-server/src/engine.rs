//! The engine thread: owns the model and the [`Scheduler`], takes requests from a bounded
//! queue and sends each request's tokens down its own channel.
//!
//! HTTP handlers never touch the model. A handler [`EngineHandle::submit`]s a request
//! (`try_send`: a full queue is a 503 at once, never a wait) and reads [`Out`] events from the
//! receiver it gets back. Dropping that receiver — the client went away, a stop string
//! matched — cancels the request: before every step the engine drops requests whose receiver
//! is gone, so their blocks are free by the next step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use glint_engine::sampler::SamplerConfig;
use glint_engine::scheduler::{Event, Finish, Request, Scheduler, SchedulerConfig};
use glint_gguf::Gguf;
use glm5_model::{Backend, CpuBackend, Model};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::metrics::{Histogram, TPOT_BUCKETS, TTFT_BUCKETS};
use crate::ranks::{Mirror, Op, Parallel, RankGone};

/// What a handler asks the engine for.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    pub stop_tokens: Vec<u32>,
    /// Report each generated token's log-probability and this many alternatives (`None`: no
    /// logprobs, and no cost).
    pub logprobs: Option<usize>,
    /// When the HTTP handler read the request (time to first token starts here).
    pub arrived: Instant,
}

/// What the engine reports for one request, in order: tokens, then one `Finished` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Token {
        token: u32,
        /// When the request asked for them.
        logprobs: Option<TokenLogprobs>,
    },
    Finished(Finish),
    Error(String),
}

/// A sampled token's log-probability under the model's distribution (log-softmax of the raw
/// logits: before repetition penalty, temperature and truncation), and the `k` most likely
/// tokens of that distribution, most likely first (ties: the lower id first, as greedy picks).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// [`TokenLogprobs`] of `token` in `logits`, with the `k` best (k may be 0).
pub fn token_logprobs(logits: &[f32], token: u32, k: usize) -> TokenLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&x| (x as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let lp = |i: usize| (logits[i] as f64 - lse) as f32;
    let better = |a: usize, b: usize| logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    // The k best by insertion into a short sorted list: k is at most 20, the row long.
    let k = k.min(logits.len());
    let mut best: Vec<usize> = Vec::with_capacity(k + 1);
    if k > 0 {
        for i in 0..logits.len() {
            if best.len() == k && !better(i, best[k - 1]) {
                continue;
            }
            let at = best.partition_point(|&b| better(b, i));
            best.insert(at, i);
            best.truncate(k);
        }
    }
    TokenLogprobs {
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |_| lp(token as usize)),
        top: best.into_iter().map(|i| (i as u32, lp(i))).collect(),
    }
}

struct Submit {
    id: u64,
    req: GenRequest,
    tx: mpsc::Sender<Out>,
}

/// Counters the engine publishes after each step (`/health`, `/metrics`, tests).
#[derive(Debug)]
pub struct EngineStats {
    pub alive: AtomicBool,
    pub running: AtomicUsize,
    pub waiting: AtomicUsize,
    /// Blocks a request could get: free, or cached and held by no sequence.
    pub free_blocks: AtomicUsize,
    pub total_blocks: AtomicUsize,
    /// Blocks the prefix cache holds (shared with running sequences or evictable).
    pub cached_blocks: AtomicUsize,
    pub steps: AtomicU64,
    /// Tokens run through the model (prompt chunks, decode tokens, recomputation).
    pub computed_tokens: AtomicU64,
    /// Prompt tokens found in the prefix cache instead of computed.
    pub prefix_hit_tokens: AtomicU64,
    /// Running sequences sent back to the queue for want of blocks.
    pub preemptions: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Seconds from a request's arrival to its first sampled token.
    pub ttft: Histogram,
    /// Seconds between consecutive sampled tokens of one request.
    pub tpot: Histogram,
}

impl Default for EngineStats {
    fn default() -> Self {
        Self {
            alive: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            free_blocks: AtomicUsize::new(0),
            total_blocks: AtomicUsize::new(0),
            cached_blocks: AtomicUsize::new(0),
            steps: AtomicU64::new(0),
            computed_tokens: AtomicU64::new(0),
            prefix_hit_tokens: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BUCKETS),
            tpot: Histogram::new(TPOT_BUCKETS),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct EngineInfo {
    /// Longest prompt + completion one request may have.
    pub max_request_tokens: usize,
    pub n_vocab: usize,
}

/// The handlers' side of the engine.
pub struct EngineHandle {
    tx: mpsc::Sender<Submit>,
    next_id: AtomicU64,
    pub stats: Arc<EngineStats>,
    pub info: EngineInfo,
}

impl EngineHandle {
    /// Requests sent but not yet taken by the engine thread.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Queues `req`; its events arrive on the returned receiver. Fails at once with 503 when
    /// the queue is full or the engine has stopped.
    pub fn submit(&self, req: GenRequest) -> Result<mpsc::Receiver<Out>, ApiError> {
        // Every token, then the end: the engine never waits on a slow reader.
        let (tx, rx) = mpsc::channel(req.max_new_tokens.saturating_add(2));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(Submit { id, req, tx }) {
            Ok(()) => Ok(rx),
            Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::overloaded()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ApiError::engine_down()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Load(String),
    #[error("the engine thread could not start: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Starts the engine thread on `gguf` and waits until the model is loaded (on every rank
/// with `parallel.tp` > 1: crate::ranks).
pub fn start(
    gguf: Arc<Gguf>,
    cfg: SchedulerConfig,
    queue: usize,
    device: crate::Device,
    parallel: Parallel,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), EngineError> {
    let split = parallel.tp > 1;
    match device {
        crate::Device::Cpu if split => {
            start_with(gguf, cfg, queue, crate::ranks::on_cpu(parallel, cfg))
        }
        crate::Device::Cpu => start_on(gguf, cfg, queue, || Ok(CpuBackend::new())),
        #[cfg(feature = "cuda")]
        crate::Device::Cuda(n) if split => {
            start_with(gguf, cfg, queue, crate::ranks::on_cuda(n, parallel, cfg))
        }
        #[cfg(feature = "cuda")]
        crate::Device::Cuda(n) => start_on(gguf, cfg, queue, move || {
            glint_cuda::CudaBackend::new(n).map_err(|e| e.to_string())
        }),
        #[cfg(not(feature = "cuda"))]
        crate::Device::Cuda(n) => Err(EngineError::Load(format!(
            "--device cuda:{n}: this glint was built without CUDA support (rebuild with --features cuda)"
        ))),
    }
}

/// One model on the backend `make` opens (on the engine thread: a GPU context lives there).
fn start_on<B: Backend + 'static>(
    gguf: Arc<Gguf>,
    cfg: SchedulerConfig,
    queue: usize,
    make: impl FnOnce() -> Result<B, String> + Send + 'static,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), EngineError> {
    start_with(gguf, cfg, queue, move |gguf, body| {
        let backend = match make() {
            Ok(b) => b,
            Err(e) => return body.failed(format!("opening the device: {e}")),
        };
        let model = match Model::load(gguf, backend) {
            Ok(m) => m,
            Err(e) => return body.failed(format!("loading the model: {e}")),
        };
        match Scheduler::new(&model, cfg) {
            Ok(sched) => body.serve(sched, model.config().n_vocab, Mirror::default()),
            Err(e) => body.failed(format!("sizing the scheduler: {e}")),
        }
    })
}

/// What the engine thread's `launch` gets: it loads the model (however it is split) and then
/// hands the scheduler to [`Body::serve`], or reports why it could not with [`Body::failed`].
pub(crate) struct Body {
    ready: std::sync::mpsc::Sender<Result<EngineInfo, String>>,
    rx: mpsc::Receiver<Submit>,
    stats: Arc<EngineStats>,
    lookahead: usize,
}

impl Body {
    /// Reports the engine ready and runs the loop until every handle is gone.
    pub(crate) fn serve<B: Backend>(
        self,
        sched: Scheduler<'_, '_, B>,
        n_vocab: usize,
        mirror: Mirror,
    ) {
        let info = EngineInfo {
            max_request_tokens: sched.request_capacity(),
            n_vocab,
        };
        let _alive = AliveGuard(self.stats.clone());
        self.stats.alive.store(true, Ordering::SeqCst);
        publish(&sched, &self.stats);
        let _ = self.ready.send(Ok(info));
        run(sched, self.rx, &self.stats, self.lookahead, &mirror);
    }

    pub(crate) fn failed(self, why: String) {
        let _ = self.ready.send(Err(why));
    }
}

/// Starts the engine thread, which runs `launch`, and waits until it has loaded the model.
pub(crate) fn start_with(
    gguf: Arc<Gguf>,
    cfg: SchedulerConfig,
    queue: usize,
    launch: impl FnOnce(&Gguf, Body) + Send + 'static,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), EngineError> {
    let (tx, rx) = mpsc::channel::<Submit>(queue.max(1));
    let stats = Arc::new(EngineStats::default());
    let (ready, ready_rx) = std::sync::mpsc::channel::<Result<EngineInfo, String>>();
    let body = Body {
        ready,
        rx,
        stats: stats.clone(),
        lookahead: cfg.max_seqs,
    };
    let join = std::thread::Builder::new()
        .name("glint-engine".into())
        .spawn(move || launch(&gguf, body))?;
    let info = match ready_rx.recv() {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(EngineError::Load(e)),
        Err(_) => {
            return Err(EngineError::Load(
                "the engine thread died while loading".into(),
            ))
        }
    };
    Ok((
        EngineHandle {
            tx,
            next_id: AtomicU64::new(1),
            stats,
            info,
        },
        join,
    ))
}

/// Marks the engine dead when its thread ends, however it ends (a panic included).
struct AliveGuard(Arc<EngineStats>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
    }
}

fn publish<B: Backend>(s: &Scheduler<'_, '_, B>, stats: &EngineStats) {
    stats.running.store(s.running(), Ordering::Relaxed);
    stats.waiting.store(s.waiting(), Ordering::Relaxed);
    stats.free_blocks.store(s.free_blocks(), Ordering::Relaxed);
    stats
        .total_blocks
        .store(s.total_blocks(), Ordering::Relaxed);
    stats
        .cached_blocks
        .store(s.cached_blocks(), Ordering::Relaxed);
    let c = s.counters();
    stats
        .computed_tokens
        .store(c.computed_tokens, Ordering::Relaxed);
    stats
        .prefix_hit_tokens
        .store(c.prefix_hit_tokens, Ordering::Relaxed);
    stats.preemptions.store(c.preemptions, Ordering::Relaxed);
}

/// The loop: take work (blocking only when idle), drop requests nobody reads any more, step,
/// route events. Ends when every handle is gone and no work is left, or (with `--tp`) when a
/// rank stops. Every scheduler operation is sent to `mirror`'s followers first.
fn run<B: Backend>(
    mut sched: Scheduler<'_, '_, B>,
    mut rx: mpsc::Receiver<Submit>,
    stats: &EngineStats,
    lookahead: usize,
    mirror: &Mirror,
) {
    let mut live: HashMap<u64, Live> = HashMap::new();
    if let Err(e) = serve_loop(&mut sched, &mut rx, stats, lookahead, mirror, &mut live) {
        tracing::error!(error = %e, "the engine stops");
        for (_, l) in live.drain() {
            let _ = l.tx.try_send(Out::Error(format!("engine stopped: {e}")));
        }
    }
    publish(&sched, stats);
}

fn serve_loop<B: Backend>(
    sched: &mut Scheduler<'_, '_, B>,
    rx: &mut mpsc::Receiver<Submit>,
    stats: &EngineStats,
    lookahead: usize,
    mirror: &Mirror,
    live: &mut HashMap<u64, Live>,
) -> Result<(), Stop> {
    let mut closed = false;
    loop {
        if sched.pending() == 0 {
            if closed {
                return Ok(());
            }
            match rx.blocking_recv() {
                Some(m) => accept(sched, live, m, stats, mirror)?,
                None => return Ok(()),
            }
        }
        // Keep a few requests queued in the scheduler so admission never waits on the
        // channel; the rest stay in the bounded channel, which is what makes it fill up.
        while !closed && sched.waiting() < lookahead.max(1) {
            match rx.try_recv() {
                Ok(m) => accept(sched, live, m, stats, mirror)?,
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => closed = true,
            }
        }
        let gone: Vec<u64> = live
            .iter()
            .filter(|(_, l)| l.tx.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            live.remove(&id);
            cancel(sched, id, mirror)?;
            tracing::debug!(id, "request cancelled (its reader went away)");
        }
        if sched.pending() == 0 {
            publish(sched, stats);
            continue;
        }
        // Logprobs of this step's tokens, for the requests that asked (computed while the
        // logits row is at hand).
        let mut lps: HashMap<u64, TokenLogprobs> = HashMap::new();
        mirror.send(|| Op::Step)?;
        let stepped = sched.step_observed(|id, row, token| {
            if let Some(k) = live.get(&id).and_then(|l| l.logprobs) {
                lps.insert(id, token_logprobs(row, token, k));
            }
        });
        match stepped {
            Ok(events) => {
                stats.steps.fetch_add(1, Ordering::Relaxed);
                route(events, live, &mut lps, stats);
            }
            Err(e) if mirror.is_empty() => {
                // A failed step leaves no request in a known state: fail them all, free all.
                tracing::error!(error = %e, "engine step failed");
                for (id, l) in live.drain() {
                    let _ =
                        l.tx.try_send(Out::Error(format!("engine step failed: {e}")));
                    let _ = sched.cancel(id);
                }
            }
            // The ranks' schedulers may no longer agree: stop them all.
            Err(e) => return Err(Stop::Step(e.to_string())),
        }
        publish(sched, stats);
    }
}

/// Why the engine loop ended early.
#[derive(Debug)]
enum Stop {
    Rank(RankGone),
    Step(String),
    Cancel(String),
}

impl From<RankGone> for Stop {
    fn from(e: RankGone) -> Self {
        Stop::Rank(e)
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Rank(e) => e.fmt(f),
            Stop::Step(e) => write!(f, "a tensor-parallel step failed: {e}"),
            Stop::Cancel(e) => write!(f, "cancelling a request failed: {e}"),
        }
    }
}

fn cancel<B: Backend>(
    sched: &mut Scheduler<'_, '_, B>,
    id: u64,
    mirror: &Mirror,
) -> Result<(), Stop> {
    mirror.send(|| Op::Cancel(id))?;
    match sched.cancel(id) {
        Ok(_) => Ok(()),
        Err(e) if mirror.is_empty() => {
            tracing::error!(id, error = %e, "cancel failed");
            Ok(())
        }
        Err(e) => Err(Stop::Cancel(e.to_string())),
    }
}

/// Sends a step's events to their requests' channels.
fn route(
    events: Vec<Event>,
    live: &mut HashMap<u64, Live>,
    lps: &mut HashMap<u64, TokenLogprobs>,
    stats: &EngineStats,
) {
    let now = Instant::now();
    for e in events {
        match e {
            Event::Token { id, token } => {
                stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
                if let Some(l) = live.get_mut(&id) {
                    l.sampled(now, stats);
                    // Capacity covers every token, so only a gone reader fails; the next
                    // pass cancels it.
                    let _ = l.tx.try_send(Out::Token {
                        token,
                        logprobs: lps.remove(&id),
                    });
                }
            }
            Event::Finished { id, reason } => {
                if let Some(mut l) = live.remove(&id) {
                    if let Finish::Stop(_) = reason {
                        // The end-of-turn token was sampled too.
                        stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
                        l.sampled(now, stats);
                    }
                    let _ = l.tx.try_send(Out::Finished(reason));
                }
            }
        }
    }
}

/// A request the engine holds: where its events go, and its timing.
struct Live {
    tx: mpsc::Sender<Out>,
    logprobs: Option<usize>,
    arrived: Instant,
    /// When its last token was sampled.
    last: Option<Instant>,
}

impl Live {
    fn sampled(&mut self, now: Instant, stats: &EngineStats) {
        match self.last {
            None => stats.ttft.observe((now - self.arrived).as_secs_f64()),
            Some(t) => stats.tpot.observe((now - t).as_secs_f64()),
        }
        self.last = Some(now);
    }
}

fn accept<B: Backend>(
    sched: &mut Scheduler<'_, '_, B>,
    live: &mut HashMap<u64, Live>,
    m: Submit,
    stats: &EngineStats,
    mirror: &Mirror,
) -> Result<(), RankGone> {
    if m.tx.is_closed() {
        return Ok(()); // gone while queued
    }
    let n_prompt = m.req.prompt.len() as u64;
    let (logprobs, arrived) = (m.req.logprobs, m.req.arrived);
    let req = Request {
        id: m.id,
        prompt: m.req.prompt,
        max_new_tokens: m.req.max_new_tokens,
        sampler: m.req.sampler,
        stop_tokens: m.req.stop_tokens,
    };
    mirror.send(|| Op::Submit(req.clone()))?;
    match sched.submit(req) {
        Ok(()) => {
            stats.prompt_tokens.fetch_add(n_prompt, Ordering::Relaxed);
            live.insert(
                m.id,
                Live {
                    tx: m.tx,
                    logprobs,
                    arrived,
                    last: None,
                },
            );
        }
        Err(e) => {
            let _ = m.tx.try_send(Out::Error(e.to_string()));
        }
    }
    Ok(())
}
