"""Page 02's fused backward at 8 K (bf16, fp32): cache hints on the loads and the dx store, % of a copy."""
import os, sys, re, importlib.util
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton
src = open("tutorials/02_layer_norm.py").read()
g = {"__name__": "probe02", "__file__": "tutorials/02_layer_norm.py"}
exec(compile(untimed_source(src), "tutorials/02_layer_norm.py", "exec"), g)
kernel_src = src[src.index("@triton.jit\ndef layer_norm_bwd_kernel("):src.index("@triton.jit\ndef sum_partials_kernel(")]
variants = {
    "page": kernel_src,
    "loads evict_first": kernel_src.replace("mask=in_range, other=0.0)", "mask=in_range, other=0.0, eviction_policy='evict_first')"),
    "loads .cg": kernel_src.replace("mask=in_range, other=0.0)", "mask=in_range, other=0.0, cache_modifier='.cg')"),
    "dx .cs": kernel_src.replace("mask=row_ok[:, None] & col_ok[None, :])", "mask=row_ok[:, None] & col_ok[None, :], cache_modifier='.cs')"),
}
variants["evict_first + dx .cs"] = variants["loads evict_first"].replace("mask=row_ok[:, None] & col_ok[None, :])", "mask=row_ok[:, None] & col_ok[None, :], cache_modifier='.cs')")
mods = {}
for i, (name, text) in enumerate(variants.items()):
    path = f"/tmp/ln02b_{i}.py"
    open(path, "w").write("import triton, triton.language as tl\n" + text)
    spec = importlib.util.spec_from_file_location(f"ln02b_{i}", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    mods[name] = m.layer_norm_bwd_kernel
torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
            fn()
        fn = c.replay
    return triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")
g["MAX_BWD_FUSED_N"].update({2: 8192, 4: 8192})
for dtype in (torch.bfloat16, torch.float32):
    n = 8192; m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype); w = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn_like(x); dx = torch.empty_like(x); mean = x.float().mean(1); rstd = 1 / x.float().std(1)
    dw = torch.empty(n, device="cuda", dtype=dtype); db = torch.empty_like(dw)
    nbytes = x.numel() * x.element_size()
    for rnd in range(2):
        light = 2 * nbytes / bench(lambda: dx.copy_(x), graph=False) * 1e-6
        for name, k in mods.items():
            for warps in ((16, 32) if dtype == torch.bfloat16 else (8, 32)):
                g["layer_norm_bwd_kernel"] = k
                g["_warps"], old = (lambda *a, _w=warps, **kw: _w), g["_warps"]
                ms = bench(lambda: g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db))
                g["_warps"] = old
                ref = torch.empty_like(dx)
                print(f"round {rnd} bwd {str(dtype)[6:]:9s} {n} w{warps:2d} {100 * 3 * nbytes / ms * 1e-6 / light:6.1f}%  {name}", flush=True)
