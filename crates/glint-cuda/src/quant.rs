//! Weights on the device and the quantized matmuls (kernels/quant.cu).
//!
//! A weight stays in its GGUF bytes on the device. A product first quantizes the activation to
//! the weight type's partner format (`quantize_act_*`, byte-identical to glint-quant's
//! `quantize_activation`, so the integer sums equal the CPU's), into one scratch buffer this
//! state owns, then runs the type's `matvec_*` / `mmid_*` kernel. An expert-indexed product of
//! many pairs first groups them by expert on the device (`mmid_group`) and runs `matvec_*` over
//! those groups, reading an expert's rows once per eight of its pairs rather than once per
//! pair; the sums are the same either way. Every op checks sizes on the host and only enqueues work: nothing here waits
//! for the device.

use std::sync::{Mutex, OnceLock};

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use glint_core::error::need;
use glint_core::{CoreError, GgmlType, Result, RopeParams, StepSizes};

use crate::backend::{dev, grid_1d, int, CudaBackend};
use crate::buffers::{CudaBuf, CudaIds, CudaWeight};
use crate::compile::Family;

/// One weight type on the CUDA backend: its kernels and the activation format they read.
pub(crate) struct Kind {
    pub ty: GgmlType,
    pub matvec: &'static str,
    /// The same sums for one token, with fewer registers.
    pub matvec1: &'static str,
    /// `matvec1` with its weights staged in shared memory (`with_stage`); the block types only.
    pub matvec1s: Option<&'static str>,
    /// `mmid` with two weight stages, for one warp a row group (`GLINT_CUDA_MMID_STAGE=1`).
    pub mmids: Option<&'static str>,
    pub mmid: &'static str,
    pub get_rows: &'static str,
    /// Rows decoded to bf16, for the products cuBLAS multiplies (gemm.rs).
    pub dequant: &'static str,
    /// The activation format of `matvec` / `mmid` (F32: the activation as is).
    pub partner: GgmlType,
    /// The tensor-core kernel for batches of more than MV_TOK tokens, where the type has one.
    pub mmq: Option<&'static str>,
}

macro_rules! mmq_name {
    ($name:literal) => {
        None
    };
    ($name:literal mmq) => {
        Some(concat!("mmq_", $name))
    };
}

/// The types with a tensor-core kernel are the block types summed block by block, which also
/// have a staged one-token kernel (kernels/quant.cu `STAGED_KERNEL`).
macro_rules! staged_name {
    ($prefix:literal $name:literal) => {
        None
    };
    ($prefix:literal $name:literal mmq) => {
        Some(concat!($prefix, $name))
    };
}

macro_rules! kinds {
    ($($ty:ident => $name:literal, $partner:ident $(, $mmq:ident)?;)*) => {
        /// Each supported weight type is one row; kernels/quant.cu's `QUANT_KERNELS(name, ..)`
        /// and `MMQ_STAGED(name, ..)` lines are the other half. The partner is glint-quant's
        /// `vec_dot_type` except Q8_1, which glint-quant has no dot kernel for: the CPU backend
        /// decodes its rows and takes an f32 dot, and so does this (partner F32). `mmq`: the
        /// type has a tensor-core kernel; the float types and Q8_1 (an activation format no
        /// GGUF stores weights in) multiply batches with the per-unit kernels, 8 tokens a pass.
        pub(crate) const KINDS: &[Kind] = &[$(Kind {
            ty: GgmlType::$ty,
            matvec: concat!("matvec_", $name),
            matvec1: concat!("matvec1_", $name),
            matvec1s: staged_name!("matvec1s_" $name $($mmq)?),
            mmids: staged_name!("mmids_" $name $($mmq)?),
            mmid: concat!("mmid_", $name),
            get_rows: concat!("get_rows_", $name),
            dequant: concat!("dequant_bf16_", $name),
            partner: GgmlType::$partner,
            mmq: mmq_name!($name $($mmq)?),
        },)*];
    };
}

kinds! {
    F32 => "f32", F32;
    F16 => "f16", F16;
    BF16 => "bf16", BF16;
    Q4_0 => "q4_0", Q8_0, mmq;
    Q4_1 => "q4_1", Q8_1, mmq;
    Q5_0 => "q5_0", Q8_0, mmq;
    Q5_1 => "q5_1", Q8_1, mmq;
    Q8_0 => "q8_0", Q8_0, mmq;
    Q8_1 => "q8_1", F32;
    IQ4_NL => "iq4_nl", Q8_0, mmq;
    MXFP4 => "mxfp4", Q8_0, mmq;
    NVFP4 => "nvfp4", Q8_0, mmq;
    Q1_0 => "q1_0", Q8_0, mmq;
    Q2_K => "q2_k", Q8_K, mmq;
    Q3_K => "q3_k", Q8_K, mmq;
    Q4_K => "q4_k", Q8_K, mmq;
    Q5_K => "q5_k", Q8_K, mmq;
    Q6_K => "q6_k", Q8_K, mmq;
    TQ1_0 => "tq1_0", Q8_K, mmq;
    TQ2_0 => "tq2_0", Q8_K, mmq;
    IQ2_XXS => "iq2_xxs", Q8_K, mmq;
    IQ2_XS => "iq2_xs", Q8_K, mmq;
    IQ2_S => "iq2_s", Q8_K, mmq;
    IQ3_XXS => "iq3_xxs", Q8_K, mmq;
    IQ3_S => "iq3_s", Q8_K, mmq;
    IQ1_S => "iq1_s", Q8_K, mmq;
    IQ1_M => "iq1_m", Q8_K, mmq;
    IQ4_XS => "iq4_xs", Q8_K, mmq;
}

/// The table row of `ty`, if this backend multiplies it.
pub(crate) fn kind(ty: GgmlType) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.ty == ty)
}

fn kind_for(op: &'static str, ty: GgmlType) -> Result<&'static Kind> {
    kind(ty).ok_or(CoreError::UnsupportedType { op, ty })
}

/// F32 weights whose rows are whole float4s (kernels/quant.cu `W_f32x4`): a lane reads 16
/// bytes a unit where `*_f32` reads 4.
static F32X4: Kind = Kind {
    ty: GgmlType::F32,
    matvec: "matvec_f32x4",
    matvec1: "matvec1_f32x4",
    matvec1s: None,
    mmids: None,
    mmid: "mmid_f32x4",
    get_rows: "get_rows_f32x4",
    dequant: "dequant_bf16_f32x4",
    partner: GgmlType::F32,
    mmq: None,
};

/// Whether an F32 weight of `cols` columns takes the float4 kernels: by its shape alone (so
/// a row's sum is the same expression in every product of it); `GLINT_CUDA_F32X4=0` never
/// (to compare). Rows of a multiple of 4 floats keep 16-byte alignment: weights and buffers
/// are whole allocations.
fn f32x4(ty: GgmlType, cols: usize) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    ty == GgmlType::F32
        && cols.is_multiple_of(4)
        && *ON.get_or_init(|| std::env::var("GLINT_CUDA_F32X4").map_or(true, |v| v != "0"))
}

/// The kernels of weight `w`: its type's row, or the float4 one.
fn kind_of(op: &'static str, w: &CudaWeight) -> Result<&'static Kind> {
    if f32x4(w.ty, w.cols()) {
        return Ok(&F32X4);
    }
    kind_for(op, w.ty)
}

/// The activation quantizer for `partner`: (kernel, elements per block, partner blocks a warp
/// quantizes, or 0 for the float ones, which take four elements a thread). `None` for F32.
fn quantizer(partner: GgmlType) -> Option<(&'static str, usize, usize)> {
    Some(match partner {
        GgmlType::Q8_0 => ("quantize_act_q8_0", 32, 4),
        GgmlType::Q8_1 => ("quantize_act_q8_1", 32, 4),
        GgmlType::Q8_K => ("quantize_act_q8_k", 256, 1),
        GgmlType::F16 => ("quantize_act_f16", 1, 0),
        GgmlType::BF16 => ("quantize_act_bf16", 1, 0),
        _ => return None,
    })
}

/// The launch of an 8-bit quantizer over `blocks` partner blocks, `per_warp` a warp.
fn quantizer_grid(op: &'static str, blocks: usize, per_warp: usize) -> Result<LaunchConfig> {
    Ok(grid_1d(mul(op, blocks.div_ceil(per_warp), 32)?))
}

/// The quantizer of `partner` that gates its input on the way (silu(g)·u, also written out):
/// the 8-bit formats only; None for the float partners.
fn glu_quantizer(partner: GgmlType) -> Option<&'static str> {
    Some(match partner {
        GgmlType::Q8_0 => "quantize_act_q8_0_glu",
        GgmlType::Q8_1 => "quantize_act_q8_1_glu",
        GgmlType::Q8_K => "quantize_act_q8_k_glu",
        _ => return None,
    })
}

/// Row groups a block of `matvec_wide_f32x4` takes (kernels/quant.cu MV_WIDE_WARPS).
const MV_WIDE_WARPS: usize = 8;

