"""Page 02's forward at 8-32 K and backward at 4-16 K: the page's choice against forced configs, % of a copy."""
import os, sys, itertools
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton
src = open("tutorials/02_layer_norm.py").read()
g = {"__name__": "probe02", "__file__": "tutorials/02_layer_norm.py"}
exec(compile(untimed_source(src), "tutorials/02_layer_norm.py", "exec"), g)
P = type("P", (), g)
torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
            fn()
        fn = c.replay
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")

def info(kernel, args, meta):
    c = kernel.warmup(*args, grid=(1,), **meta); c._init_handles()
    return c.n_regs, c.n_spills

TOTAL = 2**26
rows = []
for dtype, n in itertools.product((torch.bfloat16, torch.float32), (8192, 16384, 32768)):
    m = TOTAL // n
    x = torch.randn(m, n, device="cuda", dtype=dtype); w = torch.randn(n, device="cuda", dtype=dtype); b = torch.randn_like(w)
    y = torch.empty_like(x); mean = torch.empty(m, device="cuda"); rstd = torch.empty(m, device="cuda")
    nbytes = x.numel() * x.element_size()
    light = 2 * nbytes / bench(lambda: y.copy_(x), graph=False) * 1e-6
    flags = dict(HAS_W=True, HAS_B=True)
    args = (x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5)
    k, meta, grid = P._fwd_config(m, n, x.element_size(), lambda kk, mm: P.programs_per_sm(kk, args, mm | flags))
    ms = bench(lambda: P.layer_norm_rows_forward(x, y, w, b, mean, rstd, 1e-5))
    rows.append(("fwd", str(dtype)[6:], n, f"page {k.__name__[11:]} {meta} grid {grid}", 100 * 2 * nbytes / ms * 1e-6 / light))
    bn = triton.next_power_of_2(n)
    for bm, warps in itertools.product((1, 2), (8, 16, 32)):
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
        try:
            regs, spills = info(P.layer_norm_fwd_kernel, args, meta | flags)
            occ = P.programs_per_sm(P.layer_norm_fwd_kernel, args, meta | flags)
            ms = bench(lambda: P.layer_norm_fwd_kernel[(triton.cdiv(m, bm),)](*args, **meta, **flags))
            rows.append(("fwd", str(dtype)[6:], n, f"whole BM{bm} w{warps} regs {regs} spill {spills} occ {occ}", 100 * 2 * nbytes / ms * 1e-6 / light))
        except Exception as e:
            rows.append(("fwd", str(dtype)[6:], n, f"whole BM{bm} w{warps} failed {type(e).__name__}", float("nan")))
    for chunk, warps in itertools.product((4096, 8192, 16384), (16, 32)):
        if chunk > n: continue
        ms = bench(lambda: P.layer_norm_rows_forward(x, y, w, b, mean, rstd, 1e-5, chunk_n=chunk) if warps == 32 else
                   P.layer_norm_fwd_chunked_kernel[(m,)](*args, CHUNK_N=chunk, num_warps=warps, **flags))
        rows.append(("fwd", str(dtype)[6:], n, f"chunked {chunk} w{warps}", 100 * 2 * nbytes / ms * 1e-6 / light))
    del x, y
    print("\n".join(f"{r[0]} {r[1]:9s} {r[2]:6d} {r[4]:6.1f}%  {r[3]}" for r in rows[-20:] if r[2] == n and r[1] == str(dtype)[6:]), flush=True)

# backward: page, and fused forced, at 4-16 K
for dtype, n in itertools.product((torch.bfloat16, torch.float32), (4096, 8192, 16384)):
    m = TOTAL // n
    x = torch.randn(m, n, device="cuda", dtype=dtype); w = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn_like(x); dx = torch.empty_like(x); mean = x.float().mean(1); rstd = 1 / x.float().std(1)
    dw = torch.empty(n, device="cuda", dtype=dtype); db = torch.empty_like(dw)
    nbytes = x.numel() * x.element_size()
    light = 2 * nbytes / bench(lambda: dx.copy_(x), graph=False) * 1e-6
    ms = bench(lambda: P.layer_norm_rows_backward(x, dy, dx, w, mean, rstd, dw, db))
    kern, lines = P.layer_norm_rows_backward(x, dy, dx, w, mean, rstd, dw, db)
    print(f"bwd {str(dtype)[6:]:9s} {n:6d} {100 * 3 * nbytes / ms * 1e-6 / light:6.1f}%  page {kern.__name__} lines {lines}", flush=True)
    for chunk in (2048, 4096, 8192):
        if chunk > n: continue
        ms = bench(lambda: P.layer_norm_rows_backward(x, dy, dx, w, mean, rstd, dw, db, chunk_n=chunk))
        print(f"bwd {str(dtype)[6:]:9s} {n:6d} {100 * 3 * nbytes / ms * 1e-6 / light:6.1f}%  chunked {chunk}", flush=True)
    saved = dict(P.MAX_BWD_FUSED_N)
    g["MAX_BWD_FUSED_N"].update({2: 16384, 4: 16384})
    for warps in (8, 16, 32):
        g["_warps"], old = (lambda *a, _w=warps, **k: _w), g["_warps"]
        for per_sm in (1, 2):
            try:
                g["BWD_WARPS_PER_SM"], oldw = per_sm * warps, g["BWD_WARPS_PER_SM"]
                ms = bench(lambda: P.layer_norm_rows_backward(x, dy, dx, w, mean, rstd, dw, db))
                kern, lines = P.layer_norm_rows_backward(x, dy, dx, w, mean, rstd, dw, db)
                print(f"bwd {str(dtype)[6:]:9s} {n:6d} {100 * 3 * nbytes / ms * 1e-6 / light:6.1f}%  fused w{warps} up to {per_sm}/SM lines {lines}", flush=True)
            except Exception as e:
                print(f"bwd {str(dtype)[6:]:9s} {n:6d} fused w{warps} failed {type(e).__name__}: {str(e)[:100]}")
            finally:
                g["BWD_WARPS_PER_SM"] = oldw
        g["_warps"] = old
    g["MAX_BWD_FUSED_N"].clear(); g["MAX_BWD_FUSED_N"].update(saved)
    del x, dy, dx
