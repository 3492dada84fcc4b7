//! `glint inspect FILE [--json]`: header, metadata and tensor table of a GGUF model.
//!
//! The human format follows gguf-py's `gguf_dump` (so the two can be read side by side) plus a
//! byte-size column. `--json` prints one object, `{"version", "metadata", "tensors"}`, with
//! arrays in full, type names as gguf-py spells them, offsets relative to each shard's data
//! section, and a `"shard"` index per tensor for split models. JSON has no NaN or infinity, so
//! non-finite floats are the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{Array, ArrayData, Gguf, Value};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::json;

use crate::printable::printable;

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

/// Streams the document through serde rather than building a `serde_json::Value` tree first:
/// the tree costs ~80 bytes per array element, so a 50 MB file of byte arrays took 8 GB.
fn write_json(g: &Gguf, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &JsonDoc(g))?;
    writeln!(out)
}

struct JsonDoc<'a>(&'a Gguf);

impl Serialize for JsonDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let g = self.0;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("version", &g.version())?;
        m.serialize_entry("metadata", &JsonMetadata(g))?;
        let split = g.n_shards() > 1;
        let tensors = g.tensors().iter().map(|t| {
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
        });
        m.serialize_entry("tensors", &Seq(std::cell::RefCell::new(Some(tensors))))?;
        m.end()
    }
}

struct JsonMetadata<'a>(&'a Gguf);

impl Serialize for JsonMetadata<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let md = self.0.metadata();
        let mut m = s.serialize_map(Some(md.len()))?;
        for (k, v) in md.iter() {
            m.serialize_entry(k, &JsonValue(v))?;
        }
        m.end()
    }
}

/// A one-shot iterator serialized as a JSON array without collecting it.
struct Seq<I>(std::cell::RefCell<Option<I>>);

impl<I: Iterator<Item = T>, T: Serialize> Serialize for Seq<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.borrow_mut().take() {
            Some(it) => s.collect_seq(it),
            None => s.collect_seq(std::iter::empty::<T>()),
        }
    }
}

struct JsonValue<'a>(&'a Value);

impl Serialize for JsonValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::U8(x) => s.serialize_u8(*x),
            Value::I8(x) => s.serialize_i8(*x),
            Value::U16(x) => s.serialize_u16(*x),
            Value::I16(x) => s.serialize_i16(*x),
            Value::U32(x) => s.serialize_u32(*x),
            Value::I32(x) => s.serialize_i32(*x),
            Value::U64(x) => s.serialize_u64(*x),
            Value::I64(x) => s.serialize_i64(*x),
            Value::F32(x) => JsonFloat(f64::from(*x)).serialize(s),
            Value::F64(x) => JsonFloat(*x).serialize(s),
            Value::Bool(x) => s.serialize_bool(*x),
            Value::String(x) => s.serialize_str(x),
            Value::Array(a) => JsonArray(a).serialize(s),
        }
    }
}

struct JsonArray<'a>(&'a Array);

impl Serialize for JsonArray<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.data() {
            ArrayData::U8(v) => s.collect_seq(v),
            ArrayData::I8(v) => s.collect_seq(v),
            ArrayData::U16(v) => s.collect_seq(v),
            ArrayData::I16(v) => s.collect_seq(v),
            ArrayData::U32(v) => s.collect_seq(v),
            ArrayData::I32(v) => s.collect_seq(v),
            ArrayData::U64(v) => s.collect_seq(v),
            ArrayData::I64(v) => s.collect_seq(v),
            ArrayData::F32(v) => s.collect_seq(v.iter().map(|&x| JsonFloat(f64::from(x)))),
            ArrayData::F64(v) => s.collect_seq(v.iter().map(|&x| JsonFloat(x))),
            ArrayData::Bool(v) => s.collect_seq(v),
            ArrayData::String(v) => s.collect_seq(v),
            ArrayData::Array(v) => s.collect_seq(v.iter().map(JsonArray)),
        }
    }
}

/// JSON has no NaN or infinity: those become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
struct JsonFloat(f64);

impl Serialize for JsonFloat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            f if f.is_nan() => s.serialize_str("NaN"),
            f if f == f64::INFINITY => s.serialize_str("Infinity"),
            f if f == f64::NEG_INFINITY => s.serialize_str("-Infinity"),
            f => s.serialize_f64(f),
        }
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
        let count = value.as_array().map_or(1, |a| a.len());
        let ty = value.type_name();
        writeln!(
            out,
            "  {:5}: {ty:10} | {count:8} | {} = {}",
            n + 1,
            printable(key),
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
            printable(&t.name)
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
            let mut parts: Vec<String> = (0..a.len().min(SHOWN_ELEMENTS))
                .filter_map(|i| a.get(i))
                .map(|v| short(&v))
                .collect();
            if a.len() > SHOWN_ELEMENTS {
                parts.push("...".to_string());
            }
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}