/// Whether a product with kernels `k` over `n` tokens runs a wide F32 kernel
/// (`matvec_tile_f32x4`, or `matvec_wide_f32x4`: [`wide_f32_launch`]): F32 rows of whole
/// float4s (a row group's parts walked by one warp, its sums reduce-scattered: the bits of
/// `matvec_f32x4`, which over many tokens spends a block barrier and one lane's serial sums
/// per row group and tile). From 128 tokens by default, where its one warp per row group and
/// tile still fills an H100 for GLM-5's router; `GLINT_CUDA_F32_WIDE_MIN` sets the count (0:
/// never; one token always keeps `matvec1_f32x4`).
fn takes_wide_f32(k: &Kind, n: usize) -> bool {
    static MIN: OnceLock<usize> = OnceLock::new();
    let min = *MIN.get_or_init(|| {
        std::env::var("GLINT_CUDA_F32_WIDE_MIN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128)
    });
    std::ptr::eq(k, &F32X4) && min > 0 && n >= min.max(2)
}

/// Rows and tokens of a `matvec_tile_f32x4` block, and its dynamic shared memory (kernels/quant.cu
/// MV_TILE_ROWS, MV_TILE_TOKS, MV_TILE_SMEM: two buffers of a 32-unit slice of each).
const MV_TILE_ROWS: usize = 32;
const MV_TILE_TOKS: usize = 32;
const MV_TILE_SMEM: usize = 2 * (MV_TILE_ROWS + MV_TILE_TOKS) * 32 * 16;

/// Whether the wide F32 products take `matvec_tile_f32x4` (each block's rows and tokens staged
/// in shared memory) or `matvec_wide_f32x4` (the same bits). Opt-in, `GLINT_CUDA_F32_TILE=1`:
/// on an H100 it gave pp512 no gain (docs/performance.md, call BN). Read at each launch (a
/// prompt's few F32 products), so a test can compare the two kernels in one process.
fn f32_tiles() -> bool {
    std::env::var("GLINT_CUDA_F32_TILE").is_ok_and(|v| v == "1")
}

/// The kernel and launch of a [`takes_wide_f32`] product.
fn wide_f32_launch(
    be: &CudaBackend,
    op: &'static str,
    rows: usize,
    n: usize,
) -> Result<(CudaFunction, LaunchConfig)> {
    if f32_tiles() {
        let name = "matvec_tile_f32x4";
        let f = be.func(Family::Quant, name)?;
        // A device without 64 KiB of shared memory a block keeps the warp-wide kernel.
        if be.smem.dynamic_limit(be, op, &f, name)? >= MV_TILE_SMEM {
            be.smem.allow(be, op, &f, name, MV_TILE_SMEM)?;
            let grid = LaunchConfig {
                grid_dim: (
                    rows.div_ceil(MV_TILE_ROWS) as u32,
                    n.div_ceil(MV_TILE_TOKS).min(GRID_YZ_MAX) as u32,
                    1,
                ),
                block_dim: (32, (MV_TILE_ROWS / MV_RPW) as u32, 1),
                shared_mem_bytes: MV_TILE_SMEM as u32,
            };
            return Ok((f, grid));
        }
    }
    let grid = LaunchConfig {
        grid_dim: (
            rows.div_ceil(MV_RPW * MV_WIDE_WARPS) as u32,
            n.div_ceil(MV_TOK).min(GRID_YZ_MAX) as u32,
            1,
        ),
        block_dim: (32, MV_WIDE_WARPS as u32, 1),
        shared_mem_bytes: 0,
    };
    Ok((be.func(Family::Quant, "matvec_wide_f32x4")?, grid))
}

impl CudaBackend {
    /// Whether `matmul` of `n` tokens by `w` runs a wide F32 kernel, so a test can tell which
    /// kernel gave its bits (both give the same).
    pub fn takes_wide_f32(&self, w: &CudaWeight, n: usize) -> bool {
        kind_of("matmul", w).is_ok_and(|k| takes_wide_f32(k, n))
    }

    /// Whether such a product runs `matvec_tile_f32x4` now (rather than `matvec_wide_f32x4`).
    pub fn takes_f32_tiles(&self) -> bool {
        // Only the tile kernel's launch asks for shared memory.
        wide_f32_launch(self, "matmul", 1, 1).is_ok_and(|(_, g)| g.shared_mem_bytes > 0)
    }
}

/// Warps of 32 lanes per block of the matvec kernels (kernels/quant.cu MV_ROWS), output rows
/// one warp group computes (MV_RPW), and tokens it handles per weight-row read (MV_TOK).
const MV_ROWS: usize = 4;
const MV_RPW: usize = 4;
/// Most warps one row group may be split over (kernels/quant.cu MV_WARPS_MAX).
const MV_WARPS_MAX: usize = 16;
const MV_TOK: usize = 8;
/// CUDA's limit on grid.y / grid.z; the kernels stride over larger counts.
const GRID_YZ_MAX: usize = 65_535;

pub(crate) fn supports(ty: GgmlType) -> bool {
    kind(ty).is_some()
}

/// Per-backend scratch of the quantized matmuls: the quantized activations, and the pair
/// grouping of expert-indexed products (`order`, then `tiles`; see kernels/quant.cu).
#[derive(Default)]
pub struct QuantState {
    act: Mutex<ActSlots>,
    group: Mutex<Option<CudaSlice<u32>>>,
}

/// Quantized activations kept this many at a time (a forked step's two branches hold up to
/// three each).
const ACT_SLOTS: usize = 6;

/// What a slot holds: `rows × cols` of the buffer state `version` (crates/glint-cuda/src/
/// buffers.rs: a write gives the buffer a new one) in `partner`'s format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ActKey {
    version: u64,
    partner: GgmlType,
    rows: usize,
    cols: usize,
}

/// The last few quantized activations, so the products that read one activation quantize it
/// once: a layer's normed hidden state feeds `attn_q_a`, `attn_kv_a` and the indexer's key
/// projection, the FFN's feeds the routed experts' gate and up and the shared expert's. A hit
/// needs the same buffer state, so it can never be stale; the slots are forgotten around
/// every recorded step (`forget`), so a CUDA graph never relies on a quantization made
/// outside it. `GLINT_CUDA_ACT_REUSE=0` quantizes every time (to measure what this saves).
///
/// Inside `Backend::branches` (fork.rs) both chains take slots: `touched` and `wrote`
/// (bit 0 main, bit 1 side, cleared at each fork and join) keep a branch from finding a
/// quantization the other branch writes, which it could read before it is written, and from
/// evicting a slot the other branch reads or writes.
#[derive(Default)]
struct ActSlots {
    slots: [Option<CudaSlice<u8>>; ACT_SLOTS],
    keys: [Option<ActKey>; ACT_SLOTS],
    used: [u64; ACT_SLOTS],
    touched: [u8; ACT_SLOTS],
    wrote: [u8; ACT_SLOTS],
    clock: u64,
}

impl ActSlots {
    fn forget(&mut self) {
        self.keys = [None; ACT_SLOTS];
    }

    /// A fork or join: what the branches touched no longer matters.
    fn fork_edge(&mut self) {
        self.touched = [0; ACT_SLOTS];
        self.wrote = [0; ACT_SLOTS];
    }

    /// The side stream now waits for the main stream's work so far: what main wrote until now
    /// may be found by the side (what either touched stays out of the other's evictions).
    fn side_sees_main(&mut self) {
        for w in &mut self.wrote {
            *w &= !1;
        }
    }

    /// The slot holding `key` (and true), or the least recently used one, sized for `bytes`
    /// and holding nothing until the caller has filled it and set its key (false).
    fn find(&mut self, be: &CudaBackend, key: ActKey, bytes: usize) -> Result<(usize, bool)> {
        let (i, hit) = self
            .pick(key, be.fork.branch(), reuse_on())
            .ok_or_else(|| CoreError::Device {
                op: "quantizing an activation",
                msg: format!(
                    "all {ACT_SLOTS} activation slots are in use by the other branch of a forked step"
                ),
            })?;
        if !hit {
            self.keys[i] = None;
            ensure(be, &mut self.slots[i], bytes)?;
        }
        Ok((i, hit))
    }

    /// `find`'s choice for `branch` (`None` outside a fork; fork.rs `ForkState::branch`).
    fn pick(&mut self, key: ActKey, branch: Option<u8>, reuse: bool) -> Option<(usize, bool)> {
        self.clock += 1;
        let mine = branch.map_or(0, |b| 1u8 << b);
        let other = branch.map_or(0, |b| 1u8 << (1 - b));
        let hit = (0..ACT_SLOTS)
            .filter(|_| reuse)
            .find(|&i| self.keys[i] == Some(key) && self.wrote[i] & other == 0);
        let (i, hit) = match hit {
            Some(i) => (i, true),
            None => {
                let i = (0..ACT_SLOTS)
                    .filter(|&i| self.touched[i] & other == 0)
                    .min_by_key(|&i| self.used[i])?;
                self.wrote[i] |= mine;
                (i, false)
            }
        };
        self.used[i] = self.clock;
        self.touched[i] |= mine;
        Some((i, hit))
    }
}

fn reuse_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_ACT_REUSE").map_or(true, |v| v != "0"))
}

/// Threads of `mmid_group` (kernels/quant.cu MMID_GROUP_THREADS).
const GROUP_THREADS: u32 = 1024;
/// Most experts `mmid_group` counts in its 48 KiB of shared memory.
const GROUP_MAX_SLICES: usize = 48 * 1024 / 4;

/// Tiles of up to `tile` pairs of one expert that `pairs` pairs over `slices` experts make at
/// most: every expert's last tile may be partial.
fn max_tiles(pairs: usize, slices: usize, tile: usize) -> usize {
    pairs.div_ceil(tile) + pairs.min(slices)
}

/// u32s of the grouping scratch: the pair order, the tile count, three per tile.
fn group_words(pairs: usize, slices: usize) -> usize {
    pairs + 1 + 3 * max_tiles(pairs, slices, MV_TOK)
}

/// Whether a product of `pairs` (token, slot) pairs over `slices` experts groups them first:
/// once experts repeat often enough that reading each once per tile beats the grouping
/// launch. One token's pairs name distinct experts (nothing to share), so never then.
/// `GLINT_CUDA_MMID_GROUP=0` turns grouping off, to measure what it gains in one run.
fn grouped(n_tokens: usize, pairs: usize, slices: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("GLINT_CUDA_MMID_GROUP").map_or(true, |v| v != "0"));
    on && n_tokens > 1 && 2 * pairs >= slices && slices <= GROUP_MAX_SLICES
}

/// Bytes of a Q8_K activation block on the GPU: ggml's 292 padded to 304, so rows and blocks
/// are 16-byte aligned for the MMQ tiles' copies (kernels/quant.cu `Q8_K_BYTES`).
pub(crate) const Q8_K_GPU_BYTES: usize = 304;

/// Bytes of `cols` activations in `partner`'s format as the kernels lay them out: glint-quant's
/// (the CPU's) for every partner, with Q8_K's blocks padded to [`Q8_K_GPU_BYTES`].
fn act_bytes(
    partner: GgmlType,
    cols: usize,
) -> std::result::Result<usize, glint_quant::QuantError> {
    let bytes = glint_quant::dot::activation_bytes(partner, cols)?;
    Ok(if partner == GgmlType::Q8_K {
        bytes / partner.type_size() * Q8_K_GPU_BYTES
    } else {
        bytes
    })
}

/// Bytes of the largest partner format for `rows × cols` activations (the same bound the CPU
/// backend's scratch uses: cols rounded up to a Q8_K block).
fn worst_act_bytes(rows: usize, cols: usize) -> usize {
    let cols = cols.next_multiple_of(256);
    [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
        GgmlType::BF16,
    ]
    .iter()
    .filter_map(|&p| act_bytes(p, cols).ok())
    .max()
    .unwrap_or(0)
    .saturating_mul(rows)
}

impl QuantState {
    /// Drops what the activation slots remember (their memory stays).
    pub(crate) fn forget(&self) {
        self.act.lock().unwrap_or_else(|p| p.into_inner()).forget();
    }

    /// The side stream starts waiting for the main stream (fork.rs).
    pub(crate) fn side_sees_main(&self) {
        self.act
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .side_sees_main();
    }

    /// A fork or join of the step (fork.rs).
    pub(crate) fn fork_edge(&self) {
        self.act
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fork_edge();
    }

