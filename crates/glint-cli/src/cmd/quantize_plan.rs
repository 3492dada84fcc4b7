//! Which type each tensor gets when a model is requantized, following llama-quantize's rules:
//! small or numerically sensitive tensors stay F32, and rows whose length is not a multiple of
//! the requested block fall back to a 32-element block type of similar quality.

use glint_gguf::GgmlType;

/// The chosen output type for one tensor, and why it is not the requested type (if it is not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub ty: GgmlType,
    pub note: Option<String>,
}

/// Name fragments of tensors that stay F32 whatever the target: norms, the MoE router and its
/// bias, and the DSA indexer's head weights (converter and llama-quantize keep these in F32;
/// they are tiny and the router is sensitive to rounding).
const KEEP_F32: &[&str] = &["_norm", "ffn_gate_inp", "exp_probs_b", "indexer.proj"];

/// Integer/double tensors are not weights; they are copied unchanged.
fn is_non_float(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64 | GgmlType::F64
    )
}

/// A 32-element block type of comparable quality, for rows the requested block does not divide
/// (GLM-5's `attn_k_b` rows are 192 wide). Mirrors llama.cpp's `llama_tensor_get_type` fallback.
pub fn fallback_32(target: GgmlType) -> GgmlType {
    use GgmlType::*;
    match target {
        Q2_K | Q3_K | IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS
        | TQ1_0 | TQ2_0 | Q1_0 => IQ4_NL,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        _ => Q8_0,
    }
}

pub fn choose(name: &str, src: GgmlType, dims: &[u64], target: GgmlType) -> Choice {
    if is_non_float(src) {
        return Choice {
            ty: src,
            note: Some("not a float tensor: copied as is".into()),
        };
    }
    if dims.len() <= 1 {
        return Choice {
            ty: GgmlType::F32,
            note: Some("1-D: kept in F32".into()),
        };
    }
    if let Some(frag) = KEEP_F32.iter().find(|f| name.contains(*f)) {
        return Choice {
            ty: GgmlType::F32,
            note: Some(format!("`{frag}` tensors stay F32")),
        };
    }
    let row = dims[0];
    if row.is_multiple_of(target.block_size() as u64) {
        return Choice {
            ty: target,
            note: None,
        };
    }
    let fb = fallback_32(target);
    if row.is_multiple_of(fb.block_size() as u64) {
        Choice {
            ty: fb,
            note: Some(format!(
                "row length {row} is not a multiple of {target}'s block of {}: using {fb}",
                target.block_size()
            )),
        }
    } else {
        Choice {
            ty: GgmlType::F16,
            note: Some(format!(
                "row length {row} fits neither {target} nor {fb} blocks: using F16"
            )),
        }
    }
}

/// llama.cpp `llama_ftype` for a file whose large tensors are all `target` (`general.file_type`).
/// K-quant targets map to their "_S" variants, the closest llama.cpp name for a uniform file.
pub fn file_type(target: GgmlType) -> Option<u32> {
    use GgmlType::*;
    Some(match target {
        F32 => 0,
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q8_0 => 7,
        Q5_0 => 8,
        Q5_1 => 9,
        Q2_K => 10,
        Q3_K => 11,
        Q4_K => 14,
        Q5_K => 16,
        Q6_K => 18,
        IQ2_XXS => 19,
        IQ2_XS => 20,
        IQ3_XXS => 23,
        IQ1_S => 24,
        IQ4_NL => 25,
        IQ3_S => 26,
        IQ2_S => 28,
        IQ4_XS => 30,
        IQ1_M => 31,
        BF16 => 32,
        TQ1_0 => 36,
        TQ2_0 => 37,
        MXFP4 => 38,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType::*;

    #[test]
    fn glm5_tensors_follow_llama_quantize_rules() {
        let c = |name: &str, src, dims: &[u64], t| choose(name, src, dims, t).ty;
        assert_eq!(c("blk.0.attn_norm.weight", F32, &[6144], Q4_K), F32);
        assert_eq!(c("blk.0.indexer.k_norm.bias", F32, &[128], Q4_K), F32);
        assert_eq!(c("blk.3.ffn_gate_inp.weight", F32, &[6144, 256], Q4_K), F32);
        assert_eq!(c("blk.3.exp_probs_b.bias", F32, &[256], Q4_K), F32);
        assert_eq!(c("blk.0.indexer.proj.weight", BF16, &[6144, 32], Q4_K), F32);
        assert_eq!(c("blk.0.attn_q_a.weight", BF16, &[6144, 2048], Q4_K), Q4_K);
        // attn_k_b: 192-wide rows.
        assert_eq!(
            c("blk.0.attn_k_b.weight", BF16, &[192, 512, 64], Q4_K),
            Q5_0
        );
        assert_eq!(
            c("blk.0.attn_k_b.weight", BF16, &[192, 512, 64], Q6_K),
            Q8_0
        );
        assert_eq!(
            c("blk.0.attn_k_b.weight", BF16, &[192, 512, 64], Q2_K),
            IQ4_NL
        );
        assert_eq!(
            c("blk.0.attn_k_b.weight", BF16, &[192, 512, 64], Q8_0),
            Q8_0
        );
        assert_eq!(c("odd.weight", F16, &[100, 7], Q4_K), F16);
        assert_eq!(c("positions", I32, &[7, 7], Q4_K), I32);
        assert!(choose("blk.0.attn_k_b.weight", BF16, &[192, 512, 64], Q4_K)
            .note
            .unwrap()
            .contains("192"));
    }

    #[test]
    fn file_types_are_llama_cpp_values() {
        // From llama.h `enum llama_ftype`.
        assert_eq!(file_type(Q8_0), Some(7));
        assert_eq!(file_type(Q4_K), Some(14));
        assert_eq!(file_type(Q6_K), Some(18));
        assert_eq!(file_type(BF16), Some(32));
        assert_eq!(file_type(Q8_K), None);
    }
}
