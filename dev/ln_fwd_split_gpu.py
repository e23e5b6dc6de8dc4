"""Dev only: the layer-norm split forward (tutorial 02) against the fused and chunked forwards, through
the page's own launcher with FWD_SPLIT / FWD_SPLIT_WARPS_PER_SM overrides. Kernel-only CUDA-graph
timings with do_bench, % of an eager copy; y, mean, rstd against float64; bitwise repeatability;
registers and spills of each compiled split kernel.

PYTHONUNBUFFERED=1 python3 dev/ln_fwd_split_gpu.py
"""
import os
import time

import pandas as pd
import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "200"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)
OUT = os.environ.get("OUT", "/tmp")

torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


def cfg(slice_n, bpt, min_n=1, slots=32):
    return {size: dict(MIN_N=min_n, SLICE_N=slice_n, MIN_SLICES=2, TILE=slice_n, BYTES_PER_THREAD=bpt, MIN_SLOTS=slots)
            for size in (2, 4)}


CANDS = [  # name, split override ({} = never split), FWD_SPLIT_WARPS_PER_SM
    ("unsplit", {}, 32),
    ("page", None, 32),  # the page's FWD_SPLIT (from its MIN_N on)
    ("4096/32B w32", cfg(4096, 32), 32),
    ("4096/32B w16", cfg(4096, 32), 16),
    ("4096/32B w48", cfg(4096, 32), 48),
    ("2048/32B w32", cfg(2048, 32), 32),
    ("2048/32B w16", cfg(2048, 32), 16),
    ("8192/32B w32", cfg(8192, 32), 32),
    ("4096/64B w16", cfg(4096, 64), 16),
    ("4096/16B w32", cfg(4096, 16), 32),
    ("8192/64B w16", cfg(8192, 64), 16),
    ("4096/32B w32 s1", cfg(4096, 32, slots=1), 32),
    ("4096/32B w16 s1", cfg(4096, 32, slots=1), 16),
    ("2048/32B w16 s1", cfg(2048, 32, slots=1), 16),
]
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in (8192, 16384, 32768, 65536, 131072):
        if time.time() - T0 > BUDGET:
            break
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
        mean64, var64 = xd.mean(1), xd.var(1, unbiased=False)
        y64 = (xd - mean64[:, None]) / (var64[:, None] + 1e-5).sqrt() * w.double() + b.double()
        del xd
        for name, split, wps in CANDS:
            if time.time() - T0 > BUDGET:
                break
            ln["FWD_SPLIT_WARPS_PER_SM"] = wps
            try:
                fn = lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, split=split)
                y.fill_(float("nan"))
                grid = fn()
                t = bench(fn)
                e = max(rel(y, y64), rel(mean, mean64), rel(rstd, 1 / (var64 + 1e-5).sqrt()))
                ref = (y.clone(), mean.clone(), rstd.clone())
                same = True
                for _ in range(3):
                    fn()
                    same &= all(torch.equal(a, r) for a, r in zip((y, mean, rstd), ref))
                info = {}
                for key, val in ln["_occupancy"].items():
                    if key[0] is ln["layer_norm_fwd_split_kernel"]:
                        info = dict(key[2])
                        regs = val[2]
                rec = dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 2 * nb / t * 1e-6 / copy, grid=grid,
                           err=e, det="yes" if same else "NO")
                if split != {} and info:
                    args = (x, y, w, b, mean, rstd, torch.full((1,), -1, device="cuda", dtype=torch.int64), m, n,
                            x.stride(0), y.stride(0), 1e-5)
                    ck = ln["layer_norm_fwd_split_kernel"].warmup(*args, grid=(1,), **info)
                    ck._init_handles()
                    rec.update(slices=info["SLICES"], bn=info["BLOCK_N"], warps=info["num_warps"],
                               maxnreg=info.get("maxnreg", ""), regs=ck.n_regs, spills=getattr(ck, "n_spills", "?"))
                ln["_occupancy"].clear()
                recs.append(rec)
            except Exception as exc:  # noqa: BLE001
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, det=repr(exc)[:120]))
            print(recs[-1], flush=True)
        ln["FWD_SPLIT_WARPS_PER_SM"] = 32
        del x, y, y64
        torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
df.to_csv(os.path.join(OUT, "ln_fwd_split.csv"), index=False)
print(f"total {time.time() - T0:.0f} s", flush=True)
