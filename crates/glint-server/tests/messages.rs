//! `POST /v1/messages` (Anthropic's Messages API): streamed and non-streamed answers agree, and
//! both equal `/v1/chat/completions`' answer for the same conversation at temperature 0
//! (thinking blocks = `reasoning_content`, text = `content`); stop sequences; bad input gets
//! Anthropic's error shape.

mod common;

use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// `(event name, data)` of every SSE event of a streamed `/v1/messages` answer.
async fn stream_events(c: &reqwest::Client, u: &str, body: &Value) -> Vec<(String, Value)> {
    let r = c.post(u).json(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut raw = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        raw.extend_from_slice(&b.unwrap());
    }
    let text = String::from_utf8(raw).unwrap();
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut lines = e.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["type"], name, "the data's type names its event");
            (name.to_string(), v)
        })
        .collect()
}

/// Rebuilds the message from stream events, checking their order.
fn assemble(events: &[(String, Value)]) -> Value {
    assert_eq!(events[0].0, "message_start", "{events:?}");
    let mut msg = events[0].1["message"].clone();
    assert_eq!(msg["content"], json!([]));
    let mut open: Option<usize> = None;
    let mut blocks: Vec<Value> = Vec::new();
    let n = events.len();
    for (name, v) in &events[1..n - 2] {
        let i = v["index"].as_u64().unwrap() as usize;
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(open, None, "a block opens only after the last closed");
                assert_eq!(i, blocks.len());
                blocks.push(v["content_block"].clone());
                open = Some(i);
            }
            "content_block_delta" => {
                assert_eq!(open, Some(i));
                let d = &v["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        let t = blocks[i]["text"].as_str().unwrap().to_string();
                        blocks[i]["text"] = (t + d["text"].as_str().unwrap()).into();
                    }
                    "thinking_delta" => {
                        let t = blocks[i]["thinking"].as_str().unwrap().to_string();
                        blocks[i]["thinking"] = (t + d["thinking"].as_str().unwrap()).into();
                    }
                    other => panic!("delta type {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(open, Some(i));
                open = None;
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(open, None, "every block closed");
    let (md, ms) = (&events[n - 2], &events[n - 1]);
    assert_eq!(
        (md.0.as_str(), ms.0.as_str()),
        ("message_delta", "message_stop")
    );
    msg["content"] = blocks.into();
    msg["stop_reason"] = md.1["delta"]["stop_reason"].clone();
    msg["stop_sequence"] = md.1["delta"]["stop_sequence"].clone();
    msg["usage"]["output_tokens"] = md.1["usage"]["output_tokens"].clone();
    msg
}

fn block_text(msg: &Value, kind: &str) -> String {
    let key = if kind == "thinking" {
        "thinking"
    } else {
        "text"
    };
    msg["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == kind)
        .map(|b| b[key].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_equal_chat_completions_streamed_or_not() {
    let s = start(config()).await;
    let c = client();
    let mu = url(&s, "/v1/messages");
    let cu = url(&s, "/v1/chat/completions");
    let convo = [
        ("user", "Hello there."),
        ("assistant", "Hi! How can I help?"),
        ("user", "Tell me about dogs."),
    ];
    for (thinking, max) in [(false, 24u64), (true, 24), (false, 400)] {
        let mut body = json!({
            "model": "glm5-tiny",
            "max_tokens": max,
            "system": "You are terse.",
            "messages": convo.iter().map(|(r, t)| json!({"role": r, "content": [{"type": "text", "text": t}]})).collect::<Vec<_>>(),
            "temperature": 0,
        });
        if thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        }
        let (status, m) = post(&c, &mu, &body).await;
        assert_eq!(status, 200, "{m}");
        assert_eq!(m["type"], "message");
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["model"], "glm5-tiny");
        assert!(m["id"].as_str().unwrap().starts_with("msg_"));

        // The streamed answer is the same message.
        body["stream"] = true.into();
        let events = stream_events(&c, &mu, &body).await;
        let mut streamed = assemble(&events);
        streamed["id"] = m["id"].clone();
        assert_eq!(streamed, m, "thinking {thinking}: streamed = non-streamed");

        // And the same as chat completions for the conversation.
        let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
        messages.extend(convo.iter().map(|(r, t)| json!({"role": r, "content": t})));
        let (status, v) = post(
            &c,
            &cu,
            &json!({
                "messages": messages, "max_tokens": max, "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": thinking},
            }),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let ch = &v["choices"][0];
        assert_eq!(
            block_text(&m, "text"),
            ch["message"]["content"].as_str().unwrap()
        );
        assert_eq!(
            block_text(&m, "thinking"),
            ch["message"]["reasoning_content"].as_str().unwrap_or("")
        );
        let want = match ch["finish_reason"].as_str().unwrap() {
            "length" => "max_tokens",
            _ => "end_turn",
        };
        assert_eq!(m["stop_reason"], want);
        assert!(m["stop_sequence"].is_null());
        assert_eq!(m["usage"]["input_tokens"], v["usage"]["prompt_tokens"]);
        assert_eq!(m["usage"]["output_tokens"], v["usage"]["completion_tokens"]);
    }
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sequences_end_the_message() {
    let s = start(config()).await;
    let c = client();
    let mu = url(&s, "/v1/messages");
    let base = json!({
        "model": "glm5-tiny", "max_tokens": 40, "temperature": 0,
        "messages": [{"role": "user", "content": "Write a long story."}],
    });
    let (_, full) = post(&c, &mu, &base).await;
    let text = block_text(&full, "text");
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 12, "too short to cut: {text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let before = &text[..text.find(&stop).unwrap()];
    for stream in [false, true] {
        let mut b = base.clone();
        b["stop_sequences"] = json!(["\u{1}never", stop]);
        let m = if stream {
            b["stream"] = true.into();
            assemble(&stream_events(&c, &mu, &b).await)
        } else {
            post(&c, &mu, &b).await.1
        };
        assert_eq!(block_text(&m, "text"), before, "stream {stream}");
        assert_eq!(m["stop_reason"], "stop_sequence");
        assert_eq!(m["stop_sequence"], stop.as_str());
    }
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_get_anthropic_errors() {
    let mut cfg = config();
    cfg.api_key = Some("k3y".into());
    let s = start(cfg).await;
    let c = client();
    let mu = url(&s, "/v1/messages");
    let ok = json!({"model": "glm5-tiny", "max_tokens": 4,
                    "messages": [{"role": "user", "content": "Hi"}]});
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        if v.is_null() {
            b.as_object_mut().unwrap().remove(k);
        } else {
            b[k] = v;
        }
        serde_json::to_vec(&b).unwrap()
    };
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "invalid_request_error"),
        (b"\xff\xfe".to_vec(), 400, "invalid_request_error"),
        (b"[]".to_vec(), 400, "invalid_request_error"),
        (
            with("max_tokens", Value::Null),
            400,
            "invalid_request_error",
        ),
        (with("max_tokens", json!(0)), 400, "invalid_request_error"),
        (
            with("max_tokens", json!(100000)),
            400,
            "invalid_request_error",
        ),
        (with("max_tokens", json!("4")), 400, "invalid_request_error"),
        (with("model", Value::Null), 400, "invalid_request_error"),
        (with("model", json!("claude-3")), 404, "not_found_error"),
        (with("messages", json!([])), 400, "invalid_request_error"),
        (
            with("messages", json!([{"role": "system", "content": "x"}])),
            400,
            "invalid_request_error",
        ),
        (
            with("messages", json!([{"role": "user"}])),
            400,
            "invalid_request_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "image"}]}]),
            ),
            400,
            "invalid_request_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "text"}]}]),
            ),
            400,
            "invalid_request_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
            ),
            400,
            "invalid_request_error",
        ),
        (
            with("temperature", json!(1.5)),
            400,
            "invalid_request_error",
        ),
        (with("top_p", json!(0)), 400, "invalid_request_error"),
        (with("top_k", json!(-1)), 400, "invalid_request_error"),
        (
            with("stop_sequences", json!([""])),
            400,
            "invalid_request_error",
        ),
        (
            with("stop_sequences", json!("x")),
            400,
            "invalid_request_error",
        ),
        (with("system", json!(5)), 400, "invalid_request_error"),
        (
            with("tool_choice", json!({"type": "any"})),
            400,
            "invalid_request_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]),
            ),
            400,
            "invalid_request_error",
        ),
        (
            with("thinking", json!({"type": "sometimes"})),
            400,
            "invalid_request_error",
        ),
        (
            with("tools", json!([{"name": "f"}])),
            400,
            "invalid_request_error",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "x ".repeat(600)}]),
            ),
            400,
            "invalid_request_error",
        ),
    ];
    for (i, (body, status, kind)) in cases.into_iter().enumerate() {
        let r = c
            .post(&mu)
            .header("x-api-key", "k3y")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "case {i}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error", "case {i}: {v}");
        assert_eq!(v["error"]["type"], kind, "case {i}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // The key: x-api-key (Anthropic's header) or a bearer token; none is a 401 in this shape.
    let r = c.post(&mu).json(&ok).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let r = c
        .post(&mu)
        .bearer_auth("k3y")
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // Nothing bad reached the engine, and it still serves.
    let r = c
        .post(&mu)
        .header("x-api-key", "k3y")
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    wait_health(&c, &s, idle).await;
}
