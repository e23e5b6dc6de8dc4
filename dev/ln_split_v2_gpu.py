"""Dev only: variants of the layer-norm split backward (tutorial 02) for 16-bit rows, run through the
page's own launcher with the kernel swapped. The variant keeps only the packed loads of each block
alive (x_hat and dy recomputed from them when used) so that 4096-column slices fit in 128 registers,
and can publish its shares two blocks ahead (LAG=2) instead of one. Also the fused backward at 8192.
Kernel-only CUDA-graph timings with do_bench; dx, dw, db against float64; bitwise repeatability.

PYTHONUNBUFFERED=1 python3 dev/ln_split_v2_gpu.py            (on the GPU)
TRITON_INTERPRET=1 python3 dev/ln_split_v2_gpu.py cpu         (correctness only, one slice)
"""
import os
import sys
import time

import pandas as pd
import torch
import triton
import triton.language as tl
from gpu_common import load, bench, rel

CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "200"))
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 500)
OUT = os.environ.get("OUT", "/tmp")

if not CPU:
    torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
load_tile, unpack, store_tile = ln["load_tile"], ln["unpack"], ln["store_tile"]
publish_shares, wait_for_shares = ln["publish_shares"], ln["wait_for_shares"]
# the page's own: a block's tiles and statistics, and its x_hat and dy from them
load_block, hat_dy = ln["load_block"], ln["x_hat_and_dy"]


@triton.jit
def get_w(w_ptr, w, cols, col_ok, RELOAD_W: tl.constexpr):
    if RELOAD_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    return w


