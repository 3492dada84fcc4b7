//! GGUF v2/v3 reader and writer.
//!
//! Files are memory-mapped and tensor data is handed out as slices of the map, so opening a
//! multi-hundred-gigabyte model costs only its header. Every length in the header is checked
//! against the file before it is used, so corrupt files produce a [`GgufError`], never a panic
//! or an oversized allocation. Split models (`NAME-0000N-of-0000M.gguf`) open as one [`Gguf`].

mod cursor;
mod error;
mod file;
mod metadata;
mod parse;
mod safe_output;
mod split;
mod tensor;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::Gguf;
pub use metadata::Metadata;
pub use parse::{parse_header, Header, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH};
pub use safe_output::{write_error, OutputError, SafeOutput};
pub use split::{SplitName, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_COUNT_KEY};
pub use tensor::{TensorInfo, MAX_DIMS};
pub use types::GgmlType;
pub use value::{Array, ArrayData, Value, ValueType};
pub use writer::{write_gguf, GgufWriter, TensorSpec, WRITE_VERSION};
