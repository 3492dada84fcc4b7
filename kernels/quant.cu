// kernels/quant.cu — weights on the device: activation quantization, quantized matrix-vector
// products (plain and expert-indexed) and row gathers, one set of kernels per GGML weight type.
//
// Each weight type is a struct `W_<type>` with
//   QK    elements per weight block,      TS   bytes per weight block,
//   NSUB  work units per block (a unit is what one lane computes at a time),
//   SPLIT 1 where the unit's product comes in two halves instead of vd: `A act(a, ib, sub)`
//         (the activation's part of unit `sub`) and `dot(w, A, sub)` (the weight's), so the
//         matvec kernels load each activation unit once for all the rows a warp computes,
//   vd(w, a, ib, sub)  the partial dot product of unit `sub` of weight block `ib` (at `w`) with
//                      the activation row `a` in the type's partner format: the integer sums of
//                      glint-quant's scalar kernel (crates/glint-quant/src/dot/scalar_*.rs),
//                      exact, then scaled the same way;
//   deq(w, j)          element j of the block, the float expression of glint-quant's dequantizer
//                      evaluated in the same order without contraction (`__fmul_rn`), so a
//                      gathered row is bit-identical to the CPU's.
// The `QUANT_KERNELS(name, W)` macro at the bottom stamps out the extern "C" kernels
// `matvec_<name>`, `matvec1_<name>`, `mmid_<name>`, `get_rows_<name>` and `dequant_bf16_<name>`
// from the templates below (and `STAGED_KERNEL`, for the block types, `matvec1s_<name>` and
// `mmids_<name>`); the Rust side
// (crates/glint-cuda/src/quant.rs) has the matching table row per type. Every block type except
// Q8_1 also has a tensor-core kernel for batches (`mmq_<name>`, the MMQ_STAGED lines at the
// end), and their W structs say BLOCKSUM: every kernel sums their rows in the order mmq_* can
// keep (row_dot_blocks), so both paths give the same bits.
//
// Layouts: a group of `ks` warps (ks ∈ {1, 2, 4, 8, 16}) computes MV_RPW consecutive output
// rows; a block holds max(MV_ROWS, ks) warps (blockDim = (32, that)). The host picks ks > 1
// when the rows alone would leave the GPU's warps idle, from the weight's shape only, so
// results never depend on the batch:
//   matvec: grid (ceil(rows / (MV_RPW·groups per block)), min(ceil(n / T), 65535)); each row
//           group reads its weight rows once for up to T tokens (T = 1 in matvec1_*, MV_TOK in
//           matvec_*), token groups stride over grid.y.
//   mmid:   grid (ceil(rows / (MV_RPW·groups per block)), min(n·n_used, 65535)); (token, slot)
//           pairs stride over grid.y; an expert id ≥ n_slices writes zeros.
//           With many pairs, mmid_group (one block) groups them by expert first and matvec_*
//           runs over its tiles of up to MV_TOK pairs of one expert (grid.y strides over the
//           tiles), so an expert's rows are read once per tile instead of once per pair.
//   get_rows: 256 threads, grid min(n, 65535); one block per gathered row.
// The hot types' units (Q4_K, Q5_K, Q6_K, Q8_0, IQ4_XS) are runs of consecutive bytes, so the
// lanes of a warp read a row contiguously, with wide loads and dp4a on the integer sums; Q4_K
// and Q5_K use 16-byte loads, IQ4_XS 8-byte ones, which their 16- (8-) byte-multiple blocks
// (and device allocations) align.
// Byte offsets are `long long` (an expert tensor can exceed 2^31 bytes). Every multi-byte
// field of every block sits at an even offset and every block size except MXFP4's (which has
// no multi-byte field) is even, so 16-bit loads are aligned; 32-bit fields are assembled from
// 16-bit halves where their alignment is not guaranteed.

#define MV_ROWS 4
#define MV_WARPS_MAX 16
#define MV_RPW 4
#define MV_TOK 8
// -DMV_UNROLL=N (benches/cuda/kernel_bench.sh): row_dot_blocks' passes unrolled N times, so a
// warp's loads of the next pass can be in flight while the current one reduces (the order of
// every sum is the same for any N). Unset, the compiler chooses. A pragma's argument is not
// macro-expanded, hence _Pragma through two macros.
#define MV_PRAGMA(x) _Pragma(#x)
#define MV_UNROLL_BY(n) MV_PRAGMA(unroll n)

// Partner-format block sizes (elements, bytes).
#define Q8_0_BYTES 34
#define Q8_1_BYTES 36
// Q8_K's ggml block is 292 bytes (d, qs, bsums); on the GPU each is padded to 304 (19 × 16), so
// activation rows and blocks stay 16-byte aligned: the MMQ tiles copy them in 16-byte pieces
// (73 four-byte ones before), and 8 tokens' blocks 76 words apart put an MMA operand read in
// distinct banks (73 apart: two-way conflicts). crates/glint-cuda's Q8_K_GPU_BYTES is this.
#define Q8_K_BYTES 304

__device__ __forceinline__ u16 ld16(const u8* p) { return *(const u16*)p; }
__device__ __forceinline__ u32 ld32(const u8* p) { return (u32)ld16(p) | ((u32)ld16(p + 2) << 16); }
__device__ __forceinline__ float ldh(const u8* p) { return __half2float(__ushort_as_half(ld16(p))); }
__device__ __forceinline__ float ldbf(const u8* p) { return __uint_as_float((u32)ld16(p) << 16); }
__device__ __forceinline__ float ldf(const u8* p) { return __uint_as_float(ld32(p)); }
// ggml's GGML_FP32_TO_BF16: round to nearest even, NaNs kept quiet.
__device__ __forceinline__ u16 bf16_bits(float f) {
    const u32 u = __float_as_uint(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? (u16)((u >> 16) | 64) : (u16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

// Q8_K activation block: f32 d, i8 qs[256], i16 bsums[16].
__device__ __forceinline__ float q8k_d(const u8* y) { return *(const float*)y; }
__device__ __forceinline__ const i8* q8k_qs(const u8* y) { return (const i8*)(y + 4); }
__device__ __forceinline__ int q8k_bsum(const u8* y, int g) { return *(const i16*)(y + 260 + 2 * g); }

// ggml's GGML_E8M0_TO_FP32_HALF.
__device__ __forceinline__ float e8m0_half(u8 e) {
    u32 bits = e < 2 ? (0x00200000u << e) : ((u32)(e - 1) << 23);
    return __uint_as_float(bits);
}

// Half of an unsigned E4M3 scale; 0 and 0x7F (NaN code) give 0, like ggml.
__device__ __forceinline__ float ue4m3_half(u8 x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    int exp = (x >> 3) & 0xf;
    float man = (float)(x & 7);
    float raw = exp == 0 ? __fmul_rn(man, 1.0f / 512.0f)
                         : __fmul_rn(1.0f + man / 8.0f, __uint_as_float((u32)(exp - 7 + 127) << 23));
    return __fmul_rn(raw, 0.5f);
}

// Σ_j grid_j · q8_j over 8 weights, negated where sign bit j is set.
__device__ __forceinline__ int signed8(u64 grid, u32 signs, const i8* q8) {
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        int p = (int)((grid >> (8 * j)) & 0xff) * (int)q8[j];
        s += (signs >> j) & 1 ? -p : p;
    }
    return s;
}

__device__ __forceinline__ float coord_sign(u64 grid, u32 signs, int j) {
    float c = (float)((grid >> (8 * j)) & 0xff);
    return (signs >> j) & 1 ? -c : c;
}

// ---- float weights (partner: the same float format; F32 uses the activation as is) -------------

// A float unit is one element: the activation's value once (A), then each row's product,
// rounded on its own (`__fmul_rn`, never contracted into the add), so every kernel that sums a
// row — one token, eight, or grouped — forms the same bits.
struct W_f32 {
    enum { QK = 1, TS = 4, NSUB = 1, SPLIT = 1 };
    using A = float;
    static __device__ __forceinline__ A act(const u8* a, int ib, int) { return ((const float*)a)[ib]; }
    // F32 rows are 4-byte multiples of 4-byte aligned allocations: one 32-bit load.
    static __device__ __forceinline__ float dot(const u8* w, A y, int) { return __fmul_rn(*(const float*)w, y); }
    static __device__ __forceinline__ float deq(const u8* w, int) { return ldf(w); }
};

// F32 rows of whole float4s (cols % 4 == 0 and 16-byte aligned rows, the host's choice for
// every product of the weight, so a row's sum is one expression in any batch): a unit is four
// floats, one 16-byte load a lane, their products added left to right. The 4-byte units left a
// warp three rounds of loads for GLM-5's router (256 rows, 64 blocks) and indexer head
// weights (32 rows, 8 blocks): 70 GB/s, 10-11 µs each on an H100 (ncu: 65% of a warp's time
// waiting on L1TEX).
struct W_f32x4 {
    enum { QK = 4, TS = 16, NSUB = 1, SPLIT = 1 };
    using A = float4;
    static __device__ __forceinline__ A act(const u8* a, int ib, int) { return ((const float4*)a)[ib]; }
    static __device__ __forceinline__ float dot(const u8* w, A y, int) {
        const float4 x = *(const float4*)w;
        return __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(x.x, y.x), __fmul_rn(x.y, y.y)), __fmul_rn(x.z, y.z)),
                         __fmul_rn(x.w, y.w));
    }
    static __device__ __forceinline__ float deq(const u8* w, int i) { return ldf(w + 4 * i); }
};

struct W_f16 {
    enum { QK = 1, TS = 2, NSUB = 1, SPLIT = 1 };
    using A = float;
    static __device__ __forceinline__ A act(const u8* a, int ib, int) { return ldh(a + 2 * (long long)ib); }
    static __device__ __forceinline__ float dot(const u8* w, A y, int) { return __fmul_rn(ldh(w), y); }
    static __device__ __forceinline__ float deq(const u8* w, int) { return ldh(w); }
};

struct W_bf16 {
    enum { QK = 1, TS = 2, NSUB = 1, SPLIT = 1 };
    using A = float;
    static __device__ __forceinline__ A act(const u8* a, int ib, int) { return ldbf(a + 2 * (long long)ib); }
    static __device__ __forceinline__ float dot(const u8* w, A y, int) { return __fmul_rn(ldbf(w), y); }
    static __device__ __forceinline__ float deq(const u8* w, int) { return ldbf(w); }
};

// ---- 32-element units against Q8_0 / Q8_1 ------------------------------------------------------

// A Q8_0 block's value from its exact integer sum, without contraction (see q4k_block_value).
__device__ __forceinline__ float q8_0_block_value(int s, float dw, float da) {
    return __fmul_rn((float)s, __fmul_rn(dw, da));
}

// Four bits of n (n < 16) spread to bit 0 of one byte each (no two shifted copies overlap).
__device__ __forceinline__ u32 spread4(u32 n) { return (n * 0x00204081u) & 0x01010101u; }

// Entries 4k..4k+3 of a 16-entry int8 table (0: kvalues_iq4nl, 1: kvalues_mxfp4) as one word
// (constants: the tables are const, their reads fold).
template <int T>
__device__ __forceinline__ u32 nl_word(int k) {
    const i8* t = T ? kvalues_mxfp4 : kvalues_iq4nl;
    return (u32)(u8)t[4 * k] | ((u32)(u8)t[4 * k + 1] << 8) | ((u32)(u8)t[4 * k + 2] << 16) |
           ((u32)(u8)t[4 * k + 3] << 24);
}

// Table T's values of the eight nibbles of q, four int8 a word: lo those of bytes 0..3's low
// nibbles, hi those of their high nibbles. Byte permutes of the table held in four registers
// (entries 0..7 and 8..15, bit 3 of the index picks the half), not indexed loads; no selector
// nibble has bit 3 set (prmt's sign-replicate mode).
template <int T>
__device__ __forceinline__ void nl_lookup8(u32 q, u32& lo, u32& hi) {
    const u32 t0 = nl_word<T>(0), t1 = nl_word<T>(1), t2 = nl_word<T>(2), t3 = nl_word<T>(3);
    const u32 idx = q & 0x77777777u, half = 0x32103210u | ((q & 0x88888888u) >> 1);
    // r0: the values of nibbles 0..3 (lo0, hi0, lo1, hi1), r1: of nibbles 4..7.
    const u32 r0 = __byte_perm(__byte_perm(t0, t1, idx), __byte_perm(t2, t3, idx), half);
    const u32 r1 = __byte_perm(__byte_perm(t0, t1, idx >> 16), __byte_perm(t2, t3, idx >> 16), half >> 16);
    lo = __byte_perm(r0, r1, 0x6420);
    hi = __byte_perm(r0, r1, 0x7531);
}
__device__ __forceinline__ void iq4nl_lookup8(u32 q, u32& lo, u32& hi) { nl_lookup8<0>(q, lo, hi); }

// The types whose unit is one 32-element run against one Q8_0 (Q8_1) activation block (D,
// CRTP): Q8_0, Q4_0/1, Q5_0/1, IQ4_NL, MXFP4 (a unit per block), NVFP4 (two), Q1_0 (four).
// D gives
//   QK, TS, NSUB (units a block), Q8_1 (partner Q8_1: the activation's s counts);
//   quants(x, u, q)  unit u's 32 quants as int8 (offsets and tables applied), element order;
//   wscale(x, u)     the unit's float scales: (d, min) or (d of elements 0..15, of 16..31);
//   value(dw, s, da) the unit's value from its exact sums s (HALVES: of elements 0..15 and
//                    16..31 apart; else s.x the whole, s.y 0) and the activation's (d, s).
// BLOCKSUM 2: a row's sum is the pairwise sums of 8 consecutive units' values (an 8-lane
// butterfly) added in order (see row_dot_blocks), which mmq_unit32 keeps.
template <class D, int HALVES_ = 0>
struct Unit32 {
    enum { SPLIT = 1, BLOCKSUM = 2, HALVES = HALVES_ };
    // The activation block once (A), then each weight row (dot): the words with 32-bit loads
    // (Q8_0 blocks are only 2-byte aligned).
    struct A {
        int q[8];
        float2 d;
    };
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) {
        const u8* y = a + ((long long)ib * D::NSUB + u) * (D::Q8_1 ? Q8_1_BYTES : Q8_0_BYTES);
        A r;
#pragma unroll
        for (int j = 0; j < 8; ++j) r.q[j] = (int)ld32(y + (D::Q8_1 ? 4 : 2) + 4 * j);
        r.d = make_float2(ldh(y), D::Q8_1 ? ldh(y + 2) : 0.0f);
        return r;
    }
    static __device__ __forceinline__ float dot(const u8* x, const A& y, int u) {
        u32 q[8];
        D::quants(x, u, q);
        int lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            lo = __dp4a((int)q[j], y.q[j], lo);
            hi = __dp4a((int)q[j + 4], y.q[j + 4], hi);
        }
        return D::value(D::wscale(x, u), HALVES ? make_int2(lo, hi) : make_int2(lo + hi, 0), y.d);
    }
};

struct W_q8_0 : Unit32<W_q8_0> {  // d f16, qs[32] i8
    enum { QK = 32, TS = 34, NSUB = 1, Q8_1 = 0 };
    static __device__ __forceinline__ void quants(const u8* x, int, u32 (&q)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = ld32(x + 2 + 4 * j);
    }
    static __device__ __forceinline__ float2 wscale(const u8* x, int) { return make_float2(ldh(x), 0.0f); }
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return q8_0_block_value(s.x, dw.x, da.x);
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        return (float)((const i8*)(x + 2))[j] * ldh(x);
    }
};

// 4-bit codes in qs[16] at `at` (elements 0..15 the low nibbles, 16..31 the high ones), plus the
// fifth bits of a u32 qh at `hat` (HIGH), minus `off` per byte.
template <int AT, int HIGH, int HAT>
__device__ __forceinline__ void nib_quants(const u8* x, u32 off, u32 (&q)[8]) {
    const u32 qh = HIGH ? ld32(x + HAT) : 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 w = ld32(x + AT + 4 * j);
        u32 lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;
        if (HIGH) {
            lo |= spread4((qh >> (4 * j)) & 0xfu) << 4;
            hi |= spread4((qh >> (16 + 4 * j)) & 0xfu) << 4;
        }
        q[j] = __vsub4(lo, off);
        q[j + 4] = __vsub4(hi, off);
    }
}

// (d·da)·s, the legacy types' value (glint-quant's scalar_legacy order), without contraction;
// with the min term m·s_a where the type has one.
__device__ __forceinline__ float legacy_value(float2 dw, int s, float2 da, bool min) {
    const float v = __fmul_rn(__fmul_rn(dw.x, da.x), (float)s);
    return min ? __fadd_rn(v, __fmul_rn(dw.y, da.y)) : v;
}

// Q4_0, Q4_1, Q5_0, Q5_1 — d f16, then m f16 (MIN), then the fifth bits as a u32 qh (FIFTH),
// then qs[16]. Without a min the codes are centred (−8, −16); with one the partner is Q8_1
// (d, s, qs) and the value gains m·s_a.
template <int MIN, int FIFTH>
struct Legacy : Unit32<Legacy<MIN, FIFTH>> {
    enum { HEAD = 2 + 2 * MIN, QS = HEAD + 4 * FIFTH, QK = 32, TS = QS + 16, NSUB = 1, Q8_1 = MIN };
    static constexpr int CENTRE = MIN ? 0 : (FIFTH ? 16 : 8);
    static __device__ __forceinline__ void quants(const u8* x, int, u32 (&q)[8]) {
        nib_quants<QS, FIFTH, HEAD>(x, 0x01010101u * (u32)CENTRE, q);
    }
    static __device__ __forceinline__ float2 wscale(const u8* x, int) {
        return make_float2(ldh(x), MIN ? ldh(x + 2) : 0.0f);
    }
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return legacy_value(dw, s.x, da, MIN);
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        int q = j < 16 ? (x[QS + j] & 0x0f) : (x[QS + j - 16] >> 4);
        if (FIFTH) q |= (int)((ld32(x + HEAD) >> j) & 1) << 4;
        return MIN ? __fadd_rn(__fmul_rn(ldh(x), (float)q), ldh(x + 2)) : ldh(x) * (float)(q - CENTRE);
    }
};
typedef Legacy<0, 0> W_q4_0;
typedef Legacy<1, 0> W_q4_1;
typedef Legacy<0, 1> W_q5_0;
typedef Legacy<1, 1> W_q5_1;

// Q8_1 as a weight: glint-quant has no Q8_1 dot kernel, so the CPU backend decodes the row and
// takes an f32 dot with the f32 activation; so does this (partner F32).
struct W_q8_1 {  // d f16, s f16, qs[32] i8
    enum { QK = 32, TS = 36, NSUB = 1, SPLIT = 0 };
    static __device__ __forceinline__ float vd(const u8* x, const u8* a, int ib, int) {
        const float* xa = (const float*)a + (long long)ib * 32;
        const i8* qx = (const i8*)(x + 4);
        const float d = ldh(x);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; ++j) s += ((float)qx[j] * d) * xa[j];
        return s;
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        return (float)((const i8*)(x + 4))[j] * ldh(x);
    }
};

// Table T's values of the 32 nibbles of qs[16] at x + AT (elements 0..15 the low nibbles).
template <int T, int AT>
__device__ __forceinline__ void nl_quants(const u8* x, u32 (&q)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u8* p = x + AT + 4 * j;
        // MXFP4's qs sit at an odd offset: bytes, not halves.
        const u32 w = AT % 2 ? (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24) : ld32(p);
        nl_lookup8<T>(w, q[j], q[j + 4]);
    }
}

struct W_iq4_nl : Unit32<W_iq4_nl> {  // d f16, qs[16]
    enum { QK = 32, TS = 18, NSUB = 1, Q8_1 = 0 };
    static __device__ __forceinline__ void quants(const u8* x, int, u32 (&q)[8]) { nl_quants<0, 2>(x, q); }
    static __device__ __forceinline__ float2 wscale(const u8* x, int) { return make_float2(ldh(x), 0.0f); }
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return legacy_value(dw, s.x, da, false);
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        int q = j < 16 ? (x[2 + j] & 0x0f) : (x[2 + j - 16] >> 4);
        return ldh(x) * (float)kvalues_iq4nl[q];
    }
};

struct W_mxfp4 : Unit32<W_mxfp4> {  // e (E8M0), qs[16]
    enum { QK = 32, TS = 17, NSUB = 1, Q8_1 = 0 };
    static __device__ __forceinline__ void quants(const u8* x, int, u32 (&q)[8]) { nl_quants<1, 1>(x, q); }
    static __device__ __forceinline__ float2 wscale(const u8* x, int) { return make_float2(e8m0_half(x[0]), 0.0f); }
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return legacy_value(dw, s.x, da, false);
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        int q = j < 16 ? (x[1 + j] & 0x0f) : (x[1 + j - 16] >> 4);
        return (float)kvalues_mxfp4[q] * e8m0_half(x[0]);
    }
};

// 64 FP4 weights in four 16-groups with UE4M3 scales, against two Q8_0 blocks: unit u is groups
// 2u and 2u + 1, each scaled on its own (HALVES).
struct W_nvfp4 : Unit32<W_nvfp4, 1> {  // d[4], qs[32]
    enum { QK = 64, TS = 36, NSUB = 2, Q8_1 = 0 };
    // Group s: qs bytes 8s..8s+7, whose low nibbles are its elements 0..7, high nibbles 8..15.
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u8* p = x + 4 + 8 * (2 * u + h);
            nl_lookup8<1>(ld32(p), q[4 * h], q[4 * h + 2]);
            nl_lookup8<1>(ld32(p + 4), q[4 * h + 1], q[4 * h + 3]);
        }
    }
    static __device__ __forceinline__ float2 wscale(const u8* x, int u) {
        return make_float2(ue4m3_half(x[2 * u]), ue4m3_half(x[2 * u + 1]));
    }
    // Each group as glint-quant's dot_nvfp4 (da·d)·s, then the two added.
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return __fadd_rn(__fmul_rn(__fmul_rn(da.x, dw.x), (float)s.x), __fmul_rn(__fmul_rn(da.x, dw.y), (float)s.y));
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        int s = j / 16, k = j % 16;
        u8 q = x[4 + 8 * s + (k % 8)];
        int v = k < 8 ? (q & 0x0f) : (q >> 4);
        return (float)kvalues_mxfp4[v] * ue4m3_half(x[s]);
    }
};

