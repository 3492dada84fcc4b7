//! Plain parameter structs for the coarse ops (shared by every backend).

/// How the two values of a rotated pair are laid out inside the rotated span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Pairs `(2i, 2i+1)`: GPT-J / ggml `NORM` (mode 0). GLM-5 MLA and indexer, DeepSeek MLA.
    Interleaved,
    /// Pairs `(i, i + n_rot/2)`: GPT-NeoX (ggml mode 2). DeepSeek-V3.2's indexer.
    Neox,
}

#[derive(Clone, Copy, Debug)]
pub struct RopeParams {
    pub n_tokens: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    /// First rotated dim inside each head.
    pub offset: usize,
    /// Number of rotated dims (even); `inv_freq` holds `n_rot / 2` values.
    pub n_rot: usize,
    pub mode: RopeMode,
    /// Magnitude applied to cos and sin (YaRN attention factor; 1 for plain RoPE).
    pub attn_factor: f32,
}

/// Expert gating function (`expert_gating_func`: 1 = softmax, 2 = sigmoid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
}

#[derive(Clone, Copy, Debug)]
pub struct RouterParams {
    pub n_expert: usize,
    pub n_used: usize,
    pub gating: Gating,
    /// `expert_group_count`; 1 disables group limiting.
    pub n_group: usize,
    /// `expert_group_used_count`.
    pub n_group_used: usize,
    /// Divide the selected weights by their sum (`expert_weights_norm`).
    pub normalize: bool,
    /// Multiply the final weights (`expert_weights_scale`; 1 when absent).
    pub scale: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct IndexerParams {
    pub n_tokens: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    /// Number of cached keys (rows of the key cache that are valid).
    pub n_kv: usize,
    /// Factor each head weight is multiplied by (an f32 product) before it weighs its head:
    /// GLM-5's `n_heads^-1/2 · head_dim^-1/2`, applied where the weights are read instead of
    /// by a separate pass over them (the same bits as that pass). 1 for none.
    pub w_scale: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    pub n_tokens: usize,
    pub n_heads: usize,
    /// Width of a query head and of a cache row (kv_lora_rank + rope dim = 576 for GLM-5).
    pub dk: usize,
    /// Width of the value (the first `dv` values of a cache row; kv_lora_rank).
    pub dv: usize,
    pub n_kv: usize,
    /// Number of selected keys per query when a selection is passed.
    pub n_selected: usize,
    pub scale: f32,
}

/// The largest step a model will run, given once at load so a backend can size its own
/// per-step scratch (the CPU backend's per-thread buffers) before the first step, and no step
/// grows a buffer.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepSizes {
    pub max_tokens: usize,
    /// Keys a token may see.
    pub kv_capacity: usize,
    /// Keys an attention call may gather into one row set: the indexer's top-k when every
    /// layer has one, else the key capacity.
    pub max_gathered_keys: usize,
    /// Most heads of an attention or indexer call, and widest key row.
    pub max_heads: usize,
    pub max_key_row: usize,
    /// (rows, cols) of every distinct matmul activation a step makes: what activation
    /// quantization buffers must hold.
    pub act_shapes: [(usize, usize); 5],
    /// Most rows of one slice of an expert-indexed or per-head weight.
    pub max_slice_rows: usize,
    pub n_expert: usize,
    pub n_used: usize,
    /// Expert-indexed (and per-head) products with F32 weights take a grouping path with its
    /// own buffers (every other type goes through glint-quant's kernels): its most
    /// (token, slice) pairs per call and its widest input and output rows; 0 when no such
    /// weight exists.
    pub grouped_slots: usize,
    pub grouped_cols: usize,
    pub grouped_rows: usize,
    /// Rotated pairs per head (rope dims / 2).
    pub rope_pairs: usize,
}

/// Where a run of rows sits in a flat buffer: row `r` starts at element `off + r·stride`.
/// Strided ops take one per buffer, so each side's layout is named where the op is called
/// (`Rows::of(2 * f).at(f)`: rows 2f apart, from element f) rather than passed as four bare
/// numbers whose order is easy to get wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub off: usize,
    pub stride: usize,
}

impl Rows {
    /// Rows `stride` elements apart, from element 0.
    pub const fn of(stride: usize) -> Self {
        Rows { off: 0, stride }
    }
    /// The same rows, starting at element `off`.
    pub const fn at(self, off: usize) -> Self {
        Rows { off, ..self }
    }
    /// Elements a buffer must hold for `rows` rows of `cols` values laid out this way, or
    /// `None` when that overflows.
    pub fn extent(self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        (rows - 1)
            .checked_mul(self.stride)?
            .checked_add(self.off)?
            .checked_add(cols)
    }

    /// Checks that buffer `what` of `op`, holding `len` elements, holds `rows` rows of `cols`
    /// laid out this way (the size check every backend makes).
    pub fn check(
        self,
        op: &'static str,
        what: &'static str,
        rows: usize,
        cols: usize,
        len: usize,
    ) -> crate::Result<()> {
        let Some(end) = self.extent(rows, cols) else {
            return Err(crate::CoreError::Param {
                op,
                msg: format!("{what}: {rows} rows of {cols} at {self:?} overflow"),
            });
        };
        crate::error::need(op, what, end, len)
    }
}

#[cfg(test)]
mod rows_tests {
    use super::Rows;

    #[test]
    fn extent_is_the_last_rows_end_and_overflow_is_an_error() {
        // 3 rows of 4 from element 2, 9 apart: the last row is [20, 24).
        assert_eq!(Rows::of(9).at(2).extent(3, 4), Some(24));
        assert_eq!(Rows::of(9).extent(0, 4), Some(0));
        assert!(Rows::of(9).at(2).check("copy2d", "src", 3, 4, 24).is_ok());
        let short = Rows::of(9).at(2).check("copy2d", "src", 3, 4, 23);
        assert!(short.unwrap_err().to_string().contains("src"));
        let huge = Rows::of(usize::MAX / 2).check("copy2d", "dst", 4, 1, usize::MAX);
        assert!(huge.unwrap_err().to_string().contains("overflow"));
    }
}
