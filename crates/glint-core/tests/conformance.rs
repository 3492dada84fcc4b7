//! The CPU backend against the backend conformance suite (glint_core::conformance), once per
//! kernel family the process was started with (`GLINT_CPU_KERNEL`; `.ci/run` repeats the suite
//! under each one the CPU has).

use glint_core::{conformance::conformance, CpuBackend};

#[test]
fn cpu_backend_passes_the_conformance_suite() {
    let ran = conformance(&CpuBackend::new());
    eprintln!(
        "conformance on cpu ({:?} kernels): {}",
        glint_quant::dot::isa(),
        ran.join(", ")
    );
    assert_eq!(ran.len(), 19);
}
