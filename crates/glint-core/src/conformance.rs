//! The backend conformance suite: every op of [`Backend`] against a plain reference written
//! here (f64 sums, no shared code with the CPU backend), on random shapes including odd sizes,
//! edge values (zeros, large magnitudes, −∞ in top-k rows, ties) and paged views whose blocks
//! are scattered over the pool. The CPU backend runs it in CI (`tests/conformance.rs`); a GPU
//! backend runs the same function on its device.
//!
//! Tolerances are relative to the magnitude of the terms summed (`Σ|a·b|`), so they hold for
//! any summation order an implementation picks: f32 accumulation of `n` terms is within about
//! `n·2⁻²⁴` of that; the suite allows `4e-6·(1 + n/64)`.

// Reference code indexes like the formulas it transcribes.
#![allow(clippy::needless_range_loop)]

use std::borrow::Cow;

use glint_gguf::GgmlType;

use crate::backend::{Backend, Pages};
use crate::cache_type::CacheType;
use crate::params::{AttnParams, Gating, IndexerParams, RopeMode, RopeParams, RouterParams, Rows};

/// Runs every check and panics at the end listing each failed check with its message (naming
/// the op, the case and the worst element), so one run on a remote GPU shows every failure.
/// Returns the names of the checks that ran.
pub fn conformance<B: Backend>(be: &B) -> Vec<&'static str> {
    let mut ran = Vec::new();
    let mut failed = Vec::new();
    let mut run = |name: &'static str, f: &dyn Fn(&B)| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(be))) {
            Ok(()) => {}
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!("{name}: {msg}"));
            }
        }
        ran.push(name);
    };
    run("memory", &memory::<B>);
    run("matmul", &matmul::<B>);
    run("mul_mat_id", &mul_mat_id::<B>);
    run("gate/up pairs, gated down", &swiglu_parts::<B>);
    run("get_rows", &get_rows::<B>);
    run("norms", &norms::<B>);
    run("rope", &rope::<B>);
    run("elementwise", &elementwise::<B>);
    run("set_rows/gather_rows", &rows::<B>);
    run("cache types", &cache_types::<B>);
    run("mla_kv_rows", &mla_kv_rows::<B>);
    run("indexer_k_rows", &indexer_k_rows::<B>);
    run("moe_route", &moe_route::<B>);
    run("moe_combine", &moe_combine::<B>);
    run("moe_local_experts", &moe_local_experts::<B>);
    run("top_k", &top_k::<B>);
    run("top_k wide", &top_k_wide::<B>);
    run("indexer", &indexer::<B>);
    run("mla_attention", &attention::<B>);
    assert!(
        failed.is_empty(),
        "{} of {} conformance checks failed on {}:\n{}",
        failed.len(),
        ran.len(),
        be.name(),
        failed.join("\n")
    );
    ran
}

// ---- helpers ------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() + 1.0) * 0.5 * n as f32) as usize % n.max(1)
    }
}

/// RoPE inverse frequencies of base 10000 for `n_rot` rotated dims.
fn inv_freq_ref(n_rot: usize) -> Vec<f32> {
    (0..n_rot / 2)
        .map(|i| 10000f32.powf(-(2.0 * i as f32) / n_rot as f32))
        .collect()
}

/// RoPE of `v[offset .. offset + n_rot]` in f64 at position `pos` (the angle in f32, as the
/// spec and HF compute it).
fn rope_ref(
    v: &mut [f64],
    offset: usize,
    n_rot: usize,
    mode: RopeMode,
    pos: u32,
    inv: &[f32],
    attn_factor: f32,
) {
    for (i, &f) in inv.iter().enumerate().take(n_rot / 2) {
        let (a, b) = match mode {
            RopeMode::Interleaved => (offset + 2 * i, offset + 2 * i + 1),
            RopeMode::Neox => (offset + i, offset + i + n_rot / 2),
        };
        let ang = (pos as f32 * f) as f64;
        let (c, sn) = (
            ang.cos() * attn_factor as f64,
            ang.sin() * attn_factor as f64,
        );
        let (x0, x1) = (v[a], v[b]);
        v[a] = x0 * c - x1 * sn;
        v[b] = x0 * sn + x1 * c;
    }
}

/// Whether cache rows `slots[t]` of `cached` (rows of `dim`) hold row t of `rows` rounded to
/// `ty` (`rounded`), and every other row is still zero.
fn cache_holds(cached: &[f32], rows: &[f32], slots: &[u32], dim: usize, ty: CacheType) -> bool {
    let mut want = vec![0f32; cached.len()];
    for (t, &slot) in slots.iter().enumerate() {
        let at = slot as usize * dim;
        want[at..at + dim].copy_from_slice(&rounded(&rows[t * dim..(t + 1) * dim], ty));
    }
    cached
        .iter()
        .zip(&want)
        .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

fn up<B: Backend>(be: &B, v: &[f32]) -> B::Buf {
    be.upload(v).expect("upload")
}

fn ids<B: Backend>(be: &B, v: &[u32]) -> B::Ids {
    be.upload_ids(v).expect("upload_ids")
}

fn down<B: Backend>(be: &B, b: &B::Buf, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    be.download(b, &mut v).expect("download");
    v
}

fn down_ids<B: Backend>(be: &B, b: &B::Ids, n: usize) -> Vec<u32> {
    let mut v = vec![0u32; n];
    be.download_ids(b, &mut v).expect("download_ids");
    v
}

fn weight<'a, B: Backend>(be: &B, dims: &[usize], v: &[f32]) -> B::Weight<'a> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    be.upload_weight("conformance", GgmlType::F32, dims, Cow::Owned(bytes))
        .expect("upload_weight")
}

/// `got` against `want` where element `i` summed terms of total magnitude `mag[i]` over `n`
/// terms.
fn close(op: &str, case: &str, got: &[f32], want: &[f64], mag: &[f64], n: usize) {
    assert_eq!(got.len(), want.len(), "{op} {case}: length");
    let tol = 4e-6 * (1.0 + n as f64 / 64.0);
    for i in 0..got.len() {
        let err = (got[i] as f64 - want[i]).abs();
        let lim = tol * (mag[i] + want[i].abs()) + 1e-30;
        assert!(
            err <= lim,
            "{op} {case}: element {i}: got {}, want {} (|err| {err:.3e} > {lim:.3e})",
            got[i],
            want[i]
        );
    }
}

fn dot(a: &[f32], b: &[f32]) -> (f64, f64) {
    a.iter().zip(b).fold((0.0, 0.0), |(s, m), (&x, &y)| {
        let p = x as f64 * y as f64;
        (s + p, m + p.abs())
    })
}

/// E4M3 value of a code, from the OCP FP8 spec: bias 7, subnormals at exponent 0, S.1111.111 NaN.
fn e4m3(c: u8) -> f64 {
    let s = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (((c >> 3) & 15) as i32, (c & 7) as f64);
    match (e, c & 7) {
        (15, 7) => f64::NAN,
        (0, _) => s * m / 8.0 / 64.0,
        _ => s * (1.0 + m / 8.0) * 2f64.powi(e - 7),
    }
}

/// What a cache of type `ty` should hold for `row`: f16/bf16 by the `half` crate's rounding,
/// fp8 as the nearest E4M3 value (ties to the even code, saturating at 448) of `x / scale`
/// with `scale = max|x| / 448`, times the scale; q8 as the nearest integer to `x / scale`
/// (`scale = max|x| / 127`) times the scale.
fn rounded(row: &[f32], ty: CacheType) -> Vec<f32> {
    match ty {
        CacheType::F32 => row.to_vec(),
        CacheType::F16 => row
            .iter()
            .map(|&x| half::f16::from_f32(x).to_f32())
            .collect(),
        CacheType::Bf16 => row
            .iter()
            .map(|&x| half::bf16::from_f32(x).to_f32())
            .collect(),
        CacheType::Q8 => {
            let amax = row
                .iter()
                .filter(|x| x.is_finite())
                .fold(0f32, |m, &x| m.max(x.abs()));
            let scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
            row.iter()
                .map(|&x| {
                    // Nearest integer to x / scale, halves away from zero, within ±127.
                    let v = (x / scale) as f64;
                    let c = if v.is_nan() {
                        0.0
                    } else {
                        (v.abs() + 0.5).floor().min(127.0).copysign(v)
                    };
                    (c * scale as f64) as f32
                })
                .collect()
        }
        CacheType::Fp8 => {
            let amax = row
                .iter()
                .filter(|x| x.is_finite())
                .fold(0f32, |m, &x| m.max(x.abs()));
            let scale = if amax > 0.0 { amax / 448.0 } else { 1.0 };
            // Every code's value once (the search below reads each 255 times a value).
            let e: Vec<f64> = (0u8..=255).map(e4m3).collect();
            row.iter()
                .map(|&x| {
                    let v = (x / scale) as f64;
                    let best = (0u8..=255)
                        .filter(|&c| !e[c as usize].is_nan())
                        .min_by(|&a, &b| {
                            let (da, db) = ((e[a as usize] - v).abs(), (e[b as usize] - v).abs());
                            da.partial_cmp(&db).unwrap().then((a & 1).cmp(&(b & 1)))
                        })
                        .unwrap();
                    // Among equal distances prefer the sign of v (±0 both at distance |v|).
                    let best = if e[best as usize] == 0.0 && v < 0.0 {
                        0x80
                    } else {
                        best
                    };
                    (e[best as usize] * scale as f64) as f32
                })
                .collect()
        }
    }
}

