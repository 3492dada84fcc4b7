//! Load on loopback: 1024 concurrent streaming requests on the tiny model, one client in ten
//! hanging up mid-stream, a KV pool far smaller than the running requests need together (so
//! the scheduler preempts and recomputes) and prompts sharing a long prefix (so the prefix
//! cache serves most prompt blocks). Every finished stream must be the text its prompt gives
//! alone (`glint_engine::generate`, one sequence, no server), no request may be lost or get
//! another's text, the process's memory stays bounded, and at the end every cache block is
//! free again. Correctness only: the timing figures are `examples/load.rs`'s
//! (docs/performance.md).

mod common;
#[path = "common/load.rs"]
mod load;

use common::*;
use glint_engine::scheduler::SchedulerConfig;
use glint_server::ranks::Parallel;
use load::{LoadSpec, Outcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_with_preemption_and_hangups_all_answer_as_alone() {
    let spec = LoadSpec {
        requests: 1024,
        distinct: 24,
        max_tokens: 16,
        disconnect_every: 10,
        rate: 0.0,
    };
    streams_answer_as_alone(spec, Parallel::default()).await;
}

/// `--tp 2`: two rank threads, each with its shard and its own pool, the follower replaying
/// the leader's scheduling — under the same preemption, prefix sharing and hang-ups, every
/// answer is still the single unsplit model's (`glint_engine::generate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensor_parallel_streams_with_preemption_and_hangups_answer_as_alone() {
    let spec = LoadSpec {
        requests: 192,
        distinct: 24,
        max_tokens: 16,
        disconnect_every: 10,
        rate: 0.0,
    };
    streams_answer_as_alone(spec, Parallel { tp: 2, ep: false }).await;
}

/// `--tp 2 --ep`: the routed experts split whole across the two ranks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expert_parallel_streams_answer_as_alone() {
    let spec = LoadSpec {
        requests: 96,
        distinct: 24,
        max_tokens: 16,
        disconnect_every: 10,
        rate: 0.0,
    };
    streams_answer_as_alone(spec, Parallel { tp: 2, ep: true }).await;
}

