//! GGUF v2/v3 reader and writer.

mod types;
pub use types::GgmlType;
