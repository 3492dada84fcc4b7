//! One GLM-5 decode step's attention side versus context length, next to the time to stream one
//! MoE layer's active Q4_K weights, on a dedicated rayon pool (2 threads, like decode).
//!
//! Why: the CPU mission asks for decode flat with context. Weight streaming is a fixed cost per
//! layer; the attention side (DSA indexer scan over every cached key + top-k + sparse MLA over the
//! selected keys) grows with context. Measuring both in one run gives the attention share of the
//! step and how the step time moves from 1k to 64k context.
//!
//! `cargo bench --bench decode_attention`; environment knobs (defaults in brackets):
//! `GLINT_BENCH_CTX` [`1024,4096,16384,65536`] cached keys per step, `GLINT_BENCH_THREADS` [`2`],
//! `GLINT_BENCH_SECS` [`2`] criterion measurement time per benchmark, `GLINT_BENCH_INDEX_CACHE`
//! [`f32`] the indexer keys' cache type (`q8` makes the scan integer).
//!
//! Shapes are GLM-5's: 64 heads, absorbed query 64 × 576 (kv_lora 512 + rope 64) over a
//! 576-wide latent cache row, value = the first 512; indexer 32 heads × 128, top_k 2048.
//! Buffers are random f32; weights are random valid Q4_K blocks (speed does not depend on values).
//! As in the model (`glint_mla::layer`), a step with `n_kv ≤ top_k` skips the indexer and attends
//! densely (dense is exact there). A summary table (medians of the criterion samples) goes to
//! stderr at the end.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use glint_core::{AttnParams, Backend, CacheType, CpuBackend, IndexerParams, Pages};
use glint_gguf::GgmlType;
use glint_quant::{matmul, MatmulScratch, QWeight};
use rayon::prelude::*;

const N_HEADS: usize = 64;
const KV_LORA: usize = 512;
const ROPE: usize = 64;
const DK: usize = KV_LORA + ROPE;
const IDX_HEADS: usize = 32;
const IDX_DIM: usize = 128;
const TOP_K: usize = 2048;
/// Softmax scale of GLM-5's q·k (qk_nope 192 + rope 64 = 256 per head).
const SCALE: f32 = 0.0625;
const SAMPLE_SIZE: usize = 10;

/// One MoE layer's active matrices at batch 1, `(name, rows, cols, count)`: attention
/// projections, indexer projections, and 9 experts (8 routed + 1 shared).
const LAYER: &[(&str, usize, usize, usize)] = &[
    ("attn_q_a", 2048, 6144, 1),
    ("attn_q_b", 16384, 2048, 1),
    ("attn_kv_a", 576, 6144, 1),
    ("attn_output", 6144, 16384, 1),
    ("indexer_q_b", 4096, 2048, 1),
    ("indexer_k", 128, 6144, 1),
    ("ffn_gate", 2048, 6144, 9),
    ("ffn_up", 2048, 6144, 9),
    ("ffn_down", 6144, 2048, 9),
];

/// Per-iteration nanoseconds of every criterion sample, by benchmark name, for the summary.
static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

fn env_list(key: &str, default: &str) -> Vec<usize> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{key}: bad entry {s:?}"))
        })
        .collect()
}

fn median_ms(name: &str) -> Option<f64> {
    let map = SAMPLES.lock().expect("samples lock");
    // Criterion's warm-up calls come first; the last `SAMPLE_SIZE` entries are the samples.
    let all = map.get(name)?;
    let mut v = all[all.len().saturating_sub(SAMPLE_SIZE)..].to_vec();
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2] / 1e6)
}

/// Times `f` through criterion and records each sample's per-iteration time under `name`.
fn timed(c: &mut Criterion, secs: u64, name: &str, mut f: impl FnMut()) {
    let mut g = c.benchmark_group("decode_attention");
    g.sample_size(SAMPLE_SIZE);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(secs));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            let e = t.elapsed();
            SAMPLES
                .lock()
                .expect("samples lock")
                .entry(name.to_string())
                .or_default()
                .push(e.as_nanos() as f64 / iters as f64);
            e
        })
    });
    g.finish();
}

fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// Uniform values in [-1, 1), filled in parallel so 150 MB caches set up quickly.
fn random_f32(len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0f32; len];
    v.par_chunks_mut(4096).enumerate().for_each(|(i, c)| {
        let mut r = xorshift(seed ^ (i as u64 + 1));
        for x in c {
            *x = (r() >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        }
    });
    v
}