// 128 one-bit weights (+d / -d) against four Q8_0 blocks; unit u is qs bytes 4u..4u+3.
struct W_q1_0 : Unit32<W_q1_0> {  // d f16, qs[16]
    enum { QK = 128, TS = 18, NSUB = 4, Q8_1 = 0 };
    // Bit j of byte 4u + j/8 is element j: 2·bit − 1 per byte.
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
        const u32 w = ld32(x + 2 + 4 * u);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = __vsub4(spread4((w >> (4 * j)) & 0xfu) << 1, 0x01010101u);
    }
    static __device__ __forceinline__ float2 wscale(const u8* x, int) { return make_float2(ldh(x), 0.0f); }
    // dot_q1_0's d·(da·s), per unit.
    static __device__ __forceinline__ float value(float2 dw, int2 s, float2 da) {
        return __fmul_rn(dw.x, __fmul_rn(da.x, (float)s.x));
    }
    static __device__ __forceinline__ float deq(const u8* x, int j) {
        float d = ldh(x);
        return (x[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
    }
};

// ---- k-quants and ternary types against Q8_K (a unit is 32 elements) --------------------------

// The 6-bit (scale, min) pair j of Q4_K/Q5_K (ggml's get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Sub-block u's scale d·sc and min dmin·m of the Q4_K/Q5_K block at x, as their dequantizers
// form them (element = scale·q − min).
__device__ __forceinline__ void k4_scale_min(const u8* x, int u, float& d1, float& m1) {
    int sc, m;
    scale_min_k4(u, x + 4, sc, m);
    d1 = __fmul_rn(ldh(x), (float)sc);
    m1 = __fmul_rn(ldh(x + 2), (float)m);
}

// scale_min_k4 of sub-blocks 2p and 2p + 1, with the 12 scale bytes in three registers (bytes
// 0..3, 4..7, 8..11: the header of a Q4_K/Q5_K block read by one 16-byte load), packed as bytes
// [sc0, sc1, m0, m1] by two byte permutes: bytes b, b + 1 (b = 2(p & 1)) of s0 and s1 hold the
// whole values (p < 2) or their top two bits (p ≥ 2, the low four in s2's bytes b, b + 1: sc's
// low, m's high nibble). p is a lane constant, so the selectors and masks leave the loop.
__device__ __forceinline__ u32 scale_min_k4_quad(int p, u32 s0, u32 s1, u32 s2) {
    const u32 b = 2 * (p & 1);
    const u32 h = __byte_perm(s0, s1, b | (b + 1) << 4 | (b + 4) << 8 | (b + 5) << 12);
    if (p < 2) return h & 0x3f3f3f3fu;
    const u32 l = __byte_perm(s2, 0, b | (b + 1) << 4 | b << 8 | (b + 1) << 12);
    return (l & 0x00000f0fu) | ((l >> 4) & 0x0f0f0000u) | ((h >> 2) & 0x30303030u);
}

// A Q4_K/Q5_K block header (one 16-byte load: d, dmin, the 12 scale bytes) as (d, dmin) and
// scale_min_k4 of all 8 sub-blocks as bytes: sc[0] holds scales 0-3 (the low 6 bits of scale
// bytes 0-3), sc[1] scales 4-7 (the nibbles of bytes 8-11 with bits 6-7 of bytes 0-3 above
// them); mn likewise from bytes 4-7 and the high nibbles.
__device__ __forceinline__ float2 k4_header(uint4 h, u32 (&sc)[2], u32 (&mn)[2]) {
    sc[0] = h.y & 0x3f3f3f3fu;
    sc[1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
    mn[0] = h.z & 0x3f3f3f3fu;
    mn[1] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
    return make_float2(__half2float(__ushort_as_half((u16)(h.x & 0xffff))),
                       __half2float(__ushort_as_half((u16)(h.x >> 16))));
}

// Q3_K scale j (0..16), bias 32 removed.
__device__ __forceinline__ int q3k_scale(const u8* p, int j) {
    int low = j < 8 ? (p[j] & 0x0f) : (p[j - 8] >> 4);
    int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// A Q4_K block's value from its exact integer sums (Σ scale·q·a and Σ min·bsum over the
// whole block): one rounding order for every kernel that reads Q4_K (matvec*, mmid, mmq), no
// contraction, so the per-unit kernels and the tensor-core one give the same bits. Q2_K's too
// (ggml's dall·isum − dmin·summs).
__device__ __forceinline__ float q4k_block_value(float d, float dmin, float yd, int isc, int imn) {
    return __fsub_rn(__fmul_rn(__fmul_rn(d, yd), (float)isc), __fmul_rn(__fmul_rn(dmin, yd), (float)imn));
}

// A Q6_K block's value from Σ scale·(q·a) over its 16 sub-blocks, without contraction (also
// Q3_K's, IQ4_XS's, and the IQ2/IQ3/IQ1 grids' before their final 0.125 / 0.25).
__device__ __forceinline__ float q6k_block_value(float d, float yd, int isc) {
    return __fmul_rn(__fmul_rn(d, yd), (float)isc);
}

// The activation's part of a 32-element unit u of Q8_K block ib: its quants 32u.. (eight words),
// d, and the bsums of its two 16-element halves. For the BLOCKSUM types whose unit u is elements
// 32u..32u+31 (Q2_K, Q3_K, the IQ2/IQ3/IQ1 grids); a type without a min term never reads bs0/bs1
// (the loads are dead).
struct Q8K32 {
    int q[8];
    float d;
    int bs0, bs1;
};
__device__ __forceinline__ Q8K32 q8k_unit32(const u8* a, int ib, int u) {
    const u8* y = a + (long long)ib * Q8_K_BYTES;
    const int* q8 = (const int*)(q8k_qs(y) + 32 * u);
    Q8K32 r;
#pragma unroll
    for (int j = 0; j < 8; ++j) r.q[j] = q8[j];
    r.d = q8k_d(y);
    r.bs0 = q8k_bsum(y, 2 * u);
    r.bs1 = q8k_bsum(y, 2 * u + 1);
    return r;
}

// s0·(q·a over elements 0..15) + s1·(q·a over 16..31) for 32 int8 quants q (element order, four a
// word) against the activation words a.
__device__ __forceinline__ int dot32_scaled(const u32 (&q)[8], const int (&a)[8], int s0, int s1) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        lo = __dp4a((int)q[j], a[j], lo);
        hi = __dp4a((int)q[j + 4], a[j + 4], hi);
    }
    return s0 * lo + s1 * hi;
}

// The "unit = elements 32u..32u+31" BLOCKSUM types (Q2_K, Q3_K, the IQ2/IQ3/IQ1 grids; IQ4_XS
// has the mmq_staged part) share one interface, which row_dot_blocks (act, ints, fin) and
// mmq_staged (the rest) read:
//   SUB      elements per scaled sub-block (16 or 32), SIGNED: whether its scales are i8 (else u8);
//   quants(x, u, q)  unit u's 32 quants as int8 (signs, offsets and grids applied), element order;
//   scales(x, u)     the scales of unit u's SUB-element sub-blocks, a byte each, first lowest
//                    (mins(x, u) likewise, HAS_MIN only);
//   d2(x)            (d, dmin) of the block;
//   value(d, yd, isc, imn)  the block's value from its exact sums Σ scale·(q·a) and Σ min·bsum;
//                    fin is value of d2.

struct W_q2_k {  // scales[16], qs[64], d, dmin
    // BLOCKSUM: rows summed block by block (row_dot_blocks), q4k_block_value of Σ scale·(q·a)
    // and Σ min·bsum over the 16 sub-blocks of 16.
    enum { QK = 256, TS = 84, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 1, SUB = 16, SIGNED = 0 };
    using A = Q8K32;
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) { return q8k_unit32(a, ib, u); }
    // Unit u (h = u/4, s = u%4): bits 2s, 2s+1 of qs bytes 32h..32h+31, read as words (the
    // 84-byte blocks are 4-byte multiples); sub-blocks 2u, 2u + 1.
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
        const u32* q2 = (const u32*)(x + 16 + 32 * (u >> 2));
        const int sh = 2 * (u & 3);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = (q2[j] >> sh) & 0x03030303u;
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int u) { return ld16(x + 2 * u) & 0x0f0fu; }
    static __device__ __forceinline__ u32 mins(const u8* x, int u) { return (ld16(x + 2 * u) >> 4) & 0x0f0fu; }
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int u) {
        u32 q[8];
        quants(x, u, q);
        const u32 sc = ld16(x + 2 * u);
        return make_int2(dot32_scaled(q, y.q, sc & 0x0f, (sc >> 8) & 0x0f),
                         (int)((sc >> 4) & 0x0f) * y.bs0 + (int)(sc >> 12) * y.bs1);
    }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x + 80), ldh(x + 82)); }
    static __device__ __forceinline__ float value(float2 d, float yd, int isc, int imn) {
        return q4k_block_value(d.x, d.y, yd, isc, imn);
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) { return value(d2(x), y.d, s.x, s.y); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int h = e / 128, s = (e % 128) / 32, l = e % 32;
        const u8 sc = x[8 * h + 2 * s + l / 16];
        const float dl = __fmul_rn(ldh(x + 80), (float)(sc & 0x0f));
        const float ml = __fmul_rn(ldh(x + 82), (float)(sc >> 4));
        const int q = (x[16 + 32 * h + l] >> (2 * s)) & 3;
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};

struct W_q3_k {  // hmask[32], qs[64], scales[12], d
    // BLOCKSUM: rows summed block by block, q6k_block_value of Σ (scale − 32)·(q·a) over the 16
    // sub-blocks of 16; no min term.
    enum { QK = 256, TS = 110, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 0, SUB = 16, SIGNED = 1 };
    using A = Q8K32;
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) { return q8k_unit32(a, ib, u); }
    // Unit u (h = u/4, k = u%4): bits 2k, 2k+1 of qs bytes 32h..32h+31, minus 4 where bit u of
    // hmask byte l is clear; ld32 (the 110-byte blocks are only 2-byte aligned).
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
        const u8* qs = x + 32 + 32 * (u >> 2);
        const int sh = 2 * (u & 3);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const u32 lo = (ld32(qs + 4 * j) >> sh) & 0x03030303u, hb = (ld32(x + 4 * j) >> u) & 0x01010101u;
            q[j] = __vsub4(lo | (hb << 2), 0x04040404u);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int u) {
        return (u32)(u8)(i8)q3k_scale(x + 96, 2 * u) | ((u32)(u8)(i8)q3k_scale(x + 96, 2 * u + 1) << 8);
    }
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int u) {
        u32 q[8];
        quants(x, u, q);
        return make_int2(dot32_scaled(q, y.q, q3k_scale(x + 96, 2 * u), q3k_scale(x + 96, 2 * u + 1)), 0);
    }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x + 108), 0.0f); }
    static __device__ __forceinline__ float value(float2 d, float yd, int isc, int) {
        return q6k_block_value(d.x, yd, isc);
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) { return value(d2(x), y.d, s.x, 0); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int u = e / 32, l = e % 32;
        const float dl = ldh(x + 108) * (float)q3k_scale(x + 96, e / 16);
        const int q = ((x[32 + 32 * (u / 4) + l] >> (2 * (u % 4))) & 3) - ((x[l] >> u) & 1 ? 0 : 4);
        return dl * (float)q;
    }
};

struct W_q4_k {  // d, dmin, scales[12], qs[128]
    // BLOCKSUM: a row's sum is its blocks' values (q4k_block_value of the block's integer
    // sums) added in block order, not its units' values (see row_dot_blocks).
    enum { QK = 256, TS = 144, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 1 };
    // Unit u is qs bytes 16u..16u+15 (one 16-byte load: blocks and rows are 16-byte multiples):
    // their low nibbles are elements 16h.. of sub-block 2p, the high nibbles the same elements
    // of sub-block 2p+1 (p = u/2, h = u%2), so a warp reads each row contiguously. The
    // activation's part once (A), then each weight row's integer parts (ints), whose 16-byte
    // header (d, dmin, scales) is one load.
    struct A {
        int lo[4], hi[4];
        float d;
        int bs_lo, bs_hi;
    };
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) {
        const u8* y = a + (long long)ib * Q8_K_BYTES;
        const int p = u >> 1, h = u & 1;
        const int* ylo = (const int*)(q8k_qs(y) + 64 * p + 16 * h);
        A r;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            r.lo[j] = ylo[j];
            r.hi[j] = ylo[j + 8];
        }
        r.d = q8k_d(y);
        r.bs_lo = q8k_bsum(y, 4 * p + h);
        r.bs_hi = q8k_bsum(y, 4 * p + 2 + h);
        return r;
    }
    // Unit u's integer parts of the block sums: Σ scale·q·a and Σ min·bsum.
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int u) {
        const int p = u >> 1;
        const uint4 hd = *(const uint4*)x;
        const uint4 q = *(const uint4*)(x + 16 + 16 * u);
        const u32 qq[4] = {q.x, q.y, q.z, q.w};
        int slo = 0, shi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            slo = __dp4a((int)(qq[j] & 0x0f0f0f0fu), y.lo[j], slo);
            shi = __dp4a((int)((qq[j] >> 4) & 0x0f0f0f0fu), y.hi[j], shi);
        }
        const u32 sm = scale_min_k4_quad(p, hd.y, hd.z, hd.w);
        return make_int2((int)(sm & 0xff) * slo + (int)((sm >> 8) & 0xff) * shi,
                         (int)((sm >> 16) & 0xff) * y.bs_lo + (int)(sm >> 24) * y.bs_hi);
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) {
        const u32 h = *(const u32*)x;
        const float d = __half2float(__ushort_as_half((u16)(h & 0xffff)));
        const float dmin = __half2float(__ushort_as_half((u16)(h >> 16)));
        return q4k_block_value(d, dmin, y.d, s.x, s.y);
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int u = e / 32, l = e % 32;
        float d1, m1;
        k4_scale_min(x, u, d1, m1);
        const int q = (x[16 + 32 * (u / 2) + l] >> (4 * (u % 2))) & 0x0f;
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
};

struct W_q5_k {  // d, dmin, scales[12], qh[32], qs[128]
    // BLOCKSUM: rows summed block by block with Q4_K's block value (row_dot_blocks).
    enum { QK = 256, TS = 176, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 1 };
    // Units and the activation's part as Q4_K's (16 qs bytes each); the fifth bits of those
    // elements are bits 2p and 2p+1 of qh bytes 16h..16h+15.
    using A = W_q4_k::A;
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) { return W_q4_k::act(a, ib, u); }
    // Unit u's 5-bit quants: elements 16h..16h+15 of sub-block 2p (lo) and of 2p + 1 (hi), four
    // a word (p = u/2, h = u%2).
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&lo)[4], u32 (&hi)[4]) {
        const int p = u >> 1, h = u & 1;
        const uint4 q = *(const uint4*)(x + 48 + 16 * u);
        const uint4 hb = *(const uint4*)(x + 16 + 16 * h);
        const u32 qq[4] = {q.x, q.y, q.z, q.w}, hh[4] = {hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            lo[j] = (qq[j] & 0x0f0f0f0fu) | (((hh[j] >> (2 * p)) & 0x01010101u) << 4);
            hi[j] = ((qq[j] >> 4) & 0x0f0f0f0fu) | (((hh[j] >> (2 * p + 1)) & 0x01010101u) << 4);
        }
    }
    // Unit u's integer parts of the block sums: Σ scale·q·a and Σ min·bsum. The scales as three
    // 4-byte loads (not Q4_K's 16-byte header, d and dmin are fin's): matvec1_q5_k and
    // mmid_q5_k then fit 64 registers without spilling.
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int u) {
        const int p = u >> 1;
        const u32 s0 = *(const u32*)(x + 4), s1 = *(const u32*)(x + 8), s2 = *(const u32*)(x + 12);
        u32 lo[4], hi[4];
        quants(x, u, lo, hi);
        int slo = 0, shi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            slo = __dp4a((int)lo[j], y.lo[j], slo);
            shi = __dp4a((int)hi[j], y.hi[j], shi);
        }
        const u32 sm = scale_min_k4_quad(p, s0, s1, s2);
        return make_int2((int)(sm & 0xff) * slo + (int)((sm >> 8) & 0xff) * shi,
                         (int)((sm >> 16) & 0xff) * y.bs_lo + (int)(sm >> 24) * y.bs_hi);
    }
    // d and dmin lead the block as in Q4_K.
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) { return W_q4_k::fin(x, y, s); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int u = e / 32, l = e % 32;
        float d1, m1;
        k4_scale_min(x, u, d1, m1);
        const int q = ((x[48 + 32 * (u / 2) + l] >> (4 * (u % 2))) & 0x0f) | (((x[16 + l] >> u) & 1) << 4);
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
};

struct W_q6_k {  // ql[128], qh[64], scales[16] i8, d
    // BLOCKSUM: rows summed block by block, as Q4_K's (row_dot_blocks); no min term.
    enum { QK = 256, TS = 210, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 0 };
    static __device__ __forceinline__ int q(const u8* x, int e) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const int lo = (x[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0x0f;
        const int hi = (x[128 + 32 * h + l] >> (2 * k)) & 3;
        return (lo | (hi << 4)) - 32;
    }
    // Unit u covers l = 8c..8c+7 (c = u%4) of half h = u/4, in all four 32-element groups k:
    // 8 bytes of each ql run and of qh, read by 2-byte loads (blocks are 210 bytes), so the
    // lanes of a warp read consecutive bytes. Element 128h + 32k + l has scale 8h + 2k + c/2.
    // The activation's part once (A), then each weight row's integer part (ints).
    struct A {
        int q[4][2];
        float d;
    };
    static __device__ __forceinline__ A act(const u8* a, int ib, int u) {
        const u8* y = a + (long long)ib * Q8_K_BYTES;
        const int h = u >> 2, c = u & 3;
        const i8* q8 = q8k_qs(y) + 128 * h + 8 * c;
        A r;
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int j = 0; j < 2; ++j) r.q[k][j] = *(const int*)(q8 + 32 * k + 4 * j);
        r.d = q8k_d(y);
        return r;
    }
    // Unit u's part of Σ scale·(q·a).
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int u) {
        const int h = u >> 2, c = u & 3;
        const u8* qla = x + 64 * h + 8 * c;
        const u8* qh = x + 128 + 32 * h + 8 * c;
        const i8* sc = (const i8*)(x + 192) + 8 * h + (c >> 1);
        int sum[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const u32 la = ld32(qla + 4 * j), lb = ld32(qla + 32 + 4 * j), hv = ld32(qh + 4 * j);
            const u32 v[4] = {
                (la & 0x0f0f0f0fu) | ((hv & 0x03030303u) << 4),
                (lb & 0x0f0f0f0fu) | (((hv >> 2) & 0x03030303u) << 4),
                ((la >> 4) & 0x0f0f0f0fu) | (((hv >> 4) & 0x03030303u) << 4),
                ((lb >> 4) & 0x0f0f0f0fu) | (((hv >> 6) & 0x03030303u) << 4),
            };
#pragma unroll
            for (int k = 0; k < 4; ++k) sum[k] = __dp4a((int)__vsub4(v[k], 0x20202020u), y.q[k][j], sum[k]);
        }
        return make_int2(sc[0] * sum[0] + sc[2] * sum[1] + sc[4] * sum[2] + sc[6] * sum[3], 0);
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) {
        return q6k_block_value(ldh(x + 208), y.d, s.x);
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const i8* sc = (const i8*)(x + 192);
        return (ldh(x + 208) * (float)sc[e / 16]) * (float)q(x, e);
    }
};

// TQ1_0 trit of element e (0..256): five per qs byte, four per qh byte, base-3 fixed point.
__device__ __forceinline__ int tq1_trit(const u8* x, int e) {
    // 3^l for l = 0..4, one byte each.
    const u64 pow3 = 0x000000511b090301ull;
    u8 byte;
    int l;
    if (e < 160) {
        byte = x[e % 32];
        l = e / 32;
    } else if (e < 240) {
        byte = x[32 + (e - 160) % 16];
        l = (e - 160) / 16;
    } else {
        byte = x[48 + (e - 240) % 4];
        l = (e - 240) / 4;
    }
    const u8 p = (u8)(pow3 >> (8 * l));
    u8 q = (u8)(byte * p);
    return (int)(((u16)q * 3) >> 8) - 1;
}

// ---- i-quants against Q8_K (a unit is one 32-weight group) ------------------------------------

// Four grid values (one byte each, below 128) negated where bits 0..3 of s are set, as int8:
// the sign bits spread to one a byte (no two shifted copies overlap), widened to byte masks m,
// then (g ^ m) − m per byte.
__device__ __forceinline__ u32 signed4(u32 g, u32 s) {
    const u32 m = (((s & 0x0fu) * 0x00204081u) & 0x01010101u) * 0xffu;
    return __vsub4(g ^ m, m);
}

// The IQ2/IQ3/IQ1 grid types (D, CRTP): unit g is 32-element group g, with one scale 2s + 1 (u8)
// per SUB elements (D::scales), no min, d from D::d2 (the f16 at byte 0 unless D says); value
// EIGHTHS / 8 (ggml's final 0.125 / 0.25 / 1; IQ1's 1/8 of its staged 8·grid + δ) times
// q6k_block_value (a power of two: the same bits as scaling the row's sum once).
template <class D, int EIGHTHS, int SUB_>
struct GridBlock {
    enum { QK = 256, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 0, SUB = SUB_, SIGNED = 0 };
    using A = Q8K32;
    static __device__ __forceinline__ A act(const u8* a, int ib, int g) { return q8k_unit32(a, ib, g); }
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int g) {
        u32 q[8];
        D::quants(x, g, q);
        const u32 sc = D::scales(x, g);
        return make_int2(dot32_scaled(q, y.q, (int)(sc & 0xff), (int)(SUB == 16 ? sc >> 8 : sc & 0xff)), 0);
    }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x), 0.0f); }
    static __device__ __forceinline__ float value(float2 d, float yd, int isc, int) {
        return __fmul_rn(0.125f * (float)EIGHTHS, q6k_block_value(d.x, yd, isc));
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) { return value(D::d2(x), y.d, s.x, 0); }
};

// The ternary types: one scale d (no sub-block scales: each is 1), trits as int8 −1, 0, 1;
// BLOCKSUM: rows summed block by block, q6k_block_value of Σ trit·a.
struct W_tq1_0 : GridBlock<W_tq1_0, 8, 32> {  // qs[48], qh[4], d
    enum { TS = 54 };
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 w = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) w |= ((u32)tq1_trit(x, 32 * u + 4 * j + k) & 0xffu) << (8 * k);
            q[j] = w;
        }
    }
    static __device__ __forceinline__ u32 scales(const u8*, int) { return 1; }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x + 52), 0.0f); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        return (float)tq1_trit(x, e) * ldh(x + 52);
    }
};

