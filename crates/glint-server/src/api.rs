//! OpenAI request bodies and their validation. Every field is checked before anything reaches
//! the engine; an error names the field (`messages[1].role`, `temperature`).
//!
//! Fields are `Option`s so that an explicit `null` means "default", as OpenAI's own API
//! treats it. Unknown fields are ignored (clients send `user`, `metadata`, ...); known fields
//! the server cannot honour yet are refused with 400 rather than silently ignored.

use serde::Deserialize;
use serde_json::{Map, Value};

use glint_engine::sampler::SamplerConfig;

use crate::error::ApiError;
use crate::tools::{Tools, CALL_OPEN};

/// Most stop strings per request, and bytes per stop string.
pub const MAX_STOPS: usize = 16;
pub const MAX_STOP_BYTES: usize = 1024;
/// Most alternatives per token in logprobs (`top_logprobs`, completions' `logprobs`), as
/// vLLM's default `max_logprobs` and OpenAI's chat limit.
pub const MAX_TOP_LOGPROBS: u64 = 20;
/// Most choices per request (`n`).
pub const MAX_N: u64 = 16;
/// Most `stop_token_ids`.
pub const MAX_STOP_TOKEN_IDS: usize = 64;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// The sampling and limit fields both endpoints share.
#[derive(Debug, Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<u64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// vLLM's and llama.cpp's extension: llama.cpp's repeat penalty (1 = off).
    pub repetition_penalty: Option<f64>,
    pub logit_bias: Option<Map<String, Value>>,
    pub best_of: Option<u64>,
    /// vLLM's extension: also return the prompt's and the completion's token ids.
    pub return_token_ids: Option<bool>,
    /// vLLM's extension: keep generating past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
    /// vLLM's extension: token ids that end the answer (as end-of-turn tokens do).
    pub stop_token_ids: Option<Vec<i64>>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub response_format: Option<Value>,
    /// Extra variables for the chat template (`enable_thinking`).
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
    pub reasoning_content: Option<String>,
    pub name: Option<String>,
    pub tool_calls: Option<Vec<Value>>,
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    pub logprobs: Option<u64>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

/// Parses a body into a JSON object; syntax errors (and invalid UTF-8) are a 400.
pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

/// Reads a typed view of the body; a wrong type names the field's path.
pub fn view<'v, T: Deserialize<'v>>(v: &'v Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            let msg = inner.to_string();
            // serde names a missing field only in its message: "missing field `messages`".
            match msg
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next())
            {
                Some(field) => ApiError::field(field, "is required"),
                None => ApiError::bad_request(msg),
            }
        } else {
            ApiError::field(path, inner.to_string())
        }
    })
}

/// What both endpoints decide from [`Common`] before the prompt is known.
#[derive(Debug, Clone)]
pub struct Settings {
    pub stream: bool,
    pub include_usage: bool,
    pub sampler: SamplerConfig,
    pub stops: Vec<String>,
    pub max_tokens: Option<u64>,
    pub return_token_ids: bool,
    pub ignore_eos: bool,
    /// Choices to generate (`n`), each an independent sequence; choice `i` samples with
    /// `sampler.seed + i`.
    pub n: usize,
}

fn finite_in(name: &str, v: f64, lo: f64, hi: f64) -> Result<f64, ApiError> {
    if !v.is_finite() || v < lo || v > hi {
        return Err(ApiError::field(
            name,
            format!("{v} is out of range: must be between {lo} and {hi}"),
        ));
    }
    Ok(v)
}

