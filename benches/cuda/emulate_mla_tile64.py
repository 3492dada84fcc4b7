"""Lane-level emulation of kernels/mla.cu's `mla_attention_mma64` (8 warps × 32 lanes, 64-key
tiles, each warp the scores of its 8 keys over all of dk, the tile softmax through shared
memory, P · V per warp's dims), checked against a float64 softmax attention over the same
bf16-rounded query and keys. The m16n8k16 fragments are assembled from the shared-memory
addresses the kernel reads, in PTX's documented layout (A rows g, g + 8 and columns 2t, 2t + 1,
2t + 8, 2t + 9; B rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g; C rows g, g + 8 and columns
2t, 2t + 1), so a wrong row, column or stride shows as an O(1) error. Cases: fewer heads than
16, a last tile shorter than 64 keys, masked keys (row −1), splits (partials and (max, sum)
merged as mla_combine does), and a split with no keys of its own. It checks the index mapping
without a GPU; the CUDA conformance suite checks the kernel.

    python3 benches/cuda/emulate_mla_tile64.py     (numpy; a few seconds)
"""
import numpy as np

KT, PST = 64, 72
rng = np.random.default_rng(7)


def bf16(x):
    """Round float32 values to bfloat16 (nearest, ties to even), returned as float32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (b << 16).astype(np.uint32).view(np.float32)


def mma(acc, A, B):
    """acc[32][4] += A (16 × 16) · B (16 × 8) in the C layout."""
    C = A.astype(np.float64) @ B.astype(np.float64)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane] += [C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]]


def frag_a(sm, base, stride, k0):
    """A (16 × 16) as the lanes load it: u32 pairs at base + row·stride + k0 (+8) + 2t."""
    A = np.full((16, 16), np.nan, np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for r, c in ((g, 0), (g + 8, 0), (g, 8), (g + 8, 8)):
            off = base + r * stride + k0 + c + 2 * t
            A[r, c + 2 * t : c + 2 * t + 2] = sm[off : off + 2]
    return A


def run(hg, L, masked, dk, dv, splits, chunk):
    st = dk + 8
    q = bf16(rng.standard_normal((16, dk)))
    q[hg:] = 0.0
    keys = bf16(rng.standard_normal((L, dk)))
    dead = rng.random(L) < masked
    scale = 0.125
    outs = []
    for split in range(splits):
        kb0, kb1 = split * chunk, min(L, split * chunk + chunk)
        if kb0 >= L:
            outs.append((np.zeros((hg, dv)), np.full(hg, -np.inf), np.zeros(hg)))
            continue
        qh = np.zeros(16 * st, np.float32)
        for h in range(16):
            qh[h * st : h * st + dk] = q[h]
        m = np.full(16, -np.inf)
        l = np.zeros(16)
        nd = dv // 64
        acc = [[np.zeros((32, 4)) for _ in range(nd)] for _ in range(8)]
        for kb in range(kb0, kb1, KT):
            nt = min(KT, kb1 - kb)
            rows = [kb + i if i < nt and not dead[kb + i] else -1 for i in range(KT)]
            kh = np.zeros(KT * st, np.float32)
            for i, r in enumerate(rows):
                if r >= 0:
                    kh[i * st : i * st + dk] = keys[r]
            # Scores: warp w, keys 8w .. 8w + 7.
            s = [np.zeros((32, 4)) for _ in range(8)]
            for w in range(8):
                for k0 in range(0, dk, 16):
                    A = frag_a(qh, 0, st, k0)
                    B = np.full((16, 8), np.nan, np.float32)
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        off = (8 * w + g) * st + k0 + 2 * t
                        B[2 * t : 2 * t + 2, g] = kh[off : off + 2]
                        B[2 * t + 8 : 2 * t + 10, g] = kh[off + 8 : off + 10]
                    mma(s[w], A, B)
            rmax = np.zeros((8, 16))
            x = {}
            for w in range(8):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    k_lo = 8 * w + 2 * t
                    v0 = k_lo < nt and rows[k_lo] >= 0
                    v1 = k_lo + 1 < nt and rows[k_lo + 1] >= 0
                    sv = s[w][lane]
                    x[w, lane] = [sv[0] * scale if v0 else -np.inf, sv[1] * scale if v1 else -np.inf,
                                  sv[2] * scale if v0 else -np.inf, sv[3] * scale if v1 else -np.inf]
                for g in range(8):
                    quad = [x[w, 4 * g + t] for t in range(4)]
                    rmax[w, g] = max(max(v[0], v[1]) for v in quad)
                    rmax[w, g + 8] = max(max(v[2], v[3]) for v in quad)
            ph = np.full(16 * PST, np.nan, np.float32)
            rsum = np.zeros((8, 16))
            corr = {}
            for w in range(8):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    k_lo = 8 * w + 2 * t
                    mt0, mt1 = rmax[:, g].max(), rmax[:, g + 8].max()
                    mn0, mn1 = max(m[g], mt0), max(m[g + 8], mt1)
                    xv = x[w, lane]
                    ok0, ok1 = g < hg, g + 8 < hg
                    p = [np.exp(xv[0] - mn0) if ok0 and mn0 > -np.inf and xv[0] > -np.inf else 0.0,
                         np.exp(xv[1] - mn0) if ok0 and mn0 > -np.inf and xv[1] > -np.inf else 0.0,
                         np.exp(xv[2] - mn1) if ok1 and mn1 > -np.inf and xv[2] > -np.inf else 0.0,
                         np.exp(xv[3] - mn1) if ok1 and mn1 > -np.inf and xv[3] > -np.inf else 0.0]
                    corr[w, lane] = (0.0 if m[g] == -np.inf else np.exp(m[g] - mn0),
                                     0.0 if m[g + 8] == -np.inf else np.exp(m[g + 8] - mn1))
                    ph[g * PST + k_lo : g * PST + k_lo + 2] = bf16(p[0:2])
                    ph[(g + 8) * PST + k_lo : (g + 8) * PST + k_lo + 2] = bf16(p[2:4])
                    x[w, lane] = p
                for g in range(8):
                    rsum[w, g] = sum(x[w, 4 * g + t][0] + x[w, 4 * g + t][1] for t in range(4))
                    rsum[w, g + 8] = sum(x[w, 4 * g + t][2] + x[w, 4 * g + t][3] for t in range(4))
            for r in range(16):
                mn = max(m[r], rmax[:, r].max())
                cr = 0.0 if m[r] == -np.inf else np.exp(m[r] - mn)
                m[r], l[r] = mn, l[r] * cr + rsum[:, r].sum()
            # P · V: warp w's dims [w·dv/8, (w+1)·dv/8).
            for w in range(8):
                dbase = w * (dv // 8)
                for i in range(nd):
                    for lane in range(32):
                        c0, c1 = corr[w, lane]
                        acc[w][i][lane] *= [c0, c0, c1, c1]
                for k0 in range(0, nt, 16):
                    A = frag_a(ph, 0, PST, k0)
                    for i in range(nd):
                        B = np.full((16, 8), np.nan, np.float32)
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            col = dbase + 8 * i + g
                            for kk in (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9):
                                B[kk, g] = kh[(k0 + kk) * st + col]
                        mma(acc[w][i], A, B)
        o = np.full((hg, dv), np.nan)
        for w in range(8):
            dbase = w * (dv // 8)
            for i in range(nd):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    d = dbase + 8 * i + 2 * t
                    for hh in range(2):
                        row = g + 8 * hh
                        if row < hg:
                            o[row, d : d + 2] = acc[w][i][lane][2 * hh : 2 * hh + 2]
        outs.append((o, m[:hg].copy(), l[:hg].copy()))
    # mla_combine: weights exp(m_z − max) · l_z, then the weighted unnormalised sums.
    M = np.max([z[1] for z in outs], axis=0)
    wz = [np.where(z[1] == -np.inf, 0.0, np.exp(z[1] - M)) for z in outs]
    lsum = sum(w * z[2] for w, z in zip(wz, outs))
    got = sum(w[:, None] * np.nan_to_num(z[0]) for w, z in zip(wz, outs)) / lsum[:, None]
    # float64 reference over the live keys with the same bf16 query and keys.
    live = ~dead
    sc = (q[:hg].astype(np.float64) @ keys[live].astype(np.float64).T) * scale
    p = np.exp(sc - sc.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ keys[live][:, :dv].astype(np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    # P is rounded to bf16 (relative 2^-8) before P · V, as in FlashMLA.
    assert err < 2.0 ** -6, (hg, L, splits, err)
    return err


for case in [
    dict(hg=16, L=64, masked=0.0, dk=96, dv=64, splits=1, chunk=64),
    dict(hg=13, L=150, masked=0.2, dk=96, dv=64, splits=1, chunk=150),
    dict(hg=7, L=200, masked=0.1, dk=160, dv=128, splits=3, chunk=70),
    dict(hg=16, L=110, masked=0.0, dk=96, dv=64, splits=4, chunk=40),
]:
    print(case, "max rel err %.2e" % run(**case))
print("ok")
