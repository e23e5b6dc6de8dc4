"""Dev only: layer-norm fused kernels' launch knobs (tutorial 02 globals) at the sizes that sit just
under the targets: backward at every fused N (BWD_MIN_BYTES, BWD_BYTES_PER_THREAD,
BWD_WARPS_PER_SM); forward bf16 16384, 32768 (FWD_BYTES_PER_THREAD, FWD_MIN_BYTES_PER_SM).
Kernel-only CUDA-graph timings with do_bench, % of an eager copy, M x N = 2^26.

PYTHONUNBUFFERED=1 python3 dev/ln_fused_cfg_gpu.py
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
DEFAULTS = {k: ln[k] for k in ("MIN_ELEMENTS", "BWD_MIN_BYTES", "BWD_BYTES_PER_THREAD", "BWD_WARPS_PER_SM", "FWD_BYTES_PER_THREAD",
                               "FWD_MIN_BYTES_PER_SM")}


print(torch.cuda.get_device_name(0), DEFAULTS, flush=True)
recs = []
CASES = [("bwd", d, n) for d in (torch.float32, torch.bfloat16) for n in (512, 1024, 2048, 4096, 8192)]
CASES += [("fwd", d, n) for d in (torch.float32, torch.bfloat16) for n in (512, 1024, 2048, 4096, 8192, 16384, 32768)]
for direction, dtype, n in CASES:
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 1
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
    nb = x.numel() * x.element_size()
    copy = 2 * nb / bench(lambda: y.copy_(x), graph=False) * 1e-6
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    if direction == "bwd":
        grid = [(8192, 32, 32), (16384, 32, 16), (8192, 64, 32), (8192, 32, 16)]  # the first is the page's choice
        keys = ("BWD_MIN_BYTES", "BWD_BYTES_PER_THREAD", "BWD_WARPS_PER_SM")
        fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
        moved = 3 * nb
    else:
        grid = [(4096, 64, 40960), (4096, 128, 40960)]
        keys = ("MIN_ELEMENTS", "FWD_BYTES_PER_THREAD", "FWD_MIN_BYTES_PER_SM")
        fn = lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        moved = 2 * nb
    for values in grid:
        for k, v in zip(keys, values):
            ln[k] = v
        try:
            out = fn()
            t = bench(fn)
            rec = dict(direction=direction, dtype=str(dtype)[6:], N=n, **dict(zip(keys, values)),
                       pct=100 * moved / t * 1e-6 / copy)
            if isinstance(out, dict):
                rec.update(warps=out["meta"]["num_warps"], bm=out["block_m"], regs=out["n_regs"], per_sm=out["per_sm"])
        except Exception as exc:  # noqa: BLE001
            rec = dict(direction=direction, dtype=str(dtype)[6:], N=n, **dict(zip(keys, values)), err=repr(exc)[:80])
        recs.append(rec)
        print(rec, flush=True)
        for k, v in DEFAULTS.items():
            ln[k] = v
    del x, dy, dx, y
    torch.cuda.empty_cache()
df = pd.DataFrame(recs)
keys = [c for c in ("BWD_MIN_BYTES", "BWD_BYTES_PER_THREAD", "BWD_WARPS_PER_SM", "FWD_BYTES_PER_THREAD") if c in df]
df["cfg"] = df[keys].fillna(0).astype(int).astype(str).agg("/".join, axis=1)
print(df.pivot_table(index=["direction", "dtype", "N"], columns="cfg", values="pct").to_string(float_format=lambda v: f"{v:.1f}"), flush=True)
print(f"total {time.time() - T0:.0f} s")
