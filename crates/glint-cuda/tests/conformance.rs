//! The CUDA backend against the backend conformance suite (glint_core::conformance), the same
//! function the CPU backend passes in CI. Needs a GPU: `scripts/cuda-tests.sh`.
#![cfg(feature = "cuda")]

use glint_core::conformance::conformance;
use glint_core::CacheType;
use glint_cuda::CudaBackend;

#[test]
fn cuda_backend_passes_the_conformance_suite() {
    // The opt-in top-k from the scores' first radix level, so its case below runs it (the one
    // test of this binary: nothing else reads the variable).
    std::env::set_var("GLINT_CUDA_TOPK_HIST", "1");
    let be = CudaBackend::new(0).expect("a CUDA device");
    eprintln!("conformance on {:?}", be.info());
    let ran = conformance(&be);
    assert_eq!(ran.len(), 19);
    // The suite's decode-width indexer case (2 tokens, 12,000 keys of 32 heads × 128, bf16 and
    // fp8) is the one that checks `top_k_rows_ch`'s set: on a Hopper GPU it must have run it
    // (the other top-k kernels are checked by the suite's top_k cases).
    if be.info().compute_capability.0 >= 9 {
        for ty in [CacheType::Bf16, CacheType::Fp8] {
            assert!(
                be.indexer_counts_first_level(ty, 32, 128, 2, 12000),
                "{ty:?}: indexer_select took top_k_rows_c, not top_k_rows_ch"
            );
        }
    }
}
