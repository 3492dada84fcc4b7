//! The continuous-batching scheduler against transformers: the fixture prompts submitted
//! together with other requests into a small pool (so some wait for blocks) and a step budget
//! smaller than their prompts (so prompts are chunked next to other requests' decode tokens)
//! each produce transformers' greedy continuation (reference.json `greedy_new_tokens`).

// The fixture helpers of the model crate's tests (one copy for both crates).
#[path = "../../glm5-model/tests/common/mod.rs"]
mod common;

use std::collections::HashMap;

use common::{case_gguf, ids_of, reference};
use glint_engine::sampler::SamplerConfig;
use glint_engine::scheduler::{Event, Finish, Request, Scheduler, SchedulerConfig};
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Model};

#[test]
fn crowded_scheduler_reproduces_transformers_greedy_tokens() {
    let r = reference();
    let names = ["short", "chat", "medium"];
    let g = Gguf::open(case_gguf(&r, common::case(&r, "medium"))).unwrap();
    let model = Model::load(&g, CpuBackend::new()).unwrap();
    let cfg = SchedulerConfig {
        max_tokens: 24,
        max_seqs: 3,
        n_blocks: 20,
        block_size: 16,
        max_ctx: 256,
        cache: Default::default(),
        prefix_caching: true,
    };
    let mut s = Scheduler::new(&model, cfg).unwrap();
    let mut want: HashMap<u64, (Vec<u32>, Finish)> = HashMap::new();
    for (id, name) in names.iter().enumerate() {
        let c = common::case(&r, name);
        let greedy = ids_of(&c["greedy_new_tokens"]);
        s.submit(Request {
            id: id as u64,
            prompt: ids_of(&c["ids"]),
            max_new_tokens: greedy.len(),
            sampler: SamplerConfig::greedy(),
            stop_tokens: vec![],
        })
        .unwrap();
        want.insert(id as u64, (greedy, Finish::MaxTokens));
    }
    // The chat prompt again, stopping at the 6th token of its continuation: it must end there.
    let chat = common::case(&r, "chat");
    let greedy = ids_of(&chat["greedy_new_tokens"]);
    let stop = greedy[5];
    let first = greedy.iter().position(|&t| t == stop).unwrap();
    s.submit(Request {
        id: 9,
        prompt: ids_of(&chat["ids"]),
        max_new_tokens: greedy.len(),
        sampler: SamplerConfig::greedy(),
        stop_tokens: vec![stop],
    })
    .unwrap();
    want.insert(9, (greedy[..first].to_vec(), Finish::Stop(stop)));

    let mut got: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut finished: HashMap<u64, Finish> = HashMap::new();
    let mut steps = 0;
    let mut max_running_tokens = 0;
    while s.pending() > 0 {
        let events = s.step().unwrap();
        max_running_tokens = max_running_tokens.max(events.len());
        for e in events {
            match e {
                Event::Token { id, token } => got.entry(id).or_default().push(token),
                Event::Finished { id, reason } => {
                    assert!(finished.insert(id, reason).is_none(), "{id} finished twice");
                }
            }
        }
        steps += 1;
        assert!(steps < 2000, "scheduler does not finish");
    }
    for (id, (tokens, reason)) in &want {
        assert_eq!(
            got.get(id).cloned().unwrap_or_default(),
            *tokens,
            "request {id}"
        );
        assert_eq!(finished[id], *reason, "request {id}");
    }
    eprintln!("4 requests in {steps} steps, up to {max_running_tokens} events per step");
    // A request larger than the pool is refused up front.
    let e = s
        .submit(Request {
            id: 99,
            prompt: vec![1; 300],
            max_new_tokens: 1,
            sampler: SamplerConfig::greedy(),
            stop_tokens: vec![],
        })
        .unwrap_err();
    assert!(e.to_string().contains("exceed the pool"), "{e}");
}

