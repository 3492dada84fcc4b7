//! The by-slot split of a legacy fused `attn_kv_b`. Old DeepSeek GGUFs store it fused; the
//! absorbed path needs the two halves per head, and taking them by file order is the mistake
//! that broke peers' loaders.

/// Splits a fused `kv_b` (`[n_heads·(nope + v_dim)] × kv_lora`, head-major: per head
/// `[W_UK_h (nope rows); W_UV_h (v_dim rows)]`) into the two tensors GGUF stores for GLM-5:
/// `k_b` laid out `{nope, kv_lora, n_heads}` (per head `W_UK_hᵀ`) and `v_b` laid out
/// `{kv_lora, v_dim, n_heads}` (per head `W_UV_h`). Rows are taken by slot index inside each
/// head, never by their position in a file.
pub fn split_kv_b(
    kv_b: &[f32],
    n_heads: usize,
    nope: usize,
    v_dim: usize,
    kv_lora: usize,
) -> (Vec<f32>, Vec<f32>) {
    let per = nope + v_dim;
    let mut k_b = vec![0f32; n_heads * kv_lora * nope];
    let mut v_b = vec![0f32; n_heads * v_dim * kv_lora];
    for h in 0..n_heads {
        for j in 0..nope {
            let src = &kv_b[(h * per + j) * kv_lora..(h * per + j + 1) * kv_lora];
            for (c, &val) in src.iter().enumerate() {
                k_b[(h * kv_lora + c) * nope + j] = val;
            }
        }
        for j in 0..v_dim {
            let src = &kv_b[(h * per + nope + j) * kv_lora..(h * per + nope + j + 1) * kv_lora];
            v_b[(h * v_dim + j) * kv_lora..(h * v_dim + j + 1) * kv_lora].copy_from_slice(src);
        }
    }
    (k_b, v_b)
}
