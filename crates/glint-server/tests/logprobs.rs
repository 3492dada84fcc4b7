//! `logprobs` / `top_logprobs`: the values are the log-softmax of the model's raw logits at
//! each sampled position, checked against a log-softmax computed here from `glm5_model`'s own
//! logits for the same tokens (one sequence, no scheduler: an independent path through the
//! model); greedy picks the top-1; streamed logprobs concatenate to the non-streamed ones.

mod common;

use common::*;
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};
use serde_json::{json, Value};

/// Log-softmax (f64) of each row the model gives for `prompt ++ gen[..len-1]` at the positions
/// that sampled `gen`.
fn reference(prompt: &[u32], gen: &[u32]) -> Vec<Vec<f64>> {
    let gguf = Gguf::open(model_path()).unwrap();
    let mut all = prompt.to_vec();
    all.extend_from_slice(&gen[..gen.len() - 1]);
    let mut m = Glm5::load(&gguf, CpuBackend::new(), all.len() + 1).unwrap();
    let logits = m.forward(&all, 0).unwrap();
    let nv = m.config().n_vocab;
    (0..gen.len())
        .map(|j| {
            let row = &logits[(prompt.len() - 1 + j) * nv..(prompt.len() + j) * nv];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max
                + row
                    .iter()
                    .map(|&x| (x as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            row.iter().map(|&x| x as f64 - lse).collect()
        })
        .collect()
}

/// Token ids of `lsm` sorted by logprob, best first (ties: lower id first).
fn ranked(lsm: &[f64]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..lsm.len()).collect();
    ids.sort_by(|&a, &b| lsm[b].partial_cmp(&lsm[a]).unwrap().then(a.cmp(&b)));
    ids
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_metadata(Gguf::open(model_path()).unwrap().metadata()).unwrap()
}

fn text_of(tok: &Tokenizer, id: usize) -> String {
    String::from_utf8_lossy(tok.piece(id as u32, true).unwrap()).into_owned()
}

const TOL: f64 = 1e-4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_are_the_models_log_softmax() {
    let s = start(config()).await;
    let c = client();
    let tok = tokenizer();
    let u = url(&s, "/v1/chat/completions");
    let body = json!({
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0, "max_tokens": 12, "ignore_eos": true,
        "logprobs": true, "top_logprobs": 3, "return_token_ids": true,
    });
    let (status, v) = post(&c, &u, &body).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    let gen = ids(&choice["token_ids"]);
    let prompt = ids(&v["prompt_token_ids"]);
    let content = choice["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), gen.len(), "one entry per generated token");
    let want = reference(&prompt, &gen);
    for (j, e) in content.iter().enumerate() {
        let lp = e["logprob"].as_f64().unwrap();
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{e}");
        // Greedy: the chosen token is the top-1, with the same logprob.
        assert_eq!(e["token"], top[0]["token"], "position {j}: {e}");
        assert_eq!(e["logprob"], top[0]["logprob"], "position {j}");
        assert_eq!(e["token"], text_of(&tok, gen[j] as usize).as_str());
        assert_eq!(
            e["bytes"],
            json!(tok.piece(gen[j], true).unwrap().to_vec()),
            "bytes"
        );
        assert!(lp <= 0.0, "{lp}");
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "sorted: {lps:?}");
        let mass: f64 = lps.iter().map(|l| l.exp()).sum();
        assert!(mass <= 1.0 + 1e-6, "top-3 mass {mass}");
        // Against the model's own distribution.
        let r = &want[j];
        assert!(
            (lp - r[gen[j] as usize]).abs() < TOL,
            "{j}: {lp} vs {}",
            r[gen[j] as usize]
        );
        let best = ranked(r);
        assert_eq!(best[0], gen[j] as usize, "position {j}: greedy = argmax");
        for (k, t) in top.iter().enumerate() {
            let got = t["logprob"].as_f64().unwrap();
            assert!(
                (got - r[best[k]]).abs() < TOL,
                "{j}.{k}: {got} vs {}",
                r[best[k]]
            );
            assert_eq!(t["token"], text_of(&tok, best[k]).as_str(), "{j}.{k}");
        }
    }

    // Streamed: the chunks' logprobs concatenate to the same list.
    let mut sb = body.clone();
    sb["stream"] = true.into();
    sb.as_object_mut().unwrap().remove("return_token_ids");
    let chunks = post_stream(&c, &u, &sb).await;
    let streamed: Vec<Value> = chunks
        .iter()
        .flat_map(|ch| {
            ch["choices"][0]["logprobs"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(&streamed, content);

    // logprobs without alternatives; and off (null).
    let mut b = body.clone();
    b["top_logprobs"] = 0.into();
    let (_, v0) = post(&c, &u, &b).await;
    let c0 = v0["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(c0.len(), gen.len());
    for (a, e) in c0.iter().zip(content) {
        assert_eq!(a["logprob"], e["logprob"]);
        assert_eq!(a["top_logprobs"], json!([]));
    }
    let mut b = body.clone();
    b.as_object_mut().unwrap().remove("top_logprobs");
    b["logprobs"] = false.into();
    let (_, voff) = post(&c, &u, &b).await;
    assert!(voff["choices"][0]["logprobs"].is_null());
    wait_health(&c, &s, idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_logprobs_in_the_legacy_shape() {
    let s = start(config()).await;
    let c = client();
    let tok = tokenizer();
    let u = url(&s, "/v1/completions");
    let prompt = tok.encode_prompt("The dog was asleep.").unwrap();
    // Sampled (not greedy): the logprobs are still the model's, not the sampler's.
    let body = json!({
        "prompt": prompt, "max_tokens": 10, "ignore_eos": true, "logprobs": 2,
        "temperature": 1.3, "top_k": 5, "repetition_penalty": 1.3, "seed": 7,
        "return_token_ids": true,
    });
    let (status, v) = post(&c, &u, &body).await;
    assert_eq!(status, 200, "{v}");
    let ch = &v["choices"][0];
    let gen = ids(&ch["token_ids"]);
    let lp = &ch["logprobs"];
    let want = reference(&prompt, &gen);
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), gen.len());
    let mut offset = 0;
    for j in 0..gen.len() {
        assert_eq!(tokens[j], text_of(&tok, gen[j] as usize).as_str());
        let got = lp["token_logprobs"][j].as_f64().unwrap();
        assert!((got - want[j][gen[j] as usize]).abs() < TOL, "{j}");
        let top = lp["top_logprobs"][j].as_object().unwrap();
        let best = ranked(&want[j]);
        assert!(!top.is_empty() && top.len() <= 2, "{top:?}");
        let t0 = &top[&text_of(&tok, best[0])];
        assert!((t0.as_f64().unwrap() - want[j][best[0]]).abs() < TOL);
        assert_eq!(lp["text_offset"][j], offset);
        offset += tokens[j].as_str().unwrap().chars().count();
    }
    let mut sb = body.clone();
    sb["stream"] = true.into();
    sb.as_object_mut().unwrap().remove("return_token_ids");
    let chunks = post_stream(&c, &u, &sb).await;
    let mut joined =
        json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    for chunk in &chunks {
        let l = &chunk["choices"][0]["logprobs"];
        if l.is_null() {
            continue;
        }
        for k in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
            let a = l[k].as_array().unwrap().clone();
            joined[k].as_array_mut().unwrap().extend(a);
        }
    }
    assert_eq!(&joined, lp);
}
