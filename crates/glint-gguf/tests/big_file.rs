//! Opening a 1 GiB file must cost only its header: the tensor is a sparse hole, and resident
//! memory (from /proc/self/status) may not grow by more than a few MB. Open time is printed, not
//! asserted (timing depends on the machine); docs/performance.md records it.
#![cfg(target_os = "linux")]

use std::io::Seek;
use std::time::Instant;

use glint_gguf::{GgmlType, Gguf, GgufWriter, TensorSpec, Value};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn one_gib_sparse_file_opens_without_reading_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.gguf");
    // F16 [65536, 8192]: 2^29 elements, 1 GiB of data.
    let spec = TensorSpec {
        name: "blk.0.ffn_up.weight".into(),
        ty: GgmlType::F16,
        dims: vec![65536, 8192],
    };
    let md = [("general.architecture".to_string(), Value::from("glm-dsa"))];
    let mut file = std::fs::File::create(&path).unwrap();
    let w = GgufWriter::new(&mut file, &md, std::slice::from_ref(&spec)).unwrap();
    drop(w); // unbuffered, so the header is on disk; the data is never written: it stays a hole
    let header_len = file.stream_position().unwrap();
    file.set_len(header_len + (1 << 30)).unwrap();
    drop(file);
    assert!(std::fs::metadata(&path).unwrap().len() >= 1 << 30);

    let before = rss_kib();
    let started = Instant::now();
    let g = Gguf::open(&path).unwrap();
    let elapsed = started.elapsed();
    let t = g.tensor("blk.0.ffn_up.weight").unwrap();
    let data = g.tensor_data(t);
    assert_eq!(data.len(), 1 << 30);
    // Touch the first and last byte: two pages, not a gigabyte.
    assert_eq!((data[0], data[data.len() - 1]), (0, 0));
    let after = rss_kib();
    println!(
        "GGUF open of a 1 GiB file: {:.3} ms, RSS {before} KiB -> {after} KiB",
        elapsed.as_secs_f64() * 1e3
    );
    assert!(
        after.saturating_sub(before) < 4096,
        "RSS grew by {} KiB",
        after - before
    );
}
