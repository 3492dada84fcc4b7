//! `glint generate -m FILE -p TEXT -n N`: stream a continuation (or a chat reply with `--chat`)
//! and report prompt and generation speed on stderr.

use std::io::Write;
use std::path::PathBuf;

use glint_engine::chat::ChatTemplate;
use glint_engine::generate::{generate_while, GenerateError, GenerateParams};
use glint_engine::sampler::{SampleError, SamplerConfig};
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use glm5_model::{Backend, Config, Glm5};

use super::session::with_backend;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(short, long)]
    pub model: PathBuf,
    #[arg(short, long)]
    pub prompt: String,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_predict: usize,
    /// Sampling temperature; 0 (or below) is greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true, value_parser = super::values::finite)]
    pub temp: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus mass, 0 to 1 (1 = off).
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true, value_parser = super::values::unit_interval)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the top probability, 0 to 1 (0 = off).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true, value_parser = super::values::unit_interval)]
    pub min_p: f32,
    /// Penalty above 0 for tokens in the last --repeat-last-n tokens (1 = off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = super::values::positive)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
    /// Wrap the prompt as a user turn with the GGUF's chat template.
    #[arg(long)]
    pub chat: bool,
    /// With --chat: pass `enable_thinking = false` to the template (GLM answers without a
    /// reasoning block).
    #[arg(long, requires = "chat")]
    pub no_think: bool,
    /// Context length to allocate (default: prompt + n_predict, capped by the model's).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Keep generating past end-of-generation tokens (fixed-length benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print control tokens (`<|user|>`, ...) as text, like llama.cpp's `--special`.
    #[arg(long)]
    pub special: bool,
    #[command(flatten)]
    pub session: super::session::SessionArgs,
    #[command(flatten)]
    pub tp: super::tp::TpArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateCliError {
    #[error("--chat needs tokenizer.chat_template in the GGUF, and {0} has none")]
    NoTemplate(PathBuf),
    #[error("--ctx {ctx} exceeds the model's context length {max} ({path})")]
    CtxTooLong {
        ctx: usize,
        max: usize,
        path: PathBuf,
    },
    #[error("{0} has no context_length key; pass --ctx")]
    NoContextLength(PathBuf),
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let gguf = Gguf::open(&args.model)?;
    let tok = Tokenizer::from_metadata(gguf.metadata())?;
    let text = if args.chat {
        let src = tok
            .chat_template()
            .ok_or_else(|| GenerateCliError::NoTemplate(args.model.clone()))?;
        let name = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).map(str::to_string);
        let tmpl = ChatTemplate::new(src, name(tok.bos()), name(tok.eos()))?;
        let mut ctx = serde_json::json!({
            "messages": [{"role": "user", "content": args.prompt}],
            "add_generation_prompt": true,
        });
        if args.no_think {
            ctx["enable_thinking"] = false.into();
        }
        tmpl.render_json(&ctx)?
    } else {
        args.prompt.clone()
    };
    tracing::debug!(text = %text, "prompt");
    let prompt = if args.chat {
        tok.encode(&text)?
    } else {
        tok.encode_prompt(&text)?
    };
    let params = GenerateParams {
        max_new_tokens: args.n_predict,
        sampler: SamplerConfig {
            temperature: args.temp,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repeat_penalty: args.repeat_penalty,
            repeat_last_n: args.repeat_last_n,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: args.seed,
        },
        stop_at_eog: !args.ignore_eos,
        print_special: args.special,
    };
    // The KV cache is allocated for the whole context up front, so an oversized --ctx would be
    // a huge allocation rather than a clear error; 0 means the file does not say.
    let cfg = Config::from_gguf(&gguf)?;
    let max_ctx = cfg.context_length;
    let ctx = match (args.ctx, max_ctx) {
        (Some(ctx), max) if max > 0 && ctx > max => {
            return Err(GenerateCliError::CtxTooLong {
                ctx,
                max,
                path: args.model.clone(),
            }
            .into())
        }
        (Some(ctx), _) => ctx,
        (None, 0) => return Err(GenerateCliError::NoContextLength(args.model.clone()).into()),
        (None, max) => prompt.len().saturating_add(args.n_predict).min(max),
    };
    if prompt.len() > ctx {
        // Fail before anything is printed.
        return Err(GenerateError::PromptTooLong {
            prompt: prompt.len(),
            ctx_len: ctx,
        }
        .into());
    }
    super::memory::check_kv_cache(&cfg, ctx, "--ctx", &args.model)?;
    let opts = args.session.options(ctx);
    if args.tp.active(args.session.device)? {
        let body = Ranks {
            args,
            tok: &tok,
            prompt: &prompt,
            params: &params,
        };
        super::tp::run_ranks(&gguf, &args.tp, args.session.device, opts, &body)?;
        return Ok(());
    }
    with_backend!(args.session.device, be => {
        let model = Glm5::load_with(&gguf, be, opts)?;
        stream(model, args, &tok, &prompt, &params)
    })
}

/// Every rank samples the same token from the same logits with the same seed; rank 0 prints,
/// the others only keep in step.
struct Ranks<'r> {
    args: &'r Args,
    tok: &'r Tokenizer,
    prompt: &'r [u32],
    params: &'r GenerateParams,
}

impl super::tp::RankBody<()> for Ranks<'_> {
    fn run<B: Backend>(
        &self,
        rank: usize,
        mut model: Glm5<'_, B>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if rank == 0 {
            return stream(model, self.args, self.tok, self.prompt, self.params);
        }
        generate_while(&mut model, self.tok, self.prompt, self.params, |_| true)?;
        Ok(())
    }
}

/// Prints the prompt (plain mode), then the continuation as it is sampled, then the speeds.
fn stream<B: Backend>(
    mut model: Glm5<'_, B>,
    args: &Args,
    tok: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut out = std::io::stdout().lock();
    if !args.chat {
        write!(out, "{}", args.prompt)?;
    }
    out.flush()?;
    // A failed write (stdout closed by `| head`, a full disk) stops generation at once; the
    // error is returned after the statistics (main exits quietly on a broken pipe).
    let mut write_err: Option<std::io::Error> = None;
    let g = generate_while(&mut model, tok, prompt, params, |piece| {
        match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                write_err = Some(e);
                false
            }
        }
    });
    let g = match g {
        Err(GenerateError::Sample(SampleError::NonFiniteLogit { token, value })) => {
            // Never sampled from; say where it came from (rerunning the prompt).
            let _ = writeln!(out);
            return Err(super::non_finite::NonFiniteLogits {
                pos: model.cache_len().saturating_sub(1),
                token,
                value,
                origin: super::non_finite::locate(&mut model, prompt),
            }
            .into());
        }
        other => other?,
    };
    if write_err.is_none() {
        if let Err(e) = writeln!(out).and_then(|()| out.flush()) {
            write_err = Some(e);
        }
    }
    eprintln!(
        "prompt: {} tokens in {:.2} s ({:.2} tok/s) | generation: {} tokens, {:.2} tok/s | stop: {:?}",
        g.prompt_tokens,
        g.prompt_time.as_secs_f64(),
        g.prompt_tokens_per_s(),
        g.tokens.len(),
        g.decode_tokens_per_s(),
        g.stop
    );
    if let Some(e) = write_err {
        return Err(e.into());
    }
    Ok(())
}
