// Kernel-level timing of glint's decode kernels on GLM-5's real shapes, with CUDA events, against
// the device-to-device copy bandwidth measured in the same run. Built with nvcc on the GPU machine
// by benches/cuda/kernel_bench.sh, once per family (-DBENCH_QUANT or -DBENCH_MLA), from the source
// NVRTC compiles at run time; this harness only times the kernels (their results are checked by
// crates/glint-cuda/tests). The launch
// shapes mirror crates/glint-cuda/src/quant.rs (`warps_per_row`, `mv_grid`) and attention.rs
// (`mla_plan`); keep them in step.
//
//   kernel_bench quant   matvec / mmid per weight type and shape
//   kernel_bench mla     decode attention over L keys (all 64 heads, dk 576, dv 512)
//   kernel_bench indexer the indexer's scores over 4k..64k keys (both kernels), and its top-k,
//                        2048 of 4k..64k scores
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// KERNEL_SOURCE: one family's full source as NVRTC sees it (common.cuh + tables + the file),
// written by `cargo run -p glint-cuda --example kernel_source -- DIR`.
#include KERNEL_SOURCE

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static cudaEvent_t ev0, ev1;

// Mean microseconds of `reps` launches f(0), f(1), ... after a warm-up. Callers rotate
// over enough weight copies (or experts) that each launch reads from DRAM, not from the 50 MB L2,
// as a decode step does.
template <class F>
static float time_us(F f, int reps = 20) {
    // Warm up for at least 20 ms of GPU time: an idle GPU runs its SMs at a low clock and
    // takes a while to raise it, which a few short launches would not cover.
    float warm_ms = 0;
    for (int round = 0; round < 1000 && warm_ms < 20.0f; ++round) {
        CK(cudaEventRecord(ev0));
        for (int i = 0; i < 3; ++i) f(i);
        CK(cudaEventRecord(ev1));
        CK(cudaEventSynchronize(ev1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev0, ev1));
        warm_ms += ms;
    }
    CK(cudaEventRecord(ev0));
    for (int i = 0; i < reps; ++i) f(i);
    CK(cudaEventRecord(ev1));
    CK(cudaEventSynchronize(ev1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev0, ev1));
    return 1000.0f * ms / reps;
}

static double copy_gbs() {
    size_t n = 1ull << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    float us = time_us([&](int) { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 5);
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * n / (us * 1e-6) / 1e9;
}

static void fill_random(void* d, size_t n, unsigned seed) {
    // Eight bytes per xorshift64 step (the byte-per-step loop took most of a quant run).
    std::vector<unsigned char> h((n + 7) & ~(size_t)7);
    unsigned long long x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < h.size(); i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(&h[i], &x, 8);
    }
    CK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
}

#ifdef BENCH_QUANT
struct Ty {
    const char* name;
    int qk, ts, per_block, act_block, act_bytes;
    // The last two arguments: a pair launch's second weight and output (null: none).
    void (*matvec)(const u8*, const u8*, float*, int, int, int, long long, int, const u8*, float*);  // matvec1_*
    void (*staged)(const u8*, const u8*, float*, int, int, int, long long, int, const u8*, float*);  // matvec1s_*
    void (*mmid)(const u8*, const u32*, const u8*, float*, int, int, int, int, int, int, long long, int, const u8*,
                 float*);
    void (*mmids)(const u8*, const u32*, const u8*, float*, int, int, int, int, int, int, long long, int, const u8*,
                  float*);
};

static int warps_per_row(long long rows, long long units) {
    long long groups = (rows + MV_RPW - 1) / MV_RPW;
    int ks = 1;
    while (ks < MV_WARPS_MAX && groups * ks < 132 * 16 && units >= 64 * ks) ks *= 2;
    return ks;
}

