//! GLM tool calls: the request's `tools` (validated, and the type of each parameter from its
//! JSON schema) and a streaming parser for GLM's call format
//!
//! ```text
//! <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>
//! ```
//!
//! GLM-4.5 puts newlines after the name and between the pairs; GLM-4.7 and GLM-5 none. The
//! parser accepts whitespace there either way: the name and the keys are trimmed, a value is
//! taken as it is between its tags.
//!
//! Each argument is typed by the tool's schema: a parameter whose type is `string` (or a
//! union including it, or a string `enum`) stays the exact text; any other value is parsed as
//! JSON (its text trimmed), falling back to the string when it does not parse. The arguments
//! are serialized as one JSON object, `{}` when there are none.
//!
//! Streaming: the parser is fed the answer's text in pieces and returns [`ToolEvent`]s: text
//! that is certainly content, a call's start once its name is complete (the first `<arg_key>`
//! or `</tool_call>` after it), and fragments of its arguments (a JSON object's text; the
//! first fragment opens it, `</tool_call>` closes it): a string-typed value streams as it
//! arrives (`"key":"` at `<arg_value>`, then its escaped text, the closing quote at
//! `</arg_value>`: long file contents are not held back), any other value goes out whole when
//! it closes (it must be seen whole to be parsed). A partial tag at the end of a piece is held
//! back. So the events of any cutting of a text concatenate to those of the whole.
//!
//! Recovery, never losing text: a `<tool_call>` whose name is not one of the request's tools
//! or never completes (the answer ends first, another `<tool_call>` comes first, or the name
//! runs past [`MAX_NAME_BYTES`]) is content, tags and all. A call that started and then breaks
//! its grammar (text between the pairs, a key without a value) or never closes is closed
//! with the arguments complete so far, and the unfinished text is content; a string value
//! cut short keeps the text that arrived (it was streamed already).

use std::collections::HashMap;

use serde_json::Value;

use crate::error::ApiError;

pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";
pub const KEY_OPEN: &str = "<arg_key>";
pub const KEY_CLOSE: &str = "</arg_key>";
pub const VALUE_OPEN: &str = "<arg_value>";
pub const VALUE_CLOSE: &str = "</arg_value>";
/// Every tag of the format (their token ids print these texts when tools are on).
pub const TAGS: [&str; 6] = [
    CALL_OPEN,
    CALL_CLOSE,
    KEY_OPEN,
    KEY_CLOSE,
    VALUE_OPEN,
    VALUE_CLOSE,
];
/// A function name longer than this is not a name: the `<tool_call>` was stray text.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest tool name (OpenAI's limit is 64, Anthropic's 128; MCP tool names run long).
pub const MAX_TOOL_NAME: usize = 128;
/// Most tools per request (OpenAI's own limit).
pub const MAX_TOOLS: usize = 128;

/// How a parameter's value text becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// The text as a JSON string.
    Str,
    /// Parsed as JSON; the text as a string when it does not parse.
    Json,
}

/// One function the model may call.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    params: HashMap<String, ParamKind>,
}

impl ToolSpec {
    /// How the value of `key` is typed (keys the schema does not name: as JSON, else string).
    pub fn kind(&self, key: &str) -> ParamKind {
        self.params.get(key).copied().unwrap_or(ParamKind::Json)
    }
}

/// The request's tools.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    pub specs: Vec<ToolSpec>,
}

/// A schema's type names: `type` (a string or a list), else those of `anyOf` / `oneOf`
/// branches; a string `enum` without a type counts as `string`.
fn schema_types(s: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match s.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => {
            out.extend(ts.iter().filter_map(|t| t.as_str().map(String::from)))
        }
        _ => {}
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(bs)) = s.get(union) {
            for b in bs {
                out.extend(schema_types(b));
            }
        }
    }
    if out.is_empty() {
        if let Some(Value::Array(e)) = s.get("enum") {
            if !e.is_empty() && e.iter().all(Value::is_string) {
                out.push("string".into());
            }
        }
    }
    out
}

/// Both APIs' tool lists are bounded before any entry is parsed.
fn check_count(tools: &[Value]) -> Result<(), ApiError> {
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::field(
            "tools",
            format!("{} tools: at most {MAX_TOOLS}", tools.len()),
        ));
    }
    Ok(())
}