/// A cache of type `ty` holding `rows` (each `dim` wide) at rows 0.., and the values it should
/// read back.
fn cache_of<B: Backend>(be: &B, rows: &[f32], dim: usize, ty: CacheType) -> (B::Cache, Vec<f32>) {
    let n = rows.len() / dim;
    let mut c = be.alloc_cache(n, dim, ty).expect("alloc_cache");
    let slots: Vec<u32> = (0..n as u32).collect();
    be.cache_set_rows(&up(be, rows), &ids(be, &slots), n, &mut c)
        .expect("cache_set_rows");
    let want: Vec<f32> = rows.chunks(dim).flat_map(|r| rounded(r, ty)).collect();
    (c, want)
}

// ---- checks -------------------------------------------------------------------------------

fn memory<B: Backend>(be: &B) {
    let mut r = Rng(1);
    let v = r.vec(37, 3.0);
    let mut b = be.alloc(40).expect("alloc");
    assert_eq!(be.buf_len(&b), 40, "buf_len");
    assert_eq!(down(be, &b, 40), vec![0.0; 40], "alloc is zero-filled");
    be.write(&mut b, &v).expect("write");
    let got = down(be, &b, 40);
    assert_eq!(&got[..37], &v[..], "write then download");
    assert_eq!(&got[37..], &[0.0; 3], "write touches only its prefix");
    let mut i = be.alloc_ids(9).expect("alloc_ids");
    assert_eq!(down_ids(be, &i, 9), vec![0; 9], "alloc_ids is zero-filled");
    be.write_ids(&mut i, &[7, 0, u32::MAX]).expect("write_ids");
    assert_eq!(
        down_ids(be, &i, 4),
        vec![7, 0, u32::MAX, 0],
        "write_ids prefix"
    );
    assert!(be.write(&mut b, &[0.0; 41]).is_err(), "write past the end");
}

fn matmul<B: Backend>(be: &B) {
    let mut r = Rng(2);
    for &(cols, rows, n) in &[(1, 1, 1), (7, 5, 3), (64, 33, 1), (300, 17, 9), (513, 3, 2)] {
        let w = r.vec(cols * rows, 1.0);
        let x = r.vec(cols * n, 4.0);
        let wt = weight(be, &[cols, rows], &w);
        let mut y = be.alloc(n * rows + 3).expect("alloc");
        be.matmul(&wt, &up(be, &x), n, &mut y).expect("matmul");
        let (mut want, mut mag) = (Vec::new(), Vec::new());
        for t in 0..n {
            for rr in 0..rows {
                let (s, m) = dot(&w[rr * cols..(rr + 1) * cols], &x[t * cols..(t + 1) * cols]);
                want.push(s);
                mag.push(m);
            }
        }
        let case = format!("{cols}x{rows}, {n} tokens");
        close("matmul", &case, &down(be, &y, n * rows), &want, &mag, cols);
    }
}

fn mul_mat_id<B: Backend>(be: &B) {
    let mut r = Rng(3);
    let (cols, rows, slices, n, used) = (19, 6, 5, 4, 3);
    let w = r.vec(cols * rows * slices, 1.0);
    let wt = weight(be, &[cols, rows, slices], &w);
    let sel: Vec<u32> = (0..n * used).map(|_| r.below(slices) as u32).collect();
    for per_slot in [false, true] {
        let x_rows = if per_slot { n * used } else { n };
        let x = r.vec(x_rows * cols, 2.0);
        let mut y = be.alloc(n * used * rows).expect("alloc");
        be.mul_mat_id(&wt, &ids(be, &sel), used, &up(be, &x), per_slot, n, &mut y)
            .expect("mul_mat_id");
        let (mut want, mut mag) = (Vec::new(), Vec::new());
        for (i, &e) in sel.iter().enumerate() {
            let xr = if per_slot { i } else { i / used };
            for rr in 0..rows {
                let wr = &w[(e as usize * rows + rr) * cols..][..cols];
                let (s, m) = dot(wr, &x[xr * cols..(xr + 1) * cols]);
                want.push(s);
                mag.push(m);
            }
        }
        let case = format!("x per slot {per_slot}");
        close(
            "mul_mat_id",
            &case,
            &down(be, &y, n * used * rows),
            &want,
            &mag,
            cols,
        );
        // The per-head fusion point is the same product with ids = head index.
        if per_slot {
            let heads: Vec<u32> = (0..n * slices).map(|i| (i % slices) as u32).collect();
            let x = r.vec(n * slices * cols, 2.0);
            let mut y = be.alloc(n * slices * rows).expect("alloc");
            be.per_head_matmul(&wt, &ids(be, &heads), slices, &up(be, &x), n, &mut y)
                .expect("per_head_matmul");
            let (mut want, mut mag) = (Vec::new(), Vec::new());
            for (i, &h) in heads.iter().enumerate() {
                for rr in 0..rows {
                    let wr = &w[(h as usize * rows + rr) * cols..][..cols];
                    let (s, m) = dot(wr, &x[i * cols..(i + 1) * cols]);
                    want.push(s);
                    mag.push(m);
                }
            }
            let got = down(be, &y, n * slices * rows);
            close("per_head_matmul", "", &got, &want, &mag, cols);
        }
    }
}

