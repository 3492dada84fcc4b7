//! `glint logits -m FILE --tokens 1,2,3 -o OUT.npy`: float32 `[n_tokens, n_vocab]` logits of one
//! prefill, for comparison against a reference implementation (transformers, llama.cpp).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use glint_gguf::{write_error, Gguf, SafeOutput};
use glm5_model::{Backend, Config, Glm5};

use super::session::with_backend;

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
    #[command(flatten)]
    pub session: super::session::SessionArgs,
    #[command(flatten)]
    pub tp: super::tp::TpArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum LogitsError {
    #[error("--tokens: {n} tokens exceed the context length {max} of {path} (allowed: 1..={max})")]
    TooManyTokens { n: usize, max: usize, path: PathBuf },
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.model)?;
    // Checked before the forward pass, so a bad path fails in milliseconds.
    let mut out = SafeOutput::create(&args.output, &super::input_paths(&gguf, &args.model))?;
    let cfg = Config::from_gguf(&gguf)?;
    let max = cfg.context_length;
    if max > 0 && args.tokens.len() > max {
        return Err(LogitsError::TooManyTokens {
            n: args.tokens.len(),
            max,
            path: args.model.clone(),
        }
        .into());
    }
    super::memory::check_kv_cache(&cfg, args.tokens.len(), "--tokens", &args.model)?;
    let opts = args.session.options(args.tokens.len());
    let n_vocab = cfg.n_vocab;
    let logits = if args.tp.active(args.session.device)? {
        let body = Ranks {
            tokens: &args.tokens,
            n_vocab,
        };
        let (rank, logits) =
            super::tp::run_ranks(&gguf, &args.tp, args.session.device, opts, &body)?;
        if rank != 0 {
            // One process of a multi-process run: rank 0 writes.
            return Ok(());
        }
        logits
    } else {
        with_backend!(args.session.device, be => {
        let mut model = Glm5::load_with(&gguf, be, opts)?;
        let logits = model.forward(&args.tokens, 0)?;
        super::non_finite::check(&mut model, &args.tokens, &logits, n_vocab)?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(logits)
        })?
    };
    let werr = |e| write_error(&args.output, e);
    let mut w = BufWriter::new(out.file());
    npy::write_f32_header(&mut w, &[args.tokens.len(), n_vocab]).map_err(werr)?;
    npy::write_f32_data(&mut w, &logits).map_err(werr)?;
    w.flush().map_err(werr)?;
    drop(w);
    out.commit()?;
    tracing::info!(n_tokens = args.tokens.len(), n_vocab, "logits written");
    Ok(())
}

/// Every rank runs the prompt; all hold the same logits, so every rank takes the same branch
/// in the non-finite check (locating a non-finite value runs the model again: all must).
struct Ranks<'r> {
    tokens: &'r [u32],
    n_vocab: usize,
}

impl super::tp::RankBody<Vec<f32>> for Ranks<'_> {
    fn run<B: Backend>(
        &self,
        _rank: usize,
        mut model: Glm5<'_, B>,
    ) -> Result<Vec<f32>, Box<dyn std::error::Error + Send + Sync>> {
        let logits = model.forward(self.tokens, 0)?;
        super::non_finite::check(&mut model, self.tokens, &logits, self.n_vocab)?;
        Ok(logits)
    }
}