#[test]
fn cancel_frees_blocks_and_leaves_the_others_untouched() {
    let r = reference();
    let c = common::case(&r, "short");
    let g = Gguf::open(case_gguf(&r, c)).unwrap();
    let model = Model::load(&g, CpuBackend::new()).unwrap();
    let cfg = SchedulerConfig {
        max_tokens: 8,
        max_seqs: 2,
        n_blocks: 16,
        block_size: 8,
        max_ctx: 64,
        cache: Default::default(),
        prefix_caching: true,
    };
    let mut s = Scheduler::new(&model, cfg).unwrap();
    let total = s.free_blocks();
    assert_eq!(total, s.total_blocks());
    let greedy = ids_of(&c["greedy_new_tokens"]);
    let req = |id| Request {
        id,
        prompt: ids_of(&c["ids"]),
        max_new_tokens: greedy.len(),
        sampler: SamplerConfig::greedy(),
        stop_tokens: vec![],
    };
    // 0 and 1 run; 2 is queued behind the sequence limit (and is cancelled there).
    s.submit(req(0)).unwrap();
    s.submit(req(1)).unwrap();
    s.submit(req(2)).unwrap();
    let mut got: HashMap<u64, Vec<u32>> = HashMap::new();
    for _ in 0..3 {
        for e in s.step().unwrap() {
            if let Event::Token { id, token } = e {
                got.entry(id).or_default().push(token);
            }
        }
    }
    assert_eq!(s.running(), 2);
    assert_eq!(s.waiting(), 1);
    assert!(s.cancel(2).unwrap());
    assert!(s.cancel(1).unwrap());
    assert!(!s.cancel(1).unwrap(), "a cancelled request is gone");
    assert!(!s.cancel(77).unwrap());
    assert_eq!(s.pending(), 1);
    while s.pending() > 0 {
        for e in s.step().unwrap() {
            match e {
                Event::Token { id, token } => got.entry(id).or_default().push(token),
                Event::Finished { id, .. } => assert_eq!(id, 0),
            }
        }
    }
    assert_eq!(got[&0], greedy);
    assert!(got[&1].len() < greedy.len());
    assert!(!got.contains_key(&2));
    assert_eq!(s.free_blocks(), total, "every block is back in the pool");
    all_blocks_free(&mut s);
}

/// Evicts the prefix cache and checks that no block has an owner left.
fn all_blocks_free<B: glm5_model::Backend>(s: &mut Scheduler<'_, '_, B>) {
    assert_eq!(s.running() + s.waiting(), 0);
    s.clear_prefix_cache().unwrap();
    assert_eq!(s.cached_blocks(), 0);
    let pool = s.pool();
    let n = pool.blocks.n_blocks();
    assert_eq!(pool.blocks.n_free(), n, "every block is on the free list");
    for b in 0..n as u32 {
        assert_eq!(pool.blocks.ref_count(b), 0, "block {b} still has owners");
    }
}

/// Runs `s` until it is idle; returns each request's tokens and how it finished.
fn drain<B: glm5_model::Backend>(
    s: &mut Scheduler<'_, '_, B>,
) -> (HashMap<u64, Vec<u32>>, HashMap<u64, Finish>) {
    let mut got: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut finished: HashMap<u64, Finish> = HashMap::new();
    let mut steps = 0;
    while s.pending() > 0 {
        for e in s.step().unwrap() {
            match e {
                Event::Token { id, token } => {
                    assert!(!finished.contains_key(&id), "{id}: a token after the end");
                    got.entry(id).or_default().push(token)
                }
                Event::Finished { id, reason } => {
                    assert!(finished.insert(id, reason).is_none(), "{id} finished twice");
                }
            }
        }
        steps += 1;
        assert!(steps < 5000, "scheduler does not finish");
    }
    (got, finished)
}

fn sampled(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        repeat_penalty: 1.2,
        repeat_last_n: 16,
        seed,
        ..SamplerConfig::default()
    }
}

