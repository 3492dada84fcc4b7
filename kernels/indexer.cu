// The DSA lightning indexer's scores and row-wise top-k (crates/glint-core/src/cpu/attention.rs).
//
// Value order everywhere is Rust's f32::total_cmp (NaN above +inf, -NaN below -inf, -0 below
// +0), ties to the lower index, so the selected set equals the CPU's.

// f32 -> u32 whose unsigned order is f32::total_cmp's order.
__device__ __forceinline__ u32 idx_order_key(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The first radix level of a row's top-k, counted by the tensor-core scores kernel as it writes
// the scores where the host asks (`hist`, TOPK_HIST_BINS words a row; top_k_rows_ch reads and
// zeroes it): the top TOPK_HIST_BITS bits of each key's order key. The warp's keys are counted
// an atomic a distinct bin (they crowd into few).
#define TOPK_HIST_BITS 11
#define TOPK_HIST_BINS (1 << TOPK_HIST_BITS)
__device__ __forceinline__ void topk_hist_add(u32* h, bool in, u32 key) {
    const int lane = threadIdx.x & 31;
    // Lanes without a key take a bin of their own past the table, so none joins a real one.
    const u32 bin = in ? key >> (32 - TOPK_HIST_BITS) : (u32)(TOPK_HIST_BINS + lane);
    const u32 same = __match_any_sync(0xffffffffu, bin);
    if (in && lane == __ffs(same) - 1) atomicAdd(&h[bin], (u32)__popc(same));
}

// Pool row of logical key t of token s's sequence, or -1 where a table entry, the sequence or
// the row is out of range (ids are the caller's check; this only keeps memory safe).

// ---- scores -----------------------------------------------------------------------------------
// Grid (n_tokens, ceil(n_kv / kt)), block of `blockDim.x` threads (a multiple of 32). Block
// (s, y) scores keys [y·kt, y·kt + kt) of token s: the token's queries (n_heads rows of d, padded
// to d + 1 so lane j reading head j is conflict-free) and weights and the kt decoded key rows sit
// in dynamic shared memory; each warp takes a key, lane j the heads j, j + 32, ..., then one warp
// sum. out[s][t] = Σ_j w'[s][j]·ReLU(q[s][j]·k[t]) for t ≤ pos[s] (and t < n_kv), −∞ otherwise,
// where w' = w · w_scale rounded to f32 as it is read (IndexerParams::w_scale).
// Shared: n_heads·(d + 1) + n_heads + kt·d floats, then kt i64 rows.
extern "C" __global__ void indexer_scores(const float* q, const float* w, float w_scale, const u8* kdata,
                                          long long krows, int kdim, int kty, const u32* positions,
                                          const u32* tables, long long n_table, const u32* token_seq,
                                          int max_blocks, int block_size, int n_heads, int d, int n_kv, int kt,
                                          float* out) {
    pdl_enter();
    extern __shared__ float isc_sm[];
    int s = blockIdx.x;
    long long t0 = (long long)blockIdx.y * kt;
    long long t_end = min(t0 + kt, (long long)n_kv);
    long long nk = min((long long)positions[s] + 1, (long long)n_kv);
    float* orow = out + (long long)s * n_kv;
    int tid = threadIdx.x, bd = blockDim.x;
    if (t0 >= nk) {
        for (long long t = t0 + tid; t < t_end; t += bd) orow[t] = NEG_INF;
        return;
    }
    int qs_stride = d + 1;
    float* qs = isc_sm;
    float* ws = qs + (long long)n_heads * qs_stride;
    float* ks = ws + n_heads;
    // 8-byte aligned after the floats.
    long long off = (long long)n_heads * qs_stride + n_heads + (long long)kt * d;
    off = (off + 1) & ~1ll;
    long long* rows = (long long*)(isc_sm + off);

    const float* qg = q + (long long)s * n_heads * d;
    for (int e0 = tid; e0 < n_heads * d; e0 += bd * 4) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int e = e0 + u * bd;
            v[u] = e < n_heads * d ? qg[e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int e = e0 + u * bd;
            if (e < n_heads * d) qs[(e / d) * qs_stride + e % d] = v[u];
        }
    }
    for (int j = tid; j < n_heads; j += bd) ws[j] = w[(long long)s * n_heads + j] * w_scale;
    for (int kk = tid; kk < kt; kk += bd) {
        long long t = t0 + kk;
        rows[kk] = t < nk ? paged_row(tables, n_table, token_seq, max_blocks, block_size, krows, s, t) : -1;
    }
    __syncthreads();
    CacheView c = {kdata, krows, kdim, kty};
    paged_load_tile(c, rows, kt, d, d, ks);
    __syncthreads();
    int warp = tid >> 5, lane = tid & 31, nw = bd >> 5;
    for (int kk = warp; kk < kt; kk += nw) {
        long long t = t0 + kk;
        if (t >= t_end) break;
        const float* kr = ks + (long long)kk * d;
        float acc = 0.0f;
        for (int j = lane; j < n_heads; j += 32) {
            const float* qj = qs + (long long)j * qs_stride;
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot = fmaf(qj[i], kr[i], dot);
            acc += ws[j] * fmaxf(dot, 0.0f);
        }
        acc = warp_sum(acc);
        if (lane == 0) orow[t] = t < nk ? acc : NEG_INF;
    }
}

