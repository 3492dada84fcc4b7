//! Split models: shard discovery, ordering by `split.no`, and the errors for inconsistent sets.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, read_json, Raw};
use glint_gguf::{Gguf, GgufError};

const SHARDS: [&str; 3] = [
    "split-00001-of-00003.gguf",
    "split-00002-of-00003.gguf",
    "split-00003-of-00003.gguf",
];

fn copy(dir: &Path, from: &str, to: &str) -> PathBuf {
    let dst = dir.join(to);
    std::fs::copy(fixture(from), &dst).unwrap();
    dst
}

/// A minimal shard: split.no (UINT16), split.count (UINT16), split.tensors.count (INT32) as
/// gguf-py and llama.cpp's gguf-split write them, plus one F32 [8] tensor.
fn shard(no: u16, count: u16, total: i32, tensor: &str) -> Vec<u8> {
    Raw::header(3, 1, 3)
        .str("split.no")
        .u32(2)
        .bytes(&no.to_le_bytes())
        .str("split.count")
        .u32(2)
        .bytes(&count.to_le_bytes())
        .str("split.tensors.count")
        .u32(5)
        .bytes(&total.to_le_bytes())
        .tensor(tensor, &[8], 0, 0)
        .pad(32)
        .zeros(32)
        .0
}

#[test]
fn missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let first = copy(dir.path(), SHARDS[0], SHARDS[0]);
    copy(dir.path(), SHARDS[2], SHARDS[2]);
    let err = Gguf::open(&first).err().unwrap();
    match err.root() {
        GgufError::MissingShard { path } => assert_eq!(path, &dir.path().join(SHARDS[1])),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains(SHARDS[1]), "{err}");
}

#[test]
fn duplicated_shard_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = copy(dir.path(), SHARDS[0], SHARDS[0]);
    copy(dir.path(), SHARDS[0], SHARDS[1]); // shard 1 copied over shard 2
    copy(dir.path(), SHARDS[2], SHARDS[2]);
    match Gguf::open(&first).err().unwrap().root() {
        GgufError::DuplicateShard {
            split_no: 0,
            first: a,
            second: b,
        } => {
            assert_eq!(
                (a, b),
                (&dir.path().join(SHARDS[0]), &dir.path().join(SHARDS[1]))
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn order_comes_from_split_no_not_file_names() {
    // Swap the names of shards 2 and 3: the merged view must still follow split.no.
    let dir = tempfile::tempdir().unwrap();
    copy(dir.path(), SHARDS[0], SHARDS[0]);
    copy(dir.path(), SHARDS[1], SHARDS[2]);
    let third = copy(dir.path(), SHARDS[2], SHARDS[1]);
    let g = Gguf::open(&third).unwrap();
    let expected = read_json("split.expected.json");
    let names: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
    let want: Vec<&str> = expected["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, want);
    let paths = g.shard_paths();
    assert_eq!(paths[1], dir.path().join(SHARDS[2]));
    assert_eq!(paths[2], dir.path().join(SHARDS[1]));
    // Data still comes from the right file.
    let t = g.tensor("blk.2.f32").unwrap();
    assert_eq!(t.shard, 1);
    let extra = read_json("split.extra.json");
    assert_eq!(
        hex(g.tensor_data(t)),
        extra["tensor_data_hex"]["blk.2.f32"].as_str().unwrap()
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn write_set(dir: &Path, shards: &[Vec<u8>]) -> PathBuf {
    let n = shards.len();
    for (i, s) in shards.iter().enumerate() {
        std::fs::write(dir.join(format!("m-{:05}-of-{n:05}.gguf", i + 1)), s).unwrap();
    }
    dir.join(format!("m-00001-of-{n:05}.gguf"))
}

#[test]
fn hand_built_set_opens() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_set(dir.path(), &[shard(0, 2, 2, "a"), shard(1, 2, 2, "b")]);
    let g = Gguf::open(p).unwrap();
    assert_eq!(
        g.tensors()
            .iter()
            .map(|t| (t.name.as_str(), t.shard))
            .collect::<Vec<_>>(),
        [("a", 0), ("b", 1)]
    );
}

#[test]
fn split_count_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_set(dir.path(), &[shard(0, 2, 2, "a"), shard(1, 3, 2, "b")]);
    match Gguf::open(p).err().unwrap().root() {
        GgufError::SplitCountMismatch {
            path,
            expected: 2,
            found: 3,
        } => assert!(path.ends_with("m-00002-of-00002.gguf")),
        other => panic!("{other}"),
    }
}

#[test]
fn split_no_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_set(dir.path(), &[shard(0, 2, 2, "a"), shard(2, 2, 2, "b")]);
    assert!(matches!(
        Gguf::open(p).err().unwrap().root(),
        GgufError::SplitNoOutOfRange {
            split_no: 2,
            count: 2,
            ..
        }
    ));
}

#[test]
fn tensor_in_two_shards() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_set(dir.path(), &[shard(0, 2, 2, "a"), shard(1, 2, 2, "a")]);
    assert!(matches!(
        Gguf::open(p).err().unwrap().root(),
        GgufError::TensorInTwoShards {
            first: 0,
            second: 1,
            ..
        }
    ));
}

#[test]
fn tensor_count_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_set(dir.path(), &[shard(0, 2, 3, "a"), shard(1, 2, 3, "b")]);
    assert!(matches!(
        Gguf::open(p).err().unwrap().root(),
        GgufError::TensorCountMismatch {
            expected: 3,
            found: 2
        }
    ));
}

#[test]
fn missing_split_keys() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Raw::header(3, 0, 0).0;
    let p = write_set(dir.path(), &[shard(0, 2, 1, "a"), plain]);
    let err = Gguf::open(p).err().unwrap();
    assert!(
        matches!(err.root(), GgufError::MissingKey { key } if key == "split.count"),
        "{err}"
    );
    assert!(err.to_string().contains("m-00002-of-00002.gguf"), "{err}");
}

#[test]
fn shard_renamed_without_pattern_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = copy(dir.path(), SHARDS[0], "model.gguf");
    assert!(matches!(
        Gguf::open(p).err().unwrap().root(),
        GgufError::UnnamedSplit { count: 3, .. }
    ));
}

#[test]
fn single_file_with_split_style_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = copy(dir.path(), "align64.gguf", "x-00001-of-00001.gguf");
    assert_eq!(Gguf::open(p).unwrap().tensors().len(), 4);
}

#[test]
fn split_name_parsing() {
    use glint_gguf::SplitName;
    let n = SplitName::parse(Path::new("/m/GLM-5-Q4_K_M-00002-of-00017.gguf")).unwrap();
    assert_eq!(
        (n.prefix.as_str(), n.index, n.count),
        ("GLM-5-Q4_K_M", 2, 17)
    );
    for bad in [
        "a.gguf",
        "a-0001-of-0002.gguf",
        "a-00003-of-00002.gguf",
        "a-00000-of-00002.gguf",
        "a-00001-of-00002.bin",
        "a-0000x-of-00002.gguf",
    ] {
        assert_eq!(SplitName::parse(Path::new(bad)), None, "{bad}");
    }
}
