// Absorbed-MLA attention over the paged latent pool (crates/glint-core/src/cpu/attention.rs):
// MQA, one shared K row per key (V = its first dv values), online softmax in f32.
//
// Layout: grid (n_tokens · n_groups, splits), MLA_THREADS threads. Block (x, z) takes token
// x / n_groups, heads [g·G, g·G + G) of it, and the z-th chunk of `chunk` entries of the token's
// key list: either its selected logical keys (`sel`, n_sel per token) or, when no selection is
// given or the token sees at most n_sel keys, the keys 0 ..= min(pos, n_kv − 1) in order. Keys go
// through the pool MLA_KT at a time: each key row is decoded once into shared memory for every
// head of the block. Thread p of a tile computes the scores of (head p / KT, key p % KT); one
// warp per head updates the running max and sum; each thread owns up to MLA_ACC output values
// (head, dim) of the block in registers.
// With one split the block writes out [n × n_heads × dv] (normalised); with more it writes its
// unnormalised accumulator and (max, sum) to `part` for mla_combine. The grid is sized by the
// step's key capacity (it is recorded in CUDA graphs), so a block whose chunk starts past the
// token's keys writes only (max, sum) = (−∞, 0), and mla_combine never reads its accumulator.
// Shared: (G + KT)·st + G·KT + 3·G floats (st = dk + 4 when dk % 4 == 0, else dk + 1), then KT
// i64 rows.

#define MLA_THREADS 256
#define MLA_ACC 32
#define MLA_KT 16
// float4 query loads in flight per thread: GLM-5's 16 heads × 576 are 9 per thread, one round.
#define MLA_QLD 12


// The scores of a tile for a block of MLA_THREADS threads, 16 heads × MLA_KT keys a pass over
// the heads: thread (c, part) (c = tid / 16) computes the partial dots of heads 4·(c / 4) .. +3
// with keys 4·(c % 4) .. +3 over the float4 columns part, part + 16, ... of dk, and a
// reduce-scatter over the 16 parts leaves lane `part` holding (head 4·(c / 4) + part / 4,
// key 4·(c % 4) + part % 4). Each shared float4 read serves four dots, a quarter of the
// shared-memory traffic of a thread per dot (the loop that bounded the kernel at 2048 keys),
// and 16 independent sums a thread. Rows of heads past hg read the last head's (discarded).
__device__ __forceinline__ void mla_scores_4x4(const float* qs, const float* ks, const long long* rows, float* ps,
                                               int hg, int nt, int dk, int st, float scale) {
    static_assert(MLA_KT == 16 && MLA_THREADS == 256, "a thread per (4 heads, 4 keys, part)");
    const int tid = threadIdx.x, part = tid & 15, c = tid >> 4, hb = c >> 2, kb = c & 3;
    const int d4 = dk >> 2;
    for (int h0 = 0; h0 < hg; h0 += 16) {
        const float4* qr[4];
        const float4* kr[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            qr[u] = (const float4*)(qs + min(h0 + 4 * hb + u, hg - 1) * st);
            kr[u] = (const float4*)(ks + (4 * kb + u) * st);
        }
        float a[16];
#pragma unroll
        for (int u = 0; u < 16; u++) a[u] = 0.0f;
        for (int i = part; i < d4; i += 16) {
            float4 qv[4], kv[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                qv[u] = qr[u][i];
                kv[u] = kr[u][i];
            }
#pragma unroll
            for (int hh = 0; hh < 4; hh++)
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    float& d = a[4 * hh + kk];
                    d = fmaf(qv[hh].x, kv[kk].x, d);
                    d = fmaf(qv[hh].y, kv[kk].y, d);
                    d = fmaf(qv[hh].z, kv[kk].z, d);
                    d = fmaf(qv[hh].w, kv[kk].w, d);
                }
        }
        // Reduce-scatter over the 16 parts: after the step of lane bit b, a lane keeps the
        // entries whose index bit b equals its own, so lane `part` ends with entry `part`.
        float w8[8], w4[4], w2[2];
        const bool b3 = part & 8, b2 = part & 4, b1 = part & 2, b0 = part & 1;
#pragma unroll
        for (int u = 0; u < 8; u++)
            w8[u] = (b3 ? a[8 + u] : a[u]) + __shfl_xor_sync(0xffffffffu, b3 ? a[u] : a[8 + u], 8);
#pragma unroll
        for (int u = 0; u < 4; u++)
            w4[u] = (b2 ? w8[4 + u] : w8[u]) + __shfl_xor_sync(0xffffffffu, b2 ? w8[u] : w8[4 + u], 4);
#pragma unroll
        for (int u = 0; u < 2; u++)
            w2[u] = (b1 ? w4[2 + u] : w4[u]) + __shfl_xor_sync(0xffffffffu, b1 ? w4[u] : w4[2 + u], 2);
        const float dot = (b0 ? w2[1] : w2[0]) + __shfl_xor_sync(0xffffffffu, b0 ? w2[0] : w2[1], 1);
        const int g = h0 + 4 * hb + (part >> 2), kk = 4 * kb + (part & 3);
        if (g < hg) ps[g * MLA_KT + kk] = kk < nt && rows[kk] >= 0 ? dot * scale : NEG_INF;
    }
}

// Block (blockIdx.x, split)'s place in `part`: its G accumulator rows of dv, then a (max, sum)
// pair a head (mla_combine reads them there).
__device__ __forceinline__ float* mla_part_rows(float* part, int G, int dv, int splits, int split) {
    return part + ((long long)blockIdx.x * splits + split) * G * (dv + 2);
}

// A split whose chunk starts past the token's keys: (max, sum) = (−∞, 0) for its heads, which
// mla_combine weighs 0 (it never reads the accumulator).
__device__ __forceinline__ void mla_empty_split(float* part, int G, int dv, int splits, int split, int hg) {
    float* ml = mla_part_rows(part, G, dv, splits, split) + (long long)G * dv;
    for (int g = threadIdx.x; g < hg; g += blockDim.x) {
        ml[2 * g] = NEG_INF;
        ml[2 * g + 1] = 0.0f;
    }
}

// The keys a split reads: entries [k_begin, k_end) of the token's list, which is the indexer's
// n_sel selected rows where it selected (more than n_sel keys in view), else the token's nk
// causal keys in order. A split with k_begin ≥ L has none.
struct MlaRange {
    long long L, k_begin, k_end;
    bool use_sel;
};
__device__ __forceinline__ MlaRange mla_range(long long pos, int n_kv, int has_sel, int n_sel, int split, int chunk) {
    const long long nk = min(pos + 1, (long long)n_kv);
    MlaRange r;
    r.use_sel = has_sel && nk > n_sel;
    r.L = r.use_sel ? (long long)n_sel : nk;
    r.k_begin = (long long)split * chunk;
    r.k_end = min(r.L, r.k_begin + chunk);
    return r;
}

