//! glint-quant's lookup tables (IQ grids, signs, non-linear levels) written out as CUDA
//! `__constant__` arrays, prepended to kernels/quant.cu: one definition of each table.
// TODO(helper): being written.

/// The CUDA source text of every table kernels/quant.cu reads.
pub fn cuda_tables() -> String {
    String::new()
}
