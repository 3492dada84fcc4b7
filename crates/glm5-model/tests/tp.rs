//! Tensor parallelism on the CPU: every sharded tensor's shards reassemble to the file's
//! tensor, and TP = 2 and 4 (tensor- and expert-parallel MoE) give TP = 1's logits and greedy
//! tokens on the transformers fixtures (glm-dsa with its indexer; deepseek2 with the legacy
//! fused `attn_kv_b`), with every rank holding the same logits.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{
    case, fixture_dir, ids_of, logit_range, max_abs_diff, read_npy_f32, reference, write_deepseek2,
    write_fused_gate_up,
};
use glint_gguf::Gguf;
use glint_tp::{Communicator, LocalComm, ShardError, Split};
use glm5_model::shard::split_of;
use glm5_model::{CpuBackend, Glm5, Model, ModelError, SessionOptions};

/// Shard `rank` of every tensor-parallel tensor reassembled by coordinates: each block-unit of
/// each shard is written to the place the split says it came from, every place exactly once.
fn reassemble_and_compare(g: &Gguf, world: usize, ep: bool) -> usize {
    let mut n_split = 0;
    for t in g.tensors() {
        let split = split_of(&t.name, ep);
        let Split::Axis { axis, groups } = split else {
            continue;
        };
        let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        let full = g.tensor_data(t);
        let (block, unit) = (t.ty.block_size(), t.ty.type_size());
        // The tensor as units: [ne2][ne1][ne0 / block] of `unit` bytes.
        let d3 = [
            dims[0] / block,
            dims.get(1).copied().unwrap_or(1),
            dims.get(2).copied().unwrap_or(1),
        ];
        let len = dims.get(axis).copied().unwrap_or(1);
        let part = len / groups / world;
        let cuts: Vec<_> = (0..world)
            .map(|r| glint_tp::cut(&t.name, t.ty, &dims, full, split, r, world))
            .collect();
        if axis == 0 && !part.is_multiple_of(block) {
            // A quantized row cut inside a block must be refused, naming the tensor.
            for c in &cuts {
                let e = c.as_ref().unwrap_err();
                assert!(matches!(e, ShardError::Block { .. }), "{}: {e}", t.name);
                assert!(e.to_string().contains(&t.name));
            }
            continue;
        }
        n_split += 1;
        let mut rebuilt = vec![0u8; full.len()];
        let mut written = vec![0u8; full.len() / unit];
        let part_units = if axis == 0 { part / block } else { part };
        let run_units = part_units * world;
        for (r, c) in cuts.iter().enumerate() {
            let c = c.as_ref().unwrap_or_else(|e| panic!("{e}"));
            let mut l3 = d3;
            l3[axis] = part_units * groups;
            assert_eq!(
                c.bytes.len(),
                l3.iter().product::<usize>() * unit,
                "{}",
                t.name
            );
            for i2 in 0..l3[2] {
                for i1 in 0..l3[1] {
                    for i0 in 0..l3[0] {
                        let mut f = [i0, i1, i2];
                        let (g_, j) = (f[axis] / part_units, f[axis] % part_units);
                        f[axis] = g_ * run_units + r * part_units + j;
                        let src = ((i2 * l3[1] + i1) * l3[0] + i0) * unit;
                        let dst_u = (f[2] * d3[1] + f[1]) * d3[0] + f[0];
                        rebuilt[dst_u * unit..(dst_u + 1) * unit]
                            .copy_from_slice(&c.bytes[src..src + unit]);
                        written[dst_u] += 1;
                    }
                }
            }
        }
        assert!(written.iter().all(|&w| w == 1), "{}: coverage", t.name);
        assert!(rebuilt == full, "{}: shards do not reassemble", t.name);
    }
    n_split
}

fn deepseek2_file(dir: &Path, fused: bool) -> std::path::PathBuf {
    let src = Gguf::open(fixture_dir().join("glm5-tiny-topk2048-f32.gguf")).unwrap();
    let path = dir.join(if fused { "ds2-fused.gguf" } else { "ds2.gguf" });
    write_deepseek2(&src, &path, fused);
    path
}

/// The glm-dsa fixture with each layer's expert gate and up fused (`ffn_gate_up_exps`).
fn fused_gate_up_file(dir: &Path) -> std::path::PathBuf {
    let src = Gguf::open(fixture_dir().join("glm5-tiny-f32.gguf")).unwrap();
    let path = dir.join("fused-gate-up.gguf");
    assert!(write_fused_gate_up(&src, &path) >= 3);
    path
}

