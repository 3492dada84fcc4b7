//! `glint serve` end to end on the tiny fixture model, over loopback HTTP: greedy answers equal
//! the engine's own generation loop (an independent path: one sequence, no scheduler), the
//! prompt equals transformers' chat-template rendering, streaming equals non-streaming, usage
//! counts tokens, stop strings cut, and concurrency does not change any answer.

mod common;

use common::*;
use glint_engine::generate::{generate, GenerateParams};
use glint_engine::sampler::SamplerConfig;
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::{json, Value};

/// GLM's turn-ending tokens, which end a chat answer (as the server's chat stop set).
const CHAT_STOP_TEXTS: [&str; 3] = ["<|user|>", "<|observation|>", "<|endoftext|>"];

struct Reference {
    gguf: Gguf,
    tok: Tokenizer,
}

impl Reference {
    fn new() -> Self {
        let gguf = Gguf::open(model_path()).unwrap();
        let tok = Tokenizer::from_metadata(gguf.metadata()).unwrap();
        Self { gguf, tok }
    }

    /// `glint_engine::generate`'s greedy tokens and text for `prompt`, ended at the first of
    /// `stops` (included, as the server counts it) or after `n` tokens.
    fn greedy(&self, prompt: &[u32], n: usize, stops: &[u32]) -> (Vec<u32>, String, bool) {
        let mut m = Glm5::load(&self.gguf, CpuBackend::new(), prompt.len() + n).unwrap();
        let p = GenerateParams {
            max_new_tokens: n,
            sampler: SamplerConfig::greedy(),
            stop_at_eog: false,
            print_special: false,
        };
        let g = generate(&mut m, &self.tok, prompt, &p, |_| {}).unwrap();
        match g.tokens.iter().position(|t| stops.contains(t)) {
            Some(i) => {
                let toks = g.tokens[..=i].to_vec();
                let text = self.tok.decode_with(&toks[..i], false).unwrap();
                (toks, text, true)
            }
            None => (g.tokens, g.text, false),
        }
    }

    fn chat_stops(&self) -> Vec<u32> {
        let mut v = self.tok.eog_ids().to_vec();
        v.extend(
            CHAT_STOP_TEXTS
                .iter()
                .filter_map(|t| self.tok.token_to_id(t)),
        );
        v
    }
}

