//! Slow request bodies (slowloris) over raw TCP: a body that trickles in past
//! `body_timeout` gets a 408 and its connection is closed, while other clients are served;
//! a slow body that completes in time is served normally.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;

const TIMEOUT: Duration = Duration::from_millis(1500);

fn head(len: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: glint\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// Sends `body` in `pieces` pieces, `gap` apart, then reads the whole reply (to the
/// connection's end); returns it and when the reply's end came. Blocking sockets on their own
/// threads: a raw client that sends exactly these bytes.
async fn trickle(
    addr: std::net::SocketAddr,
    body: Vec<u8>,
    pieces: usize,
    gap: Duration,
) -> (String, Duration) {
    tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(head(body.len()).as_bytes()).unwrap();
        let mut wr = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let step = body.len().div_ceil(pieces);
            for c in body.chunks(step) {
                std::thread::sleep(gap);
                if wr.write_all(c).is_err() {
                    break; // the server hung up
                }
            }
        });
        let mut reply = Vec::new();
        // The reply arrives, then the connection ends (for the 408, before the body is whole).
        let _ = s.read_to_end(&mut reply);
        let at = t0.elapsed();
        drop(writer); // detached: it stops at its next write to the closed socket
        (String::from_utf8_lossy(&reply).into_owned(), at)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_bodies_get_408_and_others_are_served_meanwhile() {
    let mut cfg = config();
    cfg.body_timeout = TIMEOUT;
    let s = start(cfg).await;
    let addr = s.addr;
    let body = serde_json::to_vec(&json!({
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "temperature": 0,
    }))
    .unwrap();
    // Eight slow clients: one piece every 250 ms, which would take far past the timeout.
    let slow: Vec<_> = (0..8)
        .map(|_| {
            let b = body.clone();
            let n = b.len();
            tokio::spawn(async move { trickle(addr, b, n, Duration::from_millis(250)).await })
        })
        .collect();
    // Meanwhile the server answers others at once.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c = client();
    let t0 = Instant::now();
    let (status, v) = post(
        &c,
        &url(&s, "/v1/chat/completions"),
        &json!({
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(
        t0.elapsed() < TIMEOUT,
        "served while the slow bodies trickle"
    );
    for h in slow {
        let (reply, at) = h.await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        assert!(
            reply.to_ascii_lowercase().contains("connection: close"),
            "{reply}"
        );
        let json_at = reply.find("\r\n\r\n").unwrap() + 4;
        let v: serde_json::Value = serde_json::from_str(&reply[json_at..]).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        // Cut at the timeout (plus scheduling slack), not when the body would have ended.
        assert!(at >= TIMEOUT && at < TIMEOUT * 3, "{at:?}");
    }
    // A slow body that completes in time is served: three pieces 150 ms apart.
    let (reply, _) = trickle(addr, body.clone(), 3, Duration::from_millis(150)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let (status, _) = post(
        &c,
        &url(&s, "/v1/chat/completions"),
        &json!({
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        }),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_headers_are_cut_at_the_same_deadline() {
    let mut cfg = config();
    cfg.body_timeout = TIMEOUT;
    let s = start(cfg).await;
    let addr = s.addr;
    let slow = tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: glint\r\n")
            .unwrap();
        let mut wr = c.try_clone().unwrap();
        std::thread::spawn(move || {
            // A header line a byte every 200 ms, forever (until the server hangs up).
            for b in b"X-Slow: ".iter().chain([b'a'; 200].iter()) {
                std::thread::sleep(Duration::from_millis(200));
                if wr.write_all(&[*b]).is_err() {
                    break;
                }
            }
        });
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply);
        (String::from_utf8_lossy(&reply).into_owned(), t0.elapsed())
    });
    // Served meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = client();
    let (status, _) = post(
        &c,
        &url(&s, "/v1/completions"),
        &json!({"prompt": "Hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200);
    let (reply, at) = slow.await.unwrap();
    // hyper closes the connection at its header read timeout (with a 408 or without a reply).
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 408"),
        "{reply}"
    );
    assert!(at >= TIMEOUT && at < TIMEOUT * 3, "{at:?}");
}
