//! Against llama.cpp itself: fixtures/quant/vecdot holds weight rows, f32 activations, the
//! partner bytes llama.cpp's CPU `from_float` made from them, and the results of its CPU
//! `vec_dot` (the AVX2 build; see fixtures/make_quant_fixtures.py). glint must produce the very
//! same activation bytes, and dot products that agree to float accumulation order (llama.cpp's
//! AVX2 kernels sum in another order than its generic code, which glint's scalar mirrors).

use std::path::PathBuf;

use glint_gguf::GgmlType;
use glint_quant::dequantize_to_vec;
use glint_quant::dot::{self, Isa};

/// Matches the header of fixtures/make_quant_fixtures.py (VD_N, VD_ROWS, VD_ACTS) and
/// fixtures/quant/manifest.json's `vecdot` entries.
const N: usize = 512;
const ROWS: usize = 4;
const ACTS: usize = 3;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/quant/vecdot")
}

fn read(name: &str) -> Vec<u8> {
    let p = dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn activations_and_dots_match_llama_cpp() {
    let acts = f32s(&read("act.f32"));
    assert_eq!(acts.len(), ACTS * N);
    let mut checked = 0;
    let mut exact = 0;
    let mut total = 0;
    for &ty in GgmlType::ALL {
        let Some(partner) = dot::partner_type(ty) else {
            continue;
        };
        // Every type with a dot kernel has a fixture (make_quant_fixtures.py writes them all);
        // a missing one is a broken checkout, not a type to skip.
        assert!(
            dir().join(format!("{ty}.w")).exists(),
            "{ty}: fixtures/quant/vecdot/{ty}.w missing (run fixtures/make_quant_fixtures.py)"
        );
        let w = read(&format!("{ty}.w"));
        let aq = read(&format!("{ty}.act.q"));
        let want = f32s(&read(&format!("{ty}.dot.f32")));
        let wrow = w.len() / ROWS;
        let arow = aq.len() / ACTS;
        assert_eq!(wrow, ty.row_bytes(N as u64).unwrap() as usize, "{ty}");
        assert_eq!(arow, dot::activation_bytes(partner, N).unwrap(), "{ty}");
        for a in 0..ACTS {
            let mut ours = vec![0u8; arow];
            dot::quantize_activation(partner, &acts[a * N..(a + 1) * N], &mut ours).unwrap();
            assert_eq!(
                ours,
                &aq[a * arow..(a + 1) * arow],
                "{ty}: activation {a} as {partner}"
            );
        }
        for r in 0..ROWS {
            let wr = &w[r * wrow..(r + 1) * wrow];
            let wf = dequantize_to_vec(ty, wr).unwrap();
            for a in 0..ACTS {
                let ar = &aq[a * arow..(a + 1) * arow];
                let af = dequantize_to_vec(partner, ar).unwrap();
                let mag: f64 = wf
                    .iter()
                    .zip(&af)
                    .map(|(x, y)| (*x as f64 * *y as f64).abs())
                    .sum();
                let tol = (N / ty.block_size() + 16) as f64 * f32::EPSILON as f64 * mag;
                let expect = want[r * ACTS + a];
                for isa in Isa::all_available() {
                    let got = dot::vec_dot_with(isa, ty, N, wr, ar).unwrap();
                    assert!(
                        ((got - expect) as f64).abs() <= tol,
                        "{ty} {isa:?} row {r} act {a}: glint {got} vs llama.cpp {expect} (tol {tol})"
                    );
                    total += 1;
                    exact += (got.to_bits() == expect.to_bits()) as usize;
                }
            }
        }
        checked += 1;
    }
    eprintln!(
        "{checked} types on kernel families {:?}, {exact}/{total} dot products bit-identical to llama.cpp's AVX2 build",
        Isa::all_available()
    );
}