// Blocks an SM must hold at once. Three of 16 heads × 576 fit a Hopper SM's shared memory,
// but three leave 80 registers a thread, and ptxas then spilled (204 bytes stored, 1080 bytes
// loaded, inside the tile loop); two give it 128 and no spill. -DMLA_MIN_BLOCKS=3 (the kernel
// bench) times the other choice.
#ifndef MLA_MIN_BLOCKS
#define MLA_MIN_BLOCKS 2
#endif
extern "C" __global__ void __launch_bounds__(MLA_THREADS, MLA_MIN_BLOCKS)
    mla_attention(const float* q, const float* q_pe, long long pe_off, long long pe_stride, int parts,
                  const u8* kdata, long long krows, int kty, const u32* positions,
                  const u32* tables, long long n_table, const u32* token_seq, int max_blocks,
                  int block_size, const u32* sel, int has_sel, int n_sel, int n_heads, int dk, int dv,
                  int n_kv, float scale, int G, int n_groups, int chunk, int splits, float* out,
                  float* part) {
    pdl_enter();
    extern __shared__ float mla_sm[];
    const int tid = threadIdx.x, bd = blockDim.x;
    const int warp = tid >> 5, lane = tid & 31, nw = bd >> 5;
    const int tok = blockIdx.x / n_groups, grp = blockIdx.x % n_groups;
    const int h0 = grp * G;
    const int hg = min(G, n_heads - h0);
    const int split = blockIdx.y;
    // Row stride of the shared queries and keys: 16-byte rows for float4 dots when dk % 4 == 0,
    // else dk + 1 (conflict-free scalar reads).
    const bool vec4 = (dk & 3) == 0;
    const int st = vec4 ? dk + 4 : dk + 1;

    float* qs = mla_sm;                       // G × st
    float* ks = qs + (long long)G * st;       // KT × st
    float* ps = ks + (long long)MLA_KT * st;  // G × KT
    float* m_sh = ps + G * MLA_KT;            // G
    float* l_sh = m_sh + G;                   // G
    float* c_sh = l_sh + G;                   // G
    long long off = (long long)(G + MLA_KT) * st + G * MLA_KT + 3 * G;
    off = (off + 1) & ~1ll;
    long long* rows = (long long*)(mla_sm + off);  // KT

    const long long pos = positions[tok];
    const MlaRange kr = mla_range(pos, n_kv, has_sel, n_sel, split, chunk);
    const bool use_sel = kr.use_sel;
    const long long k_begin = kr.k_begin, k_end = kr.k_end;
    if (splits > 1 && k_begin >= kr.L) {
        mla_empty_split(part, G, dv, splits, split, hg);
        return;
    }

    // Row r of the query: its first dv values at lat + r·lat_st, the rest at pe + r·pe_st (q's
    // rows of dk, or the two parts of Backend::mla_attention_parts: q's rows of dv and q_pe's).
    const long long r0 = (long long)tok * n_heads + h0;
    const long long lat_st = parts ? dv : dk, pe_st = parts ? pe_stride : dk;
    const float* lat = q;
    const float* pe = parts ? q_pe + pe_off : q + dv;
    const bool rows4 = ((dv | lat_st | pe_st) & 3) == 0;
    if (vec4 && rows4 && (((unsigned long long)lat | (unsigned long long)pe) & 15) == 0) {
        // All of a thread's loads issued before any store: one memory latency, not one per value.
        const int d4 = dk >> 2, l4 = dv >> 2, n4 = hg * d4;
        for (int e0 = tid; e0 < n4; e0 += bd * MLA_QLD) {
            float4 v[MLA_QLD];
#pragma unroll
            for (int u = 0; u < MLA_QLD; u++) {
                const int e = e0 + u * bd;
                if (e < n4) {
                    const int g = e / d4, c4 = e - g * d4;
                    v[u] = c4 < l4 ? ((const float4*)(lat + (r0 + g) * lat_st))[c4]
                                   : ((const float4*)(pe + (r0 + g) * pe_st))[c4 - l4];
                }
            }
#pragma unroll
            for (int u = 0; u < MLA_QLD; u++) {
                const int e = e0 + u * bd;
                if (e < n4) {
                    const int g = e / d4;
                    *(float4*)(qs + g * st + 4 * (e - g * d4)) = v[u];
                }
            }
        }
    } else {
        for (int e = tid; e < hg * dk; e += bd) {
            const int g = e / dk, c = e - g * dk;
            qs[g * st + c] = c < dv ? lat[(r0 + g) * lat_st + c] : pe[(r0 + g) * pe_st + (c - dv)];
        }
    }
    for (int g = tid; g < G; g += bd) {
        m_sh[g] = NEG_INF;
        l_sh[g] = 0.0f;
        c_sh[g] = 1.0f;
    }
    float acc[MLA_ACC];
#pragma unroll
    for (int r = 0; r < MLA_ACC; r++) acc[r] = 0.0f;
    const int n_out = hg * dv;
    CacheView c = {kdata, krows, dk, kty};

    for (long long kb = k_begin; kb < k_end; kb += MLA_KT) {
        const int nt = (int)min((long long)MLA_KT, k_end - kb);
        if (tid < MLA_KT) {
            long long r = -1;
            if (tid < nt) {
                long long idx = kb + tid;
                long long t = use_sel ? (long long)sel[(long long)tok * n_sel + idx] : idx;
                if (t <= pos) r = paged_row(tables, n_table, token_seq, max_blocks, block_size, krows, tok, t);
            }
            rows[tid] = r;
        }
        __syncthreads();
        paged_load_tile(c, rows, nt, dk, st, ks);
        __syncthreads();
        if (vec4) {
            mla_scores_4x4(qs, ks, rows, ps, hg, nt, dk, st, scale);
        } else {
            for (int p = tid; p < hg * MLA_KT; p += bd) {
                const int g = p / MLA_KT, kk = p % MLA_KT;
                float sc = NEG_INF;
                if (kk < nt && rows[kk] >= 0) {
                    const float* qr = qs + g * st;
                    const float* kr = ks + kk * st;
                    float dot = 0.0f;
                    for (int i = 0; i < dk; i++) dot = fmaf(qr[i], kr[i], dot);
                    sc = dot * scale;
                }
                ps[g * MLA_KT + kk] = sc;
            }
        }
        __syncthreads();
        for (int g = warp; g < hg; g += nw) {
            float v = lane < MLA_KT ? ps[g * MLA_KT + lane] : NEG_INF;
            float m_old = m_sh[g];
            float m_new = fmaxf(m_old, warp_max(v));
            float pv = (m_new == NEG_INF || v == NEG_INF) ? 0.0f : expf(v - m_new);
            float corr = m_old == NEG_INF ? 0.0f : expf(m_old - m_new);
            float sum = warp_sum(pv);
            if (lane < MLA_KT) ps[g * MLA_KT + lane] = pv;
            if (lane == 0) {
                m_sh[g] = m_new;
                l_sh[g] = l_sh[g] * corr + sum;
                c_sh[g] = corr;
            }
        }
        __syncthreads();
        if (dv == 2 * MLA_THREADS) {
            // GLM-5's dv: a thread's accumulators are dims tid and tid + MLA_THREADS of every
            // head (acc[2g], acc[2g + 1]), so each key's two values are read from shared memory
            // once for all heads instead of once per accumulator (that traffic bounded the
            // loop). Every accumulator's operations and their order are the general loop's.
#pragma unroll
            for (int g = 0; g < MLA_ACC / 2; g++) {
                if (g < hg) {
                    acc[2 * g] *= c_sh[g];
                    acc[2 * g + 1] *= c_sh[g];
                }
            }
            for (int kk = 0; kk < nt; kk++) {
                const float k0 = ks[kk * st + tid], k1 = ks[kk * st + tid + MLA_THREADS];
#pragma unroll
                for (int g = 0; g < MLA_ACC / 2; g++) {
                    if (g < hg) {
                        const float p = ps[g * MLA_KT + kk];
                        acc[2 * g] = fmaf(p, k0, acc[2 * g]);
                        acc[2 * g + 1] = fmaf(p, k1, acc[2 * g + 1]);
                    }
                }
            }
            __syncthreads();
            continue;
        }
        // (head, dim) of idx kept by stepping, not dividing: 32 divisions fewer a tile, and no
        // spill within the 80 registers of three blocks an SM.
        int g = tid / dv, j = tid % dv;
#pragma unroll
        for (int r = 0; r < MLA_ACC; r++) {
            int idx = tid + r * MLA_THREADS;
            if (idx < n_out) {
                const float* pg = ps + g * MLA_KT;
                float a = acc[r] * c_sh[g];
                for (int kk = 0; kk < nt; kk++) a = fmaf(pg[kk], ks[kk * st + j], a);
                acc[r] = a;
            }
            j += MLA_THREADS;
            while (j >= dv) {
                j -= dv;
                g++;
            }
        }
        __syncthreads();
    }

    if (splits == 1) {
        // One division a head (c_sh is free now), not one an output, and (head, dim) by
        // stepping: the divisions were half of a short context's instructions.
        for (int g = tid; g < hg; g += bd) c_sh[g] = l_sh[g] > 0.0f ? 1.0f / l_sh[g] : 0.0f;
        __syncthreads();
        int g = tid / dv, j = tid % dv;
#pragma unroll
        for (int r = 0; r < MLA_ACC; r++) {
            int idx = tid + r * MLA_THREADS;
            if (idx < n_out) out[((long long)tok * n_heads + h0 + g) * dv + j] = acc[r] * c_sh[g];
            j += MLA_THREADS;
            while (j >= dv) {
                j -= dv;
                g++;
            }
        }
    } else {
        // part: per (block x, split) G × (dv + 2): the accumulator rows, then (max, sum) per head.
        float* pp = mla_part_rows(part, G, dv, splits, split);
#pragma unroll
        for (int r = 0; r < MLA_ACC; r++) {
            int idx = tid + r * MLA_THREADS;
            if (idx < n_out) pp[idx] = acc[r];
        }
        float* ml = pp + (long long)G * dv;
        for (int g = tid; g < hg; g += bd) {
            ml[2 * g] = m_sh[g];
            ml[2 * g + 1] = l_sh[g];
        }
    }
}

