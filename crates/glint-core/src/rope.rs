//! RoPE frequency tables, computed once on the host and uploaded.

/// YaRN context extension parameters (DeepSeek-V3 family; absent for GLM-5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// `rope.scaling.factor` (40 for DeepSeek-V3).
    pub factor: f32,
    /// `rope.scaling.original_context_length` (4096 for DeepSeek-V3).
    pub original_ctx: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

/// Inverse frequencies `theta^(−2i/n_rot)`, i < n_rot/2, optionally blended with YaRN.
///
/// The YaRN blend follows the DeepSeek reference / HF `_compute_yarn_parameters`: dims whose
/// wavelength is short compared with the original context keep their frequency (extrapolate),
/// long ones are divided by `factor` (interpolate), with a linear ramp between the correction
/// dims of `beta_fast` and `beta_slow`.
pub fn inv_freq(theta: f32, n_rot: usize, yarn: Option<&Yarn>) -> Vec<f32> {
    let half = n_rot / 2;
    let dim = n_rot as f64;
    let base = theta as f64;
    let plain: Vec<f64> = (0..half)
        .map(|i| base.powf(-((2 * i) as f64) / dim))
        .collect();
    let Some(y) = yarn else {
        return plain.iter().map(|&f| f as f32).collect();
    };
    let corr = |n_rot_: f64| {
        dim * ((y.original_ctx as f64) / (n_rot_ * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let low = corr(y.beta_fast as f64).floor().max(0.0);
    let high = corr(y.beta_slow as f64).ceil().min(dim - 1.0);
    let span = if high == low { 0.001 } else { high - low };
    plain
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
            let extrapolate = 1.0 - ramp;
            let interp = f / y.factor as f64;
            (interp * (1.0 - extrapolate) + f * extrapolate) as f32
        })
        .collect()
}

/// YaRN attention-temperature factor `0.1·mscale·ln(factor) + 1` (1 when `factor ≤ 1`).
pub fn yarn_mscale(factor: f32, mscale: f32) -> f32 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}
