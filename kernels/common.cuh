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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

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

// E4M3 (bias 7, S.1111.111 is NaN, no infinities) to f32, exact.
__device__ __forceinline__ float fp8_to_f32(u8 b) {
    float sign = (b & 0x80) ? -1.0f : 1.0f;
    int e = (b >> 3) & 0x0f, m = b & 0x07;
    if (e == 0x0f && m == 0x07) return __int_as_float(0x7fc00000);
    if (e == 0) return sign * ldexpf((float)m / 8.0f, -6);
    return sign * ldexpf(1.0f + (float)m / 8.0f, e - 7);
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

// Pool rows rows[0 .. nt) decoded into dst[kk·st + i] (zeros for a row of −1), eight loads in
// flight per thread.
template <int TY>
__device__ __forceinline__ void paged_load_tile_t(CacheView c, const long long* rows, int nt, int dim, int st,
                                                float* dst) {
    const float* scales = (const float*)(c.data + cache_scale_offset(c.rows, c.dim));
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
