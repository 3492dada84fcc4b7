//! Tokenizer and chat template built from the fixture GGUF against Hugging Face: token ids from
//! `tokenizers` 0.23.3 and prompts from `transformers.apply_chat_template` 5.24.0, recorded by
//! fixtures/make_glm5_fixtures.py in tokenizer_cases.json / chat_cases.json.

// The fixture helpers of the model crate's tests (one copy for both crates).
#[path = "../../glm5-model/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::{fixture_dir, ids_of};
use glint_engine::chat::ChatTemplate;
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    fixture_dir().join(name)
}

fn load_tokenizer() -> Tokenizer {
    let gguf = Gguf::open(fixture("glm5-tiny-f32.gguf")).unwrap();
    Tokenizer::from_metadata(gguf.metadata()).unwrap()
}

/// The case list, whether stored bare or under a `cases` key.
fn cases(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let list = match v {
        Value::Array(a) => a,
        Value::Object(mut o) => match o.remove("cases") {
            Some(Value::Array(a)) => a,
            _ => panic!("{name}: expected a list of cases"),
        },
        _ => panic!("{name}: expected a list of cases"),
    };
    assert!(!list.is_empty(), "{name} has no cases");
    list
}

#[test]
fn encode_and_decode_match_hf_tokenizers() {
    let tok = load_tokenizer();
    for case in cases("tokenizer_cases.json") {
        let text = case["text"].as_str().unwrap();
        let want = ids_of(&case["ids"]);
        let got = tok.encode(text).unwrap();
        assert_eq!(got, want, "encode({text:?})");
        let decoded = case["decoded"].as_str().unwrap();
        assert_eq!(tok.decode(&want).unwrap(), decoded, "decode of {text:?}");
        // Streaming one token at a time yields the same text.
        let mut s = tok.stream(true);
        let mut streamed = String::new();
        for &id in &want {
            streamed.push_str(&s.push(id).unwrap());
        }
        streamed.push_str(&s.finish());
        assert_eq!(streamed, decoded, "streamed decode of {text:?}");
    }
}

#[test]
fn special_ids_and_stop_set_come_from_the_gguf() {
    let tok = load_tokenizer();
    let gguf = Gguf::open(fixture("glm5-tiny-f32.gguf")).unwrap();
    let md = gguf.metadata();
    let mut want = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if md.get(key).is_some() {
            let id = md.get_u32(key).unwrap();
            if !want.contains(&id) {
                want.push(id);
            }
        }
    }
    assert!(!want.is_empty());
    assert_eq!(tok.eog_ids(), &want[..]);
    // GLM's end-of-text token is a single id, found by its text.
    let eot = tok.token_to_id("<|endoftext|>").unwrap();
    assert_eq!(tok.encode("<|endoftext|>").unwrap(), vec![eot]);
}

#[test]
fn chat_template_matches_transformers() {
    let tok = load_tokenizer();
    let src = tok
        .chat_template()
        .expect("fixture GGUF has a chat template");
    let name = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).map(str::to_string);
    let tmpl = ChatTemplate::new(src, name(tok.bos()), name(tok.eos())).unwrap();
    for case in cases("chat_cases.json") {
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), case["messages"].clone());
        ctx.insert(
            "add_generation_prompt".into(),
            case["add_generation_prompt"].clone(),
        );
        if let Some(kw) = case.get("kwargs").and_then(Value::as_object) {
            for (k, v) in kw {
                ctx.insert(k.clone(), v.clone());
            }
        }
        let name = case.get("name").and_then(Value::as_str).unwrap_or("?");
        let got = tmpl.render_json(&Value::Object(ctx)).unwrap();
        assert_eq!(got, case["rendered"].as_str().unwrap(), "case {name}");
        if let Some(ids) = case.get("ids") {
            assert_eq!(tok.encode(&got).unwrap(), ids_of(ids), "ids of case {name}");
        }
    }
}
