"""Dev only: variants of the layer-norm fused forward (tutorial 02) at its widest rows, kernel-only,
CUDA-graph timed with do_bench, % of an eager copy; y, mean, rstd against float64.
  page     the page's fused kernel and launcher
  no w/b   the same without weight and bias (how much do their loads from L2 cost?)
  hints    x loaded evict_first, w and b evict_last, y stored streaming (.cs)
  x .cg    x loaded past L1 (.cg), so that w and b can stay in L1 from row to row (and w, b .ca)
  earlier run of this script (its git history): one Welford reduction via tl.reduce and a pipelined
  persistent grid (tl.range num_stages=2) were both slower

PYTHONUNBUFFERED=1 python3 dev/ln_fwd_variants_gpu.py
"""
import os
import time

import pandas as pd
import torch
import triton
import triton.language as tl
from gpu_common import load, bench, rel

T0 = time.time()
pd.set_option("display.width", 250)
OUT = os.environ.get("OUT", "/tmp")
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


@triton.jit
def chan(m_a, q_a, n_a, m_b, q_b, n_b):
    n = n_a + n_b
    d = m_b - m_a
    f = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return m_a + d * f, q_a + q_b + d * d * n_a * f, n


@triton.jit
def fwd_variant(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HINTS: tl.constexpr, WELFORD: tl.constexpr,
    STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        if HINTS == 2:  # x bypasses L1 (.cg), so that w and b stay there from row to row
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                        cache_modifier=".cg").to(tl.float32)
        elif HINTS == 3:  # the same, and w, b loaded with .ca explicitly
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                        cache_modifier=".cg").to(tl.float32)
        elif HINTS:
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
        else:
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :],
                        other=0.0).to(tl.float32)
        if WELFORD:
            ones = tl.where(col_ok, 1.0, 0.0)[None, :] + tl.zeros_like(x)
            mean, q, _ = tl.reduce((x, tl.zeros_like(x), ones), 1, chan)
            var = q / n_cols
            xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
        else:
            mean = tl.sum(x, axis=1) / n_cols
            xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
            var = tl.sum(xc * xc, axis=1) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd[:, None]
        if HINTS == 3:
            y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0, cache_modifier=".ca").to(tl.float32)[None, :]
            y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0, cache_modifier=".ca").to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])
        elif HINTS == 1:
            y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)[None, :]
            y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :], cache_modifier=".cs")
        else:
            y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)


load_tile, unpack, store_tile = ln["load_tile"], ln["unpack"], ln["store_tile"]


@triton.jit
def fwd_early(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PACK: tl.constexpr, EARLY: tl.constexpr,
):
    """w and b loaded before the statistics (EARLY=1: both, 2: w only), as loaded (16-bit pairs packed
    in 32-bit words with PACK), so that their latency overlaps the reductions."""
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N
    units = tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    one = tl.zeros([1], tl.int32)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    tile = load_tile(x_ptr, rows, x_row_stride, units, unit_ok, n_rows, PACK)
    if EARLY >= 1:
        w_t = load_tile(w_ptr, one, 0, units, unit_ok, 1, PACK)
    if EARLY == 1:
        b_t = load_tile(b_ptr, one, 0, units, unit_ok, 1, PACK)
    x = unpack(tile, dtype, PACK)
    mean = tl.sum(x, axis=1) / n_cols
    xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    if EARLY == 0:
        w_t = load_tile(w_ptr, one, 0, units, unit_ok, 1, PACK)
    if EARLY != 1:
        b_t = load_tile(b_ptr, one, 0, units, unit_ok, 1, PACK)
    y = xc * rstd[:, None] * unpack(w_t, dtype, PACK) + unpack(b_t, dtype, PACK)
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    store_tile(y_ptr, rows, y_row_stride, units, row_ok[:, None] & unit_ok[None, :], y, PACK)
    tl.store(mean_ptr + rows, mean, mask=row_ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)


def early(x, y, w, b, mean, rstd, early=1, pack=True):
    m, n = x.shape
    bm, bn, warps = ln["fused_config"](n, x.element_size(), ln["FWD_BYTES_PER_THREAD"])
    pack = pack and x.element_size() == 2 and n % 2 == 0 and x.stride(0) % 2 == 0
    fwd_early[(triton.cdiv(m, bm),)](x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, BLOCK_M=bm,
                                     BLOCK_N=bn, PACK=pack, EARLY=early, num_warps=warps)


def variant(x, y, w, b, mean, rstd, hints=0, welford=0, stages=1, persistent=False):
    m, n = x.shape
    bm, bn, warps = ln["fused_config"](n, x.element_size(), ln["FWD_BYTES_PER_THREAD"])
    grid = triton.cdiv(m, bm)
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, HINTS=hints, WELFORD=welford, STAGES=stages, num_warps=warps)
    if persistent:
        c = fwd_variant.warmup(x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, grid=(1,), **meta)
        c._init_handles()
        per_sm = max(1, min(2048 // (32 * warps), 65536 // (max(c.n_regs, 1) * 32 * warps),
                            (233472 // c.metadata.shared) if c.metadata.shared else 32))
        grid = min(grid, per_sm * ln["NUM_SMS"])
    fwd_variant[(grid,)](x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, **meta)


CANDS = [
    ("page", lambda x, y, w, b, mu, rs: ln["layer_norm_rows_forward"](x, y, w, b, mu, rs, 1e-5, split={})),
    ("no w/b", lambda x, y, w, b, mu, rs: ln["layer_norm_rows_forward"](x, y, None, None, mu, rs, 1e-5, split={})),
    ("variant plain", lambda *a: variant(*a)),
    ("hints", lambda *a: variant(*a, hints=1)),
    ("packed, w/b late", lambda *a: early(*a, early=0)),
    ("packed, w/b early", lambda *a: early(*a, early=1)),
    ("packed, w early", lambda *a: early(*a, early=2)),
    ("unpacked, w/b early", lambda *a: early(*a, early=1, pack=False)),
    ("x .cg", lambda *a: variant(*a, hints=2)),
    ("x .cg, w/b .ca", lambda *a: variant(*a, hints=3)),
    ("x .cg persistent", lambda *a: variant(*a, hints=2, persistent=True)),
    ("x .cg, w/b .ca persistent", lambda *a: variant(*a, hints=3, persistent=True)),
]
recs = []
for dtype in (torch.bfloat16, torch.float32):
    for n in (16384, 32768):
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
        for name, fn in CANDS:
            try:
                call = lambda: fn(x, y, w, b, mean, rstd)
                y.fill_(float("nan"))
                call()
                t = bench(call)
                e = rel(mean, mean64) if name == "no w/b" else max(rel(y, y64), rel(mean, mean64),
                                                                  rel(rstd, 1 / (var64 + 1e-5).sqrt()))
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 2 * nb / t * 1e-6 / copy, err=e))
            except Exception as exc:  # noqa: BLE001
                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, err=repr(exc)[:150]))
            print(recs[-1], flush=True)
        del x, y, y64
        torch.cuda.empty_cache()
df = pd.DataFrame(recs)
print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"), flush=True)
print(f"total {time.time() - T0:.0f} s", flush=True)
