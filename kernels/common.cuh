// Shared by every kernel family: prepended to each kernels/*.cu before NVRTC compiles it.
// Integer and float types, warp reductions, and the paged-cache row codec (the layout the
// Rust side allocates in crates/glint-cuda/src/buffers.rs: all codes first, then for fp8 one
// f32 scale per row at a 16-byte aligned offset).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define NEG_INF (-__int_as_float(0x7f800000))

// Programmatic dependent launch (crates/glint-cuda/src/launch.rs): the first statement of every
// kernel. It waits until the kernel before it on the stream has finished and its writes are
// visible (at once when launched without the attribute, or before sm_90), then lets the next
// kernel's blocks be placed, so they wait on the GPU rather than behind a launch.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Bytes of its weight rows a product's block asks L2 for before it waits on the kernel before
// it (l2_prefetch): no kernel writes weights, so fetching them early races nothing, and memory
// streams them while the small kernel before it still runs instead of idling until the wait
// returns. The host sets it per module (`GLINT_CUDA_PREFETCH`, 0 = off; backend.rs).
__constant__ unsigned int glint_prefetch_bytes = 16384;

// Asks L2 for the first glint_prefetch_bytes of [p, p + bytes) (16-byte aligned inside it), from
// the block's first thread. The one global access a kernel may make before pdl_enter, and only
// of memory no kernel writes (tests/compile.rs reads the PTX for this).
__device__ __forceinline__ void l2_prefetch(const void* p, long long bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x | threadIdx.y | threadIdx.z) return;
    const unsigned long long a = (unsigned long long)p, lo = (a + 15) & ~15ull;
    const long long n = min(bytes - (long long)(lo - a), (long long)glint_prefetch_bytes) & ~15ll;
    if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"((unsigned)n) : "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// SwiGLU's gate: silu(g)·u, one expression for the elementwise kernel and the quantizers that
// fuse it (kernels/quant.cu `quantize_act_*_glu`), so both give the same bits.
__device__ __forceinline__ float silu_mul_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of `blockDim.x` threads (a multiple of 32, at most 1024); every thread gets
// the result. `sh` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : NEG_INF;
    return warp_max(v);
}

// ---- paged cache rows ------------------------------------------------------------------------
// Cache type codes, in CacheType::ALL order.
#define CACHE_F32 0
#define CACHE_F16 1
#define CACHE_BF16 2
#define CACHE_FP8 3
#define CACHE_Q8 4

// D (16 × 8, f32) += A (16 × 16) · B (16 × 8) on tensor cores, A and B of the 16-bit type of
// cache type TY (CACHE_BF16: bf16, else f16), in mma.sync's fragment layout (lane (g, t) =
// (lane / 4, lane % 4): a = rows g, g + 8 at columns 2t.., 2t + 8..; b = column g at rows 2t..,
// 2t + 8..; c = rows g, g + 8 at columns 2t, 2t + 1). sm_80+: callers launch only there.
template <int TY>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (TY == CACHE_BF16)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// E4M3 (bias 7, S.1111.111 is NaN, no infinities) to f32, exact, in integer steps: a normal
// code's exponent and mantissa bits are an f32's once the bias moves from 7 to 127 (+120 in the
// exponent field), a subnormal's value is m·2⁻⁹. (ldexpf, what this was, is a call of a few
// dozen instructions a value: the fp8 caches decoded slower than the f32 ones read.)
__device__ __forceinline__ float fp8_to_f32(u8 b) {
    const u32 em = b & 0x7fu;
    if (em == 0x7fu) return __int_as_float(0x7fc00000);
    const float v = (em >> 3) ? __int_as_float((int)((em + (120u << 3)) << 20)) : (float)em * 0.001953125f;
    return __int_as_float(__float_as_int(v) | ((int)(b & 0x80u) << 24));
}

// The same code as f16 bits (every E4M3 value is an f16: exponents 2⁻⁹ .. 2⁸): the bias moves
// from 7 to 15 (+8 in the exponent field); a subnormal m·2⁻⁹ is the f16 normal it rounds to,
// exactly.
__device__ __forceinline__ u32 fp8_to_f16_bits(u32 b) {
    const u32 em = b & 0x7fu;
    // m·2⁻⁹ for m = 1..7: the f16 of m (exponent 15..17) with 9 taken off its exponent.
    const u32 sub = em ? (u32)__half_as_ushort(__int2half_rn((int)em)) - (9u << 10) : 0u;
    const u32 mag = em == 0x7fu ? 0x7e00u : (em >> 3) ? (em << 7) + (8u << 10) : sub;
    return mag | ((b & 0x80u) << 8);
}

