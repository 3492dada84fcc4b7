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
    /// A buffer the host could not allocate: the size is named so the user can shrink the
    /// context, the batch or the pool.
    #[error("cannot allocate {what}: {bytes} bytes")]
    Alloc { what: &'static str, bytes: u128 },
    /// A device (GPU driver, compiler, library) call failed: `op` says what glint was doing.
    #[error("{op}: {msg}")]
    Device { op: &'static str, msg: String },
    #[error("quant kernel: {0}")]
    Quant(#[from] QuantError),
}

pub type Result<T> = std::result::Result<T, CoreError>;

/// Checks that a buffer holds at least `expected` elements (buffers may be larger than the
/// current batch: they are reused across calls to avoid allocating on the decode path).
pub fn need(op: &'static str, what: &'static str, expected: usize, found: usize) -> Result<()> {
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

/// A zero-filled vector of `len` elements, or [`CoreError::Alloc`] naming the size instead of
/// aborting the process when the allocator refuses.
pub fn try_zeroed<T: Clone + Default>(what: &'static str, len: usize) -> Result<Vec<T>> {
    let err = || CoreError::Alloc {
        what,
        bytes: len as u128 * std::mem::size_of::<T>() as u128,
    };
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| err())?;
    v.resize(len, T::default());
    Ok(v)
}
