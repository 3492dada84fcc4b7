//! kernels/quant.cu (with the generated tables) compiles with NVRTC for Hopper and sm_80 and
//! defines every kernel the Rust table names. Needs libnvrtc and the CUDA headers, no GPU.
#![cfg(feature = "cuda")]

use glint_cuda::compile::{compile, Family};

#[test]
fn quant_kernels_compile_for_sm80_and_sm90a() {
    std::env::set_var("GLINT_KERNEL_CACHE", tempfile::tempdir().unwrap().path());
    for arch in ["compute_90a", "compute_80"] {
        let t = std::time::Instant::now();
        let (ptx, cached) =
            compile(Family::Quant, arch, "test").unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(!cached);
        let text = ptx.to_src();
        for name in [
            "quantize_act_q8_0",
            "quantize_act_q8_1",
            "quantize_act_q8_k",
            "quantize_act_f16",
            "quantize_act_bf16",
            "matvec_q4_k",
            "mmid_iq2_xxs",
            "get_rows_q6_k",
        ] {
            assert!(
                text.contains(&format!(".entry {name}(")),
                "{arch}: {name} not in the PTX"
            );
        }
        eprintln!(
            "{arch}: {} entries, {:?}",
            text.matches(".entry").count(),
            t.elapsed()
        );
    }
}