struct CacheView {
    const u8* data;
    long long rows;
    int dim;
    int ty;
};

__device__ __forceinline__ long long cache_scale_offset(long long rows, int dim) {
    return ((rows * (long long)dim + 15) / 16) * 16;
}

// Value `i` of cache row `r`, decoded to f32.
__device__ __forceinline__ float cache_load(CacheView c, long long r, int i) {
    long long at = r * c.dim + i;
    switch (c.ty) {
        case CACHE_F32: return ((const float*)c.data)[at];
        case CACHE_F16: return __half2float(((const __half*)c.data)[at]);
        case CACHE_BF16: return __bfloat162float(((const __nv_bfloat16*)c.data)[at]);
        case CACHE_Q8: {
            const float* scales = (const float*)(c.data + cache_scale_offset(c.rows, c.dim));
            return (float)((const signed char*)c.data)[at] * scales[r];
        }
        default: {
            const float* scales = (const float*)(c.data + cache_scale_offset(c.rows, c.dim));
            return fp8_to_f32(c.data[at]) * scales[r];
        }
    }
}

// Pool row of logical key `t` of the sequence of token `s` (see glint_core::Pages), or -1 when
// the table entry, the block or the row lies outside what was allocated (ids are the caller's
// check; the kernels only stay memory safe).
__device__ __forceinline__ long long paged_row(const u32* tables, long long n_table, const u32* token_seq,
                                                  int max_blocks, int block_size, long long pool_rows,
                                                  int s, long long t) {
    long long b = t / block_size;
    if (t < 0 || b >= max_blocks) return -1;
    long long at = (long long)token_seq[s] * max_blocks + b;
    if (at >= n_table) return -1;
    long long r = (long long)tables[at] * block_size + t % block_size;
    return r < pool_rows ? r : -1;
}

template <int TY>
__device__ __forceinline__ float cache_ld(const u8* data, const float* scales, long long r, int dim, int i) {
    long long at = r * dim + i;
    if (TY == CACHE_F32) return ((const float*)data)[at];
    if (TY == CACHE_F16) return __half2float(((const __half*)data)[at]);
    if (TY == CACHE_BF16) return __bfloat162float(((const __nv_bfloat16*)data)[at]);
    if (TY == CACHE_Q8) return (float)((const signed char*)data)[at] * scales[r];
    return fp8_to_f32(data[at]) * scales[r];
}

// Values i .. i + 3 of cache row `r` (i and dim multiples of 4, so one aligned load), each
// decoded by cache_ld's expression.
template <int TY>
__device__ __forceinline__ float4 cache_ld4(const u8* data, const float* scales, long long r, int dim, int i) {
    const long long at = r * dim + i;
    if (TY == CACHE_F32) return *(const float4*)((const float*)data + at);
    if (TY == CACHE_F16 || TY == CACHE_BF16) {
        const uint2 u = *(const uint2*)((const u16*)data + at);
        const u16 h[4] = {(u16)(u.x & 0xffff), (u16)(u.x >> 16), (u16)(u.y & 0xffff), (u16)(u.y >> 16)};
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            f[j] = TY == CACHE_F16 ? __half2float(__ushort_as_half(h[j])) : __bfloat162float(__ushort_as_bfloat16(h[j]));
        return make_float4(f[0], f[1], f[2], f[3]);
    }
    const u32 u = *(const u32*)(data + at);
    const float s = scales[r];
    float f[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const u8 b = (u8)(u >> (8 * j));
        f[j] = TY == CACHE_Q8 ? (float)(signed char)b * s : fp8_to_f32(b) * s;
    }
    return make_float4(f[0], f[1], f[2], f[3]);
}