struct W_tq2_0 : GridBlock<W_tq2_0, 8, 32> {  // qs[64], d
    enum { TS = 66 };
    // Unit u: bits 2(u%4).. of qs bytes 32(u/4)..+31, minus 1.
    static __device__ __forceinline__ void quants(const u8* x, int u, u32 (&q)[8]) {
        const u8* qs = x + 32 * (u / 4);
        const int sh = 2 * (u % 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = __vsub4((ld32(qs + 4 * j) >> sh) & 0x03030303u, 0x01010101u);
    }
    static __device__ __forceinline__ u32 scales(const u8*, int) { return 1; }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x + 64), 0.0f); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int q = (x[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        return (float)(q - 1) * ldh(x + 64);
    }
};

struct W_iq2_xxs : GridBlock<W_iq2_xxs, 1, 32> {  // d, qs u16[32]
    // BLOCKSUM: rows summed block by block, 0.125·q6k_block_value of Σ ls·(grid·a).
    enum { TS = 66 };
    // Sub-block g: grid indices in bytes 0..3 of its 8, then 4 × 7 sign bits and the scale.
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
        const u32 aux0 = ld32(x + 2 + 8 * g), aux1 = ld32(x + 6 + 8 * g);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const u64 grid = iq2xxs_grid[(aux0 >> (8 * l)) & 255];
            const u32 sg = ksigns_iq2xs[(aux1 >> (7 * l)) & 127];
            q[2 * l] = signed4((u32)grid, sg);
            q[2 * l + 1] = signed4((u32)(grid >> 32), sg >> 4);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) { return 2 * (ld16(x + 8 + 8 * g) >> 12) + 1; }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const u8* q = x + 2 + 8 * g;
        const u32 aux0 = ld32(q), aux1 = ld32(q + 4);
        const float db = ldh(x) * (0.5f + (float)(aux1 >> 28)) * 0.25f;
        return db * coord_sign(iq2xxs_grid[(aux0 >> (8 * l)) & 255], ksigns_iq2xs[(aux1 >> (7 * l)) & 127], j);
    }
};

struct W_iq2_xs : GridBlock<W_iq2_xs, 1, 16> {  // d, qs u16[32], scales[8]
    // BLOCKSUM: rows summed block by block, 0.125·q6k_block_value of Σ ls·(grid·a); a scale per
    // 16 elements.
    enum { TS = 74 };
    // Group g: four u16 (9-bit grid index, 7-bit sign index), one per 8 elements.
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const u32 v = ld16(x + 2 + 2 * (4 * g + l));
            const u64 grid = iq2xs_grid[v & 511];
            const u32 sg = ksigns_iq2xs[v >> 9];
            q[2 * l] = signed4((u32)grid, sg);
            q[2 * l + 1] = signed4((u32)(grid >> 32), sg >> 4);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) {
        const u32 sc = x[66 + g];
        return (2 * (sc & 0x0f) + 1) | ((2 * (sc >> 4) + 1) << 8);
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const u8 sc = x[66 + g];
        const int s = l < 2 ? (sc & 0x0f) : (sc >> 4);
        const float db = ldh(x) * (0.5f + (float)s) * 0.25f;
        const u16 q = ld16(x + 2 + 2 * (4 * g + l));
        return db * coord_sign(iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9], j);
    }
};

struct W_iq2_s : GridBlock<W_iq2_s, 1, 16> {  // d, qs[64] (32 grid low bytes, 32 sign bytes), qh[8], scales[8]
    // BLOCKSUM: rows summed block by block, 0.125·q6k_block_value of Σ ls·(grid·a); a scale per
    // 16 elements.
    enum { TS = 82 };
    static __device__ __forceinline__ int idx(const u8* x, int g, int l) {
        return x[2 + 4 * g + l] | (((int)x[66 + g] << (8 - 2 * l)) & 0x300);
    }
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const u64 grid = iq2s_grid[idx(x, g, l)];
            const u32 sg = x[34 + 4 * g + l];
            q[2 * l] = signed4((u32)grid, sg);
            q[2 * l + 1] = signed4((u32)(grid >> 32), sg >> 4);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) {
        const u32 sc = x[74 + g];
        return (1 + 2 * (sc & 0x0f)) | ((1 + 2 * (sc >> 4)) << 8);
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const u8 sc = x[74 + g];
        const int s = l < 2 ? (sc & 0x0f) : (sc >> 4);
        const float db = ldh(x) * (0.5f + (float)s) * 0.25f;
        return db * coord_sign(iq2s_grid[idx(x, g, l)], x[34 + 4 * g + l], j);
    }
};

struct W_iq3_xxs : GridBlock<W_iq3_xxs, 2, 32> {  // d, qs[96] (64 grid bytes, 8 u32 of signs + scale)
    // BLOCKSUM: rows summed block by block, 0.25·q6k_block_value of Σ ls·(grid·a).
    enum { TS = 98 };
    static __device__ __forceinline__ u64 grid(const u8* q3, int l) {
        return (u64)iq3xxs_grid[q3[2 * l]] | ((u64)iq3xxs_grid[q3[2 * l + 1]] << 32);
    }
    // Sub-block g: 8 grid indices (4 values each) at 2 + 8g, its signs and scale at 66 + 4g.
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
        const u32 aux = ld32(x + 66 + 4 * g);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const u32 idx = ld16(x + 2 + 8 * g + 2 * l);
            const u32 sg = ksigns_iq2xs[(aux >> (7 * l)) & 127];
            q[2 * l] = signed4(iq3xxs_grid[idx & 255], sg);
            q[2 * l + 1] = signed4(iq3xxs_grid[idx >> 8], sg >> 4);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) { return 2 * (ld16(x + 68 + 4 * g) >> 12) + 1; }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const u32 aux = ld32(x + 2 + 64 + 4 * g);
        const float db = ldh(x) * (0.5f + (float)(aux >> 28)) * 0.5f;
        return db * coord_sign(grid(x + 2 + 8 * g, l), ksigns_iq2xs[(aux >> (7 * l)) & 127], j);
    }
};

struct W_iq3_s : GridBlock<W_iq3_s, 8, 32> {  // d, qs[64], qh[8], signs[32], scales[4]
    // BLOCKSUM: rows summed block by block, q6k_block_value of Σ ls·(grid·a) (no final factor).
    enum { TS = 110 };
    static __device__ __forceinline__ u64 grid(const u8* x, int g, int l) {
        const int qh = x[66 + g];
        const int i1 = x[2 + 8 * g + 2 * l] | ((qh << (8 - 2 * l)) & 256);
        const int i2 = x[2 + 8 * g + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
        return (u64)iq3s_grid[i1] | ((u64)iq3s_grid[i2] << 32);
    }
    static __device__ __forceinline__ int ls(const u8* x, int g) {
        const u8 sc = x[106 + g / 2];
        return 2 * (g % 2 == 0 ? (sc & 0x0f) : (sc >> 4)) + 1;
    }
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const u64 gr = grid(x, g, l);
            const u32 sg = x[74 + 4 * g + l];
            q[2 * l] = signed4((u32)gr, sg);
            q[2 * l + 1] = signed4((u32)(gr >> 32), sg >> 4);
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) { return (u32)ls(x, g); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const float db = ldh(x) * (float)ls(x, g);
        return db * coord_sign(grid(x, g, l), x[74 + 4 * g + l], j);
    }
};

#define IQ1_DELTA 0.125f

// The IQ1 grids: value d·ls·(grid + δ/8) (grid ∈ {-1, 0, 1}, δ = ±1) is staged as the int8
// 8·grid + δ, so Σ ls·(q·a) is 8·(ggml's sumi) + its delta sum, exact; the GridBlock value is
// 0.125·q6k_block_value of it (EIGHTHS 1), which equals glint-quant's d·yd·(sumi + 0.125·sumi1)
// (the sum below 2^24, so both are exact before the one rounding of d·yd times it).
// The eight grid values of gr (bytes 0x00, 0x01, 0xff) as 8·grid + δ, four int8 a word: per
// byte b << 3 (the 0xf8 mask drops the bits the byte below shifted in), then + δ per byte.
__device__ __forceinline__ void iq1_eighths(u64 gr, bool neg, u32& lo, u32& hi) {
    const u32 dl = neg ? 0xffffffffu : 0x01010101u;
    lo = __vadd4(((u32)gr << 3) & 0xf8f8f8f8u, dl);
    hi = __vadd4(((u32)(gr >> 32) << 3) & 0xf8f8f8f8u, dl);
}

struct W_iq1_s : GridBlock<W_iq1_s, 1, 32> {  // d, qs[32], qh u16[8]
    // BLOCKSUM: rows summed block by block, 0.125·q6k_block_value of Σ ls·((8·grid + δ)·a).
    enum { TS = 50 };
    // Group g: qh u16 g holds the 3 high index bits of its four grid indices, the scale
    // (bits 12..14) and the delta's sign (bit 15).
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
        const u32 qh = ld16(x + 34 + 2 * g);
        const bool neg = qh & 0x8000;
#pragma unroll
        for (int l = 0; l < 4; ++l)
            iq1_eighths(iq1s_grid[x[2 + 4 * g + l] | (((qh >> (3 * l)) & 7) << 8)], neg, q[2 * l], q[2 * l + 1]);
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) {
        return 2 * ((ld16(x + 34 + 2 * g) >> 12) & 7) + 1;
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const u32 qh = ld16(x + 34 + 2 * g);
        const float dl = ldh(x) * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
        const u64 gr = iq1s_grid[x[2 + 4 * g + l] | (((qh >> (3 * l)) & 7) << 8)];
        return dl * ((float)(i8)(u8)(gr >> (8 * j)) + delta);
    }
};

struct W_iq1_m : GridBlock<W_iq1_m, 1, 16> {  // qs[32], qh[16], scales[8] (f16 super-scale in the top nibbles)
    // BLOCKSUM: rows summed block by block, 0.125·q6k_block_value of Σ ls·((8·grid + δ)·a); a
    // scale per 16 elements, a delta per 8, d the f16 of the scales' top nibbles.
    enum { TS = 56 };
    static __device__ __forceinline__ float scale(const u8* x) {
        const u16 s0 = ld16(x + 48), s1 = ld16(x + 50), s2 = ld16(x + 52), s3 = ld16(x + 54);
        const u16 bits = (u16)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
        return __half2float(__ushort_as_half(bits));
    }
    static __device__ __forceinline__ int idx(const u8* x, int g, int l) {
        const int qh = x[32 + 2 * g + l / 2];
        return x[4 * g + l] | ((qh << (8 - 4 * (l % 2))) & 0x700);
    }
    static __device__ __forceinline__ bool neg_delta(const u8* x, int g, int l) {
        return x[32 + 2 * g + l / 2] & (l % 2 ? 0x80 : 0x08);
    }
    // Group g: grid index l is qs byte 4g + l with bits 4l..4l+2 of qh u16 g (qh bytes 2g, 2g + 1)
    // above it, bit 4l + 3 its delta's sign (idx, neg_delta).
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
        const u32 qh = ld16(x + 32 + 2 * g);
#pragma unroll
        for (int l = 0; l < 4; ++l)
            iq1_eighths(iq1s_grid[x[4 * g + l] | (((qh >> (4 * l)) & 7) << 8)], (qh >> (4 * l + 3)) & 1, q[2 * l],
                        q[2 * l + 1]);
    }
    // Group g's two 3-bit scales (elements 0..15, 16..31): bits 6(g%2).. of scales u16 g/2.
    static __device__ __forceinline__ u32 scales(const u8* x, int g) {
        const u32 s = (u32)ld16(x + 48 + 2 * (g / 2)) >> (6 * (g % 2));
        return (2 * (s & 7) + 1) | ((2 * ((s >> 3) & 7) + 1) << 8);
    }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(scale(x), 0.0f); }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, l = (e % 32) / 8, j = e % 8;
        const int sc = ld16(x + 48 + 2 * (g / 2));
        const int shift = 6 * (g % 2) + (l < 2 ? 0 : 3);
        const float dl = scale(x) * (float)(2 * ((sc >> shift) & 7) + 1);
        const float delta = neg_delta(x, g, l) ? -IQ1_DELTA : IQ1_DELTA;
        const u64 gr = iq1s_grid[idx(x, g, l)];
        return dl * ((float)(i8)(u8)(gr >> (8 * j)) + delta);
    }
};

struct W_iq4_xs {  // d, scales_h u16, scales_l[4], qs[128]
    // BLOCKSUM: rows summed block by block, as Q6_K's (row_dot_blocks, q6k_block_value of
    // Σ (ls − 32)·(q·a) over the 8 sub-blocks); no min term.
    enum { QK = 256, TS = 136, NSUB = 8, SPLIT = 1, BLOCKSUM = 1, HAS_MIN = 0, SUB = 32, SIGNED = 1 };
    static __device__ __forceinline__ int ls(const u8* x, int g) {
        const int lo = (x[4 + g / 2] >> (4 * (g % 2))) & 0x0f;
        const int hi = (ld16(x + 2) >> (2 * g)) & 3;
        return lo | (hi << 4);
    }
    // ls(x, g) − 32 from scales_h (`h`) and the four scales_l bytes (`l`, one word).
    static __device__ __forceinline__ int scale(u32 h, u32 l, int g) {
        return (int)(((l >> (4 * g)) & 0x0f) | (((h >> (2 * g)) & 3) << 4)) - 32;
    }
    static __device__ __forceinline__ int scale(const u8* x, int g) {
        return scale(ld16(x + 2), *(const u32*)(x + 4), g);
    }
    // Unit g is sub-block g: qs bytes 16g..16g+15, whose low nibbles are its elements 0..15 and
    // high nibbles 16..31; read as two 8-byte loads (the 136-byte blocks are 8-byte multiples),
    // so the lanes of a warp read a row contiguously. lo[j]: the values of elements 4j..4j+3,
    // hi[j]: of 16 + 4j.. (mmq_iq4_xs stages the same words).
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&lo)[4], u32 (&hi)[4]) {
        const uint2 q0 = *(const uint2*)(x + 8 + 16 * g), q1 = *(const uint2*)(x + 16 + 16 * g);
        const u32 qq[4] = {q0.x, q0.y, q1.x, q1.y};
#pragma unroll
        for (int j = 0; j < 4; ++j) iq4nl_lookup8(qq[j], lo[j], hi[j]);
    }
    // mmq_staged's interface (see W_q2_k): unit g's 32 values in element order (lo, then hi),
    // its scale ls − 32 as an i8 byte, d; value is fin's q6k_block_value.
    static __device__ __forceinline__ void quants(const u8* x, int g, u32 (&q)[8]) {
        u32 lo[4], hi[4];
        quants(x, g, lo, hi);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            q[j] = lo[j];
            q[j + 4] = hi[j];
        }
    }
    static __device__ __forceinline__ u32 scales(const u8* x, int g) { return (u32)(u8)(i8)scale(x, g); }
    static __device__ __forceinline__ float2 d2(const u8* x) { return make_float2(ldh(x), 0.0f); }
    static __device__ __forceinline__ float value(float2 d, float yd, int isc, int) {
        return q6k_block_value(d.x, yd, isc);
    }
    struct A {
        int lo[4], hi[4];
        float d;
    };
    static __device__ __forceinline__ A act(const u8* a, int ib, int g) {
        const u8* y = a + (long long)ib * Q8_K_BYTES;
        const int* q8 = (const int*)(q8k_qs(y) + 32 * g);
        A r;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            r.lo[j] = q8[j];
            r.hi[j] = q8[j + 4];
        }
        r.d = q8k_d(y);
        return r;
    }
    // Unit g's part of Σ (ls − 32)·(q·a).
    static __device__ __forceinline__ int2 ints(const u8* x, const A& y, int g) {
        const u32 sh = ld16(x + 2), sl = *(const u32*)(x + 4);
        u32 lo[4], hi[4];
        quants(x, g, lo, hi);
        int s = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            s = __dp4a((int)lo[j], y.lo[j], s);
            s = __dp4a((int)hi[j], y.hi[j], s);
        }
        return make_int2(scale(sh, sl, g) * s, 0);
    }
    static __device__ __forceinline__ float fin(const u8* x, const A& y, int2 s) {
        return q6k_block_value(ldh(x), y.d, s.x);
    }
    static __device__ __forceinline__ float deq(const u8* x, int e) {
        const int g = e / 32, j = e % 32;
        const float dl = ldh(x) * (float)(ls(x, g) - 32);
        const u8 q = x[8 + 16 * g + (j % 16)];
        return dl * (float)kvalues_iq4nl[j < 16 ? (q & 0x0f) : (q >> 4)];
    }
};


// ---- the three kernel templates --------------------------------------------------------------

// Where activation row t of a row_dot call starts: consecutive rows `stride` bytes apart
// (matvec), or rows picked by a list in shared memory (mmid_grouped). Only the address differs,
// so every output's arithmetic is the same whichever selector feeds it.
struct ContigRows {
    const u8* a;
    long long stride;
    __device__ __forceinline__ const u8* operator()(int t) const { return a + t * stride; }
};
struct PickedRows {
    const u8* a;
    long long stride;
    const int* row;  // shared memory, MV_TOK entries
    __device__ __forceinline__ const u8* operator()(int t) const { return a + (long long)row[t] * stride; }
};

// acc[r][t] = W row r · activation row t for the nr ≤ MV_RPW rows at `wrow` (`row_bytes` apart)
// and t < nt (≤ MAXT), over the `ks` warps of a row group (warp `part` of them takes every ks-th
// run of 32 units), then summed over the warp; lane 0 of each warp holds the warp's sums.
// `arow(t)` is activation row t. The rows of a warp share each
// activation load (the compiler keeps one copy for the MV_RPW weight units) and keep MV_RPW
// weight loads in flight per lane. The order of every row's sum depends on ks only, never on
// the number of tokens: a row's result is the same in any batch.
template <class W, class = void>
struct BlockSum {
    enum { v = 0 };
};
template <class W>
struct BlockSum<W, decltype((void)W::BLOCKSUM)> {
    enum { v = W::BLOCKSUM };
};

// The types mmid_short takes: BLOCKSUM 2 with one unit a block (crates/glint-cuda's
// `short_groups` names the same ones: 32-element blocks with a tensor-core kernel).
template <class W, class = void>
struct ShortRows {
    enum { v = 0 };
};
template <class W>
struct ShortRows<W, decltype((void)W::BLOCKSUM)> {
    enum { v = W::BLOCKSUM == 2 && W::NSUB == 1 };
};

// row_dot for the BLOCKSUM types, whose rows are summed in an order the tensor-core kernels
// (mmq_*) keep: a pass of 32 lanes makes 4 "step" values, which are added in step order.
// BLOCKSUM 1 (Q2_K..Q6_K, IQ4_XS, the IQ2/IQ3/IQ1 grids): a step is one block; its NSUB = 8 lanes
// add their units' integer parts (exact) and W::fin scales the block once. BLOCKSUM 2 (the
// Unit32 types): a step is 8 consecutive 32-element units, a lane each, their values added
// pairwise by an 8-lane butterfly (units past the row's end count 0). Warp `part` of a row group
// takes a contiguous run of passes, so a row's sum is: per part, its steps left to right from 0;
// then group_sum adds the parts in order.
// The MV_RPW = 4 rows' sums over a step's 8 lanes are one reduce-scatter (step_sums), not a
// butterfly a row: 7-8 shuffles a pass instead of 24-36, one W::fin a lane instead of four, and
// the rows' step values gathered by 3 shuffles for all rows at once. Lane l ends with row
// row_of_lane(l & 7)'s sums; the same trees, so the same bits.
static_assert(MV_RPW == 4, "step_sums scatters 4 rows over 8 lanes");
template <class W>
__device__ __forceinline__ int row_of_lane(int l8) {
    return W::BLOCKSUM == 1 ? l8 >> 1 : l8 & 3;
}
// BLOCKSUM 1: the 8 lanes' integer parts s[r] of the 4 rows summed (exact, any order) and
// scattered: lane l8 = 2r + c holds row r's (Σx, Σy), c only picking which half it reduced.
__device__ __forceinline__ int2 step_sums_int(const int2 (&s)[4], int l8) {
    const int v[8] = {s[0].x, s[0].y, s[1].x, s[1].y, s[2].x, s[2].y, s[3].x, s[3].y};
    const bool b2 = l8 & 4, b1 = l8 & 2, b0 = l8 & 1;
    int w4[4], w2[2];
#pragma unroll
    for (int k = 0; k < 4; ++k)
        w4[k] = (b2 ? v[4 + k] : v[k]) + __shfl_xor_sync(0xffffffffu, b2 ? v[k] : v[4 + k], 4);
#pragma unroll
    for (int k = 0; k < 2; ++k)
        w2[k] = (b1 ? w4[2 + k] : w4[k]) + __shfl_xor_sync(0xffffffffu, b1 ? w4[k] : w4[2 + k], 2);
    const int w1 = (b0 ? w2[1] : w2[0]) + __shfl_xor_sync(0xffffffffu, b0 ? w2[0] : w2[1], 1);
    const int other = __shfl_xor_sync(0xffffffffu, w1, 1);
    return b0 ? make_int2(other, w1) : make_int2(w1, other);
}
// The same for a type without a min term (only Σx): 4 values, then a butterfly of the last level.
__device__ __forceinline__ int2 step_sums_int_x(const int2 (&s)[4], int l8) {
    const bool b2 = l8 & 4, b1 = l8 & 2;
    int w2[2];
#pragma unroll
    for (int k = 0; k < 2; ++k)
        w2[k] = (b2 ? s[2 + k].x : s[k].x) + __shfl_xor_sync(0xffffffffu, b2 ? s[k].x : s[2 + k].x, 4);
    const int w1 = (b1 ? w2[1] : w2[0]) + __shfl_xor_sync(0xffffffffu, b1 ? w2[0] : w2[1], 2);
    return make_int2(w1 + __shfl_xor_sync(0xffffffffu, w1, 1), 0);
}
// BLOCKSUM 2: the butterfly's tree over 8 lanes (pairs, then pairs of pairs, then halves), the
// 4 rows scattered by the first two levels: lane l8 holds row (l8 & 3)'s sum.
__device__ __forceinline__ float step_sums_float(const float (&v)[4], int l8) {
    const bool b0 = l8 & 1, b1 = l8 & 2;
    float w2[2];
#pragma unroll
    for (int k = 0; k < 2; ++k)
        w2[k] = __fadd_rn(b0 ? v[2 * k + 1] : v[2 * k],
                          __shfl_xor_sync(0xffffffffu, b0 ? v[2 * k] : v[2 * k + 1], 1));
    const float w1 = __fadd_rn(b1 ? w2[1] : w2[0], __shfl_xor_sync(0xffffffffu, b1 ? w2[0] : w2[1], 2));
    return __fadd_rn(w1, __shfl_xor_sync(0xffffffffu, w1, 4));
}
// A warp's weight bytes staged in shared memory (`stage`: NS slots of Stage<W>::WARP bytes,
// the warp's own; MV_STAGES = 3 for matvec1s_*, 2 for mmids_*), copied by cp.async NS − 1
// passes ahead of the pass being summed. Without it a warp's loads of a pass came in two or three dependent rounds (the
// compiler's order within 64-80 registers) and nothing of the next pass was in flight (ncu,
// mmid_q4_k on an H100: 0.57 eligible warps of 4.6, two full-latency waits a pass, 55% of the
// DRAM bandwidth). A row's pass is copied as the 16-byte chunks that cover it, so every byte
// keeps its address mod 16 (each W:: load stays aligned) and the sums read the same bytes in
// the same order: the same bits as without a stage.
#define MV_STAGES 3
template <class W>
struct Stage {
    enum { PASS = 32 / W::NSUB * W::TS, ROW = (PASS + 15) / 16 * 16 + 16, WARP = MV_RPW * ROW };
    static_assert(32 / W::NSUB * W::QK == 1024, "a pass is 1024 elements of a row (the host sizes stages so)");
};
// Issues the copies of pass k (blocks k·BPP.., fewer at the row's end) of the warp's rows into
// one slot: row r at r·ROW, from its first block's 16-byte boundary, by lanes 8r..8r+7 (one
// row pointer a lane, so the loop keeps few registers).
template <class W>
__device__ __forceinline__ void stage_pass(u8* slot, const u8* wrow, long long row_bytes, int nr, int k, int nblocks,
                                           int lane) {
    constexpr int BPP = 32 / W::NSUB, CH = Stage<W>::ROW / 16;
    const int b0 = k * BPP, len = (min(b0 + BPP, nblocks) - b0) * W::TS, r = lane >> 3;
    const u8* g = wrow + min(r, nr - 1) * row_bytes + (long long)b0 * W::TS;
    const u8* a0 = (const u8*)((unsigned long long)g & ~15ull);
    const int n16 = (int)((g + len + 15 - a0) >> 4);
    u8* dst = slot + r * Stage<W>::ROW;
#pragma unroll
    for (int j = 0; j < (CH + 7) / 8; ++j) {
        const int c = (lane & 7) + 8 * j;
        if (c < n16) cp_async16(dst + 16 * c, a0 + 16 * c);
    }
}
// Where row r's block ib of pass k is read from: the weight itself, or its slot's copy.
template <class W, int NS>
__device__ __forceinline__ const u8* pass_row(const u8* slot, const u8* wrow, long long row_bytes, int r, int k) {
    if constexpr (NS == 0) {
        return wrow + r * row_bytes;
    } else {
        const long long first = (long long)k * (32 / W::NSUB) * W::TS;  // the pass's first block
        const u8* g = wrow + r * row_bytes + first;
        return slot + r * Stage<W>::ROW + (int)((unsigned long long)g & 15) - first;
    }
}

