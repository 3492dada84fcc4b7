//! The reliability catalogue (docs/reliability.md): one test per bad input a new user can give,
//! each expecting its named error, or the input left byte-identical.
//!
//! Bad models are made in the test from the tiny GLM-5 fixture by editing one metadata key or
//! one weight, so each case differs from a model that works in exactly the way it names.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use glint_gguf::{write_gguf, Array, ArrayData, Gguf, TensorSpec, Value};

mod common;
use common::{glint, repo};

fn tiny() -> PathBuf {
    repo().join("fixtures/glm5/glm5-tiny-f32.gguf")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a failed run whose stderr names every one of `words`, and no panic.
fn fails_with(o: &Output, words: &[&str]) -> String {
    let e = stderr(o);
    assert!(!o.status.success(), "expected failure, got success: {e}");
    assert_eq!(
        o.status.code(),
        Some(1),
        "exit code (not a signal/abort): {e}"
    );
    assert!(!e.contains("panicked"), "panic: {e}");
    for w in words {
        assert!(e.contains(w), "stderr lacks {w:?}: {e}");
    }
    e
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A copy of the tiny model at `dir/name`, and its bytes for the intact-input checks.
fn copy_model(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let p = dir.join(name);
    std::fs::copy(tiny(), &p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    (p, bytes)
}

/// Writes the tiny model to `out` with its metadata and tensor bytes edited.
fn rewrite(
    out: &Path,
    edit_meta: impl FnOnce(&mut Vec<(String, Value)>),
    mut edit_tensor: impl FnMut(&str, &mut Vec<u8>),
) {
    let src = Gguf::open(tiny()).unwrap();
    let mut meta = src.metadata().entries().to_vec();
    edit_meta(&mut meta);
    let owned: Vec<(TensorSpec, Vec<u8>)> = src
        .tensors()
        .iter()
        .map(|t| {
            let mut bytes = src.tensor_data(t).to_vec();
            edit_tensor(&t.name, &mut bytes);
            let spec = TensorSpec {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.clone(),
            };
            (spec, bytes)
        })
        .collect();
    let refs: Vec<(TensorSpec, &[u8])> = owned.iter().map(|(t, b)| (t.clone(), &b[..])).collect();
    write_gguf(out, &meta, &refs).unwrap();
}

fn set(meta: &mut Vec<(String, Value)>, key: &str, v: Value) {
    match meta.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = v,
        None => meta.push((key.to_string(), v)),
    }
}

fn remove(meta: &mut Vec<(String, Value)>, key: &str) {
    meta.retain(|(k, _)| k != key);
}

/// A model with one metadata edit, at `dir/bad.gguf`.
fn with_meta(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>)) -> PathBuf {
    let p = dir.join("bad.gguf");
    rewrite(&p, edit, |_, _| {});
    p
}

fn logits_of(model: &Path, out: &Path) -> Output {
    glint(&["logits", "-m", s(model), "--tokens", "1,2,3", "-o", s(out)])
}

// ---- 1. Outputs never hurt inputs ---------------------------------------------------------

#[test]
fn dequant_onto_its_input_is_refused_and_input_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (m, before) = copy_model(dir.path(), "m.gguf");
    let o = glint(&["dequant", s(&m), "token_embd.weight", "-o", s(&m)]);
    fails_with(&o, &["same file as the input", "m.gguf"]);
    assert_eq!(std::fs::read(&m).unwrap(), before);
    assert_eq!(names(dir.path()), ["m.gguf"]);
}

#[cfg(unix)]
#[test]
fn output_through_a_link_to_the_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (m, before) = copy_model(dir.path(), "m.gguf");
    let hard = dir.path().join("hard.npy");
    std::fs::hard_link(&m, &hard).unwrap();
    let soft = dir.path().join("soft.npy");
    std::os::unix::fs::symlink(&m, &soft).unwrap();
    for target in [&hard, &soft] {
        let o = glint(&["dequant", s(&m), "token_embd.weight", "-o", s(target)]);
        fails_with(&o, &["same file as the input"]);
    }
    assert_eq!(std::fs::read(&m).unwrap(), before);
}