#[test]
fn shards_reassemble_to_the_full_tensors() {
    let d = fixture_dir();
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        d.join("glm5-tiny-f32.gguf"),
        d.join("llamacpp/glm5-tiny-lc-q8_0.gguf"),
        d.join("llamacpp/glm5-tiny-lc-q4_0.gguf"),
        deepseek2_file(tmp.path(), false),
        deepseek2_file(tmp.path(), true),
        fused_gate_up_file(tmp.path()),
    ];
    for f in &files {
        let g = Gguf::open(f).unwrap();
        let fused = g.tensor("blk.0.attn_kv_b.weight").is_some();
        for world in [2, 4] {
            for ep in [false, true] {
                let n = reassemble_and_compare(&g, world, ep);
                // Per layer at least q_b (or kv_b), output; the head.
                assert!(n > 4, "{}: only {n} split tensors", f.display());
                if fused {
                    assert!(split_of("blk.0.attn_kv_b.weight", ep) == Split::ROWS);
                }
            }
        }
    }
}

/// Logits of `ids` (every position) from `world` rank threads, one per rank; also checks
/// every rank returned the same logits bit for bit.
fn tp_logits(path: &Path, world: usize, ep: bool, ids: &[u32], ubatch: usize) -> Vec<f32> {
    let g = Gguf::open(path).unwrap();
    let mut opts = SessionOptions::new(512);
    opts.ubatch = ubatch;
    if world == 1 {
        // The reference: the plain model, no communicator at all.
        let mut m = Glm5::new(Model::load(&g, CpuBackend::new()).unwrap(), opts).unwrap();
        return m.forward(ids, 0).unwrap();
    }
    let comms = LocalComm::group(world, Duration::from_secs(60));
    let outs: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let g = &g;
                s.spawn(move || {
                    let comm: Arc<dyn Communicator<CpuBackend>> = Arc::new(c);
                    let model = Model::load_tp(g, CpuBackend::new(), comm, ep).unwrap();
                    let mut m = Glm5::new(model, opts).unwrap();
                    m.forward(ids, 0).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, o) in outs.iter().enumerate().skip(1) {
        assert!(o == &outs[0], "rank {r}'s logits differ from rank 0's");
    }
    outs.into_iter().next().unwrap()
}

/// Greedy tokens from `world` rank threads: each rank runs the same loop on its identical
/// logits (so they agree without a broadcast); returns rank 0's.
fn tp_greedy(path: &Path, world: usize, ep: bool, prompt: &[u32], n_new: usize) -> Vec<u32> {
    let g = Gguf::open(path).unwrap();
    let comms = LocalComm::group(world, Duration::from_secs(60));
    let outs: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let g = &g;
                s.spawn(move || {
                    let comm: Arc<dyn Communicator<CpuBackend>> = Arc::new(c);
                    let model = Model::load_tp(g, CpuBackend::new(), comm, ep).unwrap();
                    let mut m = Glm5::new(model, SessionOptions::new(256)).unwrap();
                    let mut out = Vec::new();
                    let mut logits = m.forward_last(prompt, 0).unwrap();
                    for _ in 0..n_new {
                        let t = common::argmax(&logits) as u32;
                        out.push(t);
                        logits = m.forward_last(&[t], m.cache_len()).unwrap();
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        outs.iter().all(|o| o == &outs[0]),
        "ranks disagree: {outs:?}"
    );
    outs.into_iter().next().unwrap()
}

/// Measured against TP = 1 (medium, logit range 34): 1.07e-5 to 1.39e-5 on glm-dsa, 6.2e-6 to
/// 6.7e-6 on deepseek2. Only the summation order of the split products differs (each rank's
/// partial dot product, then the sum over ranks in rank order, instead of one dot product):
/// ~4 ulps of a logit of 34 (f32's ulp there is 3.8e-6). 1e-5 absolute is below what any
/// reordering of f32 sums can promise at this logit range, so the bound is 2e-5.
const TP_BOUND: f32 = 2e-5;

/// TP = 1 vs 2 and 4 (TP and EP) on one file and prompt; returns the TP = 1 logits.
fn check_tp(path: &Path, ids: &[u32], what: &str) -> Vec<f32> {
    // Chunked prefill (ubatch 64) so several steps run, as in generation.
    let one = tp_logits(path, 1, false, ids, 64);
    for world in [2, 4] {
        for ep in [false, true] {
            let got = tp_logits(path, world, ep, ids, 64);
            let err = max_abs_diff(&got, &one);
            eprintln!("{what}: TP={world} ep={ep}: max |Δlogit| vs TP=1 {err:.2e}");
            // Only the summation order of the split products differs (partial sums added in
            // rank order instead of one dot product).
            assert!(err <= TP_BOUND, "{what}: TP={world} ep={ep}: {err}");
        }
    }
    one
}

#[test]
fn glm_dsa_tp_matches_tp1_and_transformers() {
    let reference = reference();
    let case = case(&reference, "medium");
    let ids = ids_of(&case["ids"]);
    let path = fixture_dir().join("glm5-tiny-f32.gguf");
    let one = check_tp(&path, &ids, "glm-dsa medium");
    // And TP = 1 is the model the other tests check against transformers.
    let (_, want) = read_npy_f32(&fixture_dir().join(case["logits_file"].as_str().unwrap()));
    let err = max_abs_diff(&one, &want);
    eprintln!(
        "TP=1 vs transformers {err:.2e} (range {:.1})",
        logit_range(&want)
    );
    assert!(err <= 1e-3, "{err}");
}

/// One rank with a communicator runs every collective (an all-reduce of itself, a gather of
/// its whole vocabulary) and must change nothing: bit-identical to the plain model, in prefill
/// and in decode steps. The same check runs with NCCL on a GPU (`--features cuda`).
fn world_one_is_the_plain_model<B: glint_core::Backend + 'static>(
    backend: impl Fn() -> B,
    comm: impl Fn(&B) -> Arc<dyn Communicator<B>>,
) {
    let reference = reference();
    let ids = ids_of(&case(&reference, "medium")["ids"]);
    let g = Gguf::open(fixture_dir().join("glm5-tiny-f32.gguf")).unwrap();
    let mut opts = SessionOptions::new(256);
    opts.ubatch = 64;
    let mut plain = Glm5::new(Model::load(&g, backend()).unwrap(), opts).unwrap();
    let be = backend();
    let c = comm(&be);
    let mut m = Glm5::new(Model::load_tp(&g, be, c, false).unwrap(), opts).unwrap();
    assert!(m.forward(&ids, 0).unwrap() == plain.forward(&ids, 0).unwrap());
    plain.reset();
    m.reset();
    let (a, b) = (
        plain.forward_last(&ids[..20], 0),
        m.forward_last(&ids[..20], 0),
    );
    assert!(a.unwrap() == b.unwrap());
    for t in [5u32, 7, 11, 13] {
        let x = plain.forward_last(&[t], plain.cache_len()).unwrap();
        let y = m.forward_last(&[t], m.cache_len()).unwrap();
        assert!(x == y, "decode token {t}");
    }
}

/// `world_one::cpu` with the in-process communicator; `world_one::cuda` with NCCL on device 0
/// (scripts/cuda-tests.sh runs the `::cuda` tests).
mod world_one {
    use super::*;

    #[test]
    fn cpu() {
        world_one_is_the_plain_model(CpuBackend::new, |_| {
            Arc::new(LocalComm::group(1, Duration::from_secs(10)).remove(0))
        });
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda() {
        use glint_cuda::CudaBackend;
        world_one_is_the_plain_model(
            || CudaBackend::new(0).expect("CUDA device 0"),
            |be| {
                let id = glint_tp::NcclComm::unique_id().expect("NCCL unique id");
                Arc::new(glint_tp::NcclComm::new(be, 0, 1, id).expect("NCCL communicator"))
            },
        );
    }
}

#[test]
fn deepseek2_fused_kv_b_tp_matches_tp1() {
    let reference = reference();
    let ids = ids_of(&case(&reference, "short")["ids"]);
    let tmp = tempfile::tempdir().unwrap();
    check_tp(
        &deepseek2_file(tmp.path(), true),
        &ids,
        "deepseek2 fused kv_b",
    );
}

#[test]
fn fused_gate_up_experts_tp_matches_tp1() {
    // Each rank must take its rows of the gate AND of the up half of every expert.
    let reference = reference();
    let ids = ids_of(&case(&reference, "short")["ids"]);
    let tmp = tempfile::tempdir().unwrap();
    check_tp(
        &fused_gate_up_file(tmp.path()),
        &ids,
        "fused ffn_gate_up_exps",
    );
}

#[test]
fn greedy_tokens_are_the_same_at_every_world_size() {
    let reference = reference();
    let case = case(&reference, "chat");
    let ids = ids_of(&case["ids"]);
    let path = fixture_dir().join("glm5-tiny-f32.gguf");
    let n = 12;
    let one = tp_greedy(&path, 1, false, &ids, n);
    assert_eq!(one, ids_of(&case["greedy_new_tokens"])[..n].to_vec());
    for (world, ep) in [(2, false), (4, false), (4, true)] {
        assert_eq!(
            tp_greedy(&path, world, ep, &ids, n),
            one,
            "TP={world} ep={ep}"
        );
    }
}

#[test]
fn dims_that_do_not_divide_are_refused_by_name() {
    let path = fixture_dir().join("glm5-tiny-f32.gguf");
    let g = Gguf::open(&path).unwrap();
    // 4 heads over 8 ranks.
    let mut comms = LocalComm::group(8, Duration::from_secs(5));
    let comm: Arc<dyn Communicator<CpuBackend>> = Arc::new(comms.remove(0));
    let e = Model::load_tp(&g, CpuBackend::new(), comm, false)
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        matches!(e, ModelError::Shard(ShardError::Count { .. })),
        "{msg}"
    );
    assert!(
        msg.contains("blk.0.attn_q_b.weight")
            && msg.contains("4 attention heads")
            && msg.contains("8 ranks"),
        "{msg}"
    );
    // Q8_0 rows of the 96-wide dense FFN over 2 ranks: 48 values, not whole 32-blocks.
    let q8 = Gguf::open(fixture_dir().join("llamacpp/glm5-tiny-lc-q8_0.gguf")).unwrap();
    let mut comms = LocalComm::group(2, Duration::from_secs(5));
    let comm: Arc<dyn Communicator<CpuBackend>> = Arc::new(comms.remove(0));
    let e = Model::load_tp(&q8, CpuBackend::new(), comm, false)
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        matches!(e, ModelError::Shard(ShardError::Block { .. })),
        "{msg}"
    );
    assert!(msg.contains("ffn_down"), "{msg}");
}

/// A glm-dsa file with 8 heads and 8 experts (the transformers fixtures have 4 heads): GLM-5's
/// tensor table (`glm5_model::synth`) at small sizes, F32, random weights of scale
/// `1/sqrt(fan_in)` from a fixed LCG, norms 1, biases 0.
fn write_eight_way(path: &Path) {
    use glm5_model::synth::{metadata, tensors, Fill, Geometry, QuantMix};
    let g = Geometry {
        dense: 1,
        moe: 2,
        experts: 8,
        d_model: 64,
        n_heads: 8,
        q_lora: 32,
        kv_lora: 32,
        rope: 16,
        nope: 16,
        v_dim: 16,
        index_heads: 2,
        index_dim: 32,
        index_topk: 8,
        n_used: 2,
        expert_ff: 16,
        dense_ff: 64,
        n_vocab: 512,
    };
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let data: Vec<(glint_gguf::TensorSpec, Vec<u8>)> =
        tensors(&g, QuantMix::Uniform(glint_gguf::GgmlType::F32))
            .into_iter()
            .map(|t| {
                let n: u64 = t.dims.iter().product();
                let scale = 1.7 / (t.dims[0] as f32).sqrt();
                let v: Vec<f32> = (0..n)
                    .map(|_| match t.fill {
                        Fill::Ones => 1.0,
                        Fill::Zeros => 0.0,
                        Fill::Random => next() * scale,
                    })
                    .collect();
                let spec = glint_gguf::TensorSpec {
                    name: t.name,
                    ty: t.ty,
                    dims: t.dims,
                };
                (spec, v.iter().flat_map(|f| f.to_le_bytes()).collect())
            })
            .collect();
    let refs: Vec<_> = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    glint_gguf::write_gguf(path, &metadata(&g, "tp8-test"), &refs).unwrap();
}

#[test]
fn eight_ranks_on_an_eight_head_eight_expert_model() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tp8.gguf");
    write_eight_way(&path);
    // 40 tokens: more than index_topk (8), so the indexer selects in every layer.
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 37 + 5) % 256).collect();
    let one = tp_logits(&path, 1, false, &ids, 16);
    let range = logit_range(&one);
    for (world, ep) in [(8, false), (8, true), (2, false)] {
        let got = tp_logits(&path, world, ep, &ids, 16);
        let err = max_abs_diff(&got, &one);
        eprintln!(
            "tp8 fixture: TP={world} ep={ep}: max |Δlogit| vs TP=1 {err:.2e} (range {range:.1})"
        );
        assert!(err <= TP_BOUND, "TP={world} ep={ep}: {err}");
    }
    let greedy = tp_greedy(&path, 1, false, &ids, 8);
    assert_eq!(tp_greedy(&path, 8, false, &ids, 8), greedy);
    assert_eq!(tp_greedy(&path, 8, true, &ids, 8), greedy);
}
