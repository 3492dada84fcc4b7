//! Throughput of the batched step: N sequences decoding together, one token each per step,
//! through one shared paged cache — what a server's engine loop does.
//!
//! ```text
//! cargo run --release --example batch_decode                       # tiny model, 1, 8, 64 seqs
//! cargo run --release --example batch_decode -- --model M.gguf --seqs 1,16 -n 32
//! ```
//! Each sequence gets its own prompt (a window of one token stream, `--prompt-tokens` long);
//! all prompts are prefilled together in steps of `--ubatch` tokens, then every step decodes one
//! greedy token per sequence. Prints prefill and decode tokens per second for each N.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use glint::gguf::Gguf;
use glint::model::{BatchPlan, CpuBackend, Logits, Model, SeqCache, StepLimits};

#[derive(Parser, Debug)]
#[command(about = "Decode throughput with N concurrent sequences")]
struct Args {
    /// GGUF model (default: the tiny test model in fixtures/).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Concurrent sequences, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    seqs: Vec<usize>,
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Decode steps (tokens per sequence).
    #[arg(short = 'n', long, default_value_t = 64)]
    n_predict: usize,
    /// Tokens per prefill step.
    #[arg(long, default_value_t = 512)]
    ubatch: usize,
    #[arg(long, default_value_t = 64)]
    block_size: usize,
}

fn main() {
    let args = Args::parse();
    let path = args.model.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/glm5/glm5-tiny-f32.gguf")
    });
    let gguf = Gguf::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let model = Model::load(&gguf, CpuBackend::new()).expect("load");
    let nv = model.config().n_vocab as u32;
    println!(
        "| sequences | prefill tok/s | decode tok/s (all sequences) | decode tok/s per sequence |"
    );
    println!("|---|---|---|---|");
    for &n in &args.seqs {
        let (pre, dec) = run(&model, &args, n, nv);
        println!("| {n} | {pre:.0} | {dec:.0} | {:.0} |", dec / n as f64);
    }
}

/// (prefill tok/s, decode tok/s) with `n` sequences.
fn run(model: &Model<'_, CpuBackend>, a: &Args, n: usize, nv: u32) -> (f64, f64) {
    let ctx = a.prompt_tokens + a.n_predict;
    let bs = a.block_size;
    let per_seq = ctx.div_ceil(bs);
    let limits = StepLimits {
        max_tokens: a.ubatch.max(n),
        max_seqs: n,
        max_blocks: per_seq,
    };
    let mut pool = model
        .new_pool(n * per_seq, bs, Default::default())
        .expect("pool");
    let mut st = model
        .new_step_state(limits, bs, n.max(a.ubatch))
        .expect("step state");
    // Prompts: windows of one deterministic token stream, a different one per sequence.
    let prompts: Vec<Vec<u32>> = (0..n)
        .map(|s| {
            (0..a.prompt_tokens)
                .map(|i| ((s * 7919 + i * 104729) as u32) % nv)
                .collect()
        })
        .collect();
    let mut seqs: Vec<SeqCache> = (0..n).map(|_| SeqCache::default()).collect();
    for s in &mut seqs {
        pool.reserve(s, ctx).expect("reserve");
    }
    let mut logits = vec![0f32; n.max(a.ubatch) * nv as usize];
    let mut next = vec![0u32; n];
    // Prefill: fill steps of up to `ubatch` tokens across the sequences in order.
    let t0 = Instant::now();
    let mut cursor = vec![0usize; n];
    while cursor.iter().any(|&c| c < a.prompt_tokens) {
        let mut plan = BatchPlan::new(bs);
        let mut room = a.ubatch;
        let mut parts = Vec::new();
        for s in 0..n {
            let m = (a.prompt_tokens - cursor[s]).min(room);
            if m == 0 {
                continue;
            }
            let mut view = seqs[s].clone();
            view.len = cursor[s];
            let last = cursor[s] + m == a.prompt_tokens;
            let want = if last { Logits::Last } else { Logits::None };
            plan.push(
                &view,
                &prompts[s][cursor[s]..cursor[s] + m],
                cursor[s],
                want,
            )
            .expect("plan");
            parts.push((s, m, last));
            room -= m;
            if room == 0 {
                break;
            }
        }
        let rows = plan.logit_rows().len();
        model
            .step(&plan, &mut pool, &mut st, &mut logits[..rows * nv as usize])
            .expect("prefill step");
        let mut row = 0;
        for (s, m, last) in parts {
            cursor[s] += m;
            seqs[s].len = cursor[s];
            if last {
                next[s] = argmax(&logits[row * nv as usize..(row + 1) * nv as usize]);
                row += 1;
            }
        }
    }
    let prefill = (n * a.prompt_tokens) as f64 / t0.elapsed().as_secs_f64();
    // Decode: one token of every sequence per step.
    let t1 = Instant::now();
    for _ in 0..a.n_predict {
        let mut plan = BatchPlan::new(bs);
        for s in 0..n {
            let pos = seqs[s].len;
            plan.push(&seqs[s], &[next[s]], pos, Logits::Last)
                .expect("plan");
        }
        model
            .step(&plan, &mut pool, &mut st, &mut logits[..n * nv as usize])
            .expect("decode step");
        for s in 0..n {
            seqs[s].len += 1;
            next[s] = argmax(&logits[s * nv as usize..(s + 1) * nv as usize]);
        }
    }
    let decode = (n * a.n_predict) as f64 / t1.elapsed().as_secs_f64();
    (prefill, decode)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}