fn chat_cases() -> Vec<Value> {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("chat_cases.json")).unwrap(),
    )
    .unwrap();
    v["cases"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_chat_equals_the_generation_loop_and_streams_the_same() {
    let s = start(config()).await;
    let c = client();
    let r = Reference::new();
    let think = [
        r.tok.token_to_id("<think>").unwrap(),
        r.tok.token_to_id("</think>").unwrap(),
    ];
    // With tools, GLM's call tags print (and may be parsed); the generation loop prints none.
    let tool_tags: Vec<u32> = glint_server::tools::TAGS
        .iter()
        .map(|t| r.tok.token_to_id(t).unwrap())
        .collect();
    let mut tested = 0;
    for case in chat_cases() {
        let name = case["name"].as_str().unwrap();
        let n = 24;
        // As OpenAI's clients send them: `tools` at the top level, and an earlier call's
        // `arguments` as a JSON string (the case gives transformers an object).
        let mut kwargs = case["kwargs"].clone();
        let tools = kwargs.as_object_mut().unwrap().remove("tools");
        let mut messages = case["messages"].clone();
        for m in messages.as_array_mut().unwrap() {
            for tc in m["tool_calls"].as_array_mut().into_iter().flatten() {
                let args = tc["function"]["arguments"].to_string();
                tc["function"]["arguments"] = args.into();
                tc["id"] = "call_1".into();
            }
        }
        let mut body = json!({
            "model": "glm5-tiny",
            "messages": messages,
            "temperature": 0,
            "max_tokens": n,
            "return_token_ids": true,
            "chat_template_kwargs": kwargs,
        });
        if let Some(t) = tools {
            body["tools"] = t;
        }
        let (status, v) = post(&c, &url(&s, "/v1/chat/completions"), &body).await;
        assert_eq!(status, 200, "{name}: {v}");
        // The prompt is transformers' rendering of the template, token for token.
        assert_eq!(ids(&v["prompt_token_ids"]), ids(&case["ids"]), "{name}");
        let prompt = ids(&case["ids"]);
        let (want, text, stopped) = r.greedy(&prompt, n, &r.chat_stops());
        let choice = &v["choices"][0];
        assert_eq!(ids(&choice["token_ids"]), want, "{name}: greedy tokens");
        assert_eq!(
            choice["finish_reason"],
            if stopped { "stop" } else { "length" },
            "{name}"
        );
        assert_eq!(v["usage"]["prompt_tokens"], prompt.len(), "{name}");
        assert_eq!(v["usage"]["completion_tokens"], want.len(), "{name}");
        assert_eq!(v["usage"]["total_tokens"], prompt.len() + want.len());
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(choice["message"]["role"], "assistant");
        let content = choice["message"]["content"].as_str().unwrap().to_string();
        let reasoning = choice["message"]["reasoning_content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        // Without think tags in the output, reasoning + content is the whole text; which part
        // it lands in depends on whether the prompt opened a reasoning block.
        if !want
            .iter()
            .any(|t| think.contains(t) || tool_tags.contains(t))
        {
            let opens = case["rendered"].as_str().unwrap().ends_with("<think>");
            if opens {
                assert_eq!((reasoning.as_str(), content.as_str()), (text.as_str(), ""));
            } else {
                assert_eq!((reasoning.as_str(), content.as_str()), ("", text.as_str()));
            }
        }

        // The same request streamed: the deltas concatenate to the same message.
        body["stream"] = true.into();
        body["stream_options"] = json!({"include_usage": true});
        let chunks = post_stream(&c, &url(&s, "/v1/chat/completions"), &body).await;
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let (sc, sr, reason) = chat_stream_text(&chunks);
        assert_eq!((sc, sr), (content, reasoning), "{name}: streamed text");
        assert_eq!(reason, choice["finish_reason"].as_str().unwrap());
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]), "usage chunk last");
        assert_eq!(last["usage"], v["usage"], "{name}: streamed usage");
        for ch in &chunks[..chunks.len() - 1] {
            assert_eq!(ch["object"], "chat.completion.chunk");
            assert!(ch["usage"].is_null());
            assert_eq!(ch["id"], chunks[0]["id"]);
        }
        tested += 1;
    }
    assert!(tested >= 4, "chat cases tested (tools included): {tested}");
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_equal_generate_text_and_stop_strings_cut() {
    let s = start(config()).await;
    let c = client();
    let r = Reference::new();
    let prompt_text = "The dog was asleep.";
    let prompt = r.tok.encode_prompt(prompt_text).unwrap();
    let n = 32;
    let body = json!({
        "prompt": prompt_text, "temperature": 0, "max_tokens": n, "return_token_ids": true,
    });
    let (status, v) = post(&c, &url(&s, "/v1/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let (want, text, stopped) = r.greedy(&prompt, n, r.tok.eog_ids());
    let choice = &v["choices"][0];
    assert_eq!(ids(&v["prompt_token_ids"]), prompt);
    assert_eq!(ids(&choice["token_ids"]), want);
    assert_eq!(choice["text"], text.as_str());
    assert_eq!(
        choice["finish_reason"],
        if stopped { "stop" } else { "length" }
    );
    assert_eq!(v["usage"]["completion_tokens"], want.len());
    assert_eq!(v["object"], "text_completion");

    // Streamed: the pieces concatenate to the same text.
    let mut sb = body.clone();
    sb["stream"] = true.into();
    let chunks = post_stream(&c, &url(&s, "/v1/completions"), &sb).await;
    let streamed: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text);

    // Stop strings: a longer greedy text (end-of-generation tokens ignored), cut at a piece of
    // it taken from the middle; the answer is the text before its first occurrence.
    let long = json!({
        "prompt": prompt_text, "temperature": 0, "max_tokens": 48, "ignore_eos": true,
    });
    let (_, v) = post(&c, &url(&s, "/v1/completions"), &long).await;
    let full = v["choices"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 12, "greedy text too short to cut: {full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let before = &full[..full.find(&stop).unwrap()];
    for stream in [false, true] {
        let mut b = long.clone();
        b["stop"] = json!(["\u{0}never", stop]);
        b["stream"] = stream.into();
        let (text, reason) = if stream {
            let chunks = post_stream(&c, &url(&s, "/v1/completions"), &b).await;
            let t: String = chunks
                .iter()
                .map(|c| c["choices"][0]["text"].as_str().unwrap())
                .collect();
            let r = chunks.last().unwrap()["choices"][0]["finish_reason"].clone();
            (t, r)
        } else {
            let (status, v) = post(&c, &url(&s, "/v1/completions"), &b).await;
            assert_eq!(status, 200, "{v}");
            (
                v["choices"][0]["text"].as_str().unwrap().to_string(),
                v["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, before, "stop {stop:?}, stream {stream}");
        assert_eq!(reason, "stop");
    }
    // A stopped request is cancelled in the engine: its blocks come back.
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_greedy_requests_equal_each_alone() {
    let s = start(config()).await;
    let c = client();
    let bodies: Vec<Value> = (0..16)
        .map(|i| {
            json!({
                "messages": [{"role": "user", "content": format!("Request {i}: {}", "tell me more. ".repeat(i % 5 + 1))}],
                "temperature": 0,
                "max_tokens": 20 + i,
                "return_token_ids": true,
                "chat_template_kwargs": {"enable_thinking": i % 2 == 0},
            })
        })
        .collect();
    let u = url(&s, "/v1/chat/completions");
    let mut alone = Vec::new();
    for b in &bodies {
        let (status, v) = post(&c, &u, b).await;
        assert_eq!(status, 200, "{v}");
        alone.push(v["choices"][0].clone());
    }
    let tasks: Vec<_> = bodies
        .iter()
        .map(|b| {
            let (c, u, b) = (c.clone(), u.clone(), b.clone());
            tokio::spawn(async move { post(&c, &u, &b).await })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let (status, v) = t.await.unwrap();
        assert_eq!(status, 200, "{v}");
        let got = &v["choices"][0];
        assert_eq!(got["token_ids"], alone[i]["token_ids"], "request {i}");
        assert_eq!(got["message"], alone[i]["message"], "request {i}");
    }
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_sampling_repeats_and_differs_by_seed() {
    let s = start(config()).await;
    let c = client();
    let u = url(&s, "/v1/chat/completions");
    let body = |seed: u64| {
        json!({
            "messages": [{"role": "user", "content": "Say something"}],
            "temperature": 1.5, "top_p": 0.95, "top_k": 50, "min_p": 0.01,
            "seed": seed, "max_tokens": 24, "ignore_eos": true, "return_token_ids": true,
        })
    };
    let (_, a) = post(&c, &u, &body(1)).await;
    let (_, b) = post(&c, &u, &body(1)).await;
    let (_, d) = post(&c, &u, &body(2)).await;
    assert_eq!(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"]);
    assert_ne!(a["choices"][0]["token_ids"], d["choices"][0]["token_ids"]);
    assert_eq!(a["usage"]["completion_tokens"], 24);
    assert_eq!(a["choices"][0]["finish_reason"], "length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_health() {
    let s = start(config()).await;
    let c = client();
    let v: Value = c
        .get(url(&s, "/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "glm5-tiny");
    assert_eq!(v["data"][0]["max_model_len"], 512);
    let h = wait_health(&c, &s, idle).await;
    assert_eq!(h["status"], "ok");
    assert_eq!(h["total_blocks"], 16 * 32);
    s.shutdown().await.unwrap();
}
