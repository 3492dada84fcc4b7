//! `glint tokenize`, `glint logits` and `glint generate` on the tiny GLM-5 fixture against
//! Hugging Face (tokenizers ids, transformers logits and greedy continuations recorded in
//! fixtures/glm5/reference.json by fixtures/make_glm5_fixtures.py).

use serde_json::Value;

mod common;
use common::{glint, read_npy, repo};

fn glm5(name: &str) -> String {
    repo()
        .join("fixtures/glm5")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn reference() -> Value {
    let text = std::fs::read_to_string(glm5("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn case(name: &str) -> Value {
    reference()["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))
        .clone()
}

fn model_path(c: &Value) -> String {
    let key = c["model"].as_str().unwrap();
    glm5(reference()["models"][key]["gguf"].as_str().unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn join(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn stdout_ok(o: &std::process::Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn tokenize_prints_hf_ids() {
    for name in ["short", "medium", "chat"] {
        let c = case(name);
        let o = glint(&[
            "tokenize",
            "-m",
            &model_path(&c),
            "-p",
            c["text"].as_str().unwrap(),
        ]);
        let out = stdout_ok(&o, name);
        assert_eq!(out.trim_end(), join(&ids(&c["ids"])), "case {name}");
    }
}

/// `glint logits` on the short case with extra flags: (glint, transformers) logits rows at the
/// stored positions.
fn logits_with(extra: &[&str]) -> Vec<(Vec<f32>, Vec<f32>)> {
    let c = case("short");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("short.npy");
    let tokens = join(&ids(&c["ids"]));
    let path = model_path(&c);
    let mut args = vec![
        "logits",
        "-m",
        &path,
        "--tokens",
        &tokens,
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = glint(&args);
    stdout_ok(&o, "logits");
    let (shape, got) = read_npy(&out);
    let n = ids(&c["ids"]).len();
    let (ref_shape, want) = read_npy(
        &repo()
            .join("fixtures/glm5")
            .join(c["logits_file"].as_str().unwrap()),
    );
    let vocab = ref_shape[1];
    assert_eq!(shape, vec![n, vocab]);
    c["logit_positions"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(row, pos)| {
            let pos = pos.as_u64().unwrap() as usize;
            (
                got[pos * vocab..(pos + 1) * vocab].to_vec(),
                want[row * vocab..(row + 1) * vocab].to_vec(),
            )
        })
        .collect()
}

#[test]
fn logits_match_transformers() {
    // Default flags, and the prompt in steps of 2 tokens: the same bound.
    for extra in [&[][..], &["--ubatch", "2"][..]] {
        for (pos, (g, w)) in logits_with(extra).iter().enumerate() {
            let max_diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            // The library's forward_fixture bound (glm5-model tests, DENSE_BOUND): measured
            // <= 3.34e-5 against transformers; the CLI must add nothing to it.
            assert!(
                max_diff <= 6e-5,
                "{extra:?} row {pos}: max |glint - transformers| = {max_diff}"
            );
        }
    }
}

#[test]
fn cache_type_flag_selects_the_cache() {
    // f16 cache: measured max |Δ| 8.3e-3 against transformers on this prompt
    // (docs/cache-types.md), far above f32's 2e-5 and below 2e-2.
    let worst = logits_with(&["--cache-type", "f16"])
        .iter()
        .map(|(g, w)| g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs())))
        .fold(0f32, f32::max);
    assert!(worst > 1e-3 && worst < 2e-2, "f16 cache: max |Δ| {worst}");
    // q8 indexer keys alone: this prompt is shorter than the indexer's top-k, so every key is
    // attended and the logits stay at f32's 2e-5 (an fp8 latent cache moves them by 0.8).
    let worst = logits_with(&["--cache-type-index", "q8"])
        .iter()
        .map(|(g, w)| g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs())))
        .fold(0f32, f32::max);
    assert!(worst < 6e-5, "q8 indexer keys: max |Δ| {worst}");
    for (flag, value, want) in [
        (
            "--cache-type",
            "f8",
            "unknown cache type 'f8' (expected f32, f16, bf16, fp8 or q8)",
        ),
        (
            "--cache-type-index",
            "bf16",
            "indexer keys can be cached as f32, f16, fp8 or q8, not bf16",
        ),
        ("--ubatch", "0", "0 is not allowed"),
    ] {
        let c = case("short");
        let o = glint(&[
            "logits",
            "-m",
            &model_path(&c),
            "--tokens",
            "1,2",
            "-o",
            "/tmp/x.npy",
            flag,
            value,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(want),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn greedy_generate_continues_like_transformers() {
    let c = case("short");
    let want = c["greedy_text"].as_str().unwrap();
    let n = ids(&c["greedy_new_tokens"]).len().to_string();
    let prompt = c["text"].as_str().unwrap();
    let o = glint(&[
        "generate",
        "-m",
        &model_path(&c),
        "-p",
        prompt,
        "-n",
        &n,
        "--temp",
        "0",
        "--ignore-eos",
        // transformers' greedy_text is decode() without skip_special_tokens.
        "--special",
    ]);
    let out = stdout_ok(&o, "generate");
    // stdout: the prompt, the streamed continuation, a newline.
    assert_eq!(out, format!("{prompt}{want}\n"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tok/s"), "speed report missing: {err}");
}

#[test]
fn generate_reports_bad_model_path() {
    let o = glint(&["generate", "-m", "/nonexistent.gguf", "-p", "x", "-n", "1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nonexistent.gguf"));
}

/// The KV cache is allocated up front, so a --ctx past the file's context_length (4096 in the
/// fixture, written by fixtures/glm5_gguf.py) must be refused by name, not attempted.
#[test]
fn generate_refuses_ctx_past_the_model_context() {
    let c = case("short");
    let o = glint(&[
        "generate",
        "-m",
        &model_path(&c),
        "-p",
        "x",
        "-n",
        "1",
        "--ctx",
        "100000000000",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--ctx 100000000000 exceeds the model's context length 4096"),
        "{err}"
    );
}

#[test]
fn tp_flags_keep_logits_and_greedy_text() {
    // Rank threads in this process: the logits of --tp 1 within the library's TP bound
    // (glm5-model tests/tp.rs: 2e-5, measured ≤ 1.4e-5), with and without --ep.
    let one = logits_with(&[]);
    for extra in [&["--tp", "2"][..], &["--tp", "4", "--ep"][..]] {
        for (pos, ((g, _), (g1, _))) in logits_with(extra).iter().zip(&one).enumerate() {
            let d = g
                .iter()
                .zip(g1)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(d <= 2e-5, "{extra:?} row {pos}: max |Δ| vs --tp 1 = {d}");
        }
    }
    let c = case("short");
    let want = c["greedy_text"].as_str().unwrap();
    let n = ids(&c["greedy_new_tokens"]).len().to_string();
    let prompt = c["text"].as_str().unwrap();
    let path = model_path(&c);
    let o = glint(&[
        "generate",
        "-m",
        &path,
        "-p",
        prompt,
        "-n",
        &n,
        "--temp",
        "0",
        "--ignore-eos",
        "--special",
        "--tp",
        "4",
    ]);
    assert_eq!(
        stdout_ok(&o, "generate --tp 4"),
        format!("{prompt}{want}\n")
    );
    // Processes meeting at a master carry NCCL: on the CPU they are refused up front.
    let o = glint(&[
        "generate",
        "-m",
        &path,
        "-p",
        "x",
        "-n",
        "1",
        "--tp",
        "2",
        "--rank",
        "0",
        "--master",
        "127.0.0.1:1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("needs --device cuda"),
        "{err}"
    );
    // 4 heads over 8 ranks: refused before anything runs, naming the tensor and the numbers.
    let o = glint(&["generate", "-m", &path, "-p", "x", "-n", "1", "--tp", "8"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("blk.0.attn_q_b.weight: 4 attention heads do not divide over 8 ranks"),
        "{err}"
    );
}