// GLM-5's shape (32 heads, d a multiple of 16) as register tiles: the kernel above gives each
// lane one head and runs its d-long dot alone, two shared-memory loads per FMA, so at 16k keys
// (513 blocks) it is bound by the SM's shared-memory wavefronts (27 µs on an H200), not by its
// 8 MB of keys. Here warp w takes keys 4w..4w+3 of the block's IDX_T32_KT, lane (g = lane / 4,
// e = lane % 4) heads 4g..4g+3 over every fourth float4 of d (float4 e, e + 4, ...): 16
// running dots from 4 + 4 float4 loads per 64 FMAs. The four lanes of a tile add their dots
// (xor 1, 2); lane e then takes key 4w + e, weights its 4 heads' ReLU'd dots, and the 8 head
// groups add up (xor 4, 8, 16). Rows padded to d + 4 floats keep each quarter-warp's float4
// loads on distinct banks. Same result as indexer_scores up to the order of the f32 sums (the
// conformance suite bounds both against f64). Shared: (32 + IDX_T32_KT)·(d + 4) + 32 floats,
// then IDX_T32_KT i64 rows.
#define IDX_T32_KT 32
extern "C" __global__ void __launch_bounds__(256) indexer_scores_t32(
    const float* q, const float* w, float w_scale, const u8* kdata, long long krows, int kdim, int kty,
    const u32* positions, const u32* tables, long long n_table, const u32* token_seq, int max_blocks,
    int block_size, int d, int n_kv, float* out) {
    pdl_enter();
    extern __shared__ __align__(16) float it32_sm[];
    const int s = blockIdx.x, kt = IDX_T32_KT, st = d + 4;
    const long long t0 = (long long)blockIdx.y * kt;
    const long long t_end = min(t0 + kt, (long long)n_kv);
    const long long nk = min((long long)positions[s] + 1, (long long)n_kv);
    float* orow = out + (long long)s * n_kv;
    const int tid = threadIdx.x;
    if (t0 >= nk) {
        for (long long t = t0 + tid; t < t_end; t += blockDim.x) orow[t] = NEG_INF;
        return;
    }
    float* qs = it32_sm;
    float* ks = qs + 32 * st;
    float* ws = ks + kt * st;
    long long* rows = (long long*)(ws + 32);  // (32 + kt)·st + 32 floats: a multiple of 4
    const float* qg = q + (long long)s * 32 * d;
    if (((unsigned long long)qg & 15) == 0) {
        const int d4 = d >> 2;
        for (int e = tid; e < 32 * d4; e += blockDim.x) {
            const int h = e / d4, i = e - h * d4;
            *(float4*)(qs + h * st + 4 * i) = ((const float4*)qg)[e];
        }
    } else {
        for (int e = tid; e < 32 * d; e += blockDim.x) qs[e / d * st + e % d] = qg[e];
    }
    if (tid < 32) ws[tid] = w[(long long)s * 32 + tid] * w_scale;
    for (int kk = tid; kk < kt; kk += blockDim.x) {
        const long long t = t0 + kk;
        rows[kk] = t < nk ? paged_row(tables, n_table, token_seq, max_blocks, block_size, krows, s, t) : -1;
    }
    __syncthreads();
    CacheView c = {kdata, krows, kdim, kty};
    paged_load_tile(c, rows, kt, d, st, ks);
    __syncthreads();
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, e = lane & 3;
    const float* qr = qs + 4 * g * st + 4 * e;
    const float* kr = ks + 4 * warp * st + 4 * e;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[r][k] = 0.0f;
    for (int i = 0; i < d; i += 16) {
        float4 qv[4], kv[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) qv[r] = *(const float4*)(qr + r * st + i);
#pragma unroll
        for (int k = 0; k < 4; ++k) kv[k] = *(const float4*)(kr + k * st + i);
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                acc[r][k] = fmaf(qv[r].x, kv[k].x, acc[r][k]);
                acc[r][k] = fmaf(qv[r].y, kv[k].y, acc[r][k]);
                acc[r][k] = fmaf(qv[r].z, kv[k].z, acc[r][k]);
                acc[r][k] = fmaf(qv[r].w, kv[k].w, acc[r][k]);
            }
    }
    float part = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        float mine = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float v = acc[r][k];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if (k == e) mine = v;
        }
        part += ws[4 * g + r] * fmaxf(mine, 0.0f);
    }
    part += __shfl_xor_sync(0xffffffffu, part, 4);
    part += __shfl_xor_sync(0xffffffffu, part, 8);
    part += __shfl_xor_sync(0xffffffffu, part, 16);
    const long long t = t0 + 4 * warp + e;
    if (g == 0 && t < t_end) orow[t] = t < nk ? part : NEG_INF;
}

// ---- scores on tensor cores: 16-bit and fp8 key caches ------------------------------------------
// GLM-5's shape (32 heads, d a multiple of 16 up to 256) when the keys are 16-bit floats or fp8:
// the 32 × d queries times the d × 64 keys of a block as mma.sync m16n8k16 tiles with f32 sums,
// where indexer_scores_t32 spends its time on shared-memory reads of f32 tiles (4 µs of 11 at 16k
// keys on an H200, the FMAs 2 more). The operands are 16-bit: fp8 and f16 keys as f16 (fp8
// exactly, common.cuh fp8_to_f16_bits; the row's scale multiplies the dot), bf16 keys as bf16;
// the query is rounded to the keys' type, f16 after a power-of-two scale a head that puts its
// largest |q| in [2¹⁴, 2¹⁵) (no overflow, no subnormals; undone exactly on the sum). That rounding
// (2⁻¹¹ of each |q·k| term for f16, 2⁻⁹ for bf16) is the only difference from the f32 kernels,
// and less than DeepSeek's own indexer, which rounds the query to fp8; the conformance suite
// bounds it against f64. Warp w takes keys 8w .. 8w + 7 of each 64 of the block for all 32 heads
// (two m-tiles): lane (g, t) = (lane / 4, lane % 4) ends with heads g, g + 8, g + 16, g + 24 of keys
// 2t, 2t + 1, weights its four heads' ReLU'd scores, and the 8 lanes of a t add up.
// Shared: (32 + KT)·(d + 8) 16-bit values, 32 + 32 + KT floats, KT i64.
// KT = IDX_MMA_KT_WIDE keys a block (`indexer_scores_mma128_*`, the host's default) or
// IDX_MMA_KT: every block rounds the token's whole query (4,096 values) before its keys, which
// at 64 keys a block is as many conversions as its keys' and made the kernel bound by
// instruction issue at 64k keys (Nsight, call BH of 2026-12-07: 22 µs, 60% of issue slots, 12%
// of DRAM); a 128-key block rounds it half as often (call BI: decode 2-6% faster at 16k and
// 64k).
#define IDX_MMA_KT 64
#define IDX_MMA_KT_WIDE 128

