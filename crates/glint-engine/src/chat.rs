//! Chat prompts rendered from the GGUF's own `tokenizer.chat_template` (Jinja).
//!
//! GLM releases differ in small details (newlines after role tags, `<think>` handling), so we run
//! the template shipped with the file instead of re-implementing any one of them. The engine is
//! configured the way `transformers.apply_chat_template` configures Jinja2 — `trim_blocks`,
//! `lstrip_blocks`, loop controls, Python string methods, `raise_exception`, and a `tojson` that
//! formats like Python's `json.dumps` — so the rendered text matches Hugging Face byte for byte.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the GGUF has no tokenizer.chat_template")]
    NoTemplate,
    #[error("chat template does not compile: {0}")]
    Compile(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
    #[error("chat template context must be a JSON object, found {0}")]
    BadContext(String),
    #[error(
        "chat template ran past its step budget of {fuel} instructions (a loop that does not end?)"
    )]
    OutOfFuel { fuel: u64 },
    #[error("chat template output exceeds the limit of {limit} bytes")]
    TooLong { limit: usize },
}

/// Instructions a render may execute. Real templates need a few thousand per message; the
/// budget stops a template with runaway loops (it comes from the file) in well under a second.
pub const DEFAULT_FUEL: u64 = 20_000_000;
/// Bytes a render may produce: far above any prompt a context can hold, far below memory.
pub const DEFAULT_MAX_OUTPUT: usize = 64 << 20;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    fuel: u64,
    max_output: usize,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`. `bos_token`/`eos_token` are exposed to the template as the strings
    /// `transformers` passes (some templates print `{{ bos_token }}`).
    pub fn new(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(
            syntax
                .build()
                .map_err(|e| ChatError::Compile(format!("{e:#}")))?,
        );
        env.set_fuel(Some(DEFAULT_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| ChatError::Compile(format!("{e:#}")))?;
        Ok(Self {
            env,
            fuel: DEFAULT_FUEL,
            max_output: DEFAULT_MAX_OUTPUT,
            bos_token,
            eos_token,
        })
    }

    /// Replaces the step budget and the output limit ([`DEFAULT_FUEL`], [`DEFAULT_MAX_OUTPUT`]).
    pub fn with_limits(mut self, fuel: u64, max_output: usize) -> Self {
        self.fuel = fuel;
        self.max_output = max_output;
        self.env.set_fuel(Some(fuel));
        self
    }

    /// Renders `messages`; `add_generation_prompt` appends the assistant header so the model
    /// answers next.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        self.render_json(&serde_json::json!({
            "messages": msgs,
            "add_generation_prompt": add_generation_prompt,
        }))
    }

    /// Renders with an arbitrary context object (`messages`, `tools`, `enable_thinking`, ...),
    /// for callers that need more than plain role/content turns.
    pub fn render_json(&self, ctx: &serde_json::Value) -> Result<String, ChatError> {
        let obj = ctx
            .as_object()
            .ok_or_else(|| ChatError::BadContext(ctx.to_string()))?;
        let mut full = serde_json::Map::new();
        if let Some(b) = &self.bos_token {
            full.insert("bos_token".into(), b.clone().into());
        }
        if let Some(e) = &self.eos_token {
            full.insert("eos_token".into(), e.clone().into());
        }
        full.insert("add_generation_prompt".into(), false.into());
        for (k, v) in obj {
            full.insert(k.clone(), v.clone());
        }
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatError::Render(format!("{e:#}")))?;
        let mut out = LimitedWriter {
            buf: Vec::new(),
            limit: self.max_output,
            exceeded: false,
        };
        let rendered =
            tmpl.render_captured_to(Value::from(minijinja::value::Serde(full)), &mut out);
        if out.exceeded {
            return Err(ChatError::TooLong {
                limit: self.max_output,
            });
        }
        match rendered {
            Ok(_) => String::from_utf8(out.buf).map_err(|e| ChatError::Render(e.to_string())),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                Err(ChatError::OutOfFuel { fuel: self.fuel })
            }
            Err(e) => Err(ChatError::Render(format!("{e:#}"))),
        }
    }
}

/// Collects the rendered text and fails the render once it passes `limit` bytes, so a template
/// that prints without end stops at the limit instead of exhausting memory.
struct LimitedWriter {
    buf: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl std::io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("chat template output limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `raise_exception(msg)`: templates call it to reject conversations they cannot render.
fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(fmt)` as provided by `transformers` (UTC here: the host's zone is irrelevant
/// for reproducible prompts).
fn strftime_now(fmt: String) -> Result<Value, Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(Value::from(strftime_utc(&fmt, secs)))
}

/// A small strftime for the directives chat templates use.
pub(crate) fn strftime_utc(fmt: &str, unix_secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let sod = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('-') => match chars.next() {
                Some('d') => out.push_str(&d.to_string()),
                Some('m') => out.push_str(&m.to_string()),
                Some(o) => {
                    out.push_str("%-");
                    out.push(o);
                }
                None => out.push_str("%-"),
            },
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('H') => out.push_str(&format!("{:02}", sod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", sod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", sod % 60)),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `tojson` as `transformers` defines it: `json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)` — spaced separators, no HTML escaping.
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent: Option<String> = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(s) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson separators must be a pair, got {} items", s.len()),
            ))
        }
        // json.dumps drops the space after ',' when indenting.
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let opts = JsonOpts {
        indent,
        item_sep,
        key_sep,
        ensure_ascii,
        sort_keys,
    };
    let mut out = String::new();
    write_json(&mut out, value, &opts, 0)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

fn write_json(out: &mut String, v: &Value, o: &JsonOpts, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                out.push_str(&python_float_repr(f));
            }
        }
        ValueKind::String => write_json_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), o, depth, |out, i| {
                write_json(out, &items[i], o, depth + 1)
            })?;
        }
        ValueKind::Map | ValueKind::Plain => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if o.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            write_container(out, '{', '}', keys.len(), o, depth, |out, i| {
                let key = &keys[i];
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_string(),
                    ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).into(),
                    ValueKind::None => "null".into(),
                    _ => key.to_string(),
                };
                write_json_str(out, &key_text, o.ensure_ascii);
                out.push_str(&o.key_sep);
                write_json(out, &v.get_item(key)?, o, depth + 1)
            })?;
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson cannot serialize a value of kind {other:?}"),
            ))
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    open: char,
    close: char,
    n: usize,
    o: &JsonOpts,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..n {
        if i > 0 {
            out.push_str(&o.item_sep);
        }
        if let Some(ind) = &o.indent {
            out.push('\n');
            out.push_str(&ind.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(ind) = &o.indent {
        out.push('\n');
        out.push_str(&ind.repeat(depth));
    }
    out.push(close);
    Ok(())
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && (c as u32) > 0x7F => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 or from 1e16.
pub(crate) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits as d.ddde±x.
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    let body = if exp < 0 {
        format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    } else if exp + 1 >= n {
        format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
    } else {
        let cut = (exp + 1) as usize;
        format!("{}.{}", &digits[..cut], &digits[cut..])
    };
    format!("{sign}{body}")
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;