    pub(crate) fn prepare(&self, be: &CudaBackend, s: &StepSizes) -> Result<()> {
        let bytes = s
            .act_shapes
            .iter()
            .map(|&(rows, cols)| worst_act_bytes(rows, cols))
            .max()
            .unwrap_or(0);
        let mut g = self.act.lock().unwrap_or_else(|p| p.into_inner());
        for slot in &mut g.slots {
            ensure(be, slot, bytes)?;
        }
        // Expert-indexed products: the routed experts, and per-head weights (a slot per head).
        let pairs = s.max_tokens.saturating_mul(s.n_used.max(s.max_heads));
        if s.max_tokens > 1 {
            // The most any slice count can need (a tile per pair at worst).
            let mut g = self.group.lock().unwrap_or_else(|p| p.into_inner());
            ensure(be, &mut g, group_words(pairs, pairs))?;
        }
        Ok(())
    }
}

/// Grows a scratch to at least `len` elements (only when a call exceeds what `prepare` sized).
pub(crate) fn ensure<'g, T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    be: &CudaBackend,
    slot: &'g mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<&'g mut CudaSlice<T>> {
    let have = slot.as_ref().map_or(0, |s| s.len());
    if have < len || slot.is_none() {
        if have > 0 {
            tracing::debug!(have, need = len, "growing a CUDA matmul scratch");
        }
        // Drop the old one first so peak memory is not old + new.
        *slot = None;
        *slot = Some(be.zeros::<T>("matmul scratch", len)?);
    }
    Ok(slot.as_mut().expect("just set"))
}

/// `a · b`, or a parameter error naming the op.
fn mul(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| CoreError::Param {
        op,
        msg: format!("{a} × {b} overflows"),
    })
}

pub(crate) fn upload_weight(
    be: &CudaBackend,
    name: &str,
    ty: GgmlType,
    dims: &[usize],
    bytes: &[u8],
) -> Result<CudaWeight> {
    const OP: &str = "upload_weight";
    if !supports(ty) {
        return Err(CoreError::UnsupportedType { op: OP, ty });
    }
    if dims.is_empty() || dims.len() > 3 {
        return Err(CoreError::Param {
            op: OP,
            msg: format!("{name}: {} dims, expected 1 to 3", dims.len()),
        });
    }
    let cols = dims[0];
    let rows = dims.get(1).copied().unwrap_or(1);
    let slices = dims.get(2).copied().unwrap_or(1);
    let row_bytes = ty.row_bytes(cols as u64).ok_or_else(|| CoreError::Param {
        op: OP,
        msg: format!("{name}: row of {cols} elements is not whole blocks of {ty}"),
    })? as usize;
    let expected = row_bytes
        .checked_mul(rows)
        .and_then(|v| v.checked_mul(slices))
        .ok_or_else(|| CoreError::Param {
            op: OP,
            msg: format!("{name}: size overflows"),
        })?;
    if bytes.len() != expected {
        return Err(CoreError::Param {
            op: OP,
            msg: format!("{name}: {} bytes, expected {expected}", bytes.len()),
        });
    }
    // The kernels take these as `int`; refuse here rather than at the first product.
    for (what, v) in [("cols", cols), ("rows", rows), ("slices", slices)] {
        if i32::try_from(v).is_err() {
            return Err(CoreError::Param {
                op: OP,
                msg: format!("{name}: {what} = {v} does not fit a 32-bit kernel argument"),
            });
        }
    }
    let data = if bytes.is_empty() {
        be.zeros::<u8>("weight", 1)?
    } else {
        // Rounded up to 16 bytes: the one-token kernels copy a row's blocks as the 16-byte
        // chunks that cover them (kernels/quant.cu `stage_pass`), so the last chunk of the
        // last row may reach past the tensor's end; the padding is copied, never summed.
        // SAFETY: every byte of the tensor is written by the copy right after, in stream order.
        let len = bytes.len().next_multiple_of(16);
        let mut d = unsafe { be.stream.alloc::<u8>(len) }.map_err(|e| CoreError::Device {
            op: "allocating device memory",
            msg: format!("weight {name}: {len} bytes: {e}"),
        })?;
        crate::staging::upload(be, bytes, &mut d)?;
        d
    };
    Ok(CudaWeight {
        data,
        name: name.to_string(),
        ty,
        dims: [cols, rows, slices],
    })
}

/// The activation of a product: the f32 rows themselves, or their quantized copy.
enum Act<'a> {
    F32(&'a CudaSlice<f32>),
    Quant(&'a CudaSlice<u8>),
}

impl<'a> Act<'a> {
    /// Passes the activation as the kernel's next argument.
    fn push(&self, b: &mut crate::launch::Launch<'a>) {
        match *self {
            Act::F32(s) => b.arg(s),
            Act::Quant(s) => b.arg(s),
        };
    }
}

/// Quantizes `rows × cols` of `x` to `k.partner` (into one of the slots, unless one already
/// holds it) and returns the activation the product kernels read, with its row stride in bytes.
fn activation<'a>(
    be: &CudaBackend,
    op: &'static str,
    k: &Kind,
    x: &'a CudaBuf,
    rows: usize,
    cols: usize,
    slots: &'a mut ActSlots,
) -> Result<(Act<'a>, i64)> {
    let stride = act_bytes(k.partner, cols)?;
    let stride_i = i64::try_from(stride).map_err(|_| CoreError::Param {
        op,
        msg: format!("activation row of {stride} bytes"),
    })?;
    let Some((kernel, per, per_warp)) = quantizer(k.partner) else {
        return Ok((Act::F32(x.data()), stride_i));
    };
    let bytes = mul(op, rows, stride)?;
    let elems = mul(op, rows, cols)?;
    let key = ActKey {
        version: x.version(),
        partner: k.partner,
        rows,
        cols,
    };
    let (i, hit) = slots.find(be, key, bytes)?;
    if !hit {
        let out = slots.slots[i].as_ref().expect("found slots are allocated");
        quantize(be, op, kernel, per, per_warp, x, elems, out)?;
        slots.keys[i] = Some(key);
    }
    let out = slots.slots[i].as_ref().expect("found slots are allocated");
    Ok((Act::Quant(out), stride_i))
}

/// `h = silu(g)·u` over `rows × cols` (cols = w's), computed by the kernel that quantizes it
/// for `w` into an activation slot keyed by h's new state, so the product that follows finds
/// it there: one launch where `silu_mul` and the quantization were two. False (nothing done)
/// where w's partner is a float format or slots are not reused; the caller gates separately.
pub(crate) fn glu_activation(
    be: &CudaBackend,
    w: &CudaWeight,
    g: &CudaBuf,
    u: &CudaBuf,
    rows: usize,
    h: &mut CudaBuf,
) -> Result<bool> {
    const OP: &str = "silu_mul";
    let k = kind_of(OP, w)?;
    let cols = w.cols();
    let (Some(kernel), Some((_, per, per_warp @ 1..))) =
        (glu_quantizer(k.partner), quantizer(k.partner))
    else {
        return Ok(false);
    };
    // A product on cuBLAS reads h in bf16 (gemm.rs): an 8-bit copy would go unused.
    if !reuse_on() || !glu_on() || crate::gemm::applies_dense(be, w, rows) {
        return Ok(false);
    }
    let elems = mul(OP, rows, cols)?;
    need(OP, "gate", elems, g.len)?;
    need(OP, "up", elems, u.len)?;
    need(OP, "out", elems, h.len)?;
    if elems == 0 {
        return Ok(false);
    }
    let blocks = elems / per;
    let (blocks_i, grid) = (blocks as i64, quantizer_grid(OP, blocks, per_warp)?);
    let f = be.func(Family::Quant, kernel)?;
    written_with_slot(be, OP, h, k.partner, rows, cols, |hd, out| {
        let mut b = be.launch(&f);
        b.arg(g.data())
            .arg(u.data())
            .arg(hd)
            .arg(out)
            .arg(&blocks_i);
        // SAFETY: g, u and h hold `elems` floats (checked above), read and written once each;
        // the slot was sized for `elems / per` partner blocks.
        unsafe { b.launch(grid) }.map_err(dev(OP))
    })?;
    Ok(true)
}

impl CudaBackend {
    /// [`glint_core::Backend::rope_split_for`] in one launch (kernels/quant.cu
    /// `rope_split_q8_*`): x rotated, the first `cols` values of each head copied to y and
    /// quantized for `next` into an activation slot keyed by y's new state, so the per-head
    /// product that follows finds them there. Returns whether it ran, so a test can tell which
    /// path gave it its bits. False (nothing done) where next's type has no kernels or its
    /// partner is not Q8_0 or Q8_1 (one warp a 32-value block), `cols` is not a multiple of 32
    /// below 1024 (a warp a block plus one for the rotation, in one thread block), next's rows
    /// are not `cols` wide or its slices not the heads, the rotated dims start before `cols`,
    /// the product runs on cuBLAS (which reads y in bf16), slots are not reused, or
    /// `GLINT_CUDA_QSPLIT=0`; the caller then runs [`glint_core::rope_then_copy`].
    #[allow(clippy::too_many_arguments)]
    pub fn rope_split_fused(
        &self,
        x: &mut CudaBuf,
        positions: &CudaIds,
        inv_freq: &CudaBuf,
        p: &RopeParams,
        cols: usize,
        y: &mut CudaBuf,
        next: &CudaWeight,
    ) -> Result<bool> {
        const OP: &str = "rope_split_for";
        let Ok(k) = kind_of(OP, next) else {
            return Ok(false);
        };
        let kernel = match k.partner {
            GgmlType::Q8_0 => "rope_split_q8_0",
            GgmlType::Q8_1 => "rope_split_q8_1",
            _ => return Ok(false),
        };
        let blocks = cols / 32;
        let fits = cols.is_multiple_of(32)
            && (1..32).contains(&blocks)
            && next.cols() == cols
            && next.slices() == p.n_heads
            && cols <= p.offset;
        if !fits
            || !reuse_on()
            || !qsplit_on()
            || crate::gemm::applies_heads(self, next, p.n_heads, p.n_tokens)
        {
            return Ok(false);
        }
        crate::elementwise::check_rope(OP, x, positions, inv_freq, p)?;
        let rows = mul(OP, p.n_tokens, p.n_heads)?;
        need(OP, "y", mul(OP, rows, cols)?, y.len)?;
        if rows == 0 {
            return Ok(true);
        }
        let geometry = crate::elementwise::rope_geometry(OP, p)?;
        let cols_i = int(OP, cols)?;
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(rows).map_err(|_| CoreError::Param {
                    op: OP,
                    msg: format!("{rows} query rows"),
                })?,
                1,
                1,
            ),
            block_dim: (32 * (blocks as u32 + 1), 1, 1),
            shared_mem_bytes: 0,
        };
        let f = self.func(Family::Quant, kernel)?;
        written_with_slot(self, OP, y, k.partner, rows, cols, |yd, out| {
            let mut b = self.launch(&f);
            b.arg(x.data_mut())
                .arg(&positions.data)
                .arg(inv_freq.data());
            for a in &geometry {
                b.arg(a);
            }
            b.arg(&p.attn_factor).arg(&cols_i).arg(yd).arg(out);
            // SAFETY: x holds n_tokens · n_heads rows of head_dim, positions n_tokens ids and
            // inv_freq n_rot / 2 factors (check_rope); y holds rows · cols floats (checked above)
            // and the slot was sized for rows · cols / 32 partner blocks. A block reads its row's
            // first cols values and rotates dims offset .. offset + n_rot ≤ head_dim, apart since
            // cols ≤ offset.
            unsafe { b.launch(cfg) }.map_err(dev(OP))
        })?;
        Ok(true)
    }
}