template <class W, int MAXT, int NS, class R>
__device__ __forceinline__ void row_dot_blocks(const u8* __restrict__ wrow, long long row_bytes, int cols, R arow,
                                               int nt, int nr, int ks, int part, float (&acc)[MV_RPW][MAXT],
                                               u8* stage) {
    constexpr int BPP = 32 / W::NSUB;  // blocks a pass
    constexpr int BPS = BPP / 4;       // blocks a step
    static_assert(BPS * W::NSUB == 8, "a step is 8 lanes");
    const int nblocks = cols / W::QK, passes = (nblocks + BPP - 1) / BPP;
    const int k0 = part * passes / ks, k1 = nt == 0 ? k0 : (part + 1) * passes / ks;
    const int lane = threadIdx.x & 31, sub = lane % W::NSUB, l8 = lane & 7;
    // This lane's row after the scatter (rows past nr repeat row nr − 1, as wr[] does).
    const int my_row = min(row_of_lane<W>(l8), nr - 1);
    float mine[MAXT];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) mine[t] = 0.0f;
    static_assert(NS == 0 || NS >= 2, "a stage is summed while the next ones load");
    if constexpr (NS > 0) {
#pragma unroll
        for (int s = 0; s < NS - 1; ++s) {
            if (k0 + s < k1) stage_pass<W>(stage + s * Stage<W>::WARP, wrow, row_bytes, nr, k0 + s, nblocks, lane);
            cp_async_commit();
        }
    }
#ifdef MV_UNROLL
    MV_UNROLL_BY(MV_UNROLL)
#endif
    for (int k = k0; k < k1; ++k) {
        const int ibu = k * BPP + lane / W::NSUB, ib = min(ibu, nblocks - 1);
        const u8* slot = nullptr;
        if constexpr (NS > 0) {
            // Pass k's group is complete (every later one may still be in flight) in every
            // lane; the slot of pass k − 1, which all lanes have left, takes pass k + NS − 1.
            cp_async_wait<NS - 2>();
            __syncwarp();
            if (k + NS - 1 < k1)
                stage_pass<W>(stage + (k - k0 + NS - 1) % NS * Stage<W>::WARP, wrow, row_bytes, nr, k + NS - 1,
                              nblocks, lane);
            cp_async_commit();
            slot = stage + (k - k0) % NS * Stage<W>::WARP;
        }
        const u8* wr[MV_RPW];
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r)
            wr[r] = pass_row<W, NS>(slot, wrow, row_bytes, min(r, nr - 1), k) + (long long)ib * W::TS;
#pragma unroll
        for (int t = 0; t < MAXT; ++t) {
            const typename W::A a = W::act(arow(t), ib, sub);
            float v;
            if constexpr (W::BLOCKSUM == 1) {
                int2 s[MV_RPW];
#pragma unroll
                for (int r = 0; r < MV_RPW; ++r) s[r] = W::ints(wr[r], a, sub);
                v = W::fin(pass_row<W, NS>(slot, wrow, row_bytes, my_row, k) + (long long)ib * W::TS, a,
                           W::HAS_MIN ? step_sums_int(s, l8) : step_sums_int_x(s, l8));
            } else {
                float d[MV_RPW];
#pragma unroll
                for (int r = 0; r < MV_RPW; ++r) d[r] = ibu < nblocks ? W::dot(wr[r], a, sub) : 0.0f;
                v = step_sums_float(d, l8);
            }
            // Lanes 0..7 keep the sums read at the end: their own step first, then steps 1..3
            // (the same row's value, 8 lanes on each).
            mine[t] = __fadd_rn(mine[t], v);
#pragma unroll
            for (int j = 1; j < 4; ++j) {
                const float vj = __shfl_sync(0xffffffffu, v, l8 + 8 * j);
                if ((k * 4 + j) * BPS < nblocks) mine[t] = __fadd_rn(mine[t], vj);
            }
        }
    }
    // No lane reads a slot any more when the next call's copies overwrite it.
    if constexpr (NS > 0) __syncwarp();
    // Row r's sums to lane 0 (store_rows, group_sum read lane 0): the first lane holding it.
#pragma unroll
    for (int r = 0; r < MV_RPW; ++r)
#pragma unroll
        for (int t = 0; t < MAXT; ++t)
            acc[r][t] = __shfl_sync(0xffffffffu, mine[t], W::BLOCKSUM == 1 ? 2 * r : r);
}

template <class W, int MAXT, int NS = 0, class R>
__device__ __forceinline__ void row_dot(const u8* __restrict__ wrow, long long row_bytes, int cols, R arow,
                                        int nt, int nr, int ks, int part, float (&acc)[MV_RPW][MAXT],
                                        u8* stage = nullptr) {
#pragma unroll
    for (int r = 0; r < MV_RPW; ++r)
#pragma unroll
        for (int t = 0; t < MAXT; ++t) acc[r][t] = 0.0f;
    if constexpr (BlockSum<W>::v) {
        // Two copies of the loop, so each reads its weights in one address space.
        if (NS > 0 && stage)
            row_dot_blocks<W, MAXT, NS>(wrow, row_bytes, cols, arow, nt, nr, ks, part, acc, stage);
        else
            row_dot_blocks<W, MAXT, 0>(wrow, row_bytes, cols, arow, nt, nr, ks, part, acc, nullptr);
    } else {
        // The split types with MAXT > 1 compute every t < MAXT (arow must give valid rows up to
        // MAXT; the caller keeps the first nt): with no condition on t or r, the compiler loads and
        // decodes each weight unit once for all the tokens instead of once per token (it does not
        // hoist loads out of a branch), and one unit a pass keeps that in registers. A token's sum
        // is the same expression either way. (The other types' per-token `vd` spills when so
        // hoisted: they keep the branch.)
        constexpr bool HOIST = MAXT > 1 && W::SPLIT;
        const int units = HOIST && nt == 0 ? 0 : cols / W::QK * W::NSUB;
        // One token: four units a lane in flight (the float types' 4-byte units leave a warp too
        // few bytes in flight with two); the adds into acc keep their order however unrolled.
#pragma unroll(HOIST ? 1 : (MAXT == 1 ? 4 : 2))
        for (int u = part * 32 + (threadIdx.x & 31); u < units; u += 32 * ks) {
            const int ib = u / W::NSUB, sub = u - ib * W::NSUB;
            if constexpr (HOIST) {
                // Rows past nr repeat row nr − 1 (only a weight of fewer than MV_RPW rows has them).
                const u8* wr[MV_RPW];
#pragma unroll
                for (int r = 0; r < MV_RPW; ++r) wr[r] = wrow + min(r, nr - 1) * row_bytes + (long long)ib * W::TS;
#pragma unroll
                for (int t = 0; t < MAXT; ++t) {
                    const typename W::A a = W::act(arow(t), ib, sub);
#pragma unroll
                    for (int r = 0; r < MV_RPW; ++r) acc[r][t] += W::dot(wr[r], a, sub);
                }
            } else {
#pragma unroll
                for (int t = 0; t < MAXT; ++t) {
                    if (t < nt) {
                        if constexpr (W::SPLIT) {
                            const typename W::A a = W::act(arow(t), ib, sub);
#pragma unroll
                            for (int r = 0; r < MV_RPW; ++r)
                                if (r < nr) acc[r][t] += W::dot(wrow + r * row_bytes + (long long)ib * W::TS, a, sub);
                        } else {
#pragma unroll
                            for (int r = 0; r < MV_RPW; ++r)
                                if (r < nr)
                                    acc[r][t] +=
                                        W::vd(wrow + r * row_bytes + (long long)ib * W::TS, arow(t), ib, sub);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r)
#pragma unroll
            for (int t = 0; t < MAXT; ++t) acc[r][t] = warp_sum(acc[r][t]);
    }
}

// Adds the `ks` warps' sums of each row group (in warp order) into lane 0 of its first warp.
// Every thread of the block calls it (it synchronises the block).
template <int MAXT>
__device__ __forceinline__ void group_sum(int ks, float (&acc)[MV_RPW][MAXT]) {
    if (ks == 1) return;
    __shared__ float part[MV_WARPS_MAX][MV_RPW][MAXT];
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r)
#pragma unroll
            for (int t = 0; t < MAXT; ++t) part[threadIdx.y][r][t] = acc[r][t];
    }
    __syncthreads();
    if (threadIdx.y % ks == 0) {
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r)
#pragma unroll
            for (int t = 0; t < MAXT; ++t) {
                float s = part[threadIdx.y][r][t];
                for (int k = 1; k < ks; ++k) s += part[threadIdx.y + k][r][t];
                acc[r][t] = s;
            }
    }
}

// Lane 0 of a row group's first warp writes its rows r0.. (those below `rows`; a group moved
// back to end at the last row also holds rows of the group before it) for the first nt
// activation rows, activation row t to y row `y_row(t)`.
template <int MAXT, class Y>
__device__ __forceinline__ void store_rows(float* __restrict__ y, const float (&acc)[MV_RPW][MAXT], int rl, int r0,
                                           int rows, int nt, int part, Y y_row) {
    if (part == 0 && (threadIdx.x & 31) == 0) {
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r) {
            const int row = rl + r;
            if (row >= r0 && row < rows) {
#pragma unroll
                for (int t = 0; t < MAXT; ++t)
                    if (t < nt) y[(long long)y_row(t) * rows + row] = acc[r][t];
            }
        }
    }
}

// This warp's NS slots when the launch gave the block enough dynamic shared memory for all its
// warps (the host does for matvec1s_* and mmids_*), else null (the weights are read directly).
template <class W, int NS>
__device__ __forceinline__ u8* warp_stage() {
    if constexpr (BlockSum<W>::v == 0) {
        return nullptr;
    } else {
        extern __shared__ __align__(16) u8 mv_stage[];
        u32 dyn;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
        const u32 per = NS * Stage<W>::WARP;
        return dyn >= per * blockDim.y ? mv_stage + per * threadIdx.y : nullptr;
    }
}

// y[t·rows + r] = W[r] · act[t] for t < n. A block holds blockDim.y warps in groups of `ks`;
// each group computes MV_RPW consecutive rows. Several warps split a row group when there are
// too few rows to fill the GPU. matvec1_* is this with MAXT = 1 (fewer registers), matvec1s_*
// the same with NS = MV_STAGES weight stages; matvec_* is matvec_tiles, MV_TOK tokens a pass; all
// give the same sums.
template <class W, int MAXT, int NS = 0>
__device__ __forceinline__ void matvec(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y,
                                       int cols, int rows, int n, long long act_stride, int ks) {
    const int r0 = (blockIdx.x * (blockDim.y / ks) + threadIdx.y / ks) * MV_RPW, part = threadIdx.y % ks;
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    // The last group moves back to end at the last row (it recomputes rows of the group before
    // it and writes only its own); no early return, as group_sum synchronises the block.
    const int rl = max(min(r0, rows - MV_RPW), 0);
    const u8* wrow = w + (long long)rl * row_bytes;
    const int groups = (n + MAXT - 1) / MAXT;
    for (int g = blockIdx.y; g < groups; g += gridDim.y) {
        const int t0 = g * MAXT, nt = min(MAXT, n - t0);
        float acc[MV_RPW][MAXT];
        row_dot<W, MAXT, NS>(wrow, row_bytes, cols, ContigRows{act + (long long)t0 * act_stride, act_stride},
                             r0 < rows ? nt : 0, min(MV_RPW, rows - rl), ks, part, acc,
                             NS ? warp_stage<W, NS>() : nullptr);
        group_sum<MAXT>(ks, acc);
        store_rows<MAXT>(y, acc, rl, r0, rows, nt, part, [&](int t) { return t0 + t; });
    }
}

// y[p·rows + r] = W[ids[p]][r] · act[x_per_slot ? p : p / n_used] for pairs p < n_pairs; row
// groups as in matvec; mmids_* with NS = 2 weight stages.
template <class W, int NS = 0>
__device__ __forceinline__ void mmid(const u8* __restrict__ w, const u32* __restrict__ ids,
                                     const u8* __restrict__ act, float* __restrict__ y, int cols, int rows,
                                     int n_slices, int n_used, int n_pairs, int x_per_slot, long long act_stride,
                                     int ks) {
    const int r0 = (blockIdx.x * (blockDim.y / ks) + threadIdx.y / ks) * MV_RPW, part = threadIdx.y % ks;
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    const int rl = max(min(r0, rows - MV_RPW), 0);
    for (int p = blockIdx.y; p < n_pairs; p += gridDim.y) {
        const u32 e = ids[p];
        float* out = y + (long long)p * rows;
        if (e >= (u32)n_slices) {  // same id in the whole block: the branch is block-uniform
            if (part == 0 && threadIdx.x == 0)
                for (int r = r0; r < min(r0 + MV_RPW, rows); ++r) out[r] = 0.0f;
            continue;
        }
        const u8* wrow = w + ((long long)e * rows + rl) * row_bytes;
        const u8* a = act + (long long)(x_per_slot ? p : p / n_used) * act_stride;
        float acc[MV_RPW][1];
        row_dot<W, 1, NS>(wrow, row_bytes, cols, ContigRows{a, act_stride}, r0 < rows ? 1 : 0,
                          min(MV_RPW, rows - rl), ks, part, acc, NS ? warp_stage<W, NS>() : nullptr);
        group_sum<1>(ks, acc);
        if (part == 0 && threadIdx.x == 0) {
#pragma unroll
            for (int r = 0; r < MV_RPW; ++r) {
                const int row = rl + r;
                if (row >= r0 && row < rows) out[row] = acc[r][0];
            }
        }
    }
}

// mmid for short rows of the one-unit-a-block BLOCKSUM 2 types (the host passes ks = −G): G row
// groups a warp, each on 32/G lanes (4/G steps of 8 lanes), for rows of at most 32/G blocks.
// GLM-5's per-head products in decode (attn_k_b: 6 Q8_0 blocks a row, attn_v_b: 16) keep 24
// and 32 lanes of a warp reading where mmid keeps 6 and 16. A group's sums are row_dot_blocks'
// for its one pass: each step's step_sums_float, the steps added in order into 0, so the
// bits are mmid's (and so the batched kernels'). Rows are a multiple of MV_RPW (the host's
// condition); a group past the last row computes the last rows again and writes nothing.
template <class W, int G>
__device__ __forceinline__ void mmid_short(const u8* __restrict__ w, const u32* __restrict__ ids,
                                           const u8* __restrict__ act, float* __restrict__ y, int cols, int rows,
                                           int n_slices, int n_used, int n_pairs, int x_per_slot,
                                           long long act_stride) {
    constexpr int LANES = 32 / G, STEPS = LANES / 8;
    const int lane = threadIdx.x & 31, l8 = lane & 7, step = (lane % LANES) / 8;
    const int nblocks = cols / W::QK;
    const int r0 = ((blockIdx.x * blockDim.y + threadIdx.y) * G + lane / LANES) * MV_RPW;
    const int rl = min(r0, rows - MV_RPW);
    const long long row_bytes = (long long)nblocks * W::TS;
    const int ibu = step * 8 + l8, ib = min(ibu, nblocks - 1);
    const bool writer = step == 0 && l8 < MV_RPW && r0 < rows;
    for (int p = blockIdx.y; p < n_pairs; p += gridDim.y) {
        const u32 e = ids[p];
        float* out = y + (long long)p * rows;
        if (e >= (u32)n_slices) {  // same id in the whole block: the branch is block-uniform
            if (writer) out[r0 + l8] = 0.0f;
            continue;
        }
        const u8* wrow = w + ((long long)e * rows + rl) * row_bytes + (long long)ib * W::TS;
        const typename W::A a = W::act(act + (long long)(x_per_slot ? p : p / n_used) * act_stride, ib, 0);
        float d[MV_RPW];
#pragma unroll
        for (int r = 0; r < MV_RPW; ++r) d[r] = ibu < nblocks ? W::dot(wrow + r * row_bytes, a, 0) : 0.0f;
        const float v = step_sums_float(d, l8);
        float mine = __fadd_rn(0.0f, v);
#pragma unroll
        for (int j = 1; j < STEPS; ++j) {
            const float vj = __shfl_sync(0xffffffffu, v, (lane + 8 * j) & 31);
            if (j * 8 < nblocks) mine = __fadd_rn(mine, vj);
        }
        if (writer) out[r0 + l8] = mine;
    }
}

// Groups the pairs of an expert-indexed product by expert, for matvec_* over tiles: `order` lists the pairs
// naming a valid expert, expert by expert (in any order within one: no output depends on the
// pairs beside it); `tiles` = [n_tiles, then (expert, first index into order, count ≤ MV_TOK)
// per tile]; a pair naming an expert ≥ n_slices gets a zero row in y, as in mmid. One block of
// MMID_GROUP_THREADS threads; the per-expert counts (then cursors) in dynamic shared memory.
#define MMID_GROUP_THREADS 1024
extern "C" __global__ void __launch_bounds__(MMID_GROUP_THREADS)
    mmid_group(const u32* __restrict__ ids, int n_pairs, int n_slices, u32* __restrict__ order,
               u32* __restrict__ tiles, float* __restrict__ y, int rows, int tile) {
    pdl_enter();
    extern __shared__ int group_count[];
    __shared__ int warp_pairs[32], warp_tiles[32];
    const int tid = threadIdx.x, nth = blockDim.x, lane = tid & 31;
    for (int e = tid; e < n_slices; e += nth) group_count[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += nth) {
        const u32 e = ids[p];
        if (e < (u32)n_slices) atomicAdd(&group_count[e], 1);
    }
    __syncthreads();
    // Each thread takes a run of experts; a block-wide exclusive scan of the runs' pair and
    // tile totals gives each run's first place in `order` and in `tiles`.
    const int per = (n_slices + nth - 1) / nth;
    const int lo = min(tid * per, n_slices), hi = min(lo + per, n_slices);
    int sp = 0, st = 0;
    for (int e = lo; e < hi; ++e) {
        sp += group_count[e];
        st += (group_count[e] + tile - 1) / tile;
    }
    int ip = sp, it = st;
    for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xffffffffu, ip, o), b = __shfl_up_sync(0xffffffffu, it, o);
        if (lane >= o) {
            ip += a;
            it += b;
        }
    }
    if (lane == 31) {
        warp_pairs[tid >> 5] = ip;
        warp_tiles[tid >> 5] = it;
    }
    __syncthreads();
    if (tid < 32) {
        const int a = tid < nth / 32 ? warp_pairs[tid] : 0, b = tid < nth / 32 ? warp_tiles[tid] : 0;
        int ia = a, ib = b;
        for (int o = 1; o < 32; o <<= 1) {
            const int c = __shfl_up_sync(0xffffffffu, ia, o), d = __shfl_up_sync(0xffffffffu, ib, o);
            if (lane >= o) {
                ia += c;
                ib += d;
            }
        }
        warp_pairs[tid] = ia - a;
        warp_tiles[tid] = ib - b;
        if (tid == 31) tiles[0] = (u32)ib;
    }
    __syncthreads();
    int op = warp_pairs[tid >> 5] + ip - sp, ot = warp_tiles[tid >> 5] + it - st;
    for (int e = lo; e < hi; ++e) {
        const int c = group_count[e];
        for (int s = 0; s < c; s += tile, ++ot) {
            tiles[1 + 3 * ot] = (u32)e;
            tiles[2 + 3 * ot] = (u32)(op + s);
            tiles[3 + 3 * ot] = (u32)min(tile, c - s);
        }
        group_count[e] = op;  // from here on: the next free place of expert e in `order`
        op += c;
    }
    __syncthreads();
    for (int p = tid; p < n_pairs; p += nth) {
        const u32 e = ids[p];
        if (e < (u32)n_slices) {
            order[atomicAdd(&group_count[e], 1)] = (u32)p;
        } else {
            for (int r = 0; r < rows; ++r) y[(long long)p * rows + r] = 0.0f;
        }
    }
}

