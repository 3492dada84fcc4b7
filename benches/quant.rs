//! Quantized matvec throughput, in GB/s of weight bytes, next to candle-core's `QMatMul` on the
//! same weights and a streaming-read bandwidth probe over a buffer of the same size, at 1 and 2
//! threads (dedicated rayon pools).
//!
//! `GLINT_BENCH_BATCH` above 1 benchmarks the batched product instead (prefill, batched decode:
//! activation rows x weights), in multiply-adds per second next to candle's on the same batch.
//!
//! `cargo bench --bench quant`; environment knobs (defaults in brackets):
//! `GLINT_BENCH_SIZES` [`4096x4096,32768x8192`] rows x cols, `GLINT_BENCH_TYPES`
//! [`Q4_K,Q6_K,Q8_0,IQ2_XXS,IQ4_XS`], `GLINT_BENCH_THREADS` [`1,2`], `GLINT_BENCH_SECS` [`3`],
//! `GLINT_BENCH_BATCH` [`1`] (comma-separated batch sizes).
//! Weights are random valid blocks (random quant bits, finite f16 scales), not quantized floats:
//! the kernels' speed does not depend on the values and this keeps 256M-element setups fast.

use std::time::Duration;

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QMatMul};
use candle_core::{Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use glint_gguf::GgmlType;
use glint_quant::{matmul, MatmulScratch, QWeight};
use rayon::prelude::*;

fn env_list(key: &str, default: &str) -> Vec<String> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn sizes() -> Vec<(usize, usize)> {
    env_list("GLINT_BENCH_SIZES", "4096x4096,32768x8192")
        .iter()
        .map(|s| {
            let (r, c) = s
                .split_once('x')
                .expect("GLINT_BENCH_SIZES entries look like 4096x4096");
            (r.parse().expect("rows"), c.parse().expect("cols"))
        })
        .collect()
}

/// Byte offsets of the f16 scales in one block of the benchmarked types.
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q3_K => &[108],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        _ => &[0],
    }
}

fn random_weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let row_bytes = ty
        .row_bytes(cols as u64)
        .expect("cols must be whole blocks") as usize;
    let mut w = vec![0u8; rows * row_bytes];
    let bs = ty.type_size();
    w.par_chunks_mut(row_bytes)
        .enumerate()
        .for_each(|(r, row)| {
            let mut s = (r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for b in row.iter_mut() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *b = (s >> 24) as u8;
            }
            for blk in row.chunks_exact_mut(bs) {
                if ty == GgmlType::MXFP4 {
                    // An E8M0 byte: 2^-9 .. 2^-7 (half-scale convention), as quantized weights
                    // have. Uniform random bytes made a twentieth of the blocks' products
                    // subnormal, and the microcode assists halved this type's measured speed.
                    blk[0] = 119 + blk[0] % 3;
                    continue;
                }
                for &o in scale_offsets(ty) {
                    // 2^-8 .. 2^-6 with random sign and mantissa: finite, moderate.
                    let bits = 0x1c00 | (blk[o] as u16 & 0x83ff) | ((blk[o + 1] as u16 & 1) << 10);
                    blk[o..o + 2].copy_from_slice(&bits.to_le_bytes());
                }
            }
        });
    w
}

fn candle_dtype(ty: GgmlType) -> Option<GgmlDType> {
    Some(match ty {
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q2_K => GgmlDType::Q2K,
        GgmlType::Q3_K => GgmlDType::Q3K,
        GgmlType::Q4_K => GgmlDType::Q4K,
        GgmlType::Q5_K => GgmlDType::Q5K,
        GgmlType::Q6_K => GgmlDType::Q6K,
        _ => return None,
    })
}

/// Streaming read of `buf`, split into one contiguous part per pool thread: the practical
/// bandwidth ceiling a matvec that reads every weight byte once could reach.
fn probe(buf: &[u64], threads: usize) -> u64 {
    buf.par_chunks(buf.len().div_ceil(threads))
        .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
        .reduce(|| 0, u64::wrapping_add)
}

