"""Dev only: the layer-norm chunked (two-pass) forward of tutorial 02 at N = 16384..131072 over chunk
sizes and warps (FWD_CHUNK_N, FWD_CHUNK_WARPS), against the page's forward, kernel-only, CUDA-graph
timed with do_bench, % of an eager copy; y against float64.

PYTHONUNBUFFERED=1 python3 dev/ln_fwd_chunk_sweep_gpu.py
"""
import itertools
import time

import pandas as pd
import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
pd.set_option("display.width", 250)
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
recs = []
for dtype in (torch.float32, torch.bfloat16):
    for n in (16384, 32768, 65536):
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        nb = x.numel() * x.element_size()
        out = torch.empty_like(x)
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        del out
        xd = x.double()
        y64 = (xd - xd.mean(1, keepdim=True)) / (xd.var(1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        y64 = y64 * w.double() + b.double()
        del xd
        cands = [("page", None, None)] + list(itertools.product((1024, 2048, 4096, 8192), (4, 8, 16, 32)))
        cands = [("page", None, None)] + [(f"{c}/{wp}", c, wp) for c, wp in cands[1:] if c // (32 * wp) >= 2]
        for name, chunk, warps in cands:
            kw = {} if chunk is None else dict(max_fused_n=0, split={})
            if chunk:
                ln["FWD_CHUNK_N"], ln["FWD_CHUNK_WARPS"] = chunk, warps
            try:
                fn = lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, **kw)
                fn()
                t = bench(fn)
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 2 * nb / t * 1e-6 / copy,
                                 err=rel(y, y64)))
            except Exception as exc:  # noqa: BLE001
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, err=repr(exc)[:100]))
        del x, y, y64
        torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.pivot_table(index="cand", columns=["dtype", "N"], values="pct").to_string(float_format=lambda v: f"{v:.1f}"))
print(df[df.pct.isna()].to_string() if "pct" in df else df.to_string())
print(f"total {time.time() - T0:.0f} s", flush=True)
