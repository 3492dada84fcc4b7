//! `glint bench -m FILE [-p 512] [-n 128] [-d 0,4096] [-b 1,8,64] [-r 3] [-o md|json]`:
//! llama-bench's tests — prompt processing (`pp`) and token generation (`tg`), at a context
//! depth — plus generation with several sequences per step, each as mean ± sd over
//! repetitions, next to the memory roofline measured in the same process: the weight bytes a
//! decode step reads, a streaming-read probe of this machine's bandwidth, and the fraction of
//! it the step achieves. With `--tp N [--ep]` every rank runs the same tests on its shard, in
//! step through the collectives; rank 0 times and prints. The roofline is then the whole
//! model's bytes against N probes on a device (each GPU reads its own memory) or one probe on
//! the CPU (the rank threads share it).

use std::path::PathBuf;
use std::time::Instant;

use glint_gguf::Gguf;
use glm5_model::{
    Backend, BatchPlan, CacheType, Glm5, KvPool, Logits, Model, ModelError, SeqCache,
    SessionOptions, StepLimits, StepState,
};

use super::session::{cache_types, with_backend, Device};
use rayon::prelude::*;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(short, long)]
    pub model: PathBuf,
    /// Prompt tokens of the `pp` test (0 skips it).
    #[arg(short = 'p', long, default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the `tg` test (0 skips it).
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_gen: usize,
    /// Context depths the tests run at, comma-separated.
    #[arg(short = 'd', long, value_delimiter = ',', default_value = "0")]
    pub depth: Vec<usize>,
    /// Sequences decoding together in the `tg` test, comma-separated.
    #[arg(short = 'b', long, value_delimiter = ',', default_value = "1")]
    pub batch: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: usize,
    /// Output format: md (a table) or json.
    #[arg(short = 'o', long, default_value = "md")]
    pub output: String,
    /// Tokens per prefill step.
    #[arg(long, default_value_t = 512)]
    pub ubatch: usize,
    /// `cpu`, or `cuda` / `cuda:N` (a build with `--features cuda`).
    #[arg(long, default_value = "cpu", value_parser = super::session::parse_device)]
    pub device: Device,
    /// KV cache element type, as the other commands' (llama-bench's `-ctk`/`-ctv`): f32 (the
    /// default), f16, bf16, fp8 or q8.
    #[arg(long, default_value = "f32", value_parser = super::session::parse_cache_type)]
    pub cache_type: CacheType,
    /// Element type of the indexer's keys alone: f32, f16, fp8 or q8 (default: the cache
    /// type's, f16 for bf16).
    #[arg(long, value_parser = super::session::parse_index_cache_type)]
    pub cache_type_index: Option<CacheType>,
    #[command(flatten)]
    pub tp: super::tp::TpArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("-o {0}: expected md or json")]
    Format(String),
    #[error("-r 0: at least one repetition")]
    NoReps,
    #[error("-b {0}: sequences per step must be at least 1")]
    Batch(usize),
    #[error("depth {depth} + {n} tokens exceed the model's context length {max}")]
    Context { depth: usize, n: usize, max: usize },
}

/// One result row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub test: String,
    pub depth: usize,
    pub batch: usize,
    pub tokens_per_s_mean: f64,
    pub tokens_per_s_sd: f64,
    /// Weight bytes a decode step reads per generated token (tg rows).
    pub bytes_per_token: Option<u64>,
    pub achieved_gb_s: Option<f64>,
    pub probe_gb_s: f64,
    pub roofline_fraction: Option<f64>,
    /// Ranks the model was split over (`--tp`).
    pub tp: usize,
    /// The KV cache's element types, latent rows / indexer keys (`--cache-type`).
    pub cache: String,
}

