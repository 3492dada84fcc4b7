//! Tensor descriptions from the GGUF header.

use crate::GgmlType;

/// GGML never uses more than this many dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// Where one tensor lives and how it is shaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// Dimensions in ggml's `ne` order: `dims[0]` is the contiguous row length.
    pub dims: Vec<u64>,
    /// Byte offset relative to the start of its shard's data section.
    pub offset: u64,
    /// Bytes of tensor data, computed from `ty` and `dims`.
    pub n_bytes: u64,
    /// Index of the shard (by `split.no`) holding the data; 0 for single-file models.
    pub shard: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Elements per row (`ne0`); 1 for a zero-dimensional tensor.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of all dimensions after the first.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}
