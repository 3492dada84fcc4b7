//! Quantization must be byte-identical to llama.cpp's `ggml_quantize_chunk` without imatrix
//! (`quantize_row_q8_K_ref` / `quantize_row_q8_1_ref` for the activation formats). Where gguf-py
//! also quantizes a type, the fixture script checked it agrees with llama.cpp.

mod common;

use common::*;
use glint_gguf::GgmlType;
use glint_quant::{quantize, quantize_to_vec, quantized_len, traits};

/// Types with a reference quantizer; every one must have a fixture and match it.
const QUANTIZED: &[&str] = &[
    "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0", "Q1_0", "NVFP4",
];

fn first_byte_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

#[test]
fn table_quantizers_are_exactly_the_tested_ones() {
    for &ty in GgmlType::ALL {
        if ty == GgmlType::F32 {
            continue; // identity, checked below
        }
        assert_eq!(
            traits(ty).from_f32.is_some(),
            QUANTIZED.contains(&ty.name()),
            "{ty}: quantizer presence disagrees with the fixture list"
        );
    }
}

#[test]
fn every_quantizer_matches_llama_cpp() {
    let input = read_f32("quantize/input.f32");
    let special = read_f32("quantize/special.f32");
    for name in QUANTIZED {
        let ty = GgmlType::from_name(name).unwrap();
        let want = read(&format!("quantize/{name}.bin"));
        let mut src = input.clone();
        if matches!(ty, GgmlType::F16 | GgmlType::BF16) {
            src.extend_from_slice(&special);
        }
        let got = quantize_to_vec(ty, &src).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(got.len(), want.len(), "{ty}: byte count");
        if let Some(i) = first_byte_mismatch(&got, &want) {
            let bs = ty.type_size();
            panic!(
                "{ty}: first differing byte {i} (block {}, byte {} in block): got {:02x?} want {:02x?}",
                i / bs,
                i % bs,
                &got[i / bs * bs..(i / bs + 1) * bs],
                &want[i / bs * bs..(i / bs + 1) * bs]
            );
        }
    }
}

#[test]
fn f32_quantize_is_identity() {
    let input = read_f32("quantize/input.f32");
    let got = quantize_to_vec(GgmlType::F32, &input).unwrap();
    assert_eq!(got, read("quantize/input.f32"));
}

/// Output buffers that are not block-aligned in memory go through a scratch copy.
#[test]
fn misaligned_output_matches() {
    let input = read_f32("quantize/input.f32");
    for name in ["Q8_K", "Q4_K", "Q6_K"] {
        let ty = GgmlType::from_name(name).unwrap();
        let want = read(&format!("quantize/{name}.bin"));
        let n = quantized_len(ty, input.len()).unwrap();
        let mut buf = vec![0u8; n + 1];
        quantize(ty, &input, &mut buf[1..]).unwrap();
        assert_eq!(&buf[1..], &want[..], "{ty}");
    }
}
