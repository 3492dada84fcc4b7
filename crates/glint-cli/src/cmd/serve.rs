//! `glint serve -m FILE`: the OpenAI-compatible HTTP server (crates/glint-server,
//! docs/serving.md). Runs until SIGINT/SIGTERM, then lets running requests finish.

use std::path::PathBuf;

use glint_engine::scheduler::SchedulerConfig;
use glint_gguf::Gguf;
use glint_server::ServerConfig;
use glm5_model::{Config, SessionOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(short, long)]
    pub model: PathBuf,
    /// Address to listen on. Keep the default (loopback) unless a reverse proxy or firewall
    /// stands in front: see docs/serving.md.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences decoded together in one step (continuous batching).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_seqs: u32,
    /// Longest prompt + completion of one request, in tokens (default: the model's context
    /// length, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Tokens the shared KV pool holds across all requests (default: --ctx x --max-seqs).
    /// A request is admitted when the pool can hold its prompt; when the pool runs out, the
    /// youngest running request is preempted (and recomputed later).
    #[arg(long)]
    pub kv_tokens: Option<usize>,
    /// Do not keep full cache blocks for later requests with the same prompt prefix.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Requests waiting beyond the running ones; one more gets a 503 with Retry-After.
    #[arg(long, default_value_t = ServerConfig::DEFAULT_QUEUE)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1/* (/health stays open). The environment
    /// variable GLINT_API_KEY is read when the flag is absent (keeps the key out of `ps`).
    #[arg(long)]
    pub api_key: Option<String>,
    /// The model id clients name in requests and /v1/models lists (default: the file stem).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = ServerConfig::DEFAULT_MAX_BODY)]
    pub max_body_bytes: usize,
    /// Seconds a client may take to send a request's line and headers, and then its body
    /// (a slower body: 408 and the connection closed; slower headers: the connection closed).
    #[arg(long, default_value_t = ServerConfig::DEFAULT_BODY_TIMEOUT.as_secs_f64())]
    pub body_timeout: f64,
    /// Tensor parallelism over N ranks, each with its shard of the weights and its own KV
    /// pool (CPU: rank threads of this process; `--device cuda:D`: GPUs D..D+N of this node,
    /// through NCCL). Every rank replays rank 0's scheduling, so answers equal --tp 1's.
    #[arg(long, default_value_t = 1, value_parser = super::tp::parse_tp)]
    pub tp: usize,
    /// With --tp: split the routed experts whole across the ranks (expert parallelism).
    #[arg(long)]
    pub ep: bool,
    #[command(flatten)]
    pub session: super::session::SessionArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--ctx {ctx} exceeds the model's context length {max} ({path})")]
    CtxTooLong {
        ctx: usize,
        max: usize,
        path: PathBuf,
    },
    #[error("--ctx must be at least 2 (a prompt token and a completion token)")]
    CtxTooSmall,
    #[error("--body-timeout {0}: must be a positive number of seconds")]
    BodyTimeout(f64),
    #[error("--kv-tokens {kv} is smaller than --ctx {ctx}: no request of full length could run")]
    PoolTooSmall { kv: usize, ctx: usize },
    #[error("--ctx x --max-seqs overflows; pass --kv-tokens")]
    Overflow,
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Sizes are checked against the file and the memory before anything is allocated.
    let gguf = Gguf::open(&args.model)?;
    let cfg = Config::from_gguf(&gguf)?;
    drop(gguf);
    let max = cfg.context_length;
    let ctx = match args.ctx {
        Some(c) if max > 0 && c > max => {
            return Err(ServeError::CtxTooLong {
                ctx: c,
                max,
                path: args.model.clone(),
            }
            .into())
        }
        Some(c) => c,
        None if max > 0 => max.min(4096),
        None => 4096,
    };
    if ctx < 2 {
        return Err(ServeError::CtxTooSmall.into());
    }
    let max_seqs = args.max_seqs as usize;
    let kv = match args.kv_tokens {
        Some(k) => k,
        None => ctx.checked_mul(max_seqs).ok_or(ServeError::Overflow)?,
    };
    if kv < ctx {
        return Err(ServeError::PoolTooSmall { kv, ctx }.into());
    }
    if args.ep && args.tp < 2 {
        return Err(super::tp::TpCliError::EpAlone.into());
    }
    // On the CPU every rank thread holds a whole pool in RAM (the latent cache is not split
    // by heads).
    let (pools, flag) = match args.session.device {
        super::session::Device::Cpu if args.tp > 1 => (args.tp, "--kv-tokens x --tp"),
        _ => (1, "--kv-tokens"),
    };
    super::memory::check_kv_cache(&cfg, kv.saturating_mul(pools), flag, &args.model)?;
    let opts = args.session.options(ctx);
    let block_size = SessionOptions::DEFAULT_BLOCK_SIZE;
    let server = ServerConfig {
        model: args.model.clone(),
        host: args.host.clone(),
        port: args.port,
        model_id: args.served_model_name.clone(),
        api_key: args.api_key.clone().or_else(|| {
            std::env::var("GLINT_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        }),
        scheduler: SchedulerConfig {
            max_tokens: opts.ubatch.max(max_seqs),
            max_seqs,
            n_blocks: kv.div_ceil(block_size),
            block_size,
            max_ctx: ctx,
            cache: opts.cache,
            prefix_caching: !args.no_prefix_caching,
        },
        queue: args.queue,
        max_body_bytes: args.max_body_bytes,
        body_timeout: std::time::Duration::try_from_secs_f64(args.body_timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or(ServeError::BodyTimeout(args.body_timeout))?,
        device: match args.session.device {
            super::session::Device::Cpu => glint_server::Device::Cpu,
            super::session::Device::Cuda(n) => glint_server::Device::Cuda(n),
        },
        parallel: glint_server::ranks::Parallel {
            tp: args.tp,
            ep: args.ep,
        },
    };
    let tp_note = match (args.tp, args.ep) {
        (1, _) => String::new(),
        (n, false) => format!(", --tp {n}"),
        (n, true) => format!(", --tp {n} --ep"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("glint-http")
        .build()?;
    rt.block_on(async move {
        let signals = glint_server::StopSignals::install()?;
        let s = glint_server::start(server).await?;
        eprintln!(
            "glint serve: http://{} (model `{}`, {} sequences, {} tokens per request, {} in the pool{})",
            s.addr, s.state.model_id, max_seqs, ctx, kv, tp_note
        );
        s.run_until_signal(signals).await?;
        Ok::<_, glint_server::ServerError>(())
    })?;
    Ok(())
}
