//! Opening GGUF models from disk: memory-mapped shards behind one merged tensor view.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use memmap2::Mmap;

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::parse::{parse_header, Header};
use crate::split::{SplitName, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_COUNT_KEY};
use crate::tensor::TensorInfo;

/// One file of a model.
struct Shard {
    path: PathBuf,
    /// `None` for an empty file, which memmap cannot map (it fails to parse anyway).
    map: Option<Mmap>,
    header: Header,
}

impl Shard {
    fn open(path: &Path) -> Result<Shard> {
        // Checked before opening: opening a FIFO blocks until a writer appears, and a
        // directory or device is never a model.
        let meta = std::fs::metadata(path).map_err(|e| GgufError::from(e).in_file(path))?;
        if !meta.is_file() {
            let kind = if meta.is_dir() {
                "a directory"
            } else {
                special_kind(&meta)
            };
            return Err(GgufError::NotAFile { kind }.in_file(path));
        }
        let file = File::open(path).map_err(|e| GgufError::from(e).in_file(path))?;
        let len = file
            .metadata()
            .map_err(|e| GgufError::from(e).in_file(path))?
            .len();
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only. Another process truncating or rewriting the file while
            // it is mapped would invalidate the slices we hand out; like every mmap-based model
            // loader (llama.cpp, safetensors) we require that model files are not modified while
            // open.
            Some(unsafe { Mmap::map(&file) }.map_err(|e| GgufError::from(e).in_file(path))?)
        };
        let header = parse_header(map.as_deref().unwrap_or(&[])).map_err(|e| e.in_file(path))?;
        Ok(Shard {
            path: path.to_path_buf(),
            map,
            header,
        })
    }

    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// A model: one GGUF file or all shards of a split model, with tensors merged by name.
pub struct Gguf {
    shards: Vec<Shard>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

impl Gguf {
    /// Maps the file (and its sibling shards, if the name is `NAME-0000N-of-0000M.gguf`) and
    /// parses the headers. Tensor data is not read: pages load when a tensor is first touched.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let started = Instant::now();
        let shards = match SplitName::parse(path) {
            Some(name) => open_split(path, &name)?,
            None => {
                let shard = Shard::open(path)?;
                let md = &shard.header.metadata;
                if let Some(count) = md.get(SPLIT_COUNT_KEY).and_then(|v| v.as_i128()) {
                    if count > 1 {
                        return Err(GgufError::UnnamedSplit {
                            path: path.to_path_buf(),
                            count: count as u64,
                        });
                    }
                }
                vec![shard]
            }
        };
        let gguf = Gguf::merge(shards)?;
        tracing::debug!(
            path = %path.display(),
            shards = gguf.shards.len(),
            tensors = gguf.tensors.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "opened GGUF"
        );
        Ok(gguf)
    }

    /// Parses a complete GGUF file image held in memory. Used for fuzzing and tests; models are
    /// opened with [`Gguf::open`].
    pub fn parse_bytes(bytes: &[u8]) -> Result<Header> {
        parse_header(bytes)
    }

