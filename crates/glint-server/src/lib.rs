//! `glint serve`: an OpenAI-compatible HTTP server over glint-engine's continuous-batching
//! [`Scheduler`](glint_engine::scheduler::Scheduler).
//!
//! ```text
//! HTTP (axum) ── validate, template, tokenize (blocking pool) ──► bounded queue ──► engine thread
//!      ▲                                                                              │ step()
//!      └───── SSE chunks / one JSON body ◄── text pipeline ◄── per-request channel ◄──┘
//! ```
//!
//! * [`anthropic`]: `/v1/messages` (Anthropic's Messages API) on the same pipeline;
//! * [`api`]: request bodies and their validation (every field, errors naming it);
//! * [`engine`]: the engine thread and the channels to it (cancel = drop the receiver);
//! * [`text`]: UTF-8 assembly, stop strings and the `<think>` split, all streaming-safe;
//! * [`error`]: OpenAI's JSON error shape;
//! * [`metrics`]: `GET /metrics` in Prometheus' text format.

pub mod anthropic;
pub mod api;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod ranks;
pub mod text;
pub mod tools;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use glint_engine::chat::ChatTemplate;
use glint_engine::scheduler::{Finish, SchedulerConfig};
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::api::{ChatRequest, Common, CompletionRequest, PromptInput, Settings};
use crate::engine::{EngineHandle, EngineStats, GenRequest, Out, TokenLogprobs};
use crate::error::ApiError;
use crate::text::{ReasoningSplitter, Split, TextPipeline, THINK_CLOSE, THINK_OPEN};
use crate::tools::{ToolEvent, ToolParser, Tools};

/// How `glint serve` is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub model: PathBuf,
    pub host: String,
    /// 0 picks a free port (tests).
    pub port: u16,
    /// The model id clients name; the file's stem by default.
    pub model_id: Option<String>,
    /// Required as `Authorization: Bearer <key>` on /v1/* when set.
    pub api_key: Option<String>,
    pub scheduler: SchedulerConfig,
    /// Requests that may wait for the engine beyond those it holds; one more is a 503.
    pub queue: usize,
    /// Largest request body in bytes; a larger one is a 413.
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's whole body; slower is a 408 (and the
    /// connection is closed), so trickling bodies cannot hold connections open.
    pub body_timeout: std::time::Duration,
    /// Where the model runs.
    pub device: Device,
    /// How it is split across devices (`--tp N [--ep]`).
    pub parallel: ranks::Parallel,
}

/// A device for the engine: the CPU, or CUDA GPU N (needs the `cuda` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(usize),
}

impl ServerConfig {
    pub const DEFAULT_QUEUE: usize = 256;
    pub const DEFAULT_MAX_BODY: usize = 8 << 20;
    pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: glint_gguf::GgufError,
    },
    #[error("{1}: tokenizer: {0}")]
    Tokenizer(String, String),
    #[error("chat template: {0}")]
    Template(String),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// What every handler shares.
pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    pub model_id: String,
    pub api_key: Option<String>,
    pub created: u64,
    /// `<think>` and `</think>` as token ids, when the vocabulary has them: they are control
    /// tokens (printing nothing) but the reasoning split needs to see them.
    think: Option<(u32, u32)>,
    /// The tool-call tags as token ids and their text (printed when a request has tools).
    tool_tags: Vec<(u32, &'static str)>,
    /// Tokens the KV pool holds (`n` choices must fit together).
    pool_tokens: usize,
    /// What ends a chat turn: the GGUF's end-of-generation ids plus GLM's turn tokens.
    chat_stops: Vec<u32>,
    next_response: AtomicU64,
    pub metrics: metrics::HttpMetrics,
    /// The body's limits: bytes, and time to receive them.
    max_body: usize,
    body_timeout: std::time::Duration,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A running server (in-process: tests start it on port 0).
pub struct Server {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    engine_thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn stats(&self) -> &EngineStats {
        &self.state.engine.stats
    }

    /// Stops accepting, lets running requests finish (graceful), then stops the engine.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.finish().await
    }

    /// Runs until `signals` reports SIGINT or SIGTERM, then shuts down as
    /// [`Server::shutdown`] does.
    pub async fn run_until_signal(mut self, mut signals: StopSignals) -> Result<(), ServerError> {
        signals.recv().await;
        tracing::info!("shutting down: draining running requests");
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.finish().await
    }

    async fn finish(mut self) -> Result<(), ServerError> {
        let task = std::mem::replace(&mut self.task, tokio::spawn(async { Ok(()) }));
        match task.await {
            Ok(r) => r?,
            Err(e) => tracing::error!(error = %e, "server task failed"),
        }
        let join = self.engine_thread.take();
        // The handles held by the state end the engine loop once dropped.
        drop(self);
        if let Some(j) = join {
            let _ = tokio::task::spawn_blocking(move || j.join()).await;
        }
        Ok(())
    }
}

/// SIGINT and SIGTERM, caught from the moment [`StopSignals::install`] returns.
///
/// Installed before the server announces its address: a signal that arrives between the
/// announcement and the first wait would otherwise take the default action and kill the
/// process mid-stream (a client that saw the address may already be reading a response).
pub struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Must run inside a Tokio runtime (the handlers are registered with its driver).
    pub fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the first of the signals.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Loads the model (engine thread), binds and starts serving in the background.