/// The SwiGLU pieces a backend may fuse: `matmul_pair` / `mul_mat_id_planned_pair` (two
/// products of one x) and `matmul_glu` / `mul_mat_id_planned_glu` (silu(g)·u, then the
/// product), against f64 references; h is silu(g)·u.
fn swiglu_parts<B: Backend>(be: &B) {
    let mut r = Rng(21);
    let (cols, rows, slices, used) = (64, 11, 5, 3);
    for n in [1, 3] {
        let (wa, wb) = (r.vec(cols * rows, 1.0), r.vec(cols * rows, 1.0));
        let x = r.vec(n * cols, 2.0);
        let refs = |w: &[f32], x: &[f32], n: usize, e: &dyn Fn(usize) -> usize| {
            let (mut want, mut mag) = (Vec::new(), Vec::new());
            for p in 0..n {
                for rr in 0..rows {
                    let wr = &w[(e(p) * rows + rr) * cols..][..cols];
                    let (s, m) = dot(wr, &x[p * cols..(p + 1) * cols]);
                    want.push(s);
                    mag.push(m);
                }
            }
            (want, mag)
        };
        let case = format!("{n} tokens");
        // Dense: a pair, then the gated down projection of the two outputs.
        let (ta, tb) = (
            weight(be, &[cols, rows], &wa),
            weight(be, &[cols, rows], &wb),
        );
        let (mut ya, mut yb) = (be.alloc(n * rows).unwrap(), be.alloc(n * rows).unwrap());
        be.matmul_pair(&ta, &tb, &up(be, &x), n, &mut ya, &mut yb)
            .expect("matmul_pair");
        for (w, y) in [(&wa, &ya), (&wb, &yb)] {
            let (want, mag) = refs(w, &x, n, &|_| 0);
            close(
                "matmul_pair",
                &case,
                &down(be, y, n * rows),
                &want,
                &mag,
                cols,
            );
        }
        let (g, u) = (r.vec(n * cols, 3.0), r.vec(n * cols, 1.0));
        let hv: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| silu_f64(g, u) as f32)
            .collect();
        let (mut h, mut y) = (be.alloc(n * cols).unwrap(), be.alloc(n * rows).unwrap());
        be.matmul_glu(&ta, &up(be, &g), &up(be, &u), n, cols, &mut h, &mut y)
            .expect("matmul_glu");
        let want_h: Vec<f64> = hv.iter().map(|&v| v as f64).collect();
        let mag_h: Vec<f64> = want_h.iter().map(|v| v.abs()).collect();
        close(
            "matmul_glu h",
            &case,
            &down(be, &h, n * cols),
            &want_h,
            &mag_h,
            8,
        );
        let (want, mag) = refs(&wa, &hv, n, &|_| 0);
        close(
            "matmul_glu",
            &case,
            &down(be, &y, n * rows),
            &want,
            &mag,
            cols,
        );

        // Experts: the same over `used` slots a token.
        let (ea, eb) = (
            r.vec(cols * rows * slices, 1.0),
            r.vec(cols * rows * slices, 1.0),
        );
        let (ta, tb) = (
            weight(be, &[cols, rows, slices], &ea),
            weight(be, &[cols, rows, slices], &eb),
        );
        let sel: Vec<u32> = (0..n * used).map(|_| r.below(slices) as u32).collect();
        let sel_d = ids(be, &sel);
        let mut plan = be.alloc_ids(be.moe_plan_len(n, used, slices)).unwrap();
        be.moe_plan(&sel_d, n, used, slices, &mut plan).unwrap();
        let pairs = n * used;
        let (mut ya, mut yb) = (
            be.alloc(pairs * rows).unwrap(),
            be.alloc(pairs * rows).unwrap(),
        );
        be.mul_mat_id_planned_pair(
            &ta,
            &tb,
            &sel_d,
            &plan,
            used,
            &up(be, &x),
            false,
            n,
            &mut ya,
            &mut yb,
        )
        .expect("mul_mat_id_planned_pair");
        let x_of_pair: Vec<f32> = (0..pairs)
            .flat_map(|p| x[p / used * cols..][..cols].to_vec())
            .collect();
        for (w, y) in [(&ea, &ya), (&eb, &yb)] {
            let (want, mag) = refs(w, &x_of_pair, pairs, &|p| sel[p] as usize);
            close(
                "mul_mat_id_planned_pair",
                &case,
                &down(be, y, pairs * rows),
                &want,
                &mag,
                cols,
            );
        }
        let (g, u) = (r.vec(pairs * cols, 3.0), r.vec(pairs * cols, 1.0));
        let hv: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| silu_f64(g, u) as f32)
            .collect();
        let (mut h, mut y) = (
            be.alloc(pairs * cols).unwrap(),
            be.alloc(pairs * rows).unwrap(),
        );
        be.mul_mat_id_planned_glu(
            &ta,
            &sel_d,
            &plan,
            used,
            &up(be, &g),
            &up(be, &u),
            n,
            cols,
            &mut h,
            &mut y,
        )
        .expect("mul_mat_id_planned_glu");
        let want_h: Vec<f64> = hv.iter().map(|&v| v as f64).collect();
        let mag_h: Vec<f64> = want_h.iter().map(|v| v.abs()).collect();
        close(
            "mul_mat_id_planned_glu h",
            &case,
            &down(be, &h, pairs * cols),
            &want_h,
            &mag_h,
            8,
        );
        let (want, mag) = refs(&ea, &hv, pairs, &|p| sel[p] as usize);
        close(
            "mul_mat_id_planned_glu",
            &case,
            &down(be, &y, pairs * rows),
            &want,
            &mag,
            cols,
        );
    }
}

/// silu(g)·u in f64.
fn silu_f64(g: f32, u: f32) -> f64 {
    let g = g as f64;
    g / (1.0 + (-g).exp()) * u as f64
}

fn get_rows<B: Backend>(be: &B) {
    let mut r = Rng(4);
    let (cols, rows) = (13, 9);
    let w = r.vec(cols * rows, 5.0);
    let wt = weight(be, &[cols, rows], &w);
    let pick = [8u32, 0, 3, 3];
    let mut out = be.alloc(pick.len() * cols).expect("alloc");
    be.get_rows(&wt, &ids(be, &pick), pick.len(), &mut out)
        .expect("get_rows");
    let want: Vec<f32> = pick
        .iter()
        .flat_map(|&p| w[p as usize * cols..(p as usize + 1) * cols].to_vec())
        .collect();
    assert_eq!(down(be, &out, want.len()), want, "get_rows");
    // Out-of-range ids in device buffers are the caller's check (see `Backend`): a backend may
    // refuse them (the CPU does) or read zeros (a GPU cannot report one without a host sync);
    // either way it reads nothing outside the weight.
    if be.get_rows(&wt, &ids(be, &[9]), 1, &mut out).is_ok() {
        assert_eq!(
            down(be, &out, cols),
            vec![0.0; cols],
            "get_rows past the last row"
        );
    }
}

fn norms<B: Backend>(be: &B) {
    let mut r = Rng(5);
    // GLM-5's widths too (6144, 2048, 512, 128), which a backend may keep in registers.
    let cases = [
        (1, 1, 1.0),
        (3, 7, 1.0),
        (2, 64, 1e3),
        (4, 129, 1e-3),
        (2, 6144, 1.0),
        (3, 2048, 1.0),
        (2, 512, 1.0),
        (5, 128, 1.0),
    ];
    for &(rows, dim, scale) in &cases {
        let mut x = r.vec(rows * dim, scale);
        x[0] = 0.0;
        let g = r.vec(dim, 1.0);
        let b = r.vec(dim, 0.5);
        let eps = 1e-5;
        let mut y = be.alloc(rows * dim).expect("alloc");
        be.rms_norm(&up(be, &x), &up(be, &g), rows, dim, eps, &mut y)
            .expect("rms_norm");
        let (mut want, mut mag) = (Vec::new(), Vec::new());
        for row in x.chunks(dim) {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                want.push(v as f64 * inv * g[i] as f64);
                mag.push((v as f64 * inv * g[i] as f64).abs());
            }
        }
        let case = format!("{rows}x{dim} scale {scale}");
        close(
            "rms_norm",
            &case,
            &down(be, &y, rows * dim),
            &want,
            &mag,
            dim,
        );
        // The same norm prepared for a product that reads it (`rms_norm_for`; F32 here, which
        // no backend quantizes for: quant_types.rs covers the CUDA backend's fused kernel).
        let next = weight(be, &[dim, 3], &r.vec(dim * 3, 1.0));
        let mut y2 = be.alloc(rows * dim).expect("alloc");
        be.rms_norm_for(&up(be, &x), &up(be, &g), rows, dim, eps, &mut y2, &next)
            .expect("rms_norm_for");
        close(
            "rms_norm_for",
            &case,
            &down(be, &y2, rows * dim),
            &want,
            &mag,
            dim,
        );
        // add_rms_norm: h += d exactly as f32 adds, then the norm of the new h.
        let dx = r.vec(rows * dim, scale);
        let mut h = up(be, &x);
        be.add_rms_norm(&mut h, &up(be, &dx), &up(be, &g), rows, dim, eps, &mut y)
            .expect("add_rms_norm");
        let sum: Vec<f32> = x.iter().zip(&dx).map(|(a, b)| a + b).collect();
        assert_eq!(
            down(be, &h, rows * dim),
            sum,
            "add_rms_norm {case}: the sum"
        );
        let (mut want, mut mag) = (Vec::new(), Vec::new());
        for row in sum.chunks(dim) {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                want.push(v as f64 * inv * g[i] as f64);
                mag.push((v as f64 * inv * g[i] as f64).abs());
            }
        }
        close(
            "add_rms_norm",
            &case,
            &down(be, &y, rows * dim),
            &want,
            &mag,
            dim,
        );
        let mut h = up(be, &x);
        be.add_rms_norm_for(
            &mut h,
            &up(be, &dx),
            &up(be, &g),
            rows,
            dim,
            eps,
            &mut y2,
            &next,
        )
        .expect("add_rms_norm_for");
        assert_eq!(
            down(be, &h, rows * dim),
            sum,
            "add_rms_norm_for {case}: the sum"
        );
        close(
            "add_rms_norm_for",
            &case,
            &down(be, &y2, rows * dim),
            &want,
            &mag,
            dim,
        );
        be.layer_norm(
            &up(be, &x),
            &up(be, &g),
            &up(be, &b),
            rows,
            dim,
            eps,
            &mut y,
        )
        .expect("layer_norm");
        let (mut want, mut mag) = (Vec::new(), Vec::new());
        for row in x.chunks(dim) {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / dim as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            for (i, &v) in row.iter().enumerate() {
                let n = (v as f64 - mean) * inv * g[i] as f64;
                want.push(n + b[i] as f64);
                mag.push(n.abs() + (b[i] as f64).abs() + (mean * inv * g[i] as f64).abs());
            }
        }
        close(
            "layer_norm",
            &case,
            &down(be, &y, rows * dim),
            &want,
            &mag,
            dim,
        );
    }
}

