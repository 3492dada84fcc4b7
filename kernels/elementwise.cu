// Row-wise and element-wise ops: norms, RoPE, SwiGLU, add/scale, strided copies, row scatter and
// gather, paged-cache row encode/decode. Sums over a row are in f64 where the CPU reference sums
// in f64 (norm statistics), so both backends round the same value once.

extern "C" __global__ void rms_norm(const float* x, const float* w, float* y, int dim, float eps) {
    pdl_enter();
    rms_norm_row(x, w, y, dim, eps);
}

extern "C" __global__ void add_rms_norm(float* h, const float* d, const float* w, float* y, int dim, float eps) {
    pdl_enter();
    add_rms_norm_row(h, d, w, y, dim, eps);
}

// (x − mean)·inv·w + b of one element, in the loop's and the CPU's order.
__device__ __forceinline__ float ln1(float x, double mean, double inv, float w, float b) {
    return ((float)(((double)x - mean) * inv)) * w + b;
}

extern "C" __global__ void layer_norm(const float* x, const float* w, const float* b, float* y, int dim,
                                      float eps) {
    pdl_enter();
    __shared__ double sh[33];
    long long base = (long long)blockIdx.x * dim;
    if (norm_in_registers(x, w, b, y, dim)) {
        const int n4 = dim >> 2;
        const float4* x4 = (const float4*)(x + base);
        float4 v[NORM_V4];
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            const int e = threadIdx.x + u * blockDim.x;
            if (e < n4) v[u] = x4[e];
        }
        double s = 0.0;
#pragma unroll
        for (int u = 0; u < NORM_V4; u++)
            if (threadIdx.x + u * blockDim.x < n4) s += (double)v[u].x + (double)v[u].y + (double)v[u].z + (double)v[u].w;
        const double mean = block_sum_f64(s, sh) / (double)dim;
        double q = 0.0;
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            if (threadIdx.x + u * blockDim.x < n4) {
                const double a = (double)v[u].x - mean, bb = (double)v[u].y - mean, c = (double)v[u].z - mean,
                             d = (double)v[u].w - mean;
                q += a * a + bb * bb + c * c + d * d;
            }
        }
        const double inv = 1.0 / sqrt(block_sum_f64(q, sh) / (double)dim + (double)eps);
        const float4* w4 = (const float4*)w;
        const float4* b4 = (const float4*)b;
        float4* y4 = (float4*)(y + base);
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            const int e = threadIdx.x + u * blockDim.x;
            if (e < n4) {
                const float4 g = w4[e], h = b4[e];
                y4[e] = make_float4(ln1(v[u].x, mean, inv, g.x, h.x), ln1(v[u].y, mean, inv, g.y, h.y),
                                    ln1(v[u].z, mean, inv, g.z, h.z), ln1(v[u].w, mean, inv, g.w, h.w));
            }
        }
        return;
    }
    double s = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += (double)x[base + i];
    double mean = block_sum_f64(s, sh) / (double)dim;
    double v = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        double d = (double)x[base + i] - mean;
        v += d * d;
    }
    double var = block_sum_f64(v, sh) / (double)dim;
    double inv = 1.0 / sqrt(var + (double)eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = ln1(x[base + i], mean, inv, w[i], b[i]);
}

// One thread per (token, head, pair). mode 0: pairs (2i, 2i+1); mode 1: (i, i + n_rot/2).
extern "C" __global__ void rope(float* x, const u32* positions, const float* inv_freq, int n_tokens,
                                int n_heads, int head_dim, int offset, int n_rot, int mode,
                                float attn_factor) {
    pdl_enter();
    int half = n_rot / 2;
    long long total = (long long)n_tokens * n_heads * half;
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= total) return;
    int i = (int)(id % half);
    long long th = id / half;
    int t = (int)(th / n_heads);
    const RopePair r = rope_pair(i, half, mode, (float)positions[t], inv_freq, attn_factor);
    float* v = x + th * head_dim + offset;
    rope_rotate(r, v[r.a], v[r.b], v[r.a], v[r.b]);
}

extern "C" __global__ void silu_mul(const float* g, const float* u, float* out, long long n) {
    pdl_enter();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = silu_mul_value(g[i], u[i]);
}

extern "C" __global__ void add_inplace(float* a, const float* b, long long n) {
    pdl_enter();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}

extern "C" __global__ void scale_inplace(float* a, float s, long long n) {
    pdl_enter();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= s;
}

