//! Errors for reading and writing GGUF files.
//!
//! Every variant names the thing that is wrong (key, tensor, file, offset) so that a user with a
//! multi-hundred-gigabyte model can tell which shard and which field to look at without a debugger.

use std::path::PathBuf;

use crate::GgmlType;

/// Anything that can go wrong while reading or writing GGUF.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Wraps another error with the file it came from; see [`GgufError::root`]. The inner
    /// error is part of the message rather than a `source()`, so error-chain printers do not
    /// repeat it.
    #[error("{}: {inner}", path.display())]
    File {
        path: PathBuf,
        inner: Box<GgufError>,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Output(#[from] crate::safe_output::OutputError),

    #[error("not a GGUF file: it is {kind}")]
    NotAFile { kind: &'static str },
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: Vec<u8> },
    #[error("GGUF version {version} is not supported (only v2 and v3)")]
    UnsupportedVersion { version: u32 },
    #[error("big-endian GGUF (version {version} byte-swapped) is not supported; convert it with gguf-py's gguf_convert_endian")]
    BigEndian { version: u32 },
    /// A fixed-size field runs past the end of the file.
    #[error("file truncated: {what} at offset {offset} needs {needed} bytes, {available} left")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },
    /// A declared length or count cannot fit in what is left of the file.
    #[error("{what} at offset {offset} declares {len} entries/bytes (at least {min_bytes} bytes), only {available} bytes left in the file")]
    LengthTooLarge {
        what: String,
        offset: u64,
        len: u64,
        min_bytes: u64,
        available: u64,
    },
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("key '{key}': unknown metadata value type {id} at offset {offset}")]
    UnknownValueType { key: String, id: u32, offset: u64 },
    #[error("key '{key}': bool stored as {value}, expected 0 or 1")]
    InvalidBool { key: String, value: u8 },
    #[error("key '{key}': arrays nested deeper than {max_depth} levels")]
    NestingTooDeep { key: String, max_depth: usize },
    #[error("duplicate metadata key '{key}'")]
    DuplicateKey { key: String },
    #[error("general.alignment = {value}: must be a nonzero power of two")]
    InvalidAlignment { value: u64 },

    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor { name: String },
    #[error("tensor '{tensor}': {n_dims} dimensions, at most 4 are allowed")]
    TooManyDims { tensor: String, n_dims: u32 },
    #[error("tensor '{tensor}': unknown GGML type id {id}")]
    UnknownTensorType { tensor: String, id: u32 },
    #[error("tensor '{tensor}': dimensions {dims:?} overflow 64-bit element or byte counts")]
    DimsOverflow { tensor: String, dims: Vec<u64> },
    #[error("tensor '{tensor}': row length {row_len} is not a multiple of {ty}'s block size {block_size}")]
    RowNotBlockAligned {
        tensor: String,
        ty: GgmlType,
        row_len: u64,
        block_size: u64,
    },
    #[error(
        "tensor '{tensor}': data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    UnalignedTensorOffset {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor '{tensor}': data bytes {start}..{end} (absolute) lie outside the file of {file_len} bytes")]
    TensorOutOfBounds {
        tensor: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
    #[error("tensors '{first}' and '{second}' overlap in the data section")]
    OverlappingTensors { first: String, second: String },

    #[error("metadata key '{key}' not found")]
    MissingKey { key: String },
    #[error("metadata key '{key}': expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key '{key}': value {value} does not fit in {target}")]
    ValueOutOfRange {
        key: String,
        value: String,
        target: &'static str,
    },
    #[error("tensor '{name}' not found")]
    MissingTensor { name: String },

    #[error("split model: shard file {} is missing", path.display())]
    MissingShard { path: PathBuf },
    #[error("split model: {} and {} both claim split.no = {split_no}", first.display(), second.display())]
    DuplicateShard {
        split_no: u64,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("split model: {} has split.count = {found}, expected {expected}", path.display())]
    SplitCountMismatch {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error("split model: {} has split.no = {split_no}, outside 0..{count}", path.display())]
    SplitNoOutOfRange {
        path: PathBuf,
        split_no: u64,
        count: u64,
    },
    #[error("split model: {} has split.count = {count} but its name does not follow NAME-0000N-of-0000M.gguf, so the other shards cannot be found", path.display())]
    UnnamedSplit { path: PathBuf, count: u64 },
    #[error("split model: tensor '{name}' appears in shard {first} and shard {second}")]
    TensorInTwoShards {
        name: String,
        first: usize,
        second: usize,
    },
    #[error("split model: split.tensors.count = {expected}, but the shards hold {found} tensors")]
    TensorCountMismatch { expected: u64, found: u64 },

    #[error("writer: key '{key}': array declares element type {expected} but holds a {found}")]
    ArrayTypeMismatch {
        key: String,
        expected: String,
        found: String,
    },
    #[error("writer: expected tensor '{expected}' next, got '{found}'")]
    TensorOrder { expected: String, found: String },
    #[error("writer: tensor '{name}' needs {expected} bytes, got {found}")]
    TensorSize {
        name: String,
        expected: u64,
        found: u64,
    },
    #[error("writer: all declared tensors were already written, got '{name}'")]
    ExtraTensor { name: String },
    #[error("writer: finished with {missing} tensor(s) unwritten, first is '{first}'")]
    MissingTensors { missing: usize, first: String },
}

impl GgufError {
    /// The error without its file-context wrappers, for matching on the variant.
    pub fn root(&self) -> &GgufError {
        match self {
            GgufError::File { inner, .. } => inner.root(),
            other => other,
        }
    }

    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> GgufError {
        GgufError::File {
            path: path.into(),
            inner: Box::new(self),
        }
    }
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, GgufError>;