template <int TY, int KT>
__device__ __forceinline__ void indexer_scores_mma(const float* q, const float* w, float w_scale, const u8* kdata,
                                                   long long krows, const u32* positions, const u32* tables,
                                                   long long n_table, const u32* token_seq, int max_blocks,
                                                   int block_size, int d, int n_kv, float* out, u32* hist) {
    static_assert(KT % 64 == 0, "8 warps of 8 keys a pass");
    extern __shared__ __align__(16) u8 im_sm[];
    const int s = blockIdx.x, kt = KT, st = d + 8;  // st: 16-bit values a shared row
    const long long t0 = (long long)blockIdx.y * kt;
    const long long t_end = min(t0 + kt, (long long)n_kv);
    const long long nk = min((long long)positions[s] + 1, (long long)n_kv);
    float* orow = out + (long long)s * n_kv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    u32* hrow = hist ? hist + (long long)s * TOPK_HIST_BINS : nullptr;
    if (t0 >= nk) {
        for (long long t = t0 + tid; t < t_end; t += blockDim.x) orow[t] = NEG_INF;
        if (hrow && tid == 0) atomicAdd(&hrow[idx_order_key(NEG_INF) >> (32 - TOPK_HIST_BITS)], (u32)(t_end - t0));
        return;
    }
    u16* qs = (u16*)im_sm;
    u16* ks = qs + 32 * st;
    float* ws = (float*)(ks + kt * st);  // w·w_scale a head
    float* hs = ws + 32;                 // the inverse of the head's query scale
    float* kscale = hs + 32;             // fp8: the key row's scale
    long long* rows = (long long*)(kscale + kt);
    // Queries: warp w rounds heads 4w .. 4w + 3 (256 threads), every value loaded before the
    // first is used (one round of memory latency, where a head at a time was eight).
    const float* qg = q + (long long)s * 32 * d + (long long)warp * 4 * d;
    float qv[4][8];  // d ≤ 256: 8 values a lane a head
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = lane + 32 * u;
            qv[j][u] = i < d ? qg[j * d + i] : 0.0f;
        }
    // The key rows' pool places while those loads are in flight.
    for (int kk = tid; kk < kt; kk += blockDim.x) {
        const long long t = t0 + kk;
        rows[kk] = t < nk ? paged_row(tables, n_table, token_seq, max_blocks, block_size, krows, s, t) : -1;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int h = 4 * warp + j;
        int shift = 0;
        if (TY != CACHE_BF16) {
            float amax = 0.0f;
#pragma unroll
            for (int u = 0; u < 8; ++u) amax = fmaxf(amax, fabsf(qv[j][u]));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            if (amax > 0.0f) shift = min(max(14 - ilogbf(amax), -60), 60);
        }
        const float up = ldexpf(1.0f, shift);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = lane + 32 * u;
            const float v = qv[j][u] * up;  // exact: a power of two
            if (i < d)
                qs[h * st + i] = TY == CACHE_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                                  : __half_as_ushort(__float2half_rn(v));
        }
        if (lane == 0) {
            ws[h] = w[(long long)s * 32 + h] * w_scale;
            hs[h] = ldexpf(1.0f, -shift);
        }
    }
    __syncthreads();
    // Keys: 16-byte chunks of the rows, four loads in flight a thread; fp8 chunks widen to 32 bytes.
    const int esz = TY == CACHE_FP8 ? 1 : 2, cpr = d * esz / 16, total = kt * cpr;
    for (int e0 = tid; e0 < total; e0 += blockDim.x * 4) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int e = e0 + u * blockDim.x, kk = e / cpr;
            v[u] = make_uint4(0u, 0u, 0u, 0u);
            if (e < total && rows[kk] >= 0)
                v[u] = *(const uint4*)(kdata + rows[kk] * d * esz + (long long)(e - kk * cpr) * 16);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int e = e0 + u * blockDim.x, kk = e / cpr, c = e - kk * cpr;
            if (e >= total) break;
            if (TY == CACHE_FP8) {
                const u32 wd[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
                u32 h[8];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    h[2 * j] = fp8_to_f16_bits(wd[j] & 0xffu) | (fp8_to_f16_bits((wd[j] >> 8) & 0xffu) << 16);
                    h[2 * j + 1] = fp8_to_f16_bits((wd[j] >> 16) & 0xffu) | (fp8_to_f16_bits(wd[j] >> 24) << 16);
                }
                uint4* dst = (uint4*)(ks + kk * st + c * 16);
                dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
                dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
            } else {
                *(uint4*)(ks + kk * st + c * 8) = v[u];
            }
        }
    }
    if (TY == CACHE_FP8) {
        const float* scales = (const float*)(kdata + cache_scale_offset(krows, d));
        for (int kk = tid; kk < kt; kk += blockDim.x) kscale[kk] = rows[kk] >= 0 ? scales[rows[kk]] : 0.0f;
    }
    __syncthreads();
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
    for (int n0 = 8 * warp; n0 < KT; n0 += 64) {
        float acc[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[m][j] = 0.0f;
        const u16* kr = ks + (n0 + g) * st + 2 * t;
        for (int k0 = 0; k0 < d; k0 += 16) {
            const u32 b0 = *(const u32*)(kr + k0), b1 = *(const u32*)(kr + k0 + 8);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                const u16* qr = qs + (16 * m + g) * st + k0 + 2 * t;
                const u32 a[4] = {*(const u32*)qr, *(const u32*)(qr + 8 * st), *(const u32*)(qr + 8),
                                  *(const u32*)(qr + 8 * st + 8)};
                mma_m16n8k16<TY>(acc[m], a, b0, b1);
            }
        }
        // acc[m][0..1]: head 16m + g, keys n0 + 2t, + 1; acc[m][2..3]: head 16m + g + 8.
        float part[2] = {0.0f, 0.0f};
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int h = 16 * m + g + (j >> 1) * 8, key = n0 + 2 * t + (j & 1);
                float v = acc[m][j] * hs[h];
                if (TY == CACHE_FP8) v *= kscale[key];
                part[j & 1] += ws[h] * fmaxf(v, 0.0f);
            }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            part[j] += __shfl_xor_sync(0xffffffffu, part[j], 4);
            part[j] += __shfl_xor_sync(0xffffffffu, part[j], 8);
            part[j] += __shfl_xor_sync(0xffffffffu, part[j], 16);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const long long tt = t0 + n0 + 2 * t + j;
            const float v = tt < nk ? part[j] : NEG_INF;
            if (g == 0 && tt < t_end) orow[tt] = v;
            if (hrow) topk_hist_add(hrow, g == 0 && tt < t_end, idx_order_key(v));
        }
    }
}

