//! Small hand-built vocabularies with hand-derived expected ids. The real-vocabulary comparison
//! against Hugging Face `tokenizers` lives in `tests/tokenizer_hf.rs`.

use super::*;

#[test]
fn byte_table_matches_gpt2() {
    let t = byte_to_char_table();
    // Well-known GPT-2 spellings: space is 'Ġ' (U+0120), newline 'Ċ' (U+010A), tab 'ĉ' (U+0109),
    // NUL 'Ā' (U+0100), 0x7F (DEL) 'ġ' (U+0121), 0xAD (soft hyphen) 'Ń' (U+0143).
    assert_eq!(t[b' ' as usize], '\u{120}');
    assert_eq!(t[b'\n' as usize], '\u{10A}');
    assert_eq!(t[b'\t' as usize], '\u{109}');
    assert_eq!(t[0], '\u{100}');
    assert_eq!(t[0x7F], '\u{121}');
    assert_eq!(t[0xAD], '\u{143}');
    assert_eq!(t[b'A' as usize], 'A');
    assert_eq!(t[0xE9], '\u{E9}');
}

/// Vocabulary: single bytes used below, a few merges, two control tokens and a user-defined one.
fn toy() -> Tokenizer {
    let tokens: Vec<String> = [
        "h", "e", "l", "o", "Ġ", "w", "r", "d", // 0..=7
        "he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", // 8..=16
        "<|user|>", "[gMASK]", "<think>", // 17, 18, 19
        "1", "2", "3", "4", "12", "123", // 20..=25
        "Ã", "©", // 26, 27: bytes 0xC3, 0xA9 ("é")
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2", "12 3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut token_types = vec![token_type::NORMAL; tokens.len()];
    token_types[17] = token_type::CONTROL;
    token_types[18] = token_type::CONTROL;
    token_types[19] = token_type::USER_DEFINED;
    Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: "glm4".into(),
        tokens,
        merges,
        token_types,
        eos: Some(17),
        eot: Some(17),
        eom: Some(18),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn encodes_with_merges_and_specials() {
    let t = toy();
    assert_eq!(t.encode("hello world").unwrap(), vec![11, 16]);
    // Special tokens inside text are single ids; the text around them is split normally.
    assert_eq!(
        t.encode("[gMASK]hello<|user|> world<think>").unwrap(),
        vec![18, 11, 17, 16, 19]
    );
    // Digits are grouped in threes by the pre-tokenizer before BPE: "1234" -> "123" + "4".
    assert_eq!(t.encode("1234").unwrap(), vec![25, 23]);
}

#[test]
fn decodes_bytes_and_streams_split_characters() {
    let t = toy();
    assert_eq!(t.decode(&[18, 11, 16]).unwrap(), "[gMASK]hello world");
    assert_eq!(t.encode("é").unwrap(), vec![26, 27]);
    let mut s = t.stream(true);
    assert_eq!(s.push(11).unwrap(), "hello");
    // First half of "é" is held back, then released whole.
    assert_eq!(s.push(26).unwrap(), "");
    assert_eq!(s.push(27).unwrap(), "é");
    // A dangling lead byte at the end becomes U+FFFD.
    assert_eq!(s.push(26).unwrap(), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    // An invalid continuation byte is replaced at once.
    let mut s = t.stream(true);
    assert_eq!(s.push(27).unwrap(), "\u{FFFD}");
    assert!(s.push(999).is_err());
}

#[test]
fn stop_set_is_deduplicated() {
    let t = toy();
    assert_eq!(t.eog_ids(), &[17, 18]);
    assert!(t.is_eog(18) && !t.is_eog(11));
}

#[test]
fn rejects_unknown_pre_and_model() {
    let spec = TokenizerSpec {
        model: "gpt2".into(),
        pre: "qwen2-wizard".into(),
        tokens: vec!["a".into()],
        ..Default::default()
    };
    let e = Tokenizer::from_spec(spec.clone()).unwrap_err();
    assert!(e.to_string().contains("qwen2-wizard"), "{e}");
    let e = Tokenizer::from_spec(TokenizerSpec {
        model: "llama".into(),
        ..spec
    })
    .unwrap_err();
    assert!(matches!(e, TokenizerError::UnsupportedModel(_)));
}

#[test]
fn rejects_malformed_merges_and_ids() {
    let base = TokenizerSpec {
        model: "gpt2".into(),
        pre: "glm4".into(),
        tokens: vec!["a".into(), "b".into(), "ab".into()],
        ..Default::default()
    };
    let e = Tokenizer::from_spec(TokenizerSpec {
        merges: vec!["ab".into()],
        ..base.clone()
    })
    .unwrap_err();
    assert!(
        matches!(e, TokenizerError::BadMerge { index: 0, .. }),
        "{e}"
    );
    let e = Tokenizer::from_spec(TokenizerSpec {
        eos: Some(3),
        ..base.clone()
    })
    .unwrap_err();
    assert!(e.to_string().contains("eos_token_id"), "{e}");
    let e = Tokenizer::from_spec(TokenizerSpec {
        token_types: vec![1],
        ..base
    })
    .unwrap_err();
    assert!(matches!(e, TokenizerError::TokenTypeCount { .. }), "{e}");
}

#[test]
fn bos_follows_llama_cpp_rules() {
    let base = TokenizerSpec {
        model: "gpt2".into(),
        pre: "glm4".into(),
        tokens: vec!["a".into(), "<s>".into()],
        token_types: vec![token_type::NORMAL, token_type::CONTROL],
        bos: Some(1),
        add_bos: Some(true),
        ..Default::default()
    };
    // GLM: never, whatever the flag says (llama.cpp clears the BOS for CHATGLM4).
    let t = Tokenizer::from_spec(base.clone()).unwrap();
    assert_eq!(t.encode_prompt("a").unwrap(), vec![0]);
    // Llama 3: on by default.
    let t = Tokenizer::from_spec(TokenizerSpec {
        pre: "llama-bpe".into(),
        add_bos: None,
        ..base.clone()
    })
    .unwrap();
    assert_eq!(t.encode_prompt("a").unwrap(), vec![1, 0]);
    // DeepSeek-V3: the GGUF flag decides.
    for (flag, want) in [
        (Some(true), vec![1, 0]),
        (Some(false), vec![0]),
        (None, vec![0]),
    ] {
        let t = Tokenizer::from_spec(TokenizerSpec {
            pre: "deepseek-v3".into(),
            add_bos: flag,
            ..base.clone()
        })
        .unwrap();
        assert_eq!(t.encode_prompt("a").unwrap(), want, "{flag:?}");
    }
}
