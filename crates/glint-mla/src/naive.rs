//! Host-side reference MLA in the decompressed (MHA) form of spec §2.5, and the by-slot split of
//! a legacy fused `attn_kv_b`. Used by tests to check the absorbed path and by loaders of old
//! DeepSeek files.

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

/// Decompressed MLA for queries at `positions` over keys `0..n_kv`.
///
/// `q` is `[n × n_heads × (nope + rope)]` after RoPE; `ckv` `[n_kv × kv_lora]` (normalised latent),
/// `kpe` `[n_kv × rope]` (rotated), `kv_b` the fused up-projection. `visible(s, t)` decides which
/// keys query `s` may see (causality and any sparse selection). Returns `[n × n_heads × v_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    ckv: &[f32],
    kpe: &[f32],
    kv_b: &[f32],
    n_heads: usize,
    nope: usize,
    rope: usize,
    v_dim: usize,
    kv_lora: usize,
    n_kv: usize,
    scale: f32,
    visible: &dyn Fn(usize, usize) -> bool,
) -> Vec<f32> {
    let qk = nope + rope;
    let n = q.len() / (n_heads * qk);
    let per = nope + v_dim;
    let lin = |h: usize, j: usize, c: &[f32]| -> f64 {
        let w = &kv_b[(h * per + j) * kv_lora..(h * per + j + 1) * kv_lora];
        w.iter().zip(c).map(|(&a, &b)| a as f64 * b as f64).sum()
    };
    let mut out = vec![0f32; n * n_heads * v_dim];
    for h in 0..n_heads {
        // Decompress K and V of this head for every key.
        let k: Vec<Vec<f64>> = (0..n_kv)
            .map(|t| {
                let c = &ckv[t * kv_lora..(t + 1) * kv_lora];
                let mut k: Vec<f64> = (0..nope).map(|j| lin(h, j, c)).collect();
                k.extend(kpe[t * rope..(t + 1) * rope].iter().map(|&v| v as f64));
                k
            })
            .collect();
        let v: Vec<Vec<f64>> = (0..n_kv)
            .map(|t| {
                let c = &ckv[t * kv_lora..(t + 1) * kv_lora];
                (0..v_dim).map(|j| lin(h, nope + j, c)).collect()
            })
            .collect();
        for s in 0..n {
            let qh = &q[(s * n_heads + h) * qk..(s * n_heads + h + 1) * qk];
            let keys: Vec<usize> = (0..n_kv).filter(|&t| visible(s, t)).collect();
            let sc: Vec<f64> = keys
                .iter()
                .map(|&t| {
                    scale as f64
                        * qh.iter()
                            .zip(&k[t])
                            .map(|(&a, &b)| a as f64 * b)
                            .sum::<f64>()
                })
                .collect();
            let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            let o = &mut out[(s * n_heads + h) * v_dim..(s * n_heads + h + 1) * v_dim];
            for (&t, &p) in keys.iter().zip(&e) {
                for (oi, &vi) in o.iter_mut().zip(&v[t]) {
                    *oi += (p / z * vi) as f32;
                }
            }
        }
    }
    out
}