pub async fn start(cfg: ServerConfig) -> Result<Server, ServerError> {
    let path = cfg.model.clone();
    let gguf = Gguf::open(&path).map_err(|source| ServerError::Open {
        path: path.clone(),
        source,
    })?;
    let gguf = Arc::new(gguf);
    let tokenizer = Tokenizer::from_metadata(gguf.metadata())
        .map_err(|e| ServerError::Tokenizer(e.to_string(), path.display().to_string()))?;
    let template = match tokenizer.chat_template() {
        Some(src) => {
            let name = |id: Option<u32>| {
                id.and_then(|i| tokenizer.id_to_token(i))
                    .map(str::to_string)
            };
            Some(
                ChatTemplate::new(src, name(tokenizer.bos()), name(tokenizer.eos()))
                    .map_err(|e| ServerError::Template(e.to_string()))?,
            )
        }
        None => None,
    };
    let think = tokenizer
        .token_to_id(THINK_OPEN)
        .zip(tokenizer.token_to_id(THINK_CLOSE));
    let tool_tags = tools::TAGS
        .iter()
        .filter_map(|t| tokenizer.token_to_id(t).map(|id| (id, *t)))
        .collect();
    let mut chat_stops = tokenizer.eog_ids().to_vec();
    for t in ["<|user|>", "<|observation|>", "<|endoftext|>"] {
        if let Some(id) = tokenizer.token_to_id(t) {
            if !chat_stops.contains(&id) {
                chat_stops.push(id);
            }
        }
    }
    let model_id = cfg.model_id.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "glm-5".into())
    });
    let (sched, queue, device, parallel) = (cfg.scheduler, cfg.queue, cfg.device, cfg.parallel);
    let g = gguf.clone();
    let (engine, engine_thread) =
        tokio::task::spawn_blocking(move || engine::start(g, sched, queue, device, parallel))
            .await
            .map_err(|e| ServerError::Template(format!("engine start panicked: {e}")))??;
    let state = Arc::new(AppState {
        engine,
        tokenizer,
        template,
        model_id,
        api_key: cfg.api_key.clone(),
        created: now(),
        think,
        tool_tags,
        pool_tokens: cfg.scheduler.n_blocks * cfg.scheduler.block_size,
        chat_stops,
        next_response: AtomicU64::new(1),
        metrics: Default::default(),
        max_body: cfg.max_body_bytes,
        body_timeout: cfg.body_timeout,
    });
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let addr = listener.local_addr()?;
    let app = router(state.clone(), cfg.max_body_bytes);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app, cfg.body_timeout, async {
        let _ = rx.await;
    }));
    tracing::info!(%addr, model = %state.model_id, "glint serve listening");
    Ok(Server {
        addr,
        state,
        shutdown: Some(tx),
        task,
        engine_thread: Some(engine_thread),
    })
}

/// The accept loop (what `axum::serve` does, plus a deadline for each request's line and
/// headers: hyper's `header_read_timeout`, which needs a timer that axum's loop does not
/// give it). On `shutdown`: stops accepting, lets every connection finish its requests
/// (streams included) and close, then returns.
async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every connection task holds a clone; `closed()` resolves when the last is gone.
    let (alive_tx, alive_rx) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Streams are many small writes: without TCP_NODELAY, Nagle's algorithm holds each
        // one until the client acknowledges the previous, which delayed ACKs put off by ~40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let alive = alive_rx.clone();
        tokio::spawn(async move {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = b
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            tokio::pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    _ = stop.changed(), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(alive);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(alive_rx);
    alive_tx.closed().await;
    Ok(())
}

/// Every route, as `/metrics` labels them.
const ROUTES: &[&str] = &[
    "/health",
    "/metrics",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/v1/messages",
];

/// The routes, with the API key check on /v1/*, the body limit and panic recovery.
pub fn router(state: Arc<AppState>, max_body: usize) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/messages", post(messages))
        // Inner: the body is read once the key is checked.
        .route_layer(middleware::from_fn_with_state(state.clone(), read_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .merge(v1)
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                ..ApiError::bad_request("method not allowed on this endpoint")
            }
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("internal error while handling the request").into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_response,
        ))
        .with_state(state)
}

/// Reads the whole body before the handler, within `--body-timeout` and `--max-body-bytes`: a
/// client that trickles its body (slowloris) gets a 408 and its connection is closed, the
/// others are served meanwhile.
async fn read_body(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let messages = req.uri().path() == "/v1/messages";
    let fail = |e: ApiError| {
        let mut r = if messages {
            anthropic::error_response(e)
        } else {
            e.into_response()
        };
        r.headers_mut()
            .insert(header::CONNECTION, "close".parse().expect("static"));
        r
    };
    let (parts, body) = req.into_parts();
    let too_large = || {
        ApiError::too_large(format!(
            "request body too large: more than {} bytes",
            st.max_body
        ))
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > st.max_body as u64) {
        return fail(too_large());
    }
    let read = async {
        let mut s = body.into_data_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad_request(format!("could not read the request body: {e}"))
            })?;
            if buf.len() + chunk.len() > st.max_body {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    let bytes = match tokio::time::timeout(st.body_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return fail(e),
        Err(_) => {
            tracing::debug!(path = %parts.uri.path(), "request body timed out");
            return fail(ApiError::timeout(format!(
                "the request body did not arrive within {:?}",
                st.body_timeout
            )));
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let matches = |k: &str| constant_time_eq(k.trim().as_bytes(), key.as_bytes());
        let h = req.headers();
        // OpenAI clients send a bearer token, Anthropic clients `x-api-key`.
        let ok = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(matches)
            || h.get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .is_some_and(matches);
        if !ok {
            if req.uri().path() == "/v1/messages" {
                return anthropic::error_response(ApiError::unauthorized());
            }
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Counts every response by route and status for `/metrics` (outermost, so 401s, 404s, 413s
/// and panics are counted too).
async fn count_response(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    // Routing has not run yet in an outer layer: name known paths, lump the rest together
    // (so that scanners cannot grow the label set).
    let path = req.uri().path();
    let route = ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other");
    let r = next.run(req).await;
    st.metrics.responses.inc(&[route, r.status().as_str()]);
    r
}

async fn metrics_text(State(st): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(&st),
    )
        .into_response()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.engine.stats;
    let alive = s.alive.load(Ordering::SeqCst);
    let body = json!({
        "status": if alive { "ok" } else { "engine stopped" },
        "running": s.running.load(Ordering::Relaxed),
        "waiting": s.waiting.load(Ordering::Relaxed),
        "free_blocks": s.free_blocks.load(Ordering::Relaxed),
        "total_blocks": s.total_blocks.load(Ordering::Relaxed),
        "cached_blocks": s.cached_blocks.load(Ordering::Relaxed),
        "steps": s.steps.load(Ordering::Relaxed),
        "prefix_hit_tokens": s.prefix_hit_tokens.load(Ordering::Relaxed),
        "preemptions": s.preemptions.load(Ordering::Relaxed),
        "prompt_tokens": s.prompt_tokens.load(Ordering::Relaxed),
        "generated_tokens": s.generated_tokens.load(Ordering::Relaxed),
    });
    let status = if alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn models(State(st): State<Arc<AppState>>) -> Response {
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_id,
            "object": "model",
            "created": st.created,
            "owned_by": "glint",
            "max_model_len": st.engine.info.max_request_tokens,
        }],
    }))
    .into_response()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
    /// Anthropic's `/v1/messages`.
    Messages,
}