fn bench(c: &mut Criterion) {
    let secs: u64 = std::env::var("GLINT_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let threads: Vec<usize> = env_list("GLINT_BENCH_THREADS", "1,2")
        .iter()
        .map(|s| s.parse().expect("threads"))
        .collect();
    let types: Vec<GgmlType> = env_list("GLINT_BENCH_TYPES", "Q4_K,Q6_K,Q8_0,IQ2_XXS,IQ4_XS")
        .iter()
        .map(|s| GgmlType::from_name(s).unwrap_or_else(|| panic!("unknown type {s}")))
        .collect();
    let pools: Vec<rayon::ThreadPool> = threads
        .iter()
        .map(|&t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .expect("thread pool")
        })
        .collect();
    let batches: Vec<usize> = env_list("GLINT_BENCH_BATCH", "1")
        .iter()
        .map(|s| s.parse().expect("batch"))
        .collect();
    eprintln!("kernel family: {:?}", glint_quant::dot::isa());
    for (rows, cols) in sizes() {
        for &batch in batches.iter().filter(|&&b| b > 1) {
            batched(c, (rows, cols), batch, &types, &pools, &threads, secs);
        }
        if !batches.contains(&1) {
            continue;
        }
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let max_bytes = types
            .iter()
            .map(|t| rows * t.row_bytes(cols as u64).unwrap() as usize)
            .max()
            .unwrap_or(0);
        let probe_buf: Vec<u64> = (0..max_bytes.div_ceil(8) as u64)
            .into_par_iter()
            .map(|i| i ^ 0x5555)
            .collect();
        for &ty in &types {
            let w = random_weights(ty, rows, cols);
            let qw = QWeight::new(ty, cols, rows, &w).expect("weights");
            let candle = candle_dtype(ty).map(|dt| {
                let qt = qtensor_from_ggml(dt, &w, vec![rows, cols], &Device::Cpu)
                    .expect("candle qtensor");
                let qm = QMatMul::from_qtensor(qt).expect("candle qmatmul");
                (
                    qm,
                    Tensor::from_vec(x.clone(), (1, cols), &Device::Cpu).expect("tensor"),
                )
            });
            let mut group = c.benchmark_group(format!("matvec_{rows}x{cols}_{ty}"));
            group.throughput(Throughput::Bytes(w.len() as u64));
            group.sample_size(10);
            group.warm_up_time(Duration::from_millis(700));
            group.measurement_time(Duration::from_secs(secs));
            let mut y = vec![0f32; rows];
            let mut scratch = MatmulScratch::new();
            let pb = &probe_buf[..w.len() / 8];
            for (pool, &t) in pools.iter().zip(&threads) {
                group.bench_function(BenchmarkId::new("glint", t), |b| {
                    b.iter(|| {
                        pool.install(|| matmul(&qw, &x, 1, &mut y, &mut scratch))
                            .expect("matmul")
                    })
                });
                if let Some((qm, xt)) = &candle {
                    group.bench_function(BenchmarkId::new("candle", t), |b| {
                        b.iter(|| pool.install(|| qm.forward(xt)).expect("candle forward"))
                    });
                }
                group.bench_function(BenchmarkId::new("probe", t), |b| {
                    b.iter(|| pool.install(|| probe(pb, t)))
                });
            }
            group.finish();
        }
    }
}

/// Batch `batch` through `rows x cols` weights of each type: glint's matmul and candle's, in
/// multiply-adds (rows x cols x batch) per second.
fn batched(
    c: &mut Criterion,
    (rows, cols): (usize, usize),
    batch: usize,
    types: &[GgmlType],
    pools: &[rayon::ThreadPool],
    threads: &[usize],
    secs: u64,
) {
    let x: Vec<f32> = (0..batch * cols)
        .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    for &ty in types {
        let w = random_weights(ty, rows, cols);
        let qw = QWeight::new(ty, cols, rows, &w).expect("weights");
        let candle = candle_dtype(ty).map(|dt| {
            let qt =
                qtensor_from_ggml(dt, &w, vec![rows, cols], &Device::Cpu).expect("candle qtensor");
            let qm = QMatMul::from_qtensor(qt).expect("candle qmatmul");
            let xt = Tensor::from_vec(x.clone(), (batch, cols), &Device::Cpu).expect("tensor");
            (qm, xt)
        });
        let mut group = c.benchmark_group(format!("matmul_{rows}x{cols}_{ty}_b{batch}"));
        group.throughput(Throughput::Elements((rows * cols * batch) as u64));
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(700));
        group.measurement_time(Duration::from_secs(secs));
        let mut y = vec![0f32; rows * batch];
        let mut scratch = MatmulScratch::new();
        for (pool, &t) in pools.iter().zip(threads) {
            group.bench_function(BenchmarkId::new("glint", t), |b| {
                b.iter(|| {
                    pool.install(|| matmul(&qw, &x, batch, &mut y, &mut scratch))
                        .expect("matmul")
                })
            });
            if let Some((qm, xt)) = &candle {
                group.bench_function(BenchmarkId::new("candle", t), |b| {
                    b.iter(|| pool.install(|| qm.forward(xt)).expect("candle forward"))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