/// A seed for requests that give none: different per request, as OpenAI's are.
pub(crate) fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl Common {
    pub fn settings(&self, served: &str) -> Result<Settings, ApiError> {
        if let Some(m) = &self.model {
            if m != served {
                return Err(ApiError::model_not_found(m, served));
            }
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > MAX_N {
            return Err(ApiError::field(
                "n",
                format!("{n} is out of range: must be between 1 and {MAX_N}"),
            ));
        }
        if let Some(b) = self.best_of {
            if b != 1 {
                return Err(ApiError::unsupported("best_of", &format!("best_of = {b}")));
            }
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if let Some(v) = v {
                finite_in(name, v, -2.0, 2.0)?;
            }
        }
        if self.logit_bias.as_ref().is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::unsupported("logit_bias", "logit_bias"));
        }
        let temperature = finite_in("temperature", self.temperature.unwrap_or(1.0), 0.0, 2.0)?;
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::field(
                "top_p",
                format!("{top_p} is out of range: must be above 0 and at most 1"),
            ));
        }
        let top_k = match self.top_k.unwrap_or(0) {
            -1 | 0 => 0,
            k if k > 0 => k as usize,
            k => {
                return Err(ApiError::field(
                    "top_k",
                    format!("{k}: must be a positive number, or 0 / -1 for off"),
                ))
            }
        };
        let min_p = finite_in("min_p", self.min_p.unwrap_or(0.0), 0.0, 1.0)?;
        let repeat_penalty = self.repetition_penalty.unwrap_or(1.0);
        if !(repeat_penalty.is_finite() && repeat_penalty > 0.0 && repeat_penalty <= 10.0) {
            return Err(ApiError::field(
                "repetition_penalty",
                format!("{repeat_penalty} is out of range: must be above 0 and at most 10"),
            ));
        }
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stops.len() > MAX_STOPS {
            return Err(ApiError::field(
                "stop",
                format!("{} stop strings: at most {MAX_STOPS}", stops.len()),
            ));
        }
        for (i, s) in stops.iter().enumerate() {
            if s.is_empty() || s.len() > MAX_STOP_BYTES {
                return Err(ApiError::field(
                    format!("stop[{i}]"),
                    format!("a stop string must have 1 to {MAX_STOP_BYTES} bytes"),
                ));
            }
        }
        let stream = self.stream.unwrap_or(false);
        let include_usage = match &self.stream_options {
            Some(o) if !stream => {
                if o.include_usage.is_some() {
                    return Err(ApiError::field(
                        "stream_options",
                        "only allowed when stream is true",
                    ));
                }
                false
            }
            Some(o) => o.include_usage.unwrap_or(false),
            None => false,
        };
        if self.max_tokens == Some(0) {
            return Err(ApiError::field("max_tokens", "must be at least 1"));
        }
        Ok(Settings {
            stream,
            include_usage,
            sampler: SamplerConfig {
                temperature: temperature as f32,
                top_k,
                top_p: top_p as f32,
                min_p: min_p as f32,
                repeat_penalty: repeat_penalty as f32,
                repeat_last_n: 64,
                presence_penalty: self.presence_penalty.unwrap_or(0.0) as f32,
                frequency_penalty: self.frequency_penalty.unwrap_or(0.0) as f32,
                seed: self.seed.map(|s| s as u64).unwrap_or_else(fresh_seed),
            },
            stops,
            max_tokens: self.max_tokens,
            return_token_ids: self.return_token_ids.unwrap_or(false),
            ignore_eos: self.ignore_eos.unwrap_or(false),
            n: n as usize,
        })
    }

    /// `stop_token_ids`, checked against the vocabulary.
    pub fn stop_token_ids(&self, n_vocab: usize) -> Result<Vec<u32>, ApiError> {
        let Some(v) = &self.stop_token_ids else {
            return Ok(Vec::new());
        };
        if v.len() > MAX_STOP_TOKEN_IDS {
            return Err(ApiError::field(
                "stop_token_ids",
                format!("{} ids: at most {MAX_STOP_TOKEN_IDS}", v.len()),
            ));
        }
        v.iter()
            .enumerate()
            .map(|(i, &t)| {
                if t < 0 || t as u64 >= n_vocab as u64 {
                    Err(ApiError::field(
                        format!("stop_token_ids[{i}]"),
                        format!("token id {t} is outside the vocabulary of {n_vocab}"),
                    ))
                } else {
                    Ok(t as u32)
                }
            })
            .collect()
    }
}

pub const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// What a chat request's `tools` and `tool_choice` ask for.
#[derive(Debug, Default)]
pub struct ToolPlan {
    /// The tools to parse calls of (none: no parsing, tags print nothing).
    pub tools: Option<Tools>,
    /// The `tools` the chat template renders.
    pub render: Option<Vec<Value>>,
    /// Text the assistant turn starts with (`tool_choice` `required`: `<tool_call>`; a named
    /// function: `<tool_call>NAME`), appended to the prompt and read by the parser first.
    pub prefill: Option<String>,
}