// Pool rows rows[0 .. nt) decoded into dst[kk·st + i] (zeros for a row of −1), eight loads in
// flight per thread: of four values each where the widths and addresses allow (a 576-wide f32
// tile of 16 rows is then 9 loads a thread of a 256-thread block, one round of memory latency
// instead of five), else of one.
template <int TY>
__device__ __forceinline__ void paged_load_tile_t(CacheView c, const long long* rows, int nt, int dim, int st,
                                                float* dst) {
    const float* scales = (const float*)(c.data + cache_scale_offset(c.rows, c.dim));
    const unsigned long long addr = (unsigned long long)c.data | (unsigned long long)dst;
    if ((dim & 3) == 0 && (st & 3) == 0 && (addr & 15) == 0) {
        const int d4 = dim >> 2, total = nt * d4;
        for (int e0 = threadIdx.x; e0 < total; e0 += blockDim.x * 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int e = e0 + u * blockDim.x;
                v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (e < total) {
                    const int kk = e / d4;
                    const long long r = rows[kk];
                    if (r >= 0) v[u] = cache_ld4<TY>(c.data, scales, r, dim, 4 * (e - kk * d4));
                }
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int e = e0 + u * blockDim.x;
                if (e < total) {
                    const int kk = e / d4;
                    *(float4*)(dst + kk * st + 4 * (e - kk * d4)) = v[u];
                }
            }
        }
        return;
    }
    const int total = nt * dim;
    for (int e0 = threadIdx.x; e0 < total; e0 += blockDim.x * 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int e = e0 + u * blockDim.x;
            v[u] = 0.0f;
            if (e < total) {
                int kk = e / dim;
                long long r = rows[kk];
                if (r >= 0) v[u] = cache_ld<TY>(c.data, scales, r, dim, e - kk * dim);
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int e = e0 + u * blockDim.x;
            if (e < total) {
                int kk = e / dim;
                dst[kk * st + e - kk * dim] = v[u];
            }
        }
    }
}

__device__ __forceinline__ void paged_load_tile(CacheView c, const long long* rows, int nt, int dim, int st,
                                              float* dst) {
    switch (c.ty) {
        case CACHE_F32: paged_load_tile_t<CACHE_F32>(c, rows, nt, dim, st, dst); break;
        case CACHE_F16: paged_load_tile_t<CACHE_F16>(c, rows, nt, dim, st, dst); break;
        case CACHE_BF16: paged_load_tile_t<CACHE_BF16>(c, rows, nt, dim, st, dst); break;
        case CACHE_Q8: paged_load_tile_t<CACHE_Q8>(c, rows, nt, dim, st, dst); break;
        default: paged_load_tile_t<CACHE_FP8>(c, rows, nt, dim, st, dst); break;
    }
}

// ---- RoPE (elementwise.cu's rope, mla_kv_rows, indexer_k_rows and quant.cu's rope_split_*) ----
// RoPE's pair i of a head (mode 0: dims 2i and 2i + 1; mode 1: i and i + half) and its angle's
// scaled cosine and sine at position `pos`: the one expression every kernel that rotates shares,
// so the fused kernels rotate exactly as rope does.
struct RopePair {
    int a, b;
    float c, s;
};
__device__ __forceinline__ RopePair rope_pair(int i, int half, int mode, float pos, const float* inv_freq,
                                              float attn_factor) {
    const float ang = pos * inv_freq[i];
    return {mode == 0 ? 2 * i : i, mode == 0 ? 2 * i + 1 : i + half, cosf(ang) * attn_factor, sinf(ang) * attn_factor};
}
__device__ __forceinline__ void rope_rotate(const RopePair& r, float x0, float x1, float& y0, float& y1) {
    y0 = x0 * r.c - x1 * r.s;
    y1 = x0 * r.s + x1 * r.c;
}

// ---- RMSNorm rows (elementwise.cu's norms and quant.cu's rms_norm_q8_k) -----------------------
// Sums over a row are in f64 where the CPU reference sums in f64 (norm statistics), so both
// backends round the same value once.