fn rope<B: Backend>(be: &B) {
    let mut r = Rng(6);
    for mode in [RopeMode::Interleaved, RopeMode::Neox] {
        let (n, heads, head_dim, offset, n_rot) = (3, 2, 10, 4, 6);
        let x = r.vec(n * heads * head_dim, 2.0);
        let pos = [0u32, 5, 4000];
        let inv: Vec<f32> = (0..n_rot / 2)
            .map(|i| 10000f32.powf(-(2.0 * i as f32) / n_rot as f32))
            .collect();
        let attn_factor = 1.25;
        let mut b = up(be, &x);
        let p = RopeParams {
            n_tokens: n,
            n_heads: heads,
            head_dim,
            offset,
            n_rot,
            mode,
            attn_factor,
        };
        be.rope(&mut b, &ids(be, &pos), &up(be, &inv), &p)
            .expect("rope");
        let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let mut mag: Vec<f64> = x.iter().map(|&v| (v as f64).abs()).collect();
        for t in 0..n {
            for h in 0..heads {
                let base = (t * heads + h) * head_dim + offset;
                for i in 0..n_rot / 2 {
                    let (a, bb) = match mode {
                        RopeMode::Interleaved => (base + 2 * i, base + 2 * i + 1),
                        RopeMode::Neox => (base + i, base + i + n_rot / 2),
                    };
                    // The angle in f32, as the spec (and HF) computes it.
                    let ang = (pos[t] as f32 * inv[i]) as f64;
                    let (c, s) = (
                        ang.cos() * attn_factor as f64,
                        ang.sin() * attn_factor as f64,
                    );
                    let (x0, x1) = (x[a] as f64, x[bb] as f64);
                    want[a] = x0 * c - x1 * s;
                    want[bb] = x0 * s + x1 * c;
                    // cos/sin of a 4000-radian f32 angle carry ~2.4e-4 of absolute error.
                    let m = (x0.abs() + x1.abs()) * attn_factor as f64 * 64.0;
                    mag[a] = m;
                    mag[bb] = m;
                }
            }
        }
        let got = down(be, &b, x.len());
        close("rope", &format!("{mode:?}"), &got, &want, &mag, 2);
        // The same rotation with each head's first `cols` values copied out for a per-head
        // product (`rope_split_for`): the part before the rotated dims, and one reaching into
        // them, which the copy sees rotated.
        for cols in [offset, offset + 2] {
            let next = weight(be, &[cols, 3, heads], &r.vec(cols * 3 * heads, 1.0));
            let mut b = up(be, &x);
            let mut y = be.alloc(n * heads * cols).expect("alloc");
            be.rope_split_for(
                &mut b,
                &ids(be, &pos),
                &up(be, &inv),
                &p,
                cols,
                &mut y,
                &next,
            )
            .expect("rope_split_for");
            let case = format!("{mode:?}, {cols} columns copied");
            close(
                "rope_split_for",
                &case,
                &down(be, &b, x.len()),
                &want,
                &mag,
                2,
            );
            let row = |v: &[f64]| -> Vec<f64> {
                v.chunks(head_dim)
                    .flat_map(|h| h[..cols].to_vec())
                    .collect()
            };
            let got_y = down(be, &y, n * heads * cols);
            close(
                "rope_split_for y",
                &case,
                &got_y,
                &row(&want),
                &row(&mag),
                2,
            );
        }
    }
}

fn elementwise<B: Backend>(be: &B) {
    let mut r = Rng(7);
    let n = 101;
    let g = r.vec(n, 30.0);
    let u = r.vec(n, 2.0);
    let mut out = be.alloc(n).expect("alloc");
    be.silu_mul(&up(be, &g), &up(be, &u), n, &mut out)
        .expect("silu_mul");
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&a, &b)| a as f64 / (1.0 + (-(a as f64)).exp()) * b as f64)
        .collect();
    let mag: Vec<f64> = want.iter().map(|w| w.abs() * 4.0).collect();
    close("silu_mul", "", &down(be, &out, n), &want, &mag, 1);
    let mut a = up(be, &g);
    be.add(&mut a, &up(be, &u), n - 1).expect("add");
    let got = down(be, &a, n);
    for i in 0..n {
        let want = if i < n - 1 { g[i] + u[i] } else { g[i] };
        assert_eq!(got[i], want, "add element {i}");
    }
    be.scale(&mut a, -0.5, n).expect("scale");
    let scaled = down(be, &a, n);
    for i in 0..n {
        assert_eq!(scaled[i], got[i] * -0.5, "scale element {i}");
    }
    // copy2d: a 3 × 4 block between strided layouts.
    let src: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let mut dst = be.alloc(50).expect("alloc");
    be.copy2d(
        &up(be, &src),
        Rows::of(9).at(2),
        &mut dst,
        Rows::of(11).at(5),
        3,
        4,
    )
    .expect("copy2d");
    let got = down(be, &dst, 50);
    for (i, &v) in got.iter().enumerate() {
        let (rr, c) = (
            (i as isize - 5).div_euclid(11),
            (i as isize - 5).rem_euclid(11),
        );
        let want = if i >= 5 && rr < 3 && c < 4 {
            src[2 + rr as usize * 9 + c as usize]
        } else {
            0.0
        };
        assert_eq!(v, want, "copy2d element {i}");
    }
}

fn rows<B: Backend>(be: &B) {
    let mut r = Rng(8);
    let dim = 5;
    let src = r.vec(3 * dim, 1.0);
    let mut pool = be.alloc(8 * dim).expect("alloc");
    let slots = [6u32, 1, 7];
    be.set_rows(&up(be, &src), dim, &ids(be, &slots), 3, &mut pool)
        .expect("set_rows");
    let got = down(be, &pool, 8 * dim);
    for row in 0..8 {
        let want: Vec<f32> = match slots.iter().position(|&s| s as usize == row) {
            Some(i) => src[i * dim..(i + 1) * dim].to_vec(),
            None => vec![0.0; dim],
        };
        assert_eq!(
            &got[row * dim..(row + 1) * dim],
            &want[..],
            "set_rows row {row}"
        );
    }
    let pick = [7u32, 7, 6, 0];
    let mut out = be.alloc(4 * dim).expect("alloc");
    be.gather_rows(&pool, dim, &ids(be, &pick), 4, &mut out)
        .expect("gather_rows");
    let got = down(be, &out, 4 * dim);
    for (i, &p) in pick.iter().enumerate() {
        let want = &down(be, &pool, 8 * dim)[p as usize * dim..(p as usize + 1) * dim];
        assert_eq!(&got[i * dim..(i + 1) * dim], want, "gather_rows row {i}");
    }
}

fn cache_types<B: Backend>(be: &B) {
    let mut r = Rng(14);
    let dim = 19;
    let mut rows = r.vec(6 * dim, 3.0);
    rows[dim..2 * dim].fill(0.0); // an all-zero row (fp8 scale must not divide by zero)
    rows[2 * dim] = 1e5; // beyond f16's range in a row of small values
    rows[3 * dim + 1] = 1e-6;
    for ty in CacheType::ALL {
        let (c, want) = cache_of(be, &rows, dim, ty);
        let mut got = vec![0f32; rows.len()];
        be.cache_download(&c, &mut got).expect("cache_download");
        for i in 0..got.len() {
            let same = got[i] == want[i] || (got[i].is_nan() && want[i].is_nan());
            assert!(
                same,
                "cache {ty}: value {i}: stored {} read {} want {}",
                rows[i], got[i], want[i]
            );
        }
        // Scatter to arbitrary slots lands there.
        let mut c = be.alloc_cache(8, dim, ty).expect("alloc_cache");
        be.cache_set_rows(&up(be, &rows[..2 * dim]), &ids(be, &[7, 3]), 2, &mut c)
            .expect("cache_set_rows");
        let mut got = vec![0f32; 8 * dim];
        be.cache_download(&c, &mut got).expect("cache_download");
        assert_eq!(&got[7 * dim..8 * dim], &want[..dim], "cache {ty}: slot 7");
        assert_eq!(
            &got[..3 * dim],
            &vec![0.0; 3 * dim][..],
            "cache {ty}: untouched rows"
        );
        // A slot past the end is refused or skipped (see get_rows): nothing else changes.
        if be
            .cache_set_rows(&up(be, &rows[..dim]), &ids(be, &[8]), 1, &mut c)
            .is_ok()
        {
            let mut again = vec![0f32; 8 * dim];
            be.cache_download(&c, &mut again).expect("cache_download");
            assert_eq!(
                again, got,
                "cache {ty}: slot past the end changed the cache"
            );
        }
    }
}