impl Tools {
    /// Reads OpenAI's `tools`: `[{"type": "function", "function": {"name", "description",
    /// "parameters"}}]`. Errors name the field (`tools[1].function.name`).
    pub fn from_openai(tools: &[Value]) -> Result<Self, ApiError> {
        check_count(tools)?;
        let mut specs = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let at = |f: &str| format!("tools[{i}]{f}");
            if !t.is_object() {
                return Err(ApiError::field(at(""), "must be an object"));
            }
            match t.get("type").and_then(Value::as_str) {
                Some("function") => {}
                Some(k) => {
                    return Err(ApiError::field(
                        at(".type"),
                        format!(
                            "`{}`: only `function` tools are supported",
                            k.escape_debug()
                        ),
                    ))
                }
                None => return Err(ApiError::field(at(".type"), "is required (`function`)")),
            }
            let f = t
                .get("function")
                .filter(|f| f.is_object())
                .ok_or_else(|| ApiError::field(at(".function"), "is required (an object)"))?;
            specs.push(Self::spec(f, &at(".function"))?);
        }
        Self::check_unique(&specs, "tools", ".function.name")?;
        Ok(Self { specs })
    }

    /// Reads Anthropic's `tools`: `[{"name", "description", "input_schema"}]`.
    pub fn from_anthropic(tools: &[Value]) -> Result<Self, ApiError> {
        check_count(tools)?;
        let mut specs = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let at = format!("tools[{i}]");
            if !t.is_object() {
                return Err(ApiError::field(at, "must be an object"));
            }
            if let Some(k) = t.get("type").and_then(Value::as_str) {
                if k != "custom" {
                    return Err(ApiError::unsupported(
                        &format!("{at}.type"),
                        &format!("server tools (`{}`)", k.escape_debug()),
                    ));
                }
            }
            let mut f = serde_json::Map::new();
            if let Some(n) = t.get("name") {
                f.insert("name".into(), n.clone());
            }
            match t.get("input_schema") {
                Some(s) => f.insert("parameters".into(), s.clone()),
                None => return Err(ApiError::field(format!("{at}.input_schema"), "is required")),
            };
            specs.push(Self::spec(&Value::Object(f), &at)?);
        }
        Self::check_unique(&specs, "tools", ".name")?;
        Ok(Self { specs })
    }

    fn spec(f: &Value, at: &str) -> Result<ToolSpec, ApiError> {
        let name = match f.get("name") {
            Some(Value::String(n)) => n.clone(),
            Some(_) => return Err(ApiError::field(format!("{at}.name"), "must be a string")),
            None => return Err(ApiError::field(format!("{at}.name"), "is required")),
        };
        let ok = !name.is_empty()
            && name.len() <= MAX_TOOL_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !ok {
            return Err(ApiError::field(
                format!("{at}.name"),
                format!(
                    "`{}`: a name must have 1 to {MAX_TOOL_NAME} of a-z, A-Z, 0-9, _, - and .",
                    name.escape_debug()
                ),
            ));
        }
        let mut params = HashMap::new();
        let key = if at.ends_with(".function") {
            "parameters"
        } else {
            "input_schema"
        };
        match f.get("parameters") {
            None | Some(Value::Null) => {}
            Some(p @ Value::Object(_)) => match p.get("properties") {
                None | Some(Value::Null) => {}
                Some(Value::Object(props)) => {
                    for (k, s) in props {
                        let types = schema_types(s);
                        let kind = if types.iter().any(|t| t == "string") {
                            ParamKind::Str
                        } else {
                            ParamKind::Json
                        };
                        params.insert(k.clone(), kind);
                    }
                }
                Some(_) => {
                    return Err(ApiError::field(
                        format!("{at}.{key}.properties"),
                        "must be an object",
                    ))
                }
            },
            Some(_) => {
                return Err(ApiError::field(
                    format!("{at}.{key}"),
                    "must be a JSON schema object",
                ))
            }
        }
        Ok(ToolSpec { name, params })
    }

    fn check_unique(specs: &[ToolSpec], field: &str, suffix: &str) -> Result<(), ApiError> {
        for (i, s) in specs.iter().enumerate() {
            if specs[..i].iter().any(|o| o.name == s.name) {
                return Err(ApiError::field(
                    format!("{field}[{i}]{suffix}"),
                    format!("`{}` is defined twice", s.name.escape_debug()),
                ));
            }
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.specs.iter().find(|s| s.name == name)
    }
}

