"""Scratch (issue 17): deep dive 22's staged forward at 4-16 warps, chunks 4096/8192, 2-3 programs an SM. Removed from dev/ in the next commit."""
import torch, triton, statistics
src = open("tutorials/deep_dives/22_layer_norm_staged_gluon.py").read()
g = {"__name__": "p22"}; exec(compile(src[:src.index("# %%\n# Correctness")], "tutorials/deep_dives/22_layer_norm_staged_gluon.py", "exec"), g)
fwd = g["layer_norm_forward"]
def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    t = fn
    if graph:
        c = torch.cuda.CUDAGraph()
        with torch.cuda.graph(c): fn()
        t = c.replay
    return triton.testing.do_bench(t, warmup=5, rep=20, return_mode="median")
CFGS = {f"w{w}c{c}p{p}": dict(MIN_N=16384, MAX_N=32768, CHUNK_N=c, num_warps=w, PER_SM=p)
        for (w, c, p) in [(16, 8192, 3), (8, 8192, 3), (8, 4096, 3), (4, 8192, 3), (8, 8192, 2), (16, 8192, 2)]}
res = {}
for n in (16384, 20000, 24576, 32768):
    x = torch.randn(2**26 // n, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
    out = torch.empty_like(x); moved = 2 * x.numel() * 2
    ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float())
    for name, cfg in CFGS.items():
        y = fwd(x, w, b, cfg=cfg)
        assert (y.float() - ref).abs().max() < 0.1, name
    for rnd in range(3):
        light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
        for name, cfg in CFGS.items():
            gbs = moved / bench(lambda: fwd(x, w, b, cfg=cfg)) * 1e-6
            res.setdefault((n, name), []).append(100 * gbs / light)
    for name in CFGS:
        print(n, name, " ".join(f"{v:.1f}" for v in res[(n, name)]), f"med {statistics.median(res[(n, name)]):.1f}", flush=True)
