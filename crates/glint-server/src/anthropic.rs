//! `POST /v1/messages`: Anthropic's Messages API (what coding agents speak), mapped onto the
//! same chat template, engine and text pipeline as `/v1/chat/completions`.
//!
//! Requests: `model` (the served id), `max_tokens` (required), `messages` (roles `user` and
//! `assistant`, content a string or `text` blocks), `system` (a string or `text` blocks),
//! `stop_sequences`, `temperature` (0 to 1), `top_p`, `top_k`, `stream`, `thinking`
//! (`{"type": "enabled", "budget_tokens": N}` renders the prompt with GLM's thinking on;
//! `disabled` or absent: off, as Anthropic's default), `metadata` (ignored). Errors are in
//! Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
//!
//! Tools: `tools` (`name`, `description`, `input_schema`) are rendered by the chat template as
//! chat completions' are, and `tool_choice` (`auto`, `any`, `tool` with a `name`, `none`)
//! maps to chat's `auto`, `required`, a named function and `none`. Calls come back as
//! `tool_use` blocks (`stop_reason: "tool_use"`); earlier turns' `tool_use` blocks and the
//! user's `tool_result` blocks go to the template as assistant `tool_calls` and `tool`
//! messages.

use serde::Deserialize;
use serde_json::{json, Value};

use glint_engine::sampler::SamplerConfig;

use crate::api::{self, Settings, MAX_STOPS, MAX_STOP_BYTES};
use crate::error::ApiError;
use crate::tools::{Tools, CALL_OPEN};

#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u64,
    pub messages: Vec<Message>,
    pub system: Option<Content>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stream: Option<bool>,
    pub thinking: Option<Thinking>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Content,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
pub struct Block {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    /// `tool_use`: the call's id, function and input.
    pub id: Option<String>,
    pub name: Option<String>,
    pub input: Option<Value>,
    /// `tool_result`: the call it answers and its content (a string or text blocks).
    pub tool_use_id: Option<String>,
    pub content: Option<Content>,
}

#[derive(Debug, Deserialize)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: String,
    pub budget_tokens: Option<u64>,
}

/// What `/v1/messages` needs beyond the OpenAI settings.
pub struct MessagesPlan {
    pub settings: Settings,
    /// The chat template's `messages`.
    pub messages: Vec<Value>,
    pub enable_thinking: bool,
    /// The tools to parse calls of, the `tools` the template renders, and the text the
    /// answer starts with (`any`, a named tool), as chat's [`api::ToolPlan`].
    pub tools: api::ToolPlan,
}

/// Anthropic's `tools` and `tool_choice` as chat's plan.
fn tool_plan(
    tools: &Option<Vec<Value>>,
    choice: &Option<Value>,
) -> Result<api::ToolPlan, ApiError> {
    let parsed = match tools {
        Some(t) if !t.is_empty() => Some(Tools::from_anthropic(t)?),
        _ => None,
    };
    let kind = match choice {
        None | Some(Value::Null) => "auto".to_string(),
        Some(c) => match c.get("type").and_then(Value::as_str) {
            Some(k @ ("auto" | "any" | "none")) => k.to_string(),
            Some("tool") => match c.get("name").and_then(Value::as_str) {
                Some(n) => format!("fn:{n}"),
                None => return Err(ApiError::field("tool_choice.name", "is required")),
            },
            _ => {
                return Err(ApiError::field(
                    "tool_choice.type",
                    "must be `auto`, `any`, `tool` or `none`",
                ))
            }
        },
    };
    let Some(parsed) = parsed else {
        if kind == "auto" || kind == "none" {
            return Ok(api::ToolPlan::default());
        }
        return Err(ApiError::field(
            "tool_choice",
            "requires a tool, but the request has no `tools`",
        ));
    };
    let prefill = match kind.as_str() {
        "none" => return Ok(api::ToolPlan::default()),
        "auto" => None,
        "any" => Some(CALL_OPEN.to_string()),
        named => {
            let n = &named[3..];
            if parsed.get(n).is_none() {
                return Err(ApiError::field(
                    "tool_choice.name",
                    format!("`{}` is not one of the request's tools", n.escape_debug()),
                ));
            }
            Some(format!("{CALL_OPEN}{n}"))
        }
    };
    // The template renders OpenAI's shape.
    let render = tools
        .iter()
        .flatten()
        .map(|t| {
            let mut f = serde_json::Map::new();
            for k in ["name", "description"] {
                if let Some(v) = t.get(k) {
                    f.insert(k.into(), v.clone());
                }
            }
            if let Some(s) = t.get("input_schema") {
                f.insert("parameters".into(), s.clone());
            }
            json!({"type": "function", "function": f})
        })
        .collect();
    Ok(api::ToolPlan {
        tools: Some(parsed),
        render: Some(render),
        prefill,
    })
}

