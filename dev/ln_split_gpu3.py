"""Dev only (third round: RELOAD re-reads x and dy after the wait instead of keeping them in registers)
Dev only (second round): layer-norm backward split-kernel variants (accumulators reduced over the
block's rows each step; loads pipelined by Triton's tl.range(num_stages=...) instead of a register
prefetch), the fused backward with twice the warps for rows of >= 16 KB, and forward variants whose
next block is pipelined through shared memory. Kernel only, CUDA-graph replays timed by do_bench, next
to an eager copy; results checked against float64.

PYTHONUNBUFFERED=1 python3 dev/ln_split_gpu2.py [fused] [split] [fwd]
"""
import os
import sys
import time

import pandas as pd
import torch
import triton
import triton.language as tl

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "300"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)
parts = sys.argv[1:] or ["fused", "split", "fwd"]
OUT = os.environ.get("OUT", "/tmp")


def load(path):
    src = open(path).read()
    g = {"__name__": "dev_" + os.path.basename(path)[:2]}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), g)
    return g


torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
NUM_SMS = ln["NUM_SMS"]


def bench(fn, graph=True):
    fn()
    torch.cuda.synchronize()
    if not graph:
        return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=25, return_mode="median")


def show(recs, name):
    if recs:
        df = pd.DataFrame(recs)
        print(f"\n== {name}\n" + df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
        df.to_csv(os.path.join(OUT, f"{name}.csv"), index=False)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


def bwd_case(n, dtype):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
    nb = x.numel() * x.element_size()
    out = torch.empty_like(x)
    copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
    xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
    g = dy.double() * w.double()
    dx64 = (g - xh * (g * xh).mean(1, keepdim=True) - g.mean(1, keepdim=True)) * rstd.double()[:, None]
    dw64, db64 = (dy.double() * xh).sum(0), dy.double().sum(0)
    return dict(x=x, dy=dy, w=w, mean=mean, rstd=rstd, nb=nb, copy=copy, dx64=dx64, dw64=dw64, db64=db64, m=m)


if "fused" in parts:
    recs = []
    for dtype in (torch.bfloat16, torch.float32):
        for n in (2048, 4096, 8192):
            c = bwd_case(n, dtype)
            x, dy, w, mean, rstd = c["x"], c["dy"], c["w"], c["mean"], c["rstd"]
            dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
            for bpt in (32, 16, 8):
                for wps in (16, 32):
                    ln["BWD_BYTES_PER_THREAD"] = bpt
                    ln["BWD_WARPS_PER_SM"] = wps
                    fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
                    plan = fn()
                    t = bench(fn)
                    recs.append(dict(dtype=str(dtype)[6:], N=n, bpt=bpt, wps=wps, pct=100 * 3 * c["nb"] / t * 1e-6 / c["copy"],
                                     warps=plan["meta"]["num_warps"], bm=plan["block_m"], regs=plan["n_regs"], per_sm=plan["per_sm"],
                                     grid=plan["programs"], err=max(rel(dx, c["dx64"]), rel(dw, c["dw64"]), rel(db, c["db64"]))))
                    print(recs[-1], flush=True)
            ln["BWD_BYTES_PER_THREAD"] = 32
            ln["BWD_WARPS_PER_SM"] = 16
            del c, x, dy, dx
            torch.cuda.empty_cache()
    show(recs, "ln_fused_bwd")


@triton.jit
def split_variant(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC_1D: tl.constexpr, STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    """STAGES == 0: the page's register prefetch; STAGES >= 1: plain loads in a tl.range(num_stages=STAGES)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    if ACC_1D:
        dw_acc = tl.zeros([BLOCK_N], tl.float32)
        db_acc = tl.zeros([BLOCK_N], tl.float32)
    else:
        dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    rows = group * BLOCK_M + tl.arange(0, BLOCK_M)
    in_range = (rows < n_rows)[:, None] & col_ok[None, :]
    rows = rows.to(tl.int64)
    x_next = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
    dy_next = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
    for block in tl.range(group, tl.cdiv(n_rows, BLOCK_M), n_groups, num_stages=max(STAGES, 1)):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        if STAGES == 0:
            x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
            next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
            in_range = (next_rows < n_rows)[:, None] & col_ok[None, :]
            next_rows = next_rows.to(tl.int64)
            x_next = tl.load(x_ptr + next_rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
            dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
        else:
            ok = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :] if HAS_W else dy
        if COMPUTE_DWDB:
            if ACC_1D:
                dw_acc += tl.sum(dy * x_hat, axis=0)
                db_acc += tl.sum(dy, axis=0)
            else:
                dw_acc += dy * x_hat
                db_acc += dy
        s1 = tl.sum(x_hat * g, axis=1)
        s2 = tl.sum(g, axis=1)
        slots = shares_ptr + rows[:, None] * SLICES + tl.arange(0, SLICES)[None, :]
        if FLAG_WORDS:
            hi = s1.to(tl.int32, bitcast=True)
            hi = tl.where(hi == -1, 0x7FC00000, hi)
            word = (hi.to(tl.int64) << 32) | (s2.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
            tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")
            words = tl.load(slots, volatile=True)
            while tl.max((words == -1).to(tl.int32)) > 0:
                words = tl.load(slots, volatile=True)
            t1 = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
            t2 = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
        else:
            tl.store(shares_ptr + rows * SLICES + part, s1, mask=row_ok)
            tl.store(shares_ptr + (n_rows + rows) * SLICES + part, s2, mask=row_ok)
            tl.debug_barrier()
            arrived = tl.atomic_add(counter_ptr + block, 1, sem="release") + 1
            while arrived < SLICES:
                arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
            t1 = tl.load(slots, cache_modifier=".cg")
            t2 = tl.load(slots + n_rows * SLICES, cache_modifier=".cg")
        c1 = tl.sum(t1, axis=1) / n_cols
        c2 = tl.sum(t2, axis=1) / n_cols
        if RELOAD:
            ok2 = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok2, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok2, other=0.0).to(tl.float32)
            x_hat = (x - mean[:, None]) * rstd[:, None]
            g = dy * w[None, :] if HAS_W else dy
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    if COMPUTE_DWDB:
        offs = tl.cast(group, tl.int64) * n_cols + cols
        if ACC_1D:
            tl.store(dw_partial_ptr + offs, dw_acc, mask=col_ok)
            tl.store(db_partial_ptr + offs, db_acc, mask=col_ok)
        else:
            tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
            tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)


def run_split(c, slices, block_m, block_n, warps, flags, acc1d, stages, wps, reload=False):
    x, dy, w, mean, rstd, m = c["x"], c["dy"], c["w"], c["mean"], c["rstd"], c["m"]
    n = x.shape[1]
    meta = dict(HAS_W=True, COMPUTE_DWDB=True, SLICES=slices, FLAG_WORDS=flags, BLOCK_M=block_m, BLOCK_N=block_n,
                ACC_1D=acc1d, STAGES=stages, RELOAD=reload, num_warps=warps)
    fp32 = torch.empty(1, device="cuda")
    shares1, counter1 = ln["split_buffers"](m, meta, "cuda", launch=False)
    dx = torch.empty_like(x)
    args1 = (x, dy, dx, w, mean, rstd, fp32, fp32, shares1, counter1, m, n, x.stride(0), dy.stride(0), dx.stride(0))
    per_sm, limit, regs = ln["programs_per_sm"](split_variant, args1, meta)
    per_sm_used = min(per_sm, max(1, wps // warps))
    groups = min(triton.cdiv(m, block_m), per_sm_used * NUM_SMS // slices)
    if groups == 0:
        return None
    dwp = torch.empty((groups, n), device="cuda")
    dbp = torch.empty((groups, n), device="cuda")
    dw, db = torch.empty_like(w), torch.empty_like(w)

    def fn():
        shares, counter = ln["split_buffers"](m, meta, "cuda")
        split_variant[(groups * slices,)](x, dy, dx, w, mean, rstd, dwp, dbp, shares, counter, m, n,
                                          x.stride(0), dy.stride(0), dx.stride(0), **meta)
        ln["sum_partials"](dwp, dbp, dw, db)

    t = bench(fn)
    ref = (dx.clone(), dw.clone(), db.clone())
    fn()
    det = all(torch.equal(a, r) for a, r in zip((dx, dw, db), ref))
    err = max(rel(dx, c["dx64"]), rel(dw, c["dw64"]), rel(db, c["db64"]))
    return dict(pct=100 * 3 * c["nb"] / t * 1e-6 / c["copy"], regs=regs, per_sm=per_sm, grid=groups * slices, err=err,
                det="yes" if det else "NO")


if "split" in parts:
    recs = []
    for dtype in (torch.bfloat16, torch.float32):
        es = 2 if dtype == torch.bfloat16 else 4
        for n in (8192, 16384, 32768, 65536):
            if time.time() - T0 > BUDGET * 0.85:
                break
            c = bwd_case(n, dtype)
            for slice_n in (2048, 4096):
                slices = n // slice_n
                if slices < 2 or slices > 32:
                    continue
                for tile in (2048, 4096, 8192, 16384):
                    block_m = tile // slice_n
                    if block_m < 1 or block_m > 4:
                        continue
                    for warps in (4, 8, 16):
                        bpt = tile * es // (32 * warps)
                        if bpt > 64 or bpt < 16:
                            continue
                        acc1d = slice_n * es >= warps * 32 * 16 or block_m == 1
                        for reload in (False, True):
                            for wps in (32,):
                                if time.time() - T0 > BUDGET * 0.85:
                                    break
                                try:
                                    r = run_split(c, slices, block_m, slice_n, warps, warps <= 16, acc1d, 0, wps, reload)
                                except Exception as exc:  # noqa: BLE001
                                    r = dict(det=repr(exc)[:60])
                                if r is None:
                                    continue
                                recs.append(dict(dtype=str(dtype)[6:], N=n, slice=slice_n, bm=block_m, warps=warps,
                                                 acc1d=int(acc1d), reload=int(reload), wps=wps, **r))
                                print(recs[-1], flush=True)
            del c
            torch.cuda.empty_cache()
    show(recs, "ln_split_variants3")
    df = pd.DataFrame(recs)
    if len(df) and "pct" in df:
        print(df.sort_values("pct", ascending=False).groupby(["dtype", "N"]).head(5).to_string(index=False), flush=True)


@triton.jit
def fwd_staged(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
        var = tl.sum(xc * xc, axis=1) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd[:, None]
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)


if "fwd" in parts:
    recs = []
    for dtype, n in [(torch.bfloat16, 16384), (torch.float32, 32768), (torch.bfloat16, 32768), (torch.float32, 16384)]:
        if time.time() - T0 > BUDGET:
            break
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: y.copy_(x), graph=False) * 1e-6
        y64 = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        for bm in (1, 2):
            for warps in (16, 32):
                for stages in (1, 2, 3):
                    meta = dict(BLOCK_M=bm, BLOCK_N=n, STAGES=stages, num_warps=warps)
                    args = (x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5)
                    try:
                        per_sm, limit, regs = ln["programs_per_sm"](fwd_staged, args, meta)
                        for grid_kind in ("plain", "persistent"):
                            if grid_kind == "plain" and stages > 1:
                                continue
                            grid = triton.cdiv(m, bm) if grid_kind == "plain" else min(triton.cdiv(m, bm), per_sm * NUM_SMS)
                            fn = lambda: fwd_staged[(grid,)](*args, **meta)
                            t = bench(fn)
                            recs.append(dict(dtype=str(dtype)[6:], N=n, bm=bm, warps=warps, stages=stages, grid=grid_kind,
                                             pct=100 * 2 * nb / t * 1e-6 / copy, regs=regs, per_sm=per_sm, limit=limit, err=rel(y, y64)))
                            print(recs[-1], flush=True)
                    except Exception as exc:  # noqa: BLE001
                        recs.append(dict(dtype=str(dtype)[6:], N=n, bm=bm, warps=warps, stages=stages, err=repr(exc)[:60]))
        del x, y, y64
        torch.cuda.empty_cache()
    show(recs, "ln_fwd_staged")
print(f"total {time.time() - T0:.0f} s", flush=True)
