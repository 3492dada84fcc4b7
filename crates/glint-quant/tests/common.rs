//! Shared fixture loading for the reference tests (files written by
//! fixtures/make_quant_fixtures.py; see that script for how each was produced).

#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/quant")
}

pub fn read(rel: &str) -> Vec<u8> {
    let p = fixture_dir().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading fixture {}: {e}", p.display()))
}

pub fn read_f32(rel: &str) -> Vec<f32> {
    read(rel)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Index and bit patterns of the first mismatch, for readable failures.
pub fn first_f32_mismatch(got: &[f32], want: &[f32]) -> Option<(usize, u32, u32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, (a, b))| (i, a.to_bits(), b.to_bits()))
}
