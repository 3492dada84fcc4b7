//! `glint bench` on the tiny model: JSON rows for every test, depth and batch asked for, and
//! the weight bytes per decoded token equal to the sum over the GGUF's tensor table computed
//! here (every tensor once per step except the embedding, of which one row per token is read,
//! and the routed experts, of which k of E slices per token).

use glint_gguf::Gguf;
use serde_json::Value;

mod common;
use common::{glint, repo};

#[test]
fn bench_reports_every_test_and_counts_the_bytes_a_step_reads() {
    let model = repo().join("fixtures/glm5/glm5-tiny-f32.gguf");
    let m = model.to_str().unwrap();
    let o = glint(&[
        "bench", "-m", m, "-p", "8", "-n", "3", "-d", "0,5", "-b", "1,2", "-r", "2", "-o", "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let key = |r: &Value| {
        (
            r["test"].as_str().unwrap().to_string(),
            r["depth"].as_u64().unwrap(),
            r["batch"].as_u64().unwrap(),
        )
    };
    let got: Vec<_> = rows.iter().map(key).collect();
    let want: Vec<(String, u64, u64)> = [0, 5]
        .iter()
        .flat_map(|&d| {
            [("pp8", d, 1), ("tg3", d, 1), ("tg3", d, 2)].map(|(t, d, b)| (t.to_string(), d, b))
        })
        .collect();
    assert_eq!(got, want);
    for r in &rows {
        assert!(r["tokens_per_s_mean"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["probe_gb_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["cache"], "f32/f32", "the default cache: {r}");
    }
    let want = table_bytes_per_token(&model);
    let tg1 = rows
        .iter()
        .find(|r| r["test"] == "tg3" && r["batch"] == 1)
        .unwrap();
    assert_eq!(tg1["bytes_per_token"].as_u64().unwrap(), want);
    for (args, msg) in [
        (vec!["-o", "xml"], "-o xml: expected md or json"),
        (vec!["-r", "0"], "-r 0: at least one repetition"),
        (
            vec!["-b", "0"],
            "-b 0: sequences per step must be at least 1",
        ),
    ] {
        let mut a = vec!["bench", "-m", m, "-p", "4", "-n", "1"];
        a.extend(args.iter());
        let o = glint(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(msg), "{args:?}: {err}");
    }
}

/// Bytes per decoded token at one sequence, from the GGUF's tensor table.
fn table_bytes_per_token(model: &std::path::Path) -> u64 {
    let g = Gguf::open(model).unwrap();
    let md = g.metadata();
    let arch = md.get_str("general.architecture").unwrap();
    let k = md.get_u32(&format!("{arch}.expert_used_count")).unwrap() as u64;
    let e = md.get_u32(&format!("{arch}.expert_count")).unwrap() as u64;
    let trunk = md.get_u32(&format!("{arch}.block_count")).unwrap() as u64
        - md.get_u32(&format!("{arch}.nextn_predict_layers"))
            .unwrap_or(0) as u64;
    let mut want = 0u64;
    for t in g.tensors() {
        let layer: Option<u64> = t
            .name
            .strip_prefix("blk.")
            .map(|r| r.split('.').next().unwrap().parse().unwrap());
        want += match layer {
            Some(l) if l >= trunk => 0, // the MTP layer is not run
            _ if t.name == "token_embd.weight" => t.n_bytes / t.dims[1],
            _ if t.name.ends_with("_exps.weight") => t.n_bytes / e * k,
            _ => t.n_bytes,
        };
    }
    want
}

/// `--tp 2` (and with `--ep`) on the CPU: the same rows, marked as two ranks, counting the
/// whole model's bytes per token (the ranks' shards together), and a split that does not
/// divide is refused naming the tensor.
#[test]
fn bench_runs_split_over_ranks() {
    let model = repo().join("fixtures/glm5/glm5-tiny-f32.gguf");
    let m = model.to_str().unwrap();
    for ep in [false, true] {
        let mut a = vec![
            "bench", "-m", m, "-p", "8", "-n", "3", "-b", "1,2", "-r", "1", "-o", "json", "--tp",
            "2",
        ];
        if ep {
            a.push("--ep");
        }
        let o = glint(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        let tests: Vec<_> = rows
            .iter()
            .map(|r| (r["test"].as_str().unwrap(), r["batch"].as_u64().unwrap()))
            .collect();
        assert_eq!(tests, [("pp8", 1), ("tg3", 1), ("tg3", 2)], "ep={ep}");
        for r in &rows {
            assert_eq!(r["tp"], 2, "{r}");
            assert!(r["tokens_per_s_mean"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["probe_gb_s"].as_f64().unwrap() > 0.0, "{r}");
        }
        assert_eq!(
            rows[1]["bytes_per_token"].as_u64().unwrap(),
            table_bytes_per_token(&model)
        );
    }
    let o = glint(&["bench", "-m", m, "-p", "4", "-n", "1", "--tp", "3"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("does not divide") && err.contains(".weight"),
        "{err}"
    );
}

/// `--cache-type` / `--cache-type-index` (llama-bench's `-ctk`/`-ctv`): the tests run with the
/// pool types asked for, every row says which, and a type the indexer cannot take is refused
/// with the other commands' message.
#[test]
fn bench_runs_with_the_cache_types_asked_for() {
    let model = repo().join("fixtures/glm5/glm5-tiny-f32.gguf");
    let m = model.to_str().unwrap();
    for (flags, want) in [
        (vec!["--cache-type", "bf16"], "bf16/f16"),
        (
            vec!["--cache-type", "fp8", "--cache-type-index", "q8"],
            "fp8/q8",
        ),
    ] {
        let mut a = vec![
            "bench", "-m", m, "-p", "4", "-n", "2", "-d", "0,3", "-r", "1", "-o", "json",
        ];
        a.extend(flags.iter());
        let o = glint(&a);
        assert!(
            o.status.success(),
            "{flags:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(rows.len(), 4, "{flags:?}");
        for r in &rows {
            assert_eq!(r["cache"], want, "{flags:?}: {r}");
            assert!(r["tokens_per_s_mean"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    for (flags, msg) in [
        (vec!["--cache-type", "q5"], "unknown cache type 'q5'"),
        (vec!["--cache-type-index", "bf16"], "not bf16"),
    ] {
        let mut a = vec!["bench", "-m", m, "-p", "4", "-n", "1"];
        a.extend(flags.iter());
        let o = glint(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(msg), "{flags:?}: {err}");
    }
}