#[test]
fn logits_onto_the_model_is_refused_and_model_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (m, before) = copy_model(dir.path(), "l.gguf");
    let o = logits_of(&m, &m);
    fails_with(&o, &["same file as the input", "l.gguf"]);
    assert_eq!(std::fs::read(&m).unwrap(), before);
}

#[test]
fn quantize_of_a_dot_partial_input_keeps_the_input() {
    // The old temporary name was OUTPUT.partial: here that is the input itself.
    let dir = tempfile::tempdir().unwrap();
    let (input, before) = copy_model(dir.path(), "v.gguf.partial");
    let out = dir.path().join("v.gguf");
    let o = glint(&["quantize", s(&input), s(&out), "Q8_0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&input).unwrap(), before);
    let q = Gguf::open(&out).unwrap();
    assert_eq!(
        q.tensors().len(),
        Gguf::open(&input).unwrap().tensors().len()
    );
    assert_eq!(names(dir.path()), ["v.gguf", "v.gguf.partial"]);
}

/// Splits the tiny model into two shards named as gguf-split names them.
fn split_model(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Gguf::open(tiny()).unwrap();
    let tensors = src.tensors();
    let half = tensors.len() / 2;
    let paths = [
        dir.join("s-00001-of-00002.gguf"),
        dir.join("s-00002-of-00002.gguf"),
    ];
    for (i, part) in [&tensors[..half], &tensors[half..]].into_iter().enumerate() {
        let mut meta: Vec<(String, Value)> = if i == 0 {
            src.metadata().entries().to_vec()
        } else {
            Vec::new()
        };
        meta.push(("split.no".into(), Value::U16(i as u16)));
        meta.push(("split.count".into(), Value::U16(2)));
        meta.push((
            "split.tensors.count".into(),
            Value::I32(tensors.len() as i32),
        ));
        let refs: Vec<(TensorSpec, &[u8])> = part
            .iter()
            .map(|t| {
                let spec = TensorSpec {
                    name: t.name.clone(),
                    ty: t.ty,
                    dims: t.dims.clone(),
                };
                (spec, src.tensor_data(t))
            })
            .collect();
        write_gguf(&paths[i], &meta, &refs).unwrap();
    }
    let [a, b] = paths;
    (a, b)
}

#[test]
fn quantize_onto_another_shard_of_its_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = split_model(dir.path());
    let (b1, b2) = (
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap(),
    );
    assert_eq!(Gguf::open(&first).unwrap().n_shards(), 2);
    let o = glint(&["quantize", s(&first), s(&second), "Q8_0"]);
    fails_with(&o, &["same file as the input", "s-00002-of-00002.gguf"]);
    assert_eq!(std::fs::read(&first).unwrap(), b1);
    assert_eq!(std::fs::read(&second).unwrap(), b2);
    assert_eq!(names(dir.path()).len(), 2);
}

#[cfg(unix)]
#[test]
fn quantize_onto_a_device_is_refused_and_the_device_kept() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    // Through a link: even a broken glint could then only replace the link, never /dev/full.
    let dev = dir.path().join("full");
    std::os::unix::fs::symlink("/dev/full", &dev).unwrap();
    let o = glint(&["quantize", s(&tiny()), s(&dev), "Q8_0"]);
    fails_with(&o, &["not a regular file", "character device"]);
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::symlink_metadata(&dev)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(names(dir.path()), ["full"]);
}

#[cfg(unix)]
#[test]
fn output_onto_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.npy");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo not available");
        return;
    }
    let o = glint(&["dequant", s(&tiny()), "token_embd.weight", "-o", s(&fifo)]);
    fails_with(&o, &["not a regular file", "FIFO"]);
}

#[test]
fn quantize_onto_a_directory_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("models");
    std::fs::create_dir(&target).unwrap();
    let o = glint(&["quantize", s(&tiny()), s(&target), "Q8_0"]);
    fails_with(&o, &["is a directory", "models"]);
    // No `models.partial` (or any other temporary) next to it.
    assert_eq!(names(dir.path()), ["models"]);
    assert!(names(&target).is_empty());
}