/// Random valid Q4_K rows: random quant bits, f16 `d`/`dmin` forced finite and moderate.
fn random_q4k(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let ty = GgmlType::Q4_K;
    let rb = ty.row_bytes(cols as u64).expect("whole Q4_K blocks") as usize;
    let bs = ty.type_size();
    let mut w = vec![0u8; rows * rb];
    w.par_chunks_mut(rb).enumerate().for_each(|(r, row)| {
        let mut rng = xorshift(seed ^ (r as u64 + 1));
        for b in row.iter_mut() {
            *b = (rng() >> 24) as u8;
        }
        for blk in row.chunks_exact_mut(bs) {
            for o in [0, 2] {
                let bits = 0x1c00 | (blk[o] as u16 & 0x83ff) | ((blk[o + 1] as u16 & 1) << 10);
                blk[o..o + 2].copy_from_slice(&bits.to_le_bytes());
            }
        }
    });
    w
}

fn bench(c: &mut Criterion) {
    let secs = env_list("GLINT_BENCH_SECS", "2")[0] as u64;
    let threads = env_list("GLINT_BENCH_THREADS", "2")[0];
    let ctxs = env_list("GLINT_BENCH_CTX", "1024,4096,16384,65536");
    let index_ty: CacheType = std::env::var("GLINT_BENCH_INDEX_CACHE")
        .unwrap_or_else(|_| "f32".into())
        .parse()
        .unwrap_or_else(|e| panic!("GLINT_BENCH_INDEX_CACHE: {e}"));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let be = CpuBackend::new();

    // ---- weight streaming: one layer's active Q4_K matrices, batch 1 ------------------------
    let blobs: Vec<(usize, usize, Vec<u8>)> = LAYER
        .iter()
        .enumerate()
        .flat_map(|(i, &(_, rows, cols, count))| {
            (0..count).map(move |e| (rows, cols, (i * 16 + e) as u64))
        })
        .map(|(rows, cols, seed)| (rows, cols, random_q4k(rows, cols, seed)))
        .collect();
    let weight_bytes: usize = blobs.iter().map(|b| b.2.len()).sum();
    let mats: Vec<QWeight> = blobs
        .iter()
        .map(|(rows, cols, w)| QWeight::new(GgmlType::Q4_K, *cols, *rows, w).expect("weights"))
        .collect();
    let mut bufs: Vec<(Vec<f32>, Vec<f32>)> = mats
        .iter()
        .enumerate()
        .map(|(i, m)| (random_f32(m.cols, 1000 + i as u64), vec![0f32; m.rows]))
        .collect();
    let mut scratch = MatmulScratch::new();
    timed(c, secs, "weights_q4k_layer", || {
        pool.install(|| {
            for (m, (x, y)) in mats.iter().zip(bufs.iter_mut()) {
                matmul(m, x, 1, y, &mut scratch).expect("matmul");
            }
        })
    });
    // Streaming-read ceiling over the same number of bytes (a u64 sum, one contiguous part per
    // thread), so the weight time can be read as a fraction of what the memory system gives.
    let probe: Vec<u64> = (0..weight_bytes.div_ceil(8) as u64)
        .into_par_iter()
        .map(|i| i ^ 0x5555)
        .collect();
    timed(c, secs, "probe_same_bytes", || {
        let s = pool.install(|| {
            probe
                .par_chunks(probe.len().div_ceil(threads))
                .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
                .reduce(|| 0, u64::wrapping_add)
        });
        std::hint::black_box(s);
    });
    drop(probe);
    drop(mats);
    drop(blobs);

    // ---- attention side per context -----------------------------------------------------------
    let q = random_f32(N_HEADS * DK, 1);
    let iq = random_f32(IDX_HEADS * IDX_DIM, 2);
    let iw: Vec<f32> = random_f32(IDX_HEADS, 3)
        .iter()
        .map(|w| w / ((IDX_HEADS * IDX_DIM) as f32).sqrt())
        .collect();
    let mut out = vec![0f32; N_HEADS * KV_LORA];
    for &n_kv in &ctxs {
        let as_cache = |rows: Vec<f32>, dim: usize, ty: CacheType| {
            let n = rows.len() / dim;
            let mut c = be.alloc_cache(n, dim, ty).expect("alloc_cache");
            let slots: Vec<u32> = (0..n as u32).collect();
            be.cache_set_rows(&rows, &slots, n, &mut c)
                .expect("cache_set_rows");
            c
        };
        let cache = as_cache(random_f32(n_kv * DK, 10 + n_kv as u64), DK, CacheType::F32);
        let keys = as_cache(
            random_f32(n_kv * IDX_DIM, 20 + n_kv as u64),
            IDX_DIM,
            index_ty,
        );
        let pos = vec![(n_kv - 1) as u32];
        // One sequence whose blocks are consecutive, as a fresh pool hands them out.
        let block_size = 64;
        let tables: Vec<u32> = (0..n_kv.div_ceil(block_size) as u32).collect();
        let token_seq = vec![0u32];
        let pages = Pages {
            tables: &tables,
            token_seq: &token_seq,
            max_blocks: tables.len(),
            block_size,
        };
        let mut scores = vec![0f32; n_kv];
        let mut sel = vec![0u32; TOP_K];
        let attn = |n_selected| AttnParams {
            n_tokens: 1,
            n_heads: N_HEADS,
            dk: DK,
            dv: KV_LORA,
            n_kv,
            n_selected,
            scale: SCALE,
        };
        if n_kv > TOP_K {
            let ip = IndexerParams {
                n_tokens: 1,
                n_heads: IDX_HEADS,
                head_dim: IDX_DIM,
                n_kv,
                w_scale: 1.0 / ((IDX_HEADS * IDX_DIM) as f32).sqrt(),
            };
            timed(c, secs, &format!("indexer/{n_kv}"), || {
                pool.install(|| {
                    be.indexer_scores(&iq, &iw, &keys, &pos, &pages, &ip, &mut scores)
                        .expect("indexer_scores")
                })
            });
            timed(c, secs, &format!("top_k/{n_kv}"), || {
                pool.install(|| be.top_k(&scores, 1, n_kv, TOP_K, &mut sel).expect("top_k"))
            });
            timed(c, secs, &format!("sparse/{n_kv}"), || {
                pool.install(|| {
                    be.mla_attention(&q, &cache, &pos, &pages, Some(&sel), &attn(TOP_K), &mut out)
                        .expect("sparse mla_attention")
                })
            });
        }
        timed(c, secs, &format!("dense/{n_kv}"), || {
            pool.install(|| {
                be.mla_attention(&q, &cache, &pos, &pages, None, &attn(0), &mut out)
                    .expect("dense mla_attention")
            })
        });
    }

    summary(&ctxs, weight_bytes, threads, index_ty);
}

