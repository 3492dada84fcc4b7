//! The MoE block (router + routed experts + shared expert) and the dense MLP against a
//! brute-force host computation written here from spec §4 (HF `DeepseekV3TopkRouter` rules).

use std::borrow::Cow;

use glint_core::{Backend, CpuBackend, GgmlType, RouterParams};
use glint_moe::{mlp, moe, ExpertGateUp, FfnSizes, Gating, MlpWeights, MoeScratch, MoeWeights};

const D: usize = 8;
const E: usize = 6;
const FF: usize = 5;
const K: usize = 2;
const G: usize = 3;
const GU: usize = 2;

fn rand_vec(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn up<'a>(be: &CpuBackend, dims: &[usize], v: &[f32]) -> glint_core::CpuWeight<'a> {
    let b: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    be.upload_weight("w", GgmlType::F32, dims, Cow::Owned(b))
        .unwrap()
}

fn lin(w: &[f32], x: &[f32], rows: usize) -> Vec<f64> {
    let c = x.len();
    (0..rows)
        .map(|r| (0..c).map(|i| w[r * c + i] as f64 * x[i] as f64).sum())
        .collect()
}

/// down(silu(gate x) ⊙ up x) for one matrix set (row-major [rows × cols] slices).
fn swiglu(g: &[f32], u: &[f32], dn: &[f32], x: &[f32]) -> Vec<f64> {
    let a = lin(g, x, FF);
    let b = lin(u, x, FF);
    let h: Vec<f32> = a
        .iter()
        .zip(&b)
        .map(|(&a, &b)| (a / (1.0 + (-a).exp()) * b) as f32)
        .collect();
    lin(dn, &h, D)
}

#[test]
fn moe_block_matches_brute_force() {
    check_moe(false);
}

#[test]
fn moe_block_with_fused_gate_up_matches_brute_force() {
    check_moe(true);
}

fn check_moe(fused: bool) {
    let be = CpuBackend::new();
    let n = 5;
    let x = rand_vec(1, n * D, 1.0);
    let router = rand_vec(2, E * D, 1.5);
    let bias = rand_vec(3, E, 0.3);
    let (gw, uw, dw) = (
        rand_vec(4, E * FF * D, 0.5),
        rand_vec(5, E * FF * D, 0.5),
        rand_vec(6, E * D * FF, 0.5),
    );
    let (sg, su, sd) = (
        rand_vec(7, FF * D, 0.5),
        rand_vec(8, FF * D, 0.5),
        rand_vec(9, D * FF, 0.5),
    );
    let w = MoeWeights {
        gate_inp: up(&be, &[D, E], &router),
        bias: Some(bias.clone()),
        gate_up: if fused {
            // Per expert: its gate rows, then its up rows.
            let mut gu = Vec::new();
            for e in 0..E {
                gu.extend_from_slice(&gw[e * FF * D..(e + 1) * FF * D]);
                gu.extend_from_slice(&uw[e * FF * D..(e + 1) * FF * D]);
            }
            ExpertGateUp::Fused(up(&be, &[D, 2 * FF, E], &gu))
        } else {
            ExpertGateUp::Split {
                gate: up(&be, &[D, FF, E], &gw),
                up: up(&be, &[D, FF, E], &uw),
            }
        },
        down_exps: up(&be, &[FF, D, E], &dw),
        d_ff: FF,
        shared: Some(MlpWeights {
            gate: up(&be, &[D, FF], &sg),
            up: up(&be, &[D, FF], &su),
            down: up(&be, &[FF, D], &sd),
            d_ff: FF,
        }),
        router: RouterParams {
            n_expert: E,
            n_used: K,
            gating: Gating::Sigmoid,
            n_group: G,
            n_group_used: GU,
            normalize: true,
            scale: 2.5,
        },
        local_experts: None,
    };
    let mut out = be.alloc(n * D).unwrap();
    let sizes = FfnSizes {
        max_tokens: n,
        d_model: D,
        dense_d_ff: FF,
        n_expert: E,
        n_used: K,
        expert_d_ff: FF,
        shared_d_ff: FF,
    };
    let mut sc = MoeScratch::new(&be, &sizes).unwrap();
    moe(&be, &w, &x, n, D, &mut sc, &mut out).unwrap();

    let per = E / G;
    for t in 0..n {
        let xt = &x[t * D..(t + 1) * D];
        let s: Vec<f64> = lin(&router, xt, E)
            .iter()
            .map(|&l| 1.0 / (1.0 + (-l).exp()))
            .collect();
        let sel: Vec<f64> = s.iter().zip(&bias).map(|(a, &b)| a + b as f64).collect();
        // Group score: sum of the two best biased scores (groups of 2: the whole group).
        let mut groups: Vec<(f64, usize)> = (0..G)
            .map(|g| (sel[g * per..(g + 1) * per].iter().sum(), g))
            .collect();
        groups.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
        let kept: Vec<usize> = groups[..GU].iter().map(|g| g.1).collect();
        let mut cand: Vec<(f64, usize)> = (0..E)
            .filter(|e| kept.contains(&(e / per)))
            .map(|e| (sel[e], e))
            .collect();
        cand.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
        let chosen: Vec<usize> = cand[..K].iter().map(|c| c.1).collect();
        let sum: f64 = chosen.iter().map(|&e| s[e]).sum();
        let mut want = swiglu(&sg, &su, &sd, xt);
        for &e in &chosen {
            let y = swiglu(
                &gw[e * FF * D..(e + 1) * FF * D],
                &uw[e * FF * D..(e + 1) * FF * D],
                &dw[e * D * FF..(e + 1) * D * FF],
                xt,
            );
            let wt = s[e] / sum * 2.5;
            for i in 0..D {
                want[i] += wt * y[i];
            }
        }
        for i in 0..D {
            let got = out[t * D + i] as f64;
            assert!(
                (got - want[i]).abs() < 1e-4,
                "token {t} dim {i}: {got} vs {}",
                want[i]
            );
        }
    }
}

#[test]
fn dense_mlp_matches_brute_force() {
    let be = CpuBackend::new();
    let n = 3;
    let x = rand_vec(11, n * D, 1.0);
    let (g, u, d) = (
        rand_vec(12, FF * D, 0.5),
        rand_vec(13, FF * D, 0.5),
        rand_vec(14, D * FF, 0.5),
    );
    let w = MlpWeights {
        gate: up(&be, &[D, FF], &g),
        up: up(&be, &[D, FF], &u),
        down: up(&be, &[FF, D], &d),
        d_ff: FF,
    };
    let mut out = be.alloc(n * D).unwrap();
    let sizes = FfnSizes {
        max_tokens: n,
        d_model: D,
        dense_d_ff: FF,
        ..FfnSizes::default()
    };
    let mut sc = MoeScratch::new(&be, &sizes).unwrap();
    mlp(&be, &w, &x, n, &mut sc, &mut out).unwrap();
    for t in 0..n {
        let want = swiglu(&g, &u, &d, &x[t * D..(t + 1) * D]);
        for i in 0..D {
            assert!((out[t * D + i] as f64 - want[i]).abs() < 1e-5);
        }
    }
}
