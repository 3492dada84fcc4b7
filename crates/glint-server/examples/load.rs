//! Load figures for docs/performance.md: an in-process `glint serve` on the tiny fixture model
//! (CPU), `requests` concurrent streaming completions over loopback, one client in
//! `disconnect_every` hanging up after its first text, a pool small enough to preempt.
//! Prints throughput and TTFT / TPOT percentiles as clients see them, the engine's counters,
//! and checks every finished text against the prompt run alone.
//!
//! ```sh
//! cargo run --release -p glint-server --example load -- requests=1024 max_seqs=32 n_blocks=40
//! ```
//! Options (`key=value`): requests (1024), distinct (24), max_tokens (16), disconnect_every
//! (10), rate (requests/s evenly spaced; 0 = all at once), max_seqs (32), n_blocks (40),
//! block_size (16), ubatch (64), prefix_caching (true), model
//! (fixtures/glm5/glm5-tiny-f32.gguf).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/load.rs"]
mod load;

use std::path::PathBuf;

use glint_engine::scheduler::SchedulerConfig;

fn main() {
    let mut opt = std::collections::HashMap::new();
    for a in std::env::args().skip(1) {
        let (k, v) = a
            .split_once('=')
            .unwrap_or_else(|| panic!("options are key=value: {a}"));
        opt.insert(k.to_string(), v.to_string());
    }
    let num = |k: &str, d: usize| {
        opt.get(k)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{k}={v}: not a number"))
            })
            .unwrap_or(d)
    };
    let spec = load::LoadSpec {
        requests: num("requests", 1024),
        distinct: num("distinct", 24),
        max_tokens: num("max_tokens", 16),
        disconnect_every: num("disconnect_every", 10),
        rate: opt
            .get("rate")
            .map(|v| v.parse().expect("rate: requests per second"))
            .unwrap_or(0.0),
    };
    let model = opt
        .get("model")
        .map(PathBuf::from)
        .unwrap_or_else(common::model_path);
    let scheduler = SchedulerConfig {
        max_tokens: num("ubatch", 64),
        max_seqs: num("max_seqs", 32),
        n_blocks: num("n_blocks", 40),
        block_size: num("block_size", 16),
        max_ctx: 128,
        cache: Default::default(),
        prefix_caching: opt.get("prefix_caching").is_none_or(|v| v != "false"),
    };
    let want = load::alone(&model, &load::prompts(spec.distinct), spec.max_tokens);
    // The tests' server (loopback, port 0), with this run's model, scheduler and queue.
    let mut cfg = common::config();
    cfg.model = model;
    cfg.scheduler = scheduler;
    cfg.queue = spec.requests;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let s = glint_server::start(cfg).await.expect("server starts");
        let base = format!("http://{}", s.addr);
        let (rss0, _) = load::rss_kib();
        let (out, wall) = load::run(&base, spec).await;
        let (_, peak) = load::rss_kib();
        let wrong = out
            .iter()
            .filter(|o| {
                let alone = &want[o.prompt].1;
                if o.disconnected {
                    !alone.starts_with(&o.text)
                } else {
                    !o.complete || o.text != *alone
                }
            })
            .count();
        let done: Vec<_> = out.iter().filter(|o| !o.disconnected).collect();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let ttft = load::percentiles(done.iter().filter_map(|o| o.ttft).map(ms).collect());
        let tpot = load::percentiles(
            done.iter()
                .filter_map(|o| o.tpot(spec.max_tokens))
                .map(ms)
                .collect(),
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let m = load::metrics(&text);
        let generated = m["glint_generation_tokens_total"];
        println!(
            "{} requests (rate {}/s, 0 = burst; {} hung up), {} tokens each, max_seqs {}, {} blocks of {}, prefix caching {}",
            spec.requests,
            spec.rate,
            out.len() - done.len(),
            spec.max_tokens,
            scheduler.max_seqs,
            scheduler.n_blocks,
            scheduler.block_size,
            scheduler.prefix_caching
        );
        println!(
            "wall {:.2} s: {:.0} generated tok/s, {:.0} requests/s; {} wrong or lost",
            wall.as_secs_f64(),
            generated / wall.as_secs_f64(),
            spec.requests as f64 / wall.as_secs_f64(),
            wrong
        );
        println!(
            "TTFT ms p50 {:.1} p90 {:.1} p99 {:.1}; TPOT ms p50 {:.2} p90 {:.2} p99 {:.2}",
            ttft[0], ttft[1], ttft[2], tpot[0], tpot[1], tpot[2]
        );
        println!(
            "engine: {} steps, {} tokens computed, {} prompt tokens from the prefix cache, {} preemptions; RSS {} -> peak {} MiB",
            m["glint_engine_steps_total"],
            m["glint_computed_tokens_total"],
            m["glint_prefix_cache_hit_tokens_total"],
            m["glint_preemptions_total"],
            rss0 / 1024,
            peak / 1024
        );
        s.shutdown().await.unwrap();
        assert_eq!(wrong, 0, "some answers differ from running alone");
    });
}
