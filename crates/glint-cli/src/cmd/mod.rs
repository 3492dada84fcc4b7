//! One module per subcommand: each has an `Args` (clap) and a `run`.

pub mod dequant;
pub mod generate;
pub mod inspect;
pub mod logits;
pub mod quantize;
pub mod tokenize;