extern "C" __global__ void copy2d(const float* src, long long src_off, long long src_stride, float* dst,
                                  long long dst_off, long long dst_stride, long long rows, long long cols) {
    pdl_enter();
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= rows * cols) return;
    long long r = id / cols, c = id % cols;
    dst[dst_off + r * dst_stride + c] = src[src_off + r * src_stride + c];
}

// Row i of src goes to row slots[i] of dst; a slot past dst_rows is skipped (ids are the
// caller's check; the device only stays memory safe).
extern "C" __global__ void set_rows(const float* src, int dim, const u32* slots, long long n, float* dst,
                                    long long dst_rows) {
    pdl_enter();
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n * dim) return;
    long long i = id / dim, c = id % dim;
    long long to = slots[i];
    if (to < dst_rows) dst[to * dim + c] = src[i * dim + c];
}

// Row i of dst is row rows[i] of src; a row past src_rows reads as zeros.
extern "C" __global__ void gather_rows(const float* src, int dim, const u32* rows, long long n,
                                       long long src_rows, float* dst) {
    pdl_enter();
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n * dim) return;
    long long i = id / dim, c = id % dim;
    long long from = rows[i];
    dst[i * dim + c] = from < src_rows ? src[from * dim + c] : 0.0f;
}

// ---- paged cache rows ------------------------------------------------------------------------

// Nearest E4M3 code to x (ties to even mantissa), saturating at ±448, NaN to 0x7f: the same
// search over the increasing positive codes as glint_core::cache_type::f32_to_fp8.
__device__ u8 f32_to_fp8(float x) {
    if (x != x) return 0x7f;
    u8 sign = signbit(x) ? 0x80 : 0;
    float a = fminf(fabsf(x), 448.0f);
    int lo = 0, hi = 0x7e;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (fp8_to_f32((u8)mid) < a) lo = mid + 1;
        else hi = mid;
    }
    int code;
    if (lo == 0) {
        code = 0;
    } else {
        float below = fp8_to_f32((u8)(lo - 1)), above = fp8_to_f32((u8)lo);
        float db = a - below, da = above - a;
        code = (db < da || (db == da && ((lo - 1) & 1) == 0)) ? lo - 1 : lo;
    }
    return sign | (u8)code;
}

// Encodes the `dim` values at s into cache row r (every thread of the block calls it, r the
// same for all; a row past the cache is skipped).
__device__ __forceinline__ void cache_write_row(const float* s, long long r, u8* cache, long long rows, int dim,
                                                int ty, float* sh) {
    if (r >= rows) return;
    long long at = r * dim;
    if (ty == CACHE_F32) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) ((float*)cache)[at + c] = s[c];
    } else if (ty == CACHE_F16) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) ((__half*)cache)[at + c] = __float2half_rn(s[c]);
    } else if (ty == CACHE_BF16) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x)
            ((__nv_bfloat16*)cache)[at + c] = __float2bfloat16_rn(s[c]);
    } else {
        float m = 0.0f;
        for (int c = threadIdx.x; c < dim; c += blockDim.x) {
            float v = s[c];
            if (isfinite(v)) m = fmaxf(m, fabsf(v));
        }
        m = block_max(m, sh);
        float* scales = (float*)(cache + cache_scale_offset(rows, dim));
        if (ty == CACHE_Q8) {
            // glint_core::cache_type::f32_to_q8: half away from zero, clamped, NaN to 0.
            float scale = m > 0.0f ? m / 127.0f : 1.0f;
            if (threadIdx.x == 0) scales[r] = scale;
            for (int c = threadIdx.x; c < dim; c += blockDim.x) {
                float v = roundf(s[c] / scale);
                ((signed char*)cache)[at + c] = isnan(v) ? 0 : (signed char)fminf(fmaxf(v, -127.0f), 127.0f);
            }
        } else {
            float scale = m > 0.0f ? m / 448.0f : 1.0f;
            if (threadIdx.x == 0) scales[r] = scale;
            for (int c = threadIdx.x; c < dim; c += blockDim.x) cache[at + c] = f32_to_fp8(s[c] / scale);
        }
    }
}

// One block per source row: row i of src [n × dim] is encoded into cache row slots[i].
extern "C" __global__ void cache_set_rows(const float* src, const u32* slots, u8* cache, long long rows,
                                          int dim, int ty) {
    pdl_enter();
    __shared__ float sh[32];
    const long long i = blockIdx.x;
    cache_write_row(src + i * dim, slots[i], cache, rows, dim, ty, sh);
}

