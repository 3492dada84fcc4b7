//! Every kernels/*.cu compiles with NVRTC for Hopper (compute_90a) and for the generic sm_80
//! path. Needs only libnvrtc and the CUDA headers, no GPU: CI runs it with NVRTC from PyPI
//! (`LD_LIBRARY_PATH=<site-packages>/nvidia/cu13/lib GLINT_CUDA_INCLUDE=<...>/include`).
#![cfg(feature = "cuda")]

use glint_cuda::compile::{compile, Family};

#[test]
fn every_kernel_family_compiles_for_sm80_and_sm90a() {
    // No disk cache: this test is about the compiler accepting the sources.
    std::env::set_var("GLINT_KERNEL_CACHE", tempfile::tempdir().unwrap().path());
    for arch in ["compute_90a", "compute_80"] {
        for fam in Family::ALL {
            match compile(fam, arch, "test") {
                Ok((ptx, cached)) => {
                    assert!(!cached);
                    let text = ptx.to_src();
                    assert!(
                        text.contains(".entry"),
                        "{arch} {}: no kernel entry in the PTX",
                        fam.file()
                    );
                }
                Err(e) => panic!("{arch}: {e}"),
            }
        }
    }
}
