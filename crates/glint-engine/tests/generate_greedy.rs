//! The generation loop (prefill + cached single-token decode) reproduces transformers' greedy
//! continuation (`greedy_new_tokens` in fixtures/glm5/reference.json: 32 argmax steps, full
//! recompute per step, end-of-generation tokens do not stop it).

// The fixture helpers of the model crate's tests (one copy for both crates).
#[path = "../../glm5-model/tests/common/mod.rs"]
mod common;

use common::{case_gguf, ids_of, reference};
use glint_engine::generate::{generate, GenerateParams, StopReason};
use glint_engine::sampler::SamplerConfig;
use glint_engine::tokenizer::Tokenizer;
use glint_gguf::Gguf;
use glm5_model::{CpuBackend, Glm5};

#[test]
fn greedy_generation_matches_transformers() {
    let reference = reference();
    for name in ["short", "chat"] {
        let case = common::case(&reference, name);
        let gguf = Gguf::open(case_gguf(&reference, case)).unwrap();
        let tok = Tokenizer::from_metadata(gguf.metadata()).unwrap();
        let prompt = ids_of(&case["ids"]);
        let want = ids_of(&case["greedy_new_tokens"]);
        // Our tokenizer must agree with HF on the prompt too.
        assert_eq!(tok.encode(case["text"].as_str().unwrap()).unwrap(), prompt);

        let mut model = Glm5::load(&gguf, CpuBackend::new(), prompt.len() + want.len()).unwrap();
        let params = GenerateParams {
            max_new_tokens: want.len(),
            sampler: SamplerConfig::greedy(),
            stop_at_eog: false,
            // transformers' `greedy_text` is `decode` without skip_special_tokens.
            print_special: true,
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