/// Whether [`CudaBackend::rope_split_fused`] runs (`GLINT_CUDA_QSPLIT=0`: rope, the copy and
/// the quantizer as three launches, to measure what one saves; the same bits either way).
fn qsplit_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_QSPLIT").map_or(true, |v| v != "0"))
}

/// Runs `launch`, a kernel that writes `y` (`rows × cols`) and its `partner` quantization,
/// with y's device memory under y's new state and an activation slot sized for that
/// quantization, then files the slot under that state, so the products that read y next find
/// it (`activation`).
fn written_with_slot(
    be: &CudaBackend,
    op: &'static str,
    y: &mut CudaBuf,
    partner: GgmlType,
    rows: usize,
    cols: usize,
    launch: impl FnOnce(&mut CudaSlice<f32>, &CudaSlice<u8>) -> Result<()>,
) -> Result<()> {
    let stride = act_bytes(partner, cols)?;
    let bytes = mul(op, rows, stride)?;
    let mut slots = be.quant.act.lock().unwrap_or_else(|p| p.into_inner());
    let (version, yd) = y.data_mut_versioned();
    let key = ActKey {
        version,
        partner,
        rows,
        cols,
    };
    let (i, _) = slots.find(be, key, bytes)?;
    launch(
        yd,
        slots.slots[i].as_ref().expect("found slots are allocated"),
    )?;
    slots.keys[i] = Some(key);
    Ok(())
}

/// The input of [`norm_activation`]: x itself, or the residual `h` and the addend `d` (h += d
/// first, then x = h).
pub(crate) enum NormIn<'a> {
    Plain(&'a CudaBuf),
    Add(&'a mut CudaBuf, &'a CudaBuf),
}

/// `y = rms_norm(x)` by a kernel that also quantizes y for `next` into an activation slot keyed
/// by y's new state (kernels/quant.cu `rms_norm_q8_k`), so next's product finds it there: one
/// launch where the norm and the quantization were two, with their bits (the norm kernels'
/// block size and row function, the quantizer's block function). False (nothing done) where
/// next's partner is not Q8_K, next reads rows of another width, the rows are not whole Q8_K
/// blocks, or slots are not reused; the caller then runs the plain norm.
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_activation(
    be: &CudaBackend,
    x: NormIn<'_>,
    w: &CudaBuf,
    rows: usize,
    dim: usize,
    eps: f32,
    y: &mut CudaBuf,
    next: &CudaWeight,
) -> Result<bool> {
    const OP: &str = "rms_norm";
    let k = kind_of(OP, next)?;
    if k.partner != GgmlType::Q8_K
        || next.cols() != dim
        || !dim.is_multiple_of(256)
        || rows == 0
        || !reuse_on()
        || !normq_on()
        || crate::gemm::applies_dense(be, next, rows)
    {
        return Ok(false);
    }
    let elems = mul(OP, rows, dim)?;
    match &x {
        NormIn::Plain(x) => need(OP, "x", elems, x.len)?,
        NormIn::Add(h, d) => {
            need(OP, "h", elems, h.len)?;
            need(OP, "d", elems, d.len)?;
        }
    }
    need(OP, "weight", dim, w.len)?;
    need(OP, "y", elems, y.len)?;
    let (dim_i, null) = (int(OP, dim)?, 0u64);
    let f = be.func(Family::Quant, "rms_norm_q8_k")?;
    written_with_slot(be, OP, y, k.partner, rows, dim, |yd, out| {
        let mut b = be.launch(&f);
        match x {
            NormIn::Plain(x) => b.arg(x.data()).arg(&null),
            NormIn::Add(h, d) => b.arg(h.data_mut()).arg(d.data()),
        };
        b.arg(w.data()).arg(yd).arg(out).arg(&dim_i).arg(&eps);
        // SAFETY: x (or h and d) and y hold rows × dim floats, w dim (checked above); the
        // kernel writes only h's and y's rows and the slot, sized for rows × dim / 256 Q8_K
        // blocks; one block a row, as the norm kernels.
        unsafe { b.launch(crate::elementwise::norm_grid(rows, dim)) }.map_err(dev(OP))
    })?;
    Ok(true)
}

/// Whether [`norm_activation`] runs (`GLINT_CUDA_NORMQ=0`: the norm and the quantization as
/// two launches, to measure what one saves; the same bits either way).
fn normq_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_NORMQ").map_or(true, |v| v != "0"))
}

/// Whether [`glu_activation`] runs (`GLINT_CUDA_GLU=0`: `silu_mul` and the quantization as
/// two launches, to measure what one saves; the same bits either way).
fn glu_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_GLU").map_or(true, |v| v != "0"))
}

/// Launches `kernel` (`per` elements a partner block, a warp a block when `warp`) over the
/// `elems` floats of x into `slot`.
#[allow(clippy::too_many_arguments)]
fn quantize(
    be: &CudaBackend,
    op: &'static str,
    kernel: &'static str,
    per: usize,
    per_warp: usize,
    x: &CudaBuf,
    elems: usize,
    out: &CudaSlice<u8>,
) -> Result<()> {
    let blocks = elems / per;
    let cfg = if per_warp > 0 {
        quantizer_grid(op, blocks, per_warp)?
    } else {
        // The float quantizers take four elements a thread (kernels/quant.cu).
        grid_1d(blocks.div_ceil(4))
    };
    let blocks_i = blocks as i64;
    let f = be.func(Family::Quant, kernel)?;
    let mut b = be.launch(&f);
    b.arg(x.data()).arg(out).arg(&blocks_i);
    // SAFETY: the kernel reads `elems` floats of x (checked by the caller) and writes
    // `elems / per` partner blocks into the slot (sized for them by `find`).
    unsafe { b.launch(cfg) }.map_err(dev(op))?;
    Ok(())
}

/// Warps a launch should have in flight before rows are split over several warps: about 16
/// per multiprocessor of an H100/H200 (132 of them), enough loads in flight to hide DRAM
/// latency; `GLINT_CUDA_MV_WARPS` sets the per-multiprocessor figure (to measure others: it
/// changes how rows are split, so results' last bits, the same way in every batch).
fn warps_wanted() -> usize {
    static W: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *W.get_or_init(|| {
        let per_sm = std::env::var("GLINT_CUDA_MV_WARPS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| (1..=64).contains(&v))
            .unwrap_or(16);
        132 * per_sm
    })
}

/// Units of a row a warp keeps at least when rows are split (two runs of 32 lanes by default);
/// `GLINT_CUDA_MV_MIN_UNITS` sets it (to measure whether GLM-5's 6144-wide rows, split four
/// ways at most by the default, gain from more warps each with fewer passes; like
/// `GLINT_CUDA_MV_WARPS` it changes how rows are split, the same way in every batch).
fn min_units_per_warp() -> usize {
    static U: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *U.get_or_init(|| {
        std::env::var("GLINT_CUDA_MV_MIN_UNITS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| (1..=1024).contains(&v))
            .unwrap_or(64)
    })
}

/// Warps per row group (kernels/quant.cu `ks`): 1 when the row groups fill the GPU, else up to
/// MV_WARPS_MAX, as long as each warp keeps at least [`min_units_per_warp`] units. It depends on
/// the weight's shape alone, so a row's sum is formed the same way whatever the batch.
fn warps_per_row(rows: usize, units: usize) -> usize {
    let groups = rows.div_ceil(MV_RPW);
    let min_units = min_units_per_warp();
    let mut ks = 1;
    while ks < MV_WARPS_MAX && groups.saturating_mul(ks) < warps_wanted() && units >= min_units * ks
    {
        ks *= 2;
    }
    ks
}

/// max(MV_ROWS, ks) warps a block: MV_ROWS / ks row groups, or one group of ks warps.
fn mv_grid(rows: usize, y_count: usize, ks: usize) -> LaunchConfig {
    let warps = MV_ROWS.max(ks);
    LaunchConfig {
        grid_dim: (
            rows.div_ceil(MV_RPW * (warps / ks)).max(1) as u32,
            y_count.clamp(1, GRID_YZ_MAX) as u32,
            1,
        ),
        block_dim: (32, warps as u32, 1),
        shared_mem_bytes: 0,
    }
}

/// Passes a warp's weight stage holds (kernels/quant.cu MV_STAGES).
const MV_STAGES: usize = 3;

/// Weight rows from which a one-token product stages its weights by default: the output head
/// (154,880 rows in GLM-5) and nothing else of the model. Measured on an H100 (docs/
/// performance.md, "Weight stages in shared memory"): the Q6_K head went from 53-66% to 91% of
/// the copy bandwidth, while products of a few thousand rows (one wave of blocks or a little
/// more) lost 2-15% to the stage's smaller occupancy.
const STAGE_MIN_ROWS: usize = 65536;

/// Whether a one-token product of `rows` rows stages its weights: by default from
/// STAGE_MIN_ROWS rows; `GLINT_CUDA_MV_STAGE=0` never, `=all` always (to compare; the sums are
/// the same bits either way).
fn stages(rows: usize) -> bool {
    static MODE: OnceLock<Option<bool>> = OnceLock::new();
    match MODE.get_or_init(|| match std::env::var("GLINT_CUDA_MV_STAGE").as_deref() {
        Ok("0") => Some(false),
        Ok("all") => Some(true),
        _ => None,
    }) {
        Some(on) => *on,
        None => rows >= STAGE_MIN_ROWS,
    }
}

/// Bytes of shared memory one warp's `stages` weight stages take in a one-token product of a
/// block type `ty` (kernels/quant.cu `Stage<W>`: passes of 1024 elements of each of MV_RPW
/// rows, widened to 16-byte boundaries).
fn stage_bytes_per_warp(ty: GgmlType, stages: usize) -> usize {
    let pass = 1024 / ty.block_size() * ty.type_size();
    stages * MV_RPW * (pass.next_multiple_of(16) + 16)
}

/// Stages of `mmids_*` (kernels/quant.cu `STAGED_KERNEL`).
const MMID_STAGES: usize = 2;

/// Whether one token's expert products run `mmids_*` (two weight stages, at most 64 registers,
/// so 8 experts × 2048 rows are one wave of blocks): opt-in with `GLINT_CUDA_MMID_STAGE=1`
/// until it has been timed on a GPU; the sums are the bits of `mmid_*` either way.
fn mmid_stages() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_MMID_STAGE").is_ok_and(|v| v == "1"))
}

/// The staged kernel `name` of type `ty` and `grid` with its warps' stages in dynamic shared
/// memory, opting the kernel in past 48 KiB; None (run the unstaged one) where the device's
/// per-block limit is smaller.
fn with_stage(
    be: &CudaBackend,
    name: &'static str,
    ty: GgmlType,
    stages: usize,
    mut grid: LaunchConfig,
) -> Result<Option<(CudaFunction, LaunchConfig)>> {
    let bytes = stage_bytes_per_warp(ty, stages) * grid.block_dim.1 as usize;
    let f = be.func(Family::Quant, name)?;
    let op = "allowing a product kernel its weight stages";
    if bytes > be.smem.dynamic_limit(be, op, &f, name)? {
        return Ok(None);
    }
    be.smem.allow(be, op, &f, name, bytes)?;
    grid.shared_mem_bytes = bytes as u32;
    Ok(Some((f, grid)))
}

/// Rows and tokens of one `mmq_*` block (kernels/quant.cu MMQ_BM, MMQ_BN).
const MMQ_BM: usize = 64;
const MMQ_BN: usize = 32;
/// Rows of a wide block (`mmq_q4_k_wide`, `mmq_q5_k_wide`: 256 threads, each step's
/// activations read once for twice the rows), and the bytes a token of its staged activations
/// (kernels/quant.cu MMQ_AS).
const MMQ_WIDE_BM: usize = 128;
const MMQ_AS: usize = 272;

/// The wide tensor-core kernels (kernels/quant.cu's `MMQ_K4` lines of 128 rows, and
/// `MMQ_Q6K`'s): type, token places, buffers, name. Those left out would not fit two blocks in
/// a multiprocessor's shared memory.
const MMQ_WIDE: [(GgmlType, usize, usize, &str); 14] = [
    (GgmlType::Q4_K, 32, 2, "mmq_q4_k_wide"),
    (GgmlType::Q4_K, 32, 3, "mmq_q4_k_wide_s3"),
    (GgmlType::Q4_K, 32, 4, "mmq_q4_k_wide_s4"),
    (GgmlType::Q4_K, 16, 2, "mmq_q4_k_wide16"),
    (GgmlType::Q4_K, 16, 3, "mmq_q4_k_wide16_s3"),
    (GgmlType::Q4_K, 16, 4, "mmq_q4_k_wide16_s4"),
    (GgmlType::Q5_K, 32, 2, "mmq_q5_k_wide"),
    (GgmlType::Q5_K, 32, 3, "mmq_q5_k_wide_s3"),
    (GgmlType::Q5_K, 16, 2, "mmq_q5_k_wide16"),
    (GgmlType::Q5_K, 16, 3, "mmq_q5_k_wide16_s3"),
    (GgmlType::Q5_K, 16, 4, "mmq_q5_k_wide16_s4"),
    (GgmlType::Q6_K, 32, 2, "mmq_q6_k_wide"),
    (GgmlType::Q6_K, 16, 2, "mmq_q6_k_wide16"),
    (GgmlType::Q6_K, 16, 3, "mmq_q6_k_wide16_s3"),
];

/// Shared-memory bytes a row of a wide kernel's weight buffer takes: the block, or for Q6_K's
/// 2-byte-aligned 210-byte blocks the 16-byte pieces that cover it, padded (kernels/quant.cu
/// `Q6K_ROW`).
fn wide_row_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q6_K {
        Q6K_ROW
    } else {
        ty.type_size()
    }
}
const Q6K_ROW: usize = 240;

