//! Shared test helpers: random valid blocks and activations, float references.
#![allow(dead_code)]

use glint_gguf::GgmlType;
use half::{bf16, f16};

/// Small deterministic generator (xorshift64*) so failures reproduce from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next_u64() as u8;
        }
    }
}

/// Every weight type that has a dot kernel.
pub const DOT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::Q1_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::IQ4_XS,
];

/// Byte offsets of the f16 scale fields of one block (from ggml-common.h's layouts).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | Q1_0 | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S
        | IQ4_XS => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        TQ1_0 => &[52],
        TQ2_0 => &[64],
        _ => &[],
    }
}

/// A random f16 scale of either sign and magnitude in [2^-10, 2^-4).
/// Magnitudes of the f16 block scales of random weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// 2^-10 .. 2^-4, like real weights.
    Normal,
    /// Every scale +0.0: the whole row is zero.
    Zero,
    /// f16 subnormals (2^-24 .. 2^-15).
    Subnormal,
    /// 2^6 .. 2^10: large but with products still far from f32 overflow.
    Large,
}

fn scale_bits(rng: &mut Rng) -> u16 {
    scale_bits_with(rng, Scales::Normal)
}

fn scale_bits_with(rng: &mut Rng, mode: Scales) -> u16 {
    let (lo, hi) = match mode {
        Scales::Normal => (-10.0, -4.0),
        Scales::Zero => return 0,
        Scales::Subnormal => (-24.0, -15.0),
        Scales::Large => (6.0, 10.0),
    };
    let mag = 2f32.powf(rng.uniform(lo, hi));
    let s = if rng.next_u64() & 1 == 0 { mag } else { -mag };
    f16::from_f32(s).to_bits()
}

/// `n` elements of random but valid weights of type `ty`: random quant bits with finite,
/// moderate scales (random bytes in a scale field could be inf/NaN, which no quantizer writes).
pub fn random_weights(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    random_weights_with(ty, n, rng, Scales::Normal)
}

/// [`random_weights`] with the f16 scale fields drawn as `mode` says (float types ignore it).
pub fn random_weights_with(ty: GgmlType, n: usize, rng: &mut Rng, mode: Scales) -> Vec<u8> {
    let nb = n / ty.block_size();
    let bs = ty.type_size();
    let mut out = vec![0u8; nb * bs];
    match ty {
        GgmlType::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.uniform(-1.0, 1.0).to_le_bytes());
            }
            return out;
        }
        GgmlType::F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&f16::from_f32(rng.uniform(-1.0, 1.0)).to_le_bytes());
            }
            return out;
        }
        GgmlType::BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&bf16::from_f32(rng.uniform(-1.0, 1.0)).to_le_bytes());
            }
            return out;
        }
        _ => {}
    }
    rng.fill(&mut out);
    for b in out.chunks_exact_mut(bs) {
        for &o in f16_fields(ty) {
            b[o..o + 2].copy_from_slice(&scale_bits_with(rng, mode).to_le_bytes());
        }
        match ty {
            // E8M0 exponent kept near 1.0 so products stay finite.
            GgmlType::MXFP4 => b[0] = 110 + (rng.next_u64() % 30) as u8,
            // UE4M3 sub-block scales between about 2^-4 and 2^2.
            GgmlType::NVFP4 => {
                for s in &mut b[0..4] {
                    *s = 0x18 + (rng.next_u64() % 0x30) as u8;
                }
            }
            // The f16 super-scale lives in the top nibbles of the four u16 scale words.
            GgmlType::IQ1_M => {
                let v = scale_bits_with(rng, mode);
                for i in 0..4 {
                    let hi = 48 + 2 * i + 1;
                    b[hi] = (b[hi] & 0x0f) | ((((v >> (4 * i)) & 0xf) as u8) << 4);
                }
            }
            _ => {}
        }
    }
    out
}

/// Activations like a hidden state: mostly small, a few larger, some exact zeros.
pub fn random_activations(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|i| match rng.next_u64() % 16 {
            0 => 0.0,
            1 => rng.uniform(-8.0, 8.0),
            _ => rng.uniform(-1.0, 1.0) * (1.0 + (i % 7) as f32),
        })
        .collect()
}

/// Sum of |w_i * a_i| in f64 over the dequantized rows: the scale float rounding errors are
/// relative to.
pub fn abs_dot(w: &[f32], a: &[f32]) -> f64 {
    w.iter()
        .zip(a)
        .map(|(x, y)| (*x as f64 * *y as f64).abs())
        .sum()
}

pub fn dot64(w: &[f32], a: &[f32]) -> f64 {
    w.iter().zip(a).map(|(x, y)| *x as f64 * *y as f64).sum()
}