    /// A single-file model from an image held in memory, for fuzzing the model loader and for
    /// tests. The bytes are copied into an anonymous map, so tensor data is page-aligned exactly
    /// as in a mapped file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Gguf> {
        let map = if bytes.is_empty() {
            None
        } else {
            let mut m = memmap2::MmapMut::map_anon(bytes.len())?;
            m.copy_from_slice(bytes);
            Some(m.make_read_only()?)
        };
        let header = parse_header(map.as_deref().unwrap_or(&[]))?;
        Gguf::merge(vec![Shard {
            path: PathBuf::from("<memory>"),
            map,
            header,
        }])
    }

    fn merge(shards: Vec<Shard>) -> Result<Gguf> {
        let total: usize = shards.iter().map(|s| s.header.tensors.len()).sum();
        let mut tensors = Vec::with_capacity(total);
        let mut index = HashMap::with_capacity(total);
        for (i, shard) in shards.iter().enumerate() {
            for t in &shard.header.tensors {
                if let Some(&prev) = index.get(&t.name) {
                    let prev: &TensorInfo = &tensors[prev];
                    return Err(GgufError::TensorInTwoShards {
                        name: t.name.clone(),
                        first: prev.shard,
                        second: i,
                    });
                }
                index.insert(t.name.clone(), tensors.len());
                tensors.push(TensorInfo {
                    shard: i,
                    ..t.clone()
                });
            }
        }
        if shards.len() > 1 {
            let md = &shards[0].header.metadata;
            if md.contains_key(SPLIT_TENSORS_COUNT_KEY) {
                let expected = md
                    .get_u64(SPLIT_TENSORS_COUNT_KEY)
                    .map_err(|e| e.in_file(&shards[0].path))?;
                if expected != tensors.len() as u64 {
                    return Err(GgufError::TensorCountMismatch {
                        expected,
                        found: tensors.len() as u64,
                    });
                }
            }
        }
        Ok(Gguf {
            shards,
            tensors,
            index,
        })
    }

    /// GGUF version of the first shard (2 or 3).
    pub fn version(&self) -> u32 {
        self.shards[0].header.version
    }

    /// Metadata of the first shard, which is where split writers put the model's keys.
    pub fn metadata(&self) -> &Metadata {
        &self.shards[0].header.metadata
    }

    /// All tensors, in shard order then file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor's bytes inside the mapped file. Bounds were checked at open; a `TensorInfo`
    /// that does not belong to this model yields an empty slice rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let Some(shard) = self.shards.get(t.shard) else {
            return &[];
        };
        let start = shard.header.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(t.n_bytes);
        usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| shard.bytes().get(s..e))
            .unwrap_or(&[])
    }

    pub fn tensor_bytes(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let t = self.tensor(name).ok_or_else(|| GgufError::MissingTensor {
            name: name.to_string(),
        })?;
        Ok((t, self.tensor_data(t)))
    }

    /// Reads every shard into memory now, touching one byte of each 4 KiB page through the
    /// map (on the rayon pool's threads, a progress line every 8 GiB). A backend that
    /// computes from the mapped bytes in place (the CPU's) otherwise pays for pages on first
    /// touch, and in a MoE model that is spread over the first many tokens (each reaches
    /// experts no token read before): on a cold page cache a 2-core Zen 3 decoded a 3.5 GiB
    /// file's first tg32 repetition at ~6 tok/s against 9.3 warm. llama.cpp maps with
    /// `MAP_POPULATE` for the same reason (`madvise(MADV_WILLNEED)` returned at once there and
    /// read nothing in). Skipped, with a line saying so, when the model is larger than the
    /// memory the OS says is available: touching it all would only evict its first pages.
    pub fn prefetch(&self) {
        use rayon::prelude::*;
        const PAGE: usize = 4096;
        const PIECE: usize = 64 << 20;
        let total: usize = self.shards.iter().map(|s| s.bytes().len()).sum();
        if let Some(avail) = available_memory() {
            if total as u64 > avail {
                tracing::info!(
                    model_gib = total as f64 / (1u64 << 30) as f64,
                    available_gib = avail as f64 / (1u64 << 30) as f64,
                    "not prefetching weights: the model is larger than available memory"
                );
                return;
            }
        }
        let started = Instant::now();
        let done = std::sync::atomic::AtomicUsize::new(0);
        for shard in &self.shards {
            shard.bytes().par_chunks(PIECE).for_each(|piece| {
                let mut x = 0u8;
                for off in (0..piece.len()).step_by(PAGE) {
                    x ^= piece[off];
                }
                std::hint::black_box(x);
                let before = done.fetch_add(piece.len(), std::sync::atomic::Ordering::Relaxed);
                if (before + piece.len()) >> 33 > before >> 33 {
                    tracing::info!(
                        gib = (before + piece.len()) >> 30,
                        of_gib = total >> 30,
                        "prefetching weights"
                    );
                }
            });
        }
        tracing::debug!(
            gib = total as f64 / (1u64 << 30) as f64,
            secs = started.elapsed().as_secs_f64(),
            "weights prefetched"
        );
    }

    /// Shard paths ordered by `split.no`.
    pub fn shard_paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    pub fn n_shards(&self) -> usize {
        self.shards.len()
    }

    /// The parsed header of shard `i` (by `split.no`), for tools that show per-shard metadata.
    pub fn shard_header(&self, i: usize) -> Option<&Header> {
        self.shards.get(i).map(|s| &s.header)
    }
}

#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

/// Opens every shard named like `path`, then orders them by their `split.no` key.
fn open_split(path: &Path, name: &SplitName) -> Result<Vec<Shard>> {
    // The count comes from a file name; building its paths first would let
    // `x-00001-of-99999999.gguf` allocate gigabytes before finding shard 2 missing.
    if let Some(missing) = name.first_missing(path) {
        return Err(GgufError::MissingShard { path: missing });
    }
    let paths = name.all_paths(path);
    let count = u64::from(name.count);
    let mut slots: Vec<Option<Shard>> = (0..name.count).map(|_| None).collect();
    for (i, p) in paths.iter().enumerate() {
        let shard = Shard::open(p)?;
        let md = &shard.header.metadata;
        let in_file = |e: GgufError| e.in_file(p);
        // A single-file "-00001-of-00001" model may omit the split keys.
        let (found_count, split_no) = if count == 1 && !md.contains_key(SPLIT_COUNT_KEY) {
            (1, 0)
        } else {
            (
                md.get_u64(SPLIT_COUNT_KEY).map_err(in_file)?,
                md.get_u64(SPLIT_NO_KEY).map_err(in_file)?,
            )
        };
        if found_count != count {
            return Err(GgufError::SplitCountMismatch {
                path: p.clone(),
                expected: count,
                found: found_count,
            });
        }
        if split_no >= count {
            return Err(GgufError::SplitNoOutOfRange {
                path: p.clone(),
                split_no,
                count,
            });
        }
        if split_no != i as u64 {
            tracing::warn!(path = %p.display(), split_no, "shard file name disagrees with split.no; using split.no");
        }
        let slot = &mut slots[split_no as usize];
        if let Some(prev) = slot {
            return Err(GgufError::DuplicateShard {
                split_no,
                first: prev.path.clone(),
                second: p.clone(),
            });
        }
        *slot = Some(shard);
    }
    // `count` files with distinct split.no values below `count` fill every slot.
    Ok(slots.into_iter().flatten().collect())
}

/// Bytes of memory the OS reports available (Linux: `MemAvailable` in /proc/meminfo); None
/// where it does not say.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
