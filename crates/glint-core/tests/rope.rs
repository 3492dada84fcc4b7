//! RoPE against hand-computed rotations and the YaRN blend against the spec §9 formula worked
//! by hand.

use glint_core::rope::{inv_freq, Yarn};
use glint_core::{Backend, CpuBackend, RopeMode, RopeParams};

fn rotate(mode: RopeMode, x: &[f32], pos: u32) -> Vec<f32> {
    let be = CpuBackend::new();
    let mut buf = be.upload(x).unwrap();
    let freqs = be.upload(&inv_freq(10000.0, 4, None)).unwrap();
    let p = RopeParams {
        n_tokens: 1,
        n_heads: 1,
        head_dim: 4,
        offset: 0,
        n_rot: 4,
        mode,
        attn_factor: 1.0,
    };
    be.rope(&mut buf, &be.upload_ids(&[pos]).unwrap(), &freqs, &p)
        .unwrap();
    buf
}

fn close(a: &[f32], b: &[f32]) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}

// x = [1, 2, 3, 4], pos 2, theta 1e4, 4 rotated dims: inv_freq = [1, 0.01] so the angles are
// 2 rad and 0.02 rad. cos 2 = -0.4161468, sin 2 = 0.9092974, cos .02 = 0.9998000, sin .02 = 0.0199987.

#[test]
fn interleaved_pairs_adjacent_dims() {
    // (x0, x1) by 2 rad, (x2, x3) by 0.02 rad:
    // y0 = 1·cos2 − 2·sin2, y1 = 1·sin2 + 2·cos2, y2 = 3·cos.02 − 4·sin.02, y3 = 3·sin.02 + 4·cos.02
    close(
        &rotate(RopeMode::Interleaved, &[1.0, 2.0, 3.0, 4.0], 2),
        &[-2.2347417, 0.0770037, 2.9194054, 4.059196],
    );
}

#[test]
fn neox_pairs_halves() {
    // (x0, x2) by 2 rad, (x1, x3) by 0.02 rad:
    // y0 = 1·cos2 − 3·sin2, y2 = 1·sin2 + 3·cos2, y1 = 2·cos.02 − 4·sin.02, y3 = 2·sin.02 + 4·cos.02
    close(
        &rotate(RopeMode::Neox, &[1.0, 2.0, 3.0, 4.0], 2),
        &[-3.1440391, 1.9196054, -0.3391431, 4.0391974],
    );
}

#[test]
fn position_zero_is_identity() {
    close(
        &rotate(RopeMode::Interleaved, &[1.0, 2.0, 3.0, 4.0], 0),
        &[1.0, 2.0, 3.0, 4.0],
    );
}

#[test]
fn rope_touches_only_its_span() {
    // head of 6: dims 0..2 untouched, dims 2..6 rotated (the MLA q layout: nope then rope).
    let be = CpuBackend::new();
    let mut buf = be.upload(&[9.0, 8.0, 1.0, 2.0, 3.0, 4.0]).unwrap();
    let freqs = be.upload(&inv_freq(10000.0, 4, None)).unwrap();
    let p = RopeParams {
        n_tokens: 1,
        n_heads: 1,
        head_dim: 6,
        offset: 2,
        n_rot: 4,
        mode: RopeMode::Interleaved,
        attn_factor: 1.0,
    };
    be.rope(&mut buf, &be.upload_ids(&[2]).unwrap(), &freqs, &p)
        .unwrap();
    close(
        &buf,
        &[9.0, 8.0, -2.2347417, 0.0770037, 2.9194054, 4.059196],
    );
}

#[test]
fn yarn_blend_matches_hand_computation() {
    // DeepSeek-V3: dim 64, base 1e4, factor 40, original ctx 4096, beta 32/1.
    // corr(32) = 64·ln(4096/(32·2π))/(2·ln 1e4) = 10.47 -> low 10;
    // corr(1)  = 64·ln(4096/2π)/(2·ln 1e4)      = 22.51 -> high 23.
    // i = 0:  ramp 0 -> unchanged, 1.0.
    // i = 16: ramp 6/13; f = 1e4^(-0.5) = 0.01; 0.01/40·6/13 + 0.01·7/13 = 0.0055.
    // i = 31: ramp 1 -> f/40 = 1e4^(-62/64)/40.
    let y = Yarn {
        factor: 40.0,
        original_ctx: 4096.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    let f = inv_freq(10000.0, 64, Some(&y));
    assert_eq!(f.len(), 32);
    assert!((f[0] - 1.0).abs() < 1e-7);
    assert!((f[16] - 0.0055).abs() < 1e-8, "{}", f[16]);
    let f31 = 10000f64.powf(-62.0 / 64.0) / 40.0;
    assert!(((f[31] as f64) - f31).abs() < 1e-10);
    // Below `low` every frequency is kept.
    let plain = inv_freq(10000.0, 64, None);
    assert_eq!(&f[..11], &plain[..11]);
}

#[test]
fn yarn_mscale_deepseek() {
    // 0.1·1·ln 40 + 1 = 1.3688879
    assert!((glint_core::rope::yarn_mscale(40.0, 1.0) - 1.3688879).abs() < 1e-6);
}
