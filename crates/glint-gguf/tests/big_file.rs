//! Opening a 1 GiB file must cost only its header: the tensor is a sparse hole, and resident
//! memory (from /proc/self/status) may not grow by more than a few MB. A second test opens a
//! header as large as GLM-5's (its vocabulary and merges). Open times are printed, not asserted
//! (timing depends on the machine); docs/performance.md records them.
#![cfg(target_os = "linux")]

use std::io::Seek;
use std::sync::Mutex;
use std::time::Instant;

use glint_gguf::{GgmlType, Gguf, GgufWriter, TensorSpec, Value};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The tests measure process-wide RSS, so they must not run at the same time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn one_gib_sparse_file_opens_without_reading_data() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn glm5_sized_header() {
    use glint_gguf::{write_gguf, Array, ArrayData};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // GLM-5's tokenizer: 154,880 tokens and ~321k merges; ~1,800 tensor infos.
    let strings = |n: usize, f: fn(usize) -> String| {
        Value::Array(Array::new(ArrayData::String((0..n).map(f).collect())))
    };
    let md = vec![
        ("general.architecture".to_string(), Value::from("glm-dsa")),
        (
            "tokenizer.ggml.tokens".to_string(),
            strings(154_880, |i| format!("tok{i}\u{120}x")),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            strings(321_649, |i| format!("a{i} b{i}")),
        ),
    ];
    let specs: Vec<TensorSpec> = (0..1809)
        .map(|i| TensorSpec {
            name: format!("blk.{}.t{}.weight", i / 23, i % 23),
            ty: GgmlType::F32,
            dims: vec![8],
        })
        .collect();
    let zeros = [0u8; 32];
    let tensors: Vec<(TensorSpec, &[u8])> = specs.into_iter().map(|s| (s, &zeros[..])).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.gguf");
    write_gguf(&path, &md, &tensors).unwrap();
    drop(md);
    drop(tensors);

    let size = std::fs::metadata(&path).unwrap().len();
    let started = Instant::now();
    let g = Gguf::open(&path).unwrap();
    let elapsed = started.elapsed();
    let tokens = g.metadata().get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(
        (tokens.len(), tokens[154_879]),
        (154_880, "tok154879\u{120}x")
    );
    assert_eq!(
        g.metadata().get_str_array("tokenizer.ggml.merges").unwrap()[321_648],
        "a321648 b321648"
    );
    assert_eq!(g.tensors().len(), 1809);
    println!("GGUF open of a {size}-byte header (154,880 tokens, 321,649 merges, 1,809 tensors): {:.1} ms", elapsed.as_secs_f64() * 1e3);
}