/// Dynamic shared memory of a wide kernel: `stages` buffers of 128 weight rows and `places`
/// staged activation blocks (kernels/quant.cu `MMQ_K4_SMEM`, `Q6K_WIDE_SMEM`).
fn wide_smem(ty: GgmlType, places: usize, stages: usize) -> usize {
    stages * (MMQ_WIDE_BM * wide_row_bytes(ty) + places * MMQ_AS)
}

/// The wide kernel of `ty` for `places` token places with the most buffers up to `stages`
/// that it has (None: the type has no wide kernels), and its buffer count.
fn mmq_wide(ty: GgmlType, places: usize, stages: usize) -> Option<(&'static str, usize)> {
    MMQ_WIDE
        .iter()
        .filter(|&&(t, p, s, _)| t == ty && p == places && s <= stages)
        .max_by_key(|&&(_, _, s, _)| s)
        .map(|&(_, _, s, name)| (name, s))
}

/// The `_fit` kernels (kernels/quant.cu `MMQ_FIT`): expert products over tiles of up to
/// [`MMQ_BN`] pairs, each tile run on 16 places or 32 as it fills them; with their buffers.
const MMQ_FIT: [(GgmlType, usize, &str); 3] = [
    (GgmlType::Q4_K, 3, "mmq_q4_k_fit"),
    (GgmlType::Q5_K, 3, "mmq_q5_k_fit"),
    (GgmlType::Q6_K, 2, "mmq_q6_k_fit"),
];

/// The `_fit` kernel where an expert product would take 16-place tiles, unless
/// `GLINT_CUDA_MMQ_FIT=0` (the 16-place kernels then run; the same bits either way).
fn mmq_fit(ty: GgmlType, places: usize) -> Option<(&'static str, usize)> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("GLINT_CUDA_MMQ_FIT").map_or(true, |v| v != "0"));
    if !on || places != 16 {
        return None;
    }
    MMQ_FIT
        .iter()
        .find(|&&(t, _, _)| t == ty)
        .map(|&(_, s, name)| (name, s))
}

/// Buffers the wide kernels copy through (`GLINT_CUDA_MMQ_STAGES`, 2 to 4; the same bits
/// with any: this only compares speed): two steps' copies in flight while a step computes. On
/// an H100 (call AQ, docs/performance.md) 3 gave pp512 +0.6-0.9% over 2 in each of five pairs,
/// 4 nothing more: the expert products are not waiting on their copies' latency.
fn mmq_stages() -> usize {
    static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *S.get_or_init(|| parse_stages(std::env::var("GLINT_CUDA_MMQ_STAGES").ok().as_deref()))
}

fn parse_stages(v: Option<&str>) -> usize {
    v.and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(MMQ_STAGES_DEFAULT, |s| s.clamp(2, 4))
}

const MMQ_STAGES_DEFAULT: usize = 3;

/// Whether the wide kernels run for weights of `ty` over `rows` rows: where the type has them
/// and the rows pass one 64-row block, unless `GLINT_CUDA_MMQ_WIDE=0` (or, for Q6_K only,
/// `GLINT_CUDA_MMQ_WIDE_Q6K=0`; the same bits either way: these only compare speed).
fn wide_applies(ty: GgmlType, rows: usize) -> bool {
    static ON: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    let (on, q6k) =
        *ON.get_or_init(|| (!off("GLINT_CUDA_MMQ_WIDE"), !off("GLINT_CUDA_MMQ_WIDE_Q6K")));
    on && (q6k || ty != GgmlType::Q6_K) && rows > MMQ_BM && mmq_wide(ty, MMQ_BN, 2).is_some()
}

/// Token places of an expert-indexed product's tensor-core tiles: 16 where the wide kernels
/// run and the experts average at most 16 pairs (a prefill's: 512 tokens × 8 of 256 experts
/// filled 32-place tiles a third), else [`MMQ_BN`]; `GLINT_CUDA_MMQ16=0` keeps 32 (the same
/// bits; to compare speed in one binary).
fn mmq_places(ty: GgmlType, rows: usize, pairs: usize, slices: usize) -> usize {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("GLINT_CUDA_MMQ16").map_or(true, |v| v != "0"));
    if on && wide_applies(ty, rows) && pairs <= 16 * slices {
        16
    } else {
        MMQ_BN
    }
}

/// The function and launch of tensor-core kernel `name` (weights of `ty`) over `rows` rows and
/// `tiles` token tiles of `places` tokens ([`MMQ_BN`], or 16 from [`mmq_places`]): the wide
/// kernel where [`wide_applies`]. The wide kernels' two weight and two activation buffers are
/// kernels/quant.cu `MMQ_K4_SMEM` bytes: static shared memory up to 48 KiB, else dynamic
/// (54-62 KiB with 32 places).
fn mmq_launch(
    be: &CudaBackend,
    op: &'static str,
    ty: GgmlType,
    name: &'static str,
    rows: usize,
    tiles: usize,
    places: usize,
) -> Result<(CudaFunction, LaunchConfig)> {
    match mmq_wide(ty, places, mmq_stages()).filter(|_| wide_applies(ty, rows)) {
        Some(wide) => wide_launch(be, op, ty, wide, places, rows, tiles),
        None => Ok((be.func(Family::Quant, name)?, mmq_grid(rows, tiles, MMQ_BM))),
    }
}

/// The function and launch of a 128-row kernel `name` with `stages` buffers of `places`
/// token places ([`mmq_wide`]'s, or a `_fit` kernel's with its 32-place pass's places): its
/// buffers are dynamic shared memory past 48 KiB (every Q6_K one), static up to that.
fn wide_launch(
    be: &CudaBackend,
    op: &'static str,
    ty: GgmlType,
    (name, stages): (&'static str, usize),
    places: usize,
    rows: usize,
    tiles: usize,
) -> Result<(CudaFunction, LaunchConfig)> {
    let f = be.func(Family::Quant, name)?;
    let bytes = wide_smem(ty, places, stages);
    let dynamic = if bytes > 48 * 1024 { bytes } else { 0 };
    if dynamic > 0 {
        be.smem.allow(be, op, &f, name, dynamic)?;
    }
    let grid = LaunchConfig {
        shared_mem_bytes: dynamic as u32,
        ..mmq_grid(rows, tiles, MMQ_WIDE_BM)
    };
    Ok((f, grid))
}

/// One `mmq_*` block of `bm` rows (2 · `bm` threads) per token tile (tiles past the grid's
/// height are strided over it).
fn mmq_grid(rows: usize, tiles: usize, bm: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            rows.div_ceil(bm) as u32,
            tiles.clamp(1, GRID_YZ_MAX) as u32,
            1,
        ),
        block_dim: (2 * bm as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The tensor-core kernel for batched products of a type that has one,
/// unless `GLINT_CUDA_MMQ=0` (the per-unit kernels then run; both give the same bits, so
/// this only compares speed).
fn mmq_kernel(ty: GgmlType) -> Option<&'static str> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var("GLINT_CUDA_MMQ").map_or(true, |v| v != "0")) {
        return None;
    }
    kind(ty).and_then(|k| k.mmq)
}