#define IDX_MMA_KERNEL(name, TY, WIDTH, KT)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) indexer_scores_mma##WIDTH##_##name(                     \
        const float* q, const float* w, float w_scale, const u8* kdata, long long krows, const u32* positions, \
        const u32* tables, long long n_table, const u32* token_seq, int max_blocks, int block_size, int d,     \
        int n_kv, float* out, u32* hist) {                                                                    \
        pdl_enter();                                                                                          \
        indexer_scores_mma<TY, KT>(q, w, w_scale, kdata, krows, positions, tables, n_table, token_seq,        \
                                   max_blocks, block_size, d, n_kv, out, hist);                               \
    }
IDX_MMA_KERNEL(f16, CACHE_F16, , IDX_MMA_KT)
IDX_MMA_KERNEL(bf16, CACHE_BF16, , IDX_MMA_KT)
IDX_MMA_KERNEL(fp8, CACHE_FP8, , IDX_MMA_KT)
IDX_MMA_KERNEL(f16, CACHE_F16, 128, IDX_MMA_KT_WIDE)
IDX_MMA_KERNEL(bf16, CACHE_BF16, 128, IDX_MMA_KT_WIDE)
IDX_MMA_KERNEL(fp8, CACHE_FP8, 128, IDX_MMA_KT_WIDE)

// ---- top-k ------------------------------------------------------------------------------------
// Warp 0 of a radix pass: the bin b of the k-th largest — the highest b ≥ 1 whose count from b
// up reaches `remaining`, else 0 — and the count above b, what a scan down from bin 255 finds.
// Lane l holds bins 8l..8l+7 (zeroing them where `clear`, for the next pass); a suffix scan
// over the lanes gives the count above; the highest lane with a hit writes the new prefix and
// what remains to take.
// The pick's two warp-wide steps, shared by topk_pick_bin_h and topk_pick_wide: the suffix scan
// of the lanes' totals (keys in lane `lane`'s bins and above), and the store by the highest
// lane that found the bin (b > 0; else lane 0, whose bin 0 is then the one: `h0` its count).
__device__ __forceinline__ u32 topk_lanes_above(u32 tot, int lane) {
    u32 suf = tot;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u32 v = __shfl_down_sync(0xffffffffu, suf, o);
        if (lane + o < 32) suf += v;
    }
    return suf;
}
__device__ __forceinline__ void topk_pick_store(int b, u32 cum_b, u32 suf, u32 h0, int lane, u32 prefix, int shift,
                                                u32 remaining, u32* sh_prefix, u32* sh_remaining) {
    const u32 hit = __ballot_sync(0xffffffffu, b > 0);
    if (lane == (hit ? 31 - __clz(hit) : 0)) {
        if (b == 0) cum_b = suf - h0;  // lane 0: every bin above bin 0
        *sh_prefix = prefix | ((u32)b << shift);
        *sh_remaining = remaining - cum_b;
    }
}

// topk_pick_bin with the lane's 8 bins already in registers (the cluster kernel sums them over
// its blocks' shared memory).
__device__ __forceinline__ void topk_pick_bin_h(const u32 (&h)[8], int lane, u32 prefix, int shift, u32 remaining,
                                                u32* sh_prefix, u32* sh_remaining);

__device__ __forceinline__ void topk_pick_bin(u32* hist, bool clear, int lane, u32 prefix, int shift,
                                              u32 remaining, u32* sh_prefix, u32* sh_remaining) {
    u32 h[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        h[j] = hist[8 * lane + j];
        if (clear) hist[8 * lane + j] = 0;
    }
    topk_pick_bin_h(h, lane, prefix, shift, remaining, sh_prefix, sh_remaining);
}

__device__ __forceinline__ void topk_pick_bin_h(const u32 (&h)[8], int lane, u32 prefix, int shift, u32 remaining,
                                                u32* sh_prefix, u32* sh_remaining) {
    u32 tot = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) tot += h[j];
    const u32 suf = topk_lanes_above(tot, lane);  // keys in this lane's bins and above
    u32 cum = suf - tot;
    int b = 0;
    u32 cum_b = 0;
#pragma unroll
    for (int j = 7; j >= 0; j--) {
        const int bin = 8 * lane + j;
        if (b == 0 && bin > 0 && cum + h[j] >= remaining) {
            b = bin;
            cum_b = cum;
        }
        cum += h[j];
    }
    topk_pick_store(b, cum_b, suf, h[0], lane, prefix, shift, remaining, sh_prefix, sh_remaining);
}

// topk_pick_bin_h's choice over a table of 32·NPL bins in shared memory, lane l holding bins
// NPL·l .. NPL·l + NPL − 1: only the lane whose bins hold the crossing scans them.
template <int NPL>
__device__ __forceinline__ void topk_pick_wide(const u32* h, int lane, u32 prefix, int shift, u32 remaining,
                                               u32* sh_prefix, u32* sh_remaining) {
    static_assert((NPL & (NPL - 1)) == 0, "a power of two");
    const u32* mine = h + NPL * lane;
    u32 tot = 0;
    // Lane l starts at its bin l % NPL, so the lanes' reads fall in 32 different banks (in order,
    // all NPL·l + j share bank j).
#pragma unroll 8
    for (int j = 0; j < NPL; j++) tot += mine[(j + lane) & (NPL - 1)];
    const u32 suf = topk_lanes_above(tot, lane);  // keys in this lane's bins and above
    u32 cum = suf - tot;
    int b = 0;
    u32 cum_b = 0;
    if (cum < remaining && suf >= remaining) {
        for (int j = NPL - 1; j >= 0; j--) {
            const int bin = NPL * lane + j;
            if (bin > 0 && cum + mine[j] >= remaining) {
                b = bin;
                cum_b = cum;
                break;
            }
            cum += mine[j];
        }
    }
    topk_pick_store(b, cum_b, suf, mine[0], lane, prefix, shift, remaining, sh_prefix, sh_remaining);
}