/// The MLA cache-row op: the rows it leaves in `kv` against an f64 RMSNorm of the latent part
/// and RoPE of the rest, and each cache type holding exactly those rows rounded as `rounded`
/// says, at the slots given (the small widths and GLM-5's 512 + 64, both RoPE layouts).
fn mla_kv_rows<B: Backend>(be: &B) {
    let mut r = Rng(23);
    for (n, kv_lora, n_rot) in [(3usize, 40usize, 8usize), (2, 512, 64)] {
        let row = kv_lora + n_rot;
        for mode in [RopeMode::Interleaved, RopeMode::Neox] {
            let x = r.vec(n * row, 2.0);
            let g: Vec<f32> = r.vec(kv_lora, 0.5).iter().map(|v| 1.0 + v).collect();
            let inv = inv_freq_ref(n_rot);
            let pos = [3u32, 1000, 77][..n].to_vec();
            let (eps, attn_factor) = (1e-6f32, 1.25f32);
            let p = RopeParams {
                n_tokens: n,
                n_heads: 1,
                head_dim: row,
                offset: kv_lora,
                n_rot,
                mode,
                attn_factor,
            };
            // f64 reference of the finished rows.
            let (mut want, mut mag) = (Vec::new(), Vec::new());
            for (t, xr) in x.chunks(row).enumerate() {
                let ms = xr[..kv_lora]
                    .iter()
                    .map(|&v| (v as f64).powi(2))
                    .sum::<f64>()
                    / kv_lora as f64;
                let s = 1.0 / (ms + eps as f64).sqrt();
                for i in 0..kv_lora {
                    want.push(xr[i] as f64 * s * g[i] as f64);
                    mag.push(want.last().unwrap().abs());
                }
                let mut tail: Vec<f64> = xr[kv_lora..].iter().map(|&v| v as f64).collect();
                rope_ref(&mut tail, 0, n_rot, mode, pos[t], &inv, attn_factor);
                for (i, v) in tail.into_iter().enumerate() {
                    want.push(v);
                    mag.push((xr[kv_lora + i] as f64).abs() * attn_factor as f64 * 2.0);
                }
            }
            for ty in CacheType::ALL {
                let mut kv = up(be, &x);
                let mut c = be.alloc_cache(n + 5, row, ty).expect("alloc_cache");
                let slots: Vec<u32> = (0..n as u32).map(|i| 4 + i).rev().collect();
                let mut s0 = be.alloc(n * kv_lora).expect("alloc");
                let mut s1 = be.alloc(n * kv_lora).expect("alloc");
                be.mla_kv_rows(
                    &mut kv,
                    &up(be, &g),
                    eps,
                    kv_lora,
                    &p,
                    &ids(be, &pos),
                    &up(be, &inv),
                    &ids(be, &slots),
                    &mut c,
                    [&mut s0, &mut s1],
                )
                .expect("mla_kv_rows");
                let got = down(be, &kv, n * row);
                let case = format!("{n}x{kv_lora}+{n_rot} {mode:?} cache {ty}");
                close("mla_kv_rows", &case, &got, &want, &mag, kv_lora);
                let mut cached = vec![0f32; (n + 5) * row];
                be.cache_download(&c, &mut cached).expect("cache_download");
                assert!(
                    cache_holds(&cached, &got, &slots, row, ty),
                    "mla_kv_rows {case}: the cache does not hold the finished rows, rounded, at {slots:?}"
                );
            }
        }
    }
}

/// The indexer's key-row op: `out` against an f64 LayerNorm then RoPE of the first `n_rot`
/// dims, and each cache type holding exactly `out`'s rows rounded (`rounded`) at the slots
/// (GLM-5's 128 with 64 rotated, and a small width, both RoPE layouts).
fn indexer_k_rows<B: Backend>(be: &B) {
    let mut r = Rng(29);
    for (n, dim, n_rot) in [(3usize, 12usize, 4usize), (2, 128, 64)] {
        for mode in [RopeMode::Interleaved, RopeMode::Neox] {
            let x = r.vec(n * dim, 2.0);
            let g: Vec<f32> = r.vec(dim, 0.5).iter().map(|v| 1.0 + v).collect();
            let bias = r.vec(dim, 0.3);
            let inv = inv_freq_ref(n_rot);
            let pos = [9u32, 4096, 31][..n].to_vec();
            let (eps, attn_factor) = (1e-6f32, 1.0f32);
            let p = RopeParams {
                n_tokens: n,
                n_heads: 1,
                head_dim: dim,
                offset: 0,
                n_rot,
                mode,
                attn_factor,
            };
            let (mut want, mut mag) = (Vec::new(), Vec::new());
            for (t, xr) in x.chunks(dim).enumerate() {
                let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / dim as f64;
                let var = xr.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / dim as f64;
                let s = 1.0 / (var + eps as f64).sqrt();
                let mut row: Vec<f64> = (0..dim)
                    .map(|i| (xr[i] as f64 - mean) * s * g[i] as f64 + bias[i] as f64)
                    .collect();
                let m: Vec<f64> = (0..dim)
                    .map(|i| {
                        ((xr[i] as f64 - mean) * s * g[i] as f64).abs() + (bias[i] as f64).abs()
                    })
                    .collect();
                rope_ref(&mut row, 0, n_rot, mode, pos[t], &inv, attn_factor);
                // A rotated pair mixes both values: each bounded by their magnitudes' sum.
                let mut rm = m.clone();
                for i in 0..n_rot / 2 {
                    let (a, b) = match mode {
                        RopeMode::Interleaved => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + n_rot / 2),
                    };
                    rm[a] = m[a] + m[b];
                    rm[b] = m[a] + m[b];
                }
                want.extend(row);
                mag.extend(rm);
            }
            for ty in CacheType::ALL {
                let mut c = be.alloc_cache(n + 4, dim, ty).expect("alloc_cache");
                let slots: Vec<u32> = (0..n as u32).map(|i| 2 * i + 1).collect();
                let mut out = be.alloc(n * dim).expect("alloc");
                be.indexer_k_rows(
                    &up(be, &x),
                    &up(be, &g),
                    &up(be, &bias),
                    eps,
                    &p,
                    &ids(be, &pos),
                    &up(be, &inv),
                    &ids(be, &slots),
                    &mut c,
                    &mut out,
                )
                .expect("indexer_k_rows");
                let got = down(be, &out, n * dim);
                let case = format!("{n}x{dim} rot {n_rot} {mode:?} cache {ty}");
                close("indexer_k_rows", &case, &got, &want, &mag, dim);
                let mut cached = vec![0f32; (n + 4) * dim];
                be.cache_download(&c, &mut cached).expect("cache_download");
                assert!(
                    cache_holds(&cached, &got, &slots, dim, ty),
                    "indexer_k_rows {case}: the cache does not hold the rows, rounded, at {slots:?}"
                );
            }
        }
    }
}

/// Reference routing (DeepSeek-V3 `noaux_tc`): gate, bias for selection only, groups scored by
/// their two best biased scores, best groups kept, top-k, weights from unbiased scores.
fn route_ref(logits: &[f32], bias: &[f32], p: &RouterParams) -> (Vec<usize>, Vec<f64>) {
    let n = p.n_expert;
    let score: Vec<f64> = match p.gating {
        Gating::Sigmoid => logits
            .iter()
            .map(|&l| 1.0 / (1.0 + (-(l as f64)).exp()))
            .collect(),
        Gating::Softmax => {
            let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
            let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - m).exp()).collect();
            let z: f64 = e.iter().sum();
            e.iter().map(|v| v / z).collect()
        }
    };
    let mut sel: Vec<f64> = (0..n).map(|i| score[i] + bias[i] as f64).collect();
    let per = n / p.n_group;
    if p.n_group > 1 && p.n_group_used < p.n_group {
        let mut gs: Vec<(f64, usize)> = (0..p.n_group)
            .map(|g| {
                let mut v: Vec<f64> = sel[g * per..(g + 1) * per].to_vec();
                v.sort_by(|a, b| b.partial_cmp(a).unwrap());
                (v.iter().take(2).sum(), g)
            })
            .collect();
        gs.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        for &(_, g) in &gs[p.n_group_used..] {
            sel[g * per..(g + 1) * per].fill(f64::NEG_INFINITY);
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| sel[b].partial_cmp(&sel[a]).unwrap().then(a.cmp(&b)));
    let chosen: Vec<usize> = order[..p.n_used].to_vec();
    let mut w: Vec<f64> = chosen.iter().map(|&i| score[i]).collect();
    if p.normalize {
        let s: f64 = w.iter().sum();
        w.iter_mut().for_each(|v| *v /= s);
    }
    w.iter_mut().for_each(|v| *v *= p.scale as f64);
    (chosen, w)
}

