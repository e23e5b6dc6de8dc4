"""Dev only: the page's forward that reads x twice (layer_norm_fwd_twice_kernel) at several bytes per
thread, against the page's one-read kernel and dev/ln_fwd_reload_gpu.py's 1-D kernel at the same warps
(an earlier run of this script measured a RELOAD switch inside the 2-D block kernel: 59 registers
where the 1-D kernel took 32 at bf16 16384, 69% against 99%);
kernel-only, CUDA-graph timed, % of an eager copy; registers and spills of each compiled kernel.

PYTHONUNBUFFERED=1 python3 dev/ln_reload_page_gpu.py
"""
import os
import sys
import time

import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
VARIANT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ln_fwd_reload_gpu.py")
src = open(VARIANT).read()
variant = {"__name__": "variant"}
exec(compile(src[: src.index("results = []")].replace('ln = load("tutorials/02_layer_norm.py")', ""),
             VARIANT, "exec"), variant)
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

for dtype, n in [(torch.bfloat16, 8192), (torch.bfloat16, 16384), (torch.float32, 8192), (torch.float32, 16384),
                 (torch.float32, 32768), (torch.bfloat16, 32768)]:
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 3 + 1
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
    out = torch.empty_like(x)
    copy_ms = bench(lambda: out.copy_(x), graph=False)
    del out
    runs = [("page as is", dict(reload=None), None), ("page, one read", dict(reload=False), None)]
    for bpt in (16, 32, 64, 128):
        warps = min(32, max(4, n * x.element_size() // (32 * bpt)))
        runs.append((f"page, twice kernel, {bpt} B/thread ({warps} warps)", dict(reload=True, bpt=bpt), None))
        runs.append((f"1-D variant, reload, {warps} warps", None,
                     dict(BLOCK_N=n, CHUNK=n, RELOAD=1, STATS=0, FIRST=0, EVEN=False, SECOND=3, num_warps=warps)))
    seen = set()
    for name, page, meta in runs:
        if name in seen:
            continue
        seen.add(name)
        if page is not None:
            ln["FWD_BYTES_PER_THREAD"] = page.get("bpt", 64)
            fn = lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, reload=page["reload"])
            kernel = ln["layer_norm_fwd_twice_kernel" if page["reload"] else "layer_norm_fwd_kernel"]
        else:
            fn = lambda: variant["fwd_reload"][(m,)](x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, **meta)
            kernel = variant["fwd_reload"]
        y.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = rel(y, ref)
        pcts = [copy_ms / bench(fn) * 100 for _ in range(3)]
        # the last compiled version of the kernel: registers and spills
        regs = spills = "?"
        try:
            for cache in kernel.device_caches.values():
                compiled = list(cache[0].values())[-1]
                regs, spills = compiled.n_regs, compiled.n_spills
        except Exception as e:
            regs = type(e).__name__
        print(f"{str(dtype)[6:]:8s} {n:6d} {name:42s} {' '.join(f'{p:5.1f}' for p in pcts)} err {err:.1e}"
              f" regs {regs} spills {spills} t={time.time() - T0:.0f}s", flush=True)
    del x, y, ref
    torch.cuda.empty_cache()