// Merges the splits of mla_attention: grid (n_tokens · n_groups, ⌈G·dv / MLA_THREADS⌉),
// MLA_THREADS threads, one output value each; shared G · splits floats (each split's weight per
// head, over the total sum), then G ints (per head, 1 + the last split of nonzero weight).
// Splits of weight 0 are skipped: an empty split's accumulator was never written, and for any
// other a zero weight adds exactly nothing (the sum never holds −0), so skipping changes no bit.
extern "C" __global__ void __launch_bounds__(MLA_THREADS)
    mla_combine(const float* part, int n_heads, int dv, int G, int n_groups, int splits, float* out) {
    pdl_enter();
    extern __shared__ float mlc_sm[];
    const int tid = threadIdx.x, bd = blockDim.x;
    const int warp = tid >> 5, lane = tid & 31, nw = bd >> 5;
    const int tok = blockIdx.x / n_groups, grp = blockIdx.x % n_groups;
    const int h0 = grp * G;
    const int hg = min(G, n_heads - h0);
    const long long stride = (long long)G * (dv + 2);
    const float* pb = part + (long long)blockIdx.x * splits * stride;
    float* wsh = mlc_sm;                    // G × splits
    int* nz_sh = (int*)(mlc_sm + G * splits);  // G
    const int idx = blockIdx.y * bd + tid;
    // Only the heads this block's outputs touch.
    const int g_lo = (blockIdx.y * bd) / dv;
    const int g_hi = min(hg - 1, (blockIdx.y * bd + bd - 1) / dv);
    for (int g = g_lo + warp; g <= g_hi; g += nw) {
        float mx = NEG_INF;
        for (int z = lane; z < splits; z += 32) mx = fmaxf(mx, pb[z * stride + (long long)G * dv + 2 * g]);
        mx = warp_max(mx);
        float lsum = 0.0f;
        for (int z = lane; z < splits; z += 32) {
            float m = pb[z * stride + (long long)G * dv + 2 * g];
            float l = pb[z * stride + (long long)G * dv + 2 * g + 1];
            float wz = (m == NEG_INF) ? 0.0f : expf(m - mx);
            wsh[g * splits + z] = wz;
            lsum += wz * l;
        }
        lsum = warp_sum(lsum);
        float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        __syncwarp();
        int last = -1;
        for (int z = lane; z < splits; z += 32) {
            float w = wsh[g * splits + z] * inv;
            wsh[g * splits + z] = w;
            if (w != 0.0f) last = z;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
        if (lane == 0) nz_sh[g] = last + 1;
    }
    __syncthreads();
    if (idx >= hg * dv) return;
    const int g = idx / dv;
    const int nz = nz_sh[g];
    float a = 0.0f;
#pragma unroll 8
    for (int z = 0; z < nz; z++) {
        float w = wsh[g * splits + z];
        if (w != 0.0f) a = fmaf(w, pb[z * stride + idx], a);
    }
    out[((long long)tok * n_heads + h0) * dv + idx] = a;
}

// ---- absorbed-MLA attention on tensor cores: f16 and bf16 latent caches ------------------------
// mla_attention's plan, tiles and outputs (the same grid, `part` layout and mla_combine) for a
// 16-bit cache, with its two products as mma.sync m16n8k16 (f32 sums): the block's heads (G ≤
// 16, rows past hg zero) are the M of one tile. Scores: Q (16 × dk) · Kᵀ, each warp a
// k-slice (steps w, w + 8, ...) of both 8-key halves of the tile, the 8 partial 16 × 16 tiles
// summed in shared memory in warp order. Output: P (16 × 16 keys, rounded to the cache's type)
// · V (16 × dv), warp w the dims [w·dv/8, (w+1)·dv/8). The key rows are copied, not decoded;
// the query is rounded to the cache's type (f16 after a power-of-two scale a head that puts its
// largest |q| in [2¹⁴, 2¹⁵), undone exactly on the score). Those two roundings are the only
// differences from mla_attention's f32 arithmetic (FlashMLA rounds both the same way); the
// conformance suite bounds them against f64. On mla_attention's CUDA cores GLM-5's 2048
// selected keys took 33.5 µs (H100, serialized), bound by the shared-memory reads of f32 tiles.
// Needs dk % 32 == 0, dk ≤ 576, dv % 64 == 0, dv ≤ 512; MLA_THREADS threads.
// Shared (bytes): 2·(16 + MLA_KT)·(dk + 8), then 8·16·16 + 16·MLA_KT + 4·16 floats, MLA_KT i64.
#define MLA_MMA_DKMAX 576
template <int TY>
__device__ __forceinline__ u32 mla_pack2(float lo, float hi) {
    if (TY == CACHE_BF16)
        return (u32)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
               ((u32)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
    return (u32)__half_as_ushort(__float2half_rn(lo)) | ((u32)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// The block's query for the tensor cores: warp w rounds heads 2w, 2w + 1 (rows ≥ hg zero) to
// the cache's type into qh (rows of st values), all of a lane's loads in flight before the
// first use; hs[h] is the head's inverse query scale times `scale`; m, l, c start.
template <int TY>
__device__ __forceinline__ void mla_mma_query(const float* q, const float* q_pe, long long pe_off, long long pe_stride,
                                              int parts, int tok, int n_heads, int h0, int hg, int dk, int dv,
                                              float scale, int st, u16* qh, float* hs, float* m_sh, float* l_sh,
                                              float* c_sh) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long r0 = (long long)tok * n_heads + h0;
    const long long lat_st = parts ? dv : dk, pe_st = parts ? pe_stride : dk;
    const float* pe = parts ? q_pe + pe_off : q + dv;
    constexpr int VPL = MLA_MMA_DKMAX / 32;
    float v[2][VPL];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int h = 2 * warp + j;
#pragma unroll
        for (int u = 0; u < VPL; ++u) {
            const int c = lane + 32 * u;
            v[j][u] = 0.0f;
            if (h < hg && c < dk) v[j][u] = c < dv ? q[(r0 + h) * lat_st + c] : pe[(r0 + h) * pe_st + (c - dv)];
        }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int h = 2 * warp + j;
        int shift = 0;
        if (TY != CACHE_BF16) {
            float amax = 0.0f;
#pragma unroll
            for (int u = 0; u < VPL; ++u) amax = fmaxf(amax, fabsf(v[j][u]));
            amax = warp_max(amax);
            if (amax > 0.0f) shift = min(max(14 - ilogbf(amax), -60), 60);
        }
        const float up = ldexpf(1.0f, shift);
#pragma unroll
        for (int u = 0; u < VPL; ++u) {
            const int c = lane + 32 * u;
            if (c < dk) {
                const float x = v[j][u] * up;  // exact: a power of two
                qh[h * st + c] = TY == CACHE_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x))
                                                  : __half_as_ushort(__float2half_rn(x));
            }
        }
        if (lane == 0) {
            hs[h] = ldexpf(1.0f, -shift) * scale;
            m_sh[h] = NEG_INF;
            l_sh[h] = 0.0f;
            c_sh[h] = 1.0f;
        }
    }
}

