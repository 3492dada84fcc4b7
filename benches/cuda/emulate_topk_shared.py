"""Warp-level emulation of kernels/indexer.cu's `top_k_rows_s`: the four 8-bit radix passes
(the block's histogram is the sum of the warps' ones, whatever the counting), warp 0's scan
for the threshold bin (lane l holds bins 8l..8l+7, a suffix sum over the lanes, the highest
lane with a hit), and the output pass (warp w owns [w·per, w·per + per), per a multiple of
32; its counts, the scan over the warps, then rounds of 32 keys with ballot ranks). Checked
against the set a stable sort gives (the k largest under f32 total order, ties to the lower
index) and the order the kernel promises (keys above T in index order, then the ties taken in
index order), for rows with ties, ±0, ±inf, NaN and a constant row, at several widths and
block sizes. Checks the index arithmetic and the scan without a GPU; the CUDA conformance
suite ("top_k", "top_k wide") checks the kernel.

    python3 benches/cuda/emulate_topk_shared.py     (numpy; a few seconds)
"""
import numpy as np

rng = np.random.default_rng(5)


def order_key(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    neg = (b & 0x80000000) != 0
    return np.where(neg, (~b) & 0xFFFFFFFF, b | 0x80000000).astype(np.uint64)


def threshold_scan(hist, remaining):
    """Warp 0's pick: (bin, count above it) as the kernel's lanes compute it."""
    h = hist.reshape(32, 8)
    tot = h.sum(axis=1)
    suf = np.cumsum(tot[::-1])[::-1]  # lane l: its bins and every lane above
    best_lane, b_lane, cum_lane = -1, 0, 0
    for lane in range(32):
        cum = int(suf[lane] - tot[lane])
        b, cum_b = 0, 0
        for j in range(7, -1, -1):
            binv = 8 * lane + j
            if b == 0 and binv > 0 and cum + int(h[lane, j]) >= remaining:
                b, cum_b = binv, cum
            cum += int(h[lane, j])
        if b > 0:
            best_lane, b_lane, cum_lane = lane, b, cum_b
    if best_lane < 0:  # no hit: lane 0 writes bin 0 and every key above it
        return 0, int(suf[0] - h[0, 0])
    return b_lane, cum_lane


def top_k_rows_s(x, k, bd):
    n = len(x)
    nw = bd // 32
    keys = order_key(x)
    prefix, mask, remaining = 0, 0, k
    for p in range(4):
        shift = 24 - 8 * p
        inb = (keys & mask) == prefix
        hist = np.bincount(((keys[inb] >> shift) & 255).astype(np.int64), minlength=256)
        b, cum_b = threshold_scan(hist, remaining)
        prefix |= b << shift
        remaining -= cum_b
        mask |= 255 << shift
    T = prefix
    n_gt = k - remaining
    per = ((n + nw - 1) // nw + 31) // 32 * 32
    out = np.full(k, 0xFFFFFFFF, np.int64)
    cgt = []
    ceq = []
    for w in range(nw):
        a, e = min(n, w * per), min(n, min(n, w * per) + per)
        cgt.append(int((keys[a:e] > T).sum()))
        ceq.append(int((keys[a:e] == T).sum()))
    for w in range(nw):
        a, e = min(n, w * per), min(n, min(n, w * per) + per)
        ogt, oeq, left = sum(cgt[:w]), sum(ceq[:w]), cgt[w]
        c = a
        while c < e and (left > 0 or oeq < remaining):
            idx = np.arange(c, c + 32)
            valid = idx < e
            kk = np.where(valid, keys[np.minimum(idx, n - 1)], 0)
            gt = valid & (kk > T)
            eq = valid & (kk == T)
            for lane in range(32):
                if gt[lane]:
                    out[ogt + int(gt[:lane].sum())] = idx[lane]
                if eq[lane]:
                    r = oeq + int(eq[:lane].sum())
                    if r < remaining:
                        out[n_gt + r] = idx[lane]
            ogt += int(gt.sum())
            left -= int(gt.sum())
            oeq += int(eq.sum())
            c += 32
    return out


def want(x, k):
    keys = order_key(x)
    order = sorted(range(len(x)), key=lambda i: (-int(keys[i]), i))
    chosen = sorted(order[:k])
    T = keys[order[k - 1]]
    above = [i for i in chosen if keys[i] > T]
    ties = [i for i in chosen if keys[i] == T]
    return np.array(above + ties, np.int64)


def rows():
    yield "crowded", (rng.random(16384) ** 2 * 3).astype(np.float32) * (rng.random(16384) > 0.14)
    yield "rounded ties", np.round(rng.standard_normal(5000) * 8).astype(np.float32)
    s = rng.standard_normal(3000).astype(np.float32)
    s[::7] = 0.0
    s[1::7] = -0.0
    s[2::50] = np.inf
    s[3::50] = -np.inf
    s[4::97] = np.nan
    yield "specials", s
    yield "constant", np.full(777, 1.5, np.float32)
    yield "short", rng.standard_normal(37).astype(np.float32)


for name, x in rows():
    n = len(x)
    for k in sorted({1, 6, min(n, 2048), n // 3 or 1, n}):
        for bd in sorted({32, min(1024, 1 << (n - 1).bit_length()), 256}):
            if bd < 32:
                continue
            got = top_k_rows_s(x, k, bd)
            exp = want(x, k)
            assert np.array_equal(got, exp), (name, n, k, bd, got[:10], exp[:10])
    print(f"{name}: n {n} ok")
print("top_k_rows_s emulation: every case matches the stable-sort selection and order")
