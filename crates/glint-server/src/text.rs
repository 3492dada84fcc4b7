//! From sampled tokens to the text a response carries, incrementally: UTF-8 assembly (a
//! character split across tokens is held back), stop strings (a partial match at the end is
//! held back until it is decided) and the GLM reasoning split (`<think>…</think>` becomes
//! `reasoning_content`, a tag split across tokens is held back too).
//!
//! Each stage is fed pieces and returns what is certain; `finish` flushes what was held. So
//! the concatenation of what streaming returns equals what one call over the whole text would
//! return — streamed and non-streamed responses agree by construction.

pub use glint_engine::tokenizer::Utf8Stream;

use crate::tools::{push_event, ToolEvent, ToolParser};

/// Length of the longest suffix of `text` that is a proper prefix of one of `pats` (text that
/// may still become a match and must be held back).
fn partial_suffix<'p>(text: &str, pats: impl IntoIterator<Item = &'p str>) -> usize {
    let mut best = 0;
    for p in pats {
        for k in (best + 1..p.len().min(text.len() + 1)).rev() {
            if p.is_char_boundary(k) && text.ends_with(&p[..k]) {
                best = k;
                break;
            }
        }
    }
    best
}

/// Stops generation as soon as any stop string is complete; the stop string and what follows
/// are not part of the output (OpenAI semantics).
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
    /// Which stop string matched (Anthropic's `stop_sequence` reports it).
    matched: Option<usize>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// The stop string that ended the text, once one has.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// Adds text; returns the part that is certainly output, and whether a stop string
    /// matched (then nothing more is output).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        if self.stops.is_empty() {
            return (text.to_string(), false);
        }
        self.held.push_str(text);
        // The stop string that is complete first wins (as when text arrives a character at a
        // time); of two ending at the same place, the longer.
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(k, s)| self.held.find(s.as_str()).map(|i| (i + s.len(), i, k)))
            .min();
        if let Some((_, at, k)) = first {
            self.stopped = true;
            self.matched = Some(k);
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = partial_suffix(&self.held, self.stops.iter().map(String::as_str));
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    /// What was held back when generation ended without a match.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Text split into the reasoning and the answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    /// The answer's text (with tool calls on: the text outside the calls).
    pub content: String,
    /// With tool calls on: the answer in order, text and calls (`content` is its text).
    pub events: Vec<ToolEvent>,
}

impl Split {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty() && self.events.is_empty()
    }

    pub fn append(&mut self, other: Split) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
        for e in other.events {
            push_event(&mut self.events, e);
        }
    }
}

pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// GLM's reasoning parser: text between `<think>` and `</think>` is reasoning, the rest is
/// content; the tags themselves are dropped. GLM's template ends a thinking prompt with
/// `<|assistant|><think>`, so generation may start inside the reasoning block
/// ([`ReasoningSplitter::new`]`(true)`); `enable_thinking = false` ends it with `</think>`.
#[derive(Debug)]
pub struct ReasoningSplitter {
    in_reasoning: bool,
    held: String,
    /// A tag that also ends a reasoning block, and stays in the answer (with tools:
    /// `<tool_call>`, as GLM may call a tool without closing its reasoning first).
    ends_at: Option<&'static str>,
}

impl ReasoningSplitter {
    pub fn new(starts_in_reasoning: bool) -> Self {
        Self {
            in_reasoning: starts_in_reasoning,
            held: String::new(),
            ends_at: None,
        }
    }

    /// Also ends a reasoning block at `tag`, which is kept as the answer's first text.
    pub fn ending_at(mut self, tag: &'static str) -> Self {
        self.ends_at = Some(tag);
        self
    }

    /// Whether a rendered prompt leaves the model inside a reasoning block: its last tag
    /// (ignoring trailing whitespace) is an open `<think>`.
    pub fn prompt_opens_reasoning(prompt: &str) -> bool {
        let open = prompt.rfind(THINK_OPEN);
        let close = prompt.rfind(THINK_CLOSE);
        match (open, close) {
            (Some(o), Some(c)) => o > c,
            (Some(_), None) => true,
            _ => false,
        }
    }

