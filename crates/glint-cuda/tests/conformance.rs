//! The CUDA backend against the backend conformance suite (glint_core::conformance), the same
//! function the CPU backend passes in CI. Needs a GPU: `scripts/cuda-tests.sh`.
#![cfg(feature = "cuda")]

use glint_core::conformance::conformance;
use glint_cuda::CudaBackend;

#[test]
fn cuda_backend_passes_the_conformance_suite() {
    let be = CudaBackend::new(0).expect("a CUDA device");
    eprintln!("conformance on {:?}", be.info());
    let ran = conformance(&be);
    assert_eq!(ran.len(), 19);
}
