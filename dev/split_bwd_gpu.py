"""Dev only: RMSNorm backward for wide rows with each row split over SLICES co-resident programs that
exchange their partial dot products through global memory (a counter per block of rows).

Times the candidate configs against the page's current backward, kernel only, CUDA-graph replays timed
by do_bench, next to an eager copy; checks dx and dw against float64 for every config.

PYTHONUNBUFFERED=1 python3 dev/split_bwd_gpu.py
"""
import os
import sys
import time

import pandas as pd
import torch
import triton
import triton.language as tl

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "420"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)


def load(path):
    src = open(path).read()
    g = {"__name__": "dev_" + os.path.basename(path)[:2]}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), g)
    return g


@triton.jit
def rms_norm_bwd_split_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, dots_ptr, arrived_ptr, n_rows, n_cols,
    x_row_stride, dy_row_stride, dx_row_stride,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, SLICES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FLAG_SYNC: tl.constexpr = False, W_RELOAD: tl.constexpr = False,
):
    pid = tl.program_id(0)
    group = pid // SLICES
    part = pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT and not W_RELOAD:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    rows = group * BLOCK_M + tl.arange(0, BLOCK_M)
    in_range = (rows < n_rows)[:, None] & col_ok[None, :]
    rows = rows.to(tl.int64)
    x_next = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
    dy_next = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
    for block in tl.range(group, tl.cdiv(n_rows, BLOCK_M), n_groups):
        x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        in_range = (next_rows < n_rows)[:, None] & col_ok[None, :]
        next_rows = next_rows.to(tl.int64)
        x_next = tl.load(x_ptr + next_rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
        dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = x * rstd[:, None]
        g = dy
        if HAS_WEIGHT:
            if W_RELOAD:
                w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
            g = dy * w[None, :]
        if COMPUTE_DW:
            dw_acc += dy * x_hat
        # publish this slice's share of each row's dot product, then wait for the other slices'
        mine = tl.sum(g * x_hat, axis=1)
        if FLAG_SYNC:
            # one 64-bit word per (row, slice): bit 32 says "written", the low 32 bits are the fp32 value
            word = (mine.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | 0x100000000
            tl.atomic_xchg(dots_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed", scope="gpu")
            slots = dots_ptr + rows[:, None] * SLICES + tl.arange(0, SLICES)[None, :]
            words = tl.load(slots, volatile=True)
            while tl.min(words >> 32) == 0:
                words = tl.load(slots, volatile=True)
            dots = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
        else:
            tl.store(dots_ptr + rows * SLICES + part, mine, mask=row_ok)
            tl.debug_barrier()  # every thread's store is issued before the release below
            arrived = tl.atomic_add(arrived_ptr + block, 1, sem="release", scope="gpu") + 1
            while arrived < SLICES:
                arrived = tl.atomic_add(arrived_ptr + block, 0, sem="acquire", scope="gpu")
            dots = tl.load(dots_ptr + rows[:, None] * SLICES + tl.arange(0, SLICES)[None, :], cache_modifier=".cg")
        c = tl.sum(dots, axis=1) / n_cols
        dx = (g - x_hat * c[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    if COMPUTE_DW:
        tl.store(dw_partial_ptr + tl.cast(group, tl.int64) * n_cols + cols, tl.sum(dw_acc, axis=0), mask=col_ok)


def split_backward(rms, x, w, rstd, dy, dx, dw, slices, block_m, bytes_per_thread, per_sm, flag=False, reload=False):
    n_rows, n_cols = x.shape
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    num_warps = rms["warps_for"](block_m * block_n, x.element_size(), bytes_per_thread)
    meta = dict(HAS_WEIGHT=True, COMPUTE_DW=True, SLICES=slices, BLOCK_M=block_m, BLOCK_N=block_n,
                num_warps=num_warps, FLAG_SYNC=flag, W_RELOAD=reload)
    n_blocks = triton.cdiv(n_rows, block_m)
    if flag:
        dots = torch.zeros((n_rows, slices), device=x.device, dtype=torch.int64)
    else:
        dots = torch.empty((n_rows, slices), device=x.device, dtype=torch.float32)
    key = (slices, block_m, block_n, num_warps, x.dtype, flag, reload)
    if key not in FIT:
        args = (x, w, rstd, dy, dx, dots, dots, dots, n_rows, n_cols, x.stride(0), dy.stride(0), dx.stride(0))
        FIT[key] = rms["programs_per_sm"](rms_norm_bwd_split_kernel, args, meta)
    fit = FIT[key][0]
    groups = max(1, min(n_blocks, min(per_sm, fit) * rms["NUM_SMS"] // slices))
    arrived = dots if flag else torch.zeros(n_blocks, device=x.device, dtype=torch.int32)
    dw_partial = torch.empty((groups, n_cols), device=x.device, dtype=torch.float32)
    rms_norm_bwd_split_kernel[(groups * slices,)](
        x, w, rstd, dy, dx, dw_partial, dots, arrived, n_rows, n_cols, x.stride(0), dy.stride(0), dx.stride(0),
        **meta)
    block = 16 if n_cols <= 4096 else 32
    rms["dw_reduce_kernel"][(triton.cdiv(n_cols, block),)](dw_partial, dw, groups, n_cols, BLOCK_P=64,
                                                           BLOCK_N=block, num_warps=4)
    return dict(BLOCK_N=block_n, warps=num_warps, fit=FIT[key], groups=groups)


FIT = {}

if __name__ == "__main__":
    rms = load("tutorials/04_rms_norm.py")
    torch.cuda.set_stream(torch.cuda.Stream())

    def bench(fn, graph=True):
        fn()
        torch.cuda.synchronize()
        if not graph:
            return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=torch.cuda.current_stream()):
            fn()
        return triton.testing.do_bench(g.replay, warmup=5, rep=20, return_mode="median")

    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
    recs = []
    CONFIGS = {
        ("bfloat16", 8192): [(1, 1, 16), (1, 1, 32), (2, 1, 32), (2, 2, 16)],
        ("bfloat16", 16384): [(2, 1, 32), (4, 1, 32), (4, 2, 16), (2, 1, 16), (8, 2, 32)],
        ("bfloat16", 32768): [(4, 1, 32), (8, 1, 32), (8, 2, 16), (4, 1, 16), (16, 2, 32)],
        ("bfloat16", 65536): [(8, 1, 32), (16, 1, 32), (16, 2, 16)],
        ("float32", 8192): [(2, 2, 16), (4, 1, 32), (8, 2, 32)],
        ("float32", 16384): [(4, 2, 16), (8, 1, 32), (16, 2, 32)],
        ("float32", 32768): [(8, 2, 16), (16, 1, 32), (8, 1, 16)],
        ("float32", 65536): [(16, 2, 16), (16, 1, 32)],
    }
    cases = [(torch.bfloat16, 16384), (torch.bfloat16, 32768), (torch.float32, 16384), (torch.float32, 32768),
             (torch.bfloat16, 8192), (torch.float32, 8192), (torch.bfloat16, 65536), (torch.float32, 65536)]
    for dtype, n in cases:
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        dy = torch.randn_like(x)
        w = torch.randn(n, device="cuda", dtype=dtype)
        dx = torch.empty_like(x)
        dw = torch.empty_like(w)
        out = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        rstd = torch.rsqrt(x.float().pow(2).mean(1) + 1e-6)
        # float64 reference
        xd, dyd, wd, rd = x.double(), dy.double(), w.double(), rstd.double()
        xh = xd * rd[:, None]
        gd = dyd * wd
        dx_ref = (gd - xh * (gd * xh).mean(1, keepdim=True)) * rd[:, None]
        dw_ref = (dyd * xh).sum(0)
        del xd, dyd, xh, gd

        def err(a, ref):
            return ((a.double() - ref).norm() / ref.norm()).item()

        ms = bench(lambda: rms["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw))
        recs.append(dict(dtype=str(dtype)[6:], N=n, cfg="page", pct=100 * 3 * nb / ms * 1e-6 / copy,
                         dx_err=err(dx, dx_ref), dw_err=err(dw, dw_ref)))
        print(recs[-1], flush=True)
        for slices, block_m, bpt in CONFIGS[(str(dtype)[6:], n)]:
            for flag, reload in ((False, False), (True, False), (True, True)):
                if time.time() - T0 > BUDGET:
                    break
                dx.fill_(float("nan"))
                dw.fill_(float("nan"))
                try:
                    info = split_backward(rms, x, w, rstd, dy, dx, dw, slices, block_m, bpt, 4, flag, reload)
                    torch.cuda.synchronize()
                    e1, e2 = err(dx, dx_ref), err(dw, dw_ref)
                    ms = bench(lambda: split_backward(rms, x, w, rstd, dy, dx, dw, slices, block_m, bpt, 4, flag,
                                                      reload))
                except Exception as e:
                    print("skip", dtype, n, slices, block_m, bpt, flag, reload, type(e).__name__, str(e)[:200],
                          flush=True)
                    continue
                recs.append(dict(dtype=str(dtype)[6:], N=n, S=slices, BM=block_m, bpt=bpt, flag=flag, reload=reload,
                                 info=str(info), pct=100 * 3 * nb / ms * 1e-6 / copy, dx_err=e1, dw_err=e2))
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in recs[-1].items()),
                      flush=True)
        del x, dy, dx, out, dx_ref
        torch.cuda.empty_cache()
    df = pd.DataFrame(recs)
    df.to_csv(os.path.join(os.environ.get("OUT", "/tmp"), "split.csv"), index=False)
    best = df.loc[df.groupby(["dtype", "N"])["pct"].idxmax()]
    print(best.drop(columns=['info']).to_string(index=False), flush=True)
    print(f"done {time.time() - T0:.0f}s")