#[test]
fn output_in_a_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("no/such/dir/out.npy");
    let o = glint(&["dequant", s(&tiny()), "token_embd.weight", "-o", s(&target)]);
    fails_with(&o, &["does not exist", "no/such/dir"]);
}

#[cfg(unix)]
#[test]
fn full_disk_removes_the_temporary_and_keeps_the_old_output() {
    // RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as a full disk fails with ENOSPC;
    // SIGXFSZ is ignored (inherited through exec) so glint sees the error instead of dying.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    std::fs::write(&out, b"previous output").unwrap();
    let cmd = format!(
        "trap '' XFSZ; ulimit -f 128; exec '{}' quantize '{}' '{}' Q8_0",
        env!("CARGO_BIN_EXE_glint"),
        s(&tiny()),
        s(&out)
    );
    let o = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
    fails_with(&o, &["q.gguf", "cannot write"]);
    assert_eq!(std::fs::read(&out).unwrap(), b"previous output");
    assert_eq!(names(dir.path()), ["q.gguf"]);
}

#[test]
fn a_failure_after_the_output_was_opened_leaves_nothing() {
    // The output is checked and its temporary created before the forward pass; a bad token id
    // then fails the command, and the temporary must go with it.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.npy");
    let o = glint(&[
        "logits",
        "-m",
        s(&tiny()),
        "--tokens",
        "1,99999",
        "-o",
        s(&out),
    ]);
    fails_with(&o, &["token id 99999 is out of range", "512"]);
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[cfg(unix)]
#[test]
fn interrupting_a_write_removes_the_temporary() {
    use std::os::unix::process::ExitStatusExt;
    // 4096 tokens: the forward pass takes most of a second, with the temporary already open.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.npy");
    let tokens = vec!["5"; 4096].join(",");
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"));
    child
        .args([
            "logits",
            "-m",
            s(&tiny()),
            "--tokens",
            &tokens,
            "-o",
            s(&out),
        ])
        .stderr(Stdio::null());
    // A shell runs background jobs with SIGINT ignored, and glint rightly keeps a signal the
    // user ignored (nohup); the child gets the default action back, as from a terminal.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        child.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let t = Instant::now();
    while !names(dir.path()).iter().any(|n| n.contains(".glint-tmp-")) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the temporary was seen"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no temporary appeared"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    // Still dies of the signal (a shell reports 130), after removing its temporary.
    assert_eq!(status.signal(), Some(2), "{status:?}");
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

// ---- 2. Bounded resources -----------------------------------------------------------------

fn with_template(dir: &Path, template: &str) -> PathBuf {
    with_meta(dir, |m| {
        set(m, "tokenizer.chat_template", Value::from(template));
    })
}

fn chat(model: &Path) -> (Output, Duration) {
    let t = Instant::now();
    let o = glint(&["generate", "-m", s(model), "-p", "hi", "-n", "1", "--chat"]);
    (o, t.elapsed())
}

#[test]
fn chat_template_with_endless_loops_runs_out_of_fuel() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_template(
        dir.path(),
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    );
    let (o, took) = chat(&m);
    fails_with(&o, &["chat template", "step budget"]);
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn chat_template_that_prints_without_end_hits_the_output_limit() {
    let dir = tempfile::tempdir().unwrap();
    let body = "x".repeat(10_000);
    let m = with_template(
        dir.path(),
        &format!("{{% for a in range(100000) %}}{{% for b in range(100000) %}}{body}{{% endfor %}}{{% endfor %}}"),
    );
    let (o, took) = chat(&m);
    fails_with(&o, &["chat template output exceeds the limit"]);
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn huge_split_count_fails_fast_on_the_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("x-00001-of-100000000.gguf");
    std::fs::copy(tiny(), &first).unwrap();
    let t = Instant::now();
    let o = glint(&["inspect", s(&first)]);
    fails_with(&o, &["x-00002-of-100000000.gguf"]);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// A GGUF whose only content is one UINT8 array of `n` elements, `i % 251`.
fn byte_array_file(path: &Path, n: u64) {
    let key = b"big.bytes";
    let mut b = Vec::with_capacity(n as usize + 64);
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&1u64.to_le_bytes()); // key/value pairs
    b.extend_from_slice(&(key.len() as u64).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
    b.extend_from_slice(&0u32.to_le_bytes()); // of UINT8
    b.extend_from_slice(&n.to_le_bytes());
    b.extend((0..n).map(|i| (i % 251) as u8));
    std::fs::write(path, b).unwrap();
}

#[cfg(unix)]
#[test]
fn inspect_of_large_metadata_arrays_stays_within_memory() {
    // A 50 MB file under a 512 MiB address-space cap: a `Value` per byte took 1.6 GB and the
    // JSON tree 8.6 GB (measured, docs/reliability.md); both commands must now succeed.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("big.gguf");
    byte_array_file(&f, 50_000_000);
    for json in ["", "--json"] {
        let cmd = format!(
            "ulimit -v 524288; exec '{}' inspect {json} '{}' > /dev/null",
            env!("CARGO_BIN_EXE_glint"),
            s(&f),
        );
        let o = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
        assert!(o.status.success(), "inspect {json}: {}", stderr(&o));
    }
    // The streamed JSON holds the whole array, in order (checked on a small one).
    let small = dir.path().join("small.gguf");
    byte_array_file(&small, 1000);
    let o = glint(&["inspect", "--json", s(&small)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let got: Vec<u64> = doc["metadata"]["big.bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (0..1000).map(|i| i % 251).collect();
    assert_eq!(got, want);
}

#[test]
fn huge_ctx_without_context_length_names_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| remove(m, "glm-dsa.context_length"));
    let o = glint(&[
        "generate",
        "-m",
        s(&m),
        "-p",
        "hi",
        "-n",
        "1",
        "--ctx",
        "1000000000000",
    ]);
    fails_with(
        &o,
        &[
            "--ctx 1000000000000",
            "KV cache",
            "bytes",
            "memory available",
        ],
    );
}

#[test]
fn logits_refuses_more_tokens_than_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = vec!["1"; 4097].join(",");
    let out = dir.path().join("l.npy");
    let o = glint(&[
        "logits",
        "-m",
        s(&tiny()),
        "--tokens",
        &tokens,
        "-o",
        s(&out),
    ]);
    fails_with(&o, &["4097 tokens exceed the context length 4096"]);
    assert!(names(dir.path()).is_empty());
}

#[test]
fn closing_stdout_early_is_a_quiet_exit() {
    // Enough ids (one 2-digit id per character, ~300 KB) to overflow the 64 KiB pipe buffer,
    // so glint is still writing when the reader leaves; under the 128 KiB argument limit.
    let text = "~".repeat(100_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(["tokenize", "-m", s(&tiny()), "-p", &text])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    stdout.read_exact(&mut one).unwrap();
    drop(stdout);
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{e}");
    assert!(o.status.success(), "{:?}: {e}", o.status);
}

#[test]
fn closing_stdout_early_stops_generation() {
    // 3000 tokens would be generated for nobody; the first failed write must stop the loop.
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
        .args([
            "generate",
            "-m",
            s(&tiny()),
            "-p",
            "hello",
            "-n",
            "3000",
            "--ctx",
            "4096",
            "--ignore-eos",
            "--temp",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    stdout.read_exact(&mut one).unwrap();
    drop(stdout);
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert!(o.status.success(), "{:?}: {e}", o.status);
    assert!(!e.contains("panicked"), "{e}");
    assert!(e.contains("stop: Stopped"), "{e}");
    let n: usize = e
        .split("generation: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no token count in {e}"));
    assert!(n < 3000, "{n} tokens generated after the reader left");
}

// ---- 3. Values validated where they enter -------------------------------------------------

/// Runs `glint logits` on the tiny model with `key` set to `v`; expects an error naming both.
fn bad_value(key: &str, v: Value, shown: &str) {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| set(m, key, v));
    let out = dir.path().join("l.npy");
    fails_with(&logits_of(&m, &out), &[key, shown, "allowed range"]);
    assert!(!out.exists());
}

#[test]
fn nan_rms_epsilon_is_refused() {
    bad_value(
        "glm-dsa.attention.layer_norm_rms_epsilon",
        Value::F32(f32::NAN),
        "NaN",
    );
}

#[test]
fn negative_rms_epsilon_is_refused() {
    bad_value(
        "glm-dsa.attention.layer_norm_rms_epsilon",
        Value::F32(-1e-6),
        "-0.000001",
    );
}

#[test]
fn nan_expert_weights_scale_is_refused() {
    bad_value("glm-dsa.expert_weights_scale", Value::F32(f32::NAN), "NaN");
}

#[test]
fn zero_or_nan_rope_base_is_refused() {
    bad_value("glm-dsa.rope.freq_base", Value::F32(0.0), "0");
    bad_value("glm-dsa.rope.freq_base", Value::F32(f32::NAN), "NaN");
}

#[test]
fn more_experts_used_than_the_groups_leave_is_refused() {
    // 8 experts in 2 groups, 1 group used: at most 4 experts are reachable.
    bad_value("glm-dsa.expert_used_count", Value::U32(5), "1..=4");
}

#[test]
fn nan_weight_is_reported_with_its_layer_never_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("nan.gguf");
    rewrite(
        &m,
        |_| {},
        |name, bytes| {
            if name == "blk.2.attn_norm.weight" {
                bytes[..4].copy_from_slice(&f32::NAN.to_le_bytes());
            }
        },
    );
    let out = dir.path().join("l.npy");
    fails_with(
        &logits_of(&m, &out),
        &["non-finite logit", "layer 2", "attention"],
    );
    assert!(!out.exists());
    let o = glint(&[
        "generate",
        "-m",
        s(&m),
        "-p",
        "hello",
        "-n",
        "4",
        "--temp",
        "0",
    ]);
    fails_with(&o, &["non-finite logit", "layer 2"]);
}

#[test]
fn bad_sampler_flags_name_flag_value_and_range() {
    let m = tiny();
    for (flag, value, words) in [
        ("--temp", "nan", "not a finite number"),
        ("--temp", "inf", "not a finite number"),
        ("--top-p", "nan", "0 to 1"),
        ("--top-p", "1.5", "0 to 1"),
        ("--min-p", "nan", "0 to 1"),
        ("--min-p", "-0.5", "0 to 1"),
        ("--repeat-penalty", "0", "above 0"),
        ("--repeat-penalty", "nan", "above 0"),
    ] {
        let o = glint(&["generate", "-m", s(&m), "-p", "hi", "-n", "1", flag, value]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {e}");
        for w in [flag, value, words] {
            assert!(e.contains(w), "{flag} {value}: stderr lacks {w:?}: {e}");
        }
    }
}

#[test]
fn negative_temperature_is_accepted_as_greedy() {
    let run = |t: &str| {
        let o = glint(&[
            "generate",
            "-m",
            s(&tiny()),
            "-p",
            "hello",
            "-n",
            "6",
            "--temp",
            t,
        ]);
        assert!(o.status.success(), "--temp {t}: {}", stderr(&o));
        o.stdout
    };
    assert_eq!(run("-1"), run("0"));
}

// ---- 4. Clear words for odd cases ---------------------------------------------------------

#[test]
fn directory_as_model_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let o = glint(&["inspect", s(dir.path())]);
    fails_with(&o, &["not a GGUF file", "a directory"]);
}

#[cfg(unix)]
#[test]
fn fifo_as_model_is_named_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.gguf");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo not available");
        return;
    }
    let t = Instant::now();
    let o = glint(&["inspect", s(&fifo)]);
    fails_with(&o, &["not a GGUF file", "a FIFO"]);
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn file_with_no_tokens_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| {
        set(
            m,
            "tokenizer.ggml.tokens",
            Value::Array(Array::new(ArrayData::String(Vec::new()))),
        );
        remove(m, "tokenizer.ggml.token_type");
        remove(m, "tokenizer.ggml.merges");
    });
    let o = glint(&["tokenize", "-m", s(&m), "-p", "hi"]);
    fails_with(&o, &["tokenizer.ggml.tokens is empty"]);
}