fn moe_route<B: Backend>(be: &B) {
    let mut r = Rng(9);
    let n = 5;
    for (gating, n_expert, n_group, n_group_used, n_used) in [
        (Gating::Sigmoid, 16, 4, 2, 4),
        (Gating::Softmax, 10, 1, 1, 3),
        (Gating::Sigmoid, 12, 3, 3, 2),
        // GLM-5's shape (the CUDA kernel's register path: up to 256 experts), and one past it
        // (the kernel's shared-memory path).
        (Gating::Sigmoid, 256, 1, 1, 8),
        (Gating::Softmax, 300, 1, 1, 6),
    ] {
        let p = RouterParams {
            n_expert,
            n_used,
            gating,
            n_group,
            n_group_used,
            normalize: gating == Gating::Sigmoid,
            scale: 2.5,
        };
        let logits = r.vec(n * n_expert, 3.0);
        let bias = r.vec(n_expert, 0.5);
        let mut sel = be.alloc_ids(n * n_used).expect("alloc_ids");
        let mut w = be.alloc(n * n_used).expect("alloc");
        be.moe_route(
            &up(be, &logits),
            Some(&up(be, &bias)),
            n,
            &p,
            &mut sel,
            &mut w,
        )
        .expect("moe_route");
        let (got_ids, got_w) = (down_ids(be, &sel, n * n_used), down(be, &w, n * n_used));
        for t in 0..n {
            let (want_ids, want_w) =
                route_ref(&logits[t * n_expert..(t + 1) * n_expert], &bias, &p);
            // Order of the chosen experts is not part of the contract; pair ids with weights.
            let mut got: Vec<(u32, f32)> = (0..n_used)
                .map(|k| (got_ids[t * n_used + k], got_w[t * n_used + k]))
                .collect();
            got.sort_by_key(|g| g.0);
            let mut want: Vec<(usize, f64)> = want_ids.into_iter().zip(want_w).collect();
            want.sort_by_key(|w| w.0);
            let case = format!("{gating:?} {n_expert} experts, token {t}");
            let gi: Vec<usize> = got.iter().map(|g| g.0 as usize).collect();
            let wi: Vec<usize> = want.iter().map(|w| w.0).collect();
            assert_eq!(gi, wi, "moe_route {case}: experts");
            let gw: Vec<f32> = got.iter().map(|g| g.1).collect();
            let ww: Vec<f64> = want.iter().map(|w| w.1).collect();
            let mag: Vec<f64> = ww.iter().map(|w| w.abs() * 4.0).collect();
            close("moe_route", &case, &gw, &ww, &mag, n_expert);
        }
    }
}

fn moe_combine<B: Backend>(be: &B) {
    let mut r = Rng(10);
    let (n, k, dim) = (3, 4, 9);
    let y = r.vec(n * k * dim, 2.0);
    let w = r.vec(n * k, 1.0);
    let mut out = be.alloc(n * dim).expect("alloc");
    be.moe_combine(&up(be, &y), &up(be, &w), n, k, dim, &mut out)
        .expect("moe_combine");
    let (mut want, mut mag) = (Vec::new(), Vec::new());
    for t in 0..n {
        for j in 0..dim {
            let terms: Vec<f64> = (0..k)
                .map(|s| w[t * k + s] as f64 * y[(t * k + s) * dim + j] as f64)
                .collect();
            want.push(terms.iter().sum());
            mag.push(terms.iter().map(|v| v.abs()).sum());
        }
    }
    close("moe_combine", "", &down(be, &out, n * dim), &want, &mag, k);
    // With the shared expert's output added: the combine's sum, then the addend.
    let s = r.vec(n * dim, 3.0);
    let mut out = be.alloc(n * dim).expect("alloc");
    be.moe_combine_add(&up(be, &y), &up(be, &w), n, k, dim, &up(be, &s), &mut out)
        .expect("moe_combine_add");
    for (i, v) in want.iter_mut().enumerate() {
        *v += s[i] as f64;
        mag[i] += (s[i] as f64).abs();
    }
    let got = down(be, &out, n * dim);
    close("moe_combine_add", "", &got, &want, &mag, k + 1);
}

/// Expert parallelism's id remap: held experts become local ids with their weight, the
/// others local expert 0 with weight 0; entries past `n × k` are untouched.
fn moe_local_experts<B: Backend>(be: &B) {
    let mut r = Rng(11);
    let (n, k, n_expert, first, count) = (5, 3, 16u32, 4u32, 4u32);
    let ids: Vec<u32> = (0..n * k + 2)
        .map(|i| (i as u32 * 7 + 3) % n_expert)
        .collect();
    let w = r.vec(n * k + 2, 1.0);
    let mut d_ids = be.upload_ids(&ids).expect("upload_ids");
    let mut d_w = up(be, &w);
    be.moe_local_experts(&mut d_ids, &mut d_w, n, k, first, count)
        .expect("moe_local_experts");
    let (got_ids, got_w) = (down_ids(be, &d_ids, n * k + 2), down(be, &d_w, n * k + 2));
    for i in 0..n * k + 2 {
        let held = i < n * k && (first..first + count).contains(&ids[i]);
        let (want_id, want_w) = match () {
            _ if i >= n * k => (ids[i], w[i]),
            _ if held => (ids[i] - first, w[i]),
            _ => (0, 0.0),
        };
        assert_eq!(
            (got_ids[i], got_w[i]),
            (want_id, want_w),
            "moe_local_experts entry {i}"
        );
    }
}

/// The set of the `k` largest of `v`, ties to the lower index.
fn top_set(v: &[f32], k: usize) -> Vec<u32> {
    let mut o: Vec<usize> = (0..v.len()).collect();
    o.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    let mut s: Vec<u32> = o[..k].iter().map(|&i| i as u32).collect();
    s.sort();
    s
}

fn top_k<B: Backend>(be: &B) {
    let mut r = Rng(11);
    let (rows, n, k) = (4, 37, 6);
    let mut x = r.vec(rows * n, 1.0);
    // Edge rows: ties (ties go to the lower index), −∞ tails, a row of zeros.
    for v in &mut x[n..2 * n] {
        *v = (*v * 3.0).round();
    }
    for v in &mut x[2 * n + 4..3 * n] {
        *v = f32::NEG_INFINITY;
    }
    x[3 * n..4 * n].fill(0.0);
    let mut out = be.alloc_ids(rows * k).expect("alloc_ids");
    be.top_k(&up(be, &x), rows, n, k, &mut out).expect("top_k");
    let got = down_ids(be, &out, rows * k);
    for row in 0..rows {
        let mut g = got[row * k..(row + 1) * k].to_vec();
        g.sort();
        assert_eq!(g, top_set(&x[row * n..(row + 1) * n], k), "top_k row {row}");
    }
}

/// GLM-5's widths: 2048 of 16384 and of 4096 keys (rows that fit a GPU block's shared memory)
/// and of 70000 (one that does not), the scores crowded as the indexer's are (ReLU-weighted sums:
/// most in a few binades, a run of exact zeros) and rounded so the threshold falls among ties.
fn top_k_wide<B: Backend>(be: &B) {
    let mut r = Rng(13);
    // 4096 keys: 48 KiB of keys and histograms, which with the kernel's own shared memory
    // passes the limit a launch has without opting in.
    for (rows, n) in [(2, 16384), (1, 4096), (1, 70000)] {
        let k = 2048;
        let x: Vec<f32> = (0..rows * n)
            .map(|i| match i % 7 {
                0 => 0.0,
                _ => (((r.next() + 1.0) * 1.5).powi(2) * 256.0).round() / 256.0,
            })
            .collect();
        let mut out = be.alloc_ids(rows * k).expect("alloc_ids");
        be.top_k(&up(be, &x), rows, n, k, &mut out).expect("top_k");
        let got = down_ids(be, &out, rows * k);
        for row in 0..rows {
            let mut g = got[row * k..(row + 1) * k].to_vec();
            g.sort();
            assert_eq!(
                g,
                top_set(&x[row * n..(row + 1) * n], k),
                "top_k {n} wide, row {row}"
            );
        }
    }
}

/// A pool of `n_blocks` blocks of `bs` rows and, per sequence, a block table drawn without
/// replacement in a scrambled order (so rows of one sequence are scattered over the pool).
fn scattered_tables(r: &mut Rng, n_seqs: usize, max_blocks: usize, n_blocks: usize) -> Vec<u32> {
    let mut free: Vec<u32> = (0..n_blocks as u32).collect();
    let mut t = Vec::new();
    for _ in 0..n_seqs * max_blocks {
        let i = r.below(free.len());
        t.push(free.swap_remove(i));
    }
    t
}

fn pool_row(tables: &[u32], max_blocks: usize, bs: usize, seq: usize, t: usize) -> usize {
    tables[seq * max_blocks + t / bs] as usize * bs + t % bs
}

