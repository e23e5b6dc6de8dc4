"""Dev only: the split softmax forward of tutorials/01_fused_softmax.py with a one-row lookahead (each
program publishes its shares of the group's next row before waiting for this row's) against the
kernel it replaced, which published a row's shares and then waited for them (the next row's loads in
flight).

The old page is read from dev/softmax_old_page_tmp.py (make it with
``git show <commit>:tutorials/01_fused_softmax.py > dev/softmax_old_page_tmp.py``; it is not committed).
Variants of the new kernel come from the new page through its ``split=`` override (slice width, warps,
programs per SM, maxnreg) and from one source edit ("R": keep the raw x of this row and recompute
exp(x - row_max) at the store, instead of keeping exp(x - m_k)).

Kernel only, as dev/softmax_split_gpu.py: each call through the page's launcher is captured in a CUDA
graph and its replays timed by do_bench, next to an eager device-to-device copy of the same bytes
(% of the copy). Every variant: against float64 on 1001 (odd), 3, 1 and 48 rows (outputs poisoned
with NaN first), bitwise determinism over 3 runs at full size, and rows of NaN / +-inf / all -inf /
all-ones-NaN against torch.softmax. Kernels are compiled first by a pool of processes.

PYTHONUNBUFFERED=1 python3 dev/softmax_lookahead_gpu.py     (on a machine without a GPU: a dry run of
the checks and of the sweep's code on tiny rows, through Triton's interpreter)

Measured once on an H100 (2026-11-22, dev/NOTES.md), with the old page at commit 7e71161 and the
lookahead kernel then standing in for softmax_fwd_split_kernel in the new page ("new page" was the
lookahead kernel at the old SPLIT sizes). The page now keeps both kernels and picks the lookahead
where SPLIT sets LOOKAHEAD; the "la" and "R" variants here set it, so they time the same code.
"""
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time

import pandas as pd
import torch

from gpu_common import bench, rel

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "230"))
TOTAL = 2**26  # elements per timed call
NEW_PAGE = "tutorials/01_fused_softmax.py"
OLD_PAGE = os.environ.get("OLD_PAGE", "dev/softmax_old_page_tmp.py")
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 400)
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of the checks under the interpreter
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
POINTS = [("bfloat16", 32768), ("bfloat16", 65536), ("bfloat16", 262144), ("float32", 65536),
          ("float32", 262144), ("bfloat16", 16384), ("float32", 32768), ("float32", 16384)]


def r_variant(src):
    """The new page with the kernel edited to keep x (its own dtype) and recompute the exponentials."""
    edits = [('''    m, e = m_first, e_first
''', '''    x_this = x_first
'''), ('''        scale = tl.where(m == -float("inf"), 0.0, tl.exp(m - row_shift)) / row_sum
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols, (e * scale).to(y_ptr.dtype.element_ty),
                 mask=col_ok)
        m, e, x_next = m_next, e_next, x_after''', '''        y = tl.exp(x_this.to(tl.float32) - row_shift) * (1.0 / row_sum)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols, y.to(y_ptr.dtype.element_ty),
                 mask=col_ok)
        x_this, x_next = x_next, x_after''')]
    for a, b in edits:
        assert a in src, a
        src = src.replace(a, b)
    return src


def page_source(which):
    src = open(OLD_PAGE if which == "old" else NEW_PAGE).read()
    src = src[: src.index("# %%\n# Correctness")].replace("\nconfig_table()\n", "\n")
    return r_variant(src) if which == "R" else src


_pages = {}


def page(which):
    if which not in _pages:
        # @triton.jit reads its function's source back from a file: write each page's code to one
        path = os.path.join(tempfile.gettempdir(), f"dev_softmax_{which}_{os.getpid()}.py")
        with open(path, "w") as f:
            f.write(page_source(which))
        g = {"__name__": "dev_softmax_" + which}
        exec(compile(open(path).read(), path, "exec"), g)
        _pages[which] = g
    return _pages[which]


def cfg(slice_n, warps, maxnreg=None, per_sm=None, lookahead=True):
    c = dict(MIN_N=1, SLICE_N=slice_n, num_warps=warps, PER_SM=per_sm, LOOKAHEAD=lookahead)
    if maxnreg:
        c["maxnreg"] = maxnreg
    return {("forward", 2): c, ("forward", 4): c}


