//! `glint dequant FILE TENSOR -o OUT.npy`: one tensor as float32 `.npy`.
//!
//! The numpy shape is the GGUF `ne` list reversed (slowest dimension first), which is how gguf-py
//! reports tensor shapes, so the file compares directly with gguf-py's dequantization.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{write_error, Gguf, SafeOutput};

use crate::npy;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF file (first shard of a split model is enough).
    pub file: PathBuf,
    /// Tensor name, e.g. blk.0.attn_q_a.weight.
    pub tensor: String,
    /// Output .npy path.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Rows dequantized per write, bounding scratch memory for multi-gigabyte tensors.
const CHUNK_ELEMS: usize = 1 << 20;

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.file)?;
    let (info, bytes) = gguf.tensor_bytes(&args.tensor)?;
    let shape: Vec<usize> = info.dims.iter().rev().map(|&d| d as usize).collect();
    let row_len = info.row_len() as usize;
    let row_bytes = glint_quant::quantized_len(info.ty, row_len)?;
    let rows_per_chunk = (CHUNK_ELEMS / row_len.max(1)).max(1);

    let mut out = SafeOutput::create(&args.output, &super::input_paths(&gguf, &args.file))?;
    let werr = |e| write_error(&args.output, e);
    let mut w = BufWriter::new(out.file());
    npy::write_f32_header(&mut w, &shape).map_err(werr)?;
    let mut scratch = Vec::new();
    if row_bytes > 0 {
        for chunk in bytes.chunks(rows_per_chunk * row_bytes) {
            scratch.resize(chunk.len() / row_bytes * row_len, 0.0);
            glint_quant::dequantize(info.ty, chunk, &mut scratch)?;
            npy::write_f32_data(&mut w, &scratch).map_err(werr)?;
        }
    }
    w.flush().map_err(werr)?;
    drop(w);
    out.commit()?;
    tracing::info!(tensor = %info.name, ty = %info.ty, ?shape, "dequantized");
    Ok(())
}