/// One Anthropic message as the template's messages: text blocks join into one message;
/// an assistant's `tool_use` blocks become its `tool_calls`; a user's `tool_result` blocks
/// become `tool` messages (before the user's text).
fn template_messages(m: &Message, at: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let Content::Blocks(blocks) = &m.content else {
        let Content::Text(t) = &m.content else {
            unreachable!()
        };
        out.push(json!({"role": m.role, "content": t}));
        return Ok(());
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}[{j}]");
        match (b.kind.as_str(), m.role.as_str()) {
            ("text", _) => match &b.text {
                Some(t) => text.push_str(t),
                None => return Err(ApiError::field(format!("{at}.text"), "is required")),
            },
            ("tool_use", "assistant") => {
                let name = b
                    .name
                    .clone()
                    .ok_or_else(|| ApiError::field(format!("{at}.name"), "is required"))?;
                let input = match &b.input {
                    None => json!({}),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => {
                        return Err(ApiError::field(format!("{at}.input"), "must be an object"))
                    }
                };
                let mut c = json!({"type": "function",
                                   "function": {"name": name, "arguments": input}});
                if let Some(id) = &b.id {
                    c["id"] = id.clone().into();
                }
                calls.push(c);
            }
            ("tool_result", "user") => {
                let content = match &b.content {
                    None => String::new(),
                    Some(c) => text_of(c, &format!("{at}.content"))?,
                };
                let mut t = json!({"role": "tool", "content": content});
                if let Some(id) = &b.tool_use_id {
                    t["tool_call_id"] = id.clone().into();
                }
                out.push(t);
            }
            (k, _) => {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    &format!(
                        "content blocks of type `{}` in a {} message",
                        k.escape_debug(),
                        m.role
                    ),
                ))
            }
        }
    }
    if !text.is_empty() || !calls.is_empty() || m.role == "assistant" {
        let mut v = json!({"role": m.role, "content": text});
        if !calls.is_empty() {
            v["tool_calls"] = Value::Array(calls);
        }
        out.push(v);
    }
    Ok(())
}

fn text_of(c: &Content, at: &str) -> Result<String, ApiError> {
    match c {
        Content::Text(s) => Ok(s.clone()),
        Content::Blocks(blocks) => {
            let mut s = String::new();
            for (j, b) in blocks.iter().enumerate() {
                match (b.kind.as_str(), &b.text) {
                    ("text", Some(t)) => s.push_str(t),
                    ("text", None) => {
                        return Err(ApiError::field(format!("{at}[{j}].text"), "is required"))
                    }
                    (k, _) => {
                        return Err(ApiError::unsupported(
                            &format!("{at}[{j}].type"),
                            &format!("content blocks of type `{}`", k.escape_debug()),
                        ))
                    }
                }
            }
            Ok(s)
        }
    }
}

fn unit(name: &str, v: f64, lo_open: bool) -> Result<f64, ApiError> {
    let ok = v.is_finite() && v <= 1.0 && if lo_open { v > 0.0 } else { v >= 0.0 };
    if ok {
        Ok(v)
    } else {
        Err(ApiError::field(
            name,
            format!("{v} is out of range: must be between 0 and 1"),
        ))
    }
}

