"""GPU scratch for tutorial 04: correctness on the GPU, then candidate configs against the peers.

Runs the tutorial's definitions only (everything before its correctness table), then times variants.
PYTHONUNBUFFERED=1 python3 dev/rms_norm_gpu.py
"""
import os
import time

import pandas as pd
import torch
import torch.nn.functional as F
import triton

T0 = time.time()
src = open("tutorials/04_rms_norm.py").read()
g = {"__name__": "rms_dev"}
exec(compile(src[: src.index("errors = pd.DataFrame(")], os.path.abspath("tutorials/04_rms_norm.py"), "exec"), g)
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_rows", 200)
BUDGET = float(os.environ.get("BUDGET", "250"))
x = torch.randn(10000, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn_like(x)
outs = [torch.autograd.grad(g["rms_norm"](x, (4096,), w), (x, w), dy) for _ in range(3)]
print("deterministic dx, dw:", all(torch.equal(o[0], outs[0][0]) and torch.equal(o[1], outs[0][1]) for o in outs))
print(f"[{time.time() - T0:.0f}s]", flush=True)



def bench(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


orig_pps = g["programs_per_sm"]
CAP = {"v": None}


def capped(kernel, args, meta):
    per_sm, lim, regs = orig_pps(kernel, args, meta)
    return (per_sm if CAP["v"] is None else min(per_sm, CAP["v"]), lim, regs)


g["programs_per_sm"] = capped
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
except ImportError:
    LigerRMSNormFunction = None
dyn = torch._dynamo.config
for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
    if hasattr(dyn, knob):
        setattr(dyn, knob, 1024)
compiled = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6), dynamic=False)

BWD_CANDS = {
    "b4096/8": dict(MIN_ELEMENTS=4096, ELEMENTS_PER_THREAD=8),
    "b4096/4": dict(MIN_ELEMENTS=4096, ELEMENTS_PER_THREAD=4),
    "b4096/16": dict(MIN_ELEMENTS=4096, ELEMENTS_PER_THREAD=16),
    "b8192/8": dict(MIN_ELEMENTS=8192, ELEMENTS_PER_THREAD=8),
}
FWD_CANDS = {
    "f4096/16": dict(MIN_ELEMENTS=4096, ELEMENTS_PER_THREAD=16),
    "f8192/16": dict(MIN_ELEMENTS=8192, ELEMENTS_PER_THREAD=16),
}
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in [1024, 4096, 16384, 32768, 2048, 8192]:
        if time.time() - T0 > BUDGET:
            break
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
        dy = torch.randn_like(x)
        out = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: out.copy_(x)) * 1e-6
        rec = {"dtype": str(dtype)[6:], "N": n, "copy": copy}
        rstd = torch.empty(m, device="cuda", dtype=torch.float32)
        y = torch.empty_like(x)
        dx = torch.empty_like(x)
        dw = torch.empty_like(w)
        for name, cfg in FWD_CANDS.items():
            rec[name] = 2 * nb / bench(lambda: g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6, config=cfg)) * 1e-6
        ref_dx, ref_dw = None, None
        for name, cfg in BWD_CANDS.items():
            fn = lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg)
            rec[name] = 3 * nb / bench(fn) * 1e-6
            if ref_dx is None:
                ref_dx, ref_dw = dx.clone(), dw.float().clone()
            else:
                assert torch.allclose(dx.float(), ref_dx.float(), atol=1e-2, rtol=1e-2), name
                assert torch.allclose(dw.float(), ref_dw, atol=1e-1, rtol=2e-2), name
        for cap in (1, 2):
            CAP["v"] = cap
            g["_occupancy"].clear()
            rec[f"b4096/8 cap{cap}"] = 3 * nb / bench(
                lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=BWD_CANDS["b4096/8"])) * 1e-6
            CAP["v"] = None
            g["_occupancy"].clear()
        if n >= 8192:
            for ck, nw in ((4096, 16), (2048, 8)):
                g["CHUNK_NUM_WARPS"] = nw
                rec[f"chunk{ck}/{nw}"] = 3 * nb / bench(
                    lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, chunk_n=ck)) * 1e-6
            g["CHUNK_NUM_WARPS"] = 16
        recs.append(rec)
        print(f"[{time.time() - T0:.0f}s] " + " ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}"
                                                      for k, v in rec.items()), flush=True)
        del x, dy, out, y, dx
        torch.cuda.empty_cache()

df = pd.DataFrame(recs).set_index(["dtype", "N"])
print(df.round(0).to_string())
pct = df.drop(columns="copy").div(df["copy"], axis=0) * 100
print((pct.round(1)).to_string())
print(f"total {time.time() - T0:.0f}s")
