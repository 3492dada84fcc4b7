"""Lane-level emulation of kernels/mla.cu's `mla_scores_4x4` (256 threads: 16 (4 heads, 4 keys)
tiles × 16 parts of dk, then the 16-lane reduce-scatter), checked against a float64 dot for
the scores it writes, including fewer heads than 16 (the last rows clamped), more than 16 (a
second pass), fewer keys than the tile, dead rows (−inf) and dk below 64. It checks the index
mapping and the shuffle pattern without a GPU; the CUDA conformance suite checks the kernel.

    python3 benches/cuda/emulate_mla_scores.py     (numpy; about a minute)
"""
import numpy as np  # noqa: E402
rng=np.random.default_rng(1)
KT=16
def run(hg, nt, dk, st, G):
    qs=rng.standard_normal((G, st)).astype(np.float32); ks=rng.standard_normal((KT, st)).astype(np.float32)
    rows=[ (i if rng.random()<0.9 else -1) for i in range(KT)]
    scale=np.float32(0.1)
    ps=np.full((G,KT), np.nan, np.float32)
    d4=dk//4
    for h0 in range(0,hg,16):
        # per thread state
        W={}
        for tid in range(256):
            part=tid&15; c=tid>>4; hb=c>>2; kb=c&3
            a=np.zeros(16,np.float32)
            for i in range(part,d4,16):
                for hh in range(4):
                    qrow=qs[min(h0+4*hb+hh,hg-1)]
                    for kk in range(4):
                        krow=ks[4*kb+kk]
                        for e in range(4):
                            a[4*hh+kk]=np.float32(qrow[4*i+e]*krow[4*i+e]+a[4*hh+kk])
            W[tid]=a
        def shx(vals,m): return {t: vals[(t&~31)|((t&31)^m)] for t in vals}
        b=lambda t,bit: bool((t&15)&bit)
        w8={t:[ (W[t][8+u] if b(t,8) else W[t][u]) for u in range(8)] for t in W}
        give={t:[(W[t][u] if b(t,8) else W[t][8+u]) for u in range(8)] for t in W}
        w8={t:[np.float32(w8[t][u]+give[(t&~31)|((t&31)^8)][u]) for u in range(8)] for t in W}
        g4={t:[(w8[t][u] if b(t,4) else w8[t][4+u]) for u in range(4)] for t in W}
        w4={t:[np.float32((w8[t][4+u] if b(t,4) else w8[t][u])+g4[(t&~31)|((t&31)^4)][u]) for u in range(4)] for t in W}
        g2={t:[(w4[t][u] if b(t,2) else w4[t][2+u]) for u in range(2)] for t in W}
        w2={t:[np.float32((w4[t][2+u] if b(t,2) else w4[t][u])+g2[(t&~31)|((t&31)^2)][u]) for u in range(2)] for t in W}
        g1={t:(w2[t][0] if b(t,1) else w2[t][1]) for t in W}
        for t in W:
            part=t&15; c=t>>4; hb=c>>2; kb=c&3
            dot=np.float32((w2[t][1] if b(t,1) else w2[t][0])+g1[(t&~31)|((t&31)^1)])
            g=h0+4*hb+(part>>2); kk=4*kb+(part&3)
            if g<hg: ps[g,kk]= dot*scale if (kk<nt and rows[kk]>=0) else -np.inf
    for g in range(hg):
        for kk in range(KT):
            want = np.dot(qs[g,:dk].astype(np.float64), ks[kk,:dk].astype(np.float64))*0.1 if (kk<nt and rows[kk]>=0) else -np.inf
            got=ps[g,kk]
            assert (np.isinf(want) and np.isinf(got)) or abs(got-want) <= 1e-4*(1+abs(want)), (g,kk,got,want)
    assert not np.isnan(ps[:hg]).any()
run(16,16,576,580,16); run(16,5,576,580,16); run(10,16,64,68,16); run(40,16,64,68,40); run(3,7,20,24,3)
print("mla_scores_4x4 emulation: every score within 1e-4 of the float64 dot")