/// A validated request, ready for the engine.
struct Prepared {
    kind: Kind,
    gen: GenRequest,
    settings: Settings,
    /// Chat: whether generation starts inside a reasoning block.
    reasoning: Option<bool>,
    /// Chat with `tools`: the tools to parse calls of, and the text the answer starts with.
    tools: Option<Tools>,
    prefill: Option<String>,
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        let msg = r.body_text();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(format!("request body too large: {msg}"))
        } else {
            ApiError {
                status,
                ..ApiError::bad_request(format!("could not read the request body: {msg}"))
            }
        }
    })
}

/// The completion budget: what the request asks (checked against the context), or all the
/// context the prompt leaves.
fn budget(
    st: &AppState,
    prompt_len: usize,
    asked: Option<u64>,
    field: &str,
) -> Result<usize, ApiError> {
    let ctx = st.engine.info.max_request_tokens;
    if prompt_len >= ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt has {prompt_len} tokens; the context holds {ctx} (prompt + completion)"
        ))
        .with_code("context_length_exceeded"));
    }
    let room = ctx - prompt_len;
    match asked {
        None => Ok(room),
        Some(n) if n as u128 <= room as u128 => Ok(n as usize),
        Some(n) => Err(ApiError::field(
            field,
            format!(
                "{n} tokens do not fit: the prompt has {prompt_len} tokens and the context \
                 {ctx}, so at most {room} can be generated"
            ),
        )
        .with_code("context_length_exceeded")),
    }
}

/// `n` choices must fit the KV pool together (each is a sequence of prompt + budget).
fn check_n(st: &AppState, n: usize, prompt_len: usize, budget: usize) -> Result<(), ApiError> {
    let need = n.saturating_mul(prompt_len + budget);
    if n > 1 && need > st.pool_tokens {
        return Err(ApiError::field(
            "n",
            format!(
                "{n} choices of {prompt_len} prompt + {budget} completion tokens need {need} \
                 tokens of KV cache; the server holds {}: ask for fewer choices or a smaller \
                 max_tokens",
                st.pool_tokens
            ),
        ));
    }
    Ok(())
}

fn encode(st: &AppState, text: &str, raw: bool) -> Result<Vec<u32>, ApiError> {
    let r = if raw {
        st.tokenizer.encode_prompt(text)
    } else {
        st.tokenizer.encode(text)
    };
    r.map_err(|e| ApiError::bad_request(format!("the prompt cannot be tokenized: {e}")))
}

/// Appends a forced call's opening to a rendered prompt: the call is the answer, so it
/// starts after the reasoning block (closed first when the prompt opened one).
fn prefill(st: &AppState, text: &mut String, prefill: Option<&str>) {
    if let Some(p) = prefill {
        if st.think.is_some() && ReasoningSplitter::prompt_opens_reasoning(text) {
            text.push_str(THINK_CLOSE);
        }
        text.push_str(p);
    }
}

/// The chat template's text for `messages` (and `kwargs`, `tools`).
fn render_text(
    st: &AppState,
    messages: Vec<Value>,
    kwargs: Option<&serde_json::Map<String, Value>>,
    tools: Option<Vec<Value>>,
) -> Result<String, ApiError> {
    let tmpl = st.template.as_ref().ok_or_else(|| {
        ApiError::bad_request("this model has no chat template; use /v1/completions")
    })?;
    let mut ctx = json!({"add_generation_prompt": true});
    if let Some(kw) = kwargs {
        for (k, val) in kw {
            if k == "messages" || k == "add_generation_prompt" || (k == "tools" && tools.is_some())
            {
                return Err(ApiError::field(
                    format!("chat_template_kwargs.{k}"),
                    "is set by the server",
                ));
            }
            ctx[k] = val.clone();
        }
    }
    ctx["messages"] = Value::Array(messages);
    if let Some(t) = tools {
        ctx["tools"] = Value::Array(t);
    }
    tmpl.render_json(&ctx)
        .map_err(|e| ApiError::bad_request(format!("chat template: {e}")))
}

