"""Dev only: layer-norm backward for wide rows split over co-resident programs (tutorial 02), and
forward variants for wide rows. Kernel only, CUDA-graph replays timed by do_bench, next to an eager copy;
dx, dw, db checked against float64, the split backward checked bitwise over repeated runs.

PYTHONUNBUFFERED=1 python3 dev/ln_split_gpu.py [bwd] [fwd]
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
parts = sys.argv[1:] or ["bwd", "fwd"]
OUT = os.environ.get("OUT", "/tmp")


def load(path):
    src = open(path).read()
    g = {"__name__": "dev_" + os.path.basename(path)[:2]}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), g)
    return g


torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")


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
        print(f"\n== {name}\n" + df.to_string(index=False, float_format=lambda v: f"{v:.1f}"), flush=True)
        df.to_csv(os.path.join(OUT, f"{name}.csv"), index=False)


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

if "bwd" in parts:
    recs = []
    SPLITS = {
        torch.bfloat16: [dict(MIN_SLICES=8, TILE=4096, BYTES_PER_THREAD=32), dict(MIN_SLICES=4, TILE=4096, BYTES_PER_THREAD=32),
                         dict(MIN_SLICES=8, TILE=4096, BYTES_PER_THREAD=16), dict(MIN_SLICES=8, TILE=8192, BYTES_PER_THREAD=32),
                         dict(MIN_SLICES=16, TILE=2048, BYTES_PER_THREAD=16)],
        torch.float32: [dict(MIN_SLICES=4, TILE=8192, BYTES_PER_THREAD=16), dict(MIN_SLICES=8, TILE=4096, BYTES_PER_THREAD=16),
                        dict(MIN_SLICES=8, TILE=4096, BYTES_PER_THREAD=32), dict(MIN_SLICES=4, TILE=4096, BYTES_PER_THREAD=16),
                        dict(MIN_SLICES=8, TILE=8192, BYTES_PER_THREAD=32)],
    }
    for dtype in (torch.bfloat16, torch.float32):
        for n in (8192, 16384, 32768, 65536, 131072):
            if time.time() - T0 > BUDGET * 0.7:
                break
            m = 2**26 // n
            x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 3
            dy = torch.randn(m, n, device="cuda", dtype=dtype)
            w = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
            ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
            dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
            nb = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
            # float64 reference of dx, dw, db (x_hat from the saved statistics)
            xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
            g = dy.double() * w.double()
            dx64 = (g - xh * (g * xh).mean(1, keepdim=True) - g.mean(1, keepdim=True)) * rstd.double()[:, None]
            dw64, db64 = (dy.double() * xh).sum(0), dy.double().sum(0)
            del xh, g
            cands = [("page", {}), ("chunked", dict(max_split_n=0))]
            if n > 8192:
                cands += [(f"split {s['MIN_SLICES']}/{s['TILE']}/{s['BYTES_PER_THREAD']}", dict(split={2: s, 4: s}))
                          for s in SPLITS[dtype]]
            for name, kw in cands:
                try:
                    fn = lambda: ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, **kw)
                    plan = fn()
                    t = bench(fn)
                    e = (rel(dx, dx64), rel(dw, dw64), rel(db, db64))
                    det = ""
                    if plan["kernel"] is ln["layer_norm_bwd_split_kernel"]:
                        ref = (dx.clone(), dw.clone(), db.clone())
                        same = True
                        for _ in range(3):
                            fn()
                            same &= all(torch.equal(a, r) for a, r in zip((dx, dw, db), ref))
                        det = "yes" if same else "NO"
                    meta = plan["meta"]
                    recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=100 * 3 * nb / t * 1e-6 / copy,
                                     gbs=3 * nb / t * 1e-6, copy=copy, slices=meta.get("SLICES", 1),
                                     bm=meta.get("BLOCK_M", 1), bn=meta.get("BLOCK_N", meta.get("CHUNK_N")),
                                     warps=meta["num_warps"], flags=meta.get("FLAG_WORDS", ""), grid=plan["programs"],
                                     per_sm=plan["per_sm"], regs=plan["n_regs"], err=max(e), det=det))
                except Exception as exc:  # noqa: BLE001
                    recs.append(dict(dtype=str(dtype)[6:], N=n, cand=name, pct=float("nan"), det=repr(exc)[:80]))
                print(recs[-1], flush=True)
            del x, dy, dx, out, y, dx64
            torch.cuda.empty_cache()
    show(recs, "ln_bwd")


@triton.jit
def ln_fwd_variant(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr, ONE_PASS: tl.constexpr,
):
    """Persistent forward: program p does blocks p, p + P, ...; PREFETCH loads the next block first;
    ONE_PASS: sums of x - s and (x - s)^2 (s = the row's first element) in one pass."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x_next = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_programs):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        if PREFETCH:
            x = x_next.to(tl.float32)
            nxt = (block + n_programs) * BLOCK_M + tl.arange(0, BLOCK_M)
            nxt_ok = nxt < n_rows
            nxt = tl.minimum(nxt, n_rows - 1).to(tl.int64)
            x_next = tl.load(x_ptr + nxt[:, None] * x_row_stride + cols[None, :],
                             mask=nxt_ok[:, None] & col_ok[None, :], other=0.0)
        else:
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        if ONE_PASS:
            s = tl.load(x_ptr + rows * x_row_stride).to(tl.float32)
            d = tl.where(col_ok[None, :], x - s[:, None], 0.0)
            s1 = tl.sum(d, axis=1) / n_cols
            s2 = tl.sum(d * d, axis=1) / n_cols
            mean = s + s1
            var = tl.maximum(s2 - s1 * s1, 0.0)
            xc = x - mean[:, None]
        else:
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
    for dtype, n in [(torch.bfloat16, 8192), (torch.bfloat16, 16384), (torch.float32, 16384),
                     (torch.bfloat16, 32768), (torch.float32, 32768)]:
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
        t = bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
        recs.append(dict(dtype=str(dtype)[6:], N=n, cand="page", pct=100 * 2 * nb / t * 1e-6 / copy, err=rel(y, y64)))
        print(recs[-1], flush=True)
        for warps in (8, 16, 32):
            for prefetch in (False, True):
                for one_pass in (False, True):
                    for stages in (1,):
                        meta = dict(BLOCK_M=1, BLOCK_N=n, PREFETCH=prefetch, ONE_PASS=one_pass, num_warps=warps)
                        args = (x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5)
                        try:
                            per_sm, limit, regs = ln["programs_per_sm"](ln_fwd_variant, args, meta)
                            for grid_kind in ("plain", "persistent"):
                                if grid_kind == "plain" and prefetch:
                                    continue
                                grid = m if grid_kind == "plain" else min(m, per_sm * ln["NUM_SMS"])
                                fn = lambda: ln_fwd_variant[(grid,)](*args, **meta)
                                t = bench(fn)
                                recs.append(dict(dtype=str(dtype)[6:], N=n, cand=f"w{warps} pf{int(prefetch)} op{int(one_pass)} {grid_kind}",
                                                 pct=100 * 2 * nb / t * 1e-6 / copy, regs=regs, per_sm=per_sm, err=rel(y, y64)))
                                print(recs[-1], flush=True)
                        except Exception as exc:  # noqa: BLE001
                            recs.append(dict(dtype=str(dtype)[6:], N=n, cand=f"w{warps} pf{int(prefetch)} op{int(one_pass)}", det=repr(exc)[:80]))
        del x, y, y64
        torch.cuda.empty_cache()
    show(recs, "ln_fwd")
print(f"total {time.time() - T0:.0f} s", flush=True)