# name -> (page, split override: None = the page's own SPLIT)
VARIANTS = {
    "old page": ("old", None),
    "new page": ("new", None),
    "la 8192w4": ("new", cfg(8192, 4)),
    "la 4096w4": ("new", cfg(4096, 4)),
    "la 4096w4 r128": ("new", cfg(4096, 4, 128)),
    "la 2048w4": ("new", cfg(2048, 4)),
    "la 2048w2": ("new", cfg(2048, 2)),
    "la 4096w8": ("new", cfg(4096, 8)),
    "R 4096w4": ("R", cfg(4096, 4)),
    "R 2048w4": ("R", cfg(2048, 4)),
    "old 4096w4": ("old", cfg(4096, 4, lookahead=False)),
    "old 2048w4": ("old", cfg(2048, 4, lookahead=False)),
    "la 2048w4 ps4": ("new", cfg(2048, 4, per_sm=4)),
}
# which variants run at which point (all at the goal point)
SHORT = ["old page", "new page", "la 4096w4", "la 4096w4 r128", "la 2048w4", "la 2048w2", "la 4096w8"]
CHECK_ROWS = (48, 1001, 3, 1)  # 48: the bench's version (a multiple of 16); 1001, 3: odd; 1: its own


def variants_at(dtype_name, n):
    return list(VARIANTS) if (dtype_name, n) == ("bfloat16", 32768) else SHORT


def check_point(dtype_name, n):
    """The point where a variant's correctness is checked (needs several slices)."""
    return (dtype_name, 32768) if dtype_name == "bfloat16" else (dtype_name, 65536)