fn summary(ctxs: &[usize], weight_bytes: usize, threads: usize, index_ty: CacheType) {
    let wms = median_ms("weights_q4k_layer").unwrap_or(f64::NAN);
    let pms = median_ms("probe_same_bytes").unwrap_or(f64::NAN);
    eprintln!(
        "\nGLM-5 decode step per layer, {threads} threads, {index_ty} indexer keys; Q4_K active \
         weights {:.1} MB \
         streamed in {wms:.2} ms ({:.1} GB/s); streaming probe over the same bytes {pms:.2} ms \
         ({:.1} GB/s); weights / probe {:.0}%",
        weight_bytes as f64 / 1e6,
        weight_bytes as f64 / wms / 1e6,
        weight_bytes as f64 / pms / 1e6,
        100.0 * pms / wms
    );
    eprintln!(
        "| n_kv | indexer scores ms | top_k ms | sparse attn ms | attention side ms | dense attn ms \
         | weights ms | attention share | step ms | step vs first |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|---|");
    let mut first = None;
    for &n in ctxs {
        let dense = median_ms(&format!("dense/{n}")).unwrap_or(f64::NAN);
        let get = |k: &str| median_ms(&format!("{k}/{n}")).unwrap_or(f64::NAN);
        let (idx, topk, sparse) = if n > TOP_K {
            (get("indexer"), get("top_k"), get("sparse"))
        } else {
            (0.0, 0.0, dense)
        };
        let attn = idx + topk + sparse;
        let step = attn + wms;
        let base = *first.get_or_insert(step);
        let (idx_cell, topk_cell) = if n > TOP_K {
            (format!("{idx:.2}"), format!("{topk:.2}"))
        } else {
            ("skipped".to_string(), "skipped".to_string())
        };
        eprintln!(
            "| {n} | {idx_cell} | {topk_cell} | {sparse:.2} | {attn:.2} | {dense:.2} | {wms:.2} | {:.0}% \
             | {step:.2} | {:.2}x |",
            100.0 * attn / step,
            step / base
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
