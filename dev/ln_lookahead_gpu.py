"""Dev only: the layer-norm split backward with the exchange one block ahead (tutorial 02), through the
page's own launcher with SPLIT / BWD_WARPS_PER_SM overrides; against the fused kernel and a copy.
Kernel-only CUDA-graph timings with do_bench; dx, dw, db against float64; bitwise repeatability.

PYTHONUNBUFFERED=1 python3 dev/ln_lookahead_gpu.py
"""
import os
import time

import pandas as pd
import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "240"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)
OUT = os.environ.get("OUT", "/tmp")


torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
CANDS = {
    torch.bfloat16: [("page", None, 16),
                     ("4096/4096/32", dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32), 16),
                     ("4096/4096/16", dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=16), 16),
                     ("2048/4096/32", dict(SLICE_N=2048, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32), 16),
                     ("8192/8192/32", dict(SLICE_N=8192, MIN_SLICES=2, TILE=8192, BYTES_PER_THREAD=32), 16)],
    torch.float32: [("page", None, 16), ("2048/2048/32", dict(SLICE_N=2048, MIN_SLICES=2, TILE=2048, BYTES_PER_THREAD=32), 16)],
}
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in (16384, 20000, 32768, 65536, 131072):
        if time.time() - T0 > BUDGET:
            break
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        del y
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        nb = x.numel() * x.element_size()
        out = torch.empty_like(x)
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        del out
        xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
        g = dy.double() * w.double()
        dx64 = (g - xh * (g * xh).mean(1, keepdim=True) - g.mean(1, keepdim=True)) * rstd.double()[:, None]
        dw64, db64 = (dy.double() * xh).sum(0), dy.double().sum(0)
        del xh, g
        cands = list(CANDS[dtype])
        if n <= 8192:
            cands = [("fused", None, 16)] + [(name + " split", cfg, wps) for name, cfg, wps in cands]
        for name, cfg, wps in cands:
            if time.time() - T0 > BUDGET:
                break
            ln["BWD_WARPS_PER_SM"] = wps
            kw = dict(split={2: cfg, 4: cfg} if cfg else None)
            if "split" in name:
                kw["max_fused_n"] = 4096
            try:
                fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, **kw)
                plan = fn()
                t = bench(fn)
                e = max(rel(dx, dx64), rel(dw, dw64), rel(db, db64))
                ref = (dx.clone(), dw.clone(), db.clone())
                same = True
                for _ in range(3):
                    fn()
                    same &= all(torch.equal(a, r) for a, r in zip((dx, dw, db), ref))
                meta = plan["meta"]
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 3 * nb / t * 1e-6 / copy,
                                 slices=meta.get("SLICES", 1), bm=plan["block_m"], bn=meta.get("BLOCK_N"),
                                 warps=meta["num_warps"], pack=meta.get("PACK", ""), maxnreg=meta.get("maxnreg", ""),
                                 regs=plan["n_regs"], per_sm=plan["per_sm"], grid=plan["programs"], err=e,
                                 det="yes" if same else "NO"))
            except Exception as exc:  # noqa: BLE001
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, det=repr(exc)[:100]))
            print(recs[-1], flush=True)
        ln["BWD_WARPS_PER_SM"] = 16
        del x, dy, dx, dx64
        torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
df.to_csv(os.path.join(OUT, "ln_lookahead.csv"), index=False)
print(f"total {time.time() - T0:.0f} s", flush=True)
