//! `glint inspect FILE [--json]`: header, metadata and tensor table of a GGUF model.
//!
//! The human format follows gguf-py's `gguf_dump` (so the two can be read side by side) plus a
//! byte-size column. `--json` prints one object, `{"version", "metadata", "tensors"}`, with
//! arrays in full, type names as gguf-py spells them, offsets relative to each shard's data
//! section, and a `"shard"` index per tensor for split models. JSON has no NaN or infinity, so
//! non-finite floats are the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{Gguf, Value};
use serde_json::{json, Map, Value as Json};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF file (any shard of a split model opens all of them).
    pub file: PathBuf,
    /// Print one JSON object instead of the human-readable dump.
    #[arg(long)]
    pub json: bool,
}

/// Elements shown per array in the human dump, as in `gguf_dump`.
const SHOWN_ELEMENTS: usize = 6;
/// Characters shown per string in the human dump, as in `gguf_dump`.
const SHOWN_CHARS: usize = 60;

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.file)?;
    let mut out = BufWriter::new(io::stdout().lock());
    let written = if args.json {
        write_json(&gguf, &mut out)
    } else {
        write_human(&gguf, &mut out)
    };
    match written.and_then(|()| out.flush()) {
        // `glint inspect big.gguf | head` closes the pipe early; that is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn write_json(g: &Gguf, out: &mut impl Write) -> io::Result<()> {
    let metadata: Map<String, Json> = g
        .metadata()
        .iter()
        .map(|(k, v)| (k.to_string(), value_json(v)))
        .collect();
    let split = g.n_shards() > 1;
    let tensors: Vec<Json> = g
        .tensors()
        .iter()
        .map(|t| {
            let mut o = json!({
                "name": t.name,
                "type": t.ty.name(),
                "shape": t.dims,
                "offset": t.offset,
            });
            if split {
                o["shard"] = json!(t.shard);
            }
            o
        })
        .collect();
    let doc = json!({ "version": g.version(), "metadata": metadata, "tensors": tensors });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

fn value_json(v: &Value) -> Json {
    let float = |f: f64| match f {
        f if f.is_nan() => json!("NaN"),
        f if f == f64::INFINITY => json!("Infinity"),
        f if f == f64::NEG_INFINITY => json!("-Infinity"),
        f => json!(f),
    };
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => float(f64::from(*x)),
        Value::F64(x) => float(*x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => Json::Array(a.values.iter().map(value_json).collect()),
    }
}

fn write_human(g: &Gguf, out: &mut impl Write) -> io::Result<()> {
    let paths = g.shard_paths();
    if paths.len() == 1 {
        writeln!(out, "* File: {}", paths[0].display())?;
    } else {
        writeln!(out, "* Split model, {} shards (by split.no):", paths.len())?;
        for (i, p) in paths.iter().enumerate() {
            writeln!(out, "  {i:5}: {}", p.display())?;
        }
    }
    if let Some(h) = g.shard_header(0) {
        writeln!(
            out,
            "* GGUF v{}, little endian, alignment {}, data section at byte {}",
            h.version, h.alignment, h.data_offset
        )?;
    }
    let md = g.metadata();
    writeln!(out, "* Dumping {} key/value pair(s)", md.len())?;
    for (n, (key, value)) in md.iter().enumerate() {
        let count = value.as_array().map_or(1, |a| a.values.len());
        let ty = value.type_name();
        writeln!(
            out,
            "  {:5}: {ty:10} | {count:8} | {key} = {}",
            n + 1,
            short(value)
        )?;
    }
    let tensors = g.tensors();
    writeln!(out, "* Dumping {} tensor(s)", tensors.len())?;
    for (n, t) in tensors.iter().enumerate() {
        let dims: Vec<String> = (0..4)
            .map(|i| format!("{:5}", t.dims.get(i).copied().unwrap_or(1)))
            .collect();
        let shard = if paths.len() > 1 {
            format!("shard {} | ", t.shard)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {:5}: {:10} | {} | {:7} | {:12} B | {shard}{}",
            n + 1,
            t.n_elements(),
            dims.join(", "),
            t.ty.name(),
            t.n_bytes,
            t.name
        )?;
    }
    Ok(())
}

/// A value for the human dump: long strings cut to [`SHOWN_CHARS`], arrays to their first
/// [`SHOWN_ELEMENTS`] elements (recursively), so a 150k-entry vocabulary stays one line.
fn short(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > SHOWN_CHARS => {
            let cut: String = s.chars().take(SHOWN_CHARS - 3).collect();
            format!("{:?}...", cut)
        }
        Value::Array(a) => {
            let mut parts: Vec<String> = a.values.iter().take(SHOWN_ELEMENTS).map(short).collect();
            if a.values.len() > SHOWN_ELEMENTS {
                parts.push("...".to_string());
            }
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}