/// Work units per weight row (kernels/quant.cu `cols / QK * NSUB`): an element of a float
/// type, 32 elements of every block type.
fn units(ty: GgmlType, cols: usize) -> usize {
    if f32x4(ty, cols) {
        cols / 4
    } else if ty.block_size() == 1 {
        cols
    } else {
        cols / 32
    }
}

pub(crate) fn matmul(
    be: &CudaBackend,
    w: &CudaWeight,
    x: &CudaBuf,
    n: usize,
    y: &mut CudaBuf,
) -> Result<()> {
    matmul_with(be, w, x, n, y, None)
}

/// The activation of a cuBLAS product (gemm.rs): `rows × cols` of x rounded to bf16 in a
/// slot (so the products of one input round it once), or None for an F32 weight (x as is).
fn gemm_activation<'a>(
    be: &CudaBackend,
    op: &'static str,
    w: &CudaWeight,
    x: &'a CudaBuf,
    rows: usize,
    cols: usize,
    slots: &'a mut ActSlots,
) -> Result<Option<&'a CudaSlice<u8>>> {
    if w.ty == GgmlType::F32 {
        return Ok(None);
    }
    let bf16 = kind_for(op, GgmlType::BF16)?;
    match activation(be, op, bf16, x, rows, cols, slots)?.0 {
        Act::Quant(s) => Ok(Some(s)),
        Act::F32(_) => Err(CoreError::Param {
            op,
            msg: "the bf16 activation has no quantizer".into(),
        }),
    }
}

/// `y[t][h] = W[h] · x[t][h]` over the `heads` slices of `w` on cuBLAS (gemm.rs), where that
/// path applies; false (nothing done) otherwise, and the caller groups the pairs by head.
pub(crate) fn per_head_on_cublas(
    be: &CudaBackend,
    w: &CudaWeight,
    heads: usize,
    x: &CudaBuf,
    n: usize,
    y: &mut CudaBuf,
) -> Result<bool> {
    const OP: &str = "per_head_matmul";
    if n == 0 || !crate::gemm::applies_heads(be, w, heads, n) {
        return Ok(false);
    }
    let k = kind_of(OP, w)?;
    let (cols, rows, pairs) = (w.cols(), w.rows(), mul(OP, n, heads)?);
    need(OP, "x", mul(OP, pairs, cols)?, x.len)?;
    need(OP, "y", mul(OP, pairs, rows)?, y.len)?;
    let mut g = be.quant.act.lock().unwrap_or_else(|p| p.into_inner());
    let act = gemm_activation(be, OP, w, x, pairs, cols, &mut g)?;
    crate::gemm::matmul(be, w, k.dequant, x, act, heads, n, y)
}

/// A second weight of a pair launch and its output (kernels/quant.cu `PAIR_SWITCH`).
pub(crate) type Second<'a> = Option<(&'a CudaWeight, &'a mut CudaBuf)>;

/// Whether `a` and `b` can share a launch: the same type and shape.
fn pairable(a: &CudaWeight, b: &CudaWeight) -> bool {
    a.ty == b.ty && a.cols() == b.cols() && a.rows() == b.rows() && a.slices() == b.slices()
}

/// Whether [`matmul_pair`] and [`mul_mat_id_pair`] may share a launch (`GLINT_CUDA_PAIR=0`:
/// never, to measure what it saves; the outputs are the same bits either way).
fn pair_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_PAIR").map_or(true, |v| v != "0"))
}

/// `ya = A·x`, `yb = B·x`: one launch for one token where A and B match (a gate and an up
/// projection), each output the bits of its own launch; two launches otherwise.
pub(crate) fn matmul_pair(
    be: &CudaBackend,
    a: &CudaWeight,
    b: &CudaWeight,
    x: &CudaBuf,
    n: usize,
    ya: &mut CudaBuf,
    yb: &mut CudaBuf,
) -> Result<()> {
    if n == 1 && pairable(a, b) && pair_on() {
        return matmul_with(be, a, x, n, ya, Some((b, yb)));
    }
    matmul(be, a, x, n, ya)?;
    matmul(be, b, x, n, yb)
}

/// A pair launch's second weight must match the first and its output hold `len` floats; one
/// token only (the batched kernels have no second half).
fn check_second(
    op: &'static str,
    w: &CudaWeight,
    second: &Second<'_>,
    n: usize,
    len: usize,
) -> Result<()> {
    let Some((w2, y2)) = second else {
        return Ok(());
    };
    if n != 1 || !pairable(w, w2) {
        return Err(CoreError::Param {
            op,
            msg: "a pair launch needs one token and two weights of one type and shape".into(),
        });
    }
    need(op, "second y", len, y2.len)
}

/// Pushes the second weight and output of a pair launch, or nulls, and sets grid.z.
fn push_second<'a>(
    b: &mut crate::launch::Launch<'a>,
    second: &'a mut Second<'_>,
    null: &'a u64,
    grid: &mut LaunchConfig,
) {
    match second {
        Some((w2, y2)) => {
            b.arg(&w2.data).arg(y2.data_mut());
            grid.grid_dim.2 = 2;
        }
        None => {
            b.arg(null).arg(null);
        }
    }
}

fn matmul_with(
    be: &CudaBackend,
    w: &CudaWeight,
    x: &CudaBuf,
    n: usize,
    y: &mut CudaBuf,
    mut second: Second<'_>,
) -> Result<()> {
    const OP: &str = "matmul";
    let k = kind_of(OP, w)?;
    if w.slices() != 1 {
        return Err(CoreError::Param {
            op: OP,
            msg: format!("weight has {} slices; use mul_mat_id", w.slices()),
        });
    }
    let (cols, rows) = (w.cols(), w.rows());
    need(OP, "x", mul(OP, n, cols)?, x.len)?;
    need(OP, "y", mul(OP, n, rows)?, y.len)?;
    check_second(OP, w, &second, n, rows)?;
    if n == 0 || rows == 0 {
        return Ok(());
    }
    let (cols_i, rows_i, n_i) = (int(OP, cols)?, int(OP, rows)?, int(OP, n)?);
    let mut g = be.quant.act.lock().unwrap_or_else(|p| p.into_inner());
    if crate::gemm::applies_dense(be, w, n) {
        let act = gemm_activation(be, OP, w, x, n, cols, &mut g)?;
        if crate::gemm::matmul(be, w, k.dequant, x, act, 1, n, y)? {
            return Ok(());
        }
    }
    let (act, stride) = activation(be, OP, k, x, n, cols, &mut g)?;
    let ks = warps_per_row(rows, units(w.ty, cols));
    let ks_i = ks as i32;
    // Batches of more than MV_TOK tokens of the MMQ types go to the tensor cores (the same bits
    // as one token alone). Not fewer: a tile of up to 8 tokens wastes most of the MMA and of
    // the block epilogue, and over few rows makes too few blocks (H200, 8 sequences: 0.87x
    // even with the output head alone on the tensor cores, 0.62x with every weight).
    let (f, mut grid) = match mmq_kernel(w.ty).filter(|_| n > MV_TOK) {
        Some(name) => mmq_launch(be, OP, w.ty, name, rows, n.div_ceil(MMQ_BN), MMQ_BN)?,
        None if takes_wide_f32(k, n) => wide_f32_launch(be, OP, rows, n)?,
        None if n == 1 => {
            let grid = mv_grid(rows, 1, ks);
            let staged = match k.matvec1s {
                Some(s) if stages(rows) => with_stage(be, s, w.ty, MV_STAGES, grid)?,
                _ => None,
            };
            match staged {
                Some(fg) => fg,
                None => (be.func(Family::Quant, k.matvec1)?, grid),
            }
        }
        None => (
            be.func(Family::Quant, k.matvec)?,
            mv_grid(rows, n.div_ceil(MV_TOK), ks),
        ),
    };
    let mut b = be.launch(&f);
    b.arg(&w.data);
    act.push(&mut b);
    b.arg(y.data_mut())
        .arg(&cols_i)
        .arg(&rows_i)
        .arg(&n_i)
        .arg(&stride)
        .arg(&ks_i);
    // matvec_* and mmq_* without tiles: no grouping (null order and tiles, never read);
    // matvec1_* and matvec1s_* a pair's second weight and output, or nulls.
    let (null, zero) = (0u64, 0i32);
    if n > 1 {
        b.arg(&null).arg(&null).arg(&zero).arg(&zero);
    } else {
        push_second(&mut b, &mut second, &null, &mut grid);
    }
    // SAFETY: the kernel reads rows × row_bytes of w (and of a pair's second weight, the same
    // shape) (checked at upload), n activation rows and writes n × rows floats of y (and of
    // the second output) (checked above); token tiles stride over grid.y, and
    // mmq_* clamps its row and token reads to the last row and token.
    unsafe { b.launch(grid) }.map_err(dev(OP))?;
    Ok(())
}

/// The rows an expert-indexed product's split is chosen for: the weight's rows times the
/// experts a token uses (one token's launch covers that many), which splits fewer rows over
/// several warps than the weight's rows alone would (`GLINT_CUDA_MMID_KS=rows`, the earlier
/// choice: 1.8-3.6% slower decode on H100 and H200). Either depends on the weight and the
/// model only, never on the batch.
fn mmid_rows(rows: usize, n_used: usize) -> usize {
    static ROWS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ROWS.get_or_init(|| std::env::var("GLINT_CUDA_MMID_KS").is_ok_and(|v| v == "rows")) {
        rows
    } else {
        rows.saturating_mul(n_used)
    }
}

/// Row groups a warp of `mmid_*` takes in a one-token product (kernels/quant.cu `mmid_short`,
/// asked for with ks = −groups): 4 for rows of at most 8 blocks, 2 for at most 16, else 1 (the
/// plain kernel). The types whose unit is one 32-element block (`ShortRows`), one warp a row
/// group, rows a multiple of MV_RPW. GLM-5's per-head products in decode are such rows
/// (`attn_k_b` 6 Q8_0 blocks, `attn_v_b` 16), on which `mmid_*` keeps only 6 and 16 of a warp's
/// 32 lanes reading: 6.7 MB in 12.1 µs and 8.9 MB in 8.5 µs (call AU, H100). The bits are the
/// plain kernel's; tg64 moved within its spread (call AY, docs/performance.md), the same bytes
/// read with a quarter or half of the warps.
fn short_groups(ty: GgmlType, cols: usize, rows: usize, ks: usize) -> usize {
    let one_unit_blocks = ty.block_size() == 32 && kind(ty).is_some_and(|k| k.mmq.is_some());
    if !one_unit_blocks || ks != 1 || !rows.is_multiple_of(MV_RPW) || short_off() {
        return 1;
    }
    match cols / 32 {
        1..=8 => 4,
        9..=16 => 2,
        _ => 1,
    }
}