// The pool row of entry `idx` of a token's key list (its selected keys, or its keys in order),
// −1 past its position.
__device__ __forceinline__ long long mla_key_row(long long idx, bool use_sel, const u32* sel, int n_sel, int tok,
                                                 long long pos, const u32* tables, long long n_table,
                                                 const u32* token_seq, int max_blocks, int block_size,
                                                 long long krows) {
    const long long t = use_sel ? (long long)sel[(long long)tok * n_sel + idx] : idx;
    return t <= pos ? paged_row(tables, n_table, token_seq, max_blocks, block_size, krows, tok, t) : -1;
}

// The running output's factor after a new maximum: rows g4 (c0) and g4 + 8 (c1).
__device__ __forceinline__ void mla_mma_rescale(float (&acc)[8][4], int nd, float c0, float c1) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (i < nd) {
            acc[i][0] *= c0;
            acc[i][1] *= c0;
            acc[i][2] *= c1;
            acc[i][3] *= c1;
        }
    }
}

// acc += P · V for one 16-key step: `a` the P fragment, `v` the lane's first V value (key
// 2·t4 of the step, dim dbase + g4) in key rows of `st` values; n-tile i is dims + 8·i.
template <int TY>
__device__ __forceinline__ void mla_mma_pv(float (&acc)[8][4], int nd, const u32 (&a)[4], const u16* v, int st) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (i < nd) {
            const u16* vp = v + 8 * i;
            const u32 b0 = (u32)vp[0] | ((u32)vp[st] << 16);
            const u32 b1 = (u32)vp[8 * st] | ((u32)vp[9 * st] << 16);
            mma_m16n8k16<TY>(acc[i], a, b0, b1);
        }
    }
}

// A tensor-core kernel's end: lane (g4, t4)'s accumulators (rows g4, g4 + 8 at dims dbase +
// 8i + 2·t4, + 1) normalised into `out` with one split, else raw into the split's partial rows
// with its (max, sum) a head for mla_combine.
__device__ __forceinline__ void mla_mma_store(const float (&acc)[8][4], int nd, int dbase, int g4, int t4, int hg,
                                              const float* m_sh, const float* l_sh, int tok, int n_heads, int h0,
                                              int G, int dv, int splits, int split, float* out, float* part) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int g = g4 + 8 * hh;
        if (g >= hg) continue;
        const float inv = splits == 1 ? (l_sh[g] > 0.0f ? 1.0f / l_sh[g] : 0.0f) : 1.0f;
        float* dst = splits == 1 ? out + ((long long)tok * n_heads + h0 + g) * dv
                                 : mla_part_rows(part, G, dv, splits, split) + (long long)g * dv;
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (i < nd) {
                const int d = dbase + 8 * i + 2 * t4;
                dst[d] = acc[i][2 * hh] * inv;
                dst[d + 1] = acc[i][2 * hh + 1] * inv;
            }
    }
    if (splits > 1) {
        float* ml = mla_part_rows(part, G, dv, splits, split) + (long long)G * dv;
        for (int g = threadIdx.x; g < hg; g += blockDim.x) {
            ml[2 * g] = m_sh[g];
            ml[2 * g + 1] = l_sh[g];
        }
    }
}

