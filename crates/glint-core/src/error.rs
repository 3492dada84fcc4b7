//! Errors of backend operations.

use glint_gguf::GgmlType;
use glint_quant::QuantError;

/// What a backend op can report. Shape errors name the op and the operand so that a mistake in
/// model code is found from the message alone.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("{op}: {what} has {found} elements, expected {expected}")]
    Shape {
        op: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{op}: weight type {ty} is not supported by this backend")]
    UnsupportedType { op: &'static str, ty: GgmlType },
    #[error("{op}: index {index} out of range (limit {limit})")]
    Index {
        op: &'static str,
        index: usize,
        limit: usize,
    },
    #[error("{op}: invalid parameter: {msg}")]
    Param { op: &'static str, msg: String },
    #[error("quant kernel: {0}")]
    Quant(#[from] QuantError),
}

pub type Result<T> = std::result::Result<T, CoreError>;

/// Checks that a buffer holds at least `expected` elements (buffers may be larger than the
/// current batch: they are reused across calls to avoid allocating on the decode path).
pub(crate) fn need(
    op: &'static str,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<()> {
    if found < expected {
        return Err(CoreError::Shape {
            op,
            what,
            expected,
            found,
        });
    }
    Ok(())
}