fn prepare_chat(st: &AppState, body: &[u8]) -> Result<Prepared, ApiError> {
    let v = api::parse_body(body)?;
    let common: Common = api::view(&v)?;
    let req: ChatRequest = api::view(&v)?;
    let settings = common.settings(&st.model_id)?;
    let messages = req.template_messages()?;
    let plan = req.tool_plan()?;
    let mut text = render_text(st, messages, req.chat_template_kwargs.as_ref(), plan.render)?;
    prefill(st, &mut text, plan.prefill.as_deref());
    let prompt = encode(st, &text, false)?;
    let field = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_new_tokens = budget(st, prompt.len(), req.max_tokens(), field)?;
    let reasoning = st
        .think
        .map(|_| ReasoningSplitter::prompt_opens_reasoning(&text));
    let mut stop_tokens = if settings.ignore_eos {
        vec![]
    } else {
        st.chat_stops.clone()
    };
    stop_tokens.extend(common.stop_token_ids(st.engine.info.n_vocab)?);
    check_n(st, settings.n, prompt.len(), max_new_tokens)?;
    Ok(Prepared {
        kind: Kind::Chat,
        gen: GenRequest {
            prompt,
            max_new_tokens,
            sampler: settings.sampler.clone(),
            stop_tokens,
            logprobs: req.logprobs()?,
            arrived: Instant::now(),
        },
        settings,
        reasoning,
        tools: plan.tools,
        prefill: plan.prefill,
    })
}

fn prepare_messages(st: &AppState, body: &[u8]) -> Result<Prepared, ApiError> {
    let v = api::parse_body(body)?;
    let req: anthropic::MessagesRequest = api::view(&v)?;
    let plan = req.plan(&st.model_id)?;
    let mut kw = serde_json::Map::new();
    kw.insert("enable_thinking".into(), plan.enable_thinking.into());
    let mut text = render_text(st, plan.messages, Some(&kw), plan.tools.render)?;
    prefill(st, &mut text, plan.tools.prefill.as_deref());
    let prompt = encode(st, &text, false)?;
    let max_new_tokens = budget(st, prompt.len(), plan.settings.max_tokens, "max_tokens")?;
    let reasoning = st
        .think
        .map(|_| ReasoningSplitter::prompt_opens_reasoning(&text));
    Ok(Prepared {
        kind: Kind::Messages,
        gen: GenRequest {
            prompt,
            max_new_tokens,
            sampler: plan.settings.sampler.clone(),
            stop_tokens: st.chat_stops.clone(),
            logprobs: None,
            arrived: Instant::now(),
        },
        settings: plan.settings,
        reasoning,
        tools: plan.tools.tools,
        prefill: plan.tools.prefill,
    })
}

fn prepare_completion(st: &AppState, body: &[u8]) -> Result<Prepared, ApiError> {
    let v = api::parse_body(body)?;
    let common: Common = api::view(&v)?;
    let req: CompletionRequest = api::view(&v)?;
    let settings = common.settings(&st.model_id)?;
    let prompt = match req.prompt(st.engine.info.n_vocab)? {
        PromptInput::Text(s) => encode(st, &s, true)?,
        PromptInput::Tokens(t) => t,
    };
    let max_new_tokens = budget(
        st,
        prompt.len(),
        // OpenAI's legacy default is 16 tokens.
        Some(settings.max_tokens.unwrap_or(16)),
        "max_tokens",
    )?;
    let mut stop_tokens = if settings.ignore_eos {
        vec![]
    } else {
        st.tokenizer.eog_ids().to_vec()
    };
    stop_tokens.extend(common.stop_token_ids(st.engine.info.n_vocab)?);
    check_n(st, settings.n, prompt.len(), max_new_tokens)?;
    Ok(Prepared {
        kind: Kind::Completion,
        gen: GenRequest {
            prompt,
            max_new_tokens,
            sampler: settings.sampler.clone(),
            stop_tokens,
            logprobs: req.logprobs()?,
            arrived: Instant::now(),
        },
        settings,
        reasoning: None,
        tools: None,
        prefill: None,
    })
}

async fn chat_completions(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(st, body, Kind::Chat, prepare_chat).await
}

async fn completions(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(st, body, Kind::Completion, prepare_completion).await
}

async fn messages(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(st, body, Kind::Messages, prepare_messages).await
}

/// An error in the shape of the API the request came through.
fn error_response(kind: Kind, e: ApiError) -> Response {
    match kind {
        Kind::Messages => anthropic::error_response(e),
        Kind::Chat | Kind::Completion => e.into_response(),
    }
}

async fn handle(
    st: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
    prepare: fn(&AppState, &[u8]) -> Result<Prepared, ApiError>,
) -> Response {
    let body = match body_bytes(body) {
        Ok(b) => b,
        Err(e) => return error_response(kind, e),
    };
    // Parsing, templating and tokenizing are CPU work on the blocking pool; a panic there is
    // a 500 for this request only.
    let arrived = Instant::now();
    let s = st.clone();
    let mut prepared = match tokio::task::spawn_blocking(move || prepare(&s, &body)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return error_response(kind, e),
        Err(_) => {
            return error_response(
                kind,
                ApiError::internal("internal error while reading the request"),
            )
        }
    };
    prepared.gen.arrived = arrived;
    let prompt_tokens = prepared.gen.prompt.len();
    let choices = prepared.settings.n;
    if choices > 1 {
        return handle_group(st, prepared, choices).await;
    }
    let rx = match st.engine.submit(prepared.gen.clone()) {
        Ok(rx) => rx,
        Err(e) => return error_response(kind, e),
    };
    let n = st.next_response.fetch_add(1, Ordering::Relaxed);
    let resp = Responder::new(st, prepared, prompt_tokens, rx, n, 0);
    if resp.settings.stream {
        stream_response(resp)
    } else {
        resp.collect().await
    }
}

