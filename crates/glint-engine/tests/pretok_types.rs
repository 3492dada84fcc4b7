//! Each supported `tokenizer.ggml.pre` type against Hugging Face `tokenizers` 0.23.3 configured
//! like the original model's tokenizer.json (fixtures/make_pretok_fixtures.py): the tokenizer is
//! rebuilt from vocabulary + merges + pre name, as from a GGUF, and must give HF's ids.

use std::path::Path;

use glint_engine::tokenizer::{token_type, Tokenizer, TokenizerSpec};
use serde_json::Value;

#[test]
fn glm4_llama3_and_deepseek3_pre_tokenizers_match_hf() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer/pretok_cases.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let types = all["types"].as_object().unwrap();
    assert_eq!(types.len(), 3);
    for (pre, t) in types {
        let strs = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        let tokens = strs(&t["tokens"]);
        let special = strs(&t["special"]);
        let token_types = tokens
            .iter()
            .map(|s| {
                if special.contains(s) {
                    token_type::CONTROL
                } else {
                    token_type::NORMAL
                }
            })
            .collect();
        let tok = Tokenizer::from_spec(TokenizerSpec {
            model: "gpt2".into(),
            pre: pre.clone(),
            tokens,
            merges: strs(&t["merges"]),
            token_types,
            ..Default::default()
        })
        .unwrap();
        for case in t["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(tok.encode(text).unwrap(), want, "{pre}: {text:?}");
            assert_eq!(tok.decode(&want).unwrap(), text, "{pre}: decode {text:?}");
        }
    }
}
