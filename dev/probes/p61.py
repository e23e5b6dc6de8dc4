# V=32000-class sweep of 61's split launch: kernel alone (ce_split_rows with dx) and drop-in fwd+bwd, % of copy
import sys, torch, triton
src = open("tutorials/deep_dives/61_cross_entropy_split_rows.py").read()
src = src[:src.index("# Correctness")]
src = src[:src.rindex("# %%")]
import importlib.util, types
open("probe/_p61_src.py", "w").write(src)
spec = importlib.util.spec_from_file_location("p61src", "probe/_p61_src.py")
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
ns = mod.__dict__
def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=30, return_mode="median")
def copy_gbs(x):
    out = torch.empty_like(x)
    return max(2 * x.numel() * x.element_size() / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=30, return_mode="median") * 1e-6 for _ in range(2))
orig = ns["_split_config"]
for dtype, V, cfgs in [(d, v, [None]) for d in (torch.bfloat16, torch.float32) for v in (32000, 50304, 128256, 262144)]:
    total = 2**30 if dtype == torch.bfloat16 else 2**29
    x = torch.randn(total // V, V, device="cuda", dtype=dtype)
    t = torch.randint(0, V, (x.shape[0],), device="cuda")
    dx = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    light = copy_gbs(x)
    core = nbytes / bench(lambda: ns["core_rows"](x, t, None, -100, True, dx)) * 1e-6
    xs = x.detach().requires_grad_()
    print(f"{dtype} V={V} copy {light:.0f}  core kernel {100*core/light:.1f}%", flush=True)
    for cfg in cfgs:
        pass
        k = nbytes / bench(lambda: ns["ce_split_rows"](x, t, None, -100, True, dx)) * 1e-6
        d = nbytes / bench(lambda: torch.autograd.grad(ns["cross_entropy"](xs, t), xs)) * 1e-6
        print(f"  split kernel {100*k/light:.1f}%  drop-in {100*d/light:.1f}%", flush=True)
    ns["_split_config"] = orig
    fl = torch.empty(x.shape[0] * 4, dtype=torch.int64, device="cuda")
    over = bench(lambda: ns["loss_constants"](t, None, -100, True, V, fl))
    print(f"  constants + flags alone: {over*1e3:.1f} us of {nbytes/light*1e-3:.1f} us copy", flush=True)
    x = xs = dx = None; torch.cuda.empty_cache()
