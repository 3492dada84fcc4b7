//! `glint serve` as a process: it starts on the tiny model, answers over HTTP, and on SIGTERM
//! finishes the request it is streaming before it exits with success.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{glint, repo};

fn tiny() -> String {
    repo()
        .join("fixtures/glm5/glm5-tiny-f32.gguf")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn serve_answers_and_drains_on_sigterm() {
    answers_and_drains_on_sigterm(&[]);
}

#[test]
fn serve_tp2_answers_and_drains_on_sigterm() {
    answers_and_drains_on_sigterm(&["--tp", "2"]);
}

/// A signal sent the moment the address is announced is caught (the handlers are in place
/// before the announcement), not the default action that kills the process: the server
/// drains and exits 0.
#[test]
fn serve_catches_a_sigterm_sent_at_its_announcement() {
    for _ in 0..5 {
        let (mut child, _, err) = spawn_serve(&[]);
        let pid = child.id().to_string();
        let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(st.success());
        let status = child.wait().unwrap();
        let logs = err.join().unwrap();
        assert!(status.success(), "{status}: {logs}");
        assert!(logs.contains("draining"), "{logs}");
    }
}

/// Starts `glint serve` on the tiny model and waits for its announcement; returns the child,
/// the announced address and a thread that drains its stderr.
fn spawn_serve(extra: &[&str]) -> (std::process::Child, String, std::thread::JoinHandle<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(["serve", "-m", &tiny(), "--port", "0", "--max-seqs", "2"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let addr = loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "glint serve exited early: {seen}"
        );
        seen.push_str(&line);
        if let Some(rest) = line.strip_prefix("glint serve: http://") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    let logs = std::thread::spawn(move || {
        let _ = err.read_to_string(&mut seen);
        seen
    });
    (child, addr, logs)
}

fn answers_and_drains_on_sigterm(extra: &[&str]) {
    let (mut child, addr, logs) = spawn_serve(extra);
    let body = r#"{"messages":[{"role":"user","content":"Hi"}],"temperature":0,"max_tokens":3000,"ignore_eos":true,"stream":true}"#;
    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    let n = conn.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // The request is running: ask the server to stop.
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest);
    let status = child.wait().unwrap();
    let logs = logs.join().unwrap();
    assert!(status.success(), "{status}: {logs}");
    assert!(
        rest.contains(r#""finish_reason":"length""#) && rest.contains("data: [DONE]"),
        "the running request was cut off: ...{}",
        &rest[rest.len().saturating_sub(400)..]
    );
    assert!(logs.contains("draining"), "{logs}");
}

#[test]
fn serve_refuses_a_context_beyond_the_model() {
    let o = glint(&["serve", "-m", &tiny(), "--ctx", "100000", "--port", "0"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--ctx 100000") && e.contains("4096"), "{e}");
}

#[test]
fn serve_refuses_splits_it_cannot_make() {
    let o = glint(&["serve", "-m", &tiny(), "--ep", "--port", "0"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--ep needs --tp 2 or more"), "{e}");
    // The tiny model's 512-row output head does not split three ways: the error names the
    // tensor, and the process exits instead of waiting on the other ranks.
    let o = glint(&["serve", "-m", &tiny(), "--tp", "3", "--port", "0"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("output.weight") && e.contains("3 ranks"), "{e}");
}