template <int TY>
__device__ __forceinline__ void mla_attention_mma(const float* q, const float* q_pe, long long pe_off,
                                                  long long pe_stride, int parts, const u8* kdata, long long krows,
                                                  const u32* positions, const u32* tables, long long n_table,
                                                  const u32* token_seq, int max_blocks, int block_size,
                                                  const u32* sel, int has_sel, int n_sel, int n_heads, int dk,
                                                  int dv, int n_kv, float scale, int G, int n_groups, int chunk,
                                                  int splits, float* out, float* part) {
    extern __shared__ __align__(16) u8 mm_sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    const int tok = blockIdx.x / n_groups, grp = blockIdx.x % n_groups;
    const int h0 = grp * G, hg = min(G, n_heads - h0), split = blockIdx.y;
    const int st = dk + 8;  // 16-bit values a shared row
    u16* qh = (u16*)mm_sm;                              // 16 × st
    u16* kh = qh + 16 * st;                             // MLA_KT × st
    float* sp = (float*)(kh + MLA_KT * st);             // 8 warps × 16 × 16 partial scores
    float* ps = sp + 8 * 256;                           // 16 × MLA_KT
    float* m_sh = ps + 16 * MLA_KT;                     // 16
    float* l_sh = m_sh + 16;
    float* c_sh = l_sh + 16;
    float* hs = c_sh + 16;                              // the inverse query scale a head
    long long* rows = (long long*)(hs + 16);            // MLA_KT

    const long long pos = positions[tok];
    const MlaRange kr = mla_range(pos, n_kv, has_sel, n_sel, split, chunk);
    const bool use_sel = kr.use_sel;
    const long long k_begin = kr.k_begin, k_end = kr.k_end;
    if (splits > 1 && k_begin >= kr.L) {
        mla_empty_split(part, G, dv, splits, split, hg);
        return;
    }
    mla_mma_query<TY>(q, q_pe, pe_off, pe_stride, parts, tok, n_heads, h0, hg, dk, dv, scale, st, qh, hs, m_sh,
                      l_sh, c_sh);
    // Output tile: warp w's dims [w·dv/8, (w+1)·dv/8), nd = dv/64 n-tiles of 8; lane (g4, t4)
    // holds heads g4 and g4 + 8 at dims n0 + 2·t4, + 1 of each.
    const int nd = dv >> 6, dbase = warp * (dv >> 3);
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    const int cpr = dk / 8;  // 16-byte chunks a key row
    for (long long kb = k_begin; kb < k_end; kb += MLA_KT) {
        const int nt = (int)min((long long)MLA_KT, k_end - kb);
        if (tid < MLA_KT) {
            long long r = -1;
            if (tid < nt)
                r = mla_key_row(kb + tid, use_sel, sel, n_sel, tok, pos, tables, n_table, token_seq, max_blocks,
                                block_size, krows);
            rows[tid] = r;
        }
        __syncthreads();
        // Key rows (zeros for masked ones), 16 bytes a copy, the loads before the stores.
        for (int e0 = tid; e0 < MLA_KT * cpr; e0 += MLA_THREADS * 5) {
            uint4 w[5];
#pragma unroll
            for (int u = 0; u < 5; ++u) {
                const int e = e0 + u * MLA_THREADS, kk = e / cpr;
                w[u] = make_uint4(0u, 0u, 0u, 0u);
                if (e < MLA_KT * cpr && rows[kk] >= 0)
                    w[u] = *(const uint4*)(kdata + (rows[kk] * dk + (long long)(e - kk * cpr) * 8) * 2);
            }
#pragma unroll
            for (int u = 0; u < 5; ++u) {
                const int e = e0 + u * MLA_THREADS, kk = e / cpr;
                if (e < MLA_KT * cpr) *(uint4*)(kh + kk * st + (e - kk * cpr) * 8) = w[u];
            }
        }
        __syncthreads();
        // Scores: warp w's k-steps w, w + 8, ... of both key halves.
        {
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            for (int k0 = 16 * warp; k0 < dk; k0 += 128) {
                const u16* qa = qh + g4 * st + k0 + 2 * t4;
                const u32 a[4] = {*(const u32*)qa, *(const u32*)(qa + 8 * st), *(const u32*)(qa + 8),
                                  *(const u32*)(qa + 8 * st + 8)};
#pragma unroll
                for (int nb = 0; nb < 2; ++nb) {
                    const u16* kr = kh + (8 * nb + g4) * st + k0 + 2 * t4;
                    mma_m16n8k16<TY>(s[nb], a, *(const u32*)kr, *(const u32*)(kr + 8));
                }
            }
            float* my = sp + warp * 256;
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
                my[g4 * 16 + 8 * nb + 2 * t4] = s[nb][0];
                my[g4 * 16 + 8 * nb + 2 * t4 + 1] = s[nb][1];
                my[(g4 + 8) * 16 + 8 * nb + 2 * t4] = s[nb][2];
                my[(g4 + 8) * 16 + 8 * nb + 2 * t4 + 1] = s[nb][3];
            }
        }
        __syncthreads();
        {
            const int h = tid >> 4, kk = tid & 15;  // MLA_THREADS = 16 heads × 16 keys
            float d = 0.0f;
#pragma unroll
            for (int w = 0; w < 8; ++w) d += sp[w * 256 + tid];
            if (h < hg) ps[h * MLA_KT + kk] = kk < nt && rows[kk] >= 0 ? d * hs[h] : NEG_INF;
        }
        __syncthreads();
        for (int g = warp; g < hg; g += MLA_THREADS / 32) {
            const float v = lane < MLA_KT ? ps[g * MLA_KT + lane] : NEG_INF;
            const float m_old = m_sh[g];
            const float m_new = fmaxf(m_old, warp_max(v));
            const float pv = (m_new == NEG_INF || v == NEG_INF) ? 0.0f : expf(v - m_new);
            const float corr = m_old == NEG_INF ? 0.0f : expf(m_old - m_new);
            const float sum = warp_sum(pv);
            if (lane < MLA_KT) ps[g * MLA_KT + lane] = pv;
            if (lane == 0) {
                m_sh[g] = m_new;
                l_sh[g] = l_sh[g] * corr + sum;
                c_sh[g] = corr;
            }
        }
        __syncthreads();
        // P·V: A = P (rows g4, g4 + 8; keys 2·t4.. and 2·t4 + 8..), B = V (keys × dims).
        {
            const bool r0ok = g4 < hg, r1ok = g4 + 8 < hg;
            const float c0 = r0ok ? c_sh[g4] : 0.0f, c1 = r1ok ? c_sh[g4 + 8] : 0.0f;
            const float* p0 = ps + g4 * MLA_KT + 2 * t4;
            const float* p1 = ps + (g4 + 8) * MLA_KT + 2 * t4;
            const u32 a[4] = {r0ok ? mla_pack2<TY>(p0[0], p0[1]) : 0u, r1ok ? mla_pack2<TY>(p1[0], p1[1]) : 0u,
                              r0ok ? mla_pack2<TY>(p0[8], p0[9]) : 0u, r1ok ? mla_pack2<TY>(p1[8], p1[9]) : 0u};
            mla_mma_rescale(acc, nd, c0, c1);
            mla_mma_pv<TY>(acc, nd, a, kh + (2 * t4) * st + dbase + g4, st);
        }
        __syncthreads();
    }
    mla_mma_store(acc, nd, dbase, g4, t4, hg, m_sh, l_sh, tok, n_heads, h0, G, dv, splits, split, out, part);
}

// A kernel `fn_name` of THREADS threads running fn<template arguments>.
#define MLA_MMA_KERNEL(fn, name, THREADS, ...)                                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS) fn##_##name(                                            \
        const float* q, const float* q_pe, long long pe_off, long long pe_stride, int parts, const u8* kdata,     \
        long long krows, int kty, const u32* positions, const u32* tables, long long n_table,                     \
        const u32* token_seq, int max_blocks, int block_size, const u32* sel, int has_sel, int n_sel,             \
        int n_heads, int dk, int dv, int n_kv, float scale, int G, int n_groups, int chunk, int splits,           \
        float* out, float* part) {                                                                                \
        pdl_enter();                                                                                              \
        (void)kty;                                                                                                \
        fn<__VA_ARGS__>(q, q_pe, pe_off, pe_stride, parts, kdata, krows, positions, tables, n_table, token_seq,   \
               max_blocks, block_size, sel, has_sel, n_sel, n_heads, dk, dv, n_kv, scale, G, n_groups, chunk,     \
               splits, out, part);                                                                                \
    }
MLA_MMA_KERNEL(mla_attention_mma, f16, MLA_THREADS, CACHE_F16)
MLA_MMA_KERNEL(mla_attention_mma, bf16, MLA_THREADS, CACHE_BF16)

