//! The response builder fed scripted token streams (no model sampling): what a tool-calling
//! answer becomes through the real parse → template → [`Responder`] → JSON / SSE path, streamed
//! and not, with the tags arriving as GLM's special tokens or cut into plain-text tokens.

use super::*;
use glint_engine::scheduler::SchedulerConfig;

fn config() -> ServerConfig {
    ServerConfig {
        model: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/glm5/glm5-tiny-f32.gguf"),
        host: "127.0.0.1".into(),
        port: 0,
        model_id: Some("glm5-tiny".into()),
        api_key: None,
        scheduler: SchedulerConfig {
            max_tokens: 32,
            max_seqs: 4,
            n_blocks: 4 * 64,
            block_size: 16,
            max_ctx: 1024,
            cache: Default::default(),
            prefix_caching: true,
        },
        queue: 8,
        max_body_bytes: 64 << 10,
        body_timeout: std::time::Duration::from_secs(30),
        device: Default::default(),
        parallel: Default::default(),
    }
}

fn request(stream: bool, tool_choice: Value) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "now"}},
        ],
        "tool_choice": tool_choice,
        "stream": stream,
        "max_tokens": 100,
    })
}

/// Builds the response to `body` with the engine's part replaced by `tokens` (then the
/// end-of-turn token `stop`); returns the response body's text.
async fn respond(st: &Arc<AppState>, body: &Value, tokens: &[u32], stop: u32) -> String {
    respond_with(st, prepare_chat, body, tokens, stop).await
}

async fn respond_with(
    st: &Arc<AppState>,
    prepare: fn(&AppState, &[u8]) -> Result<Prepared, ApiError>,
    body: &Value,
    tokens: &[u32],
    stop: u32,
) -> String {
    let prepared = prepare(st, body.to_string().as_bytes()).expect("valid request");
    let (tx, rx) = mpsc::channel(tokens.len() + 2);
    for &t in tokens {
        tx.send(Out::Token {
            token: t,
            logprobs: None,
        })
        .await
        .unwrap();
    }
    tx.send(Out::Finished(Finish::Stop(stop))).await.unwrap();
    let n = prepared.gen.prompt.len();
    let resp = Responder::new(st.clone(), prepared, n, rx, 7, 0);
    let r = if resp.settings.stream {
        stream_response(resp)
    } else {
        resp.collect().await
    };
    assert_eq!(r.status(), StatusCode::OK);
    let b = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    String::from_utf8(b.to_vec()).unwrap()
}

/// A streamed chat response assembled as OpenAI's client does: content and reasoning
/// concatenated, tool calls accumulated by index (the first delta of a call must carry its
/// id, type and name, later ones only argument text). Returns the message and finish reason.
fn assemble_stream(sse: &str) -> (Value, String) {
    let (mut content, mut reasoning, mut reason) = (String::new(), String::new(), String::new());
    let mut calls: Vec<Value> = Vec::new();
    let events: Vec<&str> = sse.split("\n\n").filter(|e| !e.trim().is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
        let ch = &v["choices"][0];
        let d = &ch["delta"];
        if let Some(s) = d["content"].as_str() {
            content.push_str(s);
        }
        if let Some(s) = d["reasoning_content"].as_str() {
            reasoning.push_str(s);
        }
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            let frag = tc["function"]["arguments"].as_str().unwrap();
            if i == calls.len() {
                assert!(tc["id"].is_string() && tc["type"] == "function", "{tc}");
                assert_eq!(frag, "", "the first delta of a call carries its name: {tc}");
                calls.push(json!({"id": tc["id"], "type": "function",
                    "function": {"name": tc["function"]["name"], "arguments": ""}}));
            } else {
                assert!(tc.get("id").is_none() && tc["function"].get("name").is_none());
                let a = calls[i]["function"]["arguments"]
                    .as_str()
                    .unwrap()
                    .to_string();
                calls[i]["function"]["arguments"] = (a + frag).into();
            }
        }
        if let Some(r) = ch["finish_reason"].as_str() {
            reason = r.into();
        }
    }
    let mut m = json!({
        "role": "assistant",
        "content": if content.is_empty() && !calls.is_empty() { Value::Null } else { content.into() },
        "reasoning_content": if reasoning.is_empty() { Value::Null } else { reasoning.into() },
    });
    if !calls.is_empty() {
        m["tool_calls"] = calls.into();
    }
    (m, reason)
}