// One block per row (blockDim.x a multiple of 32, at most 1024). A radix select over the
// total-order keys (four passes of 8 bits) finds T, the k-th largest key, and how many of the
// keys equal to T are taken (the lowest-index ones). A last pass writes, in index order, every
// index with key > T to ids[0 ..) and the first of those with key == T after them: a
// deterministic set and order. Needs 1 ≤ k ≤ n.
extern "C" __global__ void top_k_rows(const float* x, int n, int k, u32* ids) {
    pdl_enter();
    __shared__ u32 hist[256];
    __shared__ u32 sh_prefix, sh_remaining;
    __shared__ u32 warp_gt[32], warp_eq[32];
    const float* row = x + (long long)blockIdx.x * n;
    u32* out = ids + (long long)blockIdx.x * k;
    int tid = threadIdx.x, bd = blockDim.x;
    int lane = tid & 31, warp = tid >> 5;

    u32 prefix = 0, mask = 0, remaining = (u32)k;
    for (int pass = 0; pass < 4; pass++) {
        int shift = 24 - 8 * pass;
        for (int i = tid; i < 256; i += bd) hist[i] = 0;
        __syncthreads();
        // Eight loads in flight per thread.
        // The trip count is the block's, not the thread's: the ballots below need whole warps.
        for (int c0 = 0; c0 < n; c0 += bd * 8) {
            const int i0 = c0 + tid;
            u32 kk[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * bd;
                kk[u] = i < n ? idx_order_key(row[i]) : 0u;
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * bd;
                // Keys crowd into few bins (ReLU zeros, one exponent): one atomic per distinct bin
                // of the warp, not one per key.
                const bool in = i < n && (kk[u] & mask) == prefix;
                const u32 act = __ballot_sync(0xffffffffu, in);
                if (in) {
                    const u32 bin = (kk[u] >> shift) & 255u;
                    const u32 same = __match_any_sync(act, bin);
                    if ((int)(__ffs(same) - 1) == lane) atomicAdd(&hist[bin], (u32)__popc(same));
                }
            }
        }
        __syncthreads();
        if (warp == 0) topk_pick_bin(hist, false, lane, prefix, shift, remaining, &sh_prefix, &sh_remaining);
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= 255u << shift;
    }
    const u32 T = prefix;
    const u32 n_gt = (u32)k - remaining;  // keys above T: all taken
    // Thread tid takes the keys [tid·per, tid·per + per): it counts its keys above and equal to
    // T, a block scan of the counts says where its indices go, and it writes them in index
    // order — one barrier in all, where a pass over blockDim-wide chunks needs two per chunk.
    const int per = (n + bd - 1) / bd;
    const int i0 = min(n, tid * per), i1 = min(n, i0 + per);
    u32 cgt = 0, ceq = 0;
    for (int c = i0; c < i1; c += 8) {
        u32 kk[8];
#pragma unroll
        for (int u = 0; u < 8; u++) kk[u] = c + u < i1 ? idx_order_key(row[c + u]) : 0u;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            cgt += c + u < i1 && kk[u] > T;
            ceq += c + u < i1 && kk[u] == T;
        }
    }
    u32 sgt = cgt, seq = ceq;  // inclusive scans over the warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const u32 a = __shfl_up_sync(0xffffffffu, sgt, o), b = __shfl_up_sync(0xffffffffu, seq, o);
        if (lane >= o) {
            sgt += a;
            seq += b;
        }
    }
    if (lane == 31) {
        warp_gt[warp] = sgt;
        warp_eq[warp] = seq;
    }
    __syncthreads();
    u32 ogt = sgt - cgt, oeq = seq - ceq;
    for (int j = 0; j < warp; j++) {
        ogt += warp_gt[j];
        oeq += warp_eq[j];
    }
    for (int c = i0; c < i1 && (cgt > 0 || oeq < remaining); c += 8) {
        u32 kk[8];
#pragma unroll
        for (int u = 0; u < 8; u++) kk[u] = c + u < i1 ? idx_order_key(row[c + u]) : 0u;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            if (c + u >= i1) break;
            if (kk[u] > T) {
                out[ogt++] = (u32)(c + u);
                cgt--;
            } else if (kk[u] == T) {
                if (oeq < remaining) out[n_gt + oeq] = (u32)(c + u);
                oeq++;
            }
        }
    }
}

// ---- top-k, keys in shared memory -------------------------------------------------------------
// The set and order of top_k_rows, with what made it slow at GLM-5's widths (26 µs for one
// row of 16k on an H100) taken out: where the row's keys fit in dynamic shared memory they are
// converted once and every later pass reads them there (`cached`; else each pass reloads the
// row); each warp counts into its own 256-bin histogram, summed after the pass, since the keys
// crowd into a few bins and one histogram queued all the block's atomics on the same words; and
// the output pass works in warp-wide rounds (ballot ranks) over a warp's contiguous share, so
// positions stay in index order without per-thread strided reads.
// Dynamic shared memory: (blockDim.x / 32) · 256 + (cached ? n : 0) words.
#ifndef TOPK_AGG
#define TOPK_AGG 2  // 0: an atomic a key; 1: one a distinct bin (match.any); 2: one if the warp agrees
#endif

__device__ __forceinline__ void topk_count(u32* h, u32 bin, bool in, int lane) {
    const u32 act = __ballot_sync(0xffffffffu, in);
#if TOPK_AGG == 1
    if (in) {
        const u32 same = __match_any_sync(act, bin);
        if ((int)(__ffs(same) - 1) == lane) atomicAdd(&h[bin], (u32)__popc(same));
    }
#elif TOPK_AGG == 2
    if (act == 0) return;
    const int lead = __ffs(act) - 1;
    const u32 b0 = __shfl_sync(0xffffffffu, bin, lead);
    if (__all_sync(0xffffffffu, !in || bin == b0)) {
        if (lane == lead) atomicAdd(&h[b0], (u32)__popc(act));
    } else if (in) {
        atomicAdd(&h[bin], 1u);
    }
#else
    (void)act;
    (void)lane;
    if (in) atomicAdd(&h[bin], 1u);
#endif
}

