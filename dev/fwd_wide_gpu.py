"""Dev only: forward passes of 32768-column rows (M x N = 2^26), where one program holds a whole row
and fits once per SM: RMSNorm (fused vs the chunked two-pass kernel at several chunks, warps, grids)
and layer norm (fused vs chunked). Kernel-only CUDA-graph timings with do_bench, next to a copy.

PYTHONUNBUFFERED=1 python3 dev/fwd_wide_gpu.py
"""
import time

import pandas as pd
import torch
from gpu_common import load, bench

T0 = time.time()
pd.set_option("display.width", 250)
pd.set_option("display.max_rows", 500)


torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
rms = load("tutorials/04_rms_norm.py")


print(torch.cuda.get_device_name(0), flush=True)
recs = []
for dtype, n in ((torch.float32, 32768), (torch.bfloat16, 32768), (torch.float32, 16384)):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y, rstd, mean = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    nb = x.numel() * x.element_size()
    copy = 2 * nb / bench(lambda: y.copy_(x), graph=False) * 1e-6
    y64 = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-6)
    cands = [("rms fused", {}, None)]
    for chunk in (2048, 4096, 8192):
        for bpt in (16, 32, 64):
            for grid_cap in (None, 1, 2, 4):
                cands.append((f"rms chunked {chunk}/{bpt}/cap{grid_cap}", dict(chunk_n=chunk, config=dict(rms["FWD"], CHUNK_BYTES_PER_THREAD=bpt)), grid_cap))
    for name, kw, cap in cands:
        kernel, grid, meta = rms["forward_launch"](m, n, x.element_size(), True, **kw)
        if cap is not None:
            grid = min(grid, cap * rms["NUM_SMS"])
        fn = lambda: kernel[(grid,)](x, w, y, rstd, m, n, x.stride(0), y.stride(0), 1e-6, **meta)
        t = bench(fn)
        err = ((y.double() - y64).norm() / y64.norm()).item()
        recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 2 * nb / t * 1e-6 / copy, warps=meta["num_warps"], grid=grid, err=err))
        print(recs[-1], flush=True)
    y64 = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    for name, kw in (("ln fused", {}), ("ln chunked persistent", dict(max_fused_n=0)),
                     ("ln chunked plain", dict(max_fused_n=0, persistent=False))):
        fn = lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, **kw)
        t = bench(fn)
        err = ((y.double() - y64).norm() / y64.norm()).item()
        recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 2 * nb / t * 1e-6 / copy, err=err))
        print(recs[-1], flush=True)
    del x, y, y64
    torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.sort_values(["dtype", "N", "pct"], ascending=False).to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
print(f"total {time.time() - T0:.0f} s")
