//! The generation loop (prefill + cached single-token decode) reproduces transformers' greedy
//! continuation (`greedy_new_tokens` in fixtures/glm5/reference.json: 32 argmax steps, full
//! recompute per step, end-of-generation tokens do not stop it).

use std::path::{Path, PathBuf};

use glint_gguf::Gguf;
use glm5_model::generate::{generate, GenerateParams, StopReason};
use glm5_model::sampler::SamplerConfig;
use glm5_model::tokenizer::Tokenizer;
use glm5_model::{CpuBackend, Glm5};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/glm5")
        .join(name)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn greedy_generation_matches_transformers() {
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap();
    for name in ["short", "chat"] {
        let case = reference["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        let model_key = case["model"].as_str().unwrap();
        let path = fixture(reference["models"][model_key]["gguf"].as_str().unwrap());
        let gguf = Gguf::open(&path).unwrap();
        let tok = Tokenizer::from_metadata(gguf.metadata()).unwrap();
        let prompt = ids(&case["ids"]);
        let want = ids(&case["greedy_new_tokens"]);
        // Our tokenizer must agree with HF on the prompt too.
        assert_eq!(tok.encode(case["text"].as_str().unwrap()).unwrap(), prompt);

        let mut model = Glm5::load(&gguf, CpuBackend::new(), prompt.len() + want.len()).unwrap();
        let params = GenerateParams {
            max_new_tokens: want.len(),
            sampler: SamplerConfig::greedy(),
            stop_at_eog: false,
        };
        let mut streamed = String::new();
        let g = generate(&mut model, &tok, &prompt, &params, |s| streamed.push_str(s)).unwrap();
        assert_eq!(g.tokens, want, "case {name}");
        assert_eq!(g.stop, StopReason::MaxTokens);
        assert_eq!(g.decode_steps, want.len() - 1);
        assert_eq!(streamed, g.text);
        assert_eq!(g.text, case["greedy_text"].as_str().unwrap(), "case {name}");

        // With stopping enabled, generation ends at the first end-of-generation token.
        if let Some(pos) = want.iter().position(|&t| tok.is_eog(t)) {
            let mut model =
                Glm5::load(&gguf, CpuBackend::new(), prompt.len() + want.len()).unwrap();
            let p = GenerateParams {
                stop_at_eog: true,
                ..params.clone()
            };
            let g = generate(&mut model, &tok, &prompt, &p, |_| {}).unwrap();
            assert_eq!(g.tokens, want[..=pos].to_vec());
            assert_eq!(g.stop, StopReason::EndOfGeneration(want[pos]));
        }
    }
}
