//! The in-process communicator on the CPU backend: each collective against the same sums
//! computed directly, bit-identical results on every rank, and a rank that never comes (or
//! leaves) is an error, not a hang.

use std::time::Duration;

use glint_core::{Backend, CpuBackend};
use glint_tp::{Communicator, LocalComm};

/// Rank r's input: values that do not sum exactly in f32, so the order is visible.
fn input(r: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + r * 13) % 11) as f32 * 0.1 + 1e-7 * r as f32)
        .collect()
}

fn on_ranks<T: Send>(world: usize, f: impl Fn(&LocalComm, &CpuBackend) -> T + Sync) -> Vec<T> {
    let comms = LocalComm::group(world, Duration::from_secs(30));
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c, &CpuBackend::new()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn collectives_match_direct_sums_in_rank_order() {
    let n = 37;
    for world in [1, 2, 3, 4] {
        let sum: Vec<f32> = (0..n)
            .map(|i| (1..world).fold(input(0, n)[i], |a, r| a + input(r, n)[i]))
            .collect();
        let outs = on_ranks(world, |c, be| {
            let r = Communicator::<CpuBackend>::rank(c);
            // A longer buffer: only the first n floats take part.
            let mut buf = be.upload(&[input(r, n), vec![9.0; 3]].concat()).unwrap();
            c.all_reduce_sum(be, &mut buf, n).unwrap();
            let mut gathered = be.alloc(world * n).unwrap();
            let src = be.upload(&input(r, n)).unwrap();
            c.all_gather(be, &src, n, &mut gathered).unwrap();
            let big: Vec<f32> = (0..world).flat_map(|k| input(r + k, n)).collect();
            let big = be.upload(&big).unwrap();
            let mut part = be.alloc(n).unwrap();
            c.reduce_scatter_sum(be, &big, n, &mut part).unwrap();
            let mut b = be.upload(&input(r, n)).unwrap();
            c.broadcast(be, &mut b, n, world - 1).unwrap();
            c.barrier(be).unwrap();
            (buf, gathered, part, b)
        });
        for (r, (buf, gathered, part, b)) in outs.iter().enumerate() {
            assert_eq!(&buf[..n], &sum[..], "world {world} rank {r}: all_reduce");
            assert_eq!(&buf[n..], &[9.0; 3], "all_reduce wrote past n");
            let want: Vec<f32> = (0..world).flat_map(|k| input(k, n)).collect();
            assert_eq!(gathered, &want, "all_gather");
            // Rank k contributed input(k + j) at chunk j: chunk r sums input(k + r) over k.
            let want: Vec<f32> = (0..n)
                .map(|i| (1..world).fold(input(r, n)[i], |a, k| a + input(k + r, n)[i]))
                .collect();
            assert_eq!(part, &want, "reduce_scatter");
            assert_eq!(b, &input(world - 1, n), "broadcast");
        }
    }
}

#[test]
fn a_missing_or_failing_rank_is_an_error_not_a_hang() {
    // Two ranks, only one ever calls: it times out with its rank and the op named.
    let mut comms = LocalComm::group(2, Duration::from_millis(200));
    let c = comms.remove(0);
    let be = CpuBackend::new();
    let mut buf = be.upload(&[1.0]).unwrap();
    let t = std::time::Instant::now();
    // The other rank is still alive (held in `comms`), so this can only end by the timeout.
    let e = c.all_reduce_sum(&be, &mut buf, 1).unwrap_err().to_string();
    assert!(e.contains("rank 0") && e.contains("all_reduce"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // A rank that leaves wakes the one waiting at once.
    let mut comms = LocalComm::group(2, Duration::from_secs(600));
    let c1 = comms.pop().unwrap();
    let c0 = comms.pop().unwrap();
    let t = std::time::Instant::now();
    let e = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let be = CpuBackend::new();
            Communicator::<CpuBackend>::barrier(&c0, &be).unwrap_err()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(c1);
        h.join().unwrap()
    });
    assert!(e.to_string().contains("left the group"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
}