#[test]
fn preempted_requests_give_the_answers_they_give_alone() {
    let r = reference();
    let g = Gguf::open(case_gguf(&r, common::case(&r, "medium"))).unwrap();
    let model = Model::load(&g, CpuBackend::new()).unwrap();
    // Greedy fixture prompts (transformers' continuations are the reference) and sampled
    // requests (the reference: each alone in a roomy scheduler), on a pool far smaller than
    // what they need together: medium alone takes 23 of its 28 blocks.
    let mut reqs = Vec::new();
    let mut want_greedy = HashMap::new();
    for (i, name) in ["medium", "chat", "short", "chat"].iter().enumerate() {
        let c = common::case(&r, name);
        let greedy = ids_of(&c["greedy_new_tokens"]);
        let id = i as u64;
        want_greedy.insert(id, greedy.clone());
        reqs.push(Request {
            id,
            prompt: ids_of(&c["ids"]),
            max_new_tokens: greedy.len(),
            sampler: SamplerConfig::greedy(),
            stop_tokens: vec![],
        });
    }
    for (i, name) in ["chat", "short", "medium"].iter().enumerate() {
        let c = common::case(&r, name);
        reqs.push(Request {
            id: 10 + i as u64,
            prompt: ids_of(&c["ids"]),
            max_new_tokens: 32,
            sampler: sampled(7 + i as u64),
            stop_tokens: vec![],
        });
    }
    let roomy = SchedulerConfig {
        max_tokens: 64,
        max_seqs: 1,
        n_blocks: 64,
        block_size: 8,
        max_ctx: 256,
        cache: Default::default(),
        prefix_caching: false,
    };
    let mut alone = HashMap::new();
    for q in &reqs[4..] {
        let mut s = Scheduler::new(&model, roomy).unwrap();
        s.submit(q.clone()).unwrap();
        let (got, _) = drain(&mut s);
        alone.insert(q.id, got[&q.id].clone());
    }
    for (id, t) in &want_greedy {
        alone.insert(*id, t.clone());
    }
    for prefix_caching in [false, true] {
        let cfg = SchedulerConfig {
            max_tokens: 24,
            max_seqs: 7,
            n_blocks: 28,
            prefix_caching,
            ..roomy
        };
        let mut s = Scheduler::new(&model, cfg).unwrap();
        for q in &reqs {
            s.submit(q.clone()).unwrap();
        }
        let (got, finished) = drain(&mut s);
        for q in &reqs {
            assert_eq!(
                got[&q.id], alone[&q.id],
                "request {} (prefix caching {prefix_caching})",
                q.id
            );
            assert_eq!(finished[&q.id], Finish::MaxTokens);
        }
        let c = s.counters();
        eprintln!("prefix caching {prefix_caching}: {c:?}");
        assert!(c.preemptions > 0, "the pool is small enough to preempt");
        let prompts: usize = reqs.iter().map(|q| q.prompt.len() + 31).sum();
        assert!(
            c.computed_tokens as usize > prompts - c.prefix_hit_tokens as usize,
            "preempted tokens were computed again"
        );
        if !prefix_caching {
            assert_eq!(c.prefix_hit_tokens, 0);
        }
        assert_eq!(s.free_blocks(), s.total_blocks());
        // One request that could never fit this pool alone (224 tokens, under max_ctx) is
        // refused up front, not left to wait or preempt forever.
        let e = s
            .submit(Request {
                id: 99,
                prompt: vec![1; 200],
                max_new_tokens: 25,
                sampler: SamplerConfig::greedy(),
                stop_tokens: vec![],
            })
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("225 tokens of prompt + budget exceed the pool's 224"),
            "{e}"
        );
        all_blocks_free(&mut s);
    }
}

/// Greedy tokens and every logits row of `prompt` run alone through `Glm5` (one sequence, no
/// scheduler): one prefill step, then one step per token.
fn alone_logits(g: &Gguf, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut m = glm5_model::Glm5::load(g, CpuBackend::new(), prompt.len() + n).unwrap();
    let mut greedy = glint_engine::sampler::Sampler::new(SamplerConfig::greedy());
    let mut rows = vec![m.forward_last(prompt, 0).unwrap()];
    let mut toks = Vec::new();
    loop {
        let t = greedy.sample(rows.last().unwrap()).unwrap();
        toks.push(t);
        if toks.len() == n {
            return (toks, rows);
        }
        let pos = prompt.len() + toks.len() - 1;
        rows.push(m.forward_last(&[t], pos).unwrap());
    }
}