@triton.jit
def publish_block(shares_ptr, counter_ptr, block, n_blocks, n_rows, part, x, dy, mean, rstd, w_ptr, w, cols, col_ok,
                  dtype: tl.constexpr, HAS_W: tl.constexpr, RELOAD_W: tl.constexpr, SLICES: tl.constexpr,
                  FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    hat, g = hat_dy(x, dy, mean, rstd, col_ok, dtype, PACK, EVEN)
    if HAS_W:
        g = g * get_w(w_ptr, w, cols, col_ok, RELOAD_W)[None, :]
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    publish_shares(shares_ptr, counter_ptr, block, n_blocks, n_rows, rows, ok, part,
                   tl.sum(hat * g, axis=1), tl.sum(g, axis=1), SLICES, FLAG_WORDS)


@triton.jit
def finish_block(dx_ptr, shares_ptr, counter_ptr, block, n_rows, n_cols, dx_row_stride, units, unit_ok, x, dy,
                 mean, rstd, w_ptr, w, cols, col_ok, dw_acc, db_acc,
                 dtype: tl.constexpr, HAS_W: tl.constexpr, RELOAD_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr,
                 SLICES: tl.constexpr, SLOTS: tl.constexpr, FLAG_WORDS: tl.constexpr, PACK: tl.constexpr,
                 EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    hat, d = hat_dy(x, dy, mean, rstd, col_ok, dtype, PACK, EVEN)
    if COMPUTE_DWDB:
        dw_acc += d * hat
        db_acc += d
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    c1, c2 = wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
    g = d
    if HAS_W:
        g = d * get_w(w_ptr, w, cols, col_ok, RELOAD_W)[None, :]
    dx = (g - (hat * (c1 / n_cols)[:, None] + (c2 / n_cols)[:, None])) * rstd[:, None]
    store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
    return dw_acc, db_acc


@triton.jit
def ln_bwd_split_v2(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr,
    FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, LAG: tl.constexpr = 1, RELOAD_W: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    Q = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.zeros([BLOCK_N], tl.float32)
    if HAS_W and not RELOAD_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    xa, da, ma, ra = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, group, n_rows, x_row_stride, dy_row_stride,
                                units, unit_ok, PACK, BLOCK_M)
    xb, db_, mb, rb = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, group + Q, n_rows, x_row_stride,
                                 dy_row_stride, units, unit_ok, PACK, BLOCK_M)
    if LAG == 2:
        xc, dc, mc, rc = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, group + 2 * Q, n_rows, x_row_stride,
                                    dy_row_stride, units, unit_ok, PACK, BLOCK_M)
    publish_block(shares_ptr, counter_ptr, group, n_blocks, n_rows, part, xa, da, ma, ra, w_ptr, w, cols, col_ok,
                  dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
    if LAG == 2:
        publish_block(shares_ptr, counter_ptr, group + Q, n_blocks, n_rows, part, xb, db_, mb, rb, w_ptr, w, cols,
                      col_ok, dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
        for block in tl.range(group, n_blocks, Q):
            xd, dd, md, rd = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, block + 3 * Q, n_rows, x_row_stride,
                                        dy_row_stride, units, unit_ok, PACK, BLOCK_M)
            publish_block(shares_ptr, counter_ptr, block + 2 * Q, n_blocks, n_rows, part, xc, dc, mc, rc, w_ptr, w,
                          cols, col_ok, dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
            dw_acc, db_acc = finish_block(dx_ptr, shares_ptr, counter_ptr, block, n_rows, n_cols, dx_row_stride,
                                          units, unit_ok, xa, da, ma, ra, w_ptr, w, cols, col_ok, dw_acc, db_acc,
                                          dtype, HAS_W, RELOAD_W, COMPUTE_DWDB, SLICES, SLOTS, FLAG_WORDS, PACK,
                                          EVEN, BLOCK_M)
            xa, da, ma, ra = xb, db_, mb, rb
            xb, db_, mb, rb = xc, dc, mc, rc
            xc, dc, mc, rc = xd, dd, md, rd
    else:
        for block in tl.range(group, n_blocks, Q):
            xc, dc, mc, rc = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, block + 2 * Q, n_rows, x_row_stride,
                                        dy_row_stride, units, unit_ok, PACK, BLOCK_M)
            publish_block(shares_ptr, counter_ptr, block + Q, n_blocks, n_rows, part, xb, db_, mb, rb, w_ptr, w,
                          cols, col_ok, dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
            dw_acc, db_acc = finish_block(dx_ptr, shares_ptr, counter_ptr, block, n_rows, n_cols, dx_row_stride,
                                          units, unit_ok, xa, da, ma, ra, w_ptr, w, cols, col_ok, dw_acc, db_acc,
                                          dtype, HAS_W, RELOAD_W, COMPUTE_DWDB, SLICES, SLOTS, FLAG_WORDS, PACK,
                                          EVEN, BLOCK_M)
            xa, da, ma, ra = xb, db_, mb, rb
            xb, db_, mb, rb = xc, dc, mc, rc
    if COMPUTE_DWDB:
        offs = tl.cast(group, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)


@triton.jit
def ln_bwd_split_v3(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr,
    FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr = 3, RELOAD_W: tl.constexpr = 0,
):
    """The next block's loads are in the loop, used in the same step: Triton's pipeliner (NUM_STAGES)
    issues them steps ahead into shared memory, so only this block's packed tiles live in registers."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    Q = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.zeros([BLOCK_N], tl.float32)
    if HAS_W and not RELOAD_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    xa, da, ma, ra = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, group, n_rows, x_row_stride, dy_row_stride,
                                units, unit_ok, PACK, BLOCK_M)
    publish_block(shares_ptr, counter_ptr, group, n_blocks, n_rows, part, xa, da, ma, ra, w_ptr, w, cols, col_ok,
                  dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
    for block in tl.range(group, n_blocks, Q, num_stages=NUM_STAGES):
        xb, db_, mb, rb = load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, block + Q, n_rows, x_row_stride,
                                     dy_row_stride, units, unit_ok, PACK, BLOCK_M)
        publish_block(shares_ptr, counter_ptr, block + Q, n_blocks, n_rows, part, xb, db_, mb, rb, w_ptr, w,
                      cols, col_ok, dtype, HAS_W, RELOAD_W, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
        dw_acc, db_acc = finish_block(dx_ptr, shares_ptr, counter_ptr, block, n_rows, n_cols, dx_row_stride,
                                      units, unit_ok, xa, da, ma, ra, w_ptr, w, cols, col_ok, dw_acc, db_acc,
                                      dtype, HAS_W, RELOAD_W, COMPUTE_DWDB, SLICES, SLOTS, FLAG_WORDS, PACK,
                                      EVEN, BLOCK_M)
        xa, da, ma, ra = xb, db_, mb, rb
    if COMPUTE_DWDB:
        offs = tl.cast(group, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)


PAGE_KERNEL = ln["layer_norm_bwd_split_kernel"]
PAGE_SPLIT_CONFIG = ln["split_config"]
EXTRA = {}


def split_config_v2(*args, **kwargs):
    meta = PAGE_SPLIT_CONFIG(*args, **kwargs)
    meta.update(EXTRA)
    return meta


def use(kernel, extra=None, warps_per_sm=16):
    """Make the page's launcher use this split kernel, with these extra meta-parameters."""
    ln["layer_norm_bwd_split_kernel"] = kernel
    EXTRA.clear()
    EXTRA.update(extra or {})
    ln["split_config"] = split_config_v2
    ln["SPLIT_WARPS_PER_SM"] = warps_per_sm


def refs(x, dy, w, mean, rstd):
    xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
    g = dy.double() * w.double()
    dx64 = (g - xh * (g * xh).mean(1, keepdim=True) - g.mean(1, keepdim=True)) * rstd.double()[:, None]
    return dx64, (dy.double() * xh).sum(0), dy.double().sum(0)


def cfg(slice_n, tile, bpt):
    return dict(SLICE_N=slice_n, MIN_SLICES=2, TILE=tile, BYTES_PER_THREAD=bpt)


if CPU:  # interpreter: one slice per row, no waits; every variant against float64
    dev = "cpu"
    for dtype in (torch.bfloat16, torch.float32):
        for m, n in ((7, 300), (5, 1001), (9, 2048), (3, 4097)):
            x = torch.randn(m, n, dtype=dtype) * 2 + 3
            dy, w = torch.randn(m, n, dtype=dtype), torch.randn(n, dtype=dtype)
            y, mean, rstd = torch.empty_like(x), torch.empty(m), torch.empty(m)
            ln["layer_norm_rows_forward"](x, y, w, w, mean, rstd, 1e-5)
            dx64, dw64, db64 = refs(x, dy, w, mean, rstd)
            for lag in (1, 2):
                for reload in (0, 1):
                    use(ln_bwd_split_v2, dict(LAG=lag, RELOAD_W=reload))
                    for programs in (1, 2, 4):
                        dx = torch.full_like(x, float("nan"))
                        dw, db = torch.full_like(w, float("nan")), torch.full_like(w, float("nan"))
                        plan = ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, programs=programs,
                                                              max_fused_n=0)
                        assert plan["kernel"] is ln_bwd_split_v2
                        e = max(rel(dx, dx64), rel(dw, dw64), rel(db, db64))
                        assert e < 2e-2, (dtype, m, n, lag, reload, programs, e)
            print(dtype, "ok", flush=True)
    sys.exit(0)

print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
V2 = ln_bwd_split_v2
CANDS = [  # name, kernel, SPLIT config, extra meta, warps per SM; max_fused_n for N = 8192
    ("page", PAGE_KERNEL, None, {}, 16),
    ("v2 2048 lag1", V2, cfg(2048, 2048, 16), dict(LAG=1), 16),
    ("v2 2048 lag2", V2, cfg(2048, 2048, 16), dict(LAG=2), 16),
    ("v2 4096 lag1", V2, cfg(4096, 4096, 32), dict(LAG=1), 16),
    ("v2 4096 lag1 rw", V2, cfg(4096, 4096, 32), dict(LAG=1, RELOAD_W=1), 16),
    ("v2 4096 lag2 rw", V2, cfg(4096, 4096, 32), dict(LAG=2, RELOAD_W=1), 16),
    ("v2 8192/16w lag1", V2, cfg(8192, 8192, 32), dict(LAG=1), 16),
    ("v2 2048 lag1 24/SM", V2, cfg(2048, 2048, 16), dict(LAG=1, RELOAD_W=1), 24),
    ("v2 4096/16w lag1 32/SM", V2, cfg(4096, 4096, 16), dict(LAG=1, RELOAD_W=1), 32),
]
if os.environ.get("SWEEP") == "2":  # programs per SM: smaller programs
    P = PAGE_KERNEL
    CANDS = [
        ("page", P, None, {}, 16),
        ("page 1024/4w", P, cfg(1024, 1024, 16), {}, 16),
        ("page 1024/4w 20/SM", P, cfg(1024, 1024, 16), {}, 20),
        ("page 2048/4w", P, cfg(2048, 2048, 32), {}, 16),
        ("page 2x1024/8w", P, cfg(1024, 2048, 16), {}, 16),
        ("v2 1024/4w", V2, cfg(1024, 1024, 16), dict(LAG=1), 16),
        ("v2 1024/4w 24/SM", V2, cfg(1024, 1024, 16), dict(LAG=1), 24),
        ("v2 1024/4w lag2", V2, cfg(1024, 1024, 16), dict(LAG=2), 16),
        ("v2 2048/4w", V2, cfg(2048, 2048, 32), dict(LAG=1), 16),
        ("v2 2048/8w 24/SM w", V2, cfg(2048, 2048, 16), dict(LAG=1), 24),
    ]
if os.environ.get("SWEEP") == "3":  # 4-warp programs without spills: slots padded, w reloaded
    P = PAGE_KERNEL
    CANDS = [
        ("page", P, None, {}, 16),
        ("v2 2048/4w", V2, cfg(2048, 2048, 32), dict(LAG=1), 16),
        ("v2 2048/4w s32", V2, cfg(2048, 2048, 32), dict(LAG=1, SLOTS=32), 16),
        ("v2 2048/4w s64", V2, cfg(2048, 2048, 32), dict(LAG=1, SLOTS=64), 16),
        ("v2 2048/4w rw", V2, cfg(2048, 2048, 32), dict(LAG=1, RELOAD_W=1), 16),
        ("v2 2048/4w rw s32", V2, cfg(2048, 2048, 32), dict(LAG=1, RELOAD_W=1, SLOTS=32), 16),
        ("page 2048/4w s32", P, cfg(2048, 2048, 32), dict(SLOTS=32), 16),
        ("v2 1024/4w 24/SM s32", V2, cfg(1024, 1024, 16), dict(LAG=1, SLOTS=32), 24),
        ("v2 1024/4w 24/SM s64", V2, cfg(1024, 1024, 16), dict(LAG=1, SLOTS=64), 24),
        ("v2 1024/4w 24/SM rw", V2, cfg(1024, 1024, 16), dict(LAG=1, RELOAD_W=1), 24),
        ("v2 1024/4w 20/SM", V2, cfg(1024, 1024, 16), dict(LAG=1), 20),
    ]
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in ((8192, 16384, 32768, 65536) if dtype == torch.bfloat16 else (16384, 32768) if os.environ.get('SWEEP') not in ('2', '3') else (16384, 32768)):
        if time.time() - T0 > BUDGET:
            break
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        ln["layer_norm_rows_forward"](x, y, w, w, mean, rstd, 1e-5)
        del y
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        nb = x.numel() * x.element_size()
        out = torch.empty_like(x)
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        del out
        dx64, dw64, db64 = refs(x, dy, w, mean, rstd)
        cands = CANDS if dtype == torch.bfloat16 else CANDS[:1] + CANDS[3:5]
        if n == 8192:
            cands = [("fused", PAGE_KERNEL, None, {}, 16)] + CANDS[3:7]
        if os.environ.get("SWEEP") in ("2", "3"):
            cands = CANDS if n > 8192 else [("fused", PAGE_KERNEL, None, {}, 16)] + CANDS[1:]
        for name, kernel, scfg, extra, wps in cands:
            if time.time() - T0 > BUDGET:
                break
            use(kernel, extra, wps)
            kw = dict(split={2: scfg, 4: scfg} if scfg else None)
            if n == 8192 and name != "fused":
                kw["max_fused_n"] = 4096
            try:
                fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, **kw)
                plan = fn()
                t = bench(fn)
                e = max(rel(dx, dx64), rel(dw, dw64), rel(db, db64))
                ref = (dx.clone(), dw.clone(), db.clone())
                same = True
                for _ in range(3):
                    fn()
                    same &= all(torch.equal(a, r) for a, r in zip((dx, dw, db), ref))
                meta = plan["meta"]
                wa = ln["bwd_args"](plan["kernel"], x, dy, dx, w, mean, rstd, dw, db, meta, plan["rows_per_program"],
                                    launch=False)
                compiled = plan["kernel"].warmup(*wa, grid=(1,), **meta)
                compiled._init_handles()
                spills = getattr(compiled, "n_spills", "?")
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 3 * nb / t * 1e-6 / copy,
                                 slices=meta.get("SLICES", 1), bm=plan["block_m"], bn=meta.get("BLOCK_N"),
                                 warps=meta["num_warps"], maxnreg=meta.get("maxnreg", ""),
                                 regs=plan["n_regs"], spills=spills, per_sm=plan["per_sm"], grid=plan["programs"], err=e,
                                 det="yes" if same else "NO"))
            except Exception as exc:  # noqa: BLE001
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, det=repr(exc)[:100]))
            print(recs[-1], flush=True)
        use(PAGE_KERNEL)
        del x, dy, dx, dx64
        torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
df.to_csv(os.path.join(OUT, "ln_split_v2.csv"), index=False)
print(f"total {time.time() - T0:.0f} s", flush=True)