/// `n` > 1: `n` independent engine requests, choice `i` sampling with seed + `i`. If the
/// queue cannot take them all, none runs (the receivers already given are dropped, which
/// cancels them).
async fn handle_group(st: Arc<AppState>, prepared: Prepared, choices: usize) -> Response {
    let kind = prepared.kind;
    let prompt_tokens = prepared.gen.prompt.len();
    let mut rxs = Vec::with_capacity(choices);
    for i in 0..choices {
        let mut gen = prepared.gen.clone();
        gen.sampler.seed = gen.sampler.seed.wrapping_add(i as u64);
        match st.engine.submit(gen) {
            Ok(rx) => rxs.push(rx),
            Err(e) => return error_response(kind, e),
        }
    }
    let n = st.next_response.fetch_add(1, Ordering::Relaxed);
    let stream = prepared.settings.stream;
    let total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let resps: Vec<Responder> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let p = Prepared {
                kind: prepared.kind,
                gen: prepared.gen.clone(),
                settings: prepared.settings.clone(),
                reasoning: prepared.reasoning,
                tools: prepared.tools.clone(),
                prefill: prepared.prefill.clone(),
            };
            let mut r = Responder::new(st.clone(), p, prompt_tokens, rx, n, i);
            if stream {
                r.group = Some(total.clone());
            }
            r
        })
        .collect();
    if !stream {
        return Responder::collect_group(resps).await;
    }
    // The choices' chunks as they come, then the usage (all choices' tokens) and [DONE].
    let head = (
        resps[0].id.clone(),
        resps[0].created,
        resps[0].settings.include_usage,
    );
    let obj = resps[0].object(true);
    let model = st.model_id.clone();
    let streams = resps.into_iter().map(|r| {
        futures_util::stream::unfold(r, |mut r| async move {
            let evs = r.next_events().await?;
            Some((evs, r))
        })
        .boxed()
    });
    let tail = futures_util::stream::once(async move {
        let mut out = Vec::new();
        let (id, created, include_usage) = head;
        if include_usage {
            let completion = total.load(Ordering::Relaxed);
            let c = json!({
                "id": id, "object": obj, "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                          "total_tokens": prompt_tokens + completion},
            });
            out.push(SseEvent::default().data(c.to_string()));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    });
    let events = futures_util::stream::select_all(streams)
        .chain(tail)
        .flat_map(|evs| futures_util::stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, "no-cache".parse().expect("static"));
    (headers, Sse::new(events)).into_response()
}

/// One request's output side: reads the engine's events and turns them into text.
struct Responder {
    st: Arc<AppState>,
    id: String,
    created: u64,
    kind: Kind,
    pipe: TextPipeline,
    prompt_tokens: usize,
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    settings: Settings,
    rx: Option<mpsc::Receiver<Out>>,
    sent_role: bool,
    done: bool,
    /// Whether the way it ended is counted in `/metrics` yet.
    counted: bool,
    /// Whether the request asked for logprobs; those of tokens not yet sent.
    logprobs: bool,
    lp_pending: Vec<(u32, TokenLogprobs)>,
    /// Completions' `text_offset`: characters of the token strings sent so far.
    lp_offset: usize,
    /// `/v1/messages`: the content blocks so far.
    blocks: anthropic::Blocks,
    /// Whether the request has tools (their tags print, the parser runs).
    tools_on: bool,
    /// Tool call ids: this and the call's number.
    call_prefix: String,
    /// The choice's index (`n` > 1).
    index: usize,
    /// Streaming one of several choices: where its completion tokens are added up (the
    /// group sends the usage chunk and `[DONE]`).
    group: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        // Dropped before the end: the client went away (or a handler failed).
        self.count("cancelled");
    }
}

/// What one engine event became.
enum Step {
    Text(Split),
    End(Split, &'static str),
    Failed(ApiError),
}

impl Responder {
    /// The output side of request number `n`, reading `rx`.
    fn new(
        st: Arc<AppState>,
        prepared: Prepared,
        prompt_tokens: usize,
        rx: mpsc::Receiver<Out>,
        n: u64,
        index: usize,
    ) -> Self {
        let tools_on = prepared.tools.is_some();
        let mut pipe = TextPipeline::new(
            prepared.settings.stops.clone(),
            prepared.reasoning.map(|r| {
                let r = ReasoningSplitter::new(r);
                if tools_on {
                    // GLM may call a tool from inside its reasoning, without `</think>`.
                    r.ending_at(tools::CALL_OPEN)
                } else {
                    r
                }
            }),
        );
        if let Some(t) = prepared.tools {
            let mut parser = ToolParser::new(t);
            if let Some(p) = &prepared.prefill {
                // The prompt ends with the call's opening: the parser reads it first (it
                // decides nothing before the name is complete).
                let ev = parser.push(p);
                debug_assert!(ev.is_empty(), "{ev:?}");
            }
            pipe = pipe.with_tools(parser);
        }
        Self {
            id: match prepared.kind {
                Kind::Chat => format!("chatcmpl-{n:016x}"),
                Kind::Completion => format!("cmpl-{n:016x}"),
                Kind::Messages => format!("msg_{n:016x}"),
            },
            created: now(),
            pipe,
            kind: prepared.kind,
            prompt_tokens,
            prompt: prepared.gen.prompt,
            tokens: Vec::new(),
            settings: prepared.settings,
            rx: Some(rx),
            st,
            sent_role: false,
            done: false,
            counted: false,
            logprobs: prepared.gen.logprobs.is_some(),
            lp_pending: Vec::new(),
            lp_offset: 0,
            blocks: anthropic::Blocks::default(),
            tools_on,
            call_prefix: format!("call_{n:016x}_{index}_"),
            index,
            group: None,
        }
    }

