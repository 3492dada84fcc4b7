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
        max_seqs: 4,
        n_blocks: 16,
        block_size: 8,
        max_ctx: 64,
        cache: Default::default(),
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
    // 0 and 1 run; 2 is queued behind a pool too small for three (and is cancelled there).
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
}
