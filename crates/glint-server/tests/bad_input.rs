//! Bad requests each get their OpenAI-shaped error with the right status and field, never
//! reach the engine, and the server keeps serving; the API key, the queue limit and client
//! disconnects behave as documented.

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};

fn ok_chat() -> Value {
    json!({"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": 4})
}

fn with(mut base: Value, key: &str, v: Value) -> Value {
    base[key] = v;
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_their_errors_and_the_server_keeps_serving() {
    let s = start(config()).await;
    let c = client();
    let chat = url(&s, "/v1/chat/completions");
    let comp = url(&s, "/v1/completions");
    let msg =
        |role: &str, content: Value| json!({"messages": [{"role": role, "content": content}]});
    // (endpoint, raw body, status, param)
    let mut cases: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        (&chat, b"{not json".to_vec(), 400, None),
        (&chat, b"".to_vec(), 400, None),
        (&chat, b"[1, 2]".to_vec(), 400, None),
        (
            &chat,
            b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}".to_vec(),
            400,
            None,
        ),
        (
            &chat,
            b"{\"messages\": [], \"temperature\": 1e400}".to_vec(),
            400,
            None,
        ),
    ];
    let json_cases: Vec<(&str, Value, u16, Option<&str>)> = vec![
        (&chat, json!({}), 400, Some("messages")),
        (&chat, json!({"messages": []}), 400, Some("messages")),
        (&chat, json!({"messages": "hi"}), 400, Some("messages")),
        (
            &chat,
            msg("wizard", json!("x")),
            400,
            Some("messages[0].role"),
        ),
        (
            &chat,
            msg("user", json!(null)),
            400,
            Some("messages[0].content"),
        ),
        (
            &chat,
            msg("user", json!(5)),
            400,
            Some("messages[0].content"),
        ),
        (
            &chat,
            msg(
                "user",
                json!([{"type": "image_url", "image_url": {"url": "x"}}]),
            ),
            400,
            Some("messages[0].content[0].type"),
        ),
        (
            &chat,
            with(ok_chat(), "temperature", json!(-1)),
            400,
            Some("temperature"),
        ),
        (
            &chat,
            with(ok_chat(), "temperature", json!(3.5)),
            400,
            Some("temperature"),
        ),
        (
            &chat,
            with(ok_chat(), "temperature", json!("hot")),
            400,
            Some("temperature"),
        ),
        (
            &chat,
            with(ok_chat(), "top_p", json!(0)),
            400,
            Some("top_p"),
        ),
        (
            &chat,
            with(ok_chat(), "top_p", json!(1.5)),
            400,
            Some("top_p"),
        ),
        (
            &chat,
            with(ok_chat(), "top_k", json!(-7)),
            400,
            Some("top_k"),
        ),
        (
            &chat,
            with(ok_chat(), "min_p", json!(2)),
            400,
            Some("min_p"),
        ),
        (&chat, with(ok_chat(), "n", json!(0)), 400, Some("n")),
        (&chat, with(ok_chat(), "n", json!(17)), 400, Some("n")),
        (
            &chat,
            with(ok_chat(), "stop_token_ids", json!([1, 100000])),
            400,
            Some("stop_token_ids[1]"),
        ),
        (
            &chat,
            with(ok_chat(), "frequency_penalty", json!(-2.5)),
            400,
            Some("frequency_penalty"),
        ),
        (&chat, with(ok_chat(), "n", json!(1000)), 400, Some("n")),
        (
            &chat,
            with(ok_chat(), "max_tokens", json!(0)),
            400,
            Some("max_tokens"),
        ),
        (
            &chat,
            with(ok_chat(), "max_tokens", json!(-5)),
            400,
            Some("max_tokens"),
        ),
        (
            &chat,
            with(ok_chat(), "max_tokens", json!(100000)),
            400,
            Some("max_tokens"),
        ),
        (
            &chat,
            with(ok_chat(), "max_tokens", json!(1e30)),
            400,
            Some("max_tokens"),
        ),
        (
            &chat,
            with(ok_chat(), "max_completion_tokens", json!(1u64 << 60)),
            400,
            Some("max_completion_tokens"),
        ),
        (
            &chat,
            with(ok_chat(), "stop", json!([""])),
            400,
            Some("stop[0]"),
        ),
        (&chat, with(ok_chat(), "stop", json!(7)), 400, Some("stop")),
        (
            &chat,
            with(ok_chat(), "seed", json!("x")),
            400,
            Some("seed"),
        ),
        (
            &chat,
            with(ok_chat(), "stream", json!("yes")),
            400,
            Some("stream"),
        ),
        (
            &chat,
            with(ok_chat(), "stream_options", json!({"include_usage": true})),
            400,
            Some("stream_options"),
        ),
        (
            &chat,
            with(ok_chat(), "presence_penalty", json!(2.01)),
            400,
            Some("presence_penalty"),
        ),
        (
            &chat,
            with(ok_chat(), "top_logprobs", json!(2)),
            400,
            Some("top_logprobs"),
        ),
        (
            &chat,
            with(
                with(ok_chat(), "logprobs", json!(true)),
                "top_logprobs",
                json!(21),
            ),
            400,
            Some("top_logprobs"),
        ),
        (
            &chat,
            with(ok_chat(), "logprobs", json!(1)),
            400,
            Some("logprobs"),
        ),
        (
            &comp,
            json!({"prompt": "hi", "logprobs": 21}),
            400,
            Some("logprobs"),
        ),
        (
            &comp,
            json!({"prompt": "hi", "logprobs": -1}),
            400,
            Some("logprobs"),
        ),
        (
            &chat,
            with(
                ok_chat(),
                "tools",
                json!([{"type": "function", "function": {"name": "f", "parameters": 3}}]),
            ),
            400,
            Some("tools[0].function.parameters"),
        ),
        (
            &chat,
            with(
                ok_chat(),
                "tools",
                json!([{"type": "function", "function": {}}]),
            ),
            400,
            Some("tools[0].function.name"),
        ),
        (
            &chat,
            with(ok_chat(), "tool_choice", json!("required")),
            400,
            Some("tool_choice"),
        ),
        (
            &chat,
            with(
                with(
                    ok_chat(),
                    "tools",
                    json!([{"type": "function", "function": {"name": "f"}}]),
                ),
                "tool_choice",
                json!({"type": "function", "function": {"name": "g"}}),
            ),
            400,
            Some("tool_choice.function.name"),
        ),
        (
            &chat,
            with(
                ok_chat(),
                "messages",
                json!([{"role": "user", "content": "x"},
                       {"role": "assistant", "tool_calls": [{"type": "function",
                        "function": {"name": "f", "arguments": "{not json"}}]},
                       {"role": "user", "content": "y"}]),
            ),
            400,
            Some("messages[1].tool_calls[0].function.arguments"),
        ),
        (
            &chat,
            with(ok_chat(), "response_format", json!({"type": "json_object"})),
            400,
            Some("response_format"),
        ),
        (
            &chat,
            with(ok_chat(), "chat_template_kwargs", json!({"messages": []})),
            400,
            Some("chat_template_kwargs.messages"),
        ),
        (
            &chat,
            with(ok_chat(), "model", json!("gpt-4")),
            404,
            Some("model"),
        ),
        (&comp, json!({}), 400, Some("prompt")),
        (&comp, json!({"prompt": ""}), 400, Some("prompt")),
        (&comp, json!({"prompt": [99999]}), 400, Some("prompt[0]")),
        (&comp, json!({"prompt": [-1]}), 400, Some("prompt[0]")),
        (&comp, json!({"prompt": ["a", "b"]}), 400, Some("prompt")),
        (&comp, json!({"prompt": {"x": 1}}), 400, Some("prompt")),
        (
            &comp,
            json!({"prompt": "hi", "echo": true}),
            400,
            Some("echo"),
        ),
        (
            &comp,
            json!({"prompt": "hi", "max_tokens": 4096}),
            400,
            Some("max_tokens"),
        ),
        (&comp, json!({"prompt": "hi ".repeat(600)}), 400, None),
    ];
    for (u, v, st, p) in json_cases {
        cases.push((u, serde_json::to_vec(&v).unwrap(), st, p));
    }
    // Over the 64 KiB body limit.
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(100 << 10)}]});
    cases.push((&chat, serde_json::to_vec(&big).unwrap(), 413, None));

    for (u, body, status, param) in &cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        let r = c
            .post(*u)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), *status, "{u} {shown}");
        let v: Value = r
            .json()
            .await
            .unwrap_or_else(|e| panic!("{shown}: not JSON: {e}"));
        let err = &v["error"];
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{shown}: {v}"
        );
        assert!(err["type"].is_string(), "{v}");
        if let Some(p) = param {
            assert_eq!(err["param"], *p, "{shown}: {v}");
            assert!(err["message"].as_str().unwrap().contains(p), "{v}");
        }
    }
    // Nothing reached the engine.
    let h: Value = c
        .get(url(&s, "/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(h["steps"], 0, "{h}");

    // Unknown endpoints and methods are JSON errors too.
    let r = c.get(url(&s, "/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert!(r.json::<Value>().await.unwrap()["error"].is_object());
    let r = c.get(&chat).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);

    // And the server still answers.
    let (status, v) = post(&c, &chat, &ok_chat()).await;
    assert_eq!(status, 200, "{v}");
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_is_required_on_v1_only() {
    let mut cfg = config();
    cfg.api_key = Some("sekrit".into());
    let s = start(cfg).await;
    let c = client();
    let chat = url(&s, "/v1/chat/completions");
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("sekrit"),
        Some("Bearer sekrit2"),
    ] {
        let mut r = c.post(&chat).json(&ok_chat());
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key");
    }
    let r = c.get(url(&s, "/v1/models")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .post(&chat)
        .bearer_auth("sekrit")
        .json(&ok_chat())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = c.get(url(&s, "/health")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_a_503_with_retry_after() {
    let mut cfg = config();
    cfg.scheduler.max_seqs = 1;
    cfg.queue = 1;
    let s = start(cfg).await;
    let c = client();
    let u = url(&s, "/v1/chat/completions");
    let long = json!({
        "messages": [{"role": "user", "content": "Hello"}],
        "temperature": 0, "max_tokens": 400, "ignore_eos": true,
    });
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (c, u, b) = (c.clone(), u.clone(), long.clone());
            tokio::spawn(async move {
                let r = c.post(&u).json(&b).send().await.unwrap();
                let status = r.status().as_u16();
                let retry = r.headers().get("retry-after").cloned();
                let v: Value = r.json().await.unwrap();
                (status, retry, v)
            })
        })
        .collect();
    let (mut ok, mut full) = (0, 0);
    for t in tasks {
        let (status, retry, v) = t.await.unwrap();
        match status {
            200 => {
                ok += 1;
                assert_eq!(v["usage"]["completion_tokens"], 400);
            }
            503 => {
                full += 1;
                assert_eq!(retry.unwrap(), "1");
                assert_eq!(v["error"]["code"], "queue_full");
            }
            s => panic!("status {s}: {v}"),
        }
    }
    assert!(ok >= 1 && full >= 1, "{ok} served, {full} refused");
    wait_health(&c, &s, idle).await;
    let (status, _) = post(&c, &u, &ok_chat()).await;
    assert_eq!(status, 200, "serving again once the queue drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_blocks() {
    let mut cfg = config();
    cfg.scheduler.max_ctx = 4096;
    cfg.scheduler.n_blocks = 4 * 4096 / 16;
    let s = start(cfg).await;
    let c = client();
    let u = url(&s, "/v1/chat/completions");
    let budget = 4000u64;
    let long = json!({
        "messages": [{"role": "user", "content": "Hello"}],
        "temperature": 0, "max_tokens": budget, "ignore_eos": true, "stream": true,
    });
    let generated = |h: &Value| h["generated_tokens"].as_u64().unwrap();
    // Streaming: read two chunks, then hang up.
    let r = c.post(&u).json(&long).send().await.unwrap();
    let mut body = r.bytes_stream();
    body.next().await.unwrap().unwrap();
    body.next().await.unwrap().unwrap();
    let h = wait_health(&c, &s, |h| h["running"] == 1).await;
    assert!(h["free_blocks"].as_u64() < h["total_blocks"].as_u64());
    drop(body);
    let h = wait_health(&c, &s, idle).await;
    assert!(generated(&h) < budget, "cancelled before the end: {h}");

    // Not streaming: the clients time out while the engine works.
    let before = generated(&h);
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let mut b = long.clone();
    b["stream"] = false.into();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (c, u, b) = (impatient.clone(), u.clone(), b.clone());
            tokio::spawn(async move { c.post(&u).json(&b).send().await.is_err() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap(), "the request should have timed out");
    }
    let h = wait_health(&c, &s, idle).await;
    assert!(
        generated(&h) - before < 4 * budget,
        "the engine stopped working for gone clients: {h}"
    );
    eprintln!(
        "tokens generated for clients that went away: {}",
        generated(&h)
    );
    let (status, _) = post(&c, &u, &ok_chat()).await;
    assert_eq!(status, 200);
}
