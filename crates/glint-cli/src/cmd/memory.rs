//! Checking a context size against memory before the KV cache is allocated: the cache is
//! allocated whole at load, so `--ctx 1000000000000` would otherwise abort in the allocator
//! (exit 134) instead of saying what it asked for.

use std::path::{Path, PathBuf};

use glm5_model::Config;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{flag} {ctx}: a KV cache for {ctx} tokens does not fit in 64 bits of bytes ({path})")]
    Overflow {
        flag: &'static str,
        ctx: usize,
        path: PathBuf,
    },
    #[error(
        "{flag} {ctx}: the KV cache for {ctx} tokens needs {need} bytes ({:.1} GiB), more than \
         the {avail} bytes ({:.1} GiB) of memory available ({path})",
        gib(*need),
        gib(*avail)
    )]
    TooLarge {
        flag: &'static str,
        ctx: usize,
        need: u64,
        avail: u64,
        path: PathBuf,
    },
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Fails if a cache for `ctx` tokens of `cfg` cannot fit in the memory available now (or in
/// the address space when that cannot be read).
pub fn check_kv_cache(
    cfg: &Config,
    ctx: usize,
    flag: &'static str,
    path: &Path,
) -> Result<(), MemoryError> {
    let need = cfg
        .kv_cache_bytes(ctx)
        .ok_or_else(|| MemoryError::Overflow {
            flag,
            ctx,
            path: path.to_path_buf(),
        })?;
    let avail = available_bytes().unwrap_or(isize::MAX as u64);
    if need > avail {
        return Err(MemoryError::TooLarge {
            flag,
            ctx,
            need,
            avail,
            path: path.to_path_buf(),
        });
    }
    tracing::debug!(ctx, need, avail, "KV cache fits");
    Ok(())
}

/// `MemAvailable` from `/proc/meminfo` (Linux), in bytes.
fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