pub fn run(args: &Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let json = match args.output.as_str() {
        "md" => false,
        "json" => true,
        other => return Err(BenchError::Format(other.into()).into()),
    };
    if args.reps == 0 {
        return Err(BenchError::NoReps.into());
    }
    if let Some(&b) = args.batch.iter().find(|&&b| b == 0) {
        return Err(BenchError::Batch(b).into());
    }
    let gguf = Gguf::open(&args.model)?;
    if args.tp.active(args.device)? {
        let body = Ranks {
            gguf: &gguf,
            args,
            json,
        };
        // The ranks come as one-sequence sessions; their own cache stays unused (16 tokens),
        // the tests make theirs.
        let mut opts = SessionOptions::new(16);
        opts.ubatch = 16;
        super::tp::run_ranks(&gguf, &args.tp, args.device, opts, &body)?;
        return Ok(());
    }
    with_backend!(args.device, be => {
        let model = Model::load(&gguf, be)?;
        bench(&model, &gguf, args, json, Rank { index: 0, of: 1 })
    })
}

/// Which rank of how many runs this bench.
#[derive(Clone, Copy)]
struct Rank {
    index: usize,
    of: usize,
}

struct Ranks<'r> {
    gguf: &'r Gguf,
    args: &'r Args,
    json: bool,
}

impl super::tp::RankBody<()> for Ranks<'_> {
    fn run<B: Backend>(
        &self,
        rank: usize,
        model: Glm5<'_, B>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let r = Rank {
            index: rank,
            of: self.args.tp.tp,
        };
        bench(model.model(), self.gguf, self.args, self.json, r)
    }
}

fn bench<B: Backend>(
    model: &Model<'_, B>,
    gguf: &Gguf,
    args: &Args,
    json: bool,
    rank: Rank,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let max = model.config().context_length;
    for &d in &args.depth {
        let n = args.n_prompt.max(args.n_gen);
        if max > 0 && d + n > max {
            return Err(BenchError::Context { depth: d, n, max }.into());
        }
    }
    // The memory the weights live in: the device's own where it has one (one per rank), else
    // this machine's, shared by the rank threads. Rank 0 measures; the others go ahead and wait
    // for it at the first collective.
    let probe = if rank.index > 0 {
        0.0
    } else {
        match model.backend().bandwidth_probe() {
            Some(p) => p? * rank.of as f64,
            None => bandwidth_probe(),
        }
    };
    if rank.index == 0 {
        tracing::info!(
            gb_s = probe,
            backend = model.backend().name(),
            "memory bandwidth probe"
        );
    }
    let mut rows = Vec::new();
    for &depth in &args.depth {
        if args.n_prompt > 0 {
            let t = repeat(args.reps, || pp(model, args, depth))?;
            rows.push(row(
                format!("pp{}", args.n_prompt),
                depth,
                1,
                &t,
                None,
                probe,
                rank.of,
            ));
        }
        if args.n_gen > 0 {
            for &b in &args.batch {
                let t = repeat(args.reps, || tg(model, args, depth, b))?;
                let bytes = decode_bytes_per_token(gguf, model.config(), b);
                rows.push(row(
                    format!("tg{}", args.n_gen),
                    depth,
                    b,
                    &t,
                    Some(bytes),
                    probe,
                    rank.of,
                ));
            }
        }
    }
    if rank.index > 0 {
        return Ok(());
    }
    let types = cache_types(args.cache_type, args.cache_type_index);
    for r in &mut rows {
        r.cache = format!("{}/{}", types.latent, types.index);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_md(args, gguf, model.backend().name(), &rows);
    }
    Ok(())
}

fn repeat(
    reps: usize,
    mut f: impl FnMut() -> Result<f64, ModelError>,
) -> Result<Vec<f64>, ModelError> {
    (0..reps).map(|_| f()).collect()
}

