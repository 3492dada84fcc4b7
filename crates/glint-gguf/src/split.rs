//! Split-model naming (`NAME-0000N-of-0000M.gguf`, as llama.cpp's `gguf-split` writes it) and the
//! metadata keys that tie shards together.

use std::path::{Path, PathBuf};

pub const SPLIT_NO_KEY: &str = "split.no";
pub const SPLIT_COUNT_KEY: &str = "split.count";
pub const SPLIT_TENSORS_COUNT_KEY: &str = "split.tensors.count";

/// A shard file name taken apart: `prefix-{index:05}-of-{count:05}.gguf`, `index` 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitName {
    pub prefix: String,
    pub index: u32,
    pub count: u32,
}

impl SplitName {
    /// Recognises a shard name; `None` for an ordinary file name.
    pub fn parse(path: &Path) -> Option<SplitName> {
        let name = path.file_name()?.to_str()?;
        let stem = name.strip_suffix(".gguf")?;
        let (rest, count) = stem.rsplit_once("-of-")?;
        let (prefix, index) = rest.rsplit_once('-')?;
        let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(index) || !digits(count) {
            return None;
        }
        let index: u32 = index.parse().ok()?;
        let count: u32 = count.parse().ok()?;
        if count == 0 || index == 0 || index > count {
            return None;
        }
        Some(SplitName {
            prefix: prefix.to_string(),
            index,
            count,
        })
    }

    /// The path of the first shard (in index order) that does not exist, found without
    /// building all `count` paths: shards are probed one at a time, so a forged count of
    /// 10^8 costs at most one probe per shard actually present, plus one.
    pub fn first_missing(&self, path: &Path) -> Option<PathBuf> {
        let dir = path.parent().unwrap_or(Path::new(""));
        (1..=self.count)
            .map(|i| self.shard_path(dir, i))
            .find(|p| !p.exists())
    }

    fn shard_path(&self, dir: &Path, i: u32) -> PathBuf {
        dir.join(format!(
            "{}-{:05}-of-{:05}.gguf",
            self.prefix, i, self.count
        ))
    }

    /// Paths of all shards, next to `path`, in file-name order (1-based names). The reader
    /// orders them by `split.no` afterwards; names only tell it which files to open.
    pub fn all_paths(&self, path: &Path) -> Vec<PathBuf> {
        let dir = path.parent().unwrap_or(Path::new(""));
        (1..=self.count).map(|i| self.shard_path(dir, i)).collect()
    }
}