/// An assistant message's `tool_calls` as the chat template wants them: `arguments` as an
/// object (OpenAI sends a JSON string).
fn template_tool_calls(calls: &[Value], at: &str) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let f = c
            .get("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| ApiError::field(format!("{at}.function"), "is required (an object)"))?;
        let name = match f.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => {
                return Err(ApiError::field(
                    format!("{at}.function.name"),
                    "is required (a string)",
                ))
            }
        };
        let args = match f.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(ApiError::field(
                        format!("{at}.function.arguments"),
                        "must be a JSON object (as a string)",
                    ))
                }
            },
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(ApiError::field(
                    format!("{at}.function.arguments"),
                    "must be a JSON object (as a string)",
                ))
            }
        };
        let mut v = serde_json::json!({"type": "function",
                                       "function": {"name": name, "arguments": args}});
        if let Some(id) = c.get("id").and_then(Value::as_str) {
            v["id"] = id.into();
        }
        out.push(v);
    }
    Ok(out)
}

impl ChatRequest {
    /// `tools` (validated) and `tool_choice`: `auto` (the default with tools) renders the
    /// tools and parses calls; `none` neither; `required` and a named function also start the
    /// answer with the call's opening (the model cannot answer otherwise, no grammar needed).
    pub fn tool_plan(&self) -> Result<ToolPlan, ApiError> {
        let tools = match &self.tools {
            Some(t) if !t.is_empty() => Some((Tools::from_openai(t)?, t.clone())),
            _ => None,
        };
        let choice = match &self.tool_choice {
            None | Some(Value::Null) => "auto".to_string(),
            Some(Value::String(s)) if ["none", "auto", "required"].contains(&s.as_str()) => {
                s.clone()
            }
            Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
                match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                    Some(n) => format!("fn:{n}"),
                    None => {
                        return Err(ApiError::field(
                            "tool_choice.function.name",
                            "is required",
                        ))
                    }
                }
            }
            Some(_) => {
                return Err(ApiError::field(
                    "tool_choice",
                    "must be `none`, `auto`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        };
        let Some((tools, render)) = tools else {
            if choice == "none" || choice == "auto" {
                return Ok(ToolPlan::default());
            }
            return Err(ApiError::field(
                "tool_choice",
                "names or requires a tool, but the request has no `tools`",
            ));
        };
        let prefill = match choice.as_str() {
            "none" => return Ok(ToolPlan::default()),
            "auto" => None,
            "required" => Some(CALL_OPEN.to_string()),
            named => {
                let n = &named[3..];
                if tools.get(n).is_none() {
                    return Err(ApiError::field(
                        "tool_choice.function.name",
                        format!("`{}` is not one of the request's tools", n.escape_debug()),
                    ));
                }
                Some(format!("{CALL_OPEN}{n}"))
            }
        };
        Ok(ToolPlan {
            tools: Some(tools),
            render: Some(render),
            prefill,
        })
    }

    /// Checks what only chat has; returns the template context's `messages`.
    pub fn template_messages(&self) -> Result<Vec<Value>, ApiError> {
        self.logprobs()?;
        if let Some(f) = &self.response_format {
            if f.get("type").and_then(Value::as_str) != Some("text") {
                return Err(ApiError::unsupported(
                    "response_format",
                    "a response_format other than text",
                ));
            }
        }
        if self.max_completion_tokens == Some(0) {
            return Err(ApiError::field(
                "max_completion_tokens",
                "must be at least 1",
            ));
        }
        if self.messages.is_empty() {
            return Err(ApiError::field(
                "messages",
                "must contain at least one message",
            ));
        }
        let mut out = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let at = |f: &str| format!("messages[{i}].{f}");
            let role = match m.role.as_str() {
                "developer" => "system",
                r if ROLES.contains(&r) => r,
                r => {
                    return Err(ApiError::field(
                        at("role"),
                        format!(
                            "unknown role `{}`: expected one of {}",
                            r.escape_debug(),
                            ROLES.join(", ")
                        ),
                    ))
                }
            };
            let tool_calls = match &m.tool_calls {
                Some(t) if !t.is_empty() => {
                    if role != "assistant" {
                        return Err(ApiError::field(
                            at("tool_calls"),
                            "only assistant messages have tool calls",
                        ));
                    }
                    Some(template_tool_calls(t, &at("tool_calls"))?)
                }
                _ => None,
            };
            let content = match &m.content {
                None if role == "assistant" => String::new(),
                None => return Err(ApiError::field(at("content"), "is required for this role")),
                Some(Content::Text(s)) => s.clone(),
                Some(Content::Parts(parts)) => {
                    let mut s = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => s.push_str(t),
                            ("text", None) => {
                                return Err(ApiError::field(
                                    format!("messages[{i}].content[{j}].text"),
                                    "is required for a text part",
                                ))
                            }
                            (k, _) => {
                                return Err(ApiError::unsupported(
                                    &format!("messages[{i}].content[{j}].type"),
                                    &format!("content of type `{}`", k.escape_debug()),
                                ))
                            }
                        }
                    }
                    s
                }
            };
            let mut v = serde_json::json!({"role": role, "content": content});
            if let Some(r) = &m.reasoning_content {
                v["reasoning_content"] = r.clone().into();
            }
            if let Some(n) = &m.name {
                v["name"] = n.clone().into();
            }
            if let Some(t) = &m.tool_call_id {
                v["tool_call_id"] = t.clone().into();
            }
            if let Some(t) = tool_calls {
                v["tool_calls"] = Value::Array(t);
            }
            out.push(v);
        }
        Ok(out)
    }

    /// `logprobs: true` asks for each token's logprob, `top_logprobs` (0 to 20, only with
    /// `logprobs: true`, as OpenAI's API) for alternatives: `Some(top)`, or `None` for off.
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        if let Some(n) = self.top_logprobs {
            if n > MAX_TOP_LOGPROBS {
                return Err(ApiError::field(
                    "top_logprobs",
                    format!("{n} is out of range: must be between 0 and {MAX_TOP_LOGPROBS}"),
                ));
            }
            if self.logprobs != Some(true) {
                return Err(ApiError::field(
                    "top_logprobs",
                    "only allowed when logprobs is true",
                ));
            }
        }
        Ok((self.logprobs == Some(true)).then(|| self.top_logprobs.unwrap_or(0) as usize))
    }

    /// `max_completion_tokens` (the current name) wins over `max_tokens` (the old one).
    pub fn max_tokens(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

impl CompletionRequest {
    /// `logprobs: N` (0 to 20): each token's logprob and its N most likely alternatives.
    pub fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        match self.logprobs {
            Some(n) if n > MAX_TOP_LOGPROBS => Err(ApiError::field(
                "logprobs",
                format!("{n} is out of range: must be between 0 and {MAX_TOP_LOGPROBS}"),
            )),
            n => Ok(n.map(|n| n as usize)),
        }
    }

    /// The one prompt, as text or as token ids (checked against the vocabulary).
    pub fn prompt(&self, n_vocab: usize) -> Result<PromptInput, ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::unsupported("echo", "echo"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::unsupported("suffix", "suffix"));
        }
        self.logprobs()?;
        let ids = |v: &[i64]| -> Result<Vec<u32>, ApiError> {
            v.iter()
                .enumerate()
                .map(|(i, &t)| {
                    if t < 0 || t as u64 >= n_vocab as u64 {
                        Err(ApiError::field(
                            format!("prompt[{i}]"),
                            format!("token id {t} is outside the vocabulary of {n_vocab}"),
                        ))
                    } else {
                        Ok(t as u32)
                    }
                })
                .collect()
        };
        let p = match &self.prompt {
            Prompt::Text(s) => PromptInput::Text(s.clone()),
            Prompt::Texts(v) if v.len() == 1 => PromptInput::Text(v[0].clone()),
            Prompt::Tokens(v) => PromptInput::Tokens(ids(v)?),
            Prompt::TokenLists(v) if v.len() == 1 => PromptInput::Tokens(ids(&v[0])?),
            _ => {
                return Err(ApiError::unsupported(
                    "prompt",
                    "more than one prompt per request",
                ))
            }
        };
        match &p {
            PromptInput::Text(s) if s.is_empty() => {
                Err(ApiError::field("prompt", "must not be empty"))
            }
            PromptInput::Tokens(v) if v.is_empty() => {
                Err(ApiError::field("prompt", "must not be empty"))
            }
            _ => Ok(p),
        }
    }
}

pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}
