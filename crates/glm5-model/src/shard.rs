//! The tensor-parallel sharding plan of `glm-dsa` and `deepseek2` files, by tensor name.
//!
//! Attention is split by heads: `attn_q_b` (or `attn_q`) rows and a legacy fused `attn_kv_b`'s
//! rows (both head-major), `attn_k_b`/`attn_v_b` slices (one per head), `attn_output` columns.
//! `attn_q_a`, `attn_kv_a_mqa` (so the latent cache), their norms, the DSA indexer and the
//! router are replicated: every rank computes them whole. Dense FFN and shared expert: gate/up
//! rows, down columns. Routed experts: each expert's FFN dim split the same way (tensor
//! parallel), or whole experts split across ranks (`ep`, expert parallel). The output head is
//! split by vocabulary rows and its logits all-gathered. Every split ends in a partial sum
//! (attention output, FFN output) that one all-reduce completes: two per layer.
//!
//! Shards are cut from the mmap by the declared axis ([`glint_tp::cut`]), never by position
//! in the file; a dimension that does not divide by the world size (or a quantized row cut
//! inside a block) is refused with the tensor and the numbers.

use glint_tp::Split;

/// Which part of the model a process (or rank thread) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
    /// Expert parallel: routed experts are split whole across ranks instead of each expert's
    /// FFN dim.
    pub ep: bool,
}

impl Shard {
    /// The whole model (world size 1).
    pub const FULL: Shard = Shard {
        rank: 0,
        world: 1,
        ep: false,
    };
    pub fn new(rank: usize, world: usize, ep: bool) -> Self {
        Self { rank, world, ep }
    }
    pub fn is_full(&self) -> bool {
        self.world <= 1
    }
}

/// How tensor `name` is split (its suffix after `blk.N.` decides). Names outside the plan
/// (MTP-only tensors that are never bound) are replicated.
pub fn split_of(name: &str, ep: bool) -> Split {
    let base = match name.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, b)| b),
        None => name,
    };
    let experts = |tp: Split| if ep { Split::SLICES } else { tp };
    match base {
        "output.weight" => Split::ROWS,
        "attn_q_b.weight" | "attn_q.weight" | "attn_kv_b.weight" => Split::ROWS,
        "attn_k_b.weight" | "attn_v_b.weight" => Split::SLICES,
        "attn_output.weight" => Split::COLS,
        "ffn_gate.weight" | "ffn_up.weight" => Split::ROWS,
        "ffn_gate_shexp.weight" | "ffn_up_shexp.weight" => Split::ROWS,
        "ffn_down.weight" | "ffn_down_shexp.weight" => Split::COLS,
        "ffn_gate_exps.weight" | "ffn_up_exps.weight" => experts(Split::ROWS),
        // Per expert [gate rows; up rows]: each rank takes its part of both.
        "ffn_gate_up_exps.weight" => experts(Split::Axis { axis: 1, groups: 2 }),
        "ffn_down_exps.weight" => experts(Split::COLS),
        _ => Split::Replicated,
    }
}

/// Bytes of the tensors `shard` binds: a split tensor's share is `1 / world` of it.
pub fn local_bytes(gguf: &glint_gguf::Gguf, shard: Shard) -> u64 {
    let w = shard.world.max(1) as u64;
    gguf.tensors()
        .iter()
        .map(|t| match split_of(&t.name, shard.ep) {
            Split::Replicated => t.n_bytes,
            Split::Axis { .. } => t.n_bytes / w,
        })
        .sum()
}
