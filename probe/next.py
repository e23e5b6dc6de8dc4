"""01B's fused backward at its in-range rows, warps and rows a program; 02's forward at 8-16 K, warps and the L2
hint (one GPU run, about 2 min).
At bf16 N = 16,384 torch.compile runs 1.08x ours (H200, 2026-11-30): ours is one row a program of 16 warps holding
y and dy in fp32 (81 registers a thread, one program an SM: 16 warps, 25% of the SM's warps; ncu warps active 24%),
Inductor's a looped reduction of 32 warps at 32 registers (90% active). Here: the page's launch against 4-32 warps,
and 2-4 rows a program at short rows, each checked against the page's own launch; registers a thread and programs an
SM from the compiled kernel. do_bench median, L2 flushed, the page's sizes (2^26 elements), GB/s as the page counts
(y, dy read, dx written). ROUNDS=3: each variant in 3 interleaved rounds, the median shown.
02 forward, fp32 N = 16,384: 91.7% of light, DRAM 80% busy against the copy's 84% (ncu). Its launch holds 64 fp32 a
thread on 8 warps, without the L2 hint (rows of 64 KB): here 8, 16 and 32 warps, with and without the hint, at fp32
and bf16 8 K and 16 K, each checked against the page's launch.
From the repository root: python3 probe/next.py (no GPU: a small functional run through Triton's interpreter)."""
import json, os, statistics, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
ROUNDS = int(os.environ.get("ROUNDS", "3"))
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None

page = load_tutorial("01_softmax_backward")
g = page["softmax_rows_backward"].__globals__
kernel, config = g["softmax_bwd_kernel"], g["_fused_config"]
props = torch.cuda.get_device_properties(DEV) if ON_GPU else None
REGS = getattr(props, "regs_per_multiprocessor", 65536)
THREADS = getattr(props, "max_threads_per_multi_processor", 2048)


def launch(y, dy, dx, block_m, block_n, warps):
    kernel[(triton.cdiv(len(y), block_m),)](y, dy, dx, *y.shape, y.stride(0), dy.stride(0), dx.stride(0),
                                            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)