__device__ double block_sum_f64(double s, double* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = s;
    __syncthreads();
    if (wid == 0) {
        s = lane < nw ? sh[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

// Float4s of a row each thread holds in registers: a row of up to NORM_V4 · 4 · blockDim floats
// (16384 at 512 threads) is read once, every load of a thread in flight together, instead of
// once per pass of a loop whose every load waits on the one before (a 6144-wide RMSNorm took
// 9 µs so, on an H200). Wider or unaligned rows take the loops.
#define NORM_V4 8

__device__ __forceinline__ bool norm_in_registers(const void* x, const void* w, const void* b, const void* y,
                                                  int dim) {
    const unsigned long long any = (unsigned long long)x | (unsigned long long)w | (unsigned long long)b |
                                   (unsigned long long)y;
    return (dim & 3) == 0 && dim <= NORM_V4 * 4 * (int)blockDim.x && (any & 15) == 0;
}

// Σ v² of a float4 in f64 (each square is exact in f64, so the order of these adds is the only
// rounding, as in the loop).
__device__ __forceinline__ double sq4(float4 v) {
    return (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
}

// The register path's end: y = w ⊙ v · inv, inv from the block's Σ v² (s, this thread's part).
__device__ __forceinline__ void rms_store(const float4 (&v)[NORM_V4], const float4 (&g)[NORM_V4], double s, int n4,
                                          int dim, float eps, double* sh, float4* y4) {
    const float inv = (float)(1.0 / sqrt(block_sum_f64(s, sh) / (double)dim + (double)eps));
#pragma unroll
    for (int u = 0; u < NORM_V4; u++) {
        const int e = threadIdx.x + u * blockDim.x;
        if (e < n4)
            y4[e] = make_float4(g[u].x * (v[u].x * inv), g[u].y * (v[u].y * inv), g[u].z * (v[u].z * inv),
                                g[u].w * (v[u].w * inv));
    }
}

// RMSNorm of row blockIdx.x (one block a row): the body of elementwise.cu's rms_norm, and of
// quant.cu's rms_norm_q8_k before it quantizes the row, so both write the same bits.
__device__ __forceinline__ void rms_norm_row(const float* x, const float* w, float* y, int dim, float eps) {
    __shared__ double sh[33];
    const long long base = (long long)blockIdx.x * dim;
    if (norm_in_registers(x, w, w, y, dim)) {
        const int n4 = dim >> 2;
        const float4* x4 = (const float4*)(x + base);
        const float4* w4 = (const float4*)w;
        float4 v[NORM_V4], g[NORM_V4];
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            const int e = threadIdx.x + u * blockDim.x;
            if (e < n4) {
                v[u] = x4[e];
                g[u] = w4[e];
            }
        }
        double s = 0.0;
#pragma unroll
        for (int u = 0; u < NORM_V4; u++)
            if (threadIdx.x + u * blockDim.x < n4) s += sq4(v[u]);
        rms_store(v, g, s, n4, dim, eps, sh, (float4*)(y + base));
        return;
    }
    double s = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        double v = x[base + i];
        s += v * v;
    }
    float inv = (float)(1.0 / sqrt(block_sum_f64(s, sh) / (double)dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = w[i] * (x[base + i] * inv);
}

// h += d (add_inplace's float adds), then y = rms_norm(h) as rms_norm computes it: the residual
// add and the next layer's norm in one launch (Backend::add_rms_norm). Rows that rms_norm would
// not keep in registers run its loops on the new h. The body of elementwise.cu's add_rms_norm and
// of quant.cu's rms_norm_q8_k with an addend.
__device__ __forceinline__ void add_rms_norm_row(float* h, const float* d, const float* w, float* y, int dim, float eps) {
    __shared__ double sh[33];
    const long long base = (long long)blockIdx.x * dim;
    if (norm_in_registers(h, d, w, y, dim)) {
        const int n4 = dim >> 2;
        float4* h4 = (float4*)(h + base);
        const float4* d4 = (const float4*)(d + base);
        const float4* w4 = (const float4*)w;
        float4 v[NORM_V4], g[NORM_V4];
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            const int e = threadIdx.x + u * blockDim.x;
            if (e < n4) {
                const float4 a = h4[e], b = d4[e];
                v[u] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
                g[u] = w4[e];
            }
        }
        double s = 0.0;
#pragma unroll
        for (int u = 0; u < NORM_V4; u++) {
            const int e = threadIdx.x + u * blockDim.x;
            if (e < n4) {
                h4[e] = v[u];
                s += sq4(v[u]);
            }
        }
        rms_store(v, g, s, n4, dim, eps, sh, (float4*)(y + base));
        return;
    }
    double s = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = h[base + i] + d[base + i];
        h[base + i] = v;
        s += (double)v * v;
    }
    // Each thread reads back only the values it wrote.
    float inv = (float)(1.0 / sqrt(block_sum_f64(s, sh) / (double)dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) y[base + i] = w[i] * (h[base + i] * inv);
}

// Asynchronous copies global → shared (sm_80+): the loads of the next step are in flight
// while the current one computes. 16 bytes (both addresses 16-byte aligned) or 4.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
#else
    *(uint4*)dst = *(const uint4*)src;
#endif
}
// 16 bytes to dst of which only the first n (0..16) are read from src, the rest zeroed: a
// block whose end is not 16-byte aligned is copied without reading past it.
__device__ __forceinline__ void cp_async16_n(void* dst, const void* src, int n) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(n)
                 : "memory");
#else
    for (int i = 0; i < 16; ++i) ((u8*)dst)[i] = i < n ? ((const u8*)src)[i] : 0;
#endif
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
#else
    *(u32*)dst = *(const u32*)src;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N = 0>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }
