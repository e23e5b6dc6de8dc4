"""GPU scratch 2 for tutorial 04, phase 2: the tutorial as it now is (plain-grid forward, small-grid
prefetching backward, wide dw reduction), its chunked alternatives at long rows, the autograd path and
its CPU cost per call, against the copy and torch.compile. Phase 1 (candidate kernels): rms_norm_gpu2_phase1.py.

PYTHONUNBUFFERED=1 python3 dev/rms_norm_gpu2.py
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
exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath("tutorials/04_rms_norm.py"), "exec"), g)
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
print(g["config_table"](torch.bfloat16).to_string())
print(g["config_table"](torch.float32).to_string())
BUDGET = float(os.environ.get("BUDGET", "200"))


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


def cpu_us(fn, n=30):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return t


dyn = torch._dynamo.config
for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
    if hasattr(dyn, knob):
        setattr(dyn, knob, 1024)
compiled = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6), dynamic=False)
FWD, BWD = dict(g["FWD"]), dict(g["BWD"])
recs = []
for n in [32768, 1024, 16384, 4096, 8192, 2048]:
    for dtype in (torch.bfloat16, torch.float32):
        if time.time() - T0 > BUDGET:
            break
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
        dy = torch.randn_like(x)
        out = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        rec = {"dtype": str(dtype)[6:], "N": n}
        rec["copy"] = 2 * nb / bench(lambda: out.copy_(x)) * 1e-6
        rstd = torch.empty(m, device="cuda", dtype=torch.float32)
        y, dx, dw = torch.empty_like(x), torch.empty_like(x), torch.empty_like(w)
        rec["F"] = 2 * nb / bench(lambda: g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)) * 1e-6
        if n >= 8192:
            for ck in (4096, 8192):
                cfg = dict(FWD, MAX_FUSED_N=0, CHUNK_N=ck)
                rec[f"F ch{ck}"] = 2 * nb / bench(lambda: g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6, config=cfg)) * 1e-6
            cfg = dict(FWD, BYTES_PER_THREAD=32)
            rec["F 32B"] = 2 * nb / bench(lambda: g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6, config=cfg)) * 1e-6
        g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)
        rec["B"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw)) * 1e-6
        if 4096 <= n <= 16384:
            cfg = dict(BWD, MAX_FUSED_N=0)
            rec["B ch8k"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg)) * 1e-6
            cfg = dict(BWD, PROGRAMS_PER_SM=1)
            rec["B k1"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg)) * 1e-6
            cfg = dict(BWD, BYTES_PER_THREAD=16)
            rec["B 16B"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg)) * 1e-6
        if n == 32768:
            for k, ck in ((2, 8192), (1, 16384)):
                cfg = dict(BWD, CHUNK_PROGRAMS_PER_SM=k, CHUNK_N=ck)
                rec[f"B ch{ck}k{k}"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg)) * 1e-6
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        yy = g["rms_norm"](xg, (n,), wg, 1e-6)
        grad = lambda: torch.autograd.grad(yy, (xg, wg), dy, retain_graph=True)
        rec["A"] = 3 * nb / bench(grad) * 1e-6
        a_dx, a_dw = grad()
        xr = x.float().requires_grad_(True)
        r_dx = torch.autograd.grad(F.rms_norm(xr, (n,), w.float(), 1e-6), xr, dy.float())[0]
        rec["dx err"] = ((a_dx.float() - r_dx).norm() / r_dx.norm()).item()
        rec["A cpu us"] = cpu_us(grad)
        rec["B cpu us"] = cpu_us(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw))
        rec["F cpu us"] = cpu_us(lambda: g["rms_norm"](x, (n,), w, 1e-6))
        if time.time() - T0 < BUDGET - 40:
            rec["F compile"] = 2 * nb / bench(lambda: compiled(x, w)) * 1e-6
            yc = compiled(xg, wg)
            rec["A compile"] = 3 * nb / bench(lambda: torch.autograd.grad(yc, (xg, wg), dy, retain_graph=True)) * 1e-6
            yc = None
        yy = a_dx = r_dx = None
        recs.append(rec)
        print(f"[{time.time() - T0:.0f}s] " + " ".join(
            f"{kk}={v:.4g}" if isinstance(v, float) else f"{kk}={v}" for kk, v in rec.items()), flush=True)
        del x, dy, out, y, dx, xg
        torch.cuda.empty_cache()

df = pd.DataFrame(recs).set_index(["dtype", "N"]).sort_index()
num = [c for c in df.columns if c not in ("copy", "dx err") and not c.endswith(" us")]
print("\n% of copy")
print((df[num].div(df["copy"], axis=0) * 100).round(1).to_string())
print("\ncopy GB/s, errors, CPU us per call")
print(df[["copy", "dx err"] + [c for c in df.columns if c.endswith(" us")]].round(1).to_string())
print(f"total {time.time() - T0:.0f}s")
