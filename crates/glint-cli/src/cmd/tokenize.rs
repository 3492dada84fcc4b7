//! `glint tokenize -m FILE -p TEXT`: the token ids of TEXT, comma-separated on one line.

use std::io::Write;
use std::path::PathBuf;

use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF model whose tokenizer to use.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Text to tokenize; special tokens written in it (e.g. `<|user|>`) become single ids.
    #[arg(short, long)]
    pub prompt: String,
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.model)?;
    let tok = Tokenizer::from_metadata(gguf.metadata())?;
    let ids = tok.encode(&args.prompt)?;
    let line = ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // Not println!, which panics when stdout is closed; main treats a broken pipe as a quiet
    // exit.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}
