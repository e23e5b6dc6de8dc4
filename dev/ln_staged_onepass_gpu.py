"""Scratch (issue 17): deep dive 22's staged forward with mean and variance in one pass (shifted sums). Removed from dev/ in the next commit."""
import torch, triton, statistics
path = "tutorials/deep_dives/22_layer_norm_staged_gluon.py"
src = open(path).read()
g = {"__name__": "p22"}; exec(compile(src[:src.index("# %%\n# Correctness")], path, "exec"), g)
src2 = open("dev/ln_staged_onepass_kernel.py").read()
g2 = dict(g); exec(compile(src2, "dev/ln_staged_onepass_kernel.py", "exec"), g2)
fwd = g["layer_norm_forward"]
def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    t = fn
    if graph:
        c = torch.cuda.CUDAGraph()
        with torch.cuda.graph(c): fn()
        t = c.replay
    return triton.testing.do_bench(t, warmup=5, rep=20, return_mode="median")
CFG = dict(MIN_N=16384, MAX_N=32768, CHUNK_N=8192, num_warps=16, PER_SM=3)
def run_with(kernel):
    def f(x, w, b):
        g["layer_norm_fwd_staged_kernel"] = kernel
        return fwd(x, w, b, cfg=CFG)
    return f
orig = g["layer_norm_fwd_staged_kernel"]
fns = {"page": run_with(orig), "onepass": run_with(g2["ln_staged_onepass_kernel"])}
res = {}
for n, stride in [(16384, 16384), (20000, 20000), (24576, 24576), (32768, 32768), (32752, 32784)]:
    xf = (torch.randn(2**26 // n, stride, device="cuda") * 3 + 10)
    x = xf.to(torch.bfloat16)[:, :n]
    w, b = torch.randn(n, device="cuda", dtype=x.dtype), torch.randn(n, device="cuda", dtype=x.dtype)
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
    for name, fn in fns.items():
        y = fn(x, w, b)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        print(n, name, "rel err", f"{err:.2e}", flush=True)
    if stride != n: continue
    out = torch.empty_like(x); moved = 2 * x.numel() * 2
    for rnd in range(3):
        light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
        for name, fn in fns.items():
            res.setdefault((n, name), []).append(100 * moved / bench(lambda: fn(x, w, b)) * 1e-6 / light)
    for name in fns:
        print(n, name, " ".join(f"{v:.1f}" for v in res[(n, name)]), f"med {statistics.median(res[(n, name)]):.1f}", flush=True)
