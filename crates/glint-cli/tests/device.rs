//! `--device`: a device this build or machine cannot use is a clear error (exit 1, no panic),
//! before any output is written; an unknown device name is a usage error naming the choices.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5/glm5-tiny-f32.gguf")
}

fn glint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(args)
        .output()
        .unwrap()
}

/// Without the `cuda` feature the build says so; with it on a machine without a GPU the
/// missing driver or device is named (CUDA tests of a GPU machine live in glint-cuda).
fn no_cuda_here(o: &Output) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains("built without CUDA support")
            || e.contains("libcuda.so")
            || e.contains("CUDA device"),
        "{e}"
    );
}

#[test]
fn cuda_without_cuda_is_a_clear_error() {
    if cfg!(feature = "cuda") && Path::new("/dev/nvidia0").exists() {
        return; // a GPU machine: the CUDA tests cover it
    }
    let m = tiny();
    let m = m.to_str().unwrap();
    let o = glint(&[
        "generate", "-m", m, "-p", "hi", "-n", "2", "--device", "cuda",
    ]);
    no_cuda_here(&o);
    assert!(o.stdout.is_empty(), "printed before failing");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.npy");
    let o = glint(&[
        "logits",
        "-m",
        m,
        "--tokens",
        "1,2",
        "-o",
        out.to_str().unwrap(),
        "--device",
        "cuda:0",
    ]);
    no_cuda_here(&o);
    assert!(!out.exists(), "an output was left behind");
}

#[test]
fn unknown_devices_are_usage_errors() {
    let m = tiny();
    for (dev, want) in [
        ("gpu", "expected cpu, cuda or cuda:N"),
        ("cuda:x", "cuda:N"),
    ] {
        let o = glint(&[
            "generate",
            "-m",
            m.to_str().unwrap(),
            "-p",
            "hi",
            "--device",
            dev,
        ]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{dev}: {e}");
        assert!(e.contains(want), "{dev}: {e}");
    }
}
