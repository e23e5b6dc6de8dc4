"""Scratch: check tutorial 02 on a GPU and time candidate configs (not part of the site)."""
import os
import sys
import time

import torch

T0 = time.time()
import importlib.util
src = open("tutorials/02_layer_norm.py").read()
with open("/tmp/ln02_head.py", "w") as f:  # Triton's JIT wants its kernels in a real file
    f.write(src.split("# %%\n# Benchmark\n")[0])
spec = importlib.util.spec_from_file_location("ln02_head", "/tmp/ln02_head.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
g = mod.__dict__  # live globals: changing a knob here changes what the functions see
import pandas as pd

pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 30)
print(f"head ran in {time.time() - T0:.0f}s")
print(g["errors"].to_string())
print(g["determinism"].to_string())
print(g["plan_table"]().data.to_string())
import statistics
import triton


def bench(fn):
    fn()
    if g["ON_GPU"]:
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
    ts = []
    for _ in range(2):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


ln = g
SW = [1024, 2048, 4096, 8192, 16384, 32768, 512, 65536]
DEV = g["DEVICE"]
TOTAL = 2**26 if g["ON_GPU"] else 2**13
rows = []
bad = []
for n in SW:
    for dtype in (torch.bfloat16, torch.float32):
        if time.time() - T0 > 150:
            break
        m = max(1, TOTAL // n)
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        w = torch.randn(n, device=DEV, dtype=dtype)
        b = torch.randn(n, device=DEV, dtype=dtype)
        dy = torch.randn_like(x)
        y, dx, out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        mean = torch.empty(m, device=DEV)
        rstd = torch.empty_like(mean)
        dw, db = torch.empty_like(w), torch.empty_like(w)
        nb = x.numel() * x.element_size()
        r = {"dtype": str(dtype)[6:], "N": n}
        r["copy"] = 2 * nb / bench(lambda: out.copy_(x)) * 1e-6
        for pers in (False, True):
            r[f"fwd pers={int(pers)}"] = 2 * nb / bench(
                lambda: g["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, persistent=pers)) * 1e-6
        r["fwd torch"] = 2 * nb / bench(lambda: torch.nn.functional.layer_norm(x, (n,), w, b)) * 1e-6
        ref = None
        variants = [("pps2", dict(BWD_PROGRAMS_PER_SM=2)), ("pps1", dict(BWD_PROGRAMS_PER_SM=1)),
                    ("pps4", dict(BWD_PROGRAMS_PER_SM=4)),
                    ("ept16", dict(BWD_PROGRAMS_PER_SM=2, BWD_ELEMENTS_PER_THREAD=16))]
        if n in (8192, 16384, 32768):
            variants += [(f"fusedmax={n // 2}", dict(MAX_BWD_FUSED_N=n // 2)),
                         (f"fusedmax={n}", dict(MAX_BWD_FUSED_N=n))]
        for name, knobs in variants:
            saved = {k: g[k] for k in knobs}
            g.update(knobs)
            try:
                dx.fill_(float("nan")); dw.fill_(float("nan")); db.fill_(float("nan"))
                g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
                got = [t.float() for t in (dx, dw, db)]
                if ref is None:
                    ref = [t.clone() for t in got]
                for lbl, a, e in zip(("dx", "dw", "db"), got, ref):
                    err = ((a - e).norm() / e.norm()).item()
                    if not err < 2e-2:
                        bad.append((dtype, n, name, lbl, err))
                r[f"bwd {name}"] = 3 * nb / bench(lambda: g["layer_norm_rows_backward"](
                    x, dy, dx, w, mean, rstd, dw, db)) * 1e-6
            except Exception as e:
                print("ERR", name, n, repr(e)[:300])
            g.update(saved)
        if n * x.element_size() <= 65536:
            r["bwd classic"] = 3 * nb / bench(lambda: g["layer_norm_rows_backward_classic"](
                x, dy, dx, w, mean, rstd, dw, db)) * 1e-6
        xi = [t.detach().requires_grad_(True) for t in (x, w, b)]
        yt = torch.nn.functional.layer_norm(xi[0], (n,), xi[1], xi[2])
        r["bwd torch"] = 3 * nb / bench(lambda: torch.autograd.grad(yt, xi, dy, retain_graph=True)) * 1e-6
        rows.append(r)
        print({k: (round(v) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
        del x, dy, y, dx, out, xi, yt
        if g["ON_GPU"]:
            torch.cuda.empty_cache()
print("variant mismatches:", bad)
df = pd.DataFrame(rows).set_index(["dtype", "N"]).sort_index()
pct = df.div(df["copy"], axis=0) * 100
print("GB/s\n", df.round(0).to_string())
print("% of copy\n", pct.round(1).to_string())
print(f"total {time.time() - T0:.0f}s")