// The backend's weight stages (crates/glint-cuda/src/quant.rs stage_bytes_per_warp): dynamic
// shared memory for one warp of matvec1s_*. KB_STAGE=1 times the one-token products of every
// shape with matvec1s_* (the backend stages only from 65536 rows), unset or 0 with matvec1_*;
// expert products are never staged.
static bool staged() { return getenv("KB_STAGE") && !strcmp(getenv("KB_STAGE"), "1"); }
static int stage_bytes_per_warp(const Ty& t, int stages = MV_STAGES) {
    if (t.qk == 1) return 0;
    const int pass = 1024 / t.qk * t.ts;
    return stages * MV_RPW * ((pass + 15) / 16 * 16 + 16);
}
// KB_MMID_STAGE=1: the expert products at one warp a row group also with mmids_* (two stages).
// KB_PAIR=1: the expert products at one warp a row group also as a gate + up pair launch.
static bool pair_timed() { return getenv("KB_PAIR") && !strcmp(getenv("KB_PAIR"), "1"); }
static bool mmid_staged() { return getenv("KB_MMID_STAGE") && !strcmp(getenv("KB_MMID_STAGE"), "1"); }

static void bench_quant(double bw) {
    Ty types[] = {
        {"q4_K", 256, 144, 8, 256, Q8_K_BYTES, matvec1_q4_k, matvec1s_q4_k, mmid_q4_k, mmids_q4_k},
        {"q5_K", 256, 176, 8, 256, Q8_K_BYTES, matvec1_q5_k, matvec1s_q5_k, mmid_q5_k, mmids_q5_k},
        {"q6_K", 256, 210, 8, 256, Q8_K_BYTES, matvec1_q6_k, matvec1s_q6_k, mmid_q6_k, mmids_q6_k},
        {"q8_0", 32, 34, 1, 32, Q8_0_BYTES, matvec1_q8_0, matvec1s_q8_0, mmid_q8_0, mmids_q8_0},
        {"iq4_xs", 256, 136, 8, 256, Q8_K_BYTES, matvec1_iq4_xs, matvec1s_iq4_xs, mmid_iq4_xs, mmids_iq4_xs},
        {"f32", 1, 4, 1, 1, 4, matvec1_f32, matvec1_f32, mmid_f32, mmid_f32},
    };
    struct Shape {
        const char* what;
        int cols, rows, slices, pairs;  // pairs 0: matvec of one token
    } shapes[] = {
        {"attn_q_a 6144x2048", 6144, 2048, 1, 0},
        {"attn_output 16384x6144", 16384, 6144, 1, 0},
        {"ffn_gate 6144x12288", 6144, 12288, 1, 0},
        {"ffn_down 12288x6144", 12288, 6144, 1, 0},
        {"output 6144x154880", 6144, 154880, 1, 0},
        {"router 6144x256", 6144, 256, 1, 0},
        {"exp gate 8 of 256", 6144, 2048, 256, 8},
        {"exp down 8 of 256", 2048, 6144, 256, 8},
        {"attn_k_b 64 heads", 192, 512, 64, 64},
    };
    printf("%-8s %-26s %4s %10s %10s %7s\n", "type", "shape", "ks", "us", "GB/s", "%copy");
    for (const Ty& t : types) {
        for (const Shape& s : shapes) {
            bool router = !strcmp(s.what, "router 6144x256");
            // KB_TYPES=q4_K,q6_K: only these types.
            if (const char* only = getenv("KB_TYPES"))
                if (!strstr(only, t.name)) continue;
            // KB_SHAPES=ffn_gate,exp: only shapes whose name contains one of these words.
            if (const char* only = getenv("KB_SHAPES")) {
                bool any = false;
                for (const char* c = only; *c;) {
                    const char* e = strchr(c, ',');
                    std::string word(c, e ? e - c : strlen(c));
                    any |= !word.empty() && strstr(s.what, word.c_str()) != nullptr;
                    c = e ? e + 1 : c + strlen(c);
                }
                if (!any) continue;
            }
            if ((t.qk == 1) != router) continue;  // f32 only for the router, the router only in f32
            if (s.cols % t.qk) continue;
            long long row_bytes = (long long)s.cols / t.qk * t.ts;
            long long wbytes = row_bytes * s.rows * s.slices;
            // Copies enough to exceed L2 several times over (one for the big ones).
            const int copies = (int)std::min(8ll, std::max(1ll, (256ll << 20) / wbytes));
            u8* w;
            CK(cudaMalloc(&w, wbytes * copies));
            fill_random(w, wbytes * copies, 1);
            // Finite, moderate f16 scales are not needed for timing: integer paths take any byte.
            int n_act = s.pairs ? s.pairs : 1;
            long long act_stride = (long long)s.cols / t.act_block * t.act_bytes;
            u8* act;
            CK(cudaMalloc(&act, act_stride * n_act));
            fill_random(act, act_stride * n_act, 2);
            if (t.qk == 1) CK(cudaMemset(act, 0, act_stride * n_act));
            float* y;
            CK(cudaMalloc(&y, sizeof(float) * (long long)s.rows * n_act));
            long long units = (long long)s.cols / t.qk * t.per_block;
            // KB_KS=1,2,4,...: also time each of these warps-per-row-group splits (the default
            // is marked *), to see which one a shape wants.
            std::vector<int> kss;
            // KB_KS0=k: the first (starred) split is k instead of the rows-only default, e.g. the
            // backend's expert split (rows × experts a token uses), for ncu to find it first.
            const int ks0 = getenv("KB_KS0") ? atoi(getenv("KB_KS0")) : warps_per_row(s.rows, units);
            kss.push_back(ks0);
            if (const char* e = getenv("KB_KS"))
                for (const char* c = e; *c;) {
                    int k = atoi(c);
                    if (k >= 1 && k <= MV_WARPS_MAX && k != ks0 && units >= 32ll * k) kss.push_back(k);
                    while (*c && *c != ',') ++c;
                    if (*c) ++c;
                }
            for (int ks : kss) {
                float us;
                long long touched;
                if (!s.pairs) {
                    int wb = std::max(MV_ROWS, ks), per = MV_RPW * (wb / ks);
                    dim3 grid((s.rows + per - 1) / per, 1), block(32, wb);
                    const int smem = staged() ? stage_bytes_per_warp(t) * wb : 0;
                    auto* kern = smem ? t.staged : t.matvec;
                    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                    us = time_us([&](int i) {
                        kern<<<grid, block, smem>>>(w + wbytes * (i % copies), act, y, s.cols, s.rows, 1, act_stride, ks,
                                                    nullptr, nullptr);
                    });
                    touched = wbytes;
                } else {
                    // Eight sets of distinct experts, one per launch in turn.
                    const int sets = 8;
                    std::vector<u32> ids(s.pairs * sets);
                    for (int p = 0; p < s.pairs * sets; ++p) ids[p] = (u32)((p * 37 + 11) % s.slices);
                    u32* dids;
                    CK(cudaMalloc(&dids, 4 * s.pairs * sets));
                    CK(cudaMemcpy(dids, ids.data(), 4 * s.pairs * sets, cudaMemcpyHostToDevice));
                    int wb = std::max(MV_ROWS, ks), per = MV_RPW * (wb / ks);
                    dim3 grid((s.rows + per - 1) / per, s.pairs), block(32, wb);
                    us = time_us([&](int i) {
                        t.mmid<<<grid, block>>>(w + wbytes * (i % copies), dids + s.pairs * (i % sets), act, y, s.cols,
                                                s.rows, s.slices, 1, s.pairs, 1, act_stride, ks, nullptr, nullptr);
                    });
                    touched = row_bytes * s.rows * s.pairs;
                    if (pair_timed() && ks == 1) {
                        // Gate and up as one launch (grid.z = 2) against two.
                        float* y2;
                        u8* wb2;  // the second weight: a copy elsewhere, read from DRAM too
                        CK(cudaMalloc(&y2, 4ll * s.pairs * s.rows));
                        CK(cudaMalloc(&wb2, wbytes * copies));
                        CK(cudaMemcpy(wb2, w, wbytes * copies, cudaMemcpyDeviceToDevice));
                        dim3 grid2(grid.x, grid.y, 2);
                        const float one = time_us([&](int i) {
                            t.mmid<<<grid2, block>>>(w + wbytes * (i % copies), dids + s.pairs * (i % sets), act, y,
                                                     s.cols, s.rows, s.slices, 1, s.pairs, 1, act_stride, ks,
                                                     wb2 + wbytes * (i % copies), y2);
                        });
                        const float two = time_us([&](int i) {
                            for (int h = 0; h < 2; ++h)
                                t.mmid<<<grid, block>>>((h ? wb2 : w) + wbytes * (i % copies), dids + s.pairs * (i % sets), act,
                                                        h ? y2 : y, s.cols, s.rows, s.slices, 1, s.pairs, 1, act_stride,
                                                        ks, nullptr, nullptr);
                        });
                        CK(cudaGetLastError());
                        printf("%-8s %-26s pair: one launch %.2f us, two %.2f us (%.1f%% of the copy bandwidth)\n",
                               t.name, s.what, one, two, 100.0 * 2 * touched / (one * 1e-6) / 1e9 / bw);
                        CK(cudaFree(y2));
                        CK(cudaFree(wb2));
                    }
                    if (mmid_staged() && ks == 1 && t.qk != 1) {
                        const int smem = stage_bytes_per_warp(t, 2) * wb;
                        const float us2 = time_us([&](int i) {
                            t.mmids<<<grid, block, smem>>>(w + wbytes * (i % copies), dids + s.pairs * (i % sets), act,
                                                           y, s.cols, s.rows, s.slices, 1, s.pairs, 1, act_stride, ks,
                                                           nullptr, nullptr);
                        });
                        CK(cudaGetLastError());
                        const double g2 = touched / (us2 * 1e-6) / 1e9;
                        printf("%-8s %-26s %3ds %10.2f %10.1f %6.1f%%\n", t.name, s.what, ks, us2, g2, 100.0 * g2 / bw);
                    }
                    CK(cudaFree(dids));
                }
                CK(cudaGetLastError());
                double gbs = touched / (us * 1e-6) / 1e9;
                printf("%-8s %-26s %3d%s %10.2f %10.1f %6.1f%%\n", t.name, s.what, ks, ks == ks0 ? "*" : " ", us, gbs,
                       100.0 * gbs / bw);
            }
            CK(cudaFree(w));
            CK(cudaFree(act));
            CK(cudaFree(y));
        }
    }
}
#endif