// The warps' 256-bin histograms (nw of them at wh, zeroed as they are read) summed into tot by
// up to four threads a bin, each over every fourth warp: 8 shared reads a thread at 1024 threads
// where one thread a bin read all 32 in turn (about 2,000 cycles a pass). Integer counts, so any
// order gives the same.
__device__ __forceinline__ void topk_sum_hists(u32* wh, int nw, u32* tot) {
    const int groups = min(nw, 4);
    for (int i = threadIdx.x; i < 256 * groups; i += blockDim.x) {
        const int b = i & 255, q = i >> 8;
        u32 sum = 0;
        for (int w = q; w < nw; w += groups) {
            sum += wh[w * 256 + b];
            wh[w * 256 + b] = 0;
        }
        atomicAdd(&tot[b], sum);
    }
}

// The output pass of the shared-memory kernels, a warp at a time over its keys [a, e) (a
// multiple of 32 wide; key_at(i) is key i): topk_range_counts gives its keys above and equal to
// T; topk_range_write, given where its first index above T and its first equal to T go among
// all of the row's (ogt, oeq), writes base + i round by round, each lane's rank within a round
// from the ballots, the equal ones only while fewer than `remaining` precede them.
template <class K>
__device__ __forceinline__ void topk_range_counts(K key_at, int a, int e, u32 T, int lane, u32& cgt, u32& ceq) {
    cgt = 0;
    ceq = 0;
    for (int c = a; c < e; c += 32) {
        const int i = c + lane;
        const u32 key = i < e ? key_at(i) : 0u;
        cgt += __popc(__ballot_sync(0xffffffffu, i < e && key > T));
        ceq += __popc(__ballot_sync(0xffffffffu, i < e && key == T));
    }
}

template <class K>
__device__ __forceinline__ void topk_range_write(K key_at, int a, int e, u32 T, int lane, u32 cgt, u32 ogt, u32 oeq,
                                                 u32 n_gt, u32 remaining, u32 base, u32* out) {
    const u32 below = (1u << lane) - 1u;
    for (int c = a; c < e && (cgt > 0 || oeq < remaining); c += 32) {
        const int i = c + lane;
        const u32 key = i < e ? key_at(i) : 0u;
        const bool gt = i < e && key > T, eq = i < e && key == T;
        const u32 bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
        // Below n_gt always when the counts that chose T are the keys' (top_k_rows_ch's first
        // level comes from another kernel: this keeps a wrong table from writing past the row).
        if (gt && ogt + __popc(bg & below) < n_gt) out[ogt + __popc(bg & below)] = base + (u32)i;
        if (eq) {
            const u32 r = oeq + __popc(be & below);
            if (r < remaining) out[n_gt + r] = base + (u32)i;
        }
        ogt += __popc(bg);
        cgt -= __popc(bg);
        oeq += __popc(be);
    }
}

extern "C" __global__ void __launch_bounds__(1024) top_k_rows_s(const float* x, int n, int k, u32* ids, int cached) {
    pdl_enter();
    extern __shared__ u32 tk_smem[];
    __shared__ u32 sh_prefix, sh_remaining;
    __shared__ u32 warp_gt[32], warp_eq[32], tot[256];
    const int tid = threadIdx.x, bd = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = bd >> 5;
    u32* wh = tk_smem;  // nw histograms of 256, summed into tot
    u32* sk = tk_smem + nw * 256;
    const float* row = x + (long long)blockIdx.x * n;
    u32* out = ids + (long long)blockIdx.x * k;
    for (int i = tid; i < nw * 256; i += bd) wh[i] = 0;
    for (int i = tid; i < 256; i += bd) tot[i] = 0;
    __syncthreads();
    u32* mine = wh + warp * 256;
    u32 prefix = 0, mask = 0, remaining = (u32)k;
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        const bool from_row = pass == 0 || !cached;
        // The trip count is the block's: the ballots need whole warps.
        for (int c0 = 0; c0 < n; c0 += bd * 8) {
            u32 kk[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int i = c0 + tid + u * bd;
                kk[u] = i >= n ? 0u : from_row ? idx_order_key(row[i]) : sk[i];
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int i = c0 + tid + u * bd;
                if (pass == 0 && cached && i < n) sk[i] = kk[u];
                topk_count(mine, (kk[u] >> shift) & 255u, i < n && (kk[u] & mask) == prefix, lane);
            }
        }
        __syncthreads();
        topk_sum_hists(wh, nw, tot);
        __syncthreads();
        if (warp == 0) topk_pick_bin(tot, true, lane, prefix, shift, remaining, &sh_prefix, &sh_remaining);
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= 255u << shift;
    }
    const u32 T = prefix;
    const u32 n_gt = (u32)k - remaining;
    // Warp w owns keys [a, e), a multiple of 32 wide: it counts its keys above and equal to T,
    // a scan over the warps says where its indices go, and it writes them round by round, each
    // lane's rank within the round from the ballots.
    const int per = (((n + nw - 1) / nw) + 31) & ~31;
    const int a = min(n, warp * per), e = min(n, a + per);
    auto key_at = [&](int i) { return cached ? sk[i] : idx_order_key(row[i]); };
    u32 cgt, ceq;
    topk_range_counts(key_at, a, e, T, lane, cgt, ceq);
    if (lane == 0) {
        warp_gt[warp] = cgt;
        warp_eq[warp] = ceq;
    }
    __syncthreads();
    u32 ogt = 0, oeq = 0;
    for (int j = 0; j < warp; j++) {
        ogt += warp_gt[j];
        oeq += warp_eq[j];
    }
    topk_range_write(key_at, a, e, T, lane, cgt, ogt, oeq, n_gt, remaining, 0u, out);
}

