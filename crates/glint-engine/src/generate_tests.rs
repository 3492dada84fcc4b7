//! The loop is driven by a scripted model whose logits make the next token a known function of
//! the position, so the expected token stream, text, stop reason and step counts are known in
//! advance.

use super::*;
use crate::tokenizer::{token_type, TokenizerSpec};

/// Vocabulary: 0 "h", 1 "i", 2 "Ġ", 3 "Ã", 4 "©" (bytes C3 A9 = "é"), 5 "<|endoftext|>" (eos).
fn tokenizer() -> Tokenizer {
    tokenizer_with(&[])
}

/// [`tokenizer`]'s vocabulary followed by `extra` (text, token type) entries.
fn tokenizer_with(extra: &[(&str, i32)]) -> Tokenizer {
    let base = ["h", "i", "Ġ", "Ã", "©", "<|endoftext|>"];
    let mut tokens: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    let mut token_types = vec![token_type::NORMAL; tokens.len()];
    token_types[5] = token_type::CONTROL;
    for &(t, ty) in extra {
        tokens.push(t.to_string());
        token_types.push(ty);
    }
    Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: "glm4".into(),
        tokens,
        token_types,
        eos: Some(5),
        ..Default::default()
    })
    .unwrap()
}

/// Emits `script[cache_len_after_call - prompt_len]`, i.e. a fixed continuation.
struct Scripted {
    script: Vec<u32>,
    prompt_len: usize,
    cache: usize,
    ctx: usize,
    calls: Vec<(Vec<u32>, usize)>,
}

#[derive(Debug, thiserror::Error)]
#[error("scripted model error")]
struct Never;

impl LogitsSource for Scripted {
    type Error = Never;
    fn forward_last(&mut self, tokens: &[u32], start_pos: usize) -> Result<Vec<f32>, Never> {
        self.calls.push((tokens.to_vec(), start_pos));
        self.cache = start_pos + tokens.len();
        let idx = self.cache - self.prompt_len;
        let vocab = self
            .script
            .iter()
            .map(|&t| t as usize + 1)
            .fold(6, usize::max);
        let mut l = vec![0.0f32; vocab];
        l[self.script[idx.min(self.script.len() - 1)] as usize] = 10.0;
        Ok(l)
    }
    fn cache_len(&self) -> usize {
        self.cache
    }
    fn ctx_len(&self) -> usize {
        self.ctx
    }
}

fn scripted(script: &[u32], prompt_len: usize, ctx: usize) -> Scripted {
    Scripted {
        script: script.to_vec(),
        prompt_len,
        cache: 0,
        ctx,
        calls: Vec::new(),
    }
}

fn greedy(n: usize) -> GenerateParams {
    GenerateParams {
        max_new_tokens: n,
        sampler: SamplerConfig::greedy(),
        stop_at_eog: true,
        print_special: true,
    }
}

