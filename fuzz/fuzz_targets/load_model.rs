//! Feeds arbitrary metadata and tensor tables to the model loader: `Config::from_gguf` (every
//! key validated) and `Glm5::load` (every tensor bound by name and shape, rope table, a small KV
//! cache). The property is "an error, never a panic, an abort or a huge allocation", whatever
//! the header says. (The tokenizer is left out: compiling its regexes under the sanitizer
//! costs ~10 ms per input, which cut the rate to 80 inputs/s.)
//!
//! Only the header comes from the fuzzer: tensor data past the end of the input is supplied as
//! zeros (the buffer grows geometrically until every declared tensor fits, up to 16 MiB), so
//! libFuzzer's mutations all land on keys, values, names, shapes and offsets instead of on
//! weight bytes that the loader never interprets.
#![no_main]

use glint_gguf::{Gguf, GgufError};
use glm5_model::{Config, CpuBackend, Glm5};
use libfuzzer_sys::fuzz_target;

/// The largest image the harness builds; bigger declared tensors are left out of bounds.
const MAX_IMAGE: u64 = 16 << 20;

fn image(data: &[u8]) -> Option<Gguf> {
    let mut buf = data.to_vec();
    loop {
        match Gguf::from_bytes(&buf) {
            Ok(g) => return Some(g),
            Err(e) => {
                let GgufError::TensorOutOfBounds { end, .. } = e.root() else {
                    return None;
                };
                let len = buf.len() as u64;
                if *end > MAX_IMAGE || *end <= len {
                    return None;
                }
                buf.resize((*end).max(len * 2).min(MAX_IMAGE) as usize, 0);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(gguf) = image(data) else {
        return;
    };
    if Config::from_gguf(&gguf).is_err() {
        return;
    }
    let _ = Glm5::load(&gguf, CpuBackend::new(), 8);
});