#ifdef BENCH_MLA
static void bench_mla(double bw) {
    const int H = 64, DK = 576, DV = 512, BS = 64, NSEL = 2048;
    const int L_list[] = {4, 67, 256, 2048, 4096, 16384, 65536};
    int sms = 0, optin = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    printf("%-8s %8s %6s %6s %10s %10s %7s\n", "cache", "keys", "sel", "splits", "us", "GB/s", "%copy");
    for (int L : L_list) {
        // KB_KEYS=4,2048: only these key counts.
        if (const char* only = getenv("KB_KEYS")) {
            bool any = false;
            for (const char* c = only; *c; c += *c == ',') {
                any |= atoi(c) == L;
                while (*c && *c != ',') ++c;
            }
            if (!any) continue;
        }
        long long rows = ((L + BS - 1) / BS) * BS;
        float* q;
        CK(cudaMalloc(&q, sizeof(float) * H * DK));
        CK(cudaMemset(q, 0, 4 * H * DK));
        float* kc;
        CK(cudaMalloc(&kc, sizeof(float) * rows * DK));
        CK(cudaMemset(kc, 0, 4 * rows * DK));
        int nb = rows / BS;
        std::vector<u32> tables(nb);
        for (int i = 0; i < nb; ++i) tables[i] = nb - 1 - i;  // blocks in reverse: a real gather
        u32 *dt, *dpos, *dseq, *dsel;
        CK(cudaMalloc(&dt, 4 * nb));
        CK(cudaMemcpy(dt, tables.data(), 4 * nb, cudaMemcpyHostToDevice));
        u32 pos = L - 1, seq = 0;
        CK(cudaMalloc(&dpos, 4));
        CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dseq, 4));
        CK(cudaMemcpy(dseq, &seq, 4, cudaMemcpyHostToDevice));
        std::vector<u32> sel(NSEL);
        for (int i = 0; i < NSEL; ++i) sel[i] = (u32)(((long long)i * 7919) % L);
        CK(cudaMalloc(&dsel, 4 * NSEL));
        CK(cudaMemcpy(dsel, sel.data(), 4 * NSEL, cudaMemcpyHostToDevice));
        bool has_sel = L > NSEL;
        int keys = has_sel ? NSEL : L;
        // mla_plan: G heads per block by accumulators and shared memory, splits to fill 4 blocks/SM.
        // KB_MLA_HEADS, KB_MLA_SPLIT_KEYS, KB_MLA_BLOCKS: the plan's knobs (attention.rs's
        // GLINT_CUDA_MLA_*), to time other plans.
        auto knob = [](const char* n, int d) { const char* v = getenv(n); return v && atoi(v) > 0 ? atoi(v) : d; };
        int g = H < (MLA_THREADS * MLA_ACC) / DV ? H : (MLA_THREADS * MLA_ACC) / DV;
        g = std::min(g, knob("KB_MLA_HEADS", g));
        int st = DK + 4;
        auto smem = [&](int g) { return (((g + MLA_KT) * st + g * MLA_KT + 3 * g + 1) & ~1) * 4 + MLA_KT * 8; };
        while (smem(g) > optin) --g;
        int ng = (H + g - 1) / g;
        g = (H + ng - 1) / ng;
        int blocks = ng, target = knob("KB_MLA_BLOCKS", 4) * sms, min_keys = knob("KB_MLA_SPLIT_KEYS", 32);
        int splits = blocks >= target ? 1 : (target + blocks - 1) / blocks;
        splits = std::min(splits, (keys + min_keys - 1) / min_keys);
        splits = std::min(splits, 48 * 1024 / (4 * g));
        splits = std::max(1, std::min(splits, 128));
        int chunk = (keys + splits - 1) / splits;
        splits = (keys + chunk - 1) / chunk;
        float *out, *part;
        CK(cudaMalloc(&out, 4 * H * DV));
        CK(cudaMalloc(&part, 4ll * blocks * splits * g * (DV + 2)));
        CK(cudaFuncSetAttribute(mla_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, smem(g)));
        float us = time_us([&](int) {
            mla_attention<<<dim3(blocks, splits), MLA_THREADS, smem(g)>>>(
                q, q, 0ll, (long long)DK, 0, (const u8*)kc, rows, CACHE_F32, dpos, dt, nb, dseq, nb, BS, dsel, has_sel, NSEL, H, DK, DV, L,
                0.04f, g, ng, chunk, splits, out, part);
            if (splits > 1)
                mla_combine<<<dim3(blocks, (g * DV + MLA_THREADS - 1) / MLA_THREADS), MLA_THREADS,
                              g * (splits + 1) * 4>>>(part, H, DV, g, ng, splits, out);
        });
        CK(cudaGetLastError());
        double bytes = 4.0 * keys * DK;
        double gbs = bytes / (us * 1e-6) / 1e9;
        printf("%-8s %8d %6d %6d %10.2f %10.1f %6.1f%%  G %d\n", "f32", L, keys, splits, us, gbs, 100.0 * gbs / bw, g);
        // The tensor-core kernel on a bf16 pool (the f32 pool's bytes hold it), same plan.
        const int sm_mma = 2 * (16 + MLA_KT) * (DK + 8) + 4 * (8 * 256 + 16 * MLA_KT + 64) + 8 * MLA_KT;
        CK(cudaFuncSetAttribute(mla_attention_mma_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_mma));
        float us16 = time_us([&](int) {
            mla_attention_mma_bf16<<<dim3(blocks, splits), MLA_THREADS, sm_mma>>>(
                q, q, 0ll, (long long)DK, 0, (const u8*)kc, rows, CACHE_BF16, dpos, dt, nb, dseq, nb, BS, dsel, has_sel,
                NSEL, H, DK, DV, L, 0.04f, g, ng, chunk, splits, out, part);
            if (splits > 1)
                mla_combine<<<dim3(blocks, (g * DV + MLA_THREADS - 1) / MLA_THREADS), MLA_THREADS,
                              g * (splits + 1) * 4>>>(part, H, DV, g, ng, splits, out);
        });
        CK(cudaGetLastError());
        gbs = bytes / 2 / (us16 * 1e-6) / 1e9;
        printf("%-8s %8d %6d %6d %10.2f %10.1f %6.1f%%  G %d\n", "bf16 mma", L, keys, splits, us16, gbs,
               100.0 * gbs / bw, g);
        // The 64-key tiles (GLINT_CUDA_MLA_TILE64=1): the plan's splits of at least one tile
        // (KB_MLA_SPLIT_KEYS64, default 64).
        {
            const int mk = knob("KB_MLA_SPLIT_KEYS64", MLA_KT64);
            int sp = blocks >= target ? 1 : (target + blocks - 1) / blocks;
            sp = std::max(1, std::min(std::min(sp, (keys + mk - 1) / mk), std::min(48 * 1024 / (4 * g), 128)));
            const int ch = (keys + sp - 1) / sp;
            sp = (keys + ch - 1) / ch;
            const int sm64 = 2 * (16 + MLA_KT64) * (DK + 8) + 2 * 16 * MLA_PST + 4 * (2 * 8 * 16 + 4 * 16) + 8 * MLA_KT64;
            CK(cudaFuncSetAttribute(mla_attention_mma64_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize, sm64));
            float us64 = time_us([&](int) {
                mla_attention_mma64_bf16<<<dim3(blocks, sp), MLA_THREADS, sm64>>>(
                    q, q, 0ll, (long long)DK, 0, (const u8*)kc, rows, CACHE_BF16, dpos, dt, nb, dseq, nb, BS, dsel,
                    has_sel, NSEL, H, DK, DV, L, 0.04f, g, ng, ch, sp, out, part);
                if (sp > 1)
                    mla_combine<<<dim3(blocks, (g * DV + MLA_THREADS - 1) / MLA_THREADS), MLA_THREADS,
                                  g * (sp + 1) * 4>>>(part, H, DV, g, ng, sp, out);
            });
            CK(cudaGetLastError());
            gbs = bytes / 2 / (us64 * 1e-6) / 1e9;
            printf("%-8s %8d %6d %6d %10.2f %10.1f %6.1f%%  G %d\n", "bf16 t64", L, keys, sp, us64, gbs,
                   100.0 * gbs / bw, g);
        }
        CK(cudaFree(q));
        CK(cudaFree(kc));
        CK(cudaFree(dt));
        CK(cudaFree(dpos));
        CK(cudaFree(dseq));
        CK(cudaFree(dsel));
        CK(cudaFree(out));
        CK(cudaFree(part));
    }
}
#endif