fn indexer<B: Backend>(be: &B) {
    let mut r = Rng(12);
    // Tokens: two of sequence 0, three of sequence 1, at various positions.
    let token_seq = [0u32, 1, 0, 1, 1];
    // Tiny widths, then GLM-5's (32 heads × 128, the widths the CPU's q8 scan has a SIMD
    // kernel for) over blocks of 16 keys, with runs of keys that start and end inside blocks.
    for (bs, max_blocks, n_blocks, hi, d, pos, n_kv) in [
        (4, 5, 16, 3, 8, [3u32, 19, 12, 0, 7], 20),
        (16, 20, 48, 32, 128, [70, 300, 5, 130, 17], 301),
    ] {
        let tables = scattered_tables(&mut r, 2, max_blocks, n_blocks);
        let keys = r.vec(n_blocks * bs * d, 1.0);
        let n = pos.len();
        let q = r.vec(n * hi * d, 1.0);
        let w = r.vec(n * hi, 1.0);
        for ty in CacheType::ALL {
            indexer_with(
                be,
                ty,
                &tables,
                &keys,
                &q,
                &w,
                &token_seq,
                &pos,
                (bs, max_blocks, hi, d, n_kv, 4),
            );
        }
    }
    // A decode step's width, where a GPU's top-k spreads a row over a cluster of blocks (and the
    // tensor-core scores of 16-bit and fp8 keys count its first radix level): 2,048 of 12,000
    // keys for one token of each of two sequences, one seeing every key and one 9,001 (the rest
    // −∞, keys like any other to the top-k). Two key types: the reference is slow.
    let (bs, max_blocks, hi, d, n_kv) = (64, 188, 32, 128, 12000);
    let tables = scattered_tables(&mut r, 2, max_blocks, 2 * max_blocks);
    let keys = r.vec(2 * max_blocks * bs * d, 1.0);
    let (q, w) = (r.vec(2 * hi * d, 1.0), r.vec(2 * hi, 1.0));
    for ty in [CacheType::Bf16, CacheType::Fp8] {
        let shape = (bs, max_blocks, hi, d, n_kv, 2048);
        indexer_with(
            be,
            ty,
            &tables,
            &keys,
            &q,
            &w,
            &[0, 1],
            &[11999, 9000],
            shape,
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn indexer_with<B: Backend>(
    be: &B,
    ty: CacheType,
    tables: &[u32],
    keys: &[f32],
    q: &[f32],
    w: &[f32],
    token_seq: &[u32],
    pos: &[u32],
    (bs, max_blocks, hi, d, n_kv, k): (usize, usize, usize, usize, usize, usize),
) {
    let n = pos.len();
    let (tb, ts, pb) = (ids(be, tables), ids(be, token_seq), ids(be, pos));
    let pages = Pages {
        tables: &tb,
        token_seq: &ts,
        max_blocks,
        block_size: bs,
    };
    // A weight scale that rounds (not a power of two): the backend must multiply as f32 first.
    let p = IndexerParams {
        n_tokens: n,
        n_heads: hi,
        head_dim: d,
        n_kv,
        w_scale: 0.3,
    };
    let w_eff: Vec<f32> = w.iter().map(|&v| v * p.w_scale).collect();
    let (kb, keys) = cache_of(be, keys, d, ty);
    let (qb, wb) = (up(be, q), up(be, w));
    let mut out = be.alloc(n * n_kv).expect("alloc");
    be.indexer_scores(&qb, &wb, &kb, &pb, &pages, &p, &mut out)
        .expect("indexer_scores");
    let got = down(be, &out, n * n_kv);
    let q_amax: Vec<f64> = q
        .chunks(d)
        .map(|qj| qj.iter().fold(0f64, |a, &x| a.max((x as f64).abs())))
        .collect();
    let mut want = Vec::new();
    for s in 0..n {
        let seq = token_seq[s] as usize;
        for t in 0..n_kv {
            if t > pos[s] as usize {
                assert_eq!(
                    got[s * n_kv + t],
                    f32::NEG_INFINITY,
                    "indexer token {s} key {t}"
                );
                continue;
            }
            let row = pool_row(tables, max_blocks, bs, seq, t);
            let k = &keys[row * d..(row + 1) * d];
            let ksum: f64 = k.iter().map(|&x| (x as f64).abs()).sum();
            let (mut v, mut m, mut quant) = (0.0, 0.0, 0.0);
            for j in 0..hi {
                let qj = &q[(s * hi + j) * d..][..d];
                let (dd, dm) = dot(qj, k);
                v += w_eff[s * hi + j] as f64 * dd.max(0.0);
                m += (w_eff[s * hi + j] as f64).abs() * dm;
                // A q8 key pool may score with the query rounded per head as well (the CPU
                // does, to ±31 steps): each element moves by at most half a step, max|q| / 62,
                // so the dot by at most that times Σ|k| (ReLU does not widen it).
                let two_qmax = 2.0 * glint_quant::dot::INDEXER_QUERY_MAX as f64;
                quant += (w_eff[s * hi + j] as f64).abs() * q_amax[s * hi + j] / two_qmax * ksum;
            }
            want.push((s, t, v, m, quant));
        }
    }
    for &(s, t, v, m, quant) in &want {
        let g = got[s * n_kv + t];
        if ty == CacheType::Q8 {
            // Bound: the query's rounding plus the f32 steps' (each within 2⁻²⁴ of |terms|).
            let lim = quant * (1.0 + 1e-6) + 1e-5 * (m + v.abs()) + 1e-30;
            assert!(
                (g as f64 - v).abs() <= lim,
                "indexer_scores {ty:?} token {s} key {t}: got {g}, want {v} (bound {lim:.3e})"
            );
            continue;
        }
        // 16-bit and fp8 key pools may score with the query rounded to a 16-bit float (CUDA's
        // tensor-core kernel: bf16 for bf16 keys, f16 for f16 and fp8 ones): each |q·k| term
        // moves by at most that format's unit roundoff, on top of the f32 steps' bound.
        let round = match ty {
            CacheType::Bf16 => 2f64.powi(-8),
            CacheType::F16 | CacheType::Fp8 => 2f64.powi(-11),
            _ => 0.0,
        };
        let tol = 4e-6 * (1.0 + (d * hi) as f64 / 64.0);
        let lim = round * m + tol * (m + v.abs()) + 1e-30;
        assert!(
            (g as f64 - v).abs() <= lim,
            "indexer_scores {ty:?} token {s} key {t}: got {g}, want {v} (bound {lim:.3e})"
        );
    }
    // indexer_select: the top-k set of the visible keys by score.
    let mut scratch = be.alloc(be.indexer_scratch_len(n, n_kv)).expect("alloc");
    let mut sel = be.alloc_ids(n * k).expect("alloc_ids");
    be.indexer_select(&qb, &wb, &kb, &pb, &pages, &p, k, &mut scratch, &mut sel)
        .expect("indexer_select");
    let got_sel = down_ids(be, &sel, n * k);
    for s in 0..n {
        let nk = pos[s] as usize + 1;
        if nk <= k {
            continue; // fewer visible keys than k: which invisible ones fill the rest is free.
        }
        let mut g: Vec<u32> = got_sel[s * k..(s + 1) * k].to_vec();
        g.sort();
        assert_eq!(
            g,
            top_set(&got[s * n_kv..s * n_kv + nk], k),
            "indexer_select token {s}"
        );
    }
}

/// One paged-attention setup for [`attention_case`]: the pool, the sequences' block tables, the
/// query tokens and their selections (`n_sel` logical keys per token).
struct AttnCase {
    name: &'static str,
    bs: usize,
    max_blocks: usize,
    n_blocks: usize,
    tables: Vec<u32>,
    h: usize,
    dk: usize,
    dv: usize,
    token_seq: Vec<u32>,
    pos: Vec<u32>,
    n_kv: usize,
    n_sel: usize,
    sel: Vec<u32>,
    q_scale: f32,
    scale: f32,
}

fn attention<B: Backend>(be: &B) {
    let mut r = Rng(13);
    let (bs, max_blocks, n_blocks) = (3, 6, 14);
    let tables = scattered_tables(&mut r, 2, max_blocks, n_blocks);
    let pos = vec![16u32, 0, 5, 9];
    // Selections: logical keys, some past the token's position (those are ignored).
    let sel = pos
        .iter()
        .flat_map(|&p| [p, p / 2, p.saturating_sub(1), p + 3])
        .collect();
    let small = AttnCase {
        name: "small",
        bs,
        max_blocks,
        n_blocks,
        tables,
        h: 3,
        dk: 11,
        dv: 7,
        token_seq: vec![1, 0, 1, 0],
        pos,
        n_kv: 17,
        n_sel: 4,
        sel,
        q_scale: 1.5,
        scale: 0.3,
    };
    attention_case(be, &mut r, &small);

    // GLM-5's latent widths (17 heads: the CUDA backend's groups of at most 16 come out uneven)
    // and a key capacity far above the live keys, as in a step recorded for a larger key
    // bucket. A backend that splits the key list by capacity (CUDA) then has chunks past a
    // token's keys, several live chunks for the 301-key token and, with the selection (25 keys
    // past the position at its end), a chunk whose keys are all masked.
    let (bs, max_blocks) = (16, 256);
    let live = [3usize, 19]; // blocks sequences 0 and 1 fill
    let n_blocks = live.iter().sum::<usize>() + 2;
    let mut tables = vec![0u32; 2 * max_blocks];
    let mut free: Vec<u32> = (0..n_blocks as u32).collect();
    for (seq, &nb) in live.iter().enumerate() {
        for b in 0..nb {
            tables[seq * max_blocks + b] = free.swap_remove(r.below(free.len()));
        }
    }
    let pos = vec![2u32, 300, 47];
    let n_sel = 100;
    let sel = pos
        .iter()
        .flat_map(|&p| {
            let mut visible: Vec<u32> = (0..=p).collect();
            let mut pick = Vec::new();
            while pick.len() < 75 && !visible.is_empty() {
                pick.push(visible.swap_remove(r.below(visible.len())));
            }
            let past = (0..n_sel - pick.len()).map(move |i| p + 1 + 37 * i as u32);
            pick.into_iter().chain(past).collect::<Vec<u32>>()
        })
        .collect();
    let wide = AttnCase {
        name: "glm-5 widths, capacity 4096",
        bs,
        max_blocks,
        n_blocks,
        tables,
        h: 17,
        dk: 576,
        dv: 512,
        token_seq: vec![0, 1, 0],
        pos,
        n_kv: bs * max_blocks,
        n_sel,
        sel,
        q_scale: 1.0,
        scale: 0.1,
    };
    attention_case(be, &mut r, &wide);
}

/// `mla_attention` on `c` for every cache type, with and without the selection, against an f64
/// softmax. Tolerance, worst case for any summation order or split of the keys: an f32 logit is
/// off by at most about `dk·2⁻²⁴·S` (`S`: the head's largest `scale·Σ_i|q_i·k_i|`), which moves
/// each softmax weight by at most twice that, relatively; the weights' sum and the output's sum
/// over `n` keys add `n·2⁻²⁴` each. An output element is so within about
/// `2·max(dk, n)·2⁻²⁴·(1 + S)·Σ_t|p_t·v_t|`, which [`close`] over `max(dk, n)` terms allows with
/// the magnitude `(1 + 2S)·Σ_t|p_t·v_t|` (its `|want|` adds at most one more `Σ_t|p_t·v_t|`).
/// f16 and bf16 caches also allow the query and the weights rounded to the cache's type.
fn attention_case<B: Backend>(be: &B, r: &mut Rng, c: &AttnCase) {
    let (h, dk, dv, bs) = (c.h, c.dk, c.dv, c.bs);
    let n = c.pos.len();
    let pool = r.vec(c.n_blocks * bs * dk, 1.0);
    let q = r.vec(n * h * dk, c.q_scale);
    let (tb, ts, pb) = (ids(be, &c.tables), ids(be, &c.token_seq), ids(be, &c.pos));
    let pages = Pages {
        tables: &tb,
        token_seq: &ts,
        max_blocks: c.max_blocks,
        block_size: bs,
    };
    let selb = ids(be, &c.sel);
    let qb = up(be, &q);
    for ty in CacheType::ALL {
        let (cache, pool) = cache_of(be, &pool, dk, ty);
        for selected in [false, true] {
            let p = AttnParams {
                n_tokens: n,
                n_heads: h,
                dk,
                dv,
                n_kv: c.n_kv,
                n_selected: if selected { c.n_sel } else { 0 },
                scale: c.scale,
            };
            let mut out = be.alloc(n * h * dv).expect("alloc");
            be.mla_attention(
                &qb,
                &cache,
                &pb,
                &pages,
                selected.then_some(&selb),
                &p,
                &mut out,
            )
            .expect("mla_attention");
            let got = down(be, &out, n * h * dv);
            let case = format!(
                "{}, {ty:?} cache, {}",
                c.name,
                if selected {
                    "selected keys"
                } else {
                    "every visible key"
                }
            );
            // The query in absorbed MLA's two parts (`mla_attention_parts`): the latent part
            // alone, the rope part inside wider rows at an offset (16-byte aligned as a
            // projected query's, and not): the result of the assembled query, bit for bit.
            let dr = dk - dv;
            let lat: Vec<f32> = q.chunks(dk).flat_map(|r| r[..dv].to_vec()).collect();
            for (stride, off) in [(dr + 8, 4), (dr + 3, 1)] {
                let mut pe = vec![f32::NAN; n * h * stride];
                for (row, qr) in q.chunks(dk).enumerate() {
                    pe[row * stride + off..][..dr].copy_from_slice(&qr[dv..]);
                }
                let mut scratch = be.alloc(n * h * dk).expect("alloc");
                let mut out2 = be.alloc(n * h * dv).expect("alloc");
                be.mla_attention_parts(
                    &up(be, &lat),
                    &up(be, &pe),
                    Rows::of(stride).at(off),
                    &mut scratch,
                    &cache,
                    &pb,
                    &pages,
                    selected.then_some(&selb),
                    &p,
                    &mut out2,
                )
                .expect("mla_attention_parts");
                let got2 = down(be, &out2, n * h * dv);
                for (i, (a, b)) in got2.iter().zip(&got).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "mla_attention_parts {case}, rope rows {stride}/{off}: output {i}: {a} vs {b}"
                    );
                }
            }
            for s in 0..n {
                let seq = c.token_seq[s] as usize;
                let nk = (c.pos[s] as usize + 1).min(c.n_kv);
                let mut keys: Vec<usize> = if selected && nk > c.n_sel {
                    let mut k: Vec<usize> = c.sel[s * c.n_sel..(s + 1) * c.n_sel]
                        .iter()
                        .map(|&t| t as usize)
                        .filter(|&t| t < nk)
                        .collect();
                    k.dedup();
                    k
                } else {
                    (0..nk).collect()
                };
                keys.sort();
                let rows: Vec<&[f32]> = keys
                    .iter()
                    .map(|&t| {
                        let row = pool_row(&c.tables, c.max_blocks, bs, seq, t);
                        &pool[row * dk..(row + 1) * dk]
                    })
                    .collect();
                let (mut want, mut mag, mut extra) = (Vec::new(), Vec::new(), Vec::new());
                // A 16-bit cache may be read with the query and the softmax weights rounded to
                // its type (CUDA's tensor-core kernel, as FlashMLA): each logit moves by at most
                // u·S, each weight relatively by expm1(2u·S), and rounding a weight by u more.
                let u = match ty {
                    CacheType::F16 => 2f64.powi(-11),
                    CacheType::Bf16 => 2f64.powi(-8),
                    _ => 0.0,
                };
                for hh in 0..h {
                    let qh = &q[(s * h + hh) * dk..][..dk];
                    let (logits, sizes): (Vec<f64>, Vec<f64>) = rows
                        .iter()
                        .map(|k| {
                            let (d, m) = dot(qh, k);
                            (d * c.scale as f64, m * c.scale as f64)
                        })
                        .unzip();
                    let big = sizes.iter().fold(0.0, |a: f64, &b| a.max(b));
                    let m = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for j in 0..dv {
                        let (mut o, mut om) = (0.0, 0.0);
                        for (k, &pe) in rows.iter().zip(&e) {
                            let v = k[j] as f64 * pe / z;
                            o += v;
                            om += v.abs();
                        }
                        want.push(o);
                        mag.push(om * (1.0 + 2.0 * big));
                        extra.push(1.01 * (u + (2.0 * u * big).exp_m1()) * om);
                    }
                }
                let tol = 4e-6 * (1.0 + dk.max(keys.len()) as f64 / 64.0);
                let g = &got[s * h * dv..(s + 1) * h * dv];
                for i in 0..want.len() {
                    let lim = tol * (mag[i] + want[i].abs()) + extra[i] + 1e-30;
                    assert!(
                        (g[i] as f64 - want[i]).abs() <= lim,
                        "mla_attention {case}, token {s}: element {i}: got {}, want {} (bound {lim:.3e})",
                        g[i],
                        want[i]
                    );
                }
            }
        }
    }
}