/// What the parser found in the text, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Content text.
    Text(String),
    /// Call `index` (counted from 0 in this answer) of function `name` starts.
    Start { index: usize, name: String },
    /// More of call `index`'s arguments (a JSON object's text, in pieces).
    Args { index: usize, fragment: String },
}

/// Appends `e` to `out`, merging it into the last event when both are text or both are
/// fragments of the same call.
pub fn push_event(out: &mut Vec<ToolEvent>, e: ToolEvent) {
    match (out.last_mut(), e) {
        (_, ToolEvent::Text(t)) if t.is_empty() => {}
        (Some(ToolEvent::Text(a)), ToolEvent::Text(b)) => a.push_str(&b),
        (
            Some(ToolEvent::Args { index: i, fragment }),
            ToolEvent::Args {
                index: j,
                fragment: f,
            },
        ) if *i == j => fragment.push_str(&f),
        (_, e) => out.push(e),
    }
}

/// A completed call: its function name and arguments (a JSON object's text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// Folds events into content text and calls (what a non-streamed message carries).
pub fn assemble(events: &[ToolEvent]) -> (String, Vec<ToolCall>) {
    let mut text = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    for e in events {
        match e {
            ToolEvent::Text(t) => text.push_str(t),
            ToolEvent::Start { index, name } => {
                debug_assert_eq!(*index, calls.len());
                calls.push(ToolCall {
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            ToolEvent::Args { index, fragment } => calls[*index].arguments.push_str(fragment),
        }
    }
    (text, calls)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Content: looking for `<tool_call>`.
    Text,
    /// After `<tool_call>`: reading the name.
    Name,
    /// In a started call, after `<arg_key>`: reading the key.
    Key,
    /// After `</arg_key>`: expecting `<arg_value>` (whitespace allowed).
    BeforeValue,
    /// After `<arg_value>`: reading the value.
    Value,
    /// In a started call, after its name or a value: `<arg_key>` or `</tool_call>` next.
    BetweenArgs,
}

/// The streaming parser (see the module documentation).
#[derive(Debug)]
pub struct ToolParser {
    tools: Tools,
    state: State,
    /// Text not yet decided.
    held: String,
    /// Text of the current element consumed so far (content again if the call breaks).
    raw: String,
    /// Calls started so far; the current call's name and number of arguments.
    calls: usize,
    spec: Option<ToolSpec>,
    args: usize,
    key: String,
    /// Where in `held` to look for the closing tag of a key or value (what came before was
    /// searched already), so that a long value is scanned once, not once per piece.
    scan: usize,
    /// In a string-typed value: its text streams as it arrives (JSON-escaped), not at its
    /// close.
    in_string: bool,
}

/// Length of the longest suffix of `text` that is a proper prefix of `pat`.
fn partial(text: &str, pat: &str) -> usize {
    (1..pat.len().min(text.len() + 1))
        .rev()
        .find(|&k| text.ends_with(&pat[..k]))
        .unwrap_or(0)
}

impl ToolParser {
    pub fn new(tools: Tools) -> Self {
        Self {
            tools,
            state: State::Text,
            held: String::new(),
            raw: String::new(),
            calls: 0,
            spec: None,
            args: 0,
            key: String::new(),
            scan: 0,
            in_string: false,
        }
    }

    /// The argument fragment that opens the value of the current key (`{"k":` or `,"k":`).
    fn key_fragment(&self) -> String {
        let mut f = String::from(if self.args == 0 { "{" } else { "," });
        f.push_str(&Value::String(self.key.clone()).to_string());
        f.push(':');
        f
    }

    fn args_event(&self, out: &mut Vec<ToolEvent>, fragment: String) {
        push_event(
            out,
            ToolEvent::Args {
                index: self.calls - 1,
                fragment,
            },
        );
    }

    /// `text` as the inside of a JSON string (escaping is per character, so pieces escaped
    /// one by one concatenate to the whole escaped).
    fn escaped(text: &str) -> String {
        let q = Value::String(text.to_string()).to_string();
        q[1..q.len() - 1].to_string()
    }

    /// Ends a string value that was streaming: its closing quote, and it counts.
    fn end_string(&mut self, out: &mut Vec<ToolEvent>, rest: &str) {
        let mut f = Self::escaped(rest);
        f.push('"');
        self.args_event(out, f);
        self.args += 1;
        self.in_string = false;
    }

    /// Finds `tag` in `held` from where the last search stopped; on a miss, remembers where
    /// the next one must start (a tag may straddle the end).
    fn find_close(&mut self, tag: &str) -> Option<usize> {
        match self.held[self.scan..].find(tag) {
            Some(i) => {
                let at = self.scan + i;
                self.scan = 0;
                Some(at)
            }
            None => {
                let mut from = self.held.len().saturating_sub(tag.len() - 1);
                while !self.held.is_char_boundary(from) {
                    from -= 1;
                }
                self.scan = from;
                None
            }
        }
    }

    /// Calls started so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Feeds text; returns what is decided.
    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.held.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The text ended: flushes what was held (see the module documentation for unclosed
    /// calls).
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut out = Vec::new();
        match self.state {
            State::Text => {
                let t = std::mem::take(&mut self.held);
                push_event(&mut out, ToolEvent::Text(t));
            }
            State::Name => {
                let mut t = std::mem::take(&mut self.raw);
                t.push_str(&std::mem::take(&mut self.held));
                push_event(&mut out, ToolEvent::Text(t));
            }
            State::Value if self.in_string => {
                // A string value cut short keeps what arrived (a partial closing tag
                // included: it was text after all).
                let rest = std::mem::take(&mut self.held);
                self.end_string(&mut out, &rest);
                self.raw.clear();
                self.break_call(&mut out);
            }
            _ => {
                self.break_call(&mut out);
                let t = std::mem::take(&mut self.held);
                push_event(&mut out, ToolEvent::Text(t));
            }
        }
        self.state = State::Text;
        self.scan = 0;
        out
    }

    /// Closes the current call with the arguments so far; what was read of the unfinished
    /// element becomes content. Parsing goes on in content.
    fn break_call(&mut self, out: &mut Vec<ToolEvent>) {
        self.close_call(out);
        let raw = std::mem::take(&mut self.raw);
        push_event(out, ToolEvent::Text(raw));
        self.state = State::Text;
        self.scan = 0;
    }

    fn close_call(&mut self, out: &mut Vec<ToolEvent>) {
        let fragment = if self.args == 0 { "{}" } else { "}" };
        push_event(
            out,
            ToolEvent::Args {
                index: self.calls - 1,
                fragment: fragment.into(),
            },
        );
        self.spec = None;
        self.args = 0;
    }

    /// Moves `n` bytes of held text into the element's raw text.
    fn consume(&mut self, n: usize) -> String {
        let s: String = self.held.drain(..n).collect();
        self.raw.push_str(&s);
        s
    }

    /// One transition; false when more text is needed.
    fn step(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        match self.state {
            State::Text => match self.held.find(CALL_OPEN) {
                Some(at) => {
                    let before: String = self.held.drain(..at).collect();
                    push_event(out, ToolEvent::Text(before));
                    self.raw.clear();
                    self.consume(CALL_OPEN.len());
                    self.state = State::Name;
                    true
                }
                None => {
                    let keep = partial(&self.held, CALL_OPEN);
                    let cut = self.held.len() - keep;
                    let ready: String = self.held.drain(..cut).collect();
                    push_event(out, ToolEvent::Text(ready));
                    false
                }
            },
            State::Name => {
                let end = [KEY_OPEN, CALL_CLOSE, CALL_OPEN]
                    .iter()
                    .filter_map(|t| self.held.find(t).map(|i| (i, *t)))
                    .min();
                match end {
                    Some((at, tag)) => {
                        let name = self.held[..at].trim().to_string();
                        let spec = self.tools.get(&name).cloned();
                        match (tag, spec) {
                            (t, Some(spec)) if t != CALL_OPEN && at <= MAX_NAME_BYTES => {
                                self.consume(at + tag.len());
                                push_event(
                                    out,
                                    ToolEvent::Start {
                                        index: self.calls,
                                        name,
                                    },
                                );
                                self.calls += 1;
                                self.spec = Some(spec);
                                self.args = 0;
                                self.raw.clear();
                                if tag == CALL_CLOSE {
                                    self.close_call(out);
                                    self.state = State::Text;
                                } else {
                                    self.raw.push_str(KEY_OPEN);
                                    self.state = State::Key;
                                }
                            }
                            _ => {
                                // Not a call: `<tool_call>` and the name are content; the
                                // tag that ended it is read again as content.
                                let mut t = std::mem::take(&mut self.raw);
                                t.extend(self.held.drain(..at));
                                push_event(out, ToolEvent::Text(t));
                                self.state = State::Text;
                            }
                        }
                        true
                    }
                    None => {
                        let keep = [KEY_OPEN, CALL_CLOSE, CALL_OPEN]
                            .iter()
                            .map(|t| partial(&self.held, t))
                            .max()
                            .unwrap_or(0);
                        if self.held.len() - keep > MAX_NAME_BYTES {
                            let mut t = std::mem::take(&mut self.raw);
                            let cut = self.held.len() - keep;
                            t.extend(self.held.drain(..cut));
                            push_event(out, ToolEvent::Text(t));
                            self.state = State::Text;
                            return true;
                        }
                        false
                    }
                }
            }
            State::Key => match self.find_close(KEY_CLOSE) {
                Some(at) => {
                    let k = self.consume(at);
                    self.key = k.trim().to_string();
                    self.consume(KEY_CLOSE.len());
                    self.state = State::BeforeValue;
                    true
                }
                None => false,
            },
            State::BeforeValue => self.expect(&[VALUE_OPEN], out),
            State::BetweenArgs => self.expect(&[KEY_OPEN, CALL_CLOSE], out),
            State::Value if self.in_string => match self.held.find(VALUE_CLOSE) {
                Some(at) => {
                    let v: String = self.held.drain(..at).collect();
                    self.held.drain(..VALUE_CLOSE.len());
                    self.end_string(out, &v);
                    self.raw.clear();
                    self.state = State::BetweenArgs;
                    true
                }
                None => {
                    // What cannot be the start of `</arg_value>` is certainly value text.
                    let cut = self.held.len() - partial(&self.held, VALUE_CLOSE);
                    if cut > 0 {
                        let v: String = self.held.drain(..cut).collect();
                        self.args_event(out, Self::escaped(&v));
                    }
                    false
                }
            },
            State::Value => match self.find_close(VALUE_CLOSE) {
                Some(at) => {
                    let v: String = self.held.drain(..at).collect();
                    self.held.drain(..VALUE_CLOSE.len());
                    let spec = self.spec.as_ref().expect("in a call");
                    let value = match spec.kind(&self.key) {
                        ParamKind::Str => Value::String(v),
                        ParamKind::Json => {
                            serde_json::from_str(v.trim()).unwrap_or(Value::String(v))
                        }
                    };
                    let mut fragment = self.key_fragment();
                    fragment.push_str(&value.to_string());
                    push_event(
                        out,
                        ToolEvent::Args {
                            index: self.calls - 1,
                            fragment,
                        },
                    );
                    self.args += 1;
                    self.raw.clear();
                    self.state = State::BetweenArgs;
                    true
                }
                None => false,
            },
        }
    }

    /// After optional whitespace, one of `tags` must come; anything else breaks the call.
    fn expect(&mut self, tags: &[&str], out: &mut Vec<ToolEvent>) -> bool {
        let ws = self.held.len() - self.held.trim_start().len();
        let rest = &self.held[ws..];
        if let Some(tag) = tags.iter().find(|t| rest.starts_with(**t)) {
            self.consume(ws + tag.len());
            match *tag {
                VALUE_OPEN => {
                    self.state = State::Value;
                    let spec = self.spec.as_ref().expect("in a call");
                    if spec.kind(&self.key) == ParamKind::Str {
                        // A string streams: the key and the opening quote now.
                        let mut f = self.key_fragment();
                        f.push('"');
                        self.args_event(out, f);
                        self.in_string = true;
                        self.raw.clear();
                    }
                }
                KEY_OPEN => {
                    self.raw.clear();
                    self.raw.push_str(KEY_OPEN);
                    self.state = State::Key;
                }
                _ => {
                    self.raw.clear();
                    self.close_call(out);
                    self.state = State::Text;
                }
            }
            return true;
        }
        if rest.is_empty() || tags.iter().any(|t| t.starts_with(rest)) {
            return false; // whitespace so far, or a tag still arriving
        }
        self.break_call(out);
        true
    }
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