def jobs():
    out = []
    for dtype_name, n in POINTS:
        for v in variants_at(dtype_name, n):
            rows = CHECK_ROWS if (dtype_name, n) == check_point(dtype_name, n) else (TOTAL // n,)
            for r in rows:
                out.append((v, dtype_name, n, r))
    return out


def compile_some(batch):
    done = 0
    for v, dtype_name, n, r in batch:
        if time.time() - T0 > 0.5 * BUDGET:
            break
        which, split = VARIANTS[v]
        T = page(which)
        x = torch.empty((r, n), device=DEV, dtype=DTYPES[dtype_name])
        try:
            T["forward_launch"](x, x, split=split, n_rows=r)
            done += 1
        except Exception as e:
            print("compile failed", v, dtype_name, n, r, repr(e)[:300], flush=True)
    return done


def forward(v, x, y):
    which, split = VARIANTS[v]
    return page(which)["softmax_rows_forward"](x, y, split=split)


def describe(v, x):
    which, split = VARIANTS[v]
    T = page(which)
    kernel, grid, args, meta = T["forward_launch"](x, x, split=split)
    per_sm, limit, regs = T["programs_per_sm"](kernel, args, meta)
    name = {T["softmax_fwd_kernel"]: "fused", T["softmax_fwd_online_kernel"]: "online",
            T["softmax_fwd_split_kernel"]: "split"}.get(kernel, "lookahead")
    return dict(kernel=name, SLICES=meta.get("SLICES", 1), BLOCK_N=meta["BLOCK_N"], warps=meta["num_warps"],
                regs=regs, per_sm=per_sm, grid=grid)


def special_rows(n, dtype):
    x = torch.randn(48, n, device=DEV).mul_(3)
    x[0, 1] = math.nan
    x[1, 2] = math.inf
    x[2] = -math.inf
    x[3, : n // 2 + 5] = -math.inf  # whole slices of -inf
    x[4, 0], x[4, 1] = math.inf, -math.inf
    x[5, 7] = torch.tensor(-1, dtype=torch.int32).view(torch.float32)  # NaN with all bits set
    x[6] = x[5, 7]
    x[7, -1] = math.nan  # in the last slice
    return x.to(dtype)


def check(v, dtype_name, n):
    """Errors against float64 (poisoned outputs) on several row counts, and the special rows."""
    dtype = DTYPES[dtype_name]
    worst = 0.0
    for r in CHECK_ROWS[1:]:
        x = torch.randn(r, n, device=DEV, dtype=dtype) * 4
        y = torch.full_like(x, math.nan)
        forward(v, x, y)
        worst = max(worst, rel(y, torch.softmax(x.double(), -1)))
    x = special_rows(n, dtype)
    y = torch.full_like(x, 3.0)
    forward(v, x, y)
    expected = torch.softmax(x.float(), -1).to(dtype)
    try:
        torch.testing.assert_close(y.float(), expected.float(), equal_nan=True, atol=1e-2, rtol=1e-2)
        special = "ok"
    except AssertionError as e:
        special = "FAIL " + " ".join(str(e).split())[:100]
    return worst, special


def sweep(points):
    if DEV == "cuda":
        torch.cuda.set_stream(torch.cuda.Stream())
    rows = []
    for dtype_name, n in points:
        if time.time() - T0 > BUDGET:
            print("budget: stopping before", dtype_name, n, flush=True)
            break
        dtype = DTYPES[dtype_name]
        x = torch.randn((TOTAL // n, n), device=DEV, dtype=dtype)
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        copy_gbs = []
        reference = torch.softmax(x.float(), -1)
        names = variants_at(dtype_name, n)
        for rnd in range(2):
            copy_gbs.append(nbytes / bench(lambda: y.copy_(x), graph=False) * 1e-6)
            for v in names:
                try:
                    ms = bench(lambda: forward(v, x, y))
                except Exception as e:
                    print("bench failed", v, dtype_name, n, repr(e)[:300], flush=True)
                    continue
                rec = next((r for r in rows if r["variant"] == v and r["dtype"] == dtype_name and r["N"] == n), None)
                if rec is None:
                    rec = dict(dtype=dtype_name, N=n, variant=v, **describe(v, x))
                    err_full = rel(y, reference.double()) if dtype == torch.float32 else (
                        (y.float() - reference).norm() / reference.norm()).item()
                    first = y.clone()
                    same = all(torch.equal((forward(v, x, y), y)[1], first) for _ in range(3))
                    rec.update({"err(full)": err_full, "determ": same})
                    if (dtype_name, n) == check_point(dtype_name, n):
                        rec["err64 odd rows"], rec["special"] = check(v, dtype_name, n)
                    rows.append(rec)
                rec[f"GB/s {rnd}"] = nbytes / ms * 1e-6
        copy = sum(copy_gbs) / len(copy_gbs)
        for rec in rows:
            if rec["dtype"] == dtype_name and rec["N"] == n:
                rec["copy GB/s"] = copy
                rec["% copy"] = 100 * (rec["GB/s 0"] + rec["GB/s 1"]) / 2 / copy
                rec["% r0/r1"] = f"{100 * rec['GB/s 0'] / copy:.1f}/{100 * rec['GB/s 1'] / copy:.1f}"
        part = pd.DataFrame([r for r in rows if r["dtype"] == dtype_name and r["N"] == n])
        cols = [c for c in ["variant", "kernel", "SLICES", "BLOCK_N", "warps", "regs", "per_sm", "grid", "% copy",
                            "% r0/r1", "err(full)", "determ", "err64 odd rows", "special"] if c in part.columns]
        print(f"\n== forward {dtype_name} N={n} copy {copy:.0f} GB/s ({time.time() - T0:.0f}s)\n"
              + part[cols].to_string(index=False, float_format=lambda f: f"{f:.3g}"), flush=True)
        del x, y, reference
        if DEV == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def dry_run():
    """No GPU: every variant's checks on small rows through Triton's interpreter (one slice per row)."""
    global CHECK_ROWS
    CHECK_ROWS = (16, 7, 3, 1)
    for v in VARIANTS:
        for dtype_name in DTYPES:
            x = torch.randn(5, 300, dtype=DTYPES[dtype_name])
            print(v, dtype_name, describe(v, x), check(v, dtype_name, 300), flush=True)
    # the sweep's own code on tiny rows, timed by a wall clock
    global TOTAL, POINTS, bench, check_point
    TOTAL, POINTS = 2**11, [("bfloat16", 256), ("float32", 512)]
    check_point = lambda dtype_name, n: (dtype_name, n)
    bench = lambda fn, graph=True: (lambda t: (fn(), time.perf_counter() - t)[1] * 1e3)(time.perf_counter())
    results = sweep(POINTS)
    print(results.pivot_table(index="variant", columns=["dtype", "N"], values="% copy").to_string())


def main():
    if DEV == "cpu":
        return dry_run()
    import triton
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
    todo = jobs()
    workers = min(14, max(1, (os.cpu_count() or 2) - 2))
    print(f"{len(todo)} versions to compile on {workers} processes", flush=True)
    with mp.get_context("spawn").Pool(workers) as pool:
        done = sum(pool.map(compile_some, [todo[i::workers] for i in range(workers)]))
    print(f"compiled {done} in {time.time() - T0:.0f}s", flush=True)
    results = sweep(POINTS)
    out = os.environ.get("OUT")
    if out:
        results.to_csv(os.path.join(out, "lookahead_sweep.csv"), index=False)
    print(f"\n== summary, % of the copy\n"
          + results.pivot_table(index="variant", columns=["dtype", "N"], values="% copy")
          .to_string(float_format=lambda f: f"{f:.1f}"), flush=True)
    print(f"done {time.time() - T0:.0f}s", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