/// `GLINT_CUDA_MMID_SHORT=0`: one-token products of short rows on the plain `mmid_*` (to
/// compare; the same bits).
fn short_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("GLINT_CUDA_MMID_SHORT").is_ok_and(|v| v == "0"))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    n_used: usize,
    x: &CudaBuf,
    x_per_slot: bool,
    n: usize,
    y: &mut CudaBuf,
) -> Result<()> {
    mul_mat_id_with(be, w, ids, false, n_used, x, x_per_slot, n, y, None)
}

/// `y[t][h] = W[h] · x[t][h]` (Backend::per_head_matmul) as an expert-indexed product whose
/// pair `t·heads + h` uses slice h: `ids` says so (what the one-token kernels read), and a
/// grouping of many pairs is computed from the indices (`mmid_group_heads`) instead of counted
/// off the ids (`mmid_group`, one block: 52 µs for a 512-token prompt's 32,768 pairs on an
/// H100, twice a layer, call AX). The grouping only orders pairs, so the bits are the same.
pub(crate) fn per_head(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    heads: usize,
    x: &CudaBuf,
    n: usize,
    y: &mut CudaBuf,
) -> Result<()> {
    let by_head = heads <= w.slices() && heads_grouping_on();
    mul_mat_id_with(be, w, ids, by_head, heads, x, true, n, y, None)
}

/// `GLINT_CUDA_HEAD_GROUP=0`: per-head products grouped by `mmid_group` (to compare; the same
/// bits).
fn heads_grouping_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLINT_CUDA_HEAD_GROUP").map_or(true, |v| v != "0"))
}

/// [`matmul_pair`] for expert-indexed products: one launch for one token's experts where A
/// and B match, each output the bits of its own launch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat_id_pair(
    be: &CudaBackend,
    a: &CudaWeight,
    b: &CudaWeight,
    ids: &CudaIds,
    n_used: usize,
    x: &CudaBuf,
    x_per_slot: bool,
    n: usize,
    ya: &mut CudaBuf,
    yb: &mut CudaBuf,
) -> Result<()> {
    if n == 1 && pairable(a, b) && pair_on() {
        return mul_mat_id_with(
            be,
            a,
            ids,
            false,
            n_used,
            x,
            x_per_slot,
            n,
            ya,
            Some((b, yb)),
        );
    }
    mul_mat_id(be, a, ids, n_used, x, x_per_slot, n, ya)?;
    mul_mat_id(be, b, ids, n_used, x, x_per_slot, n, yb)
}

#[allow(clippy::too_many_arguments)]
/// `by_head`: pair p uses slice p % n_used (a per-head product; `ids` says the same).
fn mul_mat_id_with(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    by_head: bool,
    n_used: usize,
    x: &CudaBuf,
    x_per_slot: bool,
    n: usize,
    y: &mut CudaBuf,
    mut second: Second<'_>,
) -> Result<()> {
    const OP: &str = "mul_mat_id";
    let k = kind_of(OP, w)?;
    let (cols, rows, slices) = (w.cols(), w.rows(), w.slices());
    let pairs = mul(OP, n, n_used)?;
    need(OP, "ids", pairs, ids.len)?;
    let x_rows = if x_per_slot { pairs } else { n };
    need(OP, "x", mul(OP, x_rows, cols)?, x.len)?;
    need(OP, "y", mul(OP, pairs, rows)?, y.len)?;
    check_second(OP, w, &second, n, mul(OP, pairs, rows)?)?;
    if pairs == 0 || rows == 0 {
        return Ok(());
    }
    let (cols_i, rows_i, slices_i) = (int(OP, cols)?, int(OP, rows)?, int(OP, slices)?);
    let (used_i, pairs_i) = (int(OP, n_used)?, int(OP, pairs)?);
    let per_slot_i = x_per_slot as i32;
    let mut g = be.quant.act.lock().unwrap_or_else(|p| p.into_inner());
    let (act, stride) = activation(be, OP, k, x, x_rows, cols, &mut g)?;
    let ks = warps_per_row(mmid_rows(rows, n_used), units(w.ty, cols));
    let ks_i = ks as i32;
    if grouped(n, pairs, slices) {
        // Tensor-core tiles of up to MMQ_BN pairs once the experts average more than MV_TOK.
        let mmq = mmq_kernel(w.ty).filter(|_| pairs > MV_TOK * slices);
        let tile = match mmq {
            Some(_) => mmq_places(w.ty, rows, pairs, slices),
            None => MV_TOK,
        };
        // The `_fit` kernels take tiles of up to 32 pairs where 16 places would run.
        let fit = mmq.and_then(|_| mmq_fit(w.ty, tile));
        let tile = if fit.is_some() { MMQ_BN } else { tile };
        let tile_i = tile as i32;
        be.fork.main_only(OP)?;
        let mut gs = be.quant.group.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = ensure(be, &mut gs, group_words(pairs, slices))?;
        let (mut order, mut tiles) = scratch.split_at_mut(pairs);
        if by_head {
            let f = be.func(Family::Quant, "mmid_group_heads")?;
            let mut b = be.launch(&f);
            let n_i = int(OP, n)?;
            b.arg(&n_i)
                .arg(&used_i)
                .arg(&mut order)
                .arg(&mut tiles)
                .arg(&tile_i);
            // SAFETY: writes `pairs` = n · n_used order entries and 1 + 3 · n_used · ⌈n / tile⌉
            // ≤ 1 + 3·max_tiles tile words (n_used ≤ slices), which the scratch holds
            // (group_words); every pair's slice p % n_used is below slices.
            unsafe { b.launch(grid_1d(pairs)) }.map_err(dev(OP))?;
        } else {
            let f = be.func(Family::Quant, "mmid_group")?;
            let mut b = be.launch(&f);
            b.arg(&ids.data)
                .arg(&pairs_i)
                .arg(&slices_i)
                .arg(&mut order)
                .arg(&mut tiles)
                .arg(y.data_mut())
                .arg(&rows_i)
                .arg(&tile_i);
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (GROUP_THREADS, 1, 1),
                shared_mem_bytes: (slices * 4) as u32,
            };
            // SAFETY: reads `pairs` ids, writes `pairs` order entries and at most 1 + 3·max_tiles
            // tile words (the scratch holds group_words), and zero rows of y for pairs whose id is
            // past the last slice (y holds pairs × rows, checked above); shared memory holds one
            // count per slice (slices ≤ GROUP_MAX_SLICES, checked by `grouped`).
            unsafe { b.launch(cfg) }.map_err(dev(OP))?;
        }
        let (f, grid) = match (mmq, fit) {
            (Some(_), Some(fit)) => wide_launch(
                be,
                OP,
                w.ty,
                fit,
                tile,
                rows,
                max_tiles(pairs, slices, tile),
            )?,
            (Some(m), None) => {
                mmq_launch(be, OP, w.ty, m, rows, max_tiles(pairs, slices, tile), tile)?
            }
            (None, _) => (
                be.func(Family::Quant, k.matvec)?,
                mv_grid(rows, max_tiles(pairs, slices, tile), ks),
            ),
        };
        let mut b = be.launch(&f);
        b.arg(&w.data);
        act.push(&mut b);
        b.arg(y.data_mut())
            .arg(&cols_i)
            .arg(&rows_i)
            .arg(&pairs_i)
            .arg(&stride)
            .arg(&ks_i)
            .arg(&mut order)
            .arg(&mut tiles)
            .arg(&used_i)
            .arg(&per_slot_i);
        // SAFETY: the tiles name slices < `slices` and pairs < `pairs`, whose x rows and y rows
        // are checked above; mmid_group made them of at most `tile` pairs, what the kernel
        // reads.
        unsafe { b.launch(grid) }.map_err(dev(OP))?;
        return Ok(());
    }
    let groups = short_groups(w.ty, cols, rows, ks);
    let grid = mv_grid(rows.div_ceil(groups), pairs, ks);
    let ks_i = if groups > 1 { -(groups as i32) } else { ks_i };
    // mmids_* is built for blocks of MV_ROWS warps: one warp a row group.
    let staged = match k.mmids {
        Some(s) if ks == 1 && groups == 1 && mmid_stages() => {
            with_stage(be, s, w.ty, MMID_STAGES, grid)?
        }
        _ => None,
    };
    let (f, mut grid) = match staged {
        Some(fg) => fg,
        None => (be.func(Family::Quant, k.mmid)?, grid),
    };
    let mut b = be.launch(&f);
    b.arg(&w.data).arg(&ids.data);
    act.push(&mut b);
    b.arg(y.data_mut())
        .arg(&cols_i)
        .arg(&rows_i)
        .arg(&slices_i)
        .arg(&used_i)
        .arg(&pairs_i)
        .arg(&per_slot_i)
        .arg(&stride)
        .arg(&ks_i);
    let null = 0u64;
    push_second(&mut b, &mut second, &null, &mut grid);
    // SAFETY: ids holds `pairs` entries; an id ≥ slices writes zeros and reads nothing; x and
    // y sizes (and a pair's second output, its weight the first's shape) are checked above.
    unsafe { b.launch(grid) }.map_err(dev(OP))?;
    Ok(())
}

