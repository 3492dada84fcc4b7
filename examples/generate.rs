//! Generate text with a GLM-5 GGUF, the way an application would use glint.
//!
//! ```text
//! cargo run --release --example generate                      # tiny fixture model
//! cargo run --release --example generate -- --model GLM-5-Q4_K.gguf -p "Hello" -n 64 --chat
//! cargo run --release --features cuda --example generate -- --device cuda
//! ```
//! Text streams to stdout; prompt and generation speed go to stderr.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use glint::engine::chat::{ChatMessage, ChatTemplate};
use glint::engine::generate::{generate, GenerateParams};
use glint::engine::sampler::SamplerConfig;
use glint::engine::tokenizer::Tokenizer;
use glint::gguf::Gguf;
use glint::model::{Backend, Config, CpuBackend, Glm5};

#[derive(Parser, Debug)]
#[command(about = "Stream a completion from a GLM-5 GGUF")]
struct Args {
    /// GGUF model (default: the tiny test model in fixtures/).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(short, long, default_value = "The capital of France is")]
    prompt: String,
    #[arg(short = 'n', long, default_value_t = 32)]
    n_predict: usize,
    /// Render the prompt as a user turn with the model's chat template.
    #[arg(long)]
    chat: bool,
    /// 0 = greedy (reproducible); > 0 samples with top-k 40, top-p 0.95, min-p 0.05.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 0x5EED)]
    seed: u64,
    /// `cpu`, or `cuda` (GPU 0; needs `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = args.model.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/glm5/glm5-tiny-f32.gguf")
    });
    let gguf = Gguf::open(&path)?;
    let tok = Tokenizer::from_metadata(gguf.metadata())?;

    let text = match (args.chat, tok.chat_template()) {
        (true, Some(src)) => {
            let name = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).map(str::to_string);
            ChatTemplate::new(src, name(tok.bos()), name(tok.eos()))?
                .render(&[ChatMessage::new("user", args.prompt.clone())], true)?
        }
        (true, None) => return Err(format!("{} has no chat template", path.display()).into()),
        (false, _) => args.prompt.clone(),
    };
    let prompt = if args.chat {
        tok.encode(&text)?
    } else {
        tok.encode_prompt(&text)?
    };
    // Size the cache for this run only; a file without `context_length` (0) sets no upper bound.
    let wanted = prompt.len().saturating_add(args.n_predict);
    let ctx = match Config::from_gguf(&gguf)?.context_length {
        0 => wanted,
        file_ctx => wanted.min(file_ctx),
    };
    match args.device.as_str() {
        "cpu" => stream(
            Glm5::load(&gguf, CpuBackend::new(), ctx)?,
            &args,
            &tok,
            &prompt,
        ),
        #[cfg(feature = "cuda")]
        "cuda" => stream(
            Glm5::load(&gguf, glint::cuda::CudaBackend::new(0)?, ctx)?,
            &args,
            &tok,
            &prompt,
        ),
        other => Err(format!(
            "--device {other}: expected cpu{}",
            if cfg!(feature = "cuda") {
                " or cuda"
            } else {
                " (build with --features cuda for cuda)"
            }
        )
        .into()),
    }
}

fn stream<B: Backend>(
    mut model: Glm5<'_, B>,
    args: &Args,
    tok: &Tokenizer,
    prompt: &[u32],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let params = GenerateParams {
        max_new_tokens: args.n_predict,
        sampler: SamplerConfig {
            temperature: args.temp,
            seed: args.seed,
            ..SamplerConfig::default()
        },
        stop_at_eog: true,
        print_special: false,
    };

    let mut out = std::io::stdout().lock();
    if !args.chat {
        write!(out, "{}", args.prompt)?;
    }
    let g = generate(&mut model, tok, prompt, &params, |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    writeln!(out)?;
    eprintln!(
        "{} on {}: prompt {} tokens at {:.1} tok/s, generated {} tokens at {:.1} tok/s ({:?})",
        args.model
            .as_deref()
            .unwrap_or(std::path::Path::new("tiny fixture"))
            .display(),
        args.device,
        g.prompt_tokens,
        g.prompt_tokens_per_s(),
        g.tokens.len(),
        g.decode_tokens_per_s(),
        g.stop
    );
    Ok(())
}