// mmid_group's order and tiles for a per-head product, whose pair p = t·heads + h uses slice h:
// computed from the indices, one thread an entry (mmid_group is one block counting ids). Slice
// h's pairs in token order, its tiles of up to `tile` of them one after another.
extern "C" __global__ void mmid_group_heads(int n, int heads, u32* __restrict__ order, u32* __restrict__ tiles,
                                            int tile) {
    pdl_enter();
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per = (n + tile - 1) / tile;  // tiles a slice
    if (i < (long long)n * heads) {
        const int h = (int)(i / n), t = (int)(i % n);
        order[i] = (u32)t * (u32)heads + (u32)h;
    }
    if (i < (long long)heads * per) {
        const int h = (int)(i / per), j = (int)(i % per);
        tiles[1 + 3 * i] = (u32)h;
        tiles[2 + 3 * i] = (u32)h * (u32)n + (u32)(j * tile);
        tiles[3 + 3 * i] = (u32)min(tile, n - j * tile);
    }
    if (i == 0) tiles[0] = (u32)(heads * per);
}

// Up to MV_TOK activation rows against the weight rows of a row group, tile after tile, for the
// two products that batch: matvec for n > 1 tokens (`tiles` null: tile g is tokens
// g·MV_TOK.., all of slice 0, y row = token) and mmid for many pairs (`tiles` from mmid_group:
// [n_tiles, then (expert, first index into order, count) per tile], y row = pair, activation
// row = the pair or its token). Block row g takes tiles g, g + gridDim.y, ... Each output is
// row_dot's sum for one activation row, as in matvec<W, 1> and mmid (MAXT only sets how many
// rows share a weight load), so neither the batch nor the grouping changes a result.
template <class W>
__device__ __forceinline__ void matvec_tiles(const u8* __restrict__ w, const u8* __restrict__ act,
                                             float* __restrict__ y, int cols, int rows, int n, long long act_stride,
                                             int ks, const u32* __restrict__ order, const u32* __restrict__ tiles,
                                             int n_used, int x_per_slot) {
    const int r0 = (blockIdx.x * (blockDim.y / ks) + threadIdx.y / ks) * MV_RPW, part = threadIdx.y % ks;
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    // The last group moves back to end at the last row (it recomputes rows of the group before
    // it and writes only its own); no early return, as the block synchronises.
    const int rl = max(min(r0, rows - MV_RPW), 0);
    __shared__ int out_row[MV_TOK], x_row[MV_TOK];
    const int n_tiles = tiles ? (int)tiles[0] : (n + MV_TOK - 1) / MV_TOK;
    for (int g = blockIdx.y; g < n_tiles; g += gridDim.y) {
        u32 e = 0;
        int first = g * MV_TOK, nt = min(MV_TOK, n - first);
        if (tiles) {
            e = tiles[1 + 3 * g];
            first = (int)tiles[2 + 3 * g];
            nt = (int)tiles[3 + 3 * g];
        }
        __syncthreads();  // the previous tile's readers are done with out_row / x_row
        if (threadIdx.y == 0 && threadIdx.x < MV_TOK) {
            // Places past nt repeat the first row: row_dot computes all MV_TOK, y keeps nt.
            const int q = threadIdx.x < nt ? threadIdx.x : 0;
            const int p = tiles ? (int)order[first + q] : first + q;
            out_row[threadIdx.x] = p;
            x_row[threadIdx.x] = tiles && !x_per_slot ? p / n_used : p;
        }
        __syncthreads();
        const u8* wrow = w + ((long long)e * rows + rl) * row_bytes;
        float acc[MV_RPW][MV_TOK];
        row_dot<W, MV_TOK>(wrow, row_bytes, cols, PickedRows{act, act_stride, x_row}, r0 < rows ? nt : 0,
                           min(MV_RPW, rows - rl), ks, part, acc);
        group_sum<MV_TOK>(ks, acc);
        store_rows<MV_TOK>(y, acc, rl, r0, rows, nt, part, [&](int t) { return out_row[t]; });
    }
}

// out[i·cols + c] = row ids[i] of W decoded to f32 (zeros for ids ≥ total_rows).
template <class W>
__device__ __forceinline__ void get_rows(const u8* __restrict__ w, const u32* __restrict__ ids, float* __restrict__ out,
                                         int cols, long long total_rows, int n) {
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const u32 id = ids[i];
        float* o = out + (long long)i * cols;
        if ((long long)id >= total_rows) {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = 0.0f;
            continue;
        }
        const u8* row = w + (long long)id * row_bytes;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const int ib = c / W::QK;
            o[c] = W::deq(row + (long long)ib * W::TS, c - ib * W::QK);
        }
    }
}

// Elements e0 .. e0 + 7 of a block (e0 a multiple of 8), each deq's float: by deq itself, or,
// for the k-quants prompts multiply most, with a sub-block's scale (and min) formed once for
// its 8 elements (deq forms them per element: the decode then ran at a quarter of the copy
// bandwidth on an H100, call AN). Same expressions, same order, so the same bits.
template <class W>
__device__ __forceinline__ void deq8(const u8* x, int e0, float* v) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = W::deq(x, e0 + k);
}
template <>
__device__ __forceinline__ void deq8<W_q4_k>(const u8* x, int e0, float* v) {
    const int u = e0 / 32, l = e0 % 32;
    float d1, m1;
    k4_scale_min(x, u, d1, m1);
    const uint2 q = *(const uint2*)(x + 16 + 32 * (u / 2) + l);  // 144-byte blocks: 8-aligned
    const int sh = 4 * (u % 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const int b = (((k < 4 ? q.x : q.y) >> (8 * (k % 4))) >> sh) & 0x0f;
        v[k] = __fsub_rn(__fmul_rn(d1, (float)b), m1);
    }
}
template <>
__device__ __forceinline__ void deq8<W_q5_k>(const u8* x, int e0, float* v) {
    const int u = e0 / 32, l = e0 % 32;
    float d1, m1;
    k4_scale_min(x, u, d1, m1);
    const int sh = 4 * (u % 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const int b = ((x[48 + 32 * (u / 2) + l + k] >> sh) & 0x0f) | (((x[16 + l + k] >> u) & 1) << 4);
        v[k] = __fsub_rn(__fmul_rn(d1, (float)b), m1);
    }
}
template <>
__device__ __forceinline__ void deq8<W_q6_k>(const u8* x, int e0, float* v) {
    const float d = ldh(x + 208) * (float)((const i8*)(x + 192))[e0 / 16];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = d * (float)W_q6_k::q(x, e0 + k);
}

// Rows first .. first + rows - 1 of W decoded to bf16 (deq, then bf16_bits): the weight half
// of a prompt product cuBLAS multiplies (crates/glint-cuda/src/gemm.rs). A thread decodes
// eight consecutive elements of a row (one 16-byte store; cols is a multiple of 8), grid.x
// over a row's groups and grid.y over rows, striding past 65535: no 64-bit division (a flat
// index cost one an element pair and ran at a quarter of the copy bandwidth).
template <class W>
__device__ __forceinline__ void dequant_bf16(const u8* __restrict__ w, uint4* __restrict__ out, int cols,
                                             long long first, long long rows) {
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    const int groups = cols / 8;
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    const int c = g * 8;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const u8* row = w + (first + r) * row_bytes;
        float f[8];
        if (W::QK % 8 == 0) {
            const int ib = c / W::QK;
            deq8<W>(row + (long long)ib * W::TS, c - ib * W::QK, f);
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int ib = (c + k) / W::QK;
                f[k] = W::deq(row + (long long)ib * W::TS, c + k - ib * W::QK);
            }
        }
        u32 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = (u32)bf16_bits(f[2 * k]) | ((u32)bf16_bits(f[2 * k + 1]) << 16);
        out[r * groups + g] = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

// A one-token product block's weight rows to L2 before it waits (l2_prefetch): the rows matvec
// gives its row groups, from the first block of each row range (blockIdx.y > 0 reads the same).
// Not inlined: inlined, ptxas kept its values live into the product and spilled (matvec1_f32x4,
// 32 bytes) or took 9 more registers (matvec1_q4_k).
template <class W>
__device__ __noinline__ void prefetch_rows(const u8* w, int cols, int rows, int ks) {
    const int per = blockDim.y / ks * MV_RPW, first = blockIdx.x * per;
    if (blockIdx.y != 0 || first >= rows) return;
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    l2_prefetch(w + (long long)first * row_bytes, (long long)min(per, rows - first) * row_bytes);
}

// The one-token products take a second weight of the same type and shape and its output (w2,
// y2): blocks with blockIdx.z = 1 compute y2 = W2 · act, so a gate and an up projection of one
// activation are one launch (the host sets grid.z = 2; null and grid.z = 1 otherwise). Each
// output's sum is the one a launch of its own gives.
#define PAIR_SWITCH          \
    if (blockIdx.z) {        \
        w = w2;              \
        y = y2;              \
    }

// matvec_* says one block per multiprocessor at least: without it ptxas held some types' MV_TOK
// accumulators to 64 registers and spilled (IQ4_XS, IQ2_XXS: 300+ bytes), with it none spill.
#define QUANT_KERNELS(name, W)                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS_MAX, 1)                                    \
        matvec_##name(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y,   \
                      int cols, int rows, int n, long long act_stride, int ks, const u32* __restrict__ order, \
                      const u32* __restrict__ tiles, int n_used, int x_per_slot) {                                \
        if (!tiles) prefetch_rows<W>(w, cols, rows, ks);                                             \
        pdl_enter();                                                                                 \
        matvec_tiles<W>(w, act, y, cols, rows, n, act_stride, ks, order, tiles, n_used, x_per_slot); \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS_MAX)                                       \
        matvec1_##name(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y,  \
                       int cols, int rows, int n, long long act_stride, int ks, const u8* __restrict__ w2, \
                       float* __restrict__ y2) {                                                    \
        PAIR_SWITCH                                                                                  \
        prefetch_rows<W>(w, cols, rows, ks);                                                         \
        pdl_enter();                                                                                 \
        matvec<W, 1>(w, act, y, cols, rows, n, act_stride, ks);                                      \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS_MAX)                                       \
        mmid_##name(const u8* __restrict__ w, const u32* __restrict__ ids, const u8* __restrict__ act, \
                    float* __restrict__ y, int cols, int rows, int n_slices, int n_used, int n_pairs, \
                    int x_per_slot, long long act_stride, int ks, const u8* __restrict__ w2,        \
                    float* __restrict__ y2) { pdl_enter();                                          \
        PAIR_SWITCH                                                                                  \
        if constexpr (ShortRows<W>::v) {                                                             \
            if (ks == -4)                                                                            \
                return mmid_short<W, 4>(w, ids, act, y, cols, rows, n_slices, n_used, n_pairs, x_per_slot, act_stride); \
            if (ks == -2)                                                                            \
                return mmid_short<W, 2>(w, ids, act, y, cols, rows, n_slices, n_used, n_pairs, x_per_slot, act_stride); \
        }                                                                                            \
        mmid<W>(w, ids, act, y, cols, rows, n_slices, n_used, n_pairs, x_per_slot, act_stride, ks);  \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(256)                                                \
        get_rows_##name(const u8* __restrict__ w, const u32* __restrict__ ids, float* __restrict__ out, \
                        int cols, long long total_rows, int n) { pdl_enter();                                     \
        get_rows<W>(w, ids, out, cols, total_rows, n);                                               \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(256)                                                \
        dequant_bf16_##name(const u8* __restrict__ w, uint4* __restrict__ out, int cols, long long first, \
                            long long rows) { pdl_enter();                                           \
        dequant_bf16<W>(w, out, cols, first, rows);                                                  \
    }
// The staged one-token products, kernels of their own so that matvec1_* and mmid_* keep the
// registers they need without a stage (sharing one kernel, matvec1_q6_k went from 58 to 97
// registers and its unstaged path from 63% to 40% of the copy bandwidth on an H100). Block
// types only. mmids_* (one warp a row group, blocks of MV_ROWS warps) has two stages and at
// most 64 registers, so 8 blocks fit an SM and one token's 8 experts × 2048 rows are one wave
// of blocks (with 80 registers and three stages, 1.29 waves: the second a third full).
#define STAGED_KERNEL(name, W)                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS_MAX)                                \
        matvec1s_##name(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y, \
                        int cols, int rows, int n, long long act_stride, int ks, const u8* __restrict__ w2, \
                        float* __restrict__ y2) {                                                   \
        PAIR_SWITCH                                                                                 \
        prefetch_rows<W>(w, cols, rows, ks);                                                        \
        pdl_enter();                                                                                \
        matvec<W, 1, MV_STAGES>(w, act, y, cols, rows, n, act_stride, ks);                         \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(32 * MV_ROWS, 8)                                   \
        mmids_##name(const u8* __restrict__ w, const u32* __restrict__ ids, const u8* __restrict__ act, \
                     float* __restrict__ y, int cols, int rows, int n_slices, int n_used, int n_pairs, \
                     int x_per_slot, long long act_stride, int ks, const u8* __restrict__ w2,       \
                     float* __restrict__ y2) { pdl_enter();                                         \
        PAIR_SWITCH                                                                                 \
        mmid<W, 2>(w, ids, act, y, cols, rows, n_slices, n_used, n_pairs, x_per_slot, act_stride, ks); \
    }

// ---- F32 rows against many tokens: a row group's parts in one warp ------------------------------

// The same butterfly as warp_sum, as a reduce-scatter of 32 values: at each level a lane keeps
// the half of its values whose index bit matches its own lane bit and adds its partner's copy
// of them (each sum pairs the lanes warp_sum pairs, so every value has warp_sum's bits), and
// ends with value `lane`. 31 shuffles where 32 warp_sums take 160.
template <int N>
__device__ __forceinline__ void scatter_level(const float (&in)[N], float (&out)[N / 2], int lane) {
    const bool hi = lane & (N / 2);
#pragma unroll
    for (int j = 0; j < N / 2; ++j)
        out[j] = __fadd_rn(hi ? in[N / 2 + j] : in[j],
                           __shfl_xor_sync(0xffffffffu, hi ? in[j] : in[N / 2 + j], N / 2));
}
__device__ __forceinline__ float reduce_scatter32(const float (&v)[32], int lane) {
    float a16[16], a8[8], a4[4], a2[2], a1[1];
    scatter_level<32>(v, a16, lane);
    scatter_level<16>(a16, a8, lane);
    scatter_level<8>(a8, a4, lane);
    scatter_level<4>(a4, a2, lane);
    scatter_level<2>(a2, a1, lane);
    return a1[0];
}

// matvec_f32x4's sums for prompts (the host takes it from GLINT_CUDA_F32_WIDE_MIN tokens): a
// warp computes MV_RPW rows × MV_TOK tokens and walks the row group's `ks` parts itself —
// each part's units as row_dot takes them (lane + 32·part, then every 32·ks), its 32 sums
// reduce-scattered (a lane ends with row lane / 8, token lane % 8), the parts added in order
// as group_sum adds them — so every output has the bits of matvec1_f32x4 for that token alone.
// matvec_f32x4 spends a block of ks warps, a barrier, 160 shuffles a warp and one lane's 32
// serial sums and stores per row group and tile; GLM-5's router (256 × 6144, ks = 16) took 458
// µs of a 512-token step so (H100, call AX). Blocks of MV_WIDE_WARPS row groups share a tile's
// activation rows in L1. matvec_*'s arguments (the grouping ones unused: plain products only).
#define MV_WIDE_WARPS 8
extern "C" __global__ void __launch_bounds__(32 * MV_WIDE_WARPS)
    matvec_wide_f32x4(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y, int cols,
                      int rows, int n, long long act_stride, int ks, const u32*, const u32*, int, int) {
    pdl_enter();
    static_assert(MV_RPW * MV_TOK == 32, "a lane ends with one output");
    const int lane = threadIdx.x & 31, units = cols / 4;
    const int r0 = (blockIdx.x * blockDim.y + threadIdx.y) * MV_RPW;
    if (r0 >= rows) return;  // no barrier below
    // The last group moves back to end at the last row and writes only its own (as matvec).
    const int rl = max(min(r0, rows - MV_RPW), 0), nr = min(MV_RPW, rows - rl);
    const long long row_bytes = (long long)cols * 4;
    const float4* wr[MV_RPW];
#pragma unroll
    for (int r = 0; r < MV_RPW; ++r) wr[r] = (const float4*)(w + (rl + min(r, nr - 1)) * row_bytes);
    const int my_r = lane / MV_TOK, my_t = lane % MV_TOK;
    for (int t0 = blockIdx.y * MV_TOK; t0 < n; t0 += gridDim.y * MV_TOK) {
        // Places past n repeat the last token; only the first n are stored.
        const float4* ar[MV_TOK];
#pragma unroll
        for (int t = 0; t < MV_TOK; ++t) ar[t] = (const float4*)(act + (long long)min(t0 + t, n - 1) * act_stride);
        float tot = 0.0f;
        for (int part = 0; part < ks; ++part) {
            float acc[32];
#pragma unroll
            for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
            for (int u = part * 32 + lane; u < units; u += 32 * ks) {
                float4 x[MV_RPW];
#pragma unroll
                for (int r = 0; r < MV_RPW; ++r) x[r] = wr[r][u];
#pragma unroll
                for (int t = 0; t < MV_TOK; ++t) {
                    const float4 a = ar[t][u];
#pragma unroll
                    for (int r = 0; r < MV_RPW; ++r) acc[r * MV_TOK + t] += W_f32x4::dot((const u8*)&x[r], a, 0);
                }
            }
            const float v = reduce_scatter32(acc, lane);
            tot = part == 0 ? v : __fadd_rn(tot, v);
        }
        const int row = rl + my_r, tok = t0 + my_t;
        if (row >= r0 && row < rows && tok < n) y[(long long)tok * rows + row] = tot;
    }
}

// matvec_wide_f32x4's sums on shared-memory tiles: a block takes MV_TILE_ROWS rows × MV_TILE_TOKS
// tokens, and each step copies one 32-unit slice of a part (units p·32 + i·32·ks .. + 31, the
// units lane l of part p's warp takes as `lane`, in the order it takes them) of its rows and
// tokens to shared memory, two steps in flight (cp.async). Warp w owns row group w (4 rows) for
// all the block's tokens: 4 × 32 sums a lane, each the one matvec_wide_f32x4's lane keeps for
// that (part, unit, row, token), so the parts reduce-scatter and add up as there — the bits of
// matvec1_f32x4. matvec_wide_f32x4 read every weight row once per 8 tokens and every token once
// per 4 rows from L2 (L1 did not keep a block's tokens between its warps): GLM-5's router took
// 344 µs of a 512-token step (H100, call BM) where its two-operation-a-product work is ~50.
// Dynamic shared memory: 2 × (ROWS + TOKS) × 32 × 16 bytes. matvec_*'s arguments.
#define MV_TILE_ROWS 32
#define MV_TILE_TOKS 32
#define MV_TILE_SMEM (2 * (MV_TILE_ROWS + MV_TILE_TOKS) * 32 * 16)
extern "C" __global__ void __launch_bounds__(32 * MV_TILE_ROWS / MV_RPW, 1)
    matvec_tile_f32x4(const u8* __restrict__ w, const u8* __restrict__ act, float* __restrict__ y, int cols,
                      int rows, int n, long long act_stride, int ks, const u32*, const u32*, int, int) {
    pdl_enter();
    static_assert(MV_RPW * MV_TOK == 32, "a lane ends with one output a token group");
    constexpr int TG = MV_TILE_TOKS / MV_TOK;  // token groups a warp
    extern __shared__ __align__(16) u8 mt_smem[];
    float4* ws = (float4*)mt_smem;                          // [2][ROWS][32]
    float4* as = ws + 2 * MV_TILE_ROWS * 32;                // [2][TOKS][32]
    const int lane = threadIdx.x & 31, warp = threadIdx.y, tid = warp * 32 + lane;
    const int nthreads = blockDim.y * 32, units = cols / 4, stride = 32 * ks;
    const int r0 = blockIdx.x * MV_TILE_ROWS;
    const long long row_bytes = (long long)cols * 4;
    // Token tiles past the grid's height are strided over it (block-uniform: the barriers hold).
    for (int t0 = blockIdx.y * MV_TILE_TOKS; t0 < n; t0 += gridDim.y * MV_TILE_TOKS) {
        // Steps of part p: its slices that start below `units`.
        auto steps = [&](int p) { return p * 32 < units ? (units - p * 32 + stride - 1) / stride : 0; };
        // Copies slice (p, i) into buffer b; slots past `units` are never read.
        auto load = [&](int p, int i, int b) {
            const int u0 = p * 32 + i * stride;
            for (int e = tid; e < (MV_TILE_ROWS + MV_TILE_TOKS) * 32; e += nthreads) {
                const int j = e >> 5, c = e & 31;
                if (u0 + c >= units) continue;
                if (j < MV_TILE_ROWS) {
                    const u8* src = w + (long long)min(r0 + j, rows - 1) * row_bytes + (long long)(u0 + c) * 16;
                    cp_async16(&ws[(b * MV_TILE_ROWS + j) * 32 + c], src);
                } else {
                    const int t = j - MV_TILE_ROWS;
                    const u8* src = act + (long long)min(t0 + t, n - 1) * act_stride + (long long)(u0 + c) * 16;
                    cp_async16(&as[(b * MV_TILE_TOKS + t) * 32 + c], src);
                }
            }
            cp_async_commit();
        };
        int lp = 0, li = 0;  // the next slice to copy
        auto advance = [&]() {
            ++li;
            while (lp < ks && li >= steps(lp)) {
                ++lp;
                li = 0;
            }
        };
        li = -1;
        advance();
        if (lp < ks) {
            load(lp, li, 0);
            advance();
        }
        float tot[TG];
        int cb = 0;
        for (int p = 0; p < ks; ++p) {
            float acc[TG][32];
#pragma unroll
            for (int g = 0; g < TG; ++g)
#pragma unroll
                for (int i = 0; i < 32; ++i) acc[g][i] = 0.0f;
            for (int i = 0, ni = steps(p); i < ni; ++i) {
                if (lp < ks) {
                    load(lp, li, cb ^ 1);
                    advance();
                    cp_async_wait<1>();
                } else {
                    cp_async_wait<0>();
                }
                __syncthreads();
                if (p * 32 + i * stride + lane < units) {
                    float4 x[MV_RPW];
#pragma unroll
                    for (int r = 0; r < MV_RPW; ++r) x[r] = ws[(cb * MV_TILE_ROWS + warp * MV_RPW + r) * 32 + lane];
#pragma unroll
                    for (int g = 0; g < TG; ++g)
#pragma unroll
                        for (int t = 0; t < MV_TOK; ++t) {
                            const float4 a = as[(cb * MV_TILE_TOKS + g * MV_TOK + t) * 32 + lane];
#pragma unroll
                            for (int r = 0; r < MV_RPW; ++r)
                                acc[g][r * MV_TOK + t] += W_f32x4::dot((const u8*)&x[r], a, 0);
                        }
                }
                __syncthreads();
                cb ^= 1;
            }
#pragma unroll
            for (int g = 0; g < TG; ++g) {
                const float v = reduce_scatter32(acc[g], lane);
                tot[g] = p == 0 ? v : __fadd_rn(tot[g], v);
            }
        }
        const int row = r0 + warp * MV_RPW + lane / MV_TOK;
#pragma unroll
        for (int g = 0; g < TG; ++g) {
            const int tok = t0 + g * MV_TOK + lane % MV_TOK;
            if (row < rows && tok < n) y[(long long)tok * rows + row] = tot[g];
        }
    }
}