// ---- top-k over a cluster of blocks (Hopper) ----------------------------------------------------
// top_k_rows_s's set and order with a row spread over the TOPK_CLUSTER blocks of a thread-block
// cluster: a decode step has one row, and one block on one multiprocessor spent 22 µs on 16k keys
// (kernel bench, H200) while the others idled. Block r of a row's cluster keeps keys [r·per,
// (r + 1)·per) in its shared memory; each radix pass counts them into the warps' histograms and
// sums those into the block's `tot`, a cluster barrier, and every block adds the cluster's `tot`s
// (distributed shared memory) in the same order, so all pick the same bin. `tot` alternates
// between two buffers: a block rewrites one only after the barrier that follows every block's
// reads of it. The output: each block counts its keys above and equal to T, a barrier, and the
// counts of the blocks before it (lower indices) place its indices, as the warps' counts do
// within a block. Remote reads are issued together (a volatile load and its use, one after the
// other, is a round trip each). A last barrier keeps each block's shared memory alive until the others have
// read it. Grid: rows × TOPK_CLUSTER blocks; dynamic shared memory: (blockDim.x / 32) · 256 +
// per words, per = ceil(n / TOPK_CLUSTER) rounded up to 32.
#define TOPK_CLUSTER 8
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TOPK_CLUSTER_DIMS __cluster_dims__(TOPK_CLUSTER, 1, 1)
#else
#define TOPK_CLUSTER_DIMS
#endif

__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The word at `p` in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ u32 cluster_ld(const u32* p, u32 rank) {
    u32 v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const u32 la = (u32)__cvta_generic_to_shared(p);
    u32 ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(la), "r"(rank));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(ra) : "memory");
#endif
    return v;
}

// A cluster kernel's radix pass over its block's m keys in shared memory: each key whose bits
// under `mask` are `prefix` is counted into h at (key >> shift) & wmask, eight keys a thread in
// flight. Every thread calls it (the count's ballots need whole warps).
__device__ __forceinline__ void topk_count_keys(const u32* sk, int m, u32* h, int shift, u32 wmask, u32 mask,
                                                u32 prefix, int lane) {
    const int tid = threadIdx.x, bd = blockDim.x;
    for (int c0 = 0; c0 < m; c0 += bd * 8) {
        u32 kk[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = c0 + tid + u * bd;
            kk[u] = i < m ? sk[i] : 0u;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = c0 + tid + u * bd;
            topk_count(h, (kk[u] >> shift) & wmask, i < m && (kk[u] & mask) == prefix, lane);
        }
    }
}

// The cluster's output pass (top_k_rows_c's and top_k_rows_ch's): each block counts its keys
// above and equal to T, a barrier, and the counts of the blocks before it (lower indices) place
// its indices, as the warps' counts do within a block. The last barrier keeps each block's
// shared memory alive until the others have read it.
__device__ __forceinline__ void topk_cluster_write(const u32* sk, int m, int lo, u32 rank, u32 T, u32 n_gt,
                                                   u32 remaining, u32* warp_gt, u32* warp_eq, u32* blk, u32* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int pw = (((m + nw - 1) / nw) + 31) & ~31;
    const int a = min(m, warp * pw), e = min(m, a + pw);
    auto key_at = [&](int i) { return sk[i]; };
    u32 cgt, ceq;
    topk_range_counts(key_at, a, e, T, lane, cgt, ceq);
    if (lane == 0) {
        warp_gt[warp] = cgt;
        warp_eq[warp] = ceq;
    }
    __syncthreads();
    if (tid == 0) {
        u32 bg = 0, be = 0;
        for (int j = 0; j < nw; j++) {
            bg += warp_gt[j];
            be += warp_eq[j];
        }
        blk[0] = bg;
        blk[1] = be;
    }
    cluster_barrier();
    u32 bgt[TOPK_CLUSTER], beq[TOPK_CLUSTER];
#pragma unroll
    for (int r = 0; r < TOPK_CLUSTER; r++) {
        bgt[r] = cluster_ld(&blk[0], (u32)r);
        beq[r] = cluster_ld(&blk[1], (u32)r);
    }
    u32 ogt = 0, oeq = 0;
#pragma unroll
    for (int r = 0; r < TOPK_CLUSTER; r++)
        if ((u32)r < rank) {
            ogt += bgt[r];
            oeq += beq[r];
        }
    for (int j = 0; j < warp; j++) {
        ogt += warp_gt[j];
        oeq += warp_eq[j];
    }
    cluster_barrier();
    topk_range_write(key_at, a, e, T, lane, cgt, ogt, oeq, n_gt, remaining, (u32)lo, out);
#endif
}

extern "C" __global__ void TOPK_CLUSTER_DIMS __launch_bounds__(1024) top_k_rows_c(const float* x, int n, int k,
                                                                                  u32* ids) {
    pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ u32 tc_smem[];
    __shared__ u32 tot[2][256], ctot[256];
    __shared__ u32 sh_prefix, sh_remaining;
    __shared__ u32 warp_gt[32], warp_eq[32], blk[2];
    u32 rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int tid = threadIdx.x, bd = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = bd >> 5;
    const long long row_i = blockIdx.x / TOPK_CLUSTER;
    const int per = ((n + TOPK_CLUSTER - 1) / TOPK_CLUSTER + 31) & ~31;
    const int lo = min(n, (int)rank * per), m = min(n, lo + per) - lo;
    u32* wh = tc_smem;
    u32* sk = tc_smem + nw * 256;
    const float* row = x + row_i * n + lo;
    u32* out = ids + row_i * k;
    for (int i = tid; i < nw * 256; i += bd) wh[i] = 0;
    for (int i0 = tid; i0 < m; i0 += 4 * bd) {  // four loads in flight a thread
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = i0 + u * bd < m ? row[i0 + u * bd] : 0.0f;
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (i0 + u * bd < m) sk[i0 + u * bd] = idx_order_key(v[u]);
    }
    __syncthreads();
    u32* mine = wh + warp * 256;
    u32 prefix = 0, mask = 0, remaining = (u32)k;
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        u32* t = tot[pass & 1];
        for (int i = tid; i < 256; i += bd) t[i] = 0;
        topk_count_keys(sk, m, mine, shift, 255u, mask, prefix, lane);
        __syncthreads();
        topk_sum_hists(wh, nw, t);
        cluster_barrier();
        // A thread a bin reads the bin of every block, all loads issued before the first sum (in
        // a loop of load-then-add each waited out the last: 64 round trips a pass, 3 µs).
        for (int i = tid; i < 256; i += bd) {
            u32 v[TOPK_CLUSTER];
#pragma unroll
            for (int r = 0; r < TOPK_CLUSTER; r++) v[r] = cluster_ld(&t[i], (u32)r);
            u32 sum = 0;
#pragma unroll
            for (int r = 0; r < TOPK_CLUSTER; r++) sum += v[r];
            ctot[i] = sum;
        }
        __syncthreads();
        if (warp == 0) topk_pick_bin(ctot, false, lane, prefix, shift, remaining, &sh_prefix, &sh_remaining);
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= 255u << shift;
    }
    topk_cluster_write(sk, m, lo, rank, prefix, (u32)k - remaining, remaining, warp_gt, warp_eq, blk, out);