def resident(y, dy, dx, block_m, block_n, warps):  # (registers a thread, programs an SM)
    if not ON_GPU:
        return 0, 0
    compiled = kernel.warmup(y, dy, dx, *y.shape, y.stride(0), dy.stride(0), dx.stride(0), BLOCK_M=block_m,
                             BLOCK_N=block_n, num_warps=warps, grid=(1,))
    regs_warp = triton.cdiv(max(compiled.n_regs, 1) * 32, 256) * 256
    return compiled.n_regs, min(THREADS // (32 * warps), REGS // (regs_warp * warps), 32)


rows_out = []
for dtype in (torch.bfloat16, torch.float32):
    for n in ([2048, 4096, 8192, 16384] if ON_GPU else [1024]):
        total = 2**26 if ON_GPU else 2**14
        y = torch.softmax(torch.randn(total // n, n, device=DEV), dim=1).to(dtype)
        dy = torch.randn_like(y)
        dx, ref = torch.empty_like(y), torch.empty_like(y)
        block_m, block_n, warps = config(n, 4)
        launch(y, dy, ref, block_m, block_n, warps)
        variants = {"page": (block_m, warps)}
        for w in (4, 8, 16, 32):
            if w != warps and block_m * block_n // (32 * w) >= 4:  # at least 4 values a thread
                variants[f"{w} warps"] = (block_m, w)
        for m in (2 * block_m, 4 * block_m):
            if m * block_n * 4 <= 65536:  # a tile of at most 64 KB of fp32
                variants[f"{m} rows, {warps} warps"] = (m, warps)
                variants[f"{m} rows, {min(32, 2 * warps)} warps"] = (m, min(32, 2 * warps))
        nbytes = 3 * y.numel() * y.element_size()
        out = torch.empty_like(y)
        copy = [ms(lambda: out.copy_(y)) for _ in range(ROUNDS)] if ON_GPU else [1.0]
        row = {"case": "01B backward", "dtype": str(dtype)[6:], "N": n, "page launch": [block_m, warps],
               "copy GB/s": round(2 * y.numel() * y.element_size() / statistics.median(copy) * 1e-6)}
        times = {tag: [] for tag in variants}
        for _ in range(ROUNDS if ON_GPU else 1):
            for tag, (m, w) in variants.items():
                dx.zero_()
                launch(y, dy, dx, m, block_n, w)
                assert torch.equal(dx, ref) or torch.allclose(dx.float(), ref.float(), atol=1e-3, rtol=1e-2), tag
                if ON_GPU:
                    times[tag].append(ms(lambda: launch(y, dy, dx, m, block_n, w)))
        for tag, (m, w) in variants.items():
            regs, per_sm = resident(y, dy, dx, m, block_n, w)
            gbs = round(nbytes / statistics.median(times[tag]) * 1e-6) if ON_GPU else "ok"
            row[tag] = f"{gbs} GB/s, {regs} regs, {per_sm}/SM"
        rows_out.append(row)
        print(json.dumps(row), flush=True)

# ---- 02: the forward at 8-16 K
ln = load_tutorial("02_layer_norm")
g2 = ln["layer_norm_rows_forward"].__globals__
ln_kernel, ln_config = g2["layer_norm_fwd_kernel"], g2["_fwd_config"]


def ln_launch(x, y, w, b, mean, rstd, meta, grid):
    ln_kernel[(grid,)](x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0), 1e-5, **meta)


for dtype in (torch.float32, torch.bfloat16):
    for n in ([8192, 16384] if ON_GPU else [1024]):
        total = 2**26 if ON_GPU else 2**14
        x = torch.randn(total // n, n, device=DEV, dtype=dtype)
        w, b = torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
        y, ref = torch.empty_like(x), torch.empty_like(x)
        mean, rstd = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
        meta, grid = ln_config(*x.shape, x.element_size())
        ln_launch(x, ref, w, b, mean, rstd, meta, grid)
        variants = {"page": meta}
        for warps in (8, 16, 32):
            for evict in ("", "evict_last"):
                if (warps, evict) != (meta["num_warps"], meta["EVICT"]) and meta["BLOCK_M"] * n // (32 * warps) >= 8:
                    variants[f"{warps} warps, hint {evict or 'none'}"] = meta | dict(num_warps=warps, EVICT=evict)
        nbytes = 2 * x.numel() * x.element_size()
        out = torch.empty_like(x)
        copy = [ms(lambda: out.copy_(x)) for _ in range(ROUNDS)] if ON_GPU else [1.0]
        row = {"case": "02 forward", "dtype": str(dtype)[6:], "N": n,
               "page launch": [meta["BLOCK_M"], meta["num_warps"], meta["EVICT"]],
               "copy GB/s": round(nbytes / statistics.median(copy) * 1e-6)}
        times = {tag: [] for tag in variants}
        for _ in range(ROUNDS if ON_GPU else 1):
            for tag, m in variants.items():
                y.zero_()
                ln_launch(x, y, w, b, mean, rstd, m, grid)
                assert torch.allclose(y.float(), ref.float(), atol=1e-2, rtol=1e-2), tag
                if ON_GPU:
                    times[tag].append(ms(lambda: ln_launch(x, y, w, b, mean, rstd, m, grid)))
        for tag, m in variants.items():
            regs = ""
            if ON_GPU:
                compiled = ln_kernel.warmup(x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0), 1e-5,
                                            grid=(1,), **m)
                regs = f", {compiled.n_regs} regs"
            gbs = round(nbytes / statistics.median(times[tag]) * 1e-6) if ON_GPU else "ok"
            row[tag] = f"{gbs} GB/s{regs}"
        rows_out.append(row)
        print(json.dumps(row), flush=True)

if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "next.json"), "w") as f:
        json.dump(rows_out, f, indent=1)
