# Session 27 probe (H100): run from the repository root. Kept in history only (DESIGN.md names the commit).
"""06 (branch issue-32-cross-entropy): cross_entropy_kernel over chunk bytes, stages, programs an SM, hints; % of a copy.
Run from a checkout of the branch: python3 probe/ce_sweep.py [path/to/06_cross_entropy.py]"""
import sys, itertools, time
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton
path = sys.argv[1] if len(sys.argv) > 1 else "tutorials/06_cross_entropy.py"
g = {"__name__": "probe06", "__file__": path}
exec(compile(untimed_source(open(path).read()), path, "exec"), g)
torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn):
    fn(); torch.cuda.synchronize()
    with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(c.replay, warmup=5, rep=25, return_mode="median")
K = g["cross_entropy_kernel"]
t0 = time.time()
for dtype, V in itertools.product((torch.bfloat16, torch.float32), (32000, 50304, 128256, 151936, 262144)):
    total = 2**30 if dtype == torch.bfloat16 else 2**29
    x = torch.randn(total // V, V, device="cuda", dtype=dtype); t = torch.randint(0, V, (x.shape[0],), device="cuda")
    dx, out = torch.empty_like(x), torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    light = 2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25, return_mode="median") * 1e-6
    losses = torch.empty(x.shape[0], device="cuda"); consts = torch.tensor([1.0 / x.shape[0], float(V)], device="cuda")
    page = {}
    for name, grad in (("fwd", False), ("fwd+bwd", True)):
        f = lambda: g["cross_entropy_rows"](x, t, None, -100, 0.0, True, dx if grad else None)
        page[name] = 100 * (2 if grad else 1) * nbytes / bench(f) * 1e-6 / light
    res = []
    for cb, st, per_sm, hints in itertools.product((8192, 16384, 32768), (1, 2, 3, 4), (1, 2, 4), (True, False)):
        chunk = max(16, min(cb // x.element_size(), triton.next_power_of_2(V)))
        meta = dict(CHUNK=chunk, num_warps=max(4, min(16, chunk * x.element_size() // 2048)), STAGES=st,
                    KEEP="evict_last" if hints else "", DROP="evict_first" if hints else "", STREAM=".cs" if hints else "")
        grid = min(x.shape[0], per_sm * g["NUM_SMS"])
        for name, grad in (("fwd", False), ("fwd+bwd", True)):
            f = lambda: K[(grid,)](x, t, x, consts, losses, dx if grad else x, x.shape[0], V, V, V, -100, 0.0,
                                   HAS_WEIGHT=False, SMOOTH=False, WRITE_GRAD=grad, **meta)
            try:
                res.append((name, 100 * (2 if grad else 1) * nbytes / bench(f) * 1e-6 / light, f"c{cb // 1024}K s{st} x{per_sm}{' h' if hints else ''}"))
            except Exception as e:
                res.append((name, 0.0, f"c{cb // 1024}K s{st} x{per_sm} {type(e).__name__}"))
    for name in ("fwd", "fwd+bwd"):
        best = sorted((r for r in res if r[0] == name), key=lambda r: -r[1])[:6]
        print(f"{str(dtype)[6:]:8s} V {V:6d} {name:7s} page {page[name]:5.1f} | " + " ".join(f"{c} {p:.1f}" for _, p, c in best), flush=True)
    del x, dx, out
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