fn row(
    test: String,
    depth: usize,
    batch: usize,
    tps: &[f64],
    bytes: Option<u64>,
    probe: f64,
    tp: usize,
) -> Row {
    let n = tps.len() as f64;
    let mean = tps.iter().sum::<f64>() / n;
    let sd = (tps.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let achieved = bytes.map(|b| b as f64 * mean / 1e9);
    Row {
        test,
        depth,
        batch,
        tokens_per_s_mean: mean,
        tokens_per_s_sd: sd,
        bytes_per_token: bytes,
        achieved_gb_s: achieved,
        probe_gb_s: probe,
        roofline_fraction: achieved.map(|a| a / probe),
        tp,
        cache: String::new(),
    }
}

/// A pool, step buffers and one reserved sequence per `n_seqs`, for one test.
struct Setup<B: Backend> {
    pool: KvPool<B>,
    st: StepState<B>,
    seqs: Vec<SeqCache>,
}

/// A fresh [`Setup`] for `n_seqs` sequences of up to `ctx` tokens, with the cache types `a` asks for.
fn setup<B: Backend>(
    model: &Model<'_, B>,
    a: &Args,
    n_seqs: usize,
    ctx: usize,
    max_tokens: usize,
) -> Result<Setup<B>, ModelError> {
    let bs = 64;
    let per = ctx.div_ceil(bs).max(1);
    let limits = StepLimits {
        max_tokens,
        max_seqs: n_seqs,
        max_blocks: per,
    };
    let types = cache_types(a.cache_type, a.cache_type_index);
    let mut pool = model.new_pool(n_seqs * per, bs, types)?;
    let st = model.new_step_state(limits, bs, max_tokens)?;
    let mut seqs = Vec::new();
    for _ in 0..n_seqs {
        let mut s = SeqCache::default();
        pool.reserve(&mut s, ctx)?;
        seqs.push(s);
    }
    Ok(Setup { pool, st, seqs })
}

/// Token ids for sequence `s`: a deterministic stream, as llama-bench uses random tokens.
fn tokens(nv: usize, s: usize, from: usize, n: usize) -> Vec<u32> {
    (from..from + n)
        .map(|i| ((s * 7919 + i * 104729 + 17) % nv) as u32)
        .collect()
}

/// Processes `n` tokens of every sequence in `seqs` from their current length, in steps of at
/// most `ubatch` tokens; logits only for the last token of each.
fn fill<B: Backend>(
    model: &Model<'_, B>,
    e: &mut Setup<B>,
    n: usize,
    ubatch: usize,
) -> Result<(), ModelError> {
    let nv = model.config().n_vocab;
    for (s, seq) in e.seqs.iter_mut().enumerate() {
        let mut done = 0;
        while done < n {
            let m = ubatch.min(n - done);
            let start = seq.len;
            let mut plan = BatchPlan::new(e.pool.block_size());
            let last = if done + m == n {
                Logits::Last
            } else {
                Logits::None
            };
            plan.push(seq, &tokens(nv, s, start, m), start, last)?;
            let mut logits = vec![0f32; plan.logit_rows().len() * nv];
            model.step(&plan, &mut e.pool, &mut e.st, &mut logits)?;
            seq.len += m;
            done += m;
        }
    }
    Ok(())
}

/// Prompt tokens per second for `n_prompt` tokens after `depth` tokens of context.
fn pp<B: Backend>(model: &Model<'_, B>, a: &Args, depth: usize) -> Result<f64, ModelError> {
    let ub = a.ubatch.min(a.n_prompt.max(1)).max(1);
    let mut e = setup(model, a, 1, depth + a.n_prompt, ub)?;
    // Untimed warm-up over the same positions (as llama-bench's warm-up run): it touches the
    // fresh step buffers, the pool pages and the kernels' scratch, so the timed run measures
    // the prefill rather than first-touch page faults. Cutting the sequence back to `depth`
    // keeps the context's cache and overwrites the prompt's, exactly as a fresh prefill would.
    fill(model, &mut e, depth + a.n_prompt, ub)?;
    e.seqs[0].len = depth;
    let t = Instant::now();
    fill(model, &mut e, a.n_prompt, ub)?;
    Ok(a.n_prompt as f64 / t.elapsed().as_secs_f64())
}

/// Generated tokens per second (all sequences together) for `n_gen` steps of `b` sequences,
/// each after `depth` tokens of context.
fn tg<B: Backend>(
    model: &Model<'_, B>,
    a: &Args,
    depth: usize,
    b: usize,
) -> Result<f64, ModelError> {
    let ub = a.ubatch.max(b);
    let mut e = setup(model, a, b, depth + a.n_gen + 2, ub)?;
    fill(model, &mut e, depth.max(1), a.ubatch)?;
    let nv = model.config().n_vocab;
    let mut logits = vec![0f32; b * nv];
    // One untimed step first: it touches the fresh step buffers and the pool pages.
    let mut t = Instant::now();
    for i in 0..=a.n_gen {
        if i == 1 {
            t = Instant::now();
        }
        let mut plan = BatchPlan::new(e.pool.block_size());
        for (s, seq) in e.seqs.iter().enumerate() {
            plan.push(seq, &tokens(nv, s, seq.len, 1), seq.len, Logits::Last)?;
        }
        model.step(&plan, &mut e.pool, &mut e.st, &mut logits)?;
        e.seqs.iter_mut().for_each(|s| s.len += 1);
    }
    Ok((b * a.n_gen) as f64 / t.elapsed().as_secs_f64())
}

/// Weight bytes one decode step of `b` sequences reads, per generated token: every tensor
/// except the routed experts and the embedding once per step, `b` embedding rows, and of each
/// routed-expert tensor the slices the step can select: `min(E, b·k)` of `E` (exact for b = 1,
/// where the k choices are distinct; an upper bound above).
pub fn decode_bytes_per_token(gguf: &Gguf, c: &glm5_model::Config, b: usize) -> u64 {
    let used = (b * c.n_expert_used).min(c.n_expert.max(1)) as u64;
    let mut total = 0u64;
    for t in gguf.tensors() {
        let name = t.name.as_str();
        let layer: Option<usize> = name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse().ok());
        if layer.is_some_and(|l| l >= c.n_layer) {
            continue; // the MTP block is not run
        }
        total += if name == "token_embd.weight" {
            if gguf.tensor("output.weight").is_some() {
                t.n_bytes / t.dims[1] * b as u64
            } else {
                t.n_bytes // tied: the head reads all of it
            }
        } else if name.contains("_exps.") {
            t.n_bytes / c.n_expert as u64 * used
        } else {
            t.n_bytes
        };
    }
    total / b as u64
}