/// Token ids of `text` two ways: as the tokenizer encodes it (each tag one special token),
/// and a character at a time (every tag cut into plain-text tokens).
fn scripts(st: &AppState, text: &str) -> [Vec<u32>; 2] {
    let whole = st.tokenizer.encode(text).unwrap();
    let mut chars = Vec::new();
    for c in text.chars() {
        chars.extend(st.tokenizer.encode(c.encode_utf8(&mut [0; 4])).unwrap());
    }
    assert!(whole.len() < chars.len());
    [whole, chars]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_tool_calls_stream_as_openai_deltas_and_equal_the_message() {
    let s = start(config()).await.unwrap();
    let st = s.state.clone();
    let eos = st.tokenizer.token_to_id("<|user|>").unwrap();
    // (answer text, tool_choice, the message the client must see, finish reason)
    let cases = [
        (
            "Checking.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key>\
             <arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value>\
             </tool_call><tool_call>now</tool_call>",
            json!("auto"),
            json!({"role": "assistant", "content": "Sure.", "reasoning_content": "Checking.",
                   "tool_calls": [
                {"id": "call_0000000000000007_0_0", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":3}"}},
                {"id": "call_0000000000000007_0_1", "type": "function",
                 "function": {"name": "now", "arguments": "{}"}}]}),
            "tool_calls",
        ),
        (
            // A call from inside the reasoning block (no `</think>`): the reasoning ends
            // there, the call is a call.
            "Let me check <tool_call>now</tool_call>",
            json!("auto"),
            json!({"role": "assistant", "content": null, "reasoning_content": "Let me check ",
                   "tool_calls": [{"id": "call_0000000000000007_0_0", "type": "function",
                                   "function": {"name": "now", "arguments": "{}"}}]}),
            "tool_calls",
        ),
        (
            // An unknown function: content, tags and all; the answer is not a call.
            "</think><tool_call>rm<arg_key>path</arg_key><arg_value>/</arg_value></tool_call>",
            json!("auto"),
            json!({"role": "assistant",
                   "content": "<tool_call>rm<arg_key>path</arg_key><arg_value>/</arg_value></tool_call>",
                   "reasoning_content": null}),
            "stop",
        ),
        (
            // A named function: the prompt ends with `<tool_call>get_weather`, the model
            // writes the arguments.
            "<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
            json!({"type": "function", "function": {"name": "get_weather"}}),
            json!({"role": "assistant", "content": null, "reasoning_content": null,
                   "tool_calls": [
                {"id": "call_0000000000000007_0_0", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]}),
            "tool_calls",
        ),
    ];
    for (text, choice, want, want_reason) in cases {
        for tokens in scripts(&st, text) {
            let body = respond(&st, &request(false, choice.clone()), &tokens, eos).await;
            let v: Value = serde_json::from_str(&body).unwrap();
            let c = &v["choices"][0];
            assert_eq!(c["message"], want, "{text:?}");
            assert_eq!(c["finish_reason"], want_reason, "{text:?}");
            let sse = respond(&st, &request(true, choice.clone()), &tokens, eos).await;
            let (m, reason) = assemble_stream(&sse);
            assert_eq!(m, want, "{text:?} streamed");
            assert_eq!(reason, want_reason);
            assert!(
                !sse.contains("arg_key") || want["tool_calls"].is_null(),
                "{sse}"
            );
        }
    }
    // The prompt of a named choice ends with the call's opening (after the reasoning block).
    let p = prepare_chat(
        &st,
        request(
            false,
            json!({"type": "function", "function": {"name": "now"}}),
        )
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let text = st.tokenizer.decode_with(&p.gen.prompt, true).unwrap();
    assert!(
        text.ends_with("<|assistant|><think></think><tool_call>now"),
        "{text}"
    );
    drop(st);
    s.shutdown().await.unwrap();
}

/// A streamed `/v1/messages` answer assembled as Anthropic's SDK does: blocks by index, text
/// and thinking deltas appended, a tool_use block's `partial_json` pieces parsed at its end.
fn assemble_anthropic(sse: &str) -> (Vec<Value>, String) {
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_text: Vec<String> = Vec::new();
    let mut stop_reason = String::new();
    let mut open: Option<usize> = None;
    for e in sse.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let mut lines = e.lines();
        let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
        let v: Value =
            serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["type"], name);
        match name {
            "content_block_start" => {
                let i = v["index"].as_u64().unwrap() as usize;
                assert_eq!(
                    (i, open),
                    (blocks.len(), None),
                    "blocks open in order, one at a time"
                );
                blocks.push(v["content_block"].clone());
                json_text.push(String::new());
                open = Some(i);
            }
            "content_block_delta" => {
                let i = v["index"].as_u64().unwrap() as usize;
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
                    "input_json_delta" => {
                        json_text[i].push_str(d["partial_json"].as_str().unwrap())
                    }
                    k => panic!("delta type {k}"),
                }
            }
            "content_block_stop" => {
                let i = v["index"].as_u64().unwrap() as usize;
                assert_eq!(open, Some(i));
                if blocks[i]["type"] == "tool_use" {
                    blocks[i]["input"] = serde_json::from_str(&json_text[i]).unwrap();
                }
                open = None;
            }
            "message_delta" => stop_reason = v["delta"]["stop_reason"].as_str().unwrap().into(),
            "message_start" | "message_stop" => {}
            k => panic!("event {k}"),
        }
    }
    (blocks, stop_reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_tool_use_on_messages_streams_as_anthropic_events_and_equals_the_message() {
    let s = start(config()).await.unwrap();
    let st = s.state.clone();
    let eos = st.tokenizer.token_to_id("<|user|>").unwrap();
    let body = |stream: bool| {
        json!({
            "model": "glm5-tiny", "max_tokens": 100, "stream": stream,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"}}}}],
        })
    };
    let text = "Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>\
                <arg_key>days</arg_key><arg_value>3</arg_value></tool_call>";
    let want = json!([
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "toolu_0000000000000007_0_0", "name": "get_weather",
         "input": {"city": "Paris", "days": 3}},
    ]);
    for tokens in scripts(&st, text) {
        let v: Value = serde_json::from_str(
            &respond_with(&st, prepare_messages, &body(false), &tokens, eos).await,
        )
        .unwrap();
        assert_eq!(v["content"], want);
        assert_eq!(v["stop_reason"], "tool_use");
        let sse = respond_with(&st, prepare_messages, &body(true), &tokens, eos).await;
        let (blocks, stop) = assemble_anthropic(&sse);
        assert_eq!(Value::Array(blocks), want, "{sse}");
        assert_eq!(stop, "tool_use");
    }
    drop(st);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_tool_history_renders_as_the_chat_completions_equivalent() {
    // Chat's rendering of tools and tool turns equals transformers' (tests/server.rs, the
    // fixture's tools case); Anthropic's blocks for the same conversation give the same prompt.
    let s = start(config()).await.unwrap();
    let st = s.state.clone();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let chat = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "t1",
                "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "21 C"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "description": "weather",
                   "parameters": schema}}],
        "chat_template_kwargs": {"enable_thinking": false},
        "max_tokens": 8,
    });
    let messages = json!({
        "model": "glm5-tiny", "max_tokens": 8, "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "21 C"},
                {"type": "text", "text": "Thanks"}]},
        ],
        "tools": [{"name": "w", "description": "weather", "input_schema": schema}],
    });
    let a = prepare_chat(&st, chat.to_string().as_bytes()).unwrap();
    let b = prepare_messages(&st, messages.to_string().as_bytes()).unwrap();
    let text = st.tokenizer.decode_with(&a.gen.prompt, true).unwrap();
    assert!(
        text.contains("<tools>") && text.contains("<tool_response>21 C"),
        "{text}"
    );
    assert_eq!(a.gen.prompt, b.gen.prompt, "{text}");
    drop(st);
    s.shutdown().await.unwrap();
}
