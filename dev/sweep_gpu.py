"""Dev only: one GPU call that times candidate launch configs of tutorials 01, 02 and 04, kernel only,
each as a CUDA-graph replay timed by do_bench (as the pages time them), next to an eager copy.

PYTHONUNBUFFERED=1 python3 dev/sweep_gpu.py [part ...]     parts: sfwd sbwd lnfwd lnbwd rms
"""
import os
import sys
import time

import pandas as pd
import torch
import triton
from gpu_common import load, bench

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "500"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
parts = sys.argv[1:] or ["sfwd", "sbwd", "lnfwd", "lnbwd", "rms"]


torch.cuda.set_stream(torch.cuda.Stream())


PART = {"start": time.time()}


def over():
    """True once the current part has used its share of the budget."""
    return time.time() - PART["start"] > BUDGET / len(parts)


def show(recs, name):
    if recs:
        df = pd.DataFrame(recs)
        print(f"\n== {name}\n" + df.to_string(index=False, float_format=lambda v: f"{v:.1f}"), flush=True)
        df.to_csv(os.path.join(os.environ.get("OUT", "/tmp"), f"{name}.csv"), index=False)


def tensors(n, dtype, k=2):
    m = 2**26 // n
    ts = [torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(k)]
    out = torch.empty_like(ts[0])
    nb = ts[0].numel() * ts[0].element_size()
    copy = 2 * nb / bench(lambda: out.copy_(ts[0]), graph=False) * 1e-6
    return ts, out, nb, copy


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

if "sfwd" in parts or "sbwd" in parts:
    sm = load("tutorials/01_fused_softmax.py")
    NS = sm["NUM_SMS"]
if "sfwd" in parts:
    PART["start"] = time.time()
    recs = []
    for dtype, n in [(torch.bfloat16, 32768), (torch.bfloat16, 65536), (torch.float32, 65536),
                     (torch.bfloat16, 262144), (torch.float32, 262144)]:
        (x, _), y, nb, copy = tensors(n, dtype)
        m = x.shape[0]
        args = (x, y, m, n, x.stride(0), y.stride(0))
        cands = [("fused", 32), ("fused", 16)] if n <= 32768 else []
        cands += [(bn, w) for bn in (4096, 8192, 16384, 32768) for w in (8, 16, 32) if bn <= n]
        for kind, w in cands:
            for grid in ("plain", NS, 2 * NS):
                if over():
                    break
                if kind == "fused":
                    kern, meta = sm["softmax_fwd_kernel"], dict(BLOCK_M=1, BLOCK_N=n, num_warps=w)
                else:
                    kern, meta = sm["softmax_fwd_online_kernel"], dict(BLOCK_N=kind, num_warps=w)
                g = m if grid == "plain" else min(m, grid)
                try:
                    ms = bench(lambda: kern[(g,)](*args, **meta))
                except Exception as e:  # out of resources, ...
                    print("skip", dtype, n, kind, w, grid, type(e).__name__, flush=True)
                    continue
                recs.append(dict(dtype=str(dtype)[6:], N=n, kernel=kind, warps=w, grid=str(grid),
                                 pct=100 * 2 * nb / ms * 1e-6 / copy))
        del x, y
    show(recs, "softmax_fwd")

