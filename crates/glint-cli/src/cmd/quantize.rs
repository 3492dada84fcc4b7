//! `glint quantize IN.gguf OUT.gguf TYPE`: requantize a model, in the manner of llama-quantize.
//!
//! Tensors are converted one at a time (rows in parallel) and streamed into the output, so peak
//! memory is one output tensor, not the model.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{write_error, GgmlType, Gguf, GgufWriter, SafeOutput, TensorSpec, Value};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

#[path = "quantize_plan.rs"]
mod plan;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF (first shard of a split model is enough).
    pub input: PathBuf,
    /// Output GGUF (single file).
    pub output: PathBuf,
    /// Target GGML type for the large weights, e.g. Q8_0, Q4_K, Q6_K, IQ4_NL.
    pub ty: String,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(
        "unknown type `{0}`; expected a GGML type name such as Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, F16"
    )]
    UnknownType(String),
    #[error("glint cannot quantize to {ty} (needed for {tensor}): no reference quantizer for it")]
    NoQuantizer { ty: GgmlType, tensor: String },
    #[error("cannot read tensor {tensor} of type {ty}: no dequantizer for it")]
    NoDequantizer { ty: GgmlType, tensor: String },
    #[error("tensor {tensor}: {source}")]
    Quant {
        tensor: String,
        source: glint_quant::QuantError,
    },
}

/// Elements converted per parallel work item: big enough to amortise scheduling, small enough
/// that the f32 scratch stays in cache-friendly territory.
const CHUNK_ELEMS: usize = 1 << 16;

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let target =
        GgmlType::from_name(&args.ty).ok_or_else(|| QuantizeError::UnknownType(args.ty.clone()))?;
    let gguf = Gguf::open(&args.input)?;
    // Checked before any work: the output must not be the input or one of its shards.
    let mut out = SafeOutput::create(&args.output, &super::input_paths(&gguf, &args.input))?;

    // Decide every tensor's type first so that an impossible request fails before writing.
    let mut specs = Vec::with_capacity(gguf.tensors().len());
    for t in gguf.tensors() {
        let choice = plan::choose(&t.name, t.ty, &t.dims, target);
        if choice.ty != t.ty {
            if glint_quant::traits(choice.ty).from_f32.is_none() {
                return Err(QuantizeError::NoQuantizer {
                    ty: choice.ty,
                    tensor: t.name.clone(),
                }
                .into());
            }
            if glint_quant::traits(t.ty).to_f32.is_none() {
                return Err(QuantizeError::NoDequantizer {
                    ty: t.ty,
                    tensor: t.name.clone(),
                }
                .into());
            }
        }
        if let Some(note) = &choice.note {
            if choice.ty != target && note.contains("row length") {
                tracing::info!(tensor = %t.name, "{note}");
            }
        }
        specs.push((
            TensorSpec {
                name: t.name.clone(),
                ty: choice.ty,
                dims: t.dims.clone(),
            },
            choice.note,
        ));
    }

    // Written under a temporary name and renamed at the end, so a failure (disk full, a bad
    // tensor) never leaves a truncated file that looks like a finished model; dropping `out`
    // on an error removes the temporary.
    write_output(&gguf, target, &specs, &mut out)?;
    out.commit()?;
    eprintln!(
        "wrote {} ({} tensors, target {target})",
        args.output.display(),
        specs.len()
    );
    Ok(())
}

/// Streams every tensor of `gguf`, converted per `specs`, into `out`.
fn write_output(
    gguf: &Gguf,
    target: GgmlType,
    specs: &[(TensorSpec, Option<String>)],
    out: &mut SafeOutput,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let metadata = output_metadata(gguf, target);
    let path = out.target().to_path_buf();
    let in_out = |e: glint_gguf::GgufError| match e {
        glint_gguf::GgufError::Io(io) => Box::new(write_error(&path, io)).into(),
        other => Box::<dyn std::error::Error + Send + Sync>::from(other),
    };
    let tensor_specs: Vec<TensorSpec> = specs.iter().map(|(s, _)| s.clone()).collect();
    let mut writer =
        GgufWriter::new(BufWriter::new(out.file()), &metadata, &tensor_specs).map_err(in_out)?;

    let total: u64 = gguf.tensors().iter().map(|t| t.n_elements()).sum();
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {percent:>3}% {msg} (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for (t, (spec, note)) in gguf.tensors().iter().zip(specs) {
        let shape = t
            .dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" x ");
        let why = note
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        // Through suspend so the line is printed (to stdout) whether or not the bar is drawn.
        pb.suspend(|| {
            println!(
                "{:<40} {:>7} -> {:<7} [{shape}]{why}",
                t.name, t.ty, spec.ty
            )
        });
        pb.set_message(t.name.clone());
        let src = gguf.tensor_data(t);
        let converted;
        let data: &[u8] = if spec.ty == t.ty {
            src
        } else {
            converted =
                convert(t.ty, spec.ty, t.row_len() as usize, src, &pb).map_err(|source| {
                    QuantizeError::Quant {
                        tensor: t.name.clone(),
                        source,
                    }
                })?;
            &converted
        };
        if spec.ty == t.ty {
            pb.inc(t.n_elements());
        }
        writer.write_tensor(&t.name, data).map_err(in_out)?;
    }
    writer
        .finish()
        .map_err(in_out)?
        .flush()
        .map_err(|e| write_error(&path, e))?;
    pb.finish_and_clear();
    Ok(())
}

/// Input metadata minus split bookkeeping, with the file type updated.
fn output_metadata(gguf: &Gguf, target: GgmlType) -> Vec<(String, Value)> {
    let mut md: Vec<(String, Value)> = gguf
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut set = |key: &str, v: Value| match md.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = v,
        None => md.push((key.to_string(), v)),
    };
    if let Some(ft) = plan::file_type(target) {
        set("general.file_type", Value::U32(ft));
    }
    if target.is_quantized() {
        set("general.quantization_version", Value::U32(2));
    }
    md
}

/// Re-encodes a whole tensor from `from` to `to`, row chunks in parallel.
fn convert(
    from: GgmlType,
    to: GgmlType,
    row_len: usize,
    src: &[u8],
    pb: &ProgressBar,
) -> Result<Vec<u8>, glint_quant::QuantError> {
    let src_row = glint_quant::quantized_len(from, row_len)?;
    let dst_row = glint_quant::quantized_len(to, row_len)?;
    if src_row == 0 || dst_row == 0 {
        // A zero-length dimension: nothing to convert (and chunking by 0 would panic).
        return Ok(Vec::new());
    }
    let n_rows = src.len() / src_row;
    let rows_per_chunk = (CHUNK_ELEMS / row_len.max(1)).max(1);
    let mut out = vec![0u8; n_rows * dst_row];
    out.par_chunks_mut(rows_per_chunk * dst_row)
        .zip(src.par_chunks(rows_per_chunk * src_row))
        .try_for_each_init(Vec::new, |scratch: &mut Vec<f32>, (dst, s)| {
            let rows = s.len() / src_row;
            scratch.resize(rows * row_len, 0.0);
            glint_quant::dequantize(from, s, scratch)?;
            glint_quant::quantize(to, scratch, dst)?;
            pb.inc((rows * row_len) as u64);
            Ok(())
        })?;
    Ok(out)
}
