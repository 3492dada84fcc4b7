//! Errors for quantization kernels.

use glint_gguf::GgmlType;

/// What can go wrong when converting between f32 and a GGML block format.
///
/// Every variant names the type so a caller deep inside a model loader can report which tensor
/// format was at fault without extra context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The type has no kernel for this operation (e.g. no reference quantizer for IQ2_XXS).
    #[error("no {op} kernel for {ty}")]
    Unsupported { ty: GgmlType, op: &'static str },
    /// A buffer has the wrong size for the other buffer it is paired with.
    #[error("{ty}: {what} has wrong length: expected {expected}, found {found}")]
    BadLength {
        ty: GgmlType,
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// An element count is not a whole number of blocks.
    #[error("{ty}: {n} elements is not a multiple of the block size {block}")]
    NotBlockAligned {
        ty: GgmlType,
        n: usize,
        block: usize,
    },
    /// An index into a table (an expert id in `mul_mat_id`) is outside the table.
    #[error("{what} {index} is out of range (must be below {limit})")]
    OutOfRange {
        what: &'static str,
        index: usize,
        limit: usize,
    },
}