    pub fn push(&mut self, text: &str) -> Split {
        self.held.push_str(text);
        let mut out = Split::default();
        loop {
            let end = self
                .ends_at
                .filter(|_| self.in_reasoning)
                .and_then(|t| self.held.find(t));
            let open = self.held.find(THINK_OPEN).map(|i| (i, THINK_OPEN, true));
            let close = self.held.find(THINK_CLOSE).map(|i| (i, THINK_CLOSE, false));
            let tag = match (open, close) {
                (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
                (a, b) => a.or(b),
            };
            if let Some(at) = end.filter(|&e| tag.is_none_or(|t| e < t.0)) {
                // The reasoning ends here; the tag stays, as the answer's.
                let before: String = self.held[..at].to_string();
                self.emit(&mut out, &before);
                self.held.drain(..at);
                self.in_reasoning = false;
                continue;
            }
            match tag {
                Some((at, tag, opens)) => {
                    let before: String = self.held[..at].to_string();
                    self.emit(&mut out, &before);
                    self.held.drain(..at + tag.len());
                    self.in_reasoning = opens;
                }
                None => {
                    let end = self
                        .ends_at
                        .filter(|_| self.in_reasoning)
                        .unwrap_or(THINK_OPEN);
                    let keep = partial_suffix(&self.held, [THINK_OPEN, THINK_CLOSE, end]);
                    let cut = self.held.len() - keep;
                    let ready: String = self.held[..cut].to_string();
                    self.emit(&mut out, &ready);
                    self.held.drain(..cut);
                    return out;
                }
            }
        }
    }

    pub fn finish(&mut self) -> Split {
        let rest = std::mem::take(&mut self.held);
        let mut out = Split::default();
        self.emit(&mut out, &rest);
        out
    }

    fn emit(&self, out: &mut Split, text: &str) {
        if self.in_reasoning {
            out.reasoning.push_str(text);
        } else {
            out.content.push_str(text);
        }
    }
}

/// The whole per-request text pipeline: token bytes → UTF-8 → stop strings → reasoning split
/// (chat) or plain text (completions, which put everything in `content`) → the tool-call
/// parser on the answer (chat with `tools`).
#[derive(Debug)]
pub struct TextPipeline {
    utf8: Utf8Stream,
    stop: StopMatcher,
    reasoning: Option<ReasoningSplitter>,
    tools: Option<ToolParser>,
    stopped: bool,
}

impl TextPipeline {
    pub fn new(stops: Vec<String>, reasoning: Option<ReasoningSplitter>) -> Self {
        Self {
            utf8: Utf8Stream::default(),
            stop: StopMatcher::new(stops),
            reasoning,
            tools: None,
            stopped: false,
        }
    }

    /// Parses tool calls out of the answer.
    pub fn with_tools(mut self, parser: ToolParser) -> Self {
        self.tools = Some(parser);
        self
    }

    /// Tool calls started so far.
    pub fn tool_calls(&self) -> usize {
        self.tools.as_ref().map_or(0, ToolParser::calls)
    }

    /// Feeds one token's bytes; returns the certain output and whether a stop string matched.
    pub fn push(&mut self, bytes: &[u8]) -> (Split, bool) {
        if self.stopped {
            return (Split::default(), true);
        }
        let text = self.utf8.push(bytes);
        let (text, stopped) = self.stop.push(&text);
        self.stopped = stopped;
        let mut out = self.split(&text);
        if stopped {
            out.append(self.flush_split());
        }
        (out, stopped)
    }

    /// The stop string that ended generation, if one did.
    pub fn stop_matched(&self) -> Option<&str> {
        self.stop.matched()
    }

    /// Flushes everything held back (generation ended without a stop string).
    pub fn finish(&mut self) -> Split {
        if self.stopped {
            return Split::default();
        }
        let text = self.utf8.finish();
        let (mut text, stopped) = self.stop.push(&text);
        self.stopped = true;
        if !stopped {
            text.push_str(&self.stop.finish());
        }
        let mut out = self.split(&text);
        out.append(self.flush_split());
        out
    }

    fn split(&mut self, text: &str) -> Split {
        let s = match &mut self.reasoning {
            Some(r) => r.push(text),
            None => Split {
                content: text.to_string(),
                ..Split::default()
            },
        };
        self.calls(s, false)
    }

    fn flush_split(&mut self) -> Split {
        let s = match &mut self.reasoning {
            Some(r) => r.finish(),
            None => Split::default(),
        };
        self.calls(s, true)
    }

    /// The answer through the tool-call parser, when there is one.
    fn calls(&mut self, mut s: Split, end: bool) -> Split {
        let Some(p) = &mut self.tools else {
            return s;
        };
        let mut events = p.push(&s.content);
        if end {
            events.extend(p.finish());
        }
        s.content.clear();
        for e in events {
            if let ToolEvent::Text(t) = &e {
                s.content.push_str(t);
            }
            push_event(&mut s.events, e);
        }
        s
    }
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
