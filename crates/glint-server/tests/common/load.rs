//! A load generator for `glint serve` on loopback: many concurrent streaming `/v1/completions`
//! requests over a few distinct prompts (sharing a long prefix, as agent and multi-turn
//! traffic does), some clients hanging up mid-stream. Used by `tests/load.rs` (correctness)
//! and `examples/load.rs` (the figures in docs/performance.md).
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use glint_engine::generate::{generate, GenerateParams};
use glint_engine::sampler::SamplerConfig;
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    /// Requests sent at once.
    pub requests: usize,
    /// Distinct prompts (request i sends prompt i % distinct).
    pub distinct: usize,
    /// Tokens each request asks for (end-of-generation tokens ignored, so exactly this many).
    pub max_tokens: usize,
    /// Every `disconnect_every`-th client hangs up after its first text chunk (0: none).
    pub disconnect_every: usize,
    /// Requests per second, evenly spaced (0: all at once, a burst).
    pub rate: f64,
}

/// What one client saw.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub prompt: usize,
    /// Status of the response (0: no response).
    pub status: u16,
    pub text: String,
    /// The stream ended with a `finish_reason` chunk and `data: [DONE]`.
    pub complete: bool,
    pub finish_reason: Option<String>,
    /// The client hung up on purpose.
    pub disconnected: bool,
    /// From sending the request to the first text chunk.
    pub ttft: Option<Duration>,
    /// Arrival times of the text chunks, from sending the request.
    pub chunks: Vec<Duration>,
}

impl Outcome {
    /// Mean gap between text chunks after the first (a chunk is one token unless text was
    /// held back, so this is time per output token as a client sees it).
    pub fn tpot(&self, max_tokens: usize) -> Option<Duration> {
        let (first, last) = (self.chunks.first()?, self.chunks.last()?);
        (max_tokens > 1 && self.chunks.len() > 1)
            .then(|| (*last - *first) / (max_tokens as u32 - 1))
    }
}

/// `distinct` prompts: one long shared prefix (a system prompt) and a short question each.
pub fn prompts(distinct: usize) -> Vec<String> {
    let prefix = "You are a careful assistant. Answer in one short sentence, in plain words, \
                  and never repeat the question. ";
    (0..distinct)
        .map(|k| {
            format!(
                "{prefix}Question {k}: what is {} times {}?",
                k % 7 + 2,
                k / 7 + 3
            )
        })
        .collect()
}

/// Each prompt's greedy continuation of `n` tokens by `glint_engine::generate` alone (one
/// sequence, no scheduler, no server): its token count and its text.
pub fn alone(model: &std::path::Path, prompts: &[String], n: usize) -> Vec<(usize, String)> {
    let gguf = Gguf::open(model).unwrap();
    let tok = Tokenizer::from_metadata(gguf.metadata()).unwrap();
    prompts
        .iter()
        .map(|p| {
            let ids = tok.encode_prompt(p).unwrap();
            let mut m = Glm5::load(&gguf, CpuBackend::new(), ids.len() + n).unwrap();
            let params = GenerateParams {
                max_new_tokens: n,
                sampler: SamplerConfig::greedy(),
                stop_at_eog: false,
                print_special: false,
            };
            let g = generate(&mut m, &tok, &ids, &params, |_| {}).unwrap();
            assert_eq!(g.tokens.len(), n);
            (ids.len(), g.text)
        })
        .collect()
}

/// One streaming request.
async fn one(
    c: reqwest::Client,
    url: String,
    prompt_no: usize,
    prompt: String,
    max_tokens: usize,
    disconnect: bool,
) -> Outcome {
    let mut o = Outcome {
        prompt: prompt_no,
        status: 0,
        text: String::new(),
        complete: false,
        finish_reason: None,
        disconnected: false,
        ttft: None,
        chunks: Vec::new(),
    };
    let body = json!({
        "prompt": prompt, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": true,
        "stream": true,
    });
    let t0 = Instant::now();
    let r = match c.post(&url).json(&body).send().await {
        Ok(r) => r,
        Err(_) => return o,
    };
    o.status = r.status().as_u16();
    if o.status != 200 {
        return o;
    }
    let mut s = r.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut done = false;
    while let Some(b) = s.next().await {
        let Ok(b) = b else { return o };
        buf.extend_from_slice(&b);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let event = String::from_utf8(event).expect("events are UTF-8");
            let data = event.trim().strip_prefix("data: ").expect("a data event");
            if data == "[DONE]" {
                done = true;
                continue;
            }
            assert!(!done, "an event after [DONE]");
            let v: Value = serde_json::from_str(data).expect("a JSON event");
            let ch = &v["choices"][0];
            if let Some(t) = ch["text"].as_str().filter(|t| !t.is_empty()) {
                o.text.push_str(t);
                let at = t0.elapsed();
                o.ttft.get_or_insert(at);
                o.chunks.push(at);
            }
            if let Some(f) = ch["finish_reason"].as_str() {
                o.finish_reason = Some(f.to_string());
            }
            if disconnect && !o.text.is_empty() {
                o.disconnected = true;
                return o; // drops the stream: the connection closes mid-stream
            }
        }
    }
    o.complete = done && o.finish_reason.is_some();
    o
}

/// Sends `spec.requests` streaming requests to `base` (`http://addr`), at once or at
/// `spec.rate`; returns every client's outcome and the wall time from the first send to the
/// last answer.
pub async fn run(base: &str, spec: LoadSpec) -> (Vec<Outcome>, Duration) {
    let prompts = prompts(spec.distinct);
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .pool_max_idle_per_host(spec.requests)
        .build()
        .unwrap();
    let url = format!("{base}/v1/completions");
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..spec.requests)
        .map(|i| {
            let k = i % spec.distinct;
            let disconnect = spec.disconnect_every > 0 && i % spec.disconnect_every == 3;
            let start = t0
                + Duration::from_secs_f64(if spec.rate > 0.0 {
                    i as f64 / spec.rate
                } else {
                    0.0
                });
            let req = one(
                c.clone(),
                url.clone(),
                k,
                prompts[k].clone(),
                spec.max_tokens,
                disconnect,
            );
            tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                req.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("client task"));
    }
    (out, t0.elapsed())
}

/// p50, p90, p99 (nearest rank) of `xs` in milliseconds.
pub fn percentiles(mut xs: Vec<f64>) -> [f64; 3] {
    xs.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| {
        if xs.is_empty() {
            f64::NAN
        } else {
            xs[((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1]
        }
    };
    [at(0.5), at(0.9), at(0.99)]
}

/// `name{labels}` → value from Prometheus text.
pub fn metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// The process's resident set now and at its peak, in KiB (Linux; 0 elsewhere).
pub fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
