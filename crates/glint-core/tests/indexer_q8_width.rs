//! The CPU's q8 indexer scan takes heads up to `glint_quant::dot::INDEXER_MAX_DIM` wide: a wider
//! head (a model this engine does not know) gets an error naming the width, not a panic, and
//! the f32 path still scores it.

use glint_core::{Backend, CacheType, CpuBackend, IndexerParams, Pages};
use glint_quant::dot::INDEXER_MAX_DIM;

#[test]
fn wide_heads_are_refused_by_the_q8_scan_only() {
    let be = CpuBackend::new();
    let (n_kv, heads, dim) = (8usize, 2usize, INDEXER_MAX_DIM + 8);
    // Key t is all (t + 1) / 8; the query all ones; weights 1: score(t) = 2 · dim · (t+1)/8.
    let rows: Vec<f32> = (0..n_kv * dim)
        .map(|i| ((i / dim) + 1) as f32 / 8.0)
        .collect();
    let q = vec![1f32; heads * dim];
    let w = vec![1f32; heads];
    let tables = vec![0u32];
    let token_seq = vec![0u32];
    let pos = vec![(n_kv - 1) as u32];
    let pages = Pages {
        tables: &tables,
        token_seq: &token_seq,
        max_blocks: 1,
        block_size: n_kv,
    };
    let p = IndexerParams {
        n_tokens: 1,
        n_heads: heads,
        head_dim: dim,
        n_kv,
        w_scale: 1.0,
    };
    let slots: Vec<u32> = (0..n_kv as u32).collect();
    for ty in [CacheType::F32, CacheType::Q8] {
        let mut keys = be.alloc_cache(n_kv, dim, ty).expect("alloc_cache");
        be.cache_set_rows(&rows, &slots, n_kv, &mut keys)
            .expect("cache_set_rows");
        let mut out = vec![0f32; n_kv];
        let r = be.indexer_scores(&q, &w, &keys, &pos, &pages, &p, &mut out);
        if ty == CacheType::Q8 {
            let e = r
                .expect_err("q8 keys wider than the scan takes")
                .to_string();
            assert!(
                e.contains(&INDEXER_MAX_DIM.to_string()) && e.contains(&dim.to_string()),
                "{e}"
            );
        } else {
            r.expect("f32 keys of any width");
            for (t, &s) in out.iter().enumerate() {
                assert_eq!(s, 2.0 * dim as f32 * (t + 1) as f32 / 8.0, "key {t}");
            }
        }
    }
}
