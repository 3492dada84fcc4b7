"""Lane-level emulation of kernels/indexer.cu's `indexer_scores_t32` (256 threads: warp w takes
keys 4w..4w+3, lane (g, e) = (lane / 4, lane % 4) heads 4g..4g+3 over every fourth float4 of d,
then the xor-1/2 sums of a tile's four lanes, the key pick, and the xor-4/8/16 head-group sum),
checked against a float64 score Σ_j w_j·ReLU(q_j·k) for every key it writes, with d of 16, 64
and 128, keys past the token's position (−inf) and a last block shorter than 32 keys. It checks
the index mapping and the shuffle pattern without a GPU; the CUDA conformance suite checks the
kernel.

    python3 benches/cuda/emulate_indexer_tiles.py     (numpy; a few seconds)
"""
import numpy as np

rng = np.random.default_rng(3)
KT = 32


def shfl_xor(vals, m):
    return [vals[l ^ m] for l in range(32)]


def run(d, nk, t_end, t0=0):
    st = d + 4
    q = rng.standard_normal((32, d)).astype(np.float32)
    keys = rng.standard_normal((KT, d)).astype(np.float32)
    keys[max(0, nk - t0):] = 0.0  # rows past the position load as zeros
    w = rng.standard_normal(32).astype(np.float32)
    qs = np.zeros(32 * st, np.float32)
    ks = np.zeros(KT * st, np.float32)
    for h in range(32):
        qs[h * st:h * st + d] = q[h]
    for k in range(KT):
        ks[k * st:k * st + d] = keys[k]
    out = {}
    for warp in range(8):
        acc = {}
        for lane in range(32):
            g, e = lane >> 2, lane & 3
            qr, kr = 4 * g * st + 4 * e, 4 * warp * st + 4 * e
            a = np.zeros((4, 4), np.float32)
            for i in range(0, d, 16):
                qv = [qs[qr + r * st + i:qr + r * st + i + 4] for r in range(4)]
                kv = [ks[kr + k * st + i:kr + k * st + i + 4] for k in range(4)]
                for r in range(4):
                    for k in range(4):
                        for c in range(4):
                            a[r, k] = np.float32(qv[r][c] * kv[k][c] + a[r, k])
            acc[lane] = a
        part = []
        for lane in range(32):
            part.append(np.float32(0))
        for r in range(4):
            mine = [np.float32(0)] * 32
            for k in range(4):
                v = [acc[l][r, k] for l in range(32)]
                o = shfl_xor(v, 1)
                v = [np.float32(v[l] + o[l]) for l in range(32)]
                o = shfl_xor(v, 2)
                v = [np.float32(v[l] + o[l]) for l in range(32)]
                mine = [v[l] if k == (l & 3) else mine[l] for l in range(32)]
            part = [np.float32(part[l] + w[4 * (l >> 2) + r] * max(mine[l], np.float32(0))) for l in range(32)]
        for m in (4, 8, 16):
            o = shfl_xor(part, m)
            part = [np.float32(part[l] + o[l]) for l in range(32)]
        for lane in range(32):
            g, e = lane >> 2, lane & 3
            t = t0 + 4 * warp + e
            if g == 0 and t < t_end:
                out[t] = part[lane] if t < nk else -np.inf
    for t in range(t0, t_end):
        k = t - t0
        if t >= nk:
            assert out[t] == -np.inf, (d, t)
            continue
        want = sum(float(w[j]) * max(float(np.dot(q[j].astype(np.float64), keys[k].astype(np.float64))), 0.0)
                   for j in range(32))
        mag = sum(abs(float(w[j])) * float(np.abs(q[j].astype(np.float64)) @ np.abs(keys[k].astype(np.float64)))
                  for j in range(32))
        assert abs(out[t] - want) <= 1e-5 * mag + 1e-6, (d, t, out[t], want)
    assert sorted(out) == list(range(t0, t_end)), (d, sorted(out))


for d in (16, 64, 128):
    run(d, nk=32, t_end=32)
    run(d, nk=20, t_end=32)          # keys past the position
    run(d, nk=300, t_end=301, t0=288)  # the last block: 13 keys
print("indexer_scores_t32 emulation: ok")
