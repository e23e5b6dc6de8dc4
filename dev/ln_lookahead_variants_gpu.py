"""Dev only (lookahead variants: SUM_ROWS sums dw, db over the block rows each step; W_RELOAD reloads w
every block instead of holding it)
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



load_tile, unpack, store_tile = ln["load_tile"], ln["unpack"], ln["store_tile"]
publish_shares, wait_for_shares = ln["publish_shares"], ln["wait_for_shares"]


@triton.jit
def split_v(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr,
    FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SUM_ROWS: tl.constexpr = False, W_RELOAD: tl.constexpr = False,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N  # a tile's row holds words, or elements
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    ACC_M: tl.constexpr = 1 if SUM_ROWS else BLOCK_M
    dw_acc = tl.zeros([ACC_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([ACC_M, BLOCK_N], tl.float32)
    # The loads of this program's first two blocks, and its shares of the first one. (The loop's names
    # are not used here: Triton would carry them around the loop.)
    first = group * BLOCK_M + tl.arange(0, BLOCK_M)
    x_this = load_tile(x_ptr, first, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_this = load_tile(dy_ptr, first, dy_row_stride, units, unit_ok, n_rows, PACK)
    second = first + n_groups * BLOCK_M
    x_next = load_tile(x_ptr, second, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_next = load_tile(dy_ptr, second, dy_row_stride, units, unit_ok, n_rows, PACK)
    first_ok = first < n_rows
    first = tl.minimum(first, n_rows - 1).to(tl.int64)
    first_hat = tl.where(col_ok[None, :], unpack(x_this, dtype, PACK) - tl.load(mean_ptr + first)[:, None], 0.0)
    first_hat = first_hat * tl.load(rstd_ptr + first)[:, None]
    first_g = unpack(dy_this, dtype, PACK)
    if HAS_W:
        first_g = first_g * w[None, :]
    publish_shares(shares_ptr, counter_ptr, group, n_blocks, n_rows, first, first_ok, part,
                   tl.sum(first_hat * first_g, axis=1), tl.sum(first_g, axis=1), SLICES, FLAG_WORDS)
    for block in tl.range(group, n_blocks, n_groups):
        # the block after next: two blocks of loads in flight while this one is worked on
        after = (block + 2 * n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_after = load_tile(x_ptr, after, x_row_stride, units, unit_ok, n_rows, PACK)
        dy_after = load_tile(dy_ptr, after, dy_row_stride, units, unit_ok, n_rows, PACK)
        # this block's values (its statistics loaded first: a load issued late stalls the program)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # a padded row waits on the block's last row
        mean = tl.load(mean_ptr + rows)
        rstd = tl.load(rstd_ptr + rows)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        next_ok = next_rows < n_rows
        next_rows = tl.minimum(next_rows, n_rows - 1).to(tl.int64)
        next_mean = tl.load(mean_ptr + next_rows)
        next_rstd = tl.load(rstd_ptr + next_rows)
        if W_RELOAD and HAS_W:
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        x_hat = tl.where(col_ok[None, :], unpack(x_this, dtype, PACK) - mean[:, None], 0.0) * rstd[:, None]
        dy = unpack(dy_this, dtype, PACK)
        g = dy * w[None, :] if HAS_W else dy
        # the next block's shares, published before waiting for this block's (rows past the end
        # publish nothing)
        next_hat = tl.where(col_ok[None, :], unpack(x_next, dtype, PACK) - next_mean[:, None], 0.0)
        next_hat = next_hat * next_rstd[:, None]
        next_g = unpack(dy_next, dtype, PACK)
        if HAS_W:
            next_g = next_g * w[None, :]
        publish_shares(shares_ptr, counter_ptr, block + n_groups, n_blocks, n_rows, next_rows, next_ok, part,
                       tl.sum(next_hat * next_g, axis=1), tl.sum(next_g, axis=1), SLICES, FLAG_WORDS)
        # this block: dw and db, then dx once the group's shares are in
        if COMPUTE_DWDB and SUM_ROWS:
            dw_acc += tl.sum(dy * x_hat, axis=0, keep_dims=True)
            db_acc += tl.sum(dy, axis=0, keep_dims=True)
        elif COMPUTE_DWDB:
            dw_acc += dy * x_hat
            db_acc += dy
        c1, c2 = wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
        dx = (g - (x_hat * (c1 / n_cols)[:, None] + (c2 / n_cols)[:, None])) * rstd[:, None]
        store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
        x_this, dy_this, x_next, dy_next = x_next, dy_next, x_after, dy_after
    if COMPUTE_DWDB:  # one partial line per group; each slice writes its columns of it
        offs = tl.cast(group, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)




def run_v(c, cfg, wps, sum_rows, w_reload):
    x, dy, w, mean, rstd, m = c["x"], c["dy"], c["w"], c["mean"], c["rstd"], c["m"]
    n = x.shape[1]
    ln["BWD_WARPS_PER_SM"] = wps
    dx = torch.empty_like(x)
    meta = ln["split_config"](n, x.dtype, True, True, {2: cfg, 4: cfg}, (x, dy, dx))
    meta.update(SUM_ROWS=sum_rows, W_RELOAD=w_reload)
    fp32 = torch.empty(1, device="cuda")
    sh1, co1 = ln["split_buffers"](m, meta, "cuda", launch=False)
    args1 = (x, dy, dx, w, mean, rstd, fp32, fp32, sh1, co1, m, n, x.stride(0), dy.stride(0), dx.stride(0))
    per_sm, limit, regs = ln["programs_per_sm"](split_v, args1, meta)
    slices = meta["SLICES"]
    groups = min(triton.cdiv(m, meta["BLOCK_M"]), min(per_sm, max(1, wps // meta["num_warps"])) * NUM_SMS // slices)
    ln["BWD_WARPS_PER_SM"] = 16
    if groups == 0:
        return None
    dwp, dbp = torch.full((groups, n), float("nan"), device="cuda"), torch.full((groups, n), float("nan"), device="cuda")
    dw, db = torch.empty_like(w), torch.empty_like(w)

    def fn():
        shares, counter = ln["split_buffers"](m, meta, "cuda")
        split_v[(groups * slices,)](x, dy, dx, w, mean, rstd, dwp, dbp, shares, counter, m, n,
                                    x.stride(0), dy.stride(0), dx.stride(0), **meta)
        ln["sum_partials"](dwp, dbp, dw, db)

    dx.fill_(float("nan"))
    t = bench(fn)
    bad = {k: int(v.isnan().sum()) for k, v in (("dx", dx), ("dwp", dwp), ("dbp", dbp))}
    ref = (dx.clone(), dw.clone(), db.clone())
    fn()
    det = all(torch.equal(a, r) for a, r in zip((dx, dw, db), ref))
    err = max(rel(dx, c["dx64"]), rel(dw, c["dw64"]), rel(db, c["db64"]))
    return dict(pct=100 * 3 * c["nb"] / t * 1e-6 / c["copy"], slices=slices, bm=meta["BLOCK_M"], warps=meta["num_warps"],
                pack=meta["PACK"], maxnreg=meta.get("maxnreg"), regs=regs, per_sm=per_sm, grid=groups * slices, err=err,
                det="yes" if det else "NO", nans=str(bad) if any(bad.values()) else "")


recs = []
CFGS = {
    torch.bfloat16: [("2048/4096/32", dict(SLICE_N=2048, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32)),
                     ("4096/4096/32", dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32)),
                     ("2048/2048/16", dict(SLICE_N=2048, MIN_SLICES=2, TILE=2048, BYTES_PER_THREAD=16))],
    torch.float32: [("4096/4096/32", dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32)),
                    ("2048/4096/64", dict(SLICE_N=2048, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=64)),
                    ("4096/4096/64", dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=64))],
}
for dtype in (torch.bfloat16, torch.float32):
    for n in (16384, 32768, 65536):
        if time.time() - T0 > BUDGET:
            break
        c = bwd_case(n, dtype)
        for name, cfg in CFGS[dtype]:
            for sum_rows in (False, True):
                for w_reload in (False, True):
                    for wps in (16,):
                        if time.time() - T0 > BUDGET:
                            break
                        try:
                            r = run_v(c, cfg, wps, sum_rows, w_reload)
                        except Exception as exc:  # noqa: BLE001
                            r = dict(det=repr(exc)[:80])
                        if r is None:
                            continue
                        recs.append(dict(dtype=str(dtype)[6:], N=n, cfg=name, sum_rows=int(sum_rows), w_reload=int(w_reload), wps=wps, **r))
                        print(recs[-1], flush=True)
        del c
        torch.cuda.empty_cache()
show(recs, "ln_lookahead_variants")
print(f"total {time.time() - T0:.0f} s", flush=True)
