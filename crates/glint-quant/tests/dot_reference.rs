//! Scalar dot products against a float reference built from the dequantizers (which are
//! themselves tested against gguf-py): sum of dequantized weight x dequantized activation in
//! f64. This checks every type's integer decoding and scale handling independently of how the
//! kernels are written.

mod dotutil;

use dotutil::*;
use glint_gguf::GgmlType;
use glint_quant::dot::{self, Isa};
use glint_quant::{dequantize_to_vec, quantize_to_vec};

fn check_type(ty: GgmlType, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let w = random_weights(ty, n, &mut rng);
    let x = random_activations(n, &mut rng);
    let partner = dot::partner_type(ty).unwrap();
    let mut act = vec![0u8; dot::activation_bytes(partner, n).unwrap()];
    dot::quantize_activation(partner, &x, &mut act).unwrap();
    let wf = dequantize_to_vec(ty, &w).unwrap();
    let af = dequantize_to_vec(partner, &act).unwrap();
    let got = dot::vec_dot_with(Isa::Scalar, ty, n, &w, &act).unwrap() as f64;
    let want = dot64(&wf, &af);
    // f32 accumulation over at most n/32 block terms; Q4_1/Q5_1 also use the activation's
    // f16-rounded `s = d * sum(q)` for the min term (relative error 2^-11).
    let rel = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => 2e-3,
        _ => 1e-5,
    };
    let tol = rel * abs_dot(&wf, &af) + 1e-6;
    assert!(
        (got - want).abs() <= tol,
        "{ty} seed {seed}: scalar {got} vs f64 reference {want} (tol {tol})"
    );
}

#[test]
fn scalar_matches_dequantized_reference_for_every_type() {
    for &ty in DOT_TYPES {
        for seed in 0..8 {
            check_type(ty, 1024, seed * 31 + ty as u64);
        }
    }
}

/// The partner pairing is the type table's `vec_dot_type` column (written from ggml-cpu's x86
/// `type_traits_cpu`), and the table's `vec_dot` column is filled for every dot type.
#[test]
fn partner_types_agree_with_type_table() {
    for &ty in DOT_TYPES {
        let t = glint_quant::traits(ty);
        assert_eq!(dot::partner_type(ty), t.vec_dot_type, "{ty}");
        assert!(t.vec_dot.is_some(), "{ty}");
    }
}

/// Activation quantization: Q8_K must be byte-identical to the reference quantizer (llama.cpp's
/// x86 `quantize_row_q8_K` is `quantize_row_q8_K_ref`); Q8_0/Q8_1 follow the x86 AVX path, which
/// may differ from `_ref` by one quant where `x * 127/amax` and `x / (amax/127)` round apart or
/// hit an exact .5, so they must agree with the reference everywhere else.
#[test]
fn activation_quantization_matches_reference_quantizers() {
    let mut rng = Rng::new(7);
    let x = random_activations(4096, &mut rng);
    let mut q8k = vec![0u8; dot::activation_bytes(GgmlType::Q8_K, x.len()).unwrap()];
    dot::quantize_activation(GgmlType::Q8_K, &x, &mut q8k).unwrap();
    assert_eq!(q8k, quantize_to_vec(GgmlType::Q8_K, &x).unwrap());

    for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
        let mut ours = vec![0u8; dot::activation_bytes(ty, x.len()).unwrap()];
        dot::quantize_activation(ty, &x, &mut ours).unwrap();
        let reference = quantize_to_vec(ty, &x).unwrap();
        let (a, b) = (
            dequantize_to_vec(ty, &ours).unwrap(),
            dequantize_to_vec(ty, &reference).unwrap(),
        );
        let mut differing = 0;
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            let d = ((i / 32) as f32, (p - q).abs());
            let blk = &x[i / 32 * 32..i / 32 * 32 + 32];
            let step = blk.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            assert!(d.1 <= step * 1.01, "{ty} element {i}: {p} vs {q}");
            if p != q {
                differing += 1;
            }
        }
        assert!(
            differing * 1000 < x.len(),
            "{ty}: {differing} quants differ from _ref"
        );
    }
}

/// Hand-computed Q8_0 x Q8_0: block of d = 1 weights 0..31 against activations that quantize to
/// 1 at every position (x = 1.0 -> amax 1, d = 1/127, q = 127): 127 * sum(0..31) * (1 * 1/127).
#[test]
fn q8_0_hand_computed() {
    let mut w = vec![0u8; 34];
    w[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
    for j in 0..32 {
        w[2 + j] = j as u8;
    }
    let x = vec![1.0f32; 32];
    let mut act = vec![0u8; 34];
    dot::quantize_activation(GgmlType::Q8_0, &x, &mut act).unwrap();
    let d = half::f16::from_f32(1.0 / 127.0).to_f32();
    let want = (127 * (0..32).sum::<i32>()) as f32 * (1.0 * d);
    for isa in Isa::all_available() {
        assert_eq!(
            dot::vec_dot_with(isa, GgmlType::Q8_0, 32, &w, &act).unwrap(),
            want,
            "{isa:?}"
        );
    }
}

#[test]
fn bad_lengths_are_errors() {
    let w = vec![0u8; 144];
    let a = vec![0u8; 292];
    assert!(dot::vec_dot(GgmlType::Q4_K, 256, &w[..143], &a).is_err());
    assert!(dot::vec_dot(GgmlType::Q4_K, 256, &w, &a[..291]).is_err());
    assert!(dot::vec_dot(GgmlType::Q4_K, 250, &w, &a).is_err());
    assert!(dot::vec_dot(GgmlType::Q8_K, 256, &a, &a).is_err());
    assert!(dot::vec_dot(GgmlType::Q4_K, 256, &w, &a).is_ok());
}
