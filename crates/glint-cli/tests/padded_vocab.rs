//! `glint generate` on a GGUF whose vocabulary is padded with UNUSED `[PADnnnn]` tokens, as
//! GLM-5 files are, against llama.cpp on the same file: the same prompt ids, and the text
//! llama.cpp's `token_to_piece` prints for its greedy continuation, which emits padding
//! tokens (fixtures/make_llamacpp_padded.py).

use serde_json::Value;

mod common;
use common::{glint, repo};

fn fixture() -> (String, Value) {
    let dir = repo().join("fixtures/glm5/llamacpp");
    let json = std::fs::read_to_string(dir.join("padded.json")).expect("padded.json");
    let v: Value = serde_json::from_str(&json).unwrap();
    let gguf = dir.join(v["gguf"].as_str().unwrap());
    (gguf.to_string_lossy().into_owned(), v)
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn prompt_ids_equal_llamacpp() {
    let (gguf, v) = fixture();
    let o = glint(&["tokenize", "-m", &gguf, "-p", v["prompt"].as_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<u64> = String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(got, ids(&v["prompt_ids"]));
}

#[test]
fn generate_prints_what_llamacpp_prints_for_padding_tokens() {
    let (gguf, v) = fixture();
    let base = v["base_vocab"].as_u64().unwrap();
    let greedy = ids(&v["greedy_ids"]);
    // The fixture is only a test of padding if llama.cpp's continuation contains some.
    let pads = greedy.iter().filter(|&&t| t >= base).count();
    assert!(pads > 0, "llama.cpp emitted no padding token: {greedy:?}");
    let prompt = v["prompt"].as_str().unwrap();
    let n = greedy.len().to_string();
    for (flag, key) in [
        (None, "text_bytes_hex"),
        (Some("--special"), "text_special_bytes_hex"),
    ] {
        let mut args = vec![
            "generate",
            "-m",
            &gguf,
            "-p",
            prompt,
            "-n",
            &n,
            "--temp",
            "0",
            "--ignore-eos",
        ];
        args.extend(flag);
        let o = glint(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // stdout: the prompt, the streamed continuation, a newline.
        let mut want = prompt.as_bytes().to_vec();
        want.extend(hex(v[key].as_str().unwrap()));
        want.push(b'\n');
        // One difference by design: a byte sequence that is not UTF-8 (this random model emits a
        // lone 0xD0) llama.cpp writes raw, glint prints as U+FFFD, as HF's decode and a terminal
        // show it. So llama.cpp's bytes are compared after that same replacement.
        let want = String::from_utf8_lossy(&want);
        let got = String::from_utf8(o.stdout).expect("glint prints UTF-8");
        assert_eq!(
            got, want,
            "{flag:?}: glint vs llama.cpp ({pads} padding tokens among {n})"
        );
    }
}