#ifdef BENCH_INDEXER
// The indexer's scores of one decode token over L cached keys (GLM-5: 32 heads × 128, an f32
// cache in blocks of 64 rows, the block table reversed so rows are gathered): the general
// kernel against the register-tile one (crates/glint-cuda/src/attention.rs indexer_scores: 32
// keys a block, 256 threads, the same shared-memory sizes).
static void bench_idx_scores(double bw) {
    const int H = 32, D = 128, BS = 64, KT = 32;
    auto smem_bytes = [](int floats, int longs) { return (floats + 1) / 2 * 8 + longs * 8; };
    const int sm_gen = smem_bytes(H * (D + 1) + H + KT * D, KT), sm_t32 = smem_bytes((H + KT) * (D + 4) + H, KT);
    CK(cudaFuncSetAttribute(indexer_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_gen));
    CK(cudaFuncSetAttribute(indexer_scores_t32, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_t32));
    // The tensor-core kernels on fp8 and f16 keys (64 keys a block).
    const int KM = 64, sm_mma = 2 * (H + KM) * (D + 8) + 4 * (2 * H + KM) + 8 * KM;
    CK(cudaFuncSetAttribute(indexer_scores_mma_fp8, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_mma));
    CK(cudaFuncSetAttribute(indexer_scores_mma_f16, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_mma));
    printf("%-8s %12s %8s %12s %8s %12s %8s %12s %8s\n", "keys", "general us", "%copy", "tiles us", "%copy",
           "mma fp8 us", "%copy", "mma f16 us", "%copy");
    for (int L : {4096, 16384, 65536}) {
        const int nb = (L + BS - 1) / BS;
        const long long rows = (long long)nb * BS;
        float *q, *w, *kc, *out;
        CK(cudaMalloc(&q, 4 * H * D));
        CK(cudaMalloc(&w, 4 * H));
        CK(cudaMalloc(&kc, 4 * rows * D));
        CK(cudaMalloc(&out, 4ll * L));
        fill_random(q, 4 * H * D, 1);
        fill_random(w, 4 * H, 2);
        CK(cudaMemset(kc, 0, 4 * rows * D));
        std::vector<u32> tables(nb);
        for (int i = 0; i < nb; ++i) tables[i] = nb - 1 - i;
        u32 *dt, *dpos, *dseq;
        CK(cudaMalloc(&dt, 4 * nb));
        CK(cudaMemcpy(dt, tables.data(), 4 * nb, cudaMemcpyHostToDevice));
        const u32 pos = L - 1, seq = 0;
        CK(cudaMalloc(&dpos, 4));
        CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dseq, 4));
        CK(cudaMemcpy(dseq, &seq, 4, cudaMemcpyHostToDevice));
        const dim3 grid(1, (L + KT - 1) / KT);
        const float tg = time_us([&](int) {
            indexer_scores<<<grid, 256, sm_gen>>>(q, w, 1.0f, (const u8*)kc, rows, D, CACHE_F32, dpos, dt, nb, dseq, nb, BS,
                                                  H, D, L, KT, out);
        });
        const float tt = time_us([&](int) {
            indexer_scores_t32<<<grid, 256, sm_t32>>>(q, w, 1.0f, (const u8*)kc, rows, D, CACHE_F32, dpos, dt, nb, dseq, nb,
                                                      BS, D, L, out);
        });
        // The f32 cache's bytes hold an fp8 pool (codes, then a scale a row) or an f16 one.
        const dim3 grid_m(1, (L + KM - 1) / KM);
        const float t8 = time_us([&](int) {
            indexer_scores_mma_fp8<<<grid_m, 256, sm_mma>>>(q, w, 1.0f, (const u8*)kc, rows, dpos, dt, nb, dseq, nb,
                                                            BS, D, L, out, nullptr);
        });
        const float t16 = time_us([&](int) {
            indexer_scores_mma_f16<<<grid_m, 256, sm_mma>>>(q, w, 1.0f, (const u8*)kc, rows, dpos, dt, nb, dseq, nb,
                                                            BS, D, L, out, nullptr);
        });
        CK(cudaGetLastError());
        const double bytes = 4.0 * L * D;
        auto pct = [&](float us, double b) { return 100.0 * b / (us * 1e-6) / 1e9 / bw; };
        printf("%-8d %12.2f %7.1f%% %12.2f %7.1f%% %12.2f %7.1f%% %12.2f %7.1f%%\n", L, tg, pct(tg, bytes), tt,
               pct(tt, bytes), t8, pct(t8, bytes / 4 + 4.0 * L), t16, pct(t16, bytes / 2));
        CK(cudaFree(q));
        CK(cudaFree(w));
        CK(cudaFree(kc));
        CK(cudaFree(out));
        CK(cudaFree(dt));
        CK(cudaFree(dpos));
        CK(cudaFree(dseq));
    }
}

