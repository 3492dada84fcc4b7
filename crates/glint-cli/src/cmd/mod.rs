//! One module per subcommand: each has an `Args` (clap) and a `run`.

pub mod bench;
pub mod dequant;
pub mod generate;
pub mod inspect;
pub mod logits;
pub mod memory;
pub mod non_finite;
pub mod quantize;
pub mod serve;
pub mod session;
pub mod synth;
pub mod tokenize;
pub mod tp;
pub mod values;

use std::path::Path;

use glint_gguf::Gguf;

/// Every file a command reads from `gguf` (all shards, plus the path as given), which an
/// output must not be: see [`glint_gguf::SafeOutput`].
pub fn input_paths<'a>(gguf: &'a Gguf, given: &'a Path) -> Vec<&'a Path> {
    let mut v = gguf.shard_paths();
    v.push(given);
    v
}