QUANT_KERNELS(f32, W_f32)
QUANT_KERNELS(f32x4, W_f32x4)
QUANT_KERNELS(f16, W_f16)
QUANT_KERNELS(bf16, W_bf16)
QUANT_KERNELS(q4_0, W_q4_0)
QUANT_KERNELS(q4_1, W_q4_1)
QUANT_KERNELS(q5_0, W_q5_0)
QUANT_KERNELS(q5_1, W_q5_1)
QUANT_KERNELS(q8_0, W_q8_0)
QUANT_KERNELS(q8_1, W_q8_1)
QUANT_KERNELS(iq4_nl, W_iq4_nl)
QUANT_KERNELS(mxfp4, W_mxfp4)
QUANT_KERNELS(nvfp4, W_nvfp4)
QUANT_KERNELS(q1_0, W_q1_0)
QUANT_KERNELS(q2_k, W_q2_k)
QUANT_KERNELS(q3_k, W_q3_k)
QUANT_KERNELS(q4_k, W_q4_k)
QUANT_KERNELS(q5_k, W_q5_k)
QUANT_KERNELS(q6_k, W_q6_k)
QUANT_KERNELS(tq1_0, W_tq1_0)
QUANT_KERNELS(tq2_0, W_tq2_0)
QUANT_KERNELS(iq2_xxs, W_iq2_xxs)
QUANT_KERNELS(iq2_xs, W_iq2_xs)
QUANT_KERNELS(iq2_s, W_iq2_s)
QUANT_KERNELS(iq3_xxs, W_iq3_xxs)
QUANT_KERNELS(iq3_s, W_iq3_s)
QUANT_KERNELS(iq1_s, W_iq1_s)
QUANT_KERNELS(iq1_m, W_iq1_m)
QUANT_KERNELS(iq4_xs, W_iq4_xs)
STAGED_KERNEL(q4_0, W_q4_0)
STAGED_KERNEL(q4_1, W_q4_1)
STAGED_KERNEL(q5_0, W_q5_0)
STAGED_KERNEL(q5_1, W_q5_1)
STAGED_KERNEL(q8_0, W_q8_0)
STAGED_KERNEL(iq4_nl, W_iq4_nl)
STAGED_KERNEL(mxfp4, W_mxfp4)
STAGED_KERNEL(nvfp4, W_nvfp4)
STAGED_KERNEL(q1_0, W_q1_0)
STAGED_KERNEL(q2_k, W_q2_k)
STAGED_KERNEL(q3_k, W_q3_k)
STAGED_KERNEL(q4_k, W_q4_k)
STAGED_KERNEL(q5_k, W_q5_k)
STAGED_KERNEL(q6_k, W_q6_k)
STAGED_KERNEL(tq1_0, W_tq1_0)
STAGED_KERNEL(tq2_0, W_tq2_0)
STAGED_KERNEL(iq2_xxs, W_iq2_xxs)
STAGED_KERNEL(iq2_xs, W_iq2_xs)
STAGED_KERNEL(iq2_s, W_iq2_s)
STAGED_KERNEL(iq3_xxs, W_iq3_xxs)
STAGED_KERNEL(iq3_s, W_iq3_s)
STAGED_KERNEL(iq1_s, W_iq1_s)
STAGED_KERNEL(iq1_m, W_iq1_m)
STAGED_KERNEL(iq4_xs, W_iq4_xs)

// ---- tensor-core products for many tokens (MMQ) ------------------------------------------------
// y[t·rows + r] = W[r] · act[t] for many tokens: a block of 4 warps computes MMQ_BM rows ×
// MMQ_BN tokens, walking the rows a "step" (256 elements) at a time with that step's weights
// and activations staged in shared memory. Each 32-element block's integer sums come from one
// int8 MMA (m16n8k32: 16 rows × 8 tokens a warp), and the outputs are formed in row_dot_blocks'
// order — the step values of each warp's contiguous run of passes added in step order, the
// runs then added in order — so every result has the bits of matvec1_* for that token alone.
// The tile list is mmid_group's (tiles of up to MMQ_BN pairs of one expert; y row = pair,
// activation row = the pair or its token) or, with `tiles` null, tokens MMQ_BN·g.. of slice 0.
// Block row g takes tiles g, g + gridDim.y, ...
#define MMQ_BM 64
#define MMQ_BN 32

__device__ __forceinline__ u32 lds32(const u8* p) { return *(const u32*)p; }

// c = a·b (m16n8k32, s8 × s8 → s32, zero accumulator). a: rows g, g+8 at k 4t.. and 16+4t..;
// b: k 4t.. and 16+4t.. of token g; c: rows g (c0, c1) and g+8 (c2, c3) at tokens 2t, 2t+1
// (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void mma_s8_16x8x32(int (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#else
    c[0] = c[1] = c[2] = c[3] = 0;
#endif
}

// c += a·b (m16n8k32, s8 × s8 → s32), the fragments as mma_s8_16x8x32's.
__device__ __forceinline__ void mma_s8_16x8x32_acc(int (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The tiles, runs and stores of an mmq_* kernel; `step(wt, b, x_row, v)` stages step b of the
// block's rows (of the expert's weights at wt) and of the activation rows x_row[0..MMQ_BN),
// and adds (`__fadd_rn`) to v[j][q] this thread's step values: rows g (q 0, 1) and g + 8
// (q 2, 3) of its warp's 16, tokens 8j + 2t + (q & 1) — added there rather than returned, so no
// step-value registers stay live beside the sums. It synchronises the block itself. FIT: 0
// every tile; 1 only tiles of at most 16 pairs, 2 only the others (the `_fit` kernels run a
// 16-place and a 32-place pass over one tile list, so each tile runs on the places it fills).
template <int BM = MMQ_BM, int BN = MMQ_BN, int FIT = 0, class Step>
__device__ __forceinline__ void mmq_tiles(const u8* __restrict__ w, float* __restrict__ y, int rows, int n,
                                          long long row_bytes, int nsteps, int ks, const u32* __restrict__ order,
                                          const u32* __restrict__ tiles, int n_used, int x_per_slot, Step step) {
    __shared__ int out_row[BN], x_row[BN];
    constexpr int NJ = BN / 8;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * BM;
    const int passes = (nsteps + 3) / 4;
    const int n_tiles = tiles ? (int)tiles[0] : (n + BN - 1) / BN;
    for (int tile = blockIdx.y; tile < n_tiles; tile += gridDim.y) {
        u32 e = 0;
        int first = tile * BN, nt = min(BN, n - first);
        if (tiles) {
            e = tiles[1 + 3 * tile];
            first = (int)tiles[2 + 3 * tile];
            nt = (int)tiles[3 + 3 * tile];
        }
        if ((FIT == 1 && nt > 16) || (FIT == 2 && nt <= 16)) continue;  // the same for the whole block
        __syncthreads();  // the previous tile's readers are done with out_row / x_row
        if (tid < BN) {
            // Places past nt repeat the first pair: computed, never stored.
            const int q = tid < nt ? tid : 0;
            const int p = tiles ? (int)order[first + q] : first + q;
            out_row[tid] = tid < nt ? p : -1;
            x_row[tid] = tiles && !x_per_slot ? p / n_used : p;
        }
        const u8* wt = w + (long long)e * rows * row_bytes;
        // acc: the current run's sum; tot: the runs before it, added in order (group_sum's).
        float acc[NJ][4], tot[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[j][q] = tot[j][q] = 0.0f;
        int part = 0, part_end = min(nsteps, 4 * (passes / ks));
        auto close_part = [&]() {
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    tot[j][q] = part == 0 ? acc[j][q] : __fadd_rn(tot[j][q], acc[j][q]);
                    acc[j][q] = 0.0f;
                }
            ++part;
            part_end = min(nsteps, 4 * ((part + 1) * passes / ks));
        };
        for (int b = 0; b < nsteps; ++b) {
            while (b >= part_end && part < ks) close_part();
            step(wt, b, x_row, acc);
        }
        while (part < ks) close_part();
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int row = row0 + warp * 16 + g + (q >= 2 ? 8 : 0), o = out_row[8 * j + 2 * t4 + (q & 1)];
                if (row < rows && o >= 0) y[(long long)o * rows + row] = tot[j][q];
            }
    }
}

// Stages Q8_K block b of the activation rows xr[0..MMQ_BN) into `as`, AS bytes a token (in
// order): its first AS / 16 sixteen-byte pieces (all 19, or MMQ_AS's 17 where no bsums are
// read), TPT threads a token (TPT · MMQ_BN threads: 4 in the 128-thread kernels, 8 in
// mmq_k4's 256-thread one). ASYNC: as cp.async (the caller commits and waits).
template <int AS = Q8_K_BYTES, bool ASYNC = false, int TPT = 4>
__device__ __forceinline__ void stage_q8k(u8* __restrict__ as, const u8* __restrict__ act, const int* xr,
                                          long long act_stride, int b) {
    constexpr int NP = AS / 16;
    const int t = threadIdx.x / TPT, c0 = threadIdx.x % TPT;
    const u8* src = act + (long long)xr[t] * act_stride + (long long)b * Q8_K_BYTES + 16 * c0;
    u8* dst = as + t * AS + 16 * c0;
#pragma unroll
    for (int k = 0; k < (NP + TPT - 1) / TPT; ++k) {
        if (c0 + TPT * k >= NP) continue;
        if constexpr (ASYNC)
            cp_async16(dst + 16 * TPT * k, src + 16 * TPT * k);
        else
            *(uint4*)(dst + 16 * TPT * k) = *(const uint4*)(src + 16 * TPT * k);
    }
}

#define MMQ_ARGS                                                                                         \
    const u8 *__restrict__ w, const u8 *__restrict__ act, float *__restrict__ y, int cols, int rows, int n, \
        long long act_stride, int ks, const u32 *__restrict__ order, const u32 *__restrict__ tiles, int n_used, \
        int x_per_slot
#define MMQ_PASS w, act, y, cols, rows, n, act_stride, ks, order, tiles, n_used, x_per_slot

// c = a·b (m16n8k16, s8 × s8 → s32, zero accumulator). a: rows g, g+8 at k 4t..4t+3; b: k
// 4t..4t+3 of token g; c as mma_s8_16x8x32's.
__device__ __forceinline__ void mma_s8_16x8x16(int (&c)[4], u32 a0, u32 a1, u32 b0) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
#else
    c[0] = c[1] = c[2] = c[3] = 0;
#endif
}

// Bytes of a row of 256 int8 quants staged by mmq_q6_k, mmq_k4, mmq_staged and mmq_unit32:
// padded so that the MMA operand reads of a warp's 8 rows (272 / 4 = 68 ≡ 4 words apart) hit
// distinct banks.
#define MMQ_WQ 272

// Bytes a token of a staged Q8_K block in the kernels that read no bsums (mmq_k4, mmq_q6_k): d
// and the 256 quants, 17 pieces. 68 words apart, 8 tokens' MMA operand reads hit distinct banks,
// and mmq_k4's two activation buffers keep it under 48 KiB of static shared memory.
#define MMQ_AS 272

// The step values of a block staged as 256 int8 quants a row in element order (wq, MMQ_WQ
// bytes a row) with 8 sub-block scales a row (wsc, 8 bytes a row), against Q8_K staged in
// `as`: isc[j][q] = Σ scale·(q·a) over the 8 sub-blocks (an m16n8k32 MMA each), for this
// thread's rows r0, r0 + 8 and tokens (see mmq_tiles). SIGNED: scales are i8 (else u8).
template <bool SIGNED, int AS = Q8_K_BYTES>
__device__ __forceinline__ void mmq_sub32(const u8* __restrict__ wq, const u8* __restrict__ wsc,
                                          const u8* __restrict__ as, int r0, int g, int t4, int (&isc)[4][4]) {
    const int r1 = r0 + 8;
    const u32 s0[2] = {lds32(wsc + 8 * r0), lds32(wsc + 8 * r0 + 4)};
    const u32 s1[2] = {lds32(wsc + 8 * r1), lds32(wsc + 8 * r1 + 4)};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) isc[j][q] = 0;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const u8* x0 = wq + r0 * MMQ_WQ + 32 * s + 4 * t4;
        const u8* x1 = wq + r1 * MMQ_WQ + 32 * s + 4 * t4;
        const u32 a0 = lds32(x0), a1 = lds32(x1), a2 = lds32(x0 + 16), a3 = lds32(x1 + 16);
        const u32 b0 = s0[s >> 2] >> (8 * (s & 3)), b1 = s1[s >> 2] >> (8 * (s & 3));
        const int sc0 = SIGNED ? (int)(i8)(u8)b0 : (int)(b0 & 0xff);
        const int sc1 = SIGNED ? (int)(i8)(u8)b1 : (int)(b1 & 0xff);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u8* yb = as + (8 * j + g) * AS + 4 + 32 * s + 4 * t4;
            int c[4];
            mma_s8_16x8x32(c, a0, a1, a2, a3, lds32(yb), lds32(yb + 16));
            isc[j][0] += sc0 * c[0];
            isc[j][1] += sc0 * c[1];
            isc[j][2] += sc1 * c[2];
            isc[j][3] += sc1 * c[3];
        }
    }
}

// mmq_sub32 for 16 sub-blocks of 16 elements (16 scales a row in wsc), an m16n8k16 MMA each.
template <bool SIGNED, int AS = Q8_K_BYTES>
__device__ __forceinline__ void mmq_sub16(const u8* __restrict__ wq, const u8* __restrict__ wsc,
                                          const u8* __restrict__ as, int r0, int g, int t4, int (&isc)[4][4]) {
    const int r1 = r0 + 8;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) isc[j][q] = 0;
#pragma unroll
    for (int s = 0; s < 16; ++s) {
        const u32 a0 = lds32(wq + r0 * MMQ_WQ + 16 * s + 4 * t4), a1 = lds32(wq + r1 * MMQ_WQ + 16 * s + 4 * t4);
        const int sc0 = SIGNED ? (int)(i8)wsc[16 * r0 + s] : (int)wsc[16 * r0 + s];
        const int sc1 = SIGNED ? (int)(i8)wsc[16 * r1 + s] : (int)wsc[16 * r1 + s];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int c[4];
            mma_s8_16x8x16(c, a0, a1, lds32(as + (8 * j + g) * AS + 4 + 16 * s + 4 * t4));
            isc[j][0] += sc0 * c[0];
            isc[j][1] += sc0 * c[1];
            isc[j][2] += sc1 * c[2];
            isc[j][3] += sc1 * c[3];
        }
    }
}

// 16 bytes at p (2-byte aligned, in shared memory) as four words: five aligned loads, each
// word two of them put together (`__byte_perm`).
__device__ __forceinline__ uint4 lds128_a2(const u8* p) {
    const int mis = (int)((size_t)p & 3);
    const u32* a = (const u32*)(p - mis);  // offset from p itself: the loads stay shared-memory ones
    const u32 sel = mis ? 0x5432u : 0x3210u;
    const u32 w0 = a[0], w1 = a[1], w2 = a[2], w3 = a[3], w4 = a[4];
    return make_uint4(__byte_perm(w0, w1, sel), __byte_perm(w1, w2, sel), __byte_perm(w2, w3, sel),
                      __byte_perm(w3, w4, sel));
}

// Each byte (0..63) of v minus 32, as int8 (__vsub4's result for these bytes in 5 operations
// instead of 12): after the xor, bit 5 is the 6-bit value's sign, copied into bits 6 and 7.
__device__ __forceinline__ u32 minus32_6bit(u32 v) {
    const u32 x = v ^ 0x20202020u, m = x & 0x20202020u;
    return x | (m << 1) | (m << 2);
}

// Bytes of shared memory a row's Q6_K block is copied into: the 210-byte block is 2-byte
// aligned, so it is copied as the 14 sixteen-byte pieces from its address rounded down to 16,
// and read at that offset (at most 14) there.
#define Q6K_RAW 224

// Q6_K against Q8_K: a step is one block, staged as 256 signed quants a row (q − 32, in
// element order) plus its 16 scales and d; each 16-element sub-block's sums are one MMA
// (m16n8k16), scaled by the sub-block's scale and added (exact); the step value is
// q6k_block_value of that sum. The weight blocks of step b + 1 are copied asynchronously
// (cp.async) while step b's MMAs run, and the activation's after them (one buffer: two would
// pass 48 KiB); the staging reads the copies in shared memory, 16 elements a thread a pass.
// Before, each thread loaded its 4 elements' bytes from global memory as 2-byte pieces.
extern "C" __global__ void __launch_bounds__(128, 4) mmq_q6_k(MMQ_ARGS) {
    pdl_enter();
    __shared__ __align__(16) u8 wq[MMQ_BM * MMQ_WQ];
    __shared__ __align__(16) u8 raw[MMQ_BM * Q6K_RAW];
    __shared__ __align__(16) i8 wsc[MMQ_BM * 16];
    __shared__ float wd[MMQ_BM];
    __shared__ u8 wsh[MMQ_BM];
    __shared__ __align__(16) u8 as[MMQ_BN * MMQ_AS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * MMQ_BM, nblocks = cols / 256;
    const long long row_bytes = (long long)nblocks * 210;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    // Two threads a row, pieces c ≡ tid mod 2; the last piece stops at the block's end.
    auto issue_w = [&](const u8* wt, int b) {
        const int r = tid >> 1, c0 = tid & 1;
        const size_t a = (size_t)(wt + (long long)min(row0 + r, rows - 1) * row_bytes + (long long)b * 210);
        const int sh = (int)(a & 15);
        const u8* src = (const u8*)(a - sh) + 16 * c0;
        u8* dst = raw + r * Q6K_RAW + 16 * c0;
#pragma unroll
        for (int k = 0; k < Q6K_RAW / 32; ++k) {
            const int p = c0 + 2 * k;
            cp_async16_n(dst + 32 * k, src + 32 * k, p < Q6K_RAW / 16 - 1 ? 16 : sh + 210 - 16 * p);
        }
        if (c0 == 0) wsh[r] = (u8)sh;
        cp_async_commit();
    };
    // Four threads a token, its d and quants (MMQ_AS bytes).
    auto issue_a = [&](int b, const int* xr) {
        stage_q8k<MMQ_AS, true>(as, act, xr, act_stride, b);
        cp_async_commit();
    };
    auto step = [&](const u8* wt, int b, const int* xr, float (&v)[4][4]) {
        if (b == 0) {
            __syncthreads();  // x_row is written; the previous tile's readers are done
            issue_w(wt, 0);
            issue_a(0, xr);
        }
        cp_async_wait_all();
        __syncthreads();  // step b's copies (and wsh) are visible
        // Elements e0 = 16·(tid % 16).. of rows tid / 16 + 8k: element e = 128h + 32k' + l has
        // its low nibble in ql[64h + 32(k' & 1) + l] (>> 4(k' >> 1)), its high bits in
        // qh[32h + l] (>> 2k'); a pass's 16 elements share h and k'.
        {
            const int grp = tid & 15, e0 = 16 * grp, h = e0 >> 7, kk = (e0 >> 5) & 3, l0 = e0 & 31;
#pragma unroll 1
            for (int r = tid >> 4; r < MMQ_BM; r += 8) {
                const u8* x = raw + r * Q6K_RAW + wsh[r];
                const uint4 ql = lds128_a2(x + 64 * h + 32 * (kk & 1) + l0);
                const uint4 qh = lds128_a2(x + 128 + 32 * h + l0);
                const u32 l4[4] = {ql.x, ql.y, ql.z, ql.w}, h4[4] = {qh.x, qh.y, qh.z, qh.w};
                u32 q[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u32 lo = (l4[j] >> (4 * (kk >> 1))) & 0x0f0f0f0fu;
                    const u32 hi = (h4[j] >> (2 * kk)) & 0x03030303u;
                    q[j] = minus32_6bit(lo | (hi << 4));
                }
                *(uint4*)(wq + r * MMQ_WQ + e0) = make_uint4(q[0], q[1], q[2], q[3]);
                if (grp == 0) *(uint4*)(wsc + r * 16) = lds128_a2(x + 192);
                if (grp == 1) wd[r] = ldh(x + 208);
            }
        }
        __syncthreads();  // wq is staged and raw is free
        if (b + 1 < nblocks) issue_w(wt, b + 1);
        int isc[4][4];
        mmq_sub16<true, MMQ_AS>(wq, (const u8*)wsc, as, r0, g, t4, isc);
        const float d0 = wd[r0], d1 = wd[r1];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const float yd = q8k_d(as + (8 * j + 2 * t4 + q) * MMQ_AS);
                v[j][q] = __fadd_rn(v[j][q], q6k_block_value(d0, yd, isc[j][q]));
                v[j][2 + q] = __fadd_rn(v[j][2 + q], q6k_block_value(d1, yd, isc[j][2 + q]));
            }
        if (b + 1 < nblocks) {
            __syncthreads();  // every warp's MMAs are done with `as` (and wq)
            issue_a(b + 1, xr);
        }
    };
    mmq_tiles(w, y, rows, n, row_bytes, nblocks, ks, order, tiles, n_used, x_per_slot, step);
}

