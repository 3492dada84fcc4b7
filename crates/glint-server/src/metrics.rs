//! `GET /metrics`: the server's counters in Prometheus' text exposition format (version 0.0.4),
//! written by hand (a few gauges, counters and two histograms need no client library).
//!
//! Where each number comes from:
//! * gauges (queue depth, running sequences, cache blocks) are what the engine thread
//!   published after its last step, plus the requests still in the bounded channel;
//! * token counters are counted by the engine thread: prompt tokens when a request is admitted
//!   to the scheduler, generated tokens for every sampled token (a chat's end-of-turn token
//!   included, as `usage.completion_tokens` counts it; tokens sampled for a client that has
//!   already left, before the next step cancels it, too);
//! * time to first token runs from the moment the HTTP handler read the request to the step
//!   that sampled its first token; time per output token is each later token's gap to the one
//!   before it (one observation per token after the first, as vLLM's histogram);
//! * HTTP responses are counted by route and status; finished requests by how they ended.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Bucket upper bounds in seconds. The tiny model answers in milliseconds on a CPU, a real one
/// in tens of milliseconds per token on a GPU and seconds on a CPU: the range covers both.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
    160.0, 320.0, 640.0,
];
pub const TPOT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
    2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
];

/// A histogram with fixed buckets (`le` upper bounds, seconds).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<HistInner>,
}

#[derive(Debug, Default, Clone)]
struct HistInner {
    /// Per bucket (not cumulative), plus one for above the last bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            inner: Mutex::new(HistInner {
                counts: vec![0; bounds.len() + 1],
                ..HistInner::default()
            }),
        }
    }

    pub fn observe(&self, seconds: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(self.bounds.len());
        let mut h = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        h.counts[i] += 1;
        h.sum += seconds;
        h.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).count
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let h = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&h.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum {}", h.sum);
        let _ = writeln!(out, "{name}_count {}", h.count);
    }
}

/// Counters keyed by label values.
#[derive(Debug, Default)]
pub struct LabeledCounter {
    map: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl LabeledCounter {
    pub fn inc(&self, labels: &[&str]) {
        let key = labels.iter().map(|s| s.to_string()).collect();
        *self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str, label_names: &[&str]) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (values, n) in map {
            let labels: Vec<String> = label_names
                .iter()
                .zip(&values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {n}", labels.join(","));
        }
    }
}

/// A label value in the exposition format: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The server-side metrics (the engine's live in [`crate::engine::EngineStats`]).
#[derive(Debug, Default)]
pub struct HttpMetrics {
    /// By route (the matched path; `other` for unknown paths) and status code.
    pub responses: LabeledCounter,
    /// By how a request that reached the engine ended: `stop`, `length`, `error`,
    /// `cancelled` (the client went away first).
    pub finished: LabeledCounter,
}

/// One gauge or counter line with its header.
pub fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {v}");
}

/// Everything, in exposition format.
pub fn render(st: &crate::AppState) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let e = &st.engine.stats;
    let mut out = String::new();
    let total = e.total_blocks.load(Relaxed);
    let free = e.free_blocks.load(Relaxed);
    scalar(
        &mut out,
        "glint_engine_up",
        "gauge",
        "1 while the engine thread runs",
        u8::from(e.alive.load(std::sync::atomic::Ordering::SeqCst)),
    );
    scalar(
        &mut out,
        "glint_queue_depth",
        "gauge",
        "Requests waiting for a sequence slot or cache blocks (channel + scheduler queue)",
        st.engine.queued() + e.waiting.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_running_sequences",
        "gauge",
        "Requests admitted to the scheduler (holding cache blocks)",
        e.running.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_cache_blocks_used",
        "gauge",
        "KV pool blocks held by running sequences",
        total.saturating_sub(free),
    );
    scalar(
        &mut out,
        "glint_cache_blocks_free",
        "gauge",
        "KV pool blocks free, or cached for prefix reuse and held by no sequence (evictable)",
        free,
    );
    scalar(
        &mut out,
        "glint_prefix_cache_blocks",
        "gauge",
        "KV pool blocks kept by the prefix cache (shared with sequences or evictable)",
        e.cached_blocks.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_cache_blocks_total",
        "gauge",
        "KV pool blocks in all",
        total,
    );
    scalar(
        &mut out,
        "glint_engine_steps_total",
        "counter",
        "Engine steps run",
        e.steps.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_prompt_tokens_total",
        "counter",
        "Prompt tokens of requests admitted to the engine",
        e.prompt_tokens.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_generation_tokens_total",
        "counter",
        "Tokens sampled (end-of-turn tokens included)",
        e.generated_tokens.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_prefix_cache_hit_tokens_total",
        "counter",
        "Prompt tokens found in the prefix cache (not computed)",
        e.prefix_hit_tokens.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_computed_tokens_total",
        "counter",
        "Tokens run through the model: prompt chunks, decode tokens, recomputation after preemption",
        e.computed_tokens.load(Relaxed),
    );
    scalar(
        &mut out,
        "glint_preemptions_total",
        "counter",
        "Running requests sent back to the queue (and recomputed later) for want of cache blocks",
        e.preemptions.load(Relaxed),
    );
    e.ttft.write(
        &mut out,
        "glint_time_to_first_token_seconds",
        "From reading the request to sampling its first token",
    );
    e.tpot.write(
        &mut out,
        "glint_time_per_output_token_seconds",
        "Gap between consecutive sampled tokens of one request",
    );
    st.metrics.responses.write(
        &mut out,
        "glint_http_responses_total",
        "HTTP responses by route and status",
        &["route", "status"],
    );
    st.metrics.finished.write(
        &mut out,
        "glint_requests_finished_total",
        "Requests that reached the engine, by how they ended",
        &["reason"],
    );
    out
}
