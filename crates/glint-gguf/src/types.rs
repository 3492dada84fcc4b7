//! GGML tensor type ids as stored in GGUF tensor infos.
//!
//! The ids, names and block geometry follow ggml's `ggml_type` enum and gguf-py's
//! `GGMLQuantizationType` / `GGML_QUANT_SIZES`. Ids that ggml retired (4, 5, 31-33, 36-38) are
//! unknown here on purpose: no current writer produces them and their layouts are gone.
//! Kernels live in `glint-quant`; this table only knows sizes, which the reader needs to check
//! that every tensor's bytes lie inside the file.

/// One row per GGML type: `(variant, id, name, elements per block, bytes per block)`.
macro_rules! ggml_types {
    ($(($v:ident, $id:expr, $name:expr, $blk:expr, $bytes:expr)),* $(,)?) => {
        /// A GGML tensor element type.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        pub enum GgmlType { $($v = $id),* }

        impl GgmlType {
            /// Every type known to this build, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$v),*];

            /// The type for a GGUF type id, or `None` for an id ggml does not define.
            pub fn from_id(id: u32) -> Option<Self> {
                match id { $($id => Some(GgmlType::$v),)* _ => None }
            }

            /// The name gguf-py's `GGMLQuantizationType` uses (`Q4_K`, `IQ2_XXS`, `BF16`, ...).
            pub fn name(self) -> &'static str {
                match self { $(GgmlType::$v => $name),* }
            }

            /// Parses a name as printed by [`GgmlType::name`] (case-insensitive).
            pub fn from_name(name: &str) -> Option<Self> {
                $(if name.eq_ignore_ascii_case($name) { return Some(GgmlType::$v); })*
                None
            }

            /// Elements per quantization block (1 for plain scalar types).
            pub fn block_size(self) -> usize {
                match self { $(GgmlType::$v => $blk),* }
            }

            /// Bytes per quantization block.
            pub fn type_size(self) -> usize {
                match self { $(GgmlType::$v => $bytes),* }
            }
        }
    };
}

ggml_types! {
    (F32, 0, "F32", 1, 4),
    (F16, 1, "F16", 1, 2),
    (Q4_0, 2, "Q4_0", 32, 18),
    (Q4_1, 3, "Q4_1", 32, 20),
    (Q5_0, 6, "Q5_0", 32, 22),
    (Q5_1, 7, "Q5_1", 32, 24),
    (Q8_0, 8, "Q8_0", 32, 34),
    (Q8_1, 9, "Q8_1", 32, 36),
    (Q2_K, 10, "Q2_K", 256, 84),
    (Q3_K, 11, "Q3_K", 256, 110),
    (Q4_K, 12, "Q4_K", 256, 144),
    (Q5_K, 13, "Q5_K", 256, 176),
    (Q6_K, 14, "Q6_K", 256, 210),
    (Q8_K, 15, "Q8_K", 256, 292),
    (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    (IQ2_XS, 17, "IQ2_XS", 256, 74),
    (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    (IQ1_S, 19, "IQ1_S", 256, 50),
    (IQ4_NL, 20, "IQ4_NL", 32, 18),
    (IQ3_S, 21, "IQ3_S", 256, 110),
    (IQ2_S, 22, "IQ2_S", 256, 82),
    (IQ4_XS, 23, "IQ4_XS", 256, 136),
    (I8, 24, "I8", 1, 1),
    (I16, 25, "I16", 1, 2),
    (I32, 26, "I32", 1, 4),
    (I64, 27, "I64", 1, 8),
    (F64, 28, "F64", 1, 8),
    (IQ1_M, 29, "IQ1_M", 256, 56),
    (BF16, 30, "BF16", 1, 2),
    (TQ1_0, 34, "TQ1_0", 256, 54),
    (TQ2_0, 35, "TQ2_0", 256, 66),
    (MXFP4, 39, "MXFP4", 32, 17),
    (NVFP4, 40, "NVFP4", 64, 36),
    (Q1_0, 41, "Q1_0", 128, 18),
}

impl GgmlType {
    /// Bytes taken by one row of `n` elements, or `None` when `n` is not a whole number of
    /// blocks (GGML requires rows to be block-aligned) or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let blk = self.block_size() as u64;
        if !n.is_multiple_of(blk) {
            return None;
        }
        (n / blk).checked_mul(self.type_size() as u64)
    }

    /// True for block-quantized types (anything that is not a plain scalar).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