pub(crate) fn get_rows(
    be: &CudaBackend,
    w: &CudaWeight,
    ids: &CudaIds,
    n: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    const OP: &str = "get_rows";
    let k = kind_of(OP, w)?;
    let cols = w.cols();
    need(OP, "ids", n, ids.len)?;
    need(OP, "out", mul(OP, n, cols)?, out.len)?;
    if n == 0 || cols == 0 {
        return Ok(());
    }
    let (cols_i, n_i) = (int(OP, cols)?, int(OP, n)?);
    // Rows of every slice, in slice-major order, like the CPU backend.
    let total = mul(OP, w.rows(), w.slices())? as i64;
    let f = be.func(Family::Quant, k.get_rows)?;
    let mut b = be.launch(&f);
    b.arg(&w.data)
        .arg(&ids.data)
        .arg(out.data_mut())
        .arg(&cols_i)
        .arg(&total)
        .arg(&n_i);
    let cfg = LaunchConfig {
        grid_dim: (n.min(GRID_YZ_MAX) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: ids holds n entries, out n × cols floats; an id past the last row writes zeros.
    unsafe { b.launch(cfg) }.map_err(dev(OP))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short rows take 4 or 2 row groups a warp exactly for kernels/quant.cu's `ShortRows` types
    /// (the `Unit32` and `Legacy` structs of one unit a block), one warp a row group and rows in
    /// whole groups; GLM-5's per-head products in decode take 4 (`attn_k_b`) and 2 (`attn_v_b`).
    #[test]
    fn short_rows_for_one_unit_blocks() {
        use GgmlType::*;
        let short = [Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4];
        for &ty in GgmlType::ALL {
            let cols = 6 * ty.block_size();
            let want = if short.contains(&ty) { 4 } else { 1 };
            assert_eq!(short_groups(ty, cols, 512, 1), want, "{ty}");
        }
        assert_eq!(short_groups(Q8_0, 192, 512, 1), 4);
        assert_eq!(short_groups(Q8_0, 512, 256, 1), 2);
        assert_eq!(short_groups(Q8_0, 544, 256, 1), 1);
        assert_eq!(short_groups(Q8_0, 192, 510, 1), 1);
        assert_eq!(short_groups(Q8_0, 192, 512, 2), 1);
    }

    /// The matvec launch shapes the host computes are the kernels' (kernels/quant.cu).
    #[test]
    fn matvec_shapes_match_the_kernels() {
        let q = crate::compile::Family::Quant;
        assert_eq!(q.define("MV_ROWS"), MV_ROWS);
        assert_eq!(q.define("MV_RPW"), MV_RPW);
        assert_eq!(q.define("MV_TOK"), MV_TOK);
        assert_eq!(q.define("MV_WARPS_MAX"), MV_WARPS_MAX);
        assert_eq!(q.define("MV_WIDE_WARPS"), MV_WIDE_WARPS);
        assert_eq!(q.define("MV_TILE_ROWS"), MV_TILE_ROWS);
        assert_eq!(q.define("MV_TILE_TOKS"), MV_TILE_TOKS);
    }

    /// Every type glint-quant gives an activation partner has a row, with glint-quant's partner
    /// (Q8_1 aside, see KINDS), and kernel names are unique.
    #[test]
    fn table_covers_glint_quant() {
        for &ty in GgmlType::ALL {
            let t = glint_quant::traits(ty);
            match (t.vec_dot_type, kind(ty)) {
                (Some(p), Some(k)) if ty == GgmlType::Q8_1 => {
                    assert_eq!(p, GgmlType::Q8_1);
                    assert_eq!(k.partner, GgmlType::F32);
                }
                (Some(p), Some(k)) => assert_eq!(k.partner, p, "{ty}"),
                (None, None) => {}
                (a, b) => panic!("{ty}: vec_dot_type {a:?}, CUDA row {}", b.is_some()),
            }
        }
        let mut names: Vec<_> = KINDS.iter().map(|k| k.matvec).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len());
    }

    /// Inside a fork, a chain never finds a quantization the other chain wrote (unless the side
    /// waits for main since) and never takes a slot the other chain touched (what the two
    /// streams would race on), checked against a record of every pick kept here; outside one,
    /// a key just filed is found again.
    #[test]
    fn forked_branches_keep_to_their_slots() {
        let mut s = ActSlots::default();
        let key = |v: u64| ActKey {
            version: v,
            partner: GgmlType::Q8_K,
            rows: 1,
            cols: 256,
        };
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for round in 0..200 {
            // Before the fork: a few quantizations both branches may read.
            for _ in 0..3 {
                let k = key(next(10));
                let (i, hit) = s.pick(k, None, true).unwrap();
                if !hit {
                    s.keys[i] = Some(k);
                }
                assert_eq!(s.pick(k, None, true), Some((i, true)), "round {round}");
            }
            s.fork_edge();
            // touched[b][i], wrote[b][i]: what branch b did to slot i since the fork.
            let mut touched = [[false; ACT_SLOTS]; 2];
            let mut wrote = [[false; ACT_SLOTS]; 2];
            for _ in 0..next(6) {
                if next(4) == 0 {
                    // A side piece after the main chain so far: it may read what main wrote.
                    s.side_sees_main();
                    wrote[0] = [false; ACT_SLOTS];
                }
                let b = next(2) as usize;
                let k = key(next(12));
                let (i, hit) = s
                    .pick(k, Some(b as u8), true)
                    .expect("slots for two branches");
                let o = 1 - b;
                if hit {
                    assert!(
                        !wrote[o][i],
                        "round {round}: found what the other branch wrote"
                    );
                    assert_eq!(s.keys[i], Some(k));
                } else {
                    assert!(
                        !touched[o][i],
                        "round {round}: took the other branch's slot"
                    );
                    wrote[b][i] = true;
                    s.keys[i] = Some(k);
                }
                touched[b][i] = true;
            }
            s.fork_edge();
        }
    }

    /// Each kernel the table names, tensor-core ones included, is defined in kernels/quant.cu
    /// (read from the table, not `mmq_kernel`, so `GLINT_CUDA_MMQ=0` cannot skip the check).
    #[test]
    fn kernels_exist_in_source() {
        let src = crate::compile::Family::Quant.source();
        for k in KINDS {
            let name = k.matvec.trim_start_matches("matvec_");
            assert!(
                src.contains(&format!("QUANT_KERNELS({name}, ")),
                "{name} missing"
            );
            if let Some((q, _, _)) = quantizer(k.partner) {
                assert!(src.contains(&format!("void {q}(")), "{q} missing");
            }
            if let Some(m) = k.mmq {
                let staged = format!("MMQ_STAGED({}, ", m.trim_start_matches("mmq_"));
                assert!(
                    src.contains(&format!(") {m}(MMQ_ARGS)"))
                        || src.contains(&staged)
                        || src.contains(&format!("\nMMQ_K4({m}, ")),
                    "{m} missing"
                );
            }
        }
    }

    /// The wide kernels' block (threads, rows) and staged activation bytes, which size their
    /// launch and dynamic shared memory here, are the kernels' (kernels/quant.cu).
    #[test]
    fn wide_mmq_matches_the_kernels() {
        let src = crate::compile::Family::Quant.source();
        assert_eq!(crate::compile::Family::Quant.define("MMQ_AS"), MMQ_AS);
        assert_eq!(crate::compile::Family::Quant.define("MMQ_BN"), MMQ_BN);
        assert_eq!(crate::compile::Family::Quant.define("MMQ_BM"), MMQ_BM);
        assert_eq!(crate::compile::Family::Quant.define("Q6K_ROW"), Q6K_ROW);
        for &(ty, places, stages, name) in &MMQ_WIDE {
            let t = ty.name().to_lowercase();
            let line = if ty == GgmlType::Q6_K {
                format!("\nMMQ_Q6K({name}, {places}, {stages})\n")
            } else {
                format!("\nMMQ_K4({name}, W_{t}, {MMQ_WIDE_BM}, {places}, {stages})\n")
            };
            assert!(src.contains(&line), "{line}");
            // Two blocks a multiprocessor (228 KiB, 1 KiB of it reserved a block); Q6_K's
            // kernels declare only dynamic shared memory, which wide_launch gives past 48 KiB.
            let bytes = wide_smem(ty, places, stages);
            assert!(ty != GgmlType::Q6_K || bytes > 48 * 1024, "{name}: {bytes}");
            assert!(
                2 * (bytes + 1024 + 2 * places * 4) <= 228 * 1024,
                "{name}: {bytes}"
            );
        }
        assert!(src.contains("__launch_bounds__(256, 2) NAME(MMQ_ARGS)"));
        for &(ty, stages, name) in &MMQ_FIT {
            let t = ty.name().to_lowercase();
            let line = if ty == GgmlType::Q6_K {
                format!("\nMMQ_FIT({name}, MMQ_Q6K_PASS(16, {stages}, 1), MMQ_Q6K_PASS(32, {stages}, 2))\n")
            } else {
                format!("\nMMQ_FIT({name}, MMQ_K4_PASS(W_{t}, 16, {stages}, 1), MMQ_K4_PASS(W_{t}, 32, {stages}, 2))\n")
            };
            assert!(src.contains(&line), "{line}");
            // Both passes' buffers are dynamic: the 32-place pass's are the larger.
            let bytes = wide_smem(ty, MMQ_BN, stages);
            assert!(
                wide_smem(ty, 16, stages) < bytes && bytes > 48 * 1024,
                "{name}: {bytes}"
            );
            assert!(
                2 * (bytes + 1024 + 2 * 48 * 4) <= 228 * 1024,
                "{name}: {bytes}"
            );
            assert_eq!(mmq_fit(ty, 16), Some((name, stages)));
            assert_eq!(mmq_fit(ty, 32), None);
        }
        assert!(src.contains("(S) * (128 * Q6K_ROW + (BN) * MMQ_AS)"));
        for (ty, places) in [
            (GgmlType::Q4_K, 16),
            (GgmlType::Q4_K, 32),
            (GgmlType::Q5_K, 16),
        ] {
            for s in 2..=4 {
                assert_eq!(mmq_wide(ty, places, s).unwrap().1, s, "{ty:?} {places} {s}");
            }
        }
        assert_eq!(
            mmq_wide(GgmlType::Q5_K, 32, 4).unwrap(),
            ("mmq_q5_k_wide_s3", 3)
        );
        assert_eq!(
            mmq_wide(GgmlType::Q6_K, 16, 4).unwrap(),
            ("mmq_q6_k_wide16_s3", 3)
        );
        assert_eq!(mmq_wide(GgmlType::Q8_0, 16, 2), None);
        assert!(src.contains("__launch_bounds__(2 * (BM), 256 / (BM)) NAME(MMQ_ARGS)"));
    }

    /// `GLINT_CUDA_MMQ_STAGES`: 2 to 4 buffers, out-of-range counts clamped, anything else the
    /// default.
    #[test]
    fn mmq_stages_parse() {
        assert_eq!(parse_stages(None), MMQ_STAGES_DEFAULT);
        assert_eq!(parse_stages(Some("3")), 3);
        assert_eq!(parse_stages(Some(" 4 ")), 4);
        assert_eq!(parse_stages(Some("9")), 4);
        assert_eq!(parse_stages(Some("0")), 2);
        assert_eq!(parse_stages(Some("deep")), MMQ_STAGES_DEFAULT);
    }

    /// The host sizes and strides activations with the kernels' Q8_K block (a mismatch reads
    /// past a row); the padded block holds ggml's whole 292 and keeps 16-byte alignment.
    #[test]
    fn q8_k_block_matches_the_kernels() {
        assert_eq!(
            crate::compile::Family::Quant.define("Q8_K_BYTES"),
            Q8_K_GPU_BYTES
        );
        assert!(Q8_K_GPU_BYTES >= GgmlType::Q8_K.type_size() && Q8_K_GPU_BYTES.is_multiple_of(16));
        assert_eq!(
            act_bytes(GgmlType::Q8_K, 6144).unwrap(),
            24 * Q8_K_GPU_BYTES
        );
        assert_eq!(
            act_bytes(GgmlType::Q8_0, 6144).unwrap(),
            glint_quant::dot::activation_bytes(GgmlType::Q8_0, 6144).unwrap()
        );
    }
}
