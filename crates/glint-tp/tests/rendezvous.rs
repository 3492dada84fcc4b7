//! The rendezvous on loopback, one thread per rank: the payload reaches every rank; a
//! mismatched model file or world size, a rank that never comes, and a master that never
//! listens are errors naming the rank and the numbers, within the timeout.

use std::path::Path;
use std::time::{Duration, Instant};

use glint_tp::{header_fingerprint, Rendezvous, RendezvousError};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the ranks `(rank, world, fingerprint)` against one master; results in the same order.
fn meet(ranks: &[(usize, usize, u64)], timeout: Duration) -> Vec<Result<Vec<u8>, RendezvousError>> {
    let master = format!("127.0.0.1:{}", free_port());
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|&(rank, world, fp)| {
                let master = master.clone();
                s.spawn(move || {
                    if rank != 0 {
                        // Ranks may start before the master listens.
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    let r = Rendezvous {
                        master,
                        rank,
                        world,
                        timeout,
                    };
                    r.join(fp, || Ok((0u8..128).collect()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_rank_receives_the_payload() {
    let out = meet(&[(0, 3, 7), (2, 3, 7), (1, 3, 7)], Duration::from_secs(10));
    for r in out {
        assert_eq!(r.unwrap(), (0u8..128).collect::<Vec<_>>());
    }
}

#[test]
fn a_different_model_file_is_refused_on_both_sides() {
    let out = meet(&[(0, 2, 7), (1, 2, 8)], Duration::from_secs(10));
    let e0 = out[0].as_ref().unwrap_err().to_string();
    assert!(
        e0.contains("rank 1") && e0.contains("model file") && e0.contains("0000000000000008"),
        "{e0}"
    );
    let e1 = out[1].as_ref().unwrap_err().to_string();
    assert!(
        e1.contains("refused by rank 0") && e1.contains("model file"),
        "{e1}"
    );
}

#[test]
fn a_different_world_size_is_refused() {
    let out = meet(&[(0, 2, 7), (1, 3, 7)], Duration::from_secs(10));
    let e0 = out[0].as_ref().unwrap_err().to_string();
    assert!(
        e0.contains("world size") && e0.contains("it has 3, rank 0 has 2"),
        "{e0}"
    );
    assert!(out[1].is_err());
}

#[test]
fn a_rank_that_never_comes_times_out_everywhere() {
    let t = Instant::now();
    let out = meet(&[(0, 3, 7), (1, 3, 7)], Duration::from_millis(400));
    let e0 = out[0].as_ref().unwrap_err().to_string();
    assert!(e0.contains("ranks [2] did not join within 0.4 s"), "{e0}");
    // Rank 1 came and hears why the run stops.
    let e1 = out[1].as_ref().unwrap_err().to_string();
    assert!(e1.contains("ranks [2] did not join"), "{e1}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn no_master_is_a_timeout() {
    let t = Instant::now();
    let r = Rendezvous {
        master: format!("127.0.0.1:{}", free_port()),
        rank: 1,
        world: 2,
        timeout: Duration::from_millis(300),
    };
    let e = r.join(7, || Ok(vec![])).unwrap_err().to_string();
    assert!(
        e.contains("rank 0 was not listening within 0.3 s (rank 1 of 2)"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn the_fingerprint_tells_model_files_apart() {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5");
    let open = |f: &str| glint_gguf::Gguf::open(d.join(f)).unwrap();
    let a = header_fingerprint(&open("glm5-tiny-f32.gguf"));
    assert_eq!(a, header_fingerprint(&open("glm5-tiny-f32.gguf")));
    // The same weights, one metadata value different (indexer top_k).
    assert_ne!(a, header_fingerprint(&open("glm5-tiny-topk2048-f32.gguf")));
    assert_ne!(
        a,
        header_fingerprint(&open("llamacpp/glm5-tiny-lc-q8_0.gguf"))
    );
}

/// The child half of `two_processes_meet`: does nothing unless started by it.
#[test]
fn two_processes_child() {
    let (Ok(master), Ok(fp)) = (
        std::env::var("GLINT_TP_TEST_MASTER"),
        std::env::var("GLINT_TP_TEST_FP"),
    ) else {
        return;
    };
    let r = Rendezvous {
        master,
        rank: 1,
        world: 2,
        timeout: Duration::from_secs(20),
    };
    match r.join(fp.parse().unwrap(), || Ok(vec![])) {
        Ok(p) => println!("CHILD-GOT {p:?}"),
        Err(e) => println!("CHILD-ERR {e}"),
    }
}

/// Two processes on loopback: this test binary again as rank 1 (`two_processes_child`), this
/// process as rank 0; once with the same model fingerprint, once with another.
#[test]
fn two_processes_meet() {
    for (child_fp, ok) in [(42u64, true), (43, false)] {
        let master = format!("127.0.0.1:{}", free_port());
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "two_processes_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("GLINT_TP_TEST_MASTER", &master)
            .env("GLINT_TP_TEST_FP", child_fp.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let r = Rendezvous {
            master,
            rank: 0,
            world: 2,
            timeout: Duration::from_secs(20),
        };
        let mine = r.join(42, || Ok(vec![9, 8, 7]));
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if ok {
            assert_eq!(mine.unwrap(), vec![9, 8, 7]);
            assert!(text.contains("CHILD-GOT [9, 8, 7]"), "{text}");
        } else {
            let e = mine.unwrap_err().to_string();
            assert!(e.contains("model file"), "{e}");
            assert!(
                text.contains("CHILD-ERR") && text.contains("model file"),
                "{text}"
            );
        }
    }
}
