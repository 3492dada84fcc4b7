//! Starting a server on the tiny fixture model and talking to it over loopback HTTP.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use glint_engine::scheduler::SchedulerConfig;
use glint_server::{Server, ServerConfig};
use serde_json::Value;

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5")
}

pub fn model_path() -> PathBuf {
    fixture_dir().join("glm5-tiny-f32.gguf")
}

pub fn config() -> ServerConfig {
    ServerConfig {
        model: model_path(),
        host: "127.0.0.1".into(),
        port: 0,
        model_id: Some("glm5-tiny".into()),
        api_key: None,
        scheduler: SchedulerConfig {
            // Smaller than most prompts, so prompts are chunked next to others' decode tokens.
            max_tokens: 32,
            max_seqs: 16,
            n_blocks: 16 * 32,
            block_size: 16,
            max_ctx: 512,
            cache: Default::default(),
            prefix_caching: true,
        },
        queue: 64,
        max_body_bytes: 64 << 10,
        body_timeout: std::time::Duration::from_secs(30),
        device: Default::default(),
        parallel: Default::default(),
    }
}

pub async fn start(cfg: ServerConfig) -> Server {
    glint_server::start(cfg).await.expect("server starts")
}

pub fn url(s: &Server, path: &str) -> String {
    format!("http://{}{path}", s.addr)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// POSTs JSON; returns the status and the JSON body.
pub async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let r = c.post(url).json(body).send().await.expect("request sent");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?}: {e}"));
    (status, v)
}

/// POSTs a streaming request; returns every `data:` payload as JSON, checking that the
/// stream ends with exactly one `data: [DONE]`.
pub async fn post_stream(c: &reqwest::Client, url: &str, body: &Value) -> Vec<Value> {
    let r = c.post(url).json(body).send().await.expect("request sent");
    assert_eq!(r.status().as_u16(), 200, "streaming request refused");
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut raw = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        raw.extend_from_slice(&b.unwrap());
    }
    let text = String::from_utf8(raw).unwrap();
    let mut out = Vec::new();
    let mut done = 0;
    for event in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data event: {event:?}"));
        assert_eq!(done, 0, "an event after [DONE]: {data}");
        if data == "[DONE]" {
            done += 1;
        } else {
            out.push(serde_json::from_str(data).unwrap());
        }
    }
    assert_eq!(done, 1, "the stream ends with data: [DONE]: {text}");
    out
}

/// Concatenated `delta.content` and `delta.reasoning_content` of chat chunks, and the finish
/// reason of the last choice chunk.
pub fn chat_stream_text(chunks: &[Value]) -> (String, String, String) {
    let (mut content, mut reasoning, mut reason) = (String::new(), String::new(), String::new());
    for c in chunks {
        for ch in c["choices"].as_array().unwrap() {
            if let Some(s) = ch["delta"]["content"].as_str() {
                content.push_str(s);
            }
            if let Some(s) = ch["delta"]["reasoning_content"].as_str() {
                reasoning.push_str(s);
            }
            if let Some(r) = ch["finish_reason"].as_str() {
                reason = r.to_string();
            }
        }
    }
    (content, reasoning, reason)
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Polls /health until `pred` holds (or fails after a few seconds).
pub async fn wait_health(c: &reqwest::Client, s: &Server, pred: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let r = c.get(url(s, "/health")).send().await.unwrap();
        last = r.json().await.unwrap();
        if pred(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("health never reached the expected state: {last}");
}

pub fn idle(h: &Value) -> bool {
    h["running"] == 0 && h["waiting"] == 0 && h["free_blocks"] == h["total_blocks"]
}
