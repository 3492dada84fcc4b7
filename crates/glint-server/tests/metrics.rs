//! `GET /metrics`: after a known set of requests, every counter equals what the test sent and
//! what the responses' `usage` says was generated, the histograms count one first-token time
//! per request and one gap per later token, and the gauges show an idle engine.

mod common;

use std::collections::HashMap;

use common::*;
use serde_json::{json, Value};

/// `name{labels}` → value, from Prometheus' text format; checks every sample has HELP/TYPE.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut typed = Vec::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.push(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').unwrap();
        let name = key.split('{').next().unwrap();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| typed.iter().any(|t| t == b))
            .unwrap_or(name);
        assert!(typed.iter().any(|t| t == base), "no TYPE for {line}");
        out.insert(key.to_string(), value.parse().unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_equal_what_was_sent_and_generated() {
    let s = start(config()).await;
    let c = client();
    let chat = url(&s, "/v1/chat/completions");
    let comp = url(&s, "/v1/completions");
    let (mut prompt, mut generated, mut gaps) = (0u64, 0u64, 0u64);
    let mut reasons: HashMap<String, u64> = HashMap::new();
    let mut add = |u: &Value, reason: &str| {
        let (p, g) = (
            u["prompt_tokens"].as_u64().unwrap(),
            u["completion_tokens"].as_u64().unwrap(),
        );
        prompt += p;
        generated += g;
        gaps += g.saturating_sub(1);
        *reasons.entry(reason.to_string()).or_default() += 1;
    };
    for i in 0..3u64 {
        let body = json!({
            "messages": [{"role": "user", "content": format!("Question {i}: why?")}],
            "temperature": 0, "max_tokens": 5 + 4 * i,
        });
        let (status, v) = post(&c, &chat, &body).await;
        assert_eq!(status, 200, "{v}");
        add(
            &v["usage"],
            v["choices"][0]["finish_reason"].as_str().unwrap(),
        );
    }
    // Streamed, with usage.
    let body = json!({
        "messages": [{"role": "user", "content": "Stream this"}],
        "temperature": 0, "max_tokens": 9, "stream": true,
        "stream_options": {"include_usage": true},
    });
    let chunks = post_stream(&c, &chat, &body).await;
    let (_, _, reason) = chat_stream_text(&chunks);
    add(&chunks.last().unwrap()["usage"], &reason);
    for i in 0..2u64 {
        let body = json!({"prompt": format!("Once upon a time {i}"), "temperature": 0,
                          "max_tokens": 6 + i, "ignore_eos": true});
        let (status, v) = post(&c, &comp, &body).await;
        assert_eq!(status, 200, "{v}");
        add(
            &v["usage"],
            v["choices"][0]["finish_reason"].as_str().unwrap(),
        );
    }
    let n_requests = 6u64;
    // Refused requests: counted by status, never reaching the engine.
    let (status, _) = post(&c, &chat, &json!({"messages": []})).await;
    assert_eq!(status, 400);
    let (status, _) = post(&c, &chat, &json!({"messages": [], "temperature": 9})).await;
    assert_eq!(status, 400);
    let r = c.get(url(&s, "/nope")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);

    wait_health(&c, &s, idle).await;
    let r = c.get(url(&s, "/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = r.text().await.unwrap();
    let m = parse(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));

    assert_eq!(get("glint_prompt_tokens_total"), prompt as f64, "{text}");
    assert_eq!(get("glint_generation_tokens_total"), generated as f64);
    let ttft = "glint_time_to_first_token_seconds";
    let tpot = "glint_time_per_output_token_seconds";
    assert_eq!(get(&format!("{ttft}_count")), n_requests as f64);
    assert_eq!(get(&format!("{tpot}_count")), gaps as f64);
    for h in [ttft, tpot] {
        // Buckets are cumulative, end at +Inf = count, and the sum is positive.
        let mut buckets: Vec<(f64, f64)> = m
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(&format!("{h}_bucket{{le=\""))?;
                let le = le.strip_suffix("\"}")?;
                Some((
                    if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    },
                    *v,
                ))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        assert!(buckets.len() > 10, "{h}: {buckets:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{h}: {buckets:?}"
        );
        assert_eq!(buckets.last().unwrap().1, get(&format!("{h}_count")));
        assert!(get(&format!("{h}_sum")) > 0.0);
    }
    let status = |route: &str, code: u16| {
        m.get(&format!(
            "glint_http_responses_total{{route=\"{route}\",status=\"{code}\"}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    assert_eq!(status("/v1/chat/completions", 200), 4.0);
    assert_eq!(status("/v1/completions", 200), 2.0);
    assert_eq!(status("/v1/chat/completions", 400), 2.0);
    assert_eq!(status("other", 404), 1.0);
    for (reason, n) in &reasons {
        assert_eq!(
            get(&format!(
                "glint_requests_finished_total{{reason=\"{reason}\"}}"
            )),
            *n as f64,
            "{reason}"
        );
    }
    // Idle: nothing queued or running, every block free.
    assert_eq!(get("glint_queue_depth"), 0.0);
    assert_eq!(get("glint_running_sequences"), 0.0);
    assert_eq!(get("glint_cache_blocks_used"), 0.0);
    assert_eq!(get("glint_cache_blocks_free"), (16 * 32) as f64);
    assert_eq!(get("glint_cache_blocks_total"), (16 * 32) as f64);
    assert_eq!(get("glint_engine_up"), 1.0);
    assert!(get("glint_engine_steps_total") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_is_counted_as_cancelled() {
    let s = start(config()).await;
    let c = client();
    let body = json!({
        "messages": [{"role": "user", "content": "Go on forever"}],
        "temperature": 0, "max_tokens": 400, "ignore_eos": true, "stream": true,
    });
    let r = c
        .post(url(&s, "/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut st = r.bytes_stream();
    use futures_util::StreamExt;
    let _ = st.next().await;
    drop(st);
    wait_health(&c, &s, idle).await;
    // The server learns of the hang-up when its next write fails, which may come after the
    // engine went idle: poll (bounded) until the request is counted.
    let mut text = String::new();
    for _ in 0..200 {
        text = c
            .get(url(&s, "/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if parse(&text).contains_key("glint_requests_finished_total{reason=\"cancelled\"}") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let m = parse(&text);
    assert_eq!(
        m.get("glint_requests_finished_total{reason=\"cancelled\"}"),
        Some(&1.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_prompt_prefix_is_served_from_the_prefix_cache() {
    let s = start(config()).await;
    let c = client();
    let comp = url(&s, "/v1/completions");
    let get = |m: &HashMap<String, f64>, k: &str| m[k];
    let metrics = || async {
        parse(
            &c.get(url(&s, "/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        )
    };
    // A long system-prompt-like text, then two different endings.
    let prefix = "You are a careful assistant who answers every question in one short line. ";
    let n = 5u64;
    let mut texts = Vec::new();
    let mut prompts = Vec::new();
    for (i, end) in [
        "What is two and two?",
        "What is two and two?",
        "Name a colour.",
    ]
    .iter()
    .enumerate()
    {
        let before = metrics().await;
        let body = json!({"prompt": format!("{prefix}{end}"), "temperature": 0,
                          "max_tokens": n, "ignore_eos": true});
        let (status, v) = post(&c, &comp, &body).await;
        assert_eq!(status, 200, "{v}");
        wait_health(&c, &s, idle).await;
        let after = metrics().await;
        let p = v["usage"]["prompt_tokens"].as_u64().unwrap();
        let hit = get(&after, "glint_prefix_cache_hit_tokens_total")
            - get(&before, "glint_prefix_cache_hit_tokens_total");
        let computed = get(&after, "glint_computed_tokens_total")
            - get(&before, "glint_computed_tokens_total");
        // Whatever was found in the cache is not computed: the rest of the prompt and one
        // step per generated token after the first.
        assert_eq!(computed, (p - hit as u64 + n - 1) as f64, "request {i}");
        match i {
            0 => assert_eq!(hit, 0.0, "a cold cache"),
            // The same prompt: every full block of 16 before its last token.
            1 => assert_eq!(hit, ((p - 1) / 16 * 16) as f64),
            // Another ending: at least the blocks of the shared text (same tokens up to
            // where the endings differ).
            _ => assert!(hit >= 16.0, "{hit}"),
        }
        texts.push(v["choices"][0]["text"].as_str().unwrap().to_string());
        prompts.push(p);
        assert!(get(&after, "glint_prefix_cache_blocks") > 0.0);
        assert_eq!(get(&after, "glint_cache_blocks_used"), 0.0);
    }
    assert_eq!(texts[0], texts[1], "a cached prefix changes no answer");
}
