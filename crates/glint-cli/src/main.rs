//! The `glint` command-line tool.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod npy;
mod printable;

#[derive(Parser, Debug)]
#[command(name = "glint", version, about = "Run and inspect GLM-5 GGUF models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a GGUF file's header, metadata and tensor table (--json for machines).
    Inspect(cmd::inspect::Args),
    /// Print the token ids of a text.
    Tokenize(cmd::tokenize::Args),
    /// Write the logits of one prefill as a float32 .npy.
    Logits(cmd::logits::Args),
    /// Stream generated text.
    Generate(cmd::generate::Args),
    /// Write one tensor, dequantized, as a float32 .npy.
    Dequant(cmd::dequant::Args),
    /// Requantize a model (llama-quantize rules).
    Quantize(cmd::quantize::Args),
    /// Write a GGUF with GLM-5's real geometry and random weights (benchmarks).
    Synth(cmd::synth::Args),
    /// Prompt and generation speed (llama-bench's tests) against the memory roofline.
    Bench(cmd::bench::Args),
    /// OpenAI-compatible HTTP server with continuous batching (docs/serving.md).
    Serve(cmd::serve::Args),
}

type CmdResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn run(cli: Cli) -> CmdResult {
    match cli.command {
        Command::Inspect(a) => cmd::inspect::run(&a),
        Command::Tokenize(a) => cmd::tokenize::run(&a),
        Command::Logits(a) => cmd::logits::run(&a),
        Command::Generate(a) => cmd::generate::run(&a),
        Command::Dequant(a) => cmd::dequant::run(&a),
        Command::Quantize(a) => cmd::quantize::run(&a),
        Command::Synth(a) => cmd::synth::run(&a),
        Command::Bench(a) => cmd::bench::run(&a),
        Command::Serve(a) => cmd::serve::run(&a),
    }
}

/// Whether `e` (or anything it wraps) is a write to a closed pipe.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // `glint tokenize ... | head -c1` closes stdout early: that is the reader's choice,
        // not a failure, so exit quietly as `cat` does.
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        // Messages can quote names read from the file: escape control characters in them.
        Err(e) => {
            eprintln!("error: {}", printable::printable(&e.to_string()));
            let mut src = e.source();
            while let Some(s) = src {
                eprintln!("  caused by: {}", printable::printable(&s.to_string()));
                src = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
