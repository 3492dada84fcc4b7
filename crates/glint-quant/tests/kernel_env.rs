//! `GLINT_CPU_KERNEL` forces a kernel family. Alone in its test binary because the choice is
//! made once per process.

use glint_gguf::GgmlType;
use glint_quant::dot::{self, Isa};

#[test]
fn env_var_forces_scalar_and_results_follow() {
    std::env::set_var("GLINT_CPU_KERNEL", "scalar");
    assert_eq!(dot::isa(), Isa::Scalar);
    // Every dispatched kernel is then the scalar reference itself.
    let k = dot::kernel(GgmlType::Q4_K).unwrap();
    assert!(std::ptr::fn_addr_eq(
        k,
        dot::scalar_kernel(GgmlType::Q4_K).unwrap()
    ));
}