// An MLA layer's new cache rows in one launch (Backend::mla_kv_rows): one block per token t,
// row t of kv [n × row] = [latent (kv_lora) | key part (row − kv_lora)] becomes, in shared
// memory, rms_norm's expression over the latent part and rope's over the key part (one head,
// offset kv_lora; mode 0 pairs (2i, 2i+1), 1 (i, i + half)), is written back to kv and encoded
// into cache row slots[t] as cache_set_rows does. Dynamic shared: row floats.
extern "C" __global__ void mla_kv_rows(float* kv, const float* w, float eps, int kv_lora, int row,
                                       const u32* positions, const float* inv_freq, int mode, float attn_factor,
                                       const u32* slots, u8* cache, long long rows, int ty) {
    pdl_enter();
    __shared__ double sh[33];
    __shared__ float shm[32];
    extern __shared__ float fin[];
    const long long t = blockIdx.x;
    float* x = kv + t * row;
    double s = 0.0;
    for (int i = threadIdx.x; i < kv_lora; i += blockDim.x) {
        const double v = x[i];
        s += v * v;
    }
    const float inv = (float)(1.0 / sqrt(block_sum_f64(s, sh) / (double)kv_lora + (double)eps));
    for (int i = threadIdx.x; i < kv_lora; i += blockDim.x) fin[i] = w[i] * (x[i] * inv);
    const int half = (row - kv_lora) / 2;
    const float pos = (float)positions[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const RopePair r = rope_pair(i, half, mode, pos, inv_freq, attn_factor);
        rope_rotate(r, x[kv_lora + r.a], x[kv_lora + r.b], fin[kv_lora + r.a], fin[kv_lora + r.b]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < row; i += blockDim.x) x[i] = fin[i];
    cache_write_row(fin, slots[t], cache, rows, row, ty, shm);
}

// The indexer's new key rows in one launch (Backend::indexer_k_rows): one block per token t,
// row t of raw [n × dim] goes through layer_norm's loop expressions and rope's (one head of dim,
// dims offset .. offset + n_rot) in shared memory, to out and, as cache_set_rows encodes it, to
// cache row slots[t]. Dynamic shared: dim floats.
extern "C" __global__ void indexer_k_rows(const float* raw, const float* w, const float* b, float eps, int dim,
                                          int offset, int n_rot, const u32* positions, const float* inv_freq,
                                          int mode, float attn_factor, const u32* slots, u8* cache,
                                          long long rows, int ty, float* out) {
    pdl_enter();
    __shared__ double sh[33];
    __shared__ float shm[32];
    extern __shared__ float krow[];
    const long long t = blockIdx.x;
    const float* x = raw + t * dim;
    double s = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += (double)x[i];
    const double mean = block_sum_f64(s, sh) / (double)dim;
    double v = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const double dd = (double)x[i] - mean;
        v += dd * dd;
    }
    const double inv = 1.0 / sqrt(block_sum_f64(v, sh) / (double)dim + (double)eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) krow[i] = ln1(x[i], mean, inv, w[i], b[i]);
    __syncthreads();
    const int half = n_rot / 2;
    const float pos = (float)positions[t];
    // Every pair read before any is written (the norm's values are shared).
    const bool mine = threadIdx.x < half;
    RopePair r = {0, 0, 0.0f, 0.0f};
    float r0 = 0.0f, r1 = 0.0f;
    if (mine) {
        r = rope_pair(threadIdx.x, half, mode, pos, inv_freq, attn_factor);
        rope_rotate(r, krow[offset + r.a], krow[offset + r.b], r0, r1);
    }
    __syncthreads();
    if (mine) {
        krow[offset + r.a] = r0;
        krow[offset + r.b] = r1;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = krow[i];
    cache_write_row(krow, slots[t], cache, rows, dim, ty, shm);
}

// The first n_rows rows of the cache decoded to f32 (tests, debugging).
extern "C" __global__ void cache_decode(const u8* cache, long long rows, int dim, int ty, long long n_rows,
                                        float* out) {
    pdl_enter();
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_rows * dim) return;
    CacheView c = {cache, rows, dim, ty};
    out[id] = cache_load(c, id / dim, (int)(id % dim));
}
