//! `glint tokenize -m FILE -p TEXT`: the token ids of TEXT, comma-separated on one line.

use std::path::PathBuf;

use glint_gguf::Gguf;
use glm5_model::tokenizer::Tokenizer;

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
    println!("{line}");
    Ok(())
}
