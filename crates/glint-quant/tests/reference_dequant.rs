//! Dequantization must be bit-identical to gguf-py 0.19.0 and llama.cpp (both were checked to
//! agree with each other when the fixtures were made) for every GGML type.

mod common;

use common::*;
use glint_gguf::GgmlType;
use glint_quant::{dequantize, dequantize_to_vec, grids};

#[test]
fn every_type_matches_reference_bit_for_bit() {
    for &ty in GgmlType::ALL {
        let raw = read(&format!("dequant/{}.bin", ty.name()));
        let want = read_f32(&format!("dequant/{}.f32", ty.name()));
        let got = dequantize_to_vec(ty, &raw).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(got.len(), want.len(), "{ty}: element count");
        if let Some((i, g, w)) = first_f32_mismatch(&got, &want) {
            panic!("{ty}: element {i}: got {g:#010x} want {w:#010x}");
        }
    }
}

/// Misaligned input bytes take the copying path and must give the same numbers.
#[test]
fn misaligned_input_matches() {
    for &ty in GgmlType::ALL {
        let raw = read(&format!("dequant/{}.bin", ty.name()));
        let want = read_f32(&format!("dequant/{}.f32", ty.name()));
        let mut shifted = vec![0u8; raw.len() + 1];
        shifted[1..].copy_from_slice(&raw);
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &shifted[1..], &mut got).unwrap();
        assert!(first_f32_mismatch(&got, &want).is_none(), "{ty}");
    }
}

fn check_grid8(name: &str, grid: &[u64]) {
    let want = read(&format!("grids/{name}.i8"));
    assert_eq!(want.len(), grid.len() * 8, "{name}");
    for (e, (&g, w)) in grid.iter().zip(want.chunks_exact(8)).enumerate() {
        assert_eq!(g.to_le_bytes(), w, "{name} entry {e}");
    }
}

fn check_grid4(name: &str, grid: &[u32]) {
    let want = read(&format!("grids/{name}.i8"));
    assert_eq!(want.len(), grid.len() * 4, "{name}");
    for (e, (&g, w)) in grid.iter().zip(want.chunks_exact(4)).enumerate() {
        assert_eq!(g.to_le_bytes(), w, "{name} entry {e}");
    }
}

/// Every grid entry (not just the ones random blocks happen to hit) equals gguf-py's expansion.
#[test]
fn grids_match_gguf_py() {
    check_grid8("IQ2XXS", &grids::IQ2XXS_GRID);
    check_grid8("IQ2XS", &grids::IQ2XS_GRID);
    check_grid8("IQ2S", &grids::IQ2S_GRID);
    check_grid4("IQ3XXS", &grids::IQ3XXS_GRID);
    check_grid4("IQ3S", &grids::IQ3S_GRID);
    check_grid8("IQ1S", &grids::IQ1S_GRID);
}

/// ksigns: hand-checked entries from ggml-common.h (0 -> 0x00, 1 -> 0x81, 3 -> 0x03,
/// 127 -> 0xff): 7 stored bits plus an even-parity top bit.
#[test]
fn ksigns_parity() {
    assert_eq!(grids::KSIGNS_IQ2XS[0], 0x00);
    assert_eq!(grids::KSIGNS_IQ2XS[1], 0x81);
    assert_eq!(grids::KSIGNS_IQ2XS[3], 0x03);
    assert_eq!(grids::KSIGNS_IQ2XS[127], 0xff);
    assert!(grids::KSIGNS_IQ2XS
        .iter()
        .all(|s| s.count_ones().is_multiple_of(2)));
}
