// MoE routing (gating, selection bias, group-limited top-k, renormalisation, scaling) and the
// weighted combine of the expert outputs. Mirrors crates/glint-core/src/cpu/router.rs: the
// order of values is Rust's f32::total_cmp, ties go to the lower index.

// f32 -> u32 whose unsigned order is f32::total_cmp's order (NaN above +inf, -NaN below -inf).
__device__ __forceinline__ u32 moe_order_key(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#define ROUTE_WARPS 4
// Keys a lane holds in registers on the fast selection path (32 · ROUTE_REG experts at most).
#define ROUTE_REG 8

// One warp per token, ROUTE_WARPS tokens to a block of 32·ROUTE_WARPS threads. Dynamic shared
// memory: ROUTE_WARPS × (n_expert u64 + 2·n_expert f32 + n_group f32).
// gating: 0 softmax, 1 sigmoid.
extern "C" __global__ void moe_route(const float* logits, const float* bias, int has_bias, int n_tokens,
                                     int n_expert, int n_used, int gating, int n_group,
                                     int n_group_used, int normalize, float scale, u32* ids,
                                     float* weights) {
    pdl_enter();
    extern __shared__ unsigned long long route_sm[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = blockIdx.x * ROUTE_WARPS + warp;
    if (t >= n_tokens) return;  // whole warps only; no block-wide barrier below
    unsigned long long* comp = route_sm + (long long)warp * n_expert;
    float* fbase = (float*)(route_sm + (long long)ROUTE_WARPS * n_expert);
    float* scores = fbase + (long long)warp * 2 * n_expert;
    float* sel = scores + n_expert;
    float* gsc = fbase + (long long)ROUTE_WARPS * 2 * n_expert + (long long)warp * n_group;
    const float* lg = logits + (long long)t * n_expert;

    if (gating == 1) {
        for (int i = lane; i < n_expert; i += 32) scores[i] = 1.0f / (1.0f + expf(-lg[i]));
    } else {
        float m = NEG_INF;
        for (int i = lane; i < n_expert; i += 32) m = fmaxf(m, lg[i]);
        m = warp_max(m);
        if (m == NEG_INF) {
            // Nothing finite: the row is all zeros (as the CPU's softmax_row defines it).
            for (int i = lane; i < n_expert; i += 32) scores[i] = 0.0f;
        } else {
            double s = 0.0;
            for (int i = lane; i < n_expert; i += 32) {
                float e = expf(lg[i] - m);
                scores[i] = e;
                s += (double)e;
            }
            s = warp_sum_f64(s);
            float inv = (float)(1.0 / s);
            for (int i = lane; i < n_expert; i += 32) scores[i] *= inv;
        }
    }
    for (int i = lane; i < n_expert; i += 32) sel[i] = has_bias ? scores[i] + bias[i] : scores[i];
    __syncwarp();

    if (n_group > 1 && n_group_used < n_group) {
        int per = n_expert / n_group;
        // A group's score: the sum of its two best biased scores.
        for (int g = lane; g < n_group; g += 32) {
            const float* part = sel + (long long)g * per;
            u32 k1 = 0, k2 = 0;
            float v1 = 0.0f, v2 = 0.0f;
            int have = 0;
            for (int i = 0; i < per; i++) {
                float v = part[i];
                u32 k = moe_order_key(v);
                if (have == 0 || k > k1) {
                    k2 = k1;
                    v2 = v1;
                    k1 = k;
                    v1 = v;
                    have = have < 2 ? have + 1 : 2;
                } else if (have == 1 || k > k2) {
                    k2 = k;
                    v2 = v;
                    have = 2;
                }
            }
            gsc[g] = have == 2 ? v1 + v2 : (have == 1 ? v1 : 0.0f);
        }
        __syncwarp();
        // Keep the best n_group_used groups (ties to the lower group), mask the others.
        for (int g = lane; g < n_group; g += 32) {
            u32 kg = moe_order_key(gsc[g]);
            int rank = 0;
            for (int h = 0; h < n_group; h++) {
                u32 kh = moe_order_key(gsc[h]);
                rank += (kh > kg || (kh == kg && h < g)) ? 1 : 0;
            }
            if (rank >= n_group_used)
                for (int i = 0; i < per; i++) sel[(long long)g * per + i] = NEG_INF;
        }
        __syncwarp();
    }

    float sum = 0.0f;
    u32* oid = ids + (long long)t * n_used;
    float* ow = weights + (long long)t * n_used;
    // Composite keys: value order in the high word, lower index wins in the low word; a chosen
    // expert becomes 0 (no real entry is 0: its low word is at least 1).
    if (n_expert <= 32 * ROUTE_REG && n_used <= 32) {
        // GLM-5's 256 experts: a lane's keys in registers and lane k keeps the k-th choice, so a
        // round is a register max and one warp max, with no shared-memory round trip, and the
        // weights are finished in registers instead of lane 0 reading each back from global
        // memory in turn (the kernel took 8.5 µs on an H100, one block of one warp, ncu: all
        // latency). The same choices, the same sum order as the general path below.
        unsigned long long c[ROUTE_REG];
#pragma unroll
        for (int j = 0; j < ROUTE_REG; j++) {
            const int i = lane + 32 * j;
            c[j] = i < n_expert ? ((unsigned long long)moe_order_key(sel[i]) << 32) |
                                      (unsigned long long)(0xffffffffu - (u32)i)
                                : 0ull;
        }
        u32 my_id = 0;
        float my_w = 0.0f;
        for (int k = 0; k < n_used; k++) {
            unsigned long long best = c[0];
#pragma unroll
            for (int j = 1; j < ROUTE_REG; j++) best = c[j] > best ? c[j] : best;
            best = warp_max_u64(best);
            const u32 idx = 0xffffffffu - (u32)(best & 0xffffffffull);
#pragma unroll
            for (int j = 0; j < ROUTE_REG; j++)
                if ((u32)(lane + 32 * j) == idx) c[j] = 0ull;
            if (lane == k) {
                my_id = idx;
                my_w = scores[idx];
            }
        }
        for (int k = 0; k < n_used; k++) sum += __shfl_sync(0xffffffffu, my_w, k);
        if (lane < n_used) {
            float w = my_w;
            if (normalize) w /= sum + 1e-20f;
            oid[lane] = my_id;
            ow[lane] = w * scale;
        }
        return;
    }
    for (int i = lane; i < n_expert; i += 32)
        comp[i] = ((unsigned long long)moe_order_key(sel[i]) << 32) | (unsigned long long)(0xffffffffu - (u32)i);
    __syncwarp();
    for (int k = 0; k < n_used; k++) {
        unsigned long long best = 0;
        for (int i = lane; i < n_expert; i += 32) best = comp[i] > best ? comp[i] : best;
        best = warp_max_u64(best);
        u32 idx = 0xffffffffu - (u32)(best & 0xffffffffull);
        __syncwarp();
        if (lane == 0) {
            comp[idx] = 0;
            float w = scores[idx];
            oid[k] = idx;
            ow[k] = w;
            sum += w;
        }
        __syncwarp();
    }
    if (lane == 0) {
        float denom = sum + 1e-20f;
        for (int k = 0; k < n_used; k++) {
            float w = ow[k];
            if (normalize) w /= denom;
            ow[k] = w * scale;
        }
    }
}

// out[t][j] = Σ_k w[t][k]·y[t][k][j], k in order. One thread per output value.
// out = Σ_k w_k·y_k, then + add where `add` is not null (the shared expert's output: the bits
// of the combine and an add_inplace after it, one launch fewer).
extern "C" __global__ void moe_combine(const float* y, const float* w, int n_tokens, int n_used, int dim,
                                       const float* add, float* out) {
    pdl_enter();
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)n_tokens * dim;
    if (id >= total) return;
    long long t = id / dim;
    int j = (int)(id % dim);
    const float* yt = y + t * n_used * dim + j;
    const float* wt = w + t * n_used;
    float acc = 0.0f;
    for (int k = 0; k < n_used; k++) acc += wt[k] * yt[(long long)k * dim];
    out[id] = add ? acc + add[id] : acc;
}

// Expert parallelism's remap, on the device so a recorded step keeps it: an id in
// [first, first + count) becomes id − first, any other becomes 0 with weight 0.
extern "C" __global__ void moe_local_experts(unsigned int* ids, float* w, int len, unsigned int first,
                                             unsigned int count) {
    pdl_enter();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    unsigned int id = ids[i];
    if (id >= first && id - first < count) {
        ids[i] = id - first;
    } else {
        ids[i] = 0;
        w[i] = 0.0f;
    }
}
