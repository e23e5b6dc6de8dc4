"""Dev only: check the softmax kernels on a GPU and time candidate launch configs.

Loads the kernels from the tutorial (everything before its Correctness section) and prints one table.
"""
import itertools
import os
import pathlib
import sys

import pandas as pd
import torch
import triton

src = pathlib.Path(__file__).resolve().parents[1].joinpath("tutorials/01_fused_softmax.py").read_text()
import runpy
import tempfile
prefix = pathlib.Path(tempfile.mkdtemp()) / "softmax_kernels.py"
prefix.write_text(src.split("# Correctness\n")[0])  # @triton.jit needs its source in a real file
ns = runpy.run_path(str(prefix), run_name="softmax_dev")
softmax = ns["softmax"]
dev = "cuda"
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

# -- special values and layouts against torch on the same GPU
x = torch.randn(6, 5000, device=dev)
x[0, 7] = float("nan"); x[1, 3] = float("inf"); x[2] = -float("inf"); x[3, :10] = -float("inf")
x[4, 0] = float("inf"); x[4, 1] = -float("inf")
for n in (5000, 100_000):
    xx = torch.randn(6, n, device=dev); xx[:, :5] = x[:, :5]; xx[2] = -float("inf")
    torch.testing.assert_close(softmax(xx), torch.softmax(xx, -1), equal_nan=True)
torch.testing.assert_close(softmax(x), torch.softmax(x, -1), equal_nan=True)
for shape, dim in [((7, 9, 33), 0), ((7, 9, 33), 1), ((128, 300), -1)]:
    t = torch.randn(shape, device=dev, dtype=torch.bfloat16).transpose(0, -1)
    torch.testing.assert_close(softmax(t, dim), torch.softmax(t, dim))
print("special values and layouts: OK", flush=True)


def bench(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


rows = []
for dtype in (torch.float32, torch.bfloat16):
    for k in range(int(os.environ.get("KMIN", 8)), 19):
        n = 2**k
        m = 2**26 // n
        x = torch.randn(m, n, device=dev, dtype=dtype); y = torch.empty_like(x)
        dy = torch.randn_like(x); dx = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: y.copy_(x)) * 1e-6
        res = {}
        if n <= 65536:
            cands = []
            for min_el, ept in [(4096, 8), (4096, 16), (4096, 32), (2048, 16), (8192, 16), (16384, 16)]:
                bm = max(1, min_el // n); warps = min(32, max(4, bm * n // (32 * ept)))
                if warps > 32 or bm * n > 65536: continue
                cands.append((bm, n, warps))
            cands = sorted(set(cands))
            for (bm, bn, w), mode in itertools.product(cands, ("plain", "occ")):
                for direction, kern, args in [
                    ("fwd", ns["softmax_fwd_kernel"], (x, y, m, n, n, n)),
                    ("bwd", ns["softmax_bwd_kernel"], (y, dy, dx, m, n, n, n, n))]:
                    meta = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
                    tasks = triton.cdiv(m, bm)
                    try:
                        per, lim, regs = ns["programs_per_sm"](kern, args, meta)
                        grid = tasks if mode == "plain" else min(tasks, per * SMS)
                        ms = bench(lambda: kern[(grid,)](*args, **meta))
                    except Exception as e:  # noqa: BLE001 (dev sweep: record and go on)
                        print("fail", n, bm, w, e.__class__.__name__, str(e)[:80]); continue
                    moved = (2 if direction == "fwd" else 3) * nb
                    res.setdefault(direction, []).append((moved / ms * 1e-6 / copy, f"fused bm{bm} w{w} {mode} r{regs}"))
        if n >= 32768:
            for bn, w, mode in itertools.product((4096, 8192, 16384), (16, 32), ("plain", "occ")):
                for direction, kern, args in [
                    ("fwd", ns["softmax_fwd_online_kernel"], (x, y, m, n, n, n)),
                    ("bwd", ns["softmax_bwd_online_kernel"], (y, dy, dx, m, n, n, n, n))]:
                    meta = dict(BLOCK_N=bn, num_warps=w)
                    per, lim, regs = ns["programs_per_sm"](kern, args, meta)
                    grid = {"plain": m, "occ": min(m, per * SMS), "sms": min(m, SMS)}[mode]
                    ms = bench(lambda: kern[(grid,)](*args, **meta))
                    moved = (2 if direction == "fwd" else 3) * nb
                    res.setdefault(direction, []).append((moved / ms * 1e-6 / copy, f"online b{bn} w{w} {mode} r{regs}"))
        # what the tutorial's heuristic picks now
        for direction in ("fwd", "bwd"):
            if direction == "fwd":
                ms = bench(lambda: ns["softmax_rows_forward"](x, y))
            else:
                ms = bench(lambda: ns["softmax_rows_backward"](y, dy, dx))
            cur = (2 if direction == "fwd" else 3) * nb / ms * 1e-6 / copy
            best = sorted(res[direction], reverse=True)[:3]
            rows.append(dict(dtype=str(dtype)[6:], N=n, dir=direction, copy=round(copy), current=round(cur, 3),
                             best=" | ".join(f"{v:.3f} {c}" for v, c in best)))
            print(rows[-1], flush=True)
        del x, y, dy, dx
        torch.cuda.empty_cache()
pd.set_option("display.width", 250); pd.set_option("display.max_colwidth", 200)
print(pd.DataFrame(rows).to_string())