// ---- the same on 64-key tiles --------------------------------------------------------------
// mla_attention_mma's plan, partials and roundings, with a tile of MLA_KT64 keys: warp w scores
// its own 8 keys (one n-tile) over all of dk, so no partial scores are summed across warps;
// the tile's softmax takes the warps' row maxima and sums through shared memory; P (rounded to
// the cache's type) goes through shared memory to every warp, which multiplies it with V for
// its dims as before. Five block barriers a 64-key tile where mla_attention_mma has six a
// 16-key one (the cost that bounded it at 2048 keys: each split's blocks ran a chain of
// barrier-separated short steps), and the key rows arrive by cp.async, all in flight at once.
// The host takes it with GLINT_CUDA_MLA_TILE64=1 and splits of at least MLA_KT64 keys.
// Needs dk % 16 == 0, dk ≤ MLA_MMA_DKMAX, dv % 64 == 0, dv ≤ 512, G ≤ 16; MLA_THREADS threads.
// Shared (bytes): 2·(16 + MLA_KT64)·(dk + 8) + 2·16·MLA_PST + 4·(2·8·16 + 4·16) + 8·MLA_KT64.
#define MLA_KT64 64
#define MLA_PST (MLA_KT64 + 8)
template <int TY>
__device__ __forceinline__ void mla_attention_mma64(const float* q, const float* q_pe, long long pe_off,
                                                    long long pe_stride, int parts, const u8* kdata, long long krows,
                                                    const u32* positions, const u32* tables, long long n_table,
                                                    const u32* token_seq, int max_blocks, int block_size,
                                                    const u32* sel, int has_sel, int n_sel, int n_heads, int dk,
                                                    int dv, int n_kv, float scale, int G, int n_groups, int chunk,
                                                    int splits, float* out, float* part) {
    static_assert(MLA_THREADS == 256 && MLA_KT64 == 8 * 8, "8 warps, 8 keys each");
    extern __shared__ __align__(16) u8 m64_sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    const int tok = blockIdx.x / n_groups, grp = blockIdx.x % n_groups;
    const int h0 = grp * G, hg = min(G, n_heads - h0), split = blockIdx.y;
    const int st = dk + 8;
    u16* qh = (u16*)m64_sm;                       // 16 × st
    u16* kh = qh + 16 * st;                       // MLA_KT64 × st
    u16* ph = kh + MLA_KT64 * st;                 // 16 × MLA_PST: the tile's P
    float* rmax = (float*)(ph + 16 * MLA_PST);    // 8 warps × 16 rows
    float* rsum = rmax + 8 * 16;                  // 8 warps × 16 rows
    float* m_sh = rsum + 8 * 16;                  // 16
    float* l_sh = m_sh + 16;
    float* c_sh = l_sh + 16;
    float* hs = c_sh + 16;
    long long* rows = (long long*)(hs + 16);      // MLA_KT64

    const long long pos = positions[tok];
    const MlaRange kr = mla_range(pos, n_kv, has_sel, n_sel, split, chunk);
    const bool use_sel = kr.use_sel;
    const long long k_begin = kr.k_begin, k_end = kr.k_end;
    if (splits > 1 && k_begin >= kr.L) {
        mla_empty_split(part, G, dv, splits, split, hg);
        return;
    }
    mla_mma_query<TY>(q, q_pe, pe_off, pe_stride, parts, tok, n_heads, h0, hg, dk, dv, scale, st, qh, hs, m_sh,
                      l_sh, c_sh);
    // Output: warp w's dims [w·dv/8, (w+1)·dv/8), nd n-tiles of 8; lane (g4, t4) holds rows
    // (heads) g4 and g4 + 8 at dims n0 + 2·t4, + 1 of each.
    const int nd = dv >> 6, dbase = warp * (dv >> 3);
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    const int cpr = dk / 8;  // 16-byte chunks a key row
    const int r0 = g4, r1 = g4 + 8;
    const int k_lo = 8 * warp + 2 * t4;  // this lane's two keys of the tile
    for (long long kb = k_begin; kb < k_end; kb += MLA_KT64) {
        const int nt = (int)min((long long)MLA_KT64, k_end - kb);
        if (tid < MLA_KT64) {
            long long r = -1;
            if (tid < nt)
                r = mla_key_row(kb + tid, use_sel, sel, n_sel, tok, pos, tables, n_table, token_seq, max_blocks,
                                block_size, krows);
            rows[tid] = r;
        }
        __syncthreads();
        // Key rows (zeros for masked and missing ones): every copy of the tile in flight at once.
        for (int e = tid; e < MLA_KT64 * cpr; e += MLA_THREADS) {
            const int kk = e / cpr, c = e - kk * cpr;
            u16* dst = kh + kk * st + c * 8;
            const long long r = rows[kk];
            if (r >= 0)
                cp_async16(dst, kdata + (r * dk + (long long)c * 8) * 2);
            else
                *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);
        }
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();
        // Scores of the warp's 8 keys for the 16 rows, over all of dk.
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        {
            const u16* qa = qh + g4 * st + 2 * t4;
            const u16* kr = kh + (8 * warp + g4) * st + 2 * t4;
            for (int k0 = 0; k0 < dk; k0 += 16) {
                const u32 a[4] = {*(const u32*)(qa + k0), *(const u32*)(qa + 8 * st + k0),
                                  *(const u32*)(qa + k0 + 8), *(const u32*)(qa + 8 * st + k0 + 8)};
                mma_m16n8k16<TY>(s, a, *(const u32*)(kr + k0), *(const u32*)(kr + k0 + 8));
            }
        }
        const bool v0 = k_lo < nt && rows[k_lo] >= 0, v1 = k_lo + 1 < nt && rows[k_lo + 1] >= 0;
        const float hs0 = hs[r0], hs1 = hs[r1];
        const float x[4] = {v0 ? s[0] * hs0 : NEG_INF, v1 ? s[1] * hs0 : NEG_INF, v0 ? s[2] * hs1 : NEG_INF,
                            v1 ? s[3] * hs1 : NEG_INF};
        float mx0 = fmaxf(x[0], x[1]), mx1 = fmaxf(x[2], x[3]);
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
        }
        if (t4 == 0) {
            rmax[warp * 16 + r0] = mx0;
            rmax[warp * 16 + r1] = mx1;
        }
        __syncthreads();
        // The tile's row maxima (every lane the same, in warp order), the new running maxima,
        // the weights of this tile and the factor on what came before.
        float mt0 = NEG_INF, mt1 = NEG_INF;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            mt0 = fmaxf(mt0, rmax[w * 16 + r0]);
            mt1 = fmaxf(mt1, rmax[w * 16 + r1]);
        }
        const float mo0 = m_sh[r0], mo1 = m_sh[r1];
        const float mn0 = fmaxf(mo0, mt0), mn1 = fmaxf(mo1, mt1);
        const bool ok0 = r0 < hg, ok1 = r1 < hg;
        const float p[4] = {ok0 && mn0 != NEG_INF && x[0] != NEG_INF ? expf(x[0] - mn0) : 0.0f,
                            ok0 && mn0 != NEG_INF && x[1] != NEG_INF ? expf(x[1] - mn0) : 0.0f,
                            ok1 && mn1 != NEG_INF && x[2] != NEG_INF ? expf(x[2] - mn1) : 0.0f,
                            ok1 && mn1 != NEG_INF && x[3] != NEG_INF ? expf(x[3] - mn1) : 0.0f};
        const float cr0 = mo0 == NEG_INF ? 0.0f : expf(mo0 - mn0), cr1 = mo1 == NEG_INF ? 0.0f : expf(mo1 - mn1);
        *(u32*)(ph + r0 * MLA_PST + k_lo) = mla_pack2<TY>(p[0], p[1]);
        *(u32*)(ph + r1 * MLA_PST + k_lo) = mla_pack2<TY>(p[2], p[3]);
        float sm0 = p[0] + p[1], sm1 = p[2] + p[3];
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            sm0 += __shfl_xor_sync(0xffffffffu, sm0, o);
            sm1 += __shfl_xor_sync(0xffffffffu, sm1, o);
        }
        if (t4 == 0) {
            rsum[warp * 16 + r0] = sm0;
            rsum[warp * 16 + r1] = sm1;
        }
        __syncthreads();
        if (tid < 16) {
            // Row tid's running max and sum (the lanes above computed the same max and factor).
            float mt = NEG_INF, sum = 0.0f;
#pragma unroll
            for (int w = 0; w < 8; ++w) {
                mt = fmaxf(mt, rmax[w * 16 + tid]);
                sum += rsum[w * 16 + tid];
            }
            const float mo = m_sh[tid], mn = fmaxf(mo, mt);
            const float cr = mo == NEG_INF ? 0.0f : expf(mo - mn);
            m_sh[tid] = mn;
            l_sh[tid] = l_sh[tid] * cr + sum;
        }
        // P·V: A = P (rows g4, g4 + 8; keys k0 + 2·t4.. and k0 + 8 + 2·t4..), B = V (keys × dims).
        mla_mma_rescale(acc, nd, cr0, cr1);
        const u16* pa = ph + g4 * MLA_PST + 2 * t4;
        for (int k0 = 0; k0 < nt; k0 += 16) {
            const u32 a[4] = {*(const u32*)(pa + k0), *(const u32*)(pa + 8 * MLA_PST + k0), *(const u32*)(pa + k0 + 8),
                              *(const u32*)(pa + 8 * MLA_PST + k0 + 8)};
            mla_mma_pv<TY>(acc, nd, a, kh + (k0 + 2 * t4) * st + dbase + g4, st);
        }
        __syncthreads();
    }
    mla_mma_store(acc, nd, dbase, g4, t4, hg, m_sh, l_sh, tok, n_heads, h0, G, dv, splits, split, out, part);
}

MLA_MMA_KERNEL(mla_attention_mma64, f16, MLA_THREADS, CACHE_F16)
MLA_MMA_KERNEL(mla_attention_mma64, bf16, MLA_THREADS, CACHE_BF16)