impl MessagesRequest {
    pub fn plan(&self, served: &str) -> Result<MessagesPlan, ApiError> {
        if self.model != served {
            return Err(ApiError::model_not_found(&self.model, served));
        }
        if self.max_tokens == 0 {
            return Err(ApiError::field("max_tokens", "must be at least 1"));
        }
        let tools = tool_plan(&self.tools, &self.tool_choice)?;
        let enable_thinking = match &self.thinking {
            None => false,
            Some(t) => match t.kind.as_str() {
                "disabled" => false,
                "enabled" => {
                    if t.budget_tokens == Some(0) {
                        return Err(ApiError::field(
                            "thinking.budget_tokens",
                            "must be at least 1",
                        ));
                    }
                    true
                }
                k => {
                    return Err(ApiError::field(
                        "thinking.type",
                        format!("`{}`: expected `enabled` or `disabled`", k.escape_debug()),
                    ))
                }
            },
        };
        if self.messages.is_empty() {
            return Err(ApiError::field(
                "messages",
                "must contain at least one message",
            ));
        }
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        if let Some(sys) = &self.system {
            messages.push(json!({"role": "system", "content": text_of(sys, "system")?}));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if m.role != "user" && m.role != "assistant" {
                return Err(ApiError::field(
                    format!("messages[{i}].role"),
                    format!(
                        "unknown role `{}`: expected user or assistant",
                        m.role.escape_debug()
                    ),
                ));
            }
            template_messages(m, &format!("messages[{i}].content"), &mut messages)?;
        }
        if self.messages.last().is_some_and(|m| m.role == "assistant") {
            return Err(ApiError::unsupported(
                &format!("messages[{}].role", self.messages.len() - 1),
                "a final assistant message (prefill)",
            ));
        }
        let stops = self.stop_sequences.clone().unwrap_or_default();
        if stops.len() > MAX_STOPS {
            return Err(ApiError::field(
                "stop_sequences",
                format!("{} stop sequences: at most {MAX_STOPS}", stops.len()),
            ));
        }
        for (i, s) in stops.iter().enumerate() {
            if s.is_empty() || s.len() > MAX_STOP_BYTES {
                return Err(ApiError::field(
                    format!("stop_sequences[{i}]"),
                    format!("a stop sequence must have 1 to {MAX_STOP_BYTES} bytes"),
                ));
            }
        }
        let temperature = unit("temperature", self.temperature.unwrap_or(1.0), false)?;
        let top_p = unit("top_p", self.top_p.unwrap_or(1.0), true)?;
        let top_k = match self.top_k {
            Some(0) => return Err(ApiError::field("top_k", "must be at least 1")),
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
            None => 0,
        };
        Ok(MessagesPlan {
            settings: Settings {
                stream: self.stream.unwrap_or(false),
                include_usage: false,
                sampler: SamplerConfig {
                    temperature: temperature as f32,
                    top_k,
                    top_p: top_p as f32,
                    min_p: 0.0,
                    repeat_penalty: 1.0,
                    repeat_last_n: 64,
                    presence_penalty: 0.0,
                    frequency_penalty: 0.0,
                    seed: api::fresh_seed(),
                },
                stops,
                max_tokens: Some(self.max_tokens),
                return_token_ids: false,
                ignore_eos: false,
                n: 1,
            },
            messages,
            enable_thinking,
            tools,
        })
    }
}

/// Anthropic's error type for a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ if status >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// An error's body in Anthropic's shape.
pub fn error_body(e: &ApiError) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(e.status.as_u16()), "message": e.message},
    })
}

/// An error as Anthropic clients expect it (status, body, `Retry-After`).
pub fn error_response(e: ApiError) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut r = (e.status, axum::Json(error_body(&e))).into_response();
    if let Some(s) = e.retry_after {
        r.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(s),
        );
    }
    r
}

