//! What glint prints for each token type against llama.cpp itself (llama-cpp-python 0.3.36,
//! fixtures/make_llamacpp_detok.py): a vocab-only GGUF padded with UNUSED `[PADnnnn]` rows as
//! GLM-5's is, and a sequence of NORMAL (a UTF-8 character split over two tokens included),
//! CONTROL, USER_DEFINED, UNKNOWN, BYTE and UNUSED tokens. Per token, glint's `piece` must be
//! llama.cpp's `llama_token_to_piece` bytes; for the sequence, the concatenated pieces must be
//! `llama_detokenize`'s bytes, with special = false and true.

#[path = "../../glm5-model/tests/common/mod.rs"]
mod common;

use common::{fixture_dir, ids_of, read_json};
use glint_engine::tokenizer::{token_type, Tokenizer};
use glint_gguf::Gguf;
use serde_json::Value;

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn fixture() -> (Tokenizer, Value) {
    let dir = fixture_dir().join("llamacpp");
    let v = read_json(&dir.join("detok.json"));
    let gguf = Gguf::open(dir.join(v["gguf"].as_str().unwrap())).unwrap();
    (Tokenizer::from_metadata(gguf.metadata()).unwrap(), v)
}

#[test]
fn the_fixture_covers_every_token_type_and_padding() {
    let (tok, v) = fixture();
    let n_real = v["n_real"].as_u64().unwrap() as usize;
    assert_eq!(tok.n_vocab(), v["n_rows"].as_u64().unwrap() as usize);
    assert!(tok.n_vocab() > n_real, "no padding rows");
    let ids = ids_of(&v["ids"]);
    let mut seen: Vec<i32> = ids.iter().map(|&t| tok.token_type(t).unwrap()).collect();
    seen.sort();
    seen.dedup();
    use token_type::*;
    assert_eq!(seen, [NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE]);
    // glint reads the same types llama.cpp was given.
    for &t in &ids {
        let want = v["tokens"][t.to_string()]["type"].as_i64().unwrap() as i32;
        assert_eq!(tok.token_type(t), Some(want), "type of token {t}");
    }
}

#[test]
fn pieces_equal_llamacpp_token_to_piece() {
    let (tok, v) = fixture();
    let tokens = v["tokens"].as_object().unwrap();
    for (id, t) in tokens {
        let id: u32 = id.parse().unwrap();
        for (special, key) in [(false, "piece_hex"), (true, "piece_special_hex")] {
            assert_eq!(
                tok.piece(id, special).unwrap(),
                hex(t[key].as_str().unwrap()),
                "token {id} {:?} (type {}), special {special}",
                t["text"],
                t["type"]
            );
        }
    }
}

#[test]
fn sequence_equals_llamacpp_detokenize_and_streams_the_same() {
    let (tok, v) = fixture();
    let ids = ids_of(&v["ids"]);
    for (special, key) in [(false, "detokenize_hex"), (true, "detokenize_special_hex")] {
        let want = hex(v[key].as_str().unwrap());
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&t| tok.piece(t, special).unwrap().to_vec())
            .collect();
        assert_eq!(bytes, want, "special {special}: bytes");
        // llama.cpp's bytes are UTF-8 here (the split character is completed by its next
        // token), so the text glint prints is exactly them, all at once or streamed.
        let want = String::from_utf8(want).expect("llama.cpp's detokenization is UTF-8");
        assert_eq!(
            tok.decode_with(&ids, special).unwrap(),
            want,
            "special {special}"
        );
        let mut s = tok.stream(special);
        let mut streamed = String::new();
        for &id in &ids {
            streamed.push_str(&s.push(id).unwrap());
        }
        streamed.push_str(&s.finish());
        assert_eq!(streamed, want, "special {special}: streamed");
    }
}