#[test]
fn vocabulary_shorter_than_the_embedding_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| {
        let Some((_, Value::Array(a))) = m.iter().find(|(k, _)| k == "tokenizer.ggml.tokens")
        else {
            panic!("fixture has tokens");
        };
        let ArrayData::String(t) = a.data() else {
            panic!("tokens are strings");
        };
        let short = t[..500].to_vec();
        set(
            m,
            "tokenizer.ggml.tokens",
            Value::Array(Array::new(ArrayData::String(short))),
        );
    });
    let out = dir.path().join("l.npy");
    fails_with(
        &logits_of(&m, &out),
        &[
            "tokenizer.ggml.tokens",
            "500 tokens",
            "512 rows of token_embd.weight",
        ],
    );
}

#[test]
fn a_character_the_vocabulary_cannot_spell_is_an_error() {
    // Remove the byte-level token for 'z' (and the merges that use it): "z" has no spelling.
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| {
        for (k, v) in m.iter_mut() {
            let Value::Array(a) = v else { continue };
            let ArrayData::String(list) = a.data() else {
                continue;
            };
            let mut list = list.clone();
            if k == "tokenizer.ggml.tokens" {
                let z = list.iter().position(|t| t == "z").expect("byte token z");
                list[z] = "<no-z>".into();
            } else if k == "tokenizer.ggml.merges" {
                list.retain(|mg| !mg.contains('z'));
            } else {
                continue;
            }
            *v = Value::Array(Array::new(ArrayData::String(list)));
        }
    });
    let o = glint(&["tokenize", "-m", s(&m), "-p", "lazy"]);
    fails_with(&o, &["cannot encode 'z'", "U+007A", "byte 2"]);
    // The untouched model spells the same text.
    let o = glint(&["tokenize", "-m", s(&tiny()), "-p", "lazy"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn missing_pre_tokenizer_uses_llama_cpp_default_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| remove(m, "tokenizer.ggml.pre"));
    let text = "Hello, world! 12345 it's";
    let o = glint(&["tokenize", "-m", s(&m), "-p", text]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("tokenizer.ggml.pre is missing"), "{e}");
    assert!(e.contains("'default'"), "{e}");
    // llama.cpp's default rule isolates punctuation runs (the apostrophe too), then applies
    // GPT-2's word rule, then splits digit runs off and into threes, so the pieces are "Hello"
    // "," " world" "!" " " "123" "45" " it" "'" "s". Each is a single pre-token of the
    // fixture's own glm4 rule, so tokenizing each alone with the fixture gives its ids.
    let ids: Vec<u32> = String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    let mut want = Vec::new();
    for piece in [
        "Hello", ",", " world", "!", " ", "123", "45", " it", "'", "s",
    ] {
        let o = glint(&["tokenize", "-m", s(&tiny()), "-p", piece]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8(o.stdout).unwrap();
        want.extend(text.trim().split(',').map(|x| x.parse::<u32>().unwrap()));
    }
    assert_eq!(ids, want);
}

#[test]
fn control_characters_in_keys_are_escaped_by_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| {
        set(m, "evil\u{1b}[2J\nfake: key", Value::U32(1));
    });
    let o = glint(&["inspect", s(&m)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(!out.contains('\u{1b}'), "raw ESC printed");
    assert!(out.contains(r"evil\u{1b}[2J\nfake: key = 1"), "{out}");
}

#[test]
fn control_characters_in_error_messages_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_meta(dir.path(), |m| {
        set(
            m,
            "general.architecture",
            Value::from("glm\u{1b}[31m-evil\r"),
        );
    });
    let out = dir.path().join("l.npy");
    let e = fails_with(
        &logits_of(&m, &out),
        &["unknown architecture", r"glm\u{1b}[31m-evil\r"],
    );
    assert!(!e.contains('\u{1b}') && !e.contains('\r'), "{e:?}");
}