/// The kind of an output content block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Thinking,
    Text,
    /// A tool call; its text is the input's JSON.
    ToolUse,
}

/// Content blocks built from the text pipeline's pieces, in order: a new block starts when the
/// kind changes. Streaming and not feed the same pieces, so both give the same blocks.
#[derive(Debug, Default)]
pub struct Blocks {
    pub blocks: Vec<(BlockKind, String)>,
    /// Each `tool_use` block's id and name, by block index.
    pub tools: Vec<(usize, String, String)>,
}

/// What adding text did to the block list (streaming turns it into events).
#[derive(Debug, PartialEq, Eq)]
pub enum BlockEvent {
    /// Block `index` closed.
    Stop(usize),
    /// Block `index` of this kind opened.
    Start(usize, BlockKind),
    /// Block `index`, a `tool_use` with this id and name, opened.
    ToolStart(usize, String, String),
    /// Text added to block `index`.
    Delta(usize, BlockKind, String),
}

impl Blocks {
    /// Opens a `tool_use` block (its input arrives through [`Blocks::push`]).
    pub fn start_tool(&mut self, id: String, name: String, ev: &mut Vec<BlockEvent>) {
        if !self.blocks.is_empty() {
            ev.push(BlockEvent::Stop(self.blocks.len() - 1));
        }
        self.blocks.push((BlockKind::ToolUse, String::new()));
        let i = self.blocks.len() - 1;
        self.tools.push((i, id.clone(), name.clone()));
        ev.push(BlockEvent::ToolStart(i, id, name));
    }

    pub fn push(&mut self, kind: BlockKind, text: &str, ev: &mut Vec<BlockEvent>) {
        if text.is_empty() {
            return;
        }
        if self.blocks.last().map(|b| b.0) != Some(kind) {
            if !self.blocks.is_empty() {
                ev.push(BlockEvent::Stop(self.blocks.len() - 1));
            }
            self.blocks.push((kind, String::new()));
            ev.push(BlockEvent::Start(self.blocks.len() - 1, kind));
        }
        let i = self.blocks.len() - 1;
        self.blocks[i].1.push_str(text);
        ev.push(BlockEvent::Delta(i, kind, text.to_string()));
    }

    fn tool(&self, i: usize) -> &(usize, String, String) {
        self.tools
            .iter()
            .find(|t| t.0 == i)
            .expect("a tool_use block")
    }

    /// The blocks as a message's `content`.
    pub fn content(&self) -> Value {
        Value::Array(
            self.blocks
                .iter()
                .enumerate()
                .map(|(i, (k, t))| match k {
                    BlockKind::Thinking => {
                        json!({"type": "thinking", "thinking": t, "signature": ""})
                    }
                    BlockKind::Text => json!({"type": "text", "text": t}),
                    BlockKind::ToolUse => {
                        let (_, id, name) = self.tool(i);
                        let input: Value = serde_json::from_str(t).unwrap_or(json!({}));
                        json!({"type": "tool_use", "id": id, "name": name, "input": input})
                    }
                })
                .collect(),
        )
    }
}

/// A block's opening event body.
pub fn block_start(index: usize, kind: BlockKind) -> Value {
    let block = match kind {
        BlockKind::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
        BlockKind::Text => json!({"type": "text", "text": ""}),
        BlockKind::ToolUse => unreachable!("tool_use blocks open with tool_start"),
    };
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

pub fn tool_start(index: usize, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

pub fn block_delta(index: usize, kind: BlockKind, text: &str) -> Value {
    let delta = match kind {
        BlockKind::Thinking => json!({"type": "thinking_delta", "thinking": text}),
        BlockKind::Text => json!({"type": "text_delta", "text": text}),
        BlockKind::ToolUse => json!({"type": "input_json_delta", "partial_json": text}),
    };
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

pub fn block_stop(index: usize) -> Value {
    json!({"type": "content_block_stop", "index": index})
}
