"""Dev only: the layer-norm page's own kernels at every N of the page's sweep (M x N = 2^26), forward
with and without the FWD_MIN_BYTES_PER_SM rule, backward as configured; plus the split configuration
that showed NaNs before the stale-copy re-read (bf16 and fp32, 2 x 2048 tiles, 32 slices), and the
RMSNorm split backward after the same re-read. Kernel-only CUDA-graph timings with do_bench.

PYTHONUNBUFFERED=1 python3 dev/ln_page_check_gpu.py
"""
import os
import time

import pandas as pd
import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)
OUT = os.environ.get("OUT", "/tmp")


torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
rms = load("tutorials/04_rms_norm.py")


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in [2**k for k in range(9, 18)]:
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: y.copy_(x), graph=False) * 1e-6
        rec = dict(dtype=str(dtype)[6:], N=n, copy=copy)
        for rule in (0, 40960):
            ln["FWD_MIN_BYTES_PER_SM"] = rule
            t = bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
            rec[f"fwd rule={rule}"] = 100 * 2 * nb / t * 1e-6 / copy
        y64 = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        rec["fwd err"] = rel(y, y64)
        del y64
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
        plan = fn()
        t = bench(fn)
        rec["bwd"] = 100 * 3 * nb / t * 1e-6 / copy
        rec["bwd kernel"] = plan["kernel"].__name__.replace("layer_norm_bwd_", "")
        rec["regs"] = plan["n_regs"]
        rec["per_sm"] = plan["per_sm"]
        xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
        g = dy.double() * w.double()
        dx64 = (g - xh * (g * xh).mean(1, keepdim=True) - g.mean(1, keepdim=True)) * rstd.double()[:, None]
        rec["bwd err"] = max(rel(dx, dx64), rel(dw, (dy.double() * xh).sum(0)), rel(db, dy.double().sum(0)))
        del xh, g
        if n == 65536:  # the configuration that showed NaNs: 2 x 2048 tiles, 32 slices
            cfg = dict(SLICE_N=2048, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32 if dtype == torch.bfloat16 else 64)
            fn2 = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, split={2: cfg, 4: cfg})
            bad = 0
            for _ in range(20):
                dx.fill_(float("nan"))
                fn2()
                bad += int(dx.isnan().sum())
            rec["2x2048 NaNs/20 runs"] = bad
            rec["2x2048 err"] = rel(dx, dx64)
        print(rec, flush=True)
        recs.append(rec)
        del x, dy, dx, y, dx64
        torch.cuda.empty_cache()
ln["FWD_MIN_BYTES_PER_SM"] = 40960
df = pd.DataFrame(recs)
print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
df.to_csv(os.path.join(OUT, "ln_page_check.csv"), index=False)

recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in (8192, 16384, 32768, 65536):
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
        xh = x.double() * rstd.double()[:, None]
        g = dy.double() * w.double()
        dx64 = (g - xh * (g * xh).mean(1, keepdim=True)) * rstd.double()[:, None]
        ref = dx.clone()
        same = True
        for _ in range(5):
            fn()
            same &= torch.equal(dx, ref)
        recs.append(dict(dtype=str(dtype)[6:], N=n, bwd=100 * 3 * nb / t * 1e-6 / copy, err=rel(dx, dx64),
                         dw_err=rel(dw, (dy.double() * xh).sum(0)), det=same))
        print(recs[-1], flush=True)
        del x, dy, dx, y, dx64, xh, g
        torch.cuda.empty_cache()
print(pd.DataFrame(recs).to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
print(f"total {time.time() - T0:.0f} s", flush=True)
