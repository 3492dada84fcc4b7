//! Bounds-checked little-endian reads over a byte slice.
//!
//! Every read checks the remaining length first and reports the offset and what was being read,
//! so a corrupt file yields an error pointing at the bad field instead of a panic.

use crate::error::{GgufError, Result};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    pub(crate) fn take(&mut self, n: usize, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos(),
                needed: n as u64,
                available: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: impl FnOnce() -> String) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: impl FnOnce() -> String) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Checks that `count` items of at least `min_size` bytes each can still fit in the file.
    /// Called before any allocation sized by a count read from the file.
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_size: u64,
        offset: u64,
        what: impl FnOnce() -> String,
    ) -> Result<usize> {
        let available = self.remaining();
        match count.checked_mul(min_size) {
            Some(bytes) if bytes <= available => Ok(count as usize),
            _ => Err(GgufError::LengthTooLarge {
                what: what(),
                offset,
                len: count,
                min_bytes: count.saturating_mul(min_size),
                available,
            }),
        }
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator).
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let start = self.pos();
        let len = self.u64(|| format!("length of {}", what()))?;
        let n = self.check_count(len, 1, start, what)?;
        let bytes = self.take(n, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: start + 8,
            }),
        }
    }
}
