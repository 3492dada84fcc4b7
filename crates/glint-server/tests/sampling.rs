//! Sampling parameters through the server: presence and frequency penalties checked against
//! penalised logits computed here from `glm5_model`'s own raw logits (one forward pass, no
//! scheduler), `stop_token_ids` against the unstopped greedy answer, `n` choices against
//! single requests with the choice's seed.

mod common;

use std::collections::HashMap;

use common::*;
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::{json, Value};

/// The model's raw logits rows for `prompt ++ gen[..len-1]` at the positions that sampled
/// `gen`.
fn raw_logits(prompt: &[u32], gen: &[u32]) -> Vec<Vec<f32>> {
    let gguf = Gguf::open(model_path()).unwrap();
    let mut all = prompt.to_vec();
    all.extend_from_slice(&gen[..gen.len() - 1]);
    let mut m = Glm5::load(&gguf, CpuBackend::new(), all.len() + 1).unwrap();
    let logits = m.forward(&all, 0).unwrap();
    let nv = m.config().n_vocab;
    (0..gen.len())
        .map(|j| logits[(prompt.len() - 1 + j) * nv..(prompt.len() + j) * nv].to_vec())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_and_frequency_penalties_follow_openai_semantics_on_the_raw_logits() {
    let s = start(config()).await;
    let c = client();
    let u = url(&s, "/v1/completions");
    let base = json!({"prompt": "The cat sat on the mat. The cat", "temperature": 0,
                      "max_tokens": 40, "ignore_eos": true, "return_token_ids": true});
    let (status, plain) = post(&c, &u, &base).await;
    assert_eq!(status, 200, "{plain}");
    let plain_ids = ids(&plain["choices"][0]["token_ids"]);
    for (presence, frequency) in [(0.0, 1.5), (1.2, 0.0), (0.6, 0.9), (-0.5, 0.3)] {
        let mut body = base.clone();
        body["presence_penalty"] = json!(presence);
        body["frequency_penalty"] = json!(frequency);
        let (status, v) = post(&c, &u, &body).await;
        assert_eq!(status, 200, "{v}");
        let prompt = ids(&v["prompt_token_ids"]);
        let gen = ids(&v["choices"][0]["token_ids"]);
        assert_eq!(gen.len(), 40);
        let rows = raw_logits(&prompt, &gen);
        // Greedy after the penalties: at each step the chosen token has the largest
        // `logit - presence * [count > 0] - frequency * count` over the tokens generated so
        // far (the prompt's tokens are not counted).
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for (j, row) in rows.iter().enumerate() {
            let pen = |t: usize| {
                let n = counts.get(&(t as u32)).copied().unwrap_or(0) as f64;
                let p = if n > 0.0 { presence } else { 0.0 };
                row[t] as f64 - p - frequency * n
            };
            let best = (0..row.len()).map(pen).fold(f64::NEG_INFINITY, f64::max);
            let got = pen(gen[j] as usize);
            assert!(
                got >= best - 1e-4,
                "({presence}, {frequency}) step {j}: token {} at {got}, best {best}",
                gen[j]
            );
            *counts.entry(gen[j]).or_insert(0) += 1;
        }
        if presence >= 0.0 && frequency >= 0.0 {
            // Not vacuous: the penalised answer repeats less than the plain greedy one.
            let distinct = |v: &[u32]| v.iter().collect::<std::collections::HashSet<_>>().len();
            assert!(
                distinct(&gen) > distinct(&plain_ids),
                "({presence}, {frequency}): {gen:?} vs {plain_ids:?}"
            );
        }
    }
    let mut bad = base.clone();
    bad["presence_penalty"] = json!(3);
    let (status, v) = post(&c, &u, &bad).await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("presence_penalty"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_token_ids_end_the_answer_at_that_token() {
    let s = start(config()).await;
    let c = client();
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let u = url(&s, path);
        let mut body = json!({"temperature": 0, "max_tokens": 24, "ignore_eos": true,
                              "return_token_ids": true});
        if path == "/v1/completions" {
            body["prompt"] = "Once upon a time".into();
        } else {
            body["messages"] = json!([{"role": "user", "content": "Tell me a story"}]);
            body["chat_template_kwargs"] = json!({"enable_thinking": false});
        }
        let (_, v) = post(&c, &u, &body).await;
        let all = ids(&v["choices"][0]["token_ids"]);
        assert_eq!(all.len(), 24);
        // Stop at the token generated 6th: the answer is the first five, plus that token
        // (counted, not printed), as at an end-of-turn token.
        let k = 5;
        let stop = all[k];
        let k = all.iter().position(|&t| t == stop).unwrap();
        body["stop_token_ids"] = json!([stop]);
        let (status, w) = post(&c, &u, &body).await;
        assert_eq!(status, 200, "{w}");
        let ch = &w["choices"][0];
        assert_eq!(ids(&ch["token_ids"]), all[..=k].to_vec(), "{path}");
        assert_eq!(ch["finish_reason"], "stop");
        assert_eq!(w["usage"]["completion_tokens"], k + 1);
        // The text is that of the tokens before it (the same request unstopped, cut short).
        let mut short = body.clone();
        short.as_object_mut().unwrap().remove("stop_token_ids");
        short["max_tokens"] = json!(k.max(1));
        let (_, x) = post(&c, &u, &short).await;
        let text = |v: &Value| {
            let ch = &v["choices"][0];
            ch["text"]
                .as_str()
                .or(ch["message"]["content"].as_str())
                .unwrap()
                .to_string()
        };
        if k > 0 {
            assert_eq!(text(&w), text(&x), "{path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_each_equal_a_single_request_with_the_choice_seed() {
    let s = start(config()).await;
    let c = client();
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let u = url(&s, path);
        let mut body = json!({"temperature": 1.0, "max_tokens": 10, "ignore_eos": true,
                              "return_token_ids": true, "seed": 1234});
        if path == "/v1/completions" {
            body["prompt"] = "Once upon a time".into();
        } else {
            body["messages"] = json!([{"role": "user", "content": "Hello there"}]);
        }
        let mut group = body.clone();
        group["n"] = json!(4);
        let (status, v) = post(&c, &u, &group).await;
        assert_eq!(status, 200, "{v}");
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 4);
        let mut total = 0;
        let mut distinct = std::collections::HashSet::new();
        for (i, ch) in choices.iter().enumerate() {
            assert_eq!(ch["index"], i);
            let mut one = body.clone();
            one["seed"] = json!(1234 + i as i64);
            let (_, w) = post(&c, &u, &one).await;
            assert_eq!(
                ch["token_ids"], w["choices"][0]["token_ids"],
                "{path} choice {i}"
            );
            let mut ch_wo_index = ch.clone();
            ch_wo_index["index"] = json!(0);
            assert_eq!(ch_wo_index, w["choices"][0], "{path} choice {i}");
            total += ids(&ch["token_ids"]).len();
            distinct.insert(ch["token_ids"].to_string());
        }
        assert!(distinct.len() > 1, "different seeds, different choices");
        assert_eq!(v["usage"]["completion_tokens"], total);
        assert_eq!(
            v["usage"]["prompt_tokens"],
            ids(&v["prompt_token_ids"]).len()
        );

        // Streamed: each index's chunks concatenate to that choice; usage once, at the end.
        let mut sgroup = group.clone();
        sgroup["stream"] = true.into();
        sgroup["stream_options"] = json!({"include_usage": true});
        sgroup.as_object_mut().unwrap().remove("return_token_ids");
        let chunks = post_stream(&c, &u, &sgroup).await;
        let mut texts = vec![String::new(); 4];
        let mut reasons = vec![String::new(); 4];
        for ch in &chunks[..chunks.len() - 1] {
            assert!(ch["usage"].is_null());
            for c in ch["choices"].as_array().unwrap() {
                let i = c["index"].as_u64().unwrap() as usize;
                let piece = c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .or(c["delta"]["reasoning_content"].as_str())
                    .unwrap_or("");
                texts[i].push_str(piece);
                if let Some(r) = c["finish_reason"].as_str() {
                    reasons[i] = r.into();
                }
            }
        }
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"], v["usage"]);
        for (i, ch) in choices.iter().enumerate() {
            let want = if path == "/v1/completions" {
                ch["text"].as_str().unwrap().to_string()
            } else {
                let m = &ch["message"];
                format!(
                    "{}{}",
                    m["reasoning_content"].as_str().unwrap_or(""),
                    m["content"].as_str().unwrap()
                )
            };
            assert_eq!(texts[i], want, "{path} streamed choice {i}");
            assert_eq!(reasons[i], ch["finish_reason"].as_str().unwrap());
        }
    }
    // Bounds: n past 16, and n choices that cannot fit the KV pool together (a pool of 1024
    // tokens: 4 × (2 + 300) do not fit, 3 × (2 + 300) do).
    let mut cfg = config();
    cfg.scheduler.n_blocks = 64;
    let small = start(cfg).await;
    let u = url(&small, "/v1/completions");
    for (n, max_tokens, status) in [(17, 4, 400), (4, 300, 400), (3, 300, 200)] {
        let (got, v) = post(
            &c,
            &u,
            &json!({"prompt": "Hi", "n": n, "max_tokens": max_tokens, "temperature": 0}),
        )
        .await;
        assert_eq!(got, status, "{v}");
        if status == 400 {
            assert_eq!(v["error"]["param"], "n", "{v}");
        }
    }
}