if "sbwd" in parts:
    PART["start"] = time.time()
    recs = []
    for dtype, n in [(torch.float32, 65536), (torch.bfloat16, 65536), (torch.float32, 262144),
                     (torch.bfloat16, 262144), (torch.float32, 32768)]:
        (y, dy), dx, nb, copy = tensors(n, dtype)
        y = torch.softmax(y.float(), -1).to(dtype)
        m = y.shape[0]
        args = (y, dy, dx, m, n, y.stride(0), dy.stride(0), dx.stride(0))
        for bn in (4096, 8192, 16384):
            for w in (16, 32):
                for grid in ("plain", NS // 2, 3 * NS // 4, NS, 2 * NS):
                    if over():
                        break
                    g = m if grid == "plain" else min(m, grid)
                    kern, meta = sm["softmax_bwd_online_kernel"], dict(BLOCK_N=bn, num_warps=w)
                    try:
                        ms = bench(lambda: kern[(g,)](*args, **meta))
                    except Exception as e:
                        print("skip", dtype, n, bn, w, grid, type(e).__name__, flush=True)
                        continue
                    recs.append(dict(dtype=str(dtype)[6:], N=n, BLOCK_N=bn, warps=w, grid=str(grid),
                                     pct=100 * 3 * nb / ms * 1e-6 / copy))
        del y, dy, dx
    show(recs, "softmax_bwd")

if "lnfwd" in parts or "lnbwd" in parts:
    ln = load("tutorials/02_layer_norm.py")
if "lnfwd" in parts:
    PART["start"] = time.time()
    recs = []
    for dtype in (torch.bfloat16, torch.float32):
        for n in [512, 1024, 2048, 4096, 8192, 16384, 32768]:
            (x,), y, nb, copy = tensors(n, dtype, 1)
            m = x.shape[0]
            w = torch.randn(n, device="cuda", dtype=dtype); b = torch.randn_like(w)
            mean = torch.empty(m, device="cuda"); rstd = torch.empty(m, device="cuda")
            for bpt in (16, 32, 64):
                for min_el in (2048, 4096, 8192):
                    if over():
                        break
                    ln["FWD_BYTES_PER_THREAD"], ln["MIN_ELEMENTS"] = bpt, min_el
                    try:
                        ms = bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
                    except Exception as e:
                        print("skip", n, bpt, type(e).__name__, flush=True)
                        continue
                    recs.append(dict(dtype=str(dtype)[6:], N=n, bytes_per_thread=bpt, min_el=min_el,
                                     pct=100 * 2 * nb / ms * 1e-6 / copy))
            ln["FWD_BYTES_PER_THREAD"], ln["MIN_ELEMENTS"] = 32, 4096
            del x, y
    show(recs, "ln_fwd")

if "lnbwd" in parts:
    PART["start"] = time.time()
    recs = []
    for dtype in (torch.bfloat16, torch.float32):
        for n in [512, 1024, 2048, 4096, 8192, 16384, 32768]:
            (x, dy), dx, nb, copy = tensors(n, dtype)
            m = x.shape[0]
            w = torch.randn(n, device="cuda", dtype=dtype)
            mean = x.float().mean(1); rstd = 1 / x.float().var(1, unbiased=False).add(1e-5).sqrt()
            dw = torch.empty_like(w); db = torch.empty_like(w)
            variants = [(bpt, wps, fmax) for bpt in (16, 32) for wps in (8, 16, 32)
                        for fmax in (8192, 16384) if fmax >= n or fmax == 8192]
            for bpt, wps, fmax in variants:
                if over():
                    break
                ln["BWD_BYTES_PER_THREAD"], ln["BWD_WARPS_PER_SM"], ln["MAX_BWD_FUSED_N"] = bpt, wps, fmax
                ln["_occupancy"].clear()
                try:
                    plan = ln["bwd_plan"](x, True, True)
                    ms = bench(lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db))
                except Exception as e:
                    print("skip", n, bpt, wps, fmax, type(e).__name__, str(e)[:100], flush=True)
                    continue
                recs.append(dict(dtype=str(dtype)[6:], N=n, bpt=bpt, warps_per_sm=wps, fused_max=fmax,
                                 kernel=plan["kernel"].__name__[-7:], warps=plan["meta"]["num_warps"],
                                 P=plan["programs"], regs=plan["n_regs"],
                                 pct=100 * 3 * nb / ms * 1e-6 / copy))
            ln["BWD_BYTES_PER_THREAD"], ln["BWD_WARPS_PER_SM"], ln["MAX_BWD_FUSED_N"] = 32, 16, 8192
            ln["_occupancy"].clear()
            del x, dy, dx
    show(recs, "ln_bwd")

if "rms" in parts:
    PART["start"] = time.time()
    rms = load("tutorials/04_rms_norm.py")
    recs = []
    for dtype in (torch.bfloat16, torch.float32):
        for n in [4096, 8192, 16384, 32768]:
            (x, dy), dx, nb, copy = tensors(n, dtype)
            m = x.shape[0]
            w = torch.randn(n, device="cuda", dtype=dtype)
            rstd = torch.rsqrt(x.float().pow(2).mean(1) + 1e-6)
            dw = torch.empty_like(w)
            base = dict(rms["BWD"])
            variants = [("default", {})]
            variants += [(f"fusedB{fb}/bpt{bpt}/wps{wps}", dict(MAX_FUSED_BYTES=fb, BYTES_PER_THREAD=bpt, WARPS_PER_SM=wps))
                         for fb in (32768, 65536) for bpt in (16, 32) for wps in (8, 16)
                         if n * x.element_size() <= fb]
            variants += [(f"chunk{ck}/p{pp}", dict(MAX_FUSED_BYTES=0, CHUNK_N=ck, CHUNK_PROGRAMS_PER_SM=pp))
                         for ck in (4096, 8192, 16384) for pp in (1, 2) if ck <= n]
            for name, over_cfg in variants:
                if over():
                    break
                cfg = dict(base, **over_cfg)
                try:
                    ms = bench(lambda: rms["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw, config=cfg))
                except Exception as e:
                    print("skip", n, name, type(e).__name__, flush=True)
                    continue
                recs.append(dict(dtype=str(dtype)[6:], N=n, variant=name, pct=100 * 3 * nb / ms * 1e-6 / copy))
            del x, dy, dx
    show(recs, "rms_bwd")
print(f"total {time.time() - T0:.0f} s")
