//! The activation formats (Q8_0, Q8_1, Q8_K, F16, BF16) our quantizers produce must equal what
//! llama.cpp's CPU backend feeds its own dot products (`type_traits_cpu[partner].from_float`,
//! SIMD versions on the x86 machine that made the fixtures), so glint's dot products see the same
//! integers as llama.cpp's.

mod common;

use common::*;
use glint_gguf::GgmlType;
use glint_quant::{quantize_to_vec, traits};

const N: usize = 512;
const ACTS: usize = 3;

#[test]
fn partner_bytes_match_llama_cpp_cpu() {
    let act = read_f32("vecdot/act.f32");
    assert_eq!(act.len(), N * ACTS);
    let mut checked = 0;
    for &ty in GgmlType::ALL {
        let Some(partner) = traits(ty).vec_dot_type else {
            continue;
        };
        if ty == GgmlType::Q8_1 {
            continue; // never a weight type in GGUF files; llama.cpp has no Q8_1 x Q8_1 dot
        }
        let want = read(&format!("vecdot/{}.act.q", ty.name()));
        let got: Vec<u8> = act
            .chunks(N)
            .flat_map(|row| quantize_to_vec(partner, row).unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{ty} -> {partner}");
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            panic!("{ty} -> {partner}: first differing byte {i}");
        }
        checked += 1;
    }
    assert!(checked >= 27, "only {checked} weight types checked");
}