// ---- 64 heads × 64 keys a block, for prompts ---------------------------------------------
// mla_attention_mma64's arithmetic (the query and P rounded to the cache's type, f32 sums) with
// all of a token's heads (up to MLA_H64) in one block, so each key row a prompt's token reads is
// copied into shared memory once rather than once a 16-head group: 4·NQ warps (NQ = 2 or 4),
// warp w the rows (heads) 16·(w % 4).. and part w / 4 of NQ of the keys (scores) and of dv
// (output). The parts of a row agree on its running maximum through shared memory and keep
// their own sums, added at the end. Fragments come by ldmatrix (V transposed on the way). One
// block a multiprocessor (its ~158 KiB of shared memory), so the host plans one block an SM,
// not mla_attention's four. Needs dk % 16 == 0, dk ≤ MLA_MMA_DKMAX, dv % (64·NQ) == 0, dv ≤
// 512, G ≤ MLA_H64; 128·NQ threads.
// Shared (bytes): 2·(MLA_H64 + MLA_KT64)·(dk + 8) + 2·MLA_H64·MLA_PST + 4·(2·NQ + 4)·MLA_H64
// + 16·MLA_KT64 (this tile's pool rows and the next's).
#define MLA_H64 64

// Four 8 × 8 matrices of 16-bit values from shared memory, row addresses from lanes 8i..8i + 7
// for matrix i; TRANS delivers each transposed (a lane gets rows 2t, 2t + 1 of column g).
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const u16* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const u32 a = (u32)__cvta_generic_to_shared(p);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#else
    __trap();
#endif
}

template <int TY, int NQ>
__device__ __forceinline__ void mla_attention_mma64x64(const float* q, const float* q_pe, long long pe_off,
                                                       long long pe_stride, int parts, const u8* kdata,
                                                       long long krows, const u32* positions, const u32* tables,
                                                       long long n_table, const u32* token_seq, int max_blocks,
                                                       int block_size, const u32* sel, int has_sel, int n_sel,
                                                       int n_heads, int dk, int dv, int n_kv, float scale, int G,
                                                       int n_groups, int chunk, int splits, float* out,
                                                       float* part) {
    static_assert((NQ == 2 || NQ == 4) && MLA_H64 == 64 && MLA_KT64 == 64, "4·NQ warps: 4 row tiles × NQ parts");
    constexpr int LQ = NQ == 2 ? 1 : 2, NT = 8 / NQ, JN = 8 / NQ;  // log2 NQ, n-tiles, 64-dim chunks
    extern __shared__ __align__(16) u8 hx_sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    const int mt = warp & 3, pt = warp >> 2;
    const int tok = blockIdx.x / n_groups, grp = blockIdx.x % n_groups;
    const int h0 = grp * G, hg = min(G, n_heads - h0), split = blockIdx.y;
    const int st = dk + 8;
    u16* qh = (u16*)hx_sm;                                 // MLA_H64 × st
    u16* kh = qh + MLA_H64 * st;                           // MLA_KT64 × st
    u16* ph = kh + MLA_KT64 * st;                          // MLA_H64 × MLA_PST: the tile's P
    float* rmax = (float*)(ph + MLA_H64 * MLA_PST);        // NQ parts × MLA_H64
    float* rsum = rmax + NQ * MLA_H64;                     // NQ parts × MLA_H64
    float* hs = rsum + NQ * MLA_H64;                       // MLA_H64
    float* qscr = hs + MLA_H64;                            // 3 × MLA_H64 (mla_mma_query's m, l, c)
    long long* rows = (long long*)(qscr + 3 * MLA_H64);    // 2 × MLA_KT64: this tile's, the next's

    const long long pos = positions[tok];
    const MlaRange kr = mla_range(pos, n_kv, has_sel, n_sel, split, chunk);
    const bool use_sel = kr.use_sel;
    const long long k_begin = kr.k_begin, k_end = kr.k_end;
    if (splits > 1 && k_begin >= kr.L) {
        mla_empty_split(part, G, dv, splits, split, hg);
        return;
    }
    // The first tile's pool rows (threads past the query's warps' first 64 would idle anyway).
    if (tid < MLA_KT64) {
        const long long nt0 = min((long long)MLA_KT64, k_end - k_begin);
        rows[tid] = tid < nt0 ? mla_key_row(k_begin + tid, use_sel, sel, n_sel, tok, pos, tables, n_table,
                                            token_seq, max_blocks, block_size, krows)
                              : -1;
    }
#pragma unroll
    for (int i = 0; i < MLA_H64 / (8 * NQ); ++i) {
        // mla_mma_query rounds two heads a warp: 8·NQ a call.
        const int c = 8 * NQ * i;
        mla_mma_query<TY>(q, q_pe, pe_off, pe_stride, parts, tok, n_heads, h0 + c, min(8 * NQ, max(0, hg - c)), dk,
                          dv, scale, st, qh + c * st, hs + c, qscr + c, qscr + MLA_H64 + c, qscr + 2 * MLA_H64 + c);
    }
    // Output: dims [pt·dv/NQ, (pt + 1)·dv/NQ) in nj chunks of 64 (8 n-tiles each); lane (g4, t4)
    // holds rows ra = 16·mt + g4 and rb = ra + 8 at dims n0 + 2·t4, + 1 of each n-tile.
    const int nj = dv >> (6 + LQ), dpart = pt * (dv >> LQ);
    const int ra = 16 * mt + g4, rb = ra + 8;
    const bool oka = ra < hg, okb = rb < hg;
    float acc[JN][8][4];
#pragma unroll
    for (int j = 0; j < JN; ++j)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][i][e] = 0.0f;
    // Running maxima (every part of a row holds the same) and this part's running sums.
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.0f, l_b = 0.0f;
    // ldmatrix row addresses: A tiles (16 rows × 16 columns) take rows lane % 8 + 8·(lane / 8 % 2)
    // at columns 8·(lane / 16); the keys' B tiles (two n-tiles of 8 keys × 16 dims) keys
    // lane % 8 + 8·(lane / 16) at dims 8·(lane / 8 % 2); V (transposed) keys lane % 8 + 8·(lane /
    // 8 % 2) at dims 8·(lane / 16).
    const int lr = lane & 7, l1 = (lane >> 3) & 1, l2 = lane >> 4;
    const u16* qa = qh + (16 * mt + lr + 8 * l1) * st + 8 * l2;
    const u16* kb_lds = kh + (8 * NT * pt + lr + 8 * l2) * st + 8 * l1;
    const u16* pa = ph + (16 * mt + lr + 8 * l1) * MLA_PST + 8 * l2;
    const u16* va = kh + (lr + 8 * l1) * st + dpart + 8 * l2;
    const int cpr = dk / 8;  // 16-byte chunks a key row
    int cur = 0;
    for (long long kb = k_begin; kb < k_end; kb += MLA_KT64, cur ^= 1) {
        const int nt = (int)min((long long)MLA_KT64, k_end - kb);
        const long long* trow = rows + cur * MLA_KT64;
        __syncthreads();
        // Key rows (zeros for masked and missing ones): every copy of the tile in flight at once,
        // warp w rows w, w + 4·NQ, ..., its lanes the row's 16-byte chunks.
#pragma unroll
        for (int i = 0; i < MLA_KT64 / (4 * NQ); ++i) {
            const int kk = warp + 4 * NQ * i;
            const long long r = trow[kk];
#pragma unroll
            for (int j = 0; j < (MLA_MMA_DKMAX / 8 + 31) / 32; ++j) {
                const int c = lane + 32 * j;
                if (c < cpr) {
                    u16* dst = kh + kk * st + c * 8;
                    if (r >= 0)
                        cp_async16(dst, kdata + (r * dk + (long long)c * 8) * 2);
                    else
                        *(uint4*)dst = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
        cp_async_commit();
        // The next tile's pool rows while the copies fly (the slot was last read before the
        // barrier above).
        if (tid >= MLA_KT64 && tid < 2 * MLA_KT64 && kb + MLA_KT64 < k_end) {
            const int t = tid - MLA_KT64;
            const long long kn = kb + MLA_KT64 + t;
            rows[(cur ^ 1) * MLA_KT64 + t] = kn < k_end ? mla_key_row(kn, use_sel, sel, n_sel, tok, pos, tables,
                                                                        n_table, token_seq, max_blocks,
                                                                        block_size, krows)
                                                        : -1;
        }
        cp_async_wait_all();
        __syncthreads();
        // Scores of rows 16·mt.. with keys 8·NT·pt + 8·n.. (n < NT), over all of dk; the next
        // step's fragments load while this step's products run.
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
        {
            u32 a[4], b[NT / 2][4];
            ldsm_x4<false>(a, qa);
#pragma unroll
            for (int h = 0; h < NT / 2; ++h) ldsm_x4<false>(b[h], kb_lds + 16 * h * st);
            for (int k0 = 0; k0 < dk; k0 += 16) {
                u32 na[4], nb[NT / 2][4];
                const int kn = k0 + 16 < dk ? k0 + 16 : k0;
                ldsm_x4<false>(na, qa + kn);
#pragma unroll
                for (int h = 0; h < NT / 2; ++h) ldsm_x4<false>(nb[h], kb_lds + 16 * h * st + kn);
#pragma unroll
                for (int h = 0; h < NT / 2; ++h) {
                    mma_m16n8k16<TY>(s[2 * h], a, b[h][0], b[h][1]);
                    mma_m16n8k16<TY>(s[2 * h + 1], a, b[h][2], b[h][3]);
                }
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    a[u] = na[u];
#pragma unroll
                    for (int h = 0; h < NT / 2; ++h) b[h][u] = nb[h][u];
                }
            }
        }
        const float hsa = hs[ra], hsb = hs[rb];
        float mxa = NEG_INF, mxb = NEG_INF;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int kk = 8 * NT * pt + 8 * n + 2 * t4 + e;
                const bool ok = kk < nt && trow[kk] >= 0;
                s[n][e] = ok && oka ? s[n][e] * hsa : NEG_INF;
                s[n][2 + e] = ok && okb ? s[n][2 + e] * hsb : NEG_INF;
                mxa = fmaxf(mxa, s[n][e]);
                mxb = fmaxf(mxb, s[n][2 + e]);
            }
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, o));
            mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, o));
        }
        if (t4 == 0) {
            rmax[pt * MLA_H64 + ra] = mxa;
            rmax[pt * MLA_H64 + rb] = mxb;
        }
        __syncthreads();
        // The tile's row maxima (every part reads the same NQ values in order), the new running
        // maxima, this tile's weights into P and the factor on what came before.
        float tma = fmaxf(rmax[ra], rmax[MLA_H64 + ra]);
