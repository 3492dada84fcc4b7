//! Element types of the paged KV cache, and the FP8 E4M3 codec the fp8 cache uses.
//!
//! A GLM-5 context of 200k tokens needs 44 GB of f32 latent cache per sequence; f16/bf16 halve
//! it and fp8 (E4M3, one f32 scale per row, as FlashMLA's and vLLM's fp8 MLA caches) quarters
//! it. q8 (int8 with one f32 scale per row) is as small as fp8 and is there for the indexer's
//! keys: their scan is integer multiply-adds on the CPU, exact in any order, about twice as
//! many per cycle as f32 FMAs. Which one to use is a measured trade-off (docs/cache-types.md).

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CacheType {
    #[default]
    F32,
    F16,
    Bf16,
    /// OCP FP8 E4M3 ("e4m3fn": no infinities, max 448) with a per-row f32 scale `amax / 448`.
    Fp8,
    /// Signed bytes in -127..=127 with a per-row f32 scale `amax / 127` (round half away from
    /// zero, as llama.cpp's Q8_0), read back as `code · scale`.
    Q8,
}

impl CacheType {
    pub const ALL: [CacheType; 5] = [Self::F32, Self::F16, Self::Bf16, Self::Fp8, Self::Q8];
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Fp8 => "fp8",
            Self::Q8 => "q8",
        }
    }
    /// Bytes of one cached row of `dim` values (fp8 and q8 include their scale).
    pub fn row_bytes(self, dim: usize) -> usize {
        match self {
            Self::F32 => 4 * dim,
            Self::F16 | Self::Bf16 => 2 * dim,
            Self::Fp8 | Self::Q8 => dim + 4,
        }
    }
}

impl fmt::Display for CacheType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CacheType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown cache type '{s}' (expected f32, f16, bf16, fp8 or q8)"))
    }
}

/// Largest q8 code magnitude.
pub const Q8_MAX: f32 = 127.0;

/// The q8 scale of a row: its largest finite magnitude over 127 (1 for an all-zero row, so
/// nothing divides by zero; an infinity saturates instead of making every other value NaN).
pub fn q8_scale(row: &[f32]) -> f32 {
    let amax = row
        .iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, &x| m.max(x.abs()));
    if amax > 0.0 {
        amax / Q8_MAX
    } else {
        1.0
    }
}

/// The q8 code of `x` at `scale`: `x / scale` rounded half away from zero, clamped to ±127;
/// NaN stores 0 (an int8 code has no NaN).
pub fn f32_to_q8(x: f32, scale: f32) -> i8 {
    let v = (x / scale).round();
    if v.is_nan() {
        0
    } else {
        v.clamp(-Q8_MAX, Q8_MAX) as i8
    }
}

/// Largest finite E4M3 value.
pub const FP8_MAX: f32 = 448.0;

/// The value of an E4M3 byte (sign, 4 exponent bits with bias 7, 3 mantissa bits; `S.1111.111`
/// is NaN, there are no infinities).
pub fn fp8_to_f32(b: u8) -> f32 {
    FP8_VALUES[b as usize]
}

/// Every E4M3 byte's value, built from the bits: a row of fp8 keys is decoded at a table load
/// an element, where computing `2^(e-7)` took a `powi` call each (the CPU's fp8 indexer scan at
/// 64k keys spent ~70 ms doing that).
const FP8_VALUES: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        let (e, m) = ((b >> 3) & 0x0f, b & 0x07);
        let mag = if e == 0x0f && m == 0x07 {
            f32::NAN
        } else if e == 0 {
            // m/8 · 2⁻⁶, exact.
            m as f32 / 512.0
        } else {
            // (1 + m/8) · 2^(e-7): exponent field e - 7 + 127, the mantissa's top three bits.
            f32::from_bits((((e + 120) << 23) | (m << 20)) as u32)
        };
        t[b] = if b & 0x80 != 0 && !mag.is_nan() {
            -mag
        } else {
            mag
        };
        b += 1;
    }
    t
};

/// Nearest E4M3 byte to `x` (ties to even mantissa), saturating at ±448; NaN maps to NaN.
pub fn f32_to_fp8(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs().min(FP8_MAX);
    // Positive codes 0x00..=0x7e are increasing in value: binary search the first >= a.
    let (mut lo, mut hi) = (0u8, 0x7eu8);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fp8_to_f32(mid) < a {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let code = if lo == 0 {
        0
    } else {
        let (below, above) = (fp8_to_f32(lo - 1), fp8_to_f32(lo));
        let (db, da) = (a - below, above - a);
        if db < da || (db == da && (lo - 1) & 1 == 0) {
            lo - 1
        } else {
            lo
        }
    };
    sign | code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table against the format's definition, written with `powi` as the decoder was.
    #[test]
    fn fp8_table_is_the_e4m3_definition() {
        for b in 0..=255u8 {
            let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
            let (e, m) = (((b >> 3) & 0x0f) as i32, (b & 0x07) as f32);
            let want = if e == 0x0f && b & 0x07 == 0x07 {
                f32::NAN
            } else if e == 0 {
                sign * m / 8.0 * 2f32.powi(-6)
            } else {
                sign * (1.0 + m / 8.0) * 2f32.powi(e - 7)
            };
            let got = fp8_to_f32(b);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "byte {b:#04x}: {got} vs {want}"
            );
        }
        assert_eq!(fp8_to_f32(0x7e), 448.0);
        assert_eq!(fp8_to_f32(0x38), 1.0);
        assert_eq!(fp8_to_f32(0xb8), -1.0);
        assert_eq!(fp8_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(fp8_to_f32(0x80).to_bits(), (-0.0f32).to_bits());
        // Every code round-trips through the encoder.
        for b in (0..=0x7eu8).chain(0x80..=0xfe) {
            assert_eq!(f32_to_fp8(fp8_to_f32(b)), b, "byte {b:#04x}");
        }
    }
}
