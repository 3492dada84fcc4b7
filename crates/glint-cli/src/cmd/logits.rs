//! `glint logits -m FILE --tokens 1,2,3 -o OUT.npy`: float32 `[n_tokens, n_vocab]` logits of one
//! prefill, for comparison against a reference implementation (transformers, llama.cpp).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};

use crate::npy;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(short, long)]
    pub model: PathBuf,
    /// Comma-separated token ids, placed at positions 0..n.
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    pub tokens: Vec<u32>,
    /// Output .npy path.
    #[arg(short, long)]
    pub output: PathBuf,
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.model)?;
    let mut model = Glm5::load(&gguf, CpuBackend::new(), args.tokens.len())?;
    let n_vocab = model.config().n_vocab;
    let logits = model.forward(&args.tokens, 0)?;
    let mut w = BufWriter::new(File::create(&args.output)?);
    npy::write_f32_header(&mut w, &[args.tokens.len(), n_vocab])?;
    npy::write_f32_data(&mut w, &logits)?;
    w.flush()?;
    tracing::info!(n_tokens = args.tokens.len(), n_vocab, "logits written");
    Ok(())
}