/// Streaming-read bandwidth in GB/s: a u64 sum over 1 GiB split across the threads, best of
/// three.
fn bandwidth_probe() -> f64 {
    let words = (1usize << 30) / 8;
    let buf: Vec<u64> = (0..words as u64)
        .into_par_iter()
        .map(|i| i ^ 0x5555)
        .collect();
    let threads = rayon::current_num_threads();
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let s = buf
            .par_chunks(words.div_ceil(threads))
            .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
            .reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(s);
        best = best.max((words * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

fn print_md(a: &Args, gguf: &Gguf, backend: &str, rows: &[Row]) {
    let size: u64 = gguf.tensors().iter().map(|t| t.n_bytes).sum();
    println!(
        "model {} ({:.2} GiB), {backend} backend{}, {} host threads, memory probe {:.1} GB/s",
        a.model.display(),
        size as f64 / (1u64 << 30) as f64,
        match (a.tp.tp, a.tp.ep) {
            (1, _) => String::new(),
            (n, false) => format!(", --tp {n}"),
            (n, true) => format!(", --tp {n} --ep"),
        },
        rayon::current_num_threads(),
        rows.first().map_or(0.0, |r| r.probe_gb_s)
    );
    let types = cache_types(a.cache_type, a.cache_type_index);
    println!(
        "KV cache: latent rows {}, indexer keys {}",
        types.latent, types.index
    );
    println!();
    println!("| test | depth | seqs | t/s | weight MB per token | GB/s | % of probe |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("—".to_string(), f);
        println!(
            "| {} | {} | {} | {:.2} ± {:.2} | {} | {} | {} |",
            r.test,
            r.depth,
            r.batch,
            r.tokens_per_s_mean,
            r.tokens_per_s_sd,
            opt(r.bytes_per_token.map(|b| b as f64), &|b| format!(
                "{:.1}",
                b / 1e6
            )),
            opt(r.achieved_gb_s, &|g| format!("{g:.2}")),
            opt(r.roofline_fraction, &|f| format!("{:.0}%", f * 100.0)),
        );
    }
}