// The indexer's top-k (2048 of n) on one row, as a decode step runs it, and on 4: the
// one-histogram kernel against top_k_rows_s with the keys in shared memory and without.
// Scores as the indexer's crowd: ReLU-weighted sums, most in a few binades.
static void bench_topk() {
    const int K = 2048, threads_max = 1024;
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, top_k_rows_s));
    optin -= (int)fa.sharedSizeBytes;  // the kernel's own shared memory counts against the limit
    CK(cudaFuncSetAttribute(top_k_rows_s, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    CK(cudaFuncSetAttribute(top_k_rows_c, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    printf("%-8s %5s %10s %12s %12s %12s\n", "keys", "rows", "rows us", "shared us", "uncached us", "cluster us");
    for (int n : {4096, 16384, 32768, 65536}) {
        for (int rows : {1, 4}) {
            std::vector<float> h((size_t)rows * n);
            unsigned long long st = 88172645463325252ull + n;
            for (auto& v : h) {
                st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                float u = (float)(st >> 40) / (float)(1 << 24);
                v = (st & 7) == 0 ? 0.0f : u * u * 3.0f + 0.01f * (float)((st >> 8) & 255);
            }
            float* x;
            u32* ids;
            CK(cudaMalloc(&x, 4 * h.size()));
            CK(cudaMemcpy(x, h.data(), 4 * h.size(), cudaMemcpyHostToDevice));
            CK(cudaMalloc(&ids, 4ll * rows * K));
            int threads = 32;
            while (threads < n && threads < threads_max) threads *= 2;
            int hist = threads / 32 * 256 * 4;
            bool fits = hist + 4 * n <= optin;
            float t_rows = time_us([&](int) { top_k_rows<<<rows, threads>>>(x, n, K, ids); });
            float t_s = fits ? time_us([&](int) { top_k_rows_s<<<rows, threads, hist + 4 * n>>>(x, n, K, ids, 1); }) : -1;
            float t_u = time_us([&](int) { top_k_rows_s<<<rows, threads, hist>>>(x, n, K, ids, 0); });
            // top_k_rows_c as crates/glint-cuda/src/attention.rs launches it: a row over 8 blocks.
            const int per = ((n + 7) / 8 + 31) & ~31;
            int tc = 128;
            while (tc < per / 4 && tc < 1024) tc *= 2;
            const int smem_c = (tc / 32 * 256 + per) * 4;
            float t_c = time_us([&](int) { top_k_rows_c<<<rows * 8, tc, smem_c>>>(x, n, K, ids); });
            CK(cudaGetLastError());
            printf("%-8d %5d %10.2f %12.2f %12.2f %12.2f\n", n, rows, t_rows, t_s, t_u, t_c);
            CK(cudaFree(x));
            CK(cudaFree(ids));
        }
    }
}
#endif

int main(int argc, char** argv) {
    // Line-buffered even into a file: a run stopped by a time limit keeps the rows it timed.
    setvbuf(stdout, nullptr, _IOLBF, 0);
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    double bw = copy_gbs();
    printf("%s, %d SMs; device copy %.0f GB/s (read + write)\n", p.name, p.multiProcessorCount, bw);
#ifdef BENCH_QUANT
    bench_quant(bw);
#endif
#ifdef BENCH_MLA
    bench_mla(bw);
#endif
#ifdef BENCH_INDEXER
    bench_idx_scores(bw);
    bench_topk();
#endif
    (void)argc;
    (void)argv;
    return 0;
}