#else
    __trap();  // the host launches it on sm_90+ only
#endif
}

// top_k_rows_c's set and order for rows whose scores kernel counted the first radix level
// (`hist`: the top TOPK_HIST_BITS bits of each key, TOPK_HIST_BINS words a row): the first
// bin is picked from it before any pass, and two passes over the cluster's keys (bits 20..10,
// then 9..0) find T, where top_k_rows_c's four 8-bit passes each cost a block barrier, a cluster
// barrier, the blocks' histogram sums and a pick (at 16k keys that kernel's time hardly depends
// on the keys: ~16 µs for 2,048 a block, H100). Each block counts into one table a pass (the
// keys left after the first level are few and spread over its 2,048 bins), a table a pass so
// no block rewrites one another may still read. Every block has read the row's `hist` before the
// first cluster barrier; past it, block r zeroes its share, so the next step's scores count
// from zero. Grid as top_k_rows_c; dynamic shared memory: 3 · TOPK_HIST_BINS + per words.
extern "C" __global__ void TOPK_CLUSTER_DIMS __launch_bounds__(1024) top_k_rows_ch(const float* x, int n, int k,
                                                                                   u32* ids, u32* hist) {
    pdl_enter();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ u32 tc_smem[];
    __shared__ u32 sh_prefix, sh_remaining;
    __shared__ u32 warp_gt[32], warp_eq[32], blk[2];
    u32 rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const int tid = threadIdx.x, bd = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const long long row_i = blockIdx.x / TOPK_CLUSTER;
    const int per = ((n + TOPK_CLUSTER - 1) / TOPK_CLUSTER + 31) & ~31;
    const int lo = min(n, (int)rank * per), m = min(n, lo + per) - lo;
    u32* counts = tc_smem;                      // two tables: bits 20..10, then 9..0
    u32* ctot = tc_smem + 2 * TOPK_HIST_BINS;  // the first level, then each pass's cluster sums
    u32* sk = tc_smem + 3 * TOPK_HIST_BINS;
    const float* row = x + row_i * n + lo;
    u32* hrow = hist + row_i * TOPK_HIST_BINS;
    for (int i = tid; i < 2 * TOPK_HIST_BINS; i += bd) counts[i] = 0;
    for (int i = tid; i < TOPK_HIST_BINS; i += bd) ctot[i] = hrow[i];
    for (int i0 = tid; i0 < m; i0 += 4 * bd) {  // four loads in flight a thread
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = i0 + u * bd < m ? row[i0 + u * bd] : 0.0f;
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (i0 + u * bd < m) sk[i0 + u * bd] = idx_order_key(v[u]);
    }
    __syncthreads();
    if (warp == 0)
        topk_pick_wide<TOPK_HIST_BINS / 32>(ctot, lane, 0u, 32 - TOPK_HIST_BITS, (u32)k, &sh_prefix, &sh_remaining);
    __syncthreads();
    u32 prefix = sh_prefix, remaining = sh_remaining, mask = ~0u << (32 - TOPK_HIST_BITS);
#pragma unroll 1
    for (int pass = 0; pass < 2; pass++) {
        const int shift = pass == 0 ? 32 - 2 * TOPK_HIST_BITS : 0;
        const int bits = pass == 0 ? TOPK_HIST_BITS : 32 - 2 * TOPK_HIST_BITS;
        const u32 wmask = (1u << bits) - 1u;
        u32* t = counts + pass * TOPK_HIST_BINS;
        topk_count_keys(sk, m, t, shift, wmask, mask, prefix, lane);
        __syncthreads();
        cluster_barrier();
        if (pass == 0)
            for (int i = tid; i < TOPK_HIST_BINS / TOPK_CLUSTER; i += bd) hrow[rank * (TOPK_HIST_BINS / TOPK_CLUSTER) + i] = 0;
        // A thread a bin reads the bin of every block, all loads issued before the first sum.
        for (int i = tid; i <= (int)wmask; i += bd) {
            u32 v[TOPK_CLUSTER];
#pragma unroll
            for (int r = 0; r < TOPK_CLUSTER; r++) v[r] = cluster_ld(&t[i], (u32)r);
            u32 sum = 0;
#pragma unroll
            for (int r = 0; r < TOPK_CLUSTER; r++) sum += v[r];
            ctot[i] = sum;
        }
        __syncthreads();
        if (warp == 0) {
            if (pass == 0)
                topk_pick_wide<TOPK_HIST_BINS / 32>(ctot, lane, prefix, shift, remaining, &sh_prefix, &sh_remaining);
            else
                topk_pick_wide<(1 << (32 - 2 * TOPK_HIST_BITS)) / 32>(ctot, lane, prefix, shift, remaining, &sh_prefix,
                                                                      &sh_remaining);
        }
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= wmask << shift;
    }
    topk_cluster_write(sk, m, lo, rank, prefix, (u32)k - remaining, remaining, warp_gt, warp_eq, blk, ids + row_i * k);
#else
    __trap();  // the host launches it on sm_90+ only
#endif
}