    /// `finish_reason`: `tool_calls` when the answer ended (not cut) after calling tools.
    fn finish_reason(&self, reason: &'static str) -> &'static str {
        if reason == "stop" && self.pipe.tool_calls() > 0 {
            "tool_calls"
        } else {
            reason
        }
    }

    fn count(&mut self, reason: &str) {
        if !self.counted {
            self.counted = true;
            self.st.metrics.finished.inc(&[reason]);
        }
    }

    fn bytes_of(&self, t: u32) -> Vec<u8> {
        if self.tools_on {
            if let Some((_, tag)) = self.st.tool_tags.iter().find(|(id, _)| *id == t) {
                return tag.as_bytes().to_vec();
            }
        }
        if self.kind != Kind::Completion {
            if let Some((open, close)) = self.st.think {
                if t == open {
                    return THINK_OPEN.as_bytes().to_vec();
                }
                if t == close {
                    return THINK_CLOSE.as_bytes().to_vec();
                }
            }
        }
        self.st
            .tokenizer
            .piece(t, false)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// Waits for the next engine event. Dropping the receiver (stop string, end) cancels the
    /// request in the engine.
    async fn next(&mut self) -> Step {
        let step = self.next_inner().await;
        match &step {
            Step::Text(_) => {}
            Step::End(_, reason) => self.count(reason),
            Step::Failed(_) => self.count("error"),
        }
        step
    }

    async fn next_inner(&mut self) -> Step {
        let Some(rx) = self.rx.as_mut() else {
            return Step::Failed(ApiError::internal("stream already ended"));
        };
        match rx.recv().await {
            Some(Out::Token { token: t, logprobs }) => {
                self.tokens.push(t);
                if let Some(lp) = logprobs {
                    self.lp_pending.push((t, lp));
                }
                let bytes = self.bytes_of(t);
                let (split, stopped) = self.pipe.push(&bytes);
                if stopped {
                    self.rx = None;
                    Step::End(split, "stop")
                } else {
                    Step::Text(split)
                }
            }
            Some(Out::Finished(f)) => {
                self.rx = None;
                let reason = match f {
                    Finish::MaxTokens => "length",
                    Finish::Stop(t) => {
                        // The end-of-turn token was generated: it counts, it does not print.
                        self.tokens.push(t);
                        "stop"
                    }
                };
                Step::End(self.pipe.finish(), reason)
            }
            Some(Out::Error(e)) => {
                self.rx = None;
                Step::Failed(ApiError::internal(e))
            }
            None => {
                self.rx = None;
                Step::Failed(ApiError::internal("the engine stopped"))
            }
        }
    }

    /// A token as logprobs spell it: its text (control tokens included) and its bytes.
    fn token_text(&self, t: u32) -> (String, Vec<u8>) {
        let b = self
            .st
            .tokenizer
            .piece(t, true)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        (String::from_utf8_lossy(&b).into_owned(), b)
    }

    /// The `logprobs` of a choice for the tokens not yet sent, in each API's shape (chat:
    /// `{"content": [...]}`; completions: the legacy parallel lists); `null` when the request
    /// did not ask, or (streaming) when no token is pending.
    fn take_logprobs(&mut self, streaming: bool) -> Value {
        if !self.logprobs || (streaming && self.lp_pending.is_empty()) {
            return Value::Null;
        }
        let pending = std::mem::take(&mut self.lp_pending);
        match self.kind {
            Kind::Chat | Kind::Messages => {
                let content: Vec<Value> = pending
                    .iter()
                    .map(|(t, lp)| {
                        let (token, bytes) = self.token_text(*t);
                        let top: Vec<Value> = lp
                            .top
                            .iter()
                            .map(|&(id, l)| {
                                let (token, bytes) = self.token_text(id);
                                json!({"token": token, "logprob": l, "bytes": bytes})
                            })
                            .collect();
                        json!({"token": token, "logprob": lp.logprob, "bytes": bytes,
                               "top_logprobs": top})
                    })
                    .collect();
                json!({"content": content})
            }
            Kind::Completion => {
                let (mut tokens, mut lps, mut tops, mut offsets) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for (t, lp) in &pending {
                    let (token, _) = self.token_text(*t);
                    offsets.push(self.lp_offset);
                    self.lp_offset += token.chars().count();
                    tokens.push(token);
                    lps.push(lp.logprob);
                    let mut top = serde_json::Map::new();
                    for &(id, l) in &lp.top {
                        top.entry(self.token_text(id).0).or_insert(json!(l));
                    }
                    tops.push(Value::Object(top));
                }
                json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                       "text_offset": offsets})
            }
        }
    }

    fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens.len(),
            "total_tokens": self.prompt_tokens + self.tokens.len(),
        })
    }

    /// Reads the engine's events to the end: the whole text and the finish reason.
    async fn run_to_end(&mut self) -> Result<(Split, &'static str), ApiError> {
        let mut text = Split::default();
        let mut ignored = Vec::new();
        loop {
            match self.next().await {
                Step::Text(s) => {
                    self.feed_blocks(&s, &mut ignored);
                    text.append(s);
                }
                Step::End(s, r) => {
                    self.feed_blocks(&s, &mut ignored);
                    text.append(s);
                    return Ok((text, r));
                }
                Step::Failed(e) => return Err(e),
            }
        }
    }

    /// The non-streamed response of one choice.
    async fn collect(self) -> Response {
        if self.kind != Kind::Messages {
            return Self::collect_group(vec![self]).await;
        }
        let mut r = self;
        let reason = match r.run_to_end().await {
            Ok((_, reason)) => reason,
            Err(e) => return error_response(r.kind, e),
        };
        let (stop_reason, stop_sequence) = r.anthropic_stop(reason);
        Json(json!({
            "id": r.id,
            "type": "message",
            "role": "assistant",
            "model": r.st.model_id,
            "content": r.blocks.content(),
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": r.anthropic_usage(),
        }))
        .into_response()
    }

    /// The non-streamed response of `n` choices (chat, completions), read concurrently:
    /// `usage` counts the prompt once and every choice's tokens.
    async fn collect_group(resps: Vec<Responder>) -> Response {
        let outs = futures_util::future::join_all(resps.into_iter().map(|mut r| async move {
            let res = r.run_to_end().await;
            (r, res)
        }))
        .await;
        let mut choices = Vec::with_capacity(outs.len());
        let mut completion = 0;
        let mut first = None;
        for (mut r, res) in outs {
            let (text, reason) = match res {
                Ok(x) => x,
                Err(e) => return error_response(r.kind, e),
            };
            completion += r.tokens.len();
            choices.push(r.choice_value(text, reason));
            first.get_or_insert(r);
        }
        let r = first.expect("at least one choice");
        let mut body = json!({
            "id": r.id,
            "object": r.object(false),
            "created": r.created,
            "model": r.st.model_id,
            "choices": choices,
            "usage": {
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": r.prompt_tokens + completion,
            },
        });
        if r.settings.return_token_ids {
            body["prompt_token_ids"] = json!(r.prompt);
        }
        Json(body).into_response()
    }

    /// A chat or completions choice from its whole text.
    fn choice_value(&mut self, text: Split, reason: &'static str) -> Value {
        match self.kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": text.content});
                if self.tools_on {
                    let (_, calls) = tools::assemble(&text.events);
                    if !calls.is_empty() {
                        if text.content.is_empty() {
                            message["content"] = Value::Null;
                        }
                        message["tool_calls"] = calls
                            .into_iter()
                            .enumerate()
                            .map(|(k, c)| {
                                json!({"id": format!("{}{k}", self.call_prefix),
                                       "type": "function",
                                       "function": {"name": c.name, "arguments": c.arguments}})
                            })
                            .collect();
                    }
                }
                if self.reasoning_enabled() {
                    message["reasoning_content"] = if text.reasoning.is_empty() {
                        Value::Null
                    } else {
                        text.reasoning.into()
                    };
                }
                let mut c = json!({
                    "index": self.index,
                    "message": message,
                    "logprobs": self.take_logprobs(false),
                    "finish_reason": self.finish_reason(reason),
                });
                if self.settings.return_token_ids {
                    c["token_ids"] = json!(self.tokens);
                }
                c
            }
            Kind::Completion | Kind::Messages => {
                let mut c = json!({
                    "index": self.index,
                    "text": text.content,
                    "logprobs": self.take_logprobs(false),
                    "finish_reason": reason,
                });
                if self.settings.return_token_ids {
                    c["token_ids"] = json!(self.tokens);
                }
                c
            }
        }
    }

    /// `/v1/messages`: adds a piece of text to the content blocks (reasoning before content,
    /// as the split returns them), noting what opened, grew and closed.
    fn feed_blocks(&mut self, s: &Split, ev: &mut Vec<anthropic::BlockEvent>) {
        if self.kind == Kind::Messages {
            use anthropic::BlockKind;
            self.blocks.push(BlockKind::Thinking, &s.reasoning, ev);
            if !self.tools_on {
                self.blocks.push(BlockKind::Text, &s.content, ev);
                return;
            }
            for e in &s.events {
                match e {
                    ToolEvent::Text(t) => self.blocks.push(BlockKind::Text, t, ev),
                    ToolEvent::Start { index, name } => self.blocks.start_tool(
                        format!("toolu_{}{index}", &self.call_prefix[5..]),
                        name.clone(),
                        ev,
                    ),
                    ToolEvent::Args { fragment, .. } => {
                        self.blocks.push(BlockKind::ToolUse, fragment, ev)
                    }
                }
            }
        }
    }

    /// Anthropic's `stop_reason` and `stop_sequence` for how generation ended.
    fn anthropic_stop(&self, reason: &str) -> (&'static str, Value) {
        match (reason, self.pipe.stop_matched()) {
            ("length", _) => ("max_tokens", Value::Null),
            (_, Some(s)) => ("stop_sequence", s.into()),
            _ if self.pipe.tool_calls() > 0 => ("tool_use", Value::Null),
            _ => ("end_turn", Value::Null),
        }
    }

    fn anthropic_usage(&self) -> Value {
        json!({"input_tokens": self.prompt_tokens, "output_tokens": self.tokens.len()})
    }

    fn anthropic_event(name: &str, data: Value) -> SseEvent {
        SseEvent::default().event(name).data(data.to_string())
    }

    /// `/v1/messages` streaming: message_start, then per block content_block_start / _delta
    /// / _stop, then message_delta (stop reason, usage) and message_stop.
    async fn next_anthropic_events(&mut self) -> Vec<SseEvent> {
        use anthropic::BlockEvent;
        let mut out = Vec::new();
        if !self.sent_role {
            self.sent_role = true;
            out.push(Self::anthropic_event(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": self.st.model_id, "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
                }}),
            ));
            return out;
        }
        let step = self.next().await;
        let mut ev = Vec::new();
        let end = match step {
            Step::Text(s) => {
                self.feed_blocks(&s, &mut ev);
                None
            }
            Step::End(s, r) => {
                self.feed_blocks(&s, &mut ev);
                Some(r)
            }
            Step::Failed(e) => {
                self.done = true;
                out.push(Self::anthropic_event("error", anthropic::error_body(&e)));
                return out;
            }
        };
        for e in ev {
            out.push(match e {
                BlockEvent::Start(i, k) => {
                    Self::anthropic_event("content_block_start", anthropic::block_start(i, k))
                }
                BlockEvent::ToolStart(i, id, name) => Self::anthropic_event(
                    "content_block_start",
                    anthropic::tool_start(i, &id, &name),
                ),
                BlockEvent::Delta(i, k, t) => {
                    Self::anthropic_event("content_block_delta", anthropic::block_delta(i, k, &t))
                }
                BlockEvent::Stop(i) => {
                    Self::anthropic_event("content_block_stop", anthropic::block_stop(i))
                }
            });
        }
        if let Some(reason) = end {
            self.done = true;
            if !self.blocks.blocks.is_empty() {
                let last = self.blocks.blocks.len() - 1;
                out.push(Self::anthropic_event(
                    "content_block_stop",
                    anthropic::block_stop(last),
                ));
            }
            let (stop_reason, stop_sequence) = self.anthropic_stop(reason);
            out.push(Self::anthropic_event(
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                       "usage": {"output_tokens": self.tokens.len()}}),
            ));
            out.push(Self::anthropic_event(
                "message_stop",
                json!({"type": "message_stop"}),
            ));
        }
        out
    }

    fn reasoning_enabled(&self) -> bool {
        self.kind == Kind::Chat && self.st.think.is_some()
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
            (Kind::Messages, _) => "message",
        }
    }

    fn chunk(&self, choice: Value) -> SseEvent {
        let mut c = json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.st.model_id,
            "choices": [choice],
        });
        if self.settings.include_usage {
            c["usage"] = Value::Null;
        }
        SseEvent::default().data(c.to_string())
    }

    fn delta_chunks(&mut self, s: Split, out: &mut Vec<SseEvent>) {
        // Pending logprobs ride on the first chunk that goes out (text held back — a partial
        // character, stop string or tag — carries its tokens' logprobs to a later chunk).
        match self.kind {
            Kind::Chat | Kind::Messages => {
                if !s.reasoning.is_empty() {
                    let lp = self.take_logprobs(true);
                    out.push(self.chunk(json!({
                        "index": self.index,
                        "delta": {"reasoning_content": s.reasoning},
                        "logprobs": lp,
                        "finish_reason": null,
                    })));
                }
                if self.tools_on {
                    for e in s.events {
                        let delta = match e {
                            ToolEvent::Text(t) => json!({"content": t}),
                            ToolEvent::Start { index, name } => json!({"tool_calls": [{
                                "index": index,
                                "id": format!("{}{index}", self.call_prefix),
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }]}),
                            ToolEvent::Args { index, fragment } => json!({"tool_calls": [{
                                "index": index, "function": {"arguments": fragment},
                            }]}),
                        };
                        let lp = self.take_logprobs(true);
                        out.push(self.chunk(json!({
                            "index": self.index, "delta": delta, "logprobs": lp,
                            "finish_reason": null,
                        })));
                    }
                } else if !s.content.is_empty() {
                    let lp = self.take_logprobs(true);
                    out.push(self.chunk(json!({
                        "index": self.index,
                        "delta": {"content": s.content},
                        "logprobs": lp,
                        "finish_reason": null,
                    })));
                }
            }
            Kind::Completion => {
                if !s.content.is_empty() {
                    let lp = self.take_logprobs(true);
                    out.push(self.chunk(json!({
                        "index": self.index,
                        "text": s.content,
                        "logprobs": lp,
                        "finish_reason": null,
                    })));
                }
            }
        }
    }

    fn final_chunks(&mut self, reason: &'static str, out: &mut Vec<SseEvent>) {
        let reason = self.finish_reason(reason);
        let lp = self.take_logprobs(true);
        out.push(self.chunk(match self.kind {
            Kind::Chat | Kind::Messages => json!({
                "index": self.index, "delta": {}, "logprobs": lp, "finish_reason": reason,
            }),
            Kind::Completion => json!({
                "index": self.index, "text": "", "logprobs": lp, "finish_reason": reason,
            }),
        }));
        if let Some(total) = &self.group {
            // The group's stream sends the usage and [DONE] once every choice has ended.
            total.fetch_add(self.tokens.len(), Ordering::Relaxed);
            return;
        }
        if self.settings.include_usage {
            let c = json!({
                "id": self.id,
                "object": self.object(true),
                "created": self.created,
                "model": self.st.model_id,
                "choices": [],
                "usage": self.usage(),
            });
            out.push(SseEvent::default().data(c.to_string()));
        }
        out.push(SseEvent::default().data("[DONE]"));
    }

    /// The SSE events that the next engine event produces (possibly none); `None` at the end.
    async fn next_events(&mut self) -> Option<Vec<SseEvent>> {
        if self.done {
            return None;
        }
        if self.kind == Kind::Messages {
            return Some(self.next_anthropic_events().await);
        }
        let mut out = Vec::new();
        if self.kind == Kind::Chat && !self.sent_role {
            self.sent_role = true;
            out.push(self.chunk(json!({
                "index": self.index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": null,
                "finish_reason": null,
            })));
            return Some(out);
        }
        match self.next().await {
            Step::Text(s) => self.delta_chunks(s, &mut out),
            Step::End(s, reason) => {
                self.delta_chunks(s, &mut out);
                self.final_chunks(reason, &mut out);
                self.done = true;
            }
            Step::Failed(e) => {
                out.push(SseEvent::default().data(e.body().to_string()));
                if self.group.is_none() {
                    out.push(SseEvent::default().data("[DONE]"));
                }
                self.done = true;
            }
        }
        Some(out)
    }
}

fn stream_response(resp: Responder) -> Response {
    let events = futures_util::stream::unfold(resp, |mut r| async move {
        let evs = r.next_events().await?;
        Some((evs, r))
    })
    .flat_map(|evs| futures_util::stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, "no-cache".parse().expect("static"));
    (headers, Sse::new(events)).into_response()
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod responder_tests;