#pragma unroll
        for (int q = 2; q < NQ; ++q) tma = fmaxf(tma, rmax[q * MLA_H64 + ra]);
        const float mna = fmaxf(m_a, tma);
        float tmb = fmaxf(rmax[rb], rmax[MLA_H64 + rb]);
#pragma unroll
        for (int q = 2; q < NQ; ++q) tmb = fmaxf(tmb, rmax[q * MLA_H64 + rb]);
        const float mnb = fmaxf(m_b, tmb);
        const float ca = m_a == NEG_INF ? 0.0f : expf(m_a - mna), cb = m_b == NEG_INF ? 0.0f : expf(m_b - mnb);
        float suma = 0.0f, sumb = 0.0f;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                p[e] = s[n][e] != NEG_INF ? expf(s[n][e] - mna) : 0.0f;
                p[2 + e] = s[n][2 + e] != NEG_INF ? expf(s[n][2 + e] - mnb) : 0.0f;
            }
            const int kk = 8 * NT * pt + 8 * n + 2 * t4;
            *(u32*)(ph + ra * MLA_PST + kk) = mla_pack2<TY>(p[0], p[1]);
            *(u32*)(ph + rb * MLA_PST + kk) = mla_pack2<TY>(p[2], p[3]);
            suma += p[0] + p[1];
            sumb += p[2] + p[3];
        }
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            suma += __shfl_xor_sync(0xffffffffu, suma, o);
            sumb += __shfl_xor_sync(0xffffffffu, sumb, o);
        }
        l_a = l_a * ca + suma;
        l_b = l_b * cb + sumb;
        m_a = mna;
        m_b = mnb;
#pragma unroll
        for (int j = 0; j < JN; ++j)
            if (j < nj) mla_mma_rescale(acc[j], 8, ca, cb);
        __syncthreads();
        // P·V: A = P (rows 16·mt.., 16 keys a step), B = V (16 keys × 16 dims a transposed load).
        for (int k0 = 0; k0 < nt; k0 += 16) {
            u32 a[4];
            ldsm_x4<false>(a, pa + k0);
#pragma unroll
            for (int j = 0; j < JN; ++j)
                if (j < nj)
#pragma unroll
                    for (int i2 = 0; i2 < 4; ++i2) {
                        u32 b[4];
                        ldsm_x4<true>(b, va + k0 * st + 64 * j + 16 * i2);
                        mma_m16n8k16<TY>(acc[j][2 * i2], a, b[0], b[1]);
                        mma_m16n8k16<TY>(acc[j][2 * i2 + 1], a, b[2], b[3]);
                    }
        }
    }
    // Each row's sum: its parts' added in order.
    if (t4 == 0) {
        rsum[pt * MLA_H64 + ra] = l_a;
        rsum[pt * MLA_H64 + rb] = l_b;
    }
    __syncthreads();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int g = hh ? rb : ra;
        if (g >= hg) continue;
        float l = rsum[g] + rsum[MLA_H64 + g];
#pragma unroll
        for (int q = 2; q < NQ; ++q) l += rsum[q * MLA_H64 + g];
        const float inv = splits == 1 ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
        float* dst = splits == 1 ? out + ((long long)tok * n_heads + h0 + g) * dv
                                 : mla_part_rows(part, G, dv, splits, split) + (long long)g * dv;
#pragma unroll
        for (int j = 0; j < JN; ++j)
            if (j < nj)
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int d = dpart + 64 * j + 8 * i + 2 * t4;
                    dst[d] = acc[j][i][2 * hh] * inv;
                    dst[d + 1] = acc[j][i][2 * hh + 1] * inv;
                }
        if (splits > 1 && pt == 0 && t4 == 0) {
            float* ml = mla_part_rows(part, G, dv, splits, split) + (long long)G * dv;
            ml[2 * g] = hh ? m_b : m_a;
            ml[2 * g + 1] = l;
        }
    }
}

MLA_MMA_KERNEL(mla_attention_mma64x64, f16, MLA_THREADS, CACHE_F16, 2)
MLA_MMA_KERNEL(mla_attention_mma64x64, bf16, MLA_THREADS, CACHE_BF16, 2)
// 16 warps: each a quarter of the tile's keys and of dv (64 accumulators, at most 128 registers),
// twice the warps a multiprocessor to hide the latencies the 8-warp kernel waits on (Nsight,
// docs/performance.md). The default where dv % 256 == 0; GLINT_CUDA_MLA_H64_WARPS=8 takes the
// 8-warp kernel.
MLA_MMA_KERNEL(mla_attention_mma64x64, w16_f16, 2 * MLA_THREADS, CACHE_F16, 4)
MLA_MMA_KERNEL(mla_attention_mma64x64, w16_bf16, 2 * MLA_THREADS, CACHE_BF16, 4)