#[test]
fn prefills_once_then_decodes_one_token_at_a_time_until_eos() {
    let tok = tokenizer();
    // "hi é" then eos.
    let mut m = scripted(&[0, 1, 2, 3, 4, 5, 0], 2, 64);
    let mut pieces = Vec::new();
    let g = generate(&mut m, &tok, &[1, 1], &greedy(100), |s| {
        pieces.push(s.to_string())
    })
    .unwrap();
    assert_eq!(g.tokens, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(g.stop, StopReason::EndOfGeneration(5));
    assert_eq!(g.text, "hi é");
    // The lead byte of "é" produced no text on its own.
    assert_eq!(pieces, vec!["h", "i", " ", "é"]);
    assert_eq!(g.prompt_tokens, 2);
    assert_eq!(g.decode_steps, 5);
    assert_eq!(m.calls[0], (vec![1, 1], 0));
    assert_eq!(m.calls[1], (vec![0], 2));
    assert_eq!(m.calls[5], (vec![4], 6));
}

#[test]
fn stops_at_max_tokens_and_context_end() {
    let tok = tokenizer();
    let mut m = scripted(&[0, 1, 0, 1, 0, 1], 1, 64);
    let g = generate(&mut m, &tok, &[2], &greedy(3), |_| {}).unwrap();
    assert_eq!(
        (g.tokens.clone(), g.stop),
        (vec![0, 1, 0], StopReason::MaxTokens)
    );
    assert_eq!(g.decode_steps, 2);

    // ctx 3: prompt 1 + two decoded tokens fill it; the third sampled token cannot be fed back.
    let mut m = scripted(&[0, 1, 0, 1, 0, 1], 1, 3);
    let g = generate(&mut m, &tok, &[2], &greedy(10), |_| {}).unwrap();
    assert_eq!(g.tokens, vec![0, 1, 0]);
    assert_eq!(g.stop, StopReason::ContextFull);
}

#[test]
fn rejects_empty_and_oversized_prompts() {
    let tok = tokenizer();
    let mut m = scripted(&[0], 0, 2);
    assert!(matches!(
        generate(&mut m, &tok, &[], &greedy(1), |_| {}),
        Err(GenerateError::EmptyPrompt)
    ));
    assert!(matches!(
        generate(&mut m, &tok, &[0, 0, 0], &greedy(1), |_| {}),
        Err(GenerateError::PromptTooLong {
            prompt: 3,
            ctx_len: 2
        })
    ));
}

#[test]
fn eos_can_be_ignored_for_fixed_length_runs() {
    let tok = tokenizer();
    let mut m = scripted(&[5, 5, 5], 1, 64);
    let p = GenerateParams {
        stop_at_eog: false,
        ..greedy(3)
    };
    let g = generate(&mut m, &tok, &[0], &p, |_| {}).unwrap();
    assert_eq!(g.tokens, vec![5, 5, 5]);
    assert_eq!(g.text, "<|endoftext|><|endoftext|><|endoftext|>");
}

/// Vocabulary of [`tokenizer`] plus 6 "[PAD6]" (UNUSED, as in GLM-5 files whose embedding has
/// more rows than the tokenizer) and 7 "<|user|>" (CONTROL).
fn padded_tokenizer() -> Tokenizer {
    tokenizer_with(&[
        ("[PAD6]", token_type::UNUSED),
        ("<|user|>", token_type::CONTROL),
    ])
}

/// llama.cpp's `token_to_piece`: UNUSED prints nothing, CONTROL only with `--special`.
#[test]
fn unused_tokens_print_nothing_and_control_tokens_only_when_asked() {
    let tok = padded_tokenizer();
    for (special, want) in [(false, "hi hi"), (true, "hi<|user|> hi")] {
        // h, [PAD6], i, <|user|>, Ġ, h, i
        let mut m = Scripted {
            script: vec![0, 6, 1, 7, 2, 0, 1],
            prompt_len: 1,
            cache: 0,
            ctx: 64,
            calls: Vec::new(),
        };
        let p = GenerateParams {
            print_special: special,
            ..greedy(7)
        };
        let mut streamed = String::new();
        let g = generate(&mut m, &tok, &[0], &p, |s| streamed.push_str(s)).unwrap();
        assert_eq!(g.tokens, vec![0, 6, 1, 7, 2, 0, 1]);
        assert_eq!(g.text, want, "special {special}");
        assert_eq!(streamed, want);
        assert_eq!(tok.decode_with(&g.tokens, special).unwrap(), want);
    }
}

/// The penalty window holds the prompt and every generated token: with a scripted model that
/// always prefers token 0, then 1, then 2 by a margin smaller than the penalty's effect, each
/// token already seen (in the prompt or generated) is avoided.
#[test]
fn repetition_penalty_sees_prompt_and_generated_tokens_in_the_loop() {
    struct Ranked;
    impl LogitsSource for Ranked {
        type Error = Never;
        fn forward_last(&mut self, _t: &[u32], _s: usize) -> Result<Vec<f32>, Never> {
            // Preference 0 > 1 > 2 > 3 > 4, logits 5, 4.5, 4, 3.5, 3; eos lowest.
            Ok(vec![5.0, 4.5, 4.0, 3.5, 3.0, -10.0])
        }
        fn cache_len(&self) -> usize {
            0
        }
        fn ctx_len(&self) -> usize {
            64
        }
    }
    let tok = tokenizer();
    let mut p = greedy(3);
    // Dividing by 2 halves a seen token's logit (5 -> 2.5), below every unseen one.
    p.sampler.repeat_penalty = 2.0;
    p.sampler.repeat_last_n = 64;
    // Prompt [0]: token 0 is penalised from the start, so 1 comes first, then 2 (1 was
    // generated), then 3.
    let g = generate(&mut Ranked, &tok, &[0], &p, |_| {}).unwrap();
    assert_eq!(g.tokens, vec![1, 2, 3]);
    // Without the penalty the model repeats its favourite.
    p.sampler.repeat_penalty = 1.0;
    let g = generate(&mut Ranked, &tok, &[0], &p, |_| {}).unwrap();
    assert_eq!(g.tokens, vec![0, 0, 0]);
}

#[test]
fn a_callback_that_says_stop_ends_generation_after_its_piece() {
    let tok = tokenizer();
    // "h" "i" "h" "i" ...: the callback refuses the second piece.
    let mut m = scripted(&[0, 1, 0, 1, 0, 1], 1, 64);
    let mut seen = Vec::new();
    let g = generate_while(&mut m, &tok, &[2], &greedy(6), |p| {
        seen.push(p.to_string());
        seen.len() < 2
    })
    .unwrap();
    assert_eq!(g.stop, StopReason::Stopped);
    assert_eq!(seen, ["h", "i"]);
    assert_eq!(g.tokens, vec![0, 1]);
    // One prefill and one decode step: nothing is computed after the refusal.
    assert_eq!(m.calls.len(), 2);
}