async fn streams_answer_as_alone(spec: LoadSpec, parallel: Parallel) {
    let want = load::alone(
        &model_path(),
        &load::prompts(spec.distinct),
        spec.max_tokens,
    );
    let longest = want.iter().map(|w| w.0).max().unwrap() + spec.max_tokens;
    let mut cfg = config();
    cfg.queue = spec.requests;
    cfg.parallel = parallel;
    cfg.scheduler = SchedulerConfig {
        max_tokens: 64,
        max_seqs: 32,
        // 32 running requests of up to `longest` tokens need far more than this (even with
        // their shared prefix blocks counted once).
        n_blocks: 40,
        block_size: 16,
        max_ctx: 128,
        cache: Default::default(),
        prefix_caching: true,
    };
    assert!(longest <= 128, "prompts fit max_ctx: {longest}");
    // Different prompts answer differently, so a stream given another request's tokens shows.
    let texts: std::collections::HashSet<&String> = want.iter().map(|w| &w.1).collect();
    assert_eq!(texts.len(), want.len(), "every prompt has its own answer");
    let s = start(cfg).await;
    let c = client();
    let (rss0, _) = load::rss_kib();
    let (out, wall) = load::run(&format!("http://{}", s.addr), spec).await;
    let (rss1, peak) = load::rss_kib();

    let (mut finished, mut hung_up) = (0, 0);
    for (i, o) in out.iter().enumerate() {
        let Outcome {
            prompt,
            status,
            text,
            ..
        } = o;
        assert_eq!(*status, 200, "request {i} refused");
        assert_eq!(*prompt, i % spec.distinct);
        let (_, alone) = &want[*prompt];
        if o.disconnected {
            hung_up += 1;
            assert!(
                alone.starts_with(text.as_str()),
                "request {i}: {text:?} is not a prefix of {alone:?}"
            );
        } else {
            assert!(o.complete, "request {i} lost: {o:?}");
            assert_eq!(o.finish_reason.as_deref(), Some("length"), "request {i}");
            assert_eq!(text, alone, "request {i} (prompt {prompt})");
            finished += 1;
        }
    }
    // Every client meant to hang up did, after its first text (every alone text has some).
    let meant = (0..spec.requests)
        .filter(|i| i % spec.disconnect_every == 3)
        .count();
    assert!(want.iter().all(|w| !w.1.is_empty()));
    assert_eq!(hung_up, meant);
    assert_eq!(finished + hung_up, spec.requests);

    // The engine lets go of everything: no request left, every block free (cached prefix
    // blocks are evictable, held by nobody).
    let h = wait_health(&c, &s, idle).await;
    // A hung-up stream is counted when the server next writes to it: poll until all are.
    let reason = |m: &std::collections::HashMap<String, f64>, r: &str| {
        m.get(&format!("glint_requests_finished_total{{reason=\"{r}\"}}"))
            .copied()
            .unwrap_or(0.0)
    };
    let mut m = Default::default();
    for _ in 0..400 {
        let text = c
            .get(url(&s, "/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        m = load::metrics(&text);
        let ended: f64 = ["length", "cancelled", "stop", "error"]
            .iter()
            .map(|r| reason(&m, r))
            .sum();
        if ended == spec.requests as f64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let reason = |r: &str| reason(&m, r);
    eprintln!(
        "prompt tokens {:?}; preemptions {}, prefix hits {} tokens, computed {} tokens, steps {}",
        want.iter().map(|w| w.0).collect::<Vec<_>>(),
        m["glint_preemptions_total"],
        m["glint_prefix_cache_hit_tokens_total"],
        m["glint_computed_tokens_total"],
        m["glint_engine_steps_total"],
    );
    assert_eq!(m["glint_cache_blocks_used"], 0.0, "{h}");
    assert_eq!(m["glint_cache_blocks_free"], m["glint_cache_blocks_total"]);
    assert_eq!(m["glint_running_sequences"], 0.0);
    assert_eq!(m["glint_queue_depth"], 0.0);
    assert!(
        m["glint_preemptions_total"] > 0.0,
        "the pool is small enough to preempt"
    );
    assert!(m["glint_prefix_cache_hit_tokens_total"] > 0.0);
    assert!(m["glint_prefix_cache_blocks"] > 0.0);
    // Every request reached the engine and ended there exactly once, none in error.
    assert_eq!(reason("error"), 0.0);
    assert_eq!(
        reason("length") + reason("cancelled") + reason("stop"),
        spec.requests as f64
    );
    assert!(reason("length") >= finished as f64);
    // Every request's prompt was counted once, every finished request's tokens.
    let prompt_tokens: usize = (0..spec.requests).map(|i| want[i % spec.distinct].0).sum();
    assert_eq!(m["glint_prompt_tokens_total"], prompt_tokens as f64);
    assert!(m["glint_generation_tokens_total"] >= (finished * spec.max_tokens) as f64);

    // Memory: what 1024 requests in flight cost beyond the server at rest (the model is 2 MB;
    // the pool 40 blocks) must stay small: a leak per request or an unbounded queue would
    // show here.
    let grown = peak.saturating_sub(rss0) / 1024;
    eprintln!(
        "{} requests in {:.1} s: {finished} finished, {hung_up} hung up; RSS {} -> {} MiB \
         (peak {} MiB); preemptions {}, prefix hits {} tokens, computed {} tokens",
        spec.requests,
        wall.as_secs_f64(),
        rss0 / 1024,
        rss1 / 1024,
        peak / 1024,
        m["glint_preemptions_total"],
        m["glint_prefix_cache_hit_tokens_total"],
        m["glint_computed_tokens_total"],
    );
    assert!(grown < 512, "memory grew by {grown} MiB under load");
    s.shutdown().await.unwrap();
}
