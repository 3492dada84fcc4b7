//! Every kernels/*.cu compiles with NVRTC for Hopper (compute_90a) and for the generic sm_80
//! path, and quant.cu (with the generated tables) defines the kernels the Rust table names. Needs only libnvrtc and the CUDA headers, no GPU: CI runs it with NVRTC from PyPI
//! (`LD_LIBRARY_PATH=<site-packages>/nvidia/cu13/lib GLINT_CUDA_INCLUDE=<...>/include`).
#![cfg(feature = "cuda")]

use glint_cuda::compile::{compile, Family};

#[test]
fn every_kernel_family_compiles_for_sm80_and_sm90a() {
    // A fresh disk cache: this test is about the compiler accepting the sources.
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("GLINT_KERNEL_CACHE", cache.path());
    // One thread per architecture: NVRTC compiles independent programs concurrently, and the
    // quant family alone takes over a minute per architecture.
    std::thread::scope(|sc| {
        for arch in ["compute_90a", "compute_80"] {
            sc.spawn(move || {
                for fam in Family::ALL {
                    match compile(fam, arch, "test") {
                        Ok(parts) => {
                            assert_eq!(parts.len(), fam.parts(), "{}", fam.file());
                            let mut all = String::new();
                            for (i, (ptx, cached)) in parts.iter().enumerate() {
                                assert!(!cached);
                                let text = ptx.to_src();
                                assert!(
                                    text.contains(".entry"),
                                    "{arch} {} part {i}: no kernel entry in the PTX",
                                    fam.file()
                                );
                                all.push_str(&text);
                            }
                            if fam == Family::Quant {
                                quant_entries(arch, &all);
                            }
                            if arch == "compute_90a" {
                                every_entry_waits_for_its_predecessor(fam, &all);
                            }
                        }
                        Err(e) => panic!("{arch}: {e}"),
                    }
                }
            });
        }
    });
    small_families_compile_to_cubins(cache.path());
}

/// Every kernel is launched with programmatic dependent launch (src/launch.rs), so on Hopper
/// each must wait for the kernel before it (`griddepcontrol.wait`, common.cuh's `pdl_enter`)
/// before it touches memory; one without it would race its predecessor. Read off the PTX, so a
/// kernel added without the call, or a wait the compiler dropped, fails here. The one access
/// allowed before the wait is an L2 prefetch of weights (common.cuh `l2_prefetch`), which the
/// one-token products must make there, or it overlaps nothing.
fn every_entry_waits_for_its_predecessor(fam: Family, ptx: &str) {
    let mut entries = 0;
    for body in ptx.split(".entry ").skip(1) {
        let name = body.split('(').next().unwrap_or("").trim();
        let wait = body.find("griddepcontrol.wait");
        let first_mem = ["ld.global", "st.global", "atom.global", "red.global"]
            .iter()
            .filter_map(|op| body.find(op))
            .min();
        assert!(
            wait.is_some_and(|w| first_mem.is_none_or(|m| w < m)),
            "{}: kernel {name} touches global memory before griddepcontrol.wait",
            fam.file()
        );
        if name.starts_with("matvec1_") || name.starts_with("matvec1s_") {
            // The instruction, or the call of quant.cu's (not inlined) `prefetch_rows`.
            let prefetch = body.find("prefetch");
            assert!(
                prefetch.is_some_and(|p| wait.is_some_and(|w| p < w)),
                "{}: product {name} does not prefetch its weights before griddepcontrol.wait",
                fam.file()
            );
        }
        entries += 1;
    }
    assert!(entries > 0, "{}: no entries in the PTX", fam.file());
}

/// What `CudaBackend` loads on a GPU NVRTC knows: machine code, so the driver translates
/// nothing at start. The small families are built as sm_90a and sm_80 cubins here and read
/// back from the cache (quant.cu's cubins, minutes of ptxas on two cores, are built on the GPU
/// machine by every CUDA test).
fn small_families_compile_to_cubins(cache: &std::path::Path) {
    let small = [
        Family::Elementwise,
        Family::Moe,
        Family::Mla,
        Family::Indexer,
    ];
    for arch in ["sm_90a", "sm_80"] {
        for fam in small {
            let parts = compile(fam, arch, "test").unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert!(
                parts.iter().all(|(_, cached)| !cached),
                "{arch} {}",
                fam.file()
            );
            let again = compile(fam, arch, "test").unwrap();
            assert!(
                again.iter().all(|(_, cached)| *cached),
                "{arch} {}: cache",
                fam.file()
            );
        }
    }
    let cubins: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cubin"))
        .collect();
    assert_eq!(cubins.len(), 2 * small.len(), "{cubins:?}");
    for p in cubins {
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF", "{}: not an ELF cubin", p.display());
    }
}

/// quant.cu's kernels of each kind the Rust table (src/quant.rs) names, by a sample of types,
/// across its programs; and each type's kernels in exactly one of them.
fn quant_entries(arch: &str, text: &str) {
    for ty in ["f32", "f32x4", "q4_k", "q5_k", "q6_k", "iq1_m", "iq4_xs"] {
        for kind in ["matvec", "matvec1", "mmid", "get_rows"] {
            let n = text.matches(&format!(".entry {kind}_{ty}(")).count();
            assert_eq!(n, 1, "{arch}: {kind}_{ty} in {n} of quant.cu's programs");
        }
    }
    for ty in [
        "q2_k", "iq2_xxs", "iq1_m", "iq4_xs", "q8_0", "q4_0", "q5_1", "nvfp4", "q1_0", "tq1_0",
    ] {
        let n = text.matches(&format!(".entry mmq_{ty}(")).count();
        assert_eq!(n, 1, "{arch}: mmq_{ty} in {n} of quant.cu's programs");
    }
    for name in [
        "quantize_act_q8_0",
        "quantize_act_q8_1",
        "quantize_act_q8_k",
        "rms_norm_q8_k",
        "quantize_act_f16",
        "quantize_act_bf16",
        "matvec_q4_k",
        "matvec1_q4_k",
        "matvec1_f32",
        "mmid_iq2_xxs",
        "mmid_group",
        "mmid_group_heads",
        "matvec_wide_f32x4",
        "mmq_q4_k",
        "mmq_q5_k",
        "mmq_q8_0",
        "mmq_q6_k",
        "mmq_iq4_xs",
        "mmq_q2_k",
        "mmq_q3_k",
        "mmq_iq2_xxs",
        "mmq_iq3_xxs",
        "mmq_iq2_xs",
        "mmq_iq2_s",
        "mmq_iq3_s",
        "mmq_iq1_s",
        "mmq_iq1_m",
        "mmq_q4_0",
        "mmq_q4_1",
        "mmq_q5_0",
        "mmq_q5_1",
        "mmq_iq4_nl",
        "mmq_mxfp4",
        "mmq_nvfp4",
        "mmq_q1_0",
        "mmq_tq1_0",
        "mmq_tq2_0",
        "get_rows_q6_k",
    ] {
        assert!(
            text.contains(&format!(".entry {name}(")),
            "{arch}: {name} not in the PTX"
        );
    }
}
