"""Dev only: the RMSNorm split backward at row lengths that are not a power of two times SLICE_N
(slices = cdiv(N, SLICE_N), shares' slots padded to a power of two), against float64, bitwise
repeatability over 5 runs, and kernel-only CUDA-graph timings with do_bench next to an eager copy.

PYTHONUNBUFFERED=1 python3 dev/rms_slices_gpu.py
"""
import os

import torch
import triton


def load(path):
    src = open(path).read()
    g = {"__name__": "dev_" + os.path.basename(path)[:2]}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), g)
    return g


torch.cuda.set_stream(torch.cuda.Stream())
rms = load("tutorials/04_rms_norm.py")


def bench(fn, graph=True):
    fn()
    torch.cuda.synchronize()
    if not graph:
        return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=25, return_mode="median")


print(torch.cuda.get_device_name(0), flush=True)
for dtype, n in ((torch.bfloat16, 16384), (torch.bfloat16, 16385), (torch.bfloat16, 12290), (torch.bfloat16, 20000),
                 (torch.float32, 20000), (torch.float32, 32768), (torch.bfloat16, 65553)):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    y, rstd = torch.empty_like(x), torch.empty(m, device="cuda")
    rms["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)
    nb = x.numel() * x.element_size()
    copy = 2 * nb / bench(lambda: y.copy_(x), graph=False) * 1e-6
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    fn = lambda: rms["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw)
    t = bench(fn)
    kernel, grid, meta = rms["backward_launch"](m, n, x.element_size(), True, True, dtype=dtype,
                                                tensors=(x, w, rstd, dy, dx))
    xh = x.double() * rstd.double()[:, None]
    g = dy.double() * w.double()
    dx64 = (g - xh * (g * xh).mean(1, keepdim=True)) * rstd.double()[:, None]
    err = ((dx.double() - dx64).norm() / dx64.norm()).item()
    dw64 = (dy.double() * xh).sum(0)
    dw_err = ((dw.double() - dw64).norm() / dw64.norm()).item()
    ref = (dx.clone(), dw.clone())
    same = True
    for _ in range(5):
        fn()
        same &= torch.equal(dx, ref[0]) and torch.equal(dw, ref[1])
    print(dict(dtype=str(dtype)[6:], N=n, pct=round(100 * 3 * nb / t * 1e-6 / copy, 1), kernel=kernel.__name__,
               slices=meta.get("SLICES"), slots=meta.get("SLOTS"), pack=meta.get("PACK"), err=f"{err:.1e}",
               dw_err=f"{dw_err:.1e}", det=same), flush=True)
    del x, dy, dx, y, xh, g, dx64
    torch.cuda.empty_cache()
