"""GPU scratch 2 for tutorial 04: plain-grid forward, small-grid prefetching backward, chunked backward,
wide dw reduction; each against the copy, the tutorial's current path and torch.compile.

PYTHONUNBUFFERED=1 python3 dev/rms_norm_gpu2.py      (also runs on a CPU through the interpreter, tiny sizes)
"""
import os
import time

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"
import pandas as pd
import torch.nn.functional as F
import triton
import triton.language as tl

T0 = time.time()
src = open("tutorials/04_rms_norm.py").read()
g = {"__name__": "rms_dev"}
exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath("tutorials/04_rms_norm.py"), "exec"), g)
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
BUDGET = float(os.environ.get("BUDGET", "205"))
NUM_SMS = g["NUM_SMS"]
DEV = "cuda" if ON_GPU else "cpu"


@triton.jit
def bwd_pf_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dwp_ptr, n_rows, n_cols, sx, sdy, sdx,
                  HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_partial = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = (rows < n_rows)[:, None] & col_ok[None, :]
    r64 = rows.to(tl.int64)
    x_next = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=ok, other=0.0)
    dy_next = tl.load(dy_ptr + r64[:, None] * sdy + cols[None, :], mask=ok, other=0.0)
    for block in tl.range(pid, n_blocks, nprog):
        x = x_next.to(tl.float32)
        dy = dy_next.to(tl.float32)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        r64 = tl.minimum(rows, n_rows - 1).to(tl.int64)
        nrows = (block + nprog) * BLOCK_M + tl.arange(0, BLOCK_M)
        nok = (nrows < n_rows)[:, None] & col_ok[None, :]
        n64 = nrows.to(tl.int64)
        x_next = tl.load(x_ptr + n64[:, None] * sx + cols[None, :], mask=nok, other=0.0)
        dy_next = tl.load(dy_ptr + n64[:, None] * sdy + cols[None, :], mask=nok, other=0.0)
        rstd = tl.load(rstd_ptr + r64)
        x_hat = x * rstd[:, None]
        g = dy * w[None, :] if HAS_WEIGHT else dy
        if COMPUTE_DW:  # rows past the end were loaded as zeros: they add nothing
            dw_partial += dy * x_hat
        c = tl.sum(g * x_hat, axis=1) / n_cols
        dx = (g - x_hat * c[:, None]) * rstd[:, None]
        tl.store(dx_ptr + r64[:, None] * sdx + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    if COMPUTE_DW:
        tl.store(dwp_ptr + tl.cast(pid, tl.int64) * n_cols + cols, tl.sum(dw_partial, axis=0), mask=col_ok)


@triton.jit
def bwd_chunk_pf_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dwp_ptr, n_rows, n_cols, sx, sdy, sdx,
                        HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, CHUNK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, CHUNK_N)
    n_chunks = tl.cdiv(n_cols, CHUNK_N)
    dw_row = dwp_ptr + tl.cast(pid, tl.int64) * n_cols
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * sx
        dy_row = dy_ptr + tl.cast(row, tl.int64) * sdy
        dx_row = dx_ptr + tl.cast(row, tl.int64) * sdx
        rstd = tl.load(rstd_ptr + row)
        acc = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_next = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x, dy = x_next, dy_next
            here = chunk * CHUNK_N + cols
            offs = here + CHUNK_N
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            gg = dy.to(tl.float32)
            if HAS_WEIGHT:
                gg = gg * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            acc += gg * x.to(tl.float32)
        c = tl.sum(acc, axis=0) * rstd / n_cols
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x, dy = x_next, dy_next
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols
            offs = here - CHUNK_N
            in_row = (offs >= 0) & (offs < n_cols)
            x_next = tl.load(x_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            ok = here < n_cols
            x_hat = x.to(tl.float32) * rstd
            d = dy.to(tl.float32)
            gg = d
            if HAS_WEIGHT:
                gg = d * tl.load(w_ptr + here, mask=ok, other=0.0).to(tl.float32)
            if COMPUTE_DW:  # first row of this program: nothing to add to
                dw = tl.load(dw_row + here, mask=ok & (here * 0 + row > pid), other=0.0)
                tl.store(dw_row + here, dw + d * x_hat, mask=ok)
            tl.store(dx_row + here, ((gg - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=ok,
                     cache_modifier=".cs")


@triton.jit
def dw_reduce_kernel2(dwp_ptr, dw_ptr, n_partials, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], tl.float32)
    for start in range(0, n_partials, BLOCK_P):
        p = (start + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(dwp_ptr + p[:, None] * n_cols + cols[None, :],
                       mask=(p < n_partials)[:, None] & col_ok[None, :], other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)


def cfg_bytes(n_cols, esize, min_el, bpt, max_warps=32):
    bn = triton.next_power_of_2(n_cols)
    bm = max(1, min_el // bn)
    nw = min(max_warps, max(4, bm * bn * esize // (32 * bpt)))
    return bm, bn, nw


def fwd_plain(x, w, y, rstd, min_el, bpt, eps=1e-6):
    m, n = x.shape
    bm, bn, nw = cfg_bytes(n, x.element_size(), min_el, bpt)
    g["rms_norm_fwd_kernel"][(triton.cdiv(m, bm),)](x, w, y, rstd, m, n, x.stride(0), y.stride(0), eps,
                                                   HAS_WEIGHT=True, BLOCK_M=bm, BLOCK_N=bn, num_warps=nw)


def bwd_kernel(x, w, rstd, dy, dx, dwp, kind, k, min_el=4096, bpt=32, chunk=4096):
    m, n = x.shape
    es = x.element_size()
    if kind == "fused":
        bm, bn, nw = cfg_bytes(n, es, min_el, bpt)
        grid = min(triton.cdiv(m, bm), k * NUM_SMS)
        bwd_pf_kernel[(grid,)](x, w, rstd, dy, dx, dwp, m, n, x.stride(0), dy.stride(0), dx.stride(0),
                               HAS_WEIGHT=True, COMPUTE_DW=True, BLOCK_M=bm, BLOCK_N=bn, num_warps=nw)
    else:
        nw = min(32, max(4, chunk * es // (32 * bpt)))
        grid = min(m, k * NUM_SMS)
        bwd_chunk_pf_kernel[(grid,)](x, w, rstd, dy, dx, dwp, m, n, x.stride(0), dy.stride(0), dx.stride(0),
                                     HAS_WEIGHT=True, COMPUTE_DW=True, CHUNK_N=chunk, num_warps=nw)
    return grid


def reduce(dwp, dw, n_partials, bn, bp, nw=4):
    n = dw.numel()
    dw_reduce_kernel2[(triton.cdiv(n, bn),)](dwp, dw, n_partials, n, BLOCK_P=bp, BLOCK_N=bn, num_warps=nw)


def bench(fn):
    fn()
    if not ON_GPU:
        return 1.0
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


try:
    dyn = torch._dynamo.config
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dyn, knob):
            setattr(dyn, knob, 1024)
except AttributeError:
    pass
compiled = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6), dynamic=False) if ON_GPU else None

TOTAL = 2**26 if ON_GPU else 2**12
NS = [32768, 1024, 4096, 16384, 8192, 2048] if ON_GPU else [1024, 128, 300]
REDUCES = [(128, 32, 4), (32, 64, 4), (64, 32, 4), (16, 128, 4)]
recs = []
for n in NS:
    for dtype in (torch.bfloat16, torch.float32):
        if time.time() - T0 > BUDGET:
            break
        m = TOTAL // n
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        w = (1 + 0.1 * torch.randn(n, device=DEV)).to(dtype)
        dy = torch.randn_like(x)
        out = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        rec = {"dtype": str(dtype)[6:], "N": n}
        rec["copy"] = 2 * nb / bench(lambda: out.copy_(x)) * 1e-6
        rstd = torch.empty(m, device=DEV, dtype=torch.float32)
        y = torch.empty_like(x)
        g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)
        y_ref = y.clone()
        # ---- forward
        rec["F tut"] = 2 * nb / bench(lambda: g["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)) * 1e-6
        for name, (me, bpt) in {"F p4k/32B": (4096, 32), "F p4k/64B": (4096, 64), "F p8k/32B": (8192, 32),
                                "F p4k/16B": (4096, 16)}.items():
            y.fill_(float("nan"))
            rec[name] = 2 * nb / bench(lambda: fwd_plain(x, w, y, rstd, me, bpt)) * 1e-6
            assert torch.equal(y, y_ref), name
        # ---- backward: tutorial's (kernel + old reduce), direct call
        dx = torch.empty_like(x)
        dw = torch.empty_like(w)
        rec["B tut"] = 3 * nb / bench(lambda: g["rms_norm_rows_backward"](x, w, rstd, dy, dx, dw)) * 1e-6
        dx_ref, dw_ref = dx.clone(), dw.float().clone()
        cands = {"fu4k/32B k1": ("fused", 1, 4096, 32, 0), "fu4k/32B k2": ("fused", 2, 4096, 32, 0),
                 "fu8k/32B k1": ("fused", 1, 8192, 32, 0), "fu4k/16B k2": ("fused", 2, 4096, 16, 0)}
        if n >= 8192 or not ON_GPU:
            cands.update({"ch4k k1": ("chunk", 1, 0, 32, 4096), "ch4k k2": ("chunk", 2, 0, 32, 4096),
                          "ch8k k1": ("chunk", 1, 0, 32, 8192), "ch2k k2": ("chunk", 2, 0, 16, 2048)})
        if n >= 32768 and ON_GPU:
            for key in ("fu8k/32B k1", "fu4k/16B k2"):
                cands.pop(key)
        best = (0, None)
        for name, (kind, k, me, bpt, ck) in cands.items():
            dwp = torch.empty((k * NUM_SMS, n), device=DEV, dtype=torch.float32)
            P = bwd_kernel(x, w, rstd, dy, dx, dwp, kind, k, me, bpt, ck)
            dx.fill_(float("nan"))
            ms = bench(lambda: bwd_kernel(x, w, rstd, dy, dx, dwp, kind, k, me, bpt, ck))
            reduce(dwp, dw, P, 32, 64)
            assert torch.allclose(dx.float(), dx_ref.float(), atol=2e-2, rtol=2e-2), name
            assert torch.allclose(dw.float(), dw_ref, atol=0.5, rtol=2e-2), (name, (dw.float() - dw_ref).abs().max())
            rec["Bk " + name] = 3 * nb / ms * 1e-6
            if rec["Bk " + name] > best[0]:
                best = (rec["Bk " + name], name)
        kind, k, me, bpt, ck = cands[best[1]]
        rec["best kernel"] = best[1]
        dwp = torch.empty((k * NUM_SMS, n), device=DEV, dtype=torch.float32)
        P = bwd_kernel(x, w, rstd, dy, dx, dwp, kind, k, me, bpt, ck)
        rbest = (1e9, None)
        for bn, bp, nw in REDUCES:
            us = 1e3 * bench(lambda: reduce(dwp, dw, P, bn, bp, nw))
            rec[f"R{bn}x{bp} us"] = us
            if us < rbest[0]:
                rbest = (us, (bn, bp, nw))
        rec["R best"] = "%dx%d" % rbest[1][:2]

        def full():
            bwd_kernel(x, w, rstd, dy, dx, dwp, kind, k, me, bpt, ck)
            reduce(dwp, dw, P, *rbest[1])

        rec["B new full"] = 3 * nb / bench(full) * 1e-6
        # ---- autograd: tutorial as is, then with the new pieces swapped in
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        yy = g["rms_norm"](xg, (n,), wg, 1e-6)
        rec["A tut"] = 3 * nb / bench(lambda: torch.autograd.grad(yy, (xg, wg), dy, retain_graph=True)) * 1e-6

        def new_backward(x2d, w_, rstd_, dy2d, dx2d, dw_, chunk_n=None, config=None):
            dwp_ = torch.empty((k * NUM_SMS, x2d.shape[1]), device=x2d.device, dtype=torch.float32)
            P_ = bwd_kernel(x2d, w_, rstd_, dy2d, dx2d, dwp_, kind, k, me, bpt, ck)
            reduce(dwp_, dw_, P_, *rbest[1])

        old = g["rms_norm_rows_backward"]
        g["rms_norm_rows_backward"] = new_backward
        yy = g["rms_norm"](xg, (n,), wg, 1e-6)
        rec["A new"] = 3 * nb / bench(lambda: torch.autograd.grad(yy, (xg, wg), dy, retain_graph=True)) * 1e-6
        g["rms_norm_rows_backward"] = old
        yy = None
        if ON_GPU and time.time() - T0 < BUDGET - 45:
            rec["F compile"] = 2 * nb / bench(lambda: compiled(x, w)) * 1e-6
            yc = compiled(xg, wg)
            rec["A compile"] = 3 * nb / bench(lambda: torch.autograd.grad(yc, (xg, wg), dy, retain_graph=True)) * 1e-6
            yc = None
        recs.append(rec)
        print(f"[{time.time() - T0:.0f}s] " + " ".join(
            f"{kk}={v:.0f}" if isinstance(v, float) else f"{kk}={v}" for kk, v in rec.items()), flush=True)
        del x, dy, out, y, dx, dwp, xg
        if ON_GPU:
            torch.cuda.empty_cache()

df = pd.DataFrame(recs).set_index(["dtype", "N"]).sort_index()
num = [c for c in df.columns if c not in ("copy", "best kernel", "R best") and not c.endswith(" us")]
pct = df[num].div(df["copy"], axis=0) * 100
print("\n% of copy")
print(pct.round(1).to_string())
print("\ncopy GB/s, best choices, reduce us")
print(df[["copy", "best kernel", "R best"] + [c for c in df.columns if c.endswith(" us")]].round(1).to_string())
print(f"total {time.time() - T0:.0f}s")