// The Unit32 types (Q8_0, Q4_0/1, Q5_0/1, IQ4_NL, MXFP4, NVFP4, Q1_0) against Q8_0 / Q8_1: a
// step is 8 units (256 elements), staged as W::quants a row (MMQ_WQ apart, like mmq_staged's)
// with each unit's W::wscale, the activation's quants and (d, s) likewise; the step value is
// the pairwise sum (((0+1)+(2+3)) + ((4+5)+(6+7))) of the units' W::value (units past the
// row's end count 0), row_dot_blocks' BLOCKSUM 2 order. A unit's sums come from one m16n8k32
// MMA, or two m16n8k16 (HALVES: its halves scaled apart).
#define U32_STEP 8
template <class W>
__device__ __forceinline__ void mmq_unit32(MMQ_ARGS) {
    constexpr int PB = W::Q8_1 ? Q8_1_BYTES : Q8_0_BYTES, PQ = W::Q8_1 ? 4 : 2;
    __shared__ __align__(16) u8 wq[MMQ_BM * MMQ_WQ];
    __shared__ float2 wd[MMQ_BM * U32_STEP];
    __shared__ __align__(16) u8 aq[MMQ_BN * MMQ_WQ];
    __shared__ float2 ad[MMQ_BN * U32_STEP];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * MMQ_BM, nunits = cols / W::QK * W::NSUB;
    const long long row_bytes = (long long)(cols / W::QK) * W::TS;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    auto step = [&](const u8* wt, int b, const int* xr, float (&v)[4][4]) {
        __syncthreads();
        // One (row, unit) a thread at a time: its 32 quants and scales.
        for (int i = tid; i < MMQ_BM * U32_STEP; i += 128) {
            const int r = i / U32_STEP, k = i - r * U32_STEP, u = min(b * U32_STEP + k, nunits - 1);
            const int blk = u / W::NSUB;
            const u8* src = wt + (long long)min(row0 + r, rows - 1) * row_bytes + (long long)blk * W::TS;
            u32 q[8];
            W::quants(src, u - blk * W::NSUB, q);
            u8* dst = wq + r * MMQ_WQ + 32 * k;
            *(uint4*)dst = make_uint4(q[0], q[1], q[2], q[3]);
            *(uint4*)(dst + 16) = make_uint4(q[4], q[5], q[6], q[7]);
            wd[i] = W::wscale(src, u - blk * W::NSUB);
        }
        for (int i = tid; i < MMQ_BN * U32_STEP; i += 128) {
            const int t = i / U32_STEP, k = i - t * U32_STEP, u = min(b * U32_STEP + k, nunits - 1);
            const u8* src = act + (long long)xr[t] * act_stride + (long long)u * PB;
            u8* dst = aq + t * MMQ_WQ + 32 * k;
#pragma unroll
            for (int j = 0; j < 8; ++j) *(u32*)(dst + 4 * j) = ld32(src + PQ + 4 * j);
            ad[i] = make_float2(ldh(src), W::Q8_1 ? ldh(src + 2) : 0.0f);
        }
        __syncthreads();
        // Unit k's values into uv; the pairwise sums kept as they complete (few registers).
        auto unit_values = [&](int k, float (&uv)[4][4]) {
            const bool valid = b * U32_STEP + k < nunits;
            const u8* x0 = wq + r0 * MMQ_WQ + 32 * k + 4 * t4;
            const u8* x1 = wq + r1 * MMQ_WQ + 32 * k + 4 * t4;
            const u32 a0 = lds32(x0), a1 = lds32(x1), a2 = lds32(x0 + 16), a3 = lds32(x1 + 16);
            const float2 dw0 = wd[r0 * U32_STEP + k], dw1 = wd[r1 * U32_STEP + k];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const u8* yb = aq + (8 * j + g) * MMQ_WQ + 32 * k + 4 * t4;
                int c[4], h[4] = {0, 0, 0, 0};
                if constexpr (W::HALVES != 0) {
                    mma_s8_16x8x16(c, a0, a1, lds32(yb));
                    mma_s8_16x8x16(h, a2, a3, lds32(yb + 16));
                } else {
                    mma_s8_16x8x32(c, a0, a1, a2, a3, lds32(yb), lds32(yb + 16));
                }
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float2 da = ad[(8 * j + 2 * t4 + (q & 1)) * U32_STEP + k];
                    uv[j][q] = valid ? W::value(q < 2 ? dw0 : dw1, make_int2(c[q], h[q]), da) : 0.0f;
                }
            }
        };
        auto pair = [&](int k, float (&out)[4][4]) {
            float x[4][4], z[4][4];
            unit_values(k, x);
            unit_values(k + 1, z);
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) out[j][q] = __fadd_rn(x[j][q], z[j][q]);
        };
        float lo[4][4], hi[4][4], t[4][4];
        pair(0, lo);
        pair(2, t);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) lo[j][q] = __fadd_rn(lo[j][q], t[j][q]);
        pair(4, hi);
        pair(6, t);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) v[j][q] = __fadd_rn(v[j][q], __fadd_rn(lo[j][q], __fadd_rn(hi[j][q], t[j][q])));
    };
    mmq_tiles(w, y, rows, n, row_bytes, (nunits + U32_STEP - 1) / U32_STEP, ks, order, tiles, n_used, x_per_slot,
              step);
}

// The A fragment of a sub-block's mins: rows g (m[0], m[2]) and g + 8 (m[1], m[3]), the row's
// min (byte `sel` picks of mn0, mn1) in all four bytes. Four byte permutes in one asm: NVVM no
// longer folds them into two (889 -> 870 SASS instructions a step), though ptxas still copies
// the quad for some of its four uses.
__device__ __forceinline__ void min_fragment(u32 (&m)[4], u32 mn0, u32 mn1, u32 sel) {
    asm volatile(
        "prmt.b32 %0, %4, 0, %6;\n\tprmt.b32 %1, %5, 0, %6;\n\tprmt.b32 %2, %4, 0, %6;\n\tprmt.b32 %3, %5, 0, %6;"
        : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
        : "r"(mn0), "r"(mn1), "r"(sel));
}

// The start of step b of an S-buffer pipelined MMQ tile (mmq_k4, mmq_q6k_wide): at b = 0
// the copies of steps 0 .. S − 2 are issued; then step b's are awaited (issue commits one group
// a step, empty past the last, so all but the newest S − 2 groups means step b's), and step
// b + S − 1's are issued into the buffer step b − 1 read.
template <int S, class Issue>
__device__ __forceinline__ void mmq_pipeline(int b, Issue issue) {
    if (b == 0) {
        __syncthreads();  // x_row is written; the previous tile's readers are done
#pragma unroll
        for (int k = 0; k < S - 1; ++k) issue(k);
    }
    cp_async_wait<S - 2>();
    __syncthreads();  // step b's copies are visible; step b - 1's readers are done with its buffers
    issue(b + S - 1);
}

// Q4_K and Q5_K against Q8_K: a step is one block; an MMA per 32-element sub-block for
// Σ scale·(q·a) and one for Σ min·(Σ a), whose weights are the row's min in every place
// (accumulated in the MMA: the same exact integer as Σ min·bsum), q4k_block_value of the two.
// The MMA fragments come straight from the raw blocks in shared memory: qs byte 32p + k holds
// element k of sub-block 2p (low nibble) and of 2p + 1 (high nibble), so the word a fragment
// needs is one aligned load and a mask (Q5_K: and its fifth bits from the qh word at the same
// offset). The scales and mins of a row are four words from its 12 scale bytes. No staging
// pass: Nsight (call AH) had it at a third of a step's instructions and most of its
// scoreboard stalls, and it cost two of the step's three barriers. Software-pipelined over S
// buffers of each (mmq_pipeline): steps b + 1 .. b + S − 1's weight and activation blocks are
// copied asynchronously while step b's MMAs run, one barrier a step (`*_s3`, `*_s4`: call AQ
// had 3 buffers 0.3-1.0% faster than 2 in a prefill, 4 no faster). BM rows a block, 2 · BM
// threads (a warp's 16 rows × 32 tokens either way): 64, or 128 (`mmq_*_wide`), which reads each step's activations for
// twice the rows (half the activation bytes an output; Nsight, call AH: L2's lookups at 74%).
// The buffers are MMQ_K4_SMEM(BM, BN, TS, S) bytes of shared memory: static up to 48 KiB,
// else dynamic (128 rows of 32 tokens, and every S > 2).
#define MMQ_K4_SMEM(BM, BN, TS, S) ((S) * ((BM) * (TS) + (BN) * MMQ_AS))
template <class W, int BM, int BN = MMQ_BN, int S = 2, int FIT = 0>
__device__ __forceinline__ void mmq_k4(MMQ_ARGS) {
    constexpr bool FIVE = W::TS == 176;  // Q5_K: qh[32] before qs
    constexpr int QS = FIVE ? 48 : 16;
    // S buffers of the weights and of the activations: static arrays under 48 KiB (as the
    // 64-row kernels always had), else the same arrays in dynamic shared memory.
    static_assert(S >= 2 && S <= 4, "mmq_k4: 2 to 4 stages");
    using Raw = u8[BM * W::TS];
    using Act = u8[BN * MMQ_AS];
    Raw* raw2;
    Act* as2;
    if constexpr (MMQ_K4_SMEM(BM, BN, W::TS, S) <= 48 * 1024) {
        __shared__ __align__(16) u8 raw_st[S][BM * W::TS];
        __shared__ __align__(16) u8 as_st[S][BN * MMQ_AS];
        raw2 = raw_st;
        as2 = as_st;
    } else {
        extern __shared__ __align__(16) u8 k4_sm[];
        raw2 = reinterpret_cast<Raw*>(k4_sm);
        as2 = reinterpret_cast<Act*>(k4_sm + S * BM * W::TS);
    }
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * BM, nblocks = cols / 256;
    const long long row_bytes = (long long)nblocks * W::TS;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    // Step b's copies, in 16-byte pieces (TS and Q8_K_BYTES are multiples of 16): the BM rows'
    // blocks b as BM · TS / 16 pieces, piece p = tid + 2 · BM · k of row p / (TS / 16), so a
    // warp's 32 pieces are ~3.6 rows' whole blocks, a few L2 requests of several sectors each
    // (two threads a row, 16 rows a warp instruction, made 16 requests of one sector: L2 at
    // 83% and DRAM at 40% in the expert products, call AY); 2 · BM / 32 threads a token (pieces
    // c ≡ tid mod that of the first MMQ_AS bytes of its Q8_K block b); a group a call, empty
    // past the last step (mmq_pipeline).
    constexpr int TPT = 2 * BM / BN, NJ = BN / 8;
    static_assert(TPT * BN == 2 * BM && (BM == 64 || BM == 128) && (BN == 16 || BN == 32),
                  "mmq_k4's copies: 2 · BM threads, 16 or 32 tokens");
    auto issue = [&](const u8* wt, int b, const int* xr) {
        constexpr int WP = W::TS / 16, NP = BM * WP, NT = 2 * BM;
        if (b < nblocks) {
            const u8* src = wt + (long long)b * W::TS;
            u8* dst = raw2[b % S];
            // The pieces' rows and offsets are formed again each step, one piece at a time:
            // hoisted out of the step loop or unrolled they held more registers and the fit
            // kernels spilled (ptxas, sm_90a).
            int t = tid;
            asm volatile("" : "+r"(t));
#pragma unroll 1
            for (int k = 0; k < (NP + NT - 1) / NT; ++k) {
                const int p = t + NT * k, r = p / WP, c = p - r * WP;
                if (NP % NT == 0 || p < NP)
                    cp_async16(dst + 16 * p, src + (long long)min(row0 + r, rows - 1) * row_bytes + 16 * c);
            }
            stage_q8k<MMQ_AS, true, TPT>(as2[b % S], act, xr, act_stride, b);
        }
        cp_async_commit();
    };
    auto step = [&](const u8* wt, int b, const int* xr, float (&v)[NJ][4]) {
        mmq_pipeline<S>(b, [&](int k) { issue(wt, k, xr); });
        const u8* x0 = raw2[b % S] + r0 * W::TS;
        const u8* x1 = raw2[b % S] + r1 * W::TS;
        const u8* as = as2[b % S];
        // Both rows' d and dmin, and their scales and mins as bytes.
        u32 sc0[2], mn0[2], sc1[2], mn1[2];
        const float2 d0 = k4_header(*(const uint4*)x0, sc0, mn0);
        const float2 d1 = k4_header(*(const uint4*)x1, sc1, mn1);
        u32 qh[4] = {0, 0, 0, 0};
        if constexpr (FIVE) {
            qh[0] = lds32(x0 + 16 + 4 * t4), qh[1] = lds32(x1 + 16 + 4 * t4);
            qh[2] = lds32(x0 + 32 + 4 * t4), qh[3] = lds32(x1 + 32 + 4 * t4);
        }
        int isc[NJ][4], imn[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) isc[j][q] = imn[j][q] = 0;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            // Fragment words: rows r0, r1 at elements 4t.. and 16 + 4t.. of sub-blocks 2p, 2p + 1.
            const u32 w[4] = {lds32(x0 + QS + 32 * p + 4 * t4), lds32(x1 + QS + 32 * p + 4 * t4),
                              lds32(x0 + QS + 32 * p + 16 + 4 * t4), lds32(x1 + QS + 32 * p + 16 + 4 * t4)};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int s = 2 * p + h;
                u32 a[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    a[i] = (h ? w[i] >> 4 : w[i]) & 0x0f0f0f0fu;
                    if constexpr (FIVE) a[i] |= ((qh[i] >> s) & 0x01010101u) << 4;
                }
                const int s0 = (int)__byte_perm(sc0[s >> 2], 0, 0x4440u | (u32)(s & 3));
                const int s1 = (int)__byte_perm(sc1[s >> 2], 0, 0x4440u | (u32)(s & 3));
                u32 m[4];
                min_fragment(m, mn0[s >> 2], mn1[s >> 2], 0x1111u * (u32)(s & 3));
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    const u8* yb = as + (8 * j + g) * MMQ_AS + 4 + 32 * s + 4 * t4;
                    const u32 y0 = lds32(yb), y1 = lds32(yb + 16);
                    int c[4];
                    mma_s8_16x8x32(c, a[0], a[1], a[2], a[3], y0, y1);
                    mma_s8_16x8x32_acc(imn[j], m[0], m[1], m[2], m[3], y0, y1);
                    isc[j][0] += s0 * c[0];
                    isc[j][1] += s0 * c[1];
                    isc[j][2] += s1 * c[2];
                    isc[j][3] += s1 * c[3];
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const float yd = q8k_d(as + (8 * j + 2 * t4 + q) * MMQ_AS);
                v[j][q] = __fadd_rn(v[j][q], q4k_block_value(d0.x, d0.y, yd, isc[j][q], imn[j][q]));
                v[j][2 + q] = __fadd_rn(v[j][2 + q], q4k_block_value(d1.x, d1.y, yd, isc[j][2 + q], imn[j][2 + q]));
            }
    };
    mmq_tiles<BM, BN, FIT>(w, y, rows, n, row_bytes, nblocks, ks, order, tiles, n_used, x_per_slot, step);
}
// The mmq_k4 kernels: BM rows (2 · BM threads), BN token places, S buffers. 16 warps a
// multiprocessor (four 64-row blocks, or two wide ones of 128): ptxas then keeps them to 128
// registers without spilling (130 unbounded, three blocks). `_wide16`: 16 token places, for
// the expert products of a prefill, whose experts average ~16 pairs (512 tokens × 8 of 256)
// and filled 32-place tiles a third. `_s3`, `_s4`: 3 and 4 buffers (Q5_K's 32-place tiles at
// 4 would pass half a multiprocessor's shared memory: not made). One line each, so the quant
// programs share them out (compile.rs) instead of each compiling all.
#define MMQ_K4(NAME, W, BM, BN, S)                                                 \
    extern "C" __global__ void __launch_bounds__(2 * (BM), 256 / (BM)) NAME(MMQ_ARGS) { \
        pdl_enter();                                                               \
        mmq_k4<W, BM, BN, S>(MMQ_PASS);                                            \
    }
MMQ_K4(mmq_q4_k, W_q4_k, 64, 32, 2)
MMQ_K4(mmq_q5_k, W_q5_k, 64, 32, 2)
MMQ_K4(mmq_q4_k_wide, W_q4_k, 128, 32, 2)
MMQ_K4(mmq_q5_k_wide, W_q5_k, 128, 32, 2)
MMQ_K4(mmq_q4_k_wide16, W_q4_k, 128, 16, 2)
MMQ_K4(mmq_q5_k_wide16, W_q5_k, 128, 16, 2)
MMQ_K4(mmq_q4_k_wide_s3, W_q4_k, 128, 32, 3)
MMQ_K4(mmq_q4_k_wide_s4, W_q4_k, 128, 32, 4)
MMQ_K4(mmq_q4_k_wide16_s3, W_q4_k, 128, 16, 3)
MMQ_K4(mmq_q4_k_wide16_s4, W_q4_k, 128, 16, 4)
MMQ_K4(mmq_q5_k_wide_s3, W_q5_k, 128, 32, 3)
MMQ_K4(mmq_q5_k_wide16_s3, W_q5_k, 128, 16, 3)
MMQ_K4(mmq_q5_k_wide16_s4, W_q5_k, 128, 16, 4)

// A word of shared memory at p, which is 2-byte aligned: two aligned loads put together.
__device__ __forceinline__ u32 lds32_a2(const u8* p) {
    const int mis = (int)((size_t)p & 3);
    const u32* a = (const u32*)(p - mis);  // offset from p itself: the loads stay shared-memory ones
    return __byte_perm(a[0], a[1], mis ? 0x5432u : 0x3210u);
}

// Q6_K against Q8_K on mmq_k4's wide tiles (128 rows, BN token places, S buffers): mmq_q6_k's
// step values — Σ scale·(q − 32)·a over the 16 sub-blocks, an m16n8k16 MMA each, and
// q6k_block_value — with the fragments taken from the raw blocks as mmq_k4 takes Q4_K's, so
// no staging pass and one barrier a step (mmq_q6_k stages 256 int8 a row and waits three
// times a step; call AH had its expert down projection at 12 warp cycles an instruction).
// Element 128h + 32k + l has its low nibble in ql[64h + 32(k & 1) + l] (>> 4(k >> 1)) and its
// high bits in qh[32h + l] (>> 2k): the fragment word of rows r at elements 16u + 4t.. of
// sub-block 8h + 2k + u is one ql and one qh word, a shift and mask each, and minus32_6bit.
// A 210-byte block is 2-byte aligned, so a row's block is copied as the Q6K_RAW bytes from
// its address rounded down to 16 (mmq_q6_k's copy) and its words are read in two halves.
// Rows are Q6K_ROW bytes apart (60 words: a fragment load's 8 rows hit distinct banks).
#define Q6K_ROW 240
#define Q6K_WIDE_SMEM(BN, S) ((S) * (128 * Q6K_ROW + (BN) * MMQ_AS))
template <int BN, int S, int FIT = 0>
__device__ __forceinline__ void mmq_q6k_wide(MMQ_ARGS) {
    constexpr int BM = 128, TPT = 2 * BM / BN, NJ = BN / 8;
    static_assert(S >= 2 && S <= 4 && (BN == 16 || BN == 32), "mmq_q6k_wide: 2 to 4 stages, 16 or 32 tokens");
    using Raw = u8[BM * Q6K_ROW];
    using Act = u8[BN * MMQ_AS];
    extern __shared__ __align__(16) u8 q6_sm[];
    Raw* raw = reinterpret_cast<Raw*>(q6_sm);
    Act* as2 = reinterpret_cast<Act*>(q6_sm + S * BM * Q6K_ROW);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * BM, nblocks = cols / 256;
    const long long row_bytes = (long long)nblocks * 210;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    auto block_at = [&](const u8* wt, int r, int b) {
        return (size_t)(wt + (long long)min(row0 + r, rows - 1) * row_bytes + (long long)b * 210);
    };
    // The 128 rows' Q6K_RAW-byte spans as 128 · 14 sixteen-byte pieces, piece p = tid + 256 · k
    // of row p / 14 (the last of a row stops at the block's end), so a warp's pieces are ~2.3
    // rows' whole spans (as mmq_k4's copies, call AY); TPT threads a token; a group a call,
    // empty past the last step (mmq_pipeline).
    auto issue = [&](const u8* wt, int b, const int* xr) {
        constexpr int WP = Q6K_RAW / 16, NP = 128 * WP;
        static_assert(NP % 256 == 0, "mmq_q6k_wide's copies: whole passes of 256 threads");
        if (b < nblocks) {
            int t = tid;  // formed again each step, one piece at a time, as mmq_k4's copies
            asm volatile("" : "+r"(t));
#pragma unroll 1
            for (int k = 0; k < NP / 256; ++k) {
                const int p = t + 256 * k, r = p / WP, c = p - r * WP;
                const size_t a = block_at(wt, r, b);
                const int sh = (int)(a & 15);
                cp_async16_n(raw[b % S] + r * Q6K_ROW + 16 * c, (const u8*)(a - sh) + 16 * c,
                             c < WP - 1 ? 16 : sh + 210 - 16 * c);
            }
            stage_q8k<MMQ_AS, true, TPT>(as2[b % S], act, xr, act_stride, b);
        }
        cp_async_commit();
    };
    auto step = [&](const u8* wt, int b, const int* xr, float (&v)[NJ][4]) {
        mmq_pipeline<S>(b, [&](int k) { issue(wt, k, xr); });
        const u8* x0 = raw[b % S] + r0 * Q6K_ROW + (int)(block_at(wt, r0, b) & 15);
        const u8* x1 = raw[b % S] + r1 * Q6K_ROW + (int)(block_at(wt, r1, b) & 15);
        const u8* as = as2[b % S];
        const uint4 sw0 = lds128_a2(x0 + 192), sw1 = lds128_a2(x1 + 192);
        const u32 sc0[4] = {sw0.x, sw0.y, sw0.z, sw0.w}, sc1[4] = {sw1.x, sw1.y, sw1.z, sw1.w};
        int isc[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) isc[j][q] = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // qh words of rows r0, r1 at l = 16u + 4t..
            const u32 qh[2][2] = {{lds32_a2(x0 + 128 + 32 * h + 4 * t4), lds32_a2(x0 + 144 + 32 * h + 4 * t4)},
                                  {lds32_a2(x1 + 128 + 32 * h + 4 * t4), lds32_a2(x1 + 144 + 32 * h + 4 * t4)}};
#pragma unroll
            for (int k1 = 0; k1 < 2; ++k1) {
                const u8* l0 = x0 + 64 * h + 32 * k1 + 4 * t4;
                const u8* l1 = x1 + 64 * h + 32 * k1 + 4 * t4;
                const u32 ql[2][2] = {{lds32_a2(l0), lds32_a2(l0 + 16)}, {lds32_a2(l1), lds32_a2(l1 + 16)}};
#pragma unroll
                for (int nib = 0; nib < 2; ++nib) {
                    const int k = k1 + 2 * nib;
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int s = 8 * h + 2 * k + u;
                        const u32 a0 = minus32_6bit(((ql[0][u] >> (4 * nib)) & 0x0f0f0f0fu) |
                                                    (((qh[0][u] >> (2 * k)) & 0x03030303u) << 4));
                        const u32 a1 = minus32_6bit(((ql[1][u] >> (4 * nib)) & 0x0f0f0f0fu) |
                                                    (((qh[1][u] >> (2 * k)) & 0x03030303u) << 4));
                        const int s0 = (int)(i8)(u8)(sc0[s >> 2] >> (8 * (s & 3)));
                        const int s1 = (int)(i8)(u8)(sc1[s >> 2] >> (8 * (s & 3)));
#pragma unroll
                        for (int j = 0; j < NJ; ++j) {
                            int c[4];
                            mma_s8_16x8x16(c, a0, a1, lds32(as + (8 * j + g) * MMQ_AS + 4 + 16 * s + 4 * t4));
                            isc[j][0] += s0 * c[0];
                            isc[j][1] += s0 * c[1];
                            isc[j][2] += s1 * c[2];
                            isc[j][3] += s1 * c[3];
                        }
                    }
                }
            }
        }
        const float d0 = ldh(x0 + 208), d1 = ldh(x1 + 208);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const float yd = q8k_d(as + (8 * j + 2 * t4 + q) * MMQ_AS);
                v[j][q] = __fadd_rn(v[j][q], q6k_block_value(d0, yd, isc[j][q]));
                v[j][2 + q] = __fadd_rn(v[j][2 + q], q6k_block_value(d1, yd, isc[j][2 + q]));
            }
    };
    mmq_tiles<BM, BN, FIT>(w, y, rows, n, row_bytes, nblocks, ks, order, tiles, n_used, x_per_slot, step);
}
#define MMQ_Q6K(NAME, BN, S)                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(MMQ_ARGS) {     \
        pdl_enter();                                                          \
        mmq_q6k_wide<BN, S>(MMQ_PASS);                                        \
    }
