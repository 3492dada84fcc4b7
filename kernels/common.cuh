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
        default: {
            const float* scales = (const float*)(c.data + cache_scale_offset(c.rows, c.dim));
            return fp8_to_f32(c.data[at]) * scales[r];
        }
    }
}

// Pool row of logical key `t` of the sequence of token `s` (see glint_core::Pages).
__device__ __forceinline__ long long page_row(const u32* tables, const u32* token_seq, int max_blocks,
                                              int block_size, int s, int t) {
    u32 seq = token_seq[s];
    u32 blk = tables[(long long)seq * max_blocks + t / block_size];
    return (long long)blk * block_size + t % block_size;
}
