//! `glint inspect` against gguf-py's reading of the fixtures (fixtures/make_gguf_fixtures.py).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value as Json;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/gguf")
        .join(name)
}

fn glint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// Equality that tells -0.0 from 0.0 and checks object key order, which `==` ignores.
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) if x.is_f64() || y.is_f64() => {
            x.is_f64()
                && y.is_f64()
                && x.as_f64().unwrap().to_bits() == y.as_f64().unwrap().to_bits()
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && same(v1, v2))
        }
        _ => a == b,
    }
}

fn check_json(model: &str, file: &str) {
    let out = glint(&["inspect", "--json", fixture(file).to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Json = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(fixture(&format!("{model}.expected.json"))).unwrap();
    let theirs: Json = serde_json::from_str(&text).unwrap();
    for key in ["version", "metadata", "tensors"] {
        assert!(
            same(&ours[key], &theirs[key]),
            "{file}: '{key}' differs:\nours   {}\ngguf-py {}",
            ours[key],
            theirs[key]
        );
    }
    assert!(same(&ours, &theirs), "{file}: top-level keys differ");
}

#[test]
fn json_matches_gguf_py() {
    check_json("all_types", "all_types.gguf");
    check_json("align64", "align64.gguf");
    check_json("v2", "v2.gguf");
    // Written by llama.cpp itself (llama_model_quantize), read by gguf-py for the expectation.
    check_json("llama_quantize_q8_0", "llama_quantize_q8_0.gguf");
    for shard in 1..=3 {
        check_json("split", &format!("split-{shard:05}-of-00003.gguf"));
    }
}

#[test]
fn human_dump_lists_every_key_and_tensor() {
    let out = glint(&["inspect", fixture("all_types.gguf").to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture("all_types.expected.json")).unwrap())
            .unwrap();
    for key in expected["metadata"].as_object().unwrap().keys() {
        assert!(
            text.lines().any(|l| l.contains(&format!("| {key} = "))),
            "key {key} missing"
        );
    }
    for t in expected["tensors"].as_array().unwrap() {
        let (name, ty) = (t["name"].as_str().unwrap(), t["type"].as_str().unwrap());
        assert!(
            text.lines()
                .any(|l| l.ends_with(&format!("| {name}")) && l.contains(&format!("| {ty} "))),
            "tensor {name} missing"
        );
    }
    // Long arrays are shortened the way gguf_dump does it.
    assert!(text.contains("test.arr.long = [0, 1, 2, 3, 4, 5, ...]"));
    assert!(text.contains("[UINT32]   |      100 | test.arr.long"));
    // Q4_K: 256 elements in one 144-byte block.
    assert!(text
        .lines()
        .any(|l| l.contains("Q4_K") && l.contains(" 144 B ")));
}

#[test]
fn errors_go_to_stderr_with_failure_status() {
    for (file, needle) in [
        ("big_endian.gguf", "big-endian"),
        ("does-not-exist.gguf", "does-not-exist.gguf"),
    ] {
        let out = glint(&["inspect", "--json", fixture(file).to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{file}: no panic (101), plain failure"
        );
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:") && err.contains(needle), "{err}");
    }
    // A truncated copy names the file and the problem.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &std::fs::read(fixture("align64.gguf")).unwrap()[..50]).unwrap();
    let out = glint(&["inspect", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.gguf") && (err.contains("truncated") || err.contains("bytes left")),
        "{err}"
    );
}