#[test]
fn a_cached_prefix_is_not_computed_again_and_changes_no_logit() {
    let r = reference();
    let g = Gguf::open(case_gguf(&r, common::case(&r, "medium"))).unwrap();
    let model = Model::load(&g, CpuBackend::new()).unwrap();
    let medium = ids_of(&common::case(&r, "medium")["ids"]);
    let chat = ids_of(&common::case(&r, "chat")["ids"]);
    let cfg = SchedulerConfig {
        max_tokens: 40,
        max_seqs: 4,
        n_blocks: 64,
        block_size: 16,
        max_ctx: 256,
        cache: Default::default(),
        prefix_caching: true,
    };
    let mut s = Scheduler::new(&model, cfg).unwrap();
    let n = 6;
    let run = |s: &mut Scheduler<'_, '_, CpuBackend>, id: u64, prompt: &[u32]| {
        let before = s.counters();
        s.submit(Request {
            id,
            prompt: prompt.to_vec(),
            max_new_tokens: n,
            sampler: SamplerConfig::greedy(),
            stop_tokens: vec![],
        })
        .unwrap();
        let mut rows = Vec::new();
        let mut toks = Vec::new();
        while s.pending() > 0 {
            s.step_observed(|_, row, t| {
                rows.push(row.to_vec());
                toks.push(t);
            })
            .unwrap();
        }
        let after = s.counters();
        let hit = (after.prefix_hit_tokens - before.prefix_hit_tokens) as usize;
        let computed = (after.computed_tokens - before.computed_tokens) as usize;
        (toks, rows, hit, computed)
    };
    // (prompt, the tokens it should find cached)
    let mut turn2 = medium[..150].to_vec();
    turn2.extend(&chat); // a second turn: the first one's prefix, then new text
    let cases: Vec<(&str, Vec<u32>, usize)> = vec![
        ("cold", medium.clone(), 0),
        // The same prompt: its full blocks (9 of 16 before the last token) come from the cache.
        ("same prompt", medium.clone(), 144),
        ("longer prompt, same prefix", turn2, 144),
        // A prompt of exactly 9 blocks: the last token is computed, so 8 blocks are reused.
        ("whole blocks", medium[..144].to_vec(), 128),
        ("other prompt", chat.clone(), 0),
    ];
    for (id, (name, prompt, want_hit)) in cases.iter().enumerate() {
        let (toks, rows, hit, computed) = run(&mut s, id as u64, prompt);
        assert_eq!(hit, *want_hit, "{name}: tokens found in the prefix cache");
        assert_eq!(
            computed,
            prompt.len() - hit + n - 1,
            "{name}: tokens computed"
        );
        let (want_toks, want_rows) = alone_logits(&g, prompt, n);
        assert_eq!(toks, want_toks, "{name}: greedy tokens");
        assert_eq!(rows.len(), want_rows.len());
        for (i, (a, b)) in rows.iter().zip(&want_rows).enumerate() {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}: logits row {i} differ from the cold run's"
            );
        }
        assert_eq!(s.free_blocks(), s.total_blocks(), "{name}");
    }
    assert!(s.cached_blocks() > 0);
    all_blocks_free(&mut s);
}

#[test]
fn unreferenced_cached_blocks_are_evicted_least_recently_used_first() {
    let r = reference();
    let g = Gguf::open(case_gguf(&r, common::case(&r, "medium"))).unwrap();
    let model = Model::load(&g, CpuBackend::new()).unwrap();
    let medium = ids_of(&common::case(&r, "medium")["ids"]);
    let chat = ids_of(&common::case(&r, "chat")["ids"]);
    // 12 blocks of 16: medium (151 + 4) takes 10 of them.
    let cfg = SchedulerConfig {
        max_tokens: 64,
        max_seqs: 2,
        n_blocks: 12,
        block_size: 16,
        max_ctx: 192,
        cache: Default::default(),
        prefix_caching: true,
    };
    let mut s = Scheduler::new(&model, cfg).unwrap();
    let req = |id, prompt: &[u32]| Request {
        id,
        prompt: prompt.to_vec(),
        max_new_tokens: 5,
        sampler: SamplerConfig::greedy(),
        stop_tokens: vec![],
    };
    let expect = |prompt: &[u32]| alone_logits(&g, prompt, 5).0;
    // chat leaves 2 full blocks cached, then medium 9 (and 1 block free).
    s.submit(req(0, &chat)).unwrap();
    assert_eq!(drain(&mut s).0[&0], expect(&chat));
    s.submit(req(1, &medium)).unwrap();
    assert_eq!(drain(&mut s).0[&1], expect(&medium));
    assert_eq!(s.cached_blocks(), 11);
    assert_eq!(s.free_blocks(), 12);
    // A new prompt of 3 blocks: the free one and the two least recently released, chat's.
    let other: Vec<u32> = medium[..40].iter().rev().copied().collect();
    s.submit(req(2, &other)).unwrap();
    assert_eq!(drain(&mut s).0[&2], expect(&other));
    let hits = s.counters().prefix_hit_tokens;
    s.submit(req(3, &medium)).unwrap();
    assert_eq!(drain(&mut s).0[&3], expect(&medium));
    assert_eq!(
        s.counters().prefix_hit_tokens - hits,
        144,
        "medium's blocks stayed"
    );
    s.submit(req(4, &chat)).unwrap();
    assert_eq!(drain(&mut s).0[&4], expect(&chat));
    assert_eq!(
        s.counters().prefix_hit_tokens - hits,
        144,
        "chat's blocks were evicted"
    );
    all_blocks_free(&mut s);
}