MMQ_Q6K(mmq_q6_k_wide, 32, 2)
MMQ_Q6K(mmq_q6_k_wide16, 16, 2)
MMQ_Q6K(mmq_q6_k_wide16_s3, 16, 3)

// Expert products over tiles of up to 32 pairs, each run on the places it fills: a 16-place
// pass over the tiles of at most 16 pairs, then a 32-place pass over the others (the dynamic
// shared memory is the 32-place pass's). With 16-place tiles only, an expert of 17-32 pairs
// took two tiles, each running every step of its rows; in a 512-token prefill (~16 pairs an
// expert) that is ~40% of the experts, and a third of the places were empty.
#define MMQ_FIT(NAME, PASS16, PASS32)                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(MMQ_ARGS) { \
        pdl_enter();                                                      \
        PASS16(MMQ_PASS);                                                 \
        PASS32(MMQ_PASS);                                                 \
    }
#define MMQ_K4_PASS(W, BN, S, FIT) mmq_k4<W, 128, BN, S, FIT>
#define MMQ_Q6K_PASS(BN, S, FIT) mmq_q6k_wide<BN, S, FIT>
MMQ_FIT(mmq_q4_k_fit, MMQ_K4_PASS(W_q4_k, 16, 3, 1), MMQ_K4_PASS(W_q4_k, 32, 3, 2))
MMQ_FIT(mmq_q5_k_fit, MMQ_K4_PASS(W_q5_k, 16, 3, 1), MMQ_K4_PASS(W_q5_k, 32, 3, 2))
MMQ_FIT(mmq_q6_k_fit, MMQ_Q6K_PASS(16, 2, 1), MMQ_Q6K_PASS(32, 2, 2))

// Σ min·bsum over the 16 sub-blocks of 16 of this thread's rows r0, r1 (16 mins a row in wmn)
// against the Q8_K block at yb, exact.
__device__ __forceinline__ void mmq_mins16(const u8* __restrict__ wmn, const u8* yb, int r0, int r1, int& imn0,
                                           int& imn1) {
    imn0 = imn1 = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        // bsums 2k and 2k + 1 (one word: Q8_K blocks are 4-byte multiples).
        const u32 bw = lds32(yb + 260 + 4 * k);
        const int lo = (int)(i16)(u16)(bw & 0xffff), hi = (int)bw >> 16;
        imn0 += (int)wmn[16 * r0 + 2 * k] * lo + (int)wmn[16 * r0 + 2 * k + 1] * hi;
        imn1 += (int)wmn[16 * r1 + 2 * k] * lo + (int)wmn[16 * r1 + 2 * k + 1] * hi;
    }
}

// The tensor-core product of a type with the unit-of-32 interface (see Q8K32 / W_q2_k): a step
// is one block, staged as 256 int8 quants a row (W::quants, unit u at elements 32u..) with its
// sub-block scales (and mins) and (d, dmin); Σ scale·(q·a) by mmq_sub32 or mmq_sub16 (W::SUB),
// Σ min·bsum by mmq_mins16, both exact, so the step value W::value of them has W::fin's bits.
template <class W>
__device__ __forceinline__ void mmq_staged(MMQ_ARGS) {
    constexpr int NS = 256 / W::SUB;  // sub-blocks a block: 8 or 16
    static_assert(NS == 16 || !W::HAS_MIN, "mins only for sub-blocks of 16 (mmq_mins16)");
    __shared__ __align__(16) u8 wq[MMQ_BM * MMQ_WQ];
    __shared__ __align__(16) u8 wsc[MMQ_BM * NS];
    __shared__ __align__(16) u8 wmn[W::HAS_MIN ? MMQ_BM * NS : 4];
    __shared__ float2 wd[MMQ_BM];
    __shared__ __align__(16) u8 as[MMQ_BN * Q8_K_BYTES];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = blockIdx.x * MMQ_BM, nblocks = cols / 256;
    const long long row_bytes = (long long)nblocks * W::TS;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    auto step = [&](const u8* wt, int b, const int* xr, float (&v)[4][4]) {
        __syncthreads();  // the previous step's readers are done (and x_row is written)
        // One (row, unit u) a time: its 32 quants and the scales (mins) of its NS / 8
        // sub-blocks; unit 0 also (d, dmin).
        for (int i = tid; i < MMQ_BM * 8; i += 128) {
            const int r = i >> 3, u = i & 7;
            const u8* x = wt + (long long)min(row0 + r, rows - 1) * row_bytes + (long long)b * W::TS;
            u32 q[8];
            W::quants(x, u, q);
            u8* dst = wq + r * MMQ_WQ + 32 * u;
            *(uint4*)dst = make_uint4(q[0], q[1], q[2], q[3]);
            *(uint4*)(dst + 16) = make_uint4(q[4], q[5], q[6], q[7]);
            if constexpr (NS == 8) {
                wsc[8 * r + u] = (u8)W::scales(x, u);
            } else {
                *(u16*)(wsc + 16 * r + 2 * u) = (u16)W::scales(x, u);
            }
            if constexpr (W::HAS_MIN != 0) *(u16*)(wmn + 16 * r + 2 * u) = (u16)W::mins(x, u);
            if (u == 0) wd[r] = W::d2(x);
        }
        stage_q8k(as, act, xr, act_stride, b);
        __syncthreads();
        int isc[4][4];
        if constexpr (NS == 8) {
            mmq_sub32<W::SIGNED != 0>(wq, wsc, as, r0, g, t4, isc);
        } else {
            mmq_sub16<W::SIGNED != 0>(wq, wsc, as, r0, g, t4, isc);
        }
        const float2 d0 = wd[r0], d1 = wd[r1];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const u8* yb = as + (8 * j + 2 * t4 + q) * Q8_K_BYTES;
                int imn0 = 0, imn1 = 0;
                if constexpr (W::HAS_MIN != 0) mmq_mins16(wmn, yb, r0, r1, imn0, imn1);
                const float yd = q8k_d(yb);
                v[j][q] = __fadd_rn(v[j][q], W::value(d0, yd, isc[j][q], imn0));
                v[j][2 + q] = __fadd_rn(v[j][2 + q], W::value(d1, yd, isc[j][2 + q], imn1));
            }
    };
    mmq_tiles(w, y, rows, n, row_bytes, nblocks, ks, order, tiles, n_used, x_per_slot, step);
}

// One line per type: like the QUANT_KERNELS lines, these are shared out over quant.cu's
// programs (crates/glint-cuda/src/compile.rs), so each kernel is compiled once.
template <class W>
__device__ __forceinline__ void mmq_for(MMQ_ARGS) {
    if constexpr (W::BLOCKSUM == 2) {
        mmq_unit32<W>(MMQ_PASS);
    } else {
        mmq_staged<W>(MMQ_PASS);
    }
}
#define MMQ_STAGED(name, W) \
    extern "C" __global__ void __launch_bounds__(128) mmq_##name(MMQ_ARGS) { pdl_enter(); mmq_for<W>(MMQ_PASS); }
MMQ_STAGED(q2_k, W_q2_k)
MMQ_STAGED(q3_k, W_q3_k)
MMQ_STAGED(iq2_xxs, W_iq2_xxs)
MMQ_STAGED(iq3_xxs, W_iq3_xxs)
MMQ_STAGED(iq2_xs, W_iq2_xs)
MMQ_STAGED(iq2_s, W_iq2_s)
MMQ_STAGED(iq3_s, W_iq3_s)
MMQ_STAGED(iq1_s, W_iq1_s)
MMQ_STAGED(iq1_m, W_iq1_m)
MMQ_STAGED(iq4_xs, W_iq4_xs)
MMQ_STAGED(q8_0, W_q8_0)
MMQ_STAGED(q4_0, W_q4_0)
MMQ_STAGED(q4_1, W_q4_1)
MMQ_STAGED(q5_0, W_q5_0)
MMQ_STAGED(q5_1, W_q5_1)
MMQ_STAGED(iq4_nl, W_iq4_nl)
MMQ_STAGED(mxfp4, W_mxfp4)
MMQ_STAGED(nvfp4, W_nvfp4)
MMQ_STAGED(q1_0, W_q1_0)
MMQ_STAGED(tq1_0, W_tq1_0)
MMQ_STAGED(tq2_0, W_tq2_0)

// ---- activation quantization (byte-identical to glint_quant::dot::quantize_activation) --------
// x is `nblocks` partner blocks of f32 laid end to end (n rows × cols, cols a block multiple).

__device__ __forceinline__ u32 warp_sum_u32(u32 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per 32-element block, llama.cpp's x86 quantize_row_q8_0/1: inverse scale 127/amax,
// round half to even, NaN → INT_MIN before the saturating pack; Q8_1 adds s = d·Σq. A whole
// warp calls quantize_q8_block, each lane with its value v, for the block at o.
template <bool Q8_1>
__device__ __forceinline__ void quantize_q8_block(float v, int lane, u8* __restrict__ o) {
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float r = rintf(v * id);
    const int i = isnan(r) ? (int)0x80000000 : __float2int_rn(r);
    const int q = max(-128, min(127, i));
    o[(Q8_1 ? 4 : 2) + lane] = (u8)(i8)q;
    const int sum = (int)warp_sum_u32((u32)i);
    if (lane == 0) {
        *(__half*)o = __float2half_rn(d);
        if (Q8_1) *(__half*)(o + 2) = __float2half_rn(d * (float)sum);
    }
}

// The quantizers' input, four consecutive values from i (a multiple of 4; the buffers are whole
// allocations, so 16-byte aligned): x itself, or with `u` the gated x = silu(x)·u, also written
// to h (the `_glu` kernels: a down projection's input computed where it is quantized, one
// launch fewer).
__device__ __forceinline__ float4 act_in4(const float* __restrict__ x, const float* __restrict__ u,
                                          float* __restrict__ h, long long i) {
    const float4 g = *(const float4*)(x + i);
    if (!u) return g;
    const float4 w = *(const float4*)(u + i);
    const float4 v = make_float4(silu_mul_value(g.x, w.x), silu_mul_value(g.y, w.y), silu_mul_value(g.z, w.z),
                                 silu_mul_value(g.w, w.w));
    *(float4*)(h + i) = v;
    return v;
}

// quantize_q8_block's bytes for four blocks a warp, four values a lane (8 lanes a block): a
// 16-byte load and two 2-byte stores a lane where one value a lane took a 4-byte load and a
// byte store (the v_b input of a 512-token prompt, 67 MB, took 81 µs on an H100, call AX). The
// block's largest magnitude is a max and its sum an integer, so the same bytes.
template <bool Q8_1>
__device__ __forceinline__ void quantize_q8_x86(const float* __restrict__ x, const float* __restrict__ u,
                                                float* __restrict__ h, u8* __restrict__ out, long long nblocks) {
    const int lane = threadIdx.x & 31, l8 = lane & 7;
    const long long b = ((long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 4 + lane / 8;
    if (b - lane / 8 >= nblocks) return;  // the whole warp: below, every lane shuffles
    const bool live = b < nblocks;
    const float4 v = live ? act_in4(x, u, h, b * 32 + 4 * l8) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float e[4] = {v.x, v.y, v.z, v.w};
    u32 packed = 0, sum = 0;  // the codes before saturation, summed mod 2^32 as warp_sum_u32
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float r = rintf(e[j] * id);
        const int i = isnan(r) ? (int)0x80000000 : __float2int_rn(r);
        packed |= (u32)(u8)(i8)max(-128, min(127, i)) << (8 * j);
        sum += (u32)i;
    }
    if (!live) return;  // no shuffle below reads these lanes
    u8* o = out + b * (Q8_1 ? Q8_1_BYTES : Q8_0_BYTES) + (Q8_1 ? 4 : 2);
    // Q8_0's 34-byte blocks leave the codes 2-byte aligned only.
    *(u16*)(o + 4 * l8) = (u16)packed;
    *(u16*)(o + 4 * l8 + 2) = (u16)(packed >> 16);
    if (Q8_1) {
#pragma unroll
        for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffu << (lane & 24), sum, m);
    }
    if (l8 == 0) {
        u8* blk = o - (Q8_1 ? 4 : 2);
        *(__half*)blk = __float2half_rn(d);
        if (Q8_1) *(__half*)(blk + 2) = __float2half_rn(d * (float)(int)sum);
    }
}

extern "C" __global__ void quantize_act_q8_0(const float* __restrict__ x, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_x86<false>(x, nullptr, nullptr, out, nblocks);
}

extern "C" __global__ void quantize_act_q8_1(const float* __restrict__ x, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_x86<true>(x, nullptr, nullptr, out, nblocks);
}

extern "C" __global__ void quantize_act_q8_0_glu(const float* __restrict__ g, const float* __restrict__ u,
                                                 float* __restrict__ h, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_x86<false>(g, u, h, out, nblocks);
}

extern "C" __global__ void quantize_act_q8_1_glu(const float* __restrict__ g, const float* __restrict__ u,
                                                 float* __restrict__ h, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_x86<true>(g, u, h, out, nblocks);
}

// An absorbed-MLA query's two parts in one launch (Backend::rope_split_for): block r is row r
// (token r / n_heads) of x [rows × head_dim]. Warps 0 .. cols/32 − 1 copy block w of the row's
// first `cols` values to y [rows × cols] and quantize it into out as quantize_act_q8_* does (the
// same block function); the last warp rotates the row's RoPE pairs in place as rope does (the
// same pair expression). The host launches it only where the rotated dims start at or past
// `cols` (offset ≥ cols), so the copy reads values the rotation leaves alone.
template <bool Q8_1>
__device__ __forceinline__ void rope_split_q8(float* __restrict__ x, const u32* __restrict__ positions,
                                              const float* __restrict__ inv_freq, int n_heads, int head_dim,
                                              int offset, int n_rot, int mode, float attn_factor, int cols,
                                              float* __restrict__ y, u8* __restrict__ out) {
    const long long r = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nb = cols / 32;
    float* row = x + r * head_dim;
    if (warp < nb) {
        const float v = row[warp * 32 + lane];
        y[r * cols + warp * 32 + lane] = v;
        quantize_q8_block<Q8_1>(v, lane, out + (r * nb + warp) * (Q8_1 ? Q8_1_BYTES : Q8_0_BYTES));
        return;
    }
    const int half = n_rot / 2;
    const float pos = (float)positions[r / n_heads];
    float* v = row + offset;
    for (int i = lane; i < half; i += 32) {
        const RopePair p = rope_pair(i, half, mode, pos, inv_freq, attn_factor);
        rope_rotate(p, v[p.a], v[p.b], v[p.a], v[p.b]);
    }
}

#define ROPE_SPLIT_KERNEL(name, Q8_1)                                                                              \
    extern "C" __global__ void name(float* __restrict__ x, const u32* __restrict__ positions,                     \
                                    const float* __restrict__ inv_freq, int n_heads, int head_dim, int offset,    \
                                    int n_rot, int mode, float attn_factor, int cols, float* __restrict__ y,       \
                                    u8* __restrict__ out) {                                                       \
        pdl_enter();                                                                                               \
        rope_split_q8<Q8_1>(x, positions, inv_freq, n_heads, head_dim, offset, n_rot, mode, attn_factor, cols, y, \
                            out);                                                                                  \
    }
ROPE_SPLIT_KERNEL(rope_split_q8_0, false)
ROPE_SPLIT_KERNEL(rope_split_q8_1, true)

// One warp per 256-element block (8 consecutive values a lane), ggml's quantize_row_q8_K_ref:
// the scale comes from the first element of largest magnitude (-127 / max), ties to even,
// bsums per 16; an all-zero block is all zero bytes.
// Block b from its values (v: this lane's 8, elements 8·lane ..), by one whole warp.
__device__ __forceinline__ void q8_k_from_values(const float (&v)[8], u8* __restrict__ out, long long b) {
    const int lane = threadIdx.x & 31;
    float amax = 0.0f;
    int at = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float a = fabsf(v[j]);
        if (a > amax) {
            amax = a;
            at = 8 * lane + j;
        }
    }
    // Largest magnitude, earliest index on ties: a total order, so every lane agrees.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
        const int oi = __shfl_xor_sync(0xffffffffu, at, o);
        if (oa > amax || (oa == amax && oi < at)) {
            amax = oa;
            at = oi;
        }
    }
    u8* o = out + b * Q8_K_BYTES;
    // The pad past ggml's 292 bytes: copied with the block (the MMQ tiles), never summed.
    if (lane < 3) *(u32*)(o + 292 + 4 * lane) = 0;
    if (amax == 0.0f) {
        u32* q32 = (u32*)(o + 4 + 8 * lane);
        q32[0] = 0;
        q32[1] = 0;
        if (lane < 16) *(i16*)(o + 260 + 2 * lane) = 0;
        if (lane == 0) *(float*)o = 0.0f;
        return;
    }
    // The value at `at`, from the lane holding it (the values need not be in memory).
    float mine = v[0];
#pragma unroll
    for (int j = 1; j < 8; ++j)
        if (j == (at & 7)) mine = v[j];
    const float iscale = -127.0f / __shfl_sync(0xffffffffu, mine, at >> 3);
    u32 packed[2] = {0, 0};
    int s8 = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float r = rintf(iscale * v[j]);
        const int q = min(isnan(r) ? 0 : __float2int_rn(r), 127);
        s8 += (int)(i8)q;
        packed[j / 4] |= (u32)(u8)(i8)q << (8 * (j % 4));
    }
    u32* q32 = (u32*)(o + 4 + 8 * lane);
    q32[0] = packed[0];
    q32[1] = packed[1];
    const int s16 = s8 + __shfl_xor_sync(0xffffffffu, s8, 1);
    if ((lane & 1) == 0) *(i16*)(o + 260 + lane) = (i16)s16;
    if (lane == 0) *(float*)o = 1.0f / iscale;
}

__device__ __forceinline__ void quantize_q8_k(const float* __restrict__ x, const float* __restrict__ u,
                                              float* __restrict__ h, u8* __restrict__ out, long long nblocks) {
    const long long b = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= nblocks) return;
    const int lane = threadIdx.x & 31;
    // Two 16-byte loads a lane (eight 4-byte ones left the 512-token prompt's gated expert
    // input at ~1.1 TB/s on an H100, call AX); the same values.
    const float4 lo = act_in4(x, u, h, b * 256 + 8 * lane), hi = act_in4(x, u, h, b * 256 + 8 * lane + 4);
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    q8_k_from_values(v, out, b);
}

// y = rms_norm(x) of row blockIdx.x (with `d` not null: h += d first and x = h, as
// add_rms_norm), then y's Q8_K blocks for the product that reads it (Backend::rms_norm_for):
// the norm's and the quantizer's launch as one. The norm is common.cuh's row function of the
// norm kernels and each block is q8_k_from_values of the y this block wrote (a barrier apart),
// so y and its quantization have the bits of the two launches. dim % 256 == 0.
extern "C" __global__ void rms_norm_q8_k(float* x, const float* d, const float* w, float* y, u8* out, int dim,
                                         float eps) {
    pdl_enter();
    if (d)
        add_rms_norm_row(x, d, w, y, dim, eps);
    else
        rms_norm_row(x, w, y, dim, eps);
    __syncthreads();
    // Plain loads of y (no __restrict__, so never the read-only path): this block wrote it.
    const int nb = dim / 256, lane = threadIdx.x & 31;
    for (int b = threadIdx.x / 32; b < nb; b += blockDim.x / 32) {
        const float* yb = y + ((long long)blockIdx.x * nb + b) * 256 + 8 * lane;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = yb[j];
        q8_k_from_values(v, out, (long long)blockIdx.x * nb + b);
    }
}

extern "C" __global__ void quantize_act_q8_k(const float* __restrict__ x, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_k(x, nullptr, nullptr, out, nblocks);
}

extern "C" __global__ void quantize_act_q8_k_glu(const float* __restrict__ g, const float* __restrict__ u,
                                                 float* __restrict__ h, u8* __restrict__ out, long long nblocks) {
    pdl_enter();
    quantize_q8_k(g, u, h, out, nblocks);
}

// The float quantizers take four elements a thread (one 16-byte load, one 8-byte store; the
// buffers are whole allocations, so aligned): one a thread ran at 1.2 TB/s on an H100.
extern "C" __global__ void quantize_act_f16(const float* __restrict__ x, u16* __restrict__ out, long long n) {
    pdl_enter();
    const long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n) {
        const float4 v = *(const float4*)(x + i);
        const u32 a = __half_as_ushort(__float2half_rn(v.x)) | ((u32)__half_as_ushort(__float2half_rn(v.y)) << 16);
        const u32 b = __half_as_ushort(__float2half_rn(v.z)) | ((u32)__half_as_ushort(__float2half_rn(v.w)) << 16);
        *(uint2*)(out + i) = make_uint2(a, b);
    } else {
        for (long long j = i; j < n; ++j) out[j] = __half_as_ushort(__float2half_rn(x[j]));
    }
}

extern "C" __global__ void quantize_act_bf16(const float* __restrict__ x, u16* __restrict__ out, long long n) {
    pdl_enter();
    const long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n) {
        const float4 v = *(const float4*)(x + i);
        *(uint2*)(out + i) = make_uint2(bf16_bits(v.x) | ((u32)bf16_bits(v.y) << 16),
                                        bf16_bits(v.z) | ((u32)bf16_bits(v.w) << 16));
    } else {
        for (long long j = i; j < n; ++j) out[j] = bf16_bits(x[j]);
    }
}
