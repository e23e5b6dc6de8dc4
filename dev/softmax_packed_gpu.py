"""Dev only: the bf16 split softmax forward of tutorials/01_fused_softmax.py with packed 16-bit rows
(PACK: a slice loaded as 32-bit words of two bf16, unpacked by shifts, packed again to store), with
the exponentials recomputed at the store from the packed x (RECOMPUTE), with streaming hints (STREAM:
evict_first loads, .cs stores), with a flag buffer kept between calls that the kernel leaves clean
(REUSE: no torch.full per call; a counter per group clears the last row's words), register caps
(maxnreg) and other slice widths / warps. The variants' kernel lives in dev/softmax_packed_page.py (the
page's code of that day with those options; "page" there is its own SPLIT, the same launches as the
page's); "old page" is tutorials/01_fused_softmax.py as committed. None of the options was kept.

Measured once on an H100 (2026-11-22, dev/NOTES.md): no variant faster than the page at bf16 N = 32768.

Kernel only, as dev/softmax_lookahead_gpu.py: each call through the page's launcher captured in a CUDA
graph, replays timed by do_bench, two rounds, next to an eager device-to-device copy (% of the copy).
Every variant: float64 on 1001 / 3 / 1 rows with NaN-poisoned outputs, special rows (NaN, +-inf, all
-inf, half -inf, all-ones NaN) against torch, 3 runs bitwise equal, registers and spills (ptxas, from
the compiled kernel), programs per SM.

PYTHONUNBUFFERED=1 python3 dev/softmax_packed_gpu.py   (without a GPU: a dry run under the interpreter)
"""
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time

import pandas as pd
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (gpu_common imports it)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import bench, rel  # noqa: E402

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "200"))
TOTAL = 2**26
NEW_PAGE = "dev/softmax_packed_page.py"  # the page with the variants' options (not kept on the page)
OLD_PAGE = "tutorials/01_fused_softmax.py"  # the page as committed
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 400)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
POINTS = [("bfloat16", 32768), ("bfloat16", 65536), ("bfloat16", 131072), ("bfloat16", 262144),
          ("bfloat16", 16384), ("float32", 32768), ("float32", 65536)]


def cfg(slice_n, warps, pack=True, maxnreg=None, recompute=False, stream=False, per_sm=None, reuse=False):
    c = dict(MIN_N=1, SLICE_N=slice_n, num_warps=warps, PACK=pack, RECOMPUTE=recompute, STREAM=stream,
             PER_SM=per_sm, REUSE=reuse)
    if maxnreg:
        c["maxnreg"] = maxnreg
    return {("forward", 2): c}


VARIANTS = {
    "old page": ("old", None),
    "page": ("new", None),
    "U 8192w4": ("new", cfg(8192, 4, pack=False)),
    "P 8192w4": ("new", cfg(8192, 4)),
    "PR 8192w4": ("new", cfg(8192, 4, recompute=True)),
    "PS 8192w4": ("new", cfg(8192, 4, stream=True)),
    "US 8192w4": ("new", cfg(8192, 4, pack=False, stream=True)),
    "P 8192w4 r96": ("new", cfg(8192, 4, maxnreg=96)),
    "P 8192w8": ("new", cfg(8192, 8)),
    "P 8192w8 r64": ("new", cfg(8192, 8, maxnreg=64)),
    "U 4096w4": ("new", cfg(4096, 4, pack=False)),
    "P 4096w4": ("new", cfg(4096, 4)),
    "P 4096w4 r64": ("new", cfg(4096, 4, maxnreg=64)),
    "PS 4096w4 r64": ("new", cfg(4096, 4, maxnreg=64, stream=True)),
    "PR 4096w4 r64": ("new", cfg(4096, 4, maxnreg=64, recompute=True)),
    "P 2048w4": ("new", cfg(2048, 4)),
    "P 16384w16": ("new", cfg(16384, 16)),
    "reuse 8192w4": ("new", cfg(8192, 4, pack=False, reuse=True)),
    "reuse 4096w4": ("new", cfg(4096, 4, pack=False, reuse=True)),
    "reuse P 8192w4": ("new", cfg(8192, 4, reuse=True)),
    "reuse 2048w4": ("new", cfg(2048, 4, pack=False, reuse=True)),
    "reuse 8192w4 r128": ("new", cfg(8192, 4, pack=False, reuse=True, maxnreg=128)),
    "reuse P 4096w4": ("new", cfg(4096, 4, reuse=True)),
    "reuse P 4096w4 r64": ("new", cfg(4096, 4, reuse=True, maxnreg=64)),
    "reuse P 2048w4": ("new", cfg(2048, 4, reuse=True)),
    "reuse PS 8192w4": ("new", cfg(8192, 4, reuse=True, stream=True)),
}
SHORT = ["old page", "page", "U 4096w4", "reuse 8192w4", "reuse 8192w4 r128", "reuse P 8192w4", "reuse P 4096w4",
         "reuse P 4096w4 r64", "reuse P 2048w4"]
CHECK_ROWS = (48, 1001, 3, 1)


def variants_at(dtype_name, n):
    if dtype_name == "float32" or n == 16384:
        return ["old page", "page"]
    return list(VARIANTS) if n == 32768 else SHORT


def page_source(which):
    src = open(OLD_PAGE if which == "old" else NEW_PAGE).read()
    end = src.find("# %%\n# Correctness")  # dev/softmax_packed_page.py already ends there
    return src[: end if end >= 0 else len(src)].replace("\nconfig_table()\n", "\n")


_pages = {}


def page(which):
    if which not in _pages:
        path = os.path.join(tempfile.gettempdir(), f"dev_softmax_packed_{which}_{os.getpid()}.py")
        with open(path, "w") as f:
            f.write(page_source(which))
        g = {"__name__": "dev_softmax_packed_" + which}
        exec(compile(open(path).read(), path, "exec"), g)
        _pages[which] = g
    return _pages[which]


def jobs():
    out = []
    for dtype_name, n in POINTS:
        for v in variants_at(dtype_name, n):
            rows = CHECK_ROWS if (dtype_name, n) == ("bfloat16", 32768) else (TOTAL // n,)
            out += [(v, dtype_name, n, r) for r in rows]
    return out


def compile_some(batch):
    done = 0
    for v, dtype_name, n, r in batch:
        which, split = VARIANTS[v]
        x = torch.empty((r, n), device=DEV, dtype=DTYPES[dtype_name])
        try:
            page(which)["forward_launch"](x, x, split=split, n_rows=r)
            done += 1
        except Exception as e:
            print("compile failed", v, dtype_name, n, r, repr(e)[:300], flush=True)
    return done


def forward(v, x, y):
    which, split = VARIANTS[v]
    return page(which)["softmax_rows_forward"](x, y, split=split)


def spills(compiled):
    """Spill bytes of a compiled kernel (Triton's n_spills once its handles are loaded)."""
    try:
        compiled._init_handles()
        return compiled.n_spills
    except Exception:
        return "?"


def describe(v, x, y):
    which, split = VARIANTS[v]
    T = page(which)
    kernel, grid, args, meta = T["forward_launch"](x, y, split=split)
    per_sm, limit, regs = T["programs_per_sm"](kernel, args, meta)
    name = {T["softmax_fwd_kernel"]: "fused", T["softmax_fwd_online_kernel"]: "online",
            T["softmax_fwd_split_kernel"]: "split"}.get(kernel, "lookahead")
    out = dict(kernel=name, SLICES=meta.get("SLICES", 1), BLOCK_N=meta["BLOCK_N"], warps=meta["num_warps"],
               pack=int(bool(meta.get("PACK"))), regs=regs, per_sm=per_sm, grid=grid)
    if DEV == "cuda":
        out["spill"] = spills(kernel.warmup(*args, grid=(1,), **meta))
    return out


def special_rows(n, dtype):
    x = torch.randn(48, n, device=DEV).mul_(3)
    x[0, 1] = math.nan
    x[1, 2] = math.inf
    x[2] = -math.inf
    x[3, : n // 2 + 5] = -math.inf
    x[4, 0], x[4, 1] = math.inf, -math.inf
    x[5, 7] = torch.tensor(-1, dtype=torch.int32).view(torch.float32)
    x[6] = x[5, 7]
    x[7, -1] = math.nan
    x[8, -2] = math.inf  # an odd column of the last word
    return x.to(dtype)


def check(v, dtype_name, n):
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
    for key, flags in page(VARIANTS[v][0]).get("_reused_flags", {}).items():
        counters = page(VARIANTS[v][0])["GROUP_COUNTERS"].value
        if not (bool((flags[:counters] == 0).all()) and bool((flags[counters:] == -1).all())):
            worst = float("nan")  # the kernel did not leave its buffer clean
            print("UNCLEAN flags", v, key, flush=True)
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
                    rec = dict(dtype=dtype_name, N=n, variant=v, **describe(v, x, y))
                    rec["err(full)"] = ((y.float() - reference).norm() / reference.norm()).item()
                    first = y.clone()
                    rec["determ"] = all(torch.equal((forward(v, x, y), y)[1], first) for _ in range(3))
                    if (dtype_name, n) == ("bfloat16", 32768) or (v == "page" and dtype_name == "bfloat16"):
                        rec["err64 odd rows"], rec["special"] = check(v, dtype_name, n)
                    rows.append(rec)
                rec[f"GB/s {rnd}"] = nbytes / ms * 1e-6
        copy = sum(copy_gbs) / len(copy_gbs)
        if dtype_name == "bfloat16" and DEV == "cuda":
            T = page("new")
            meta = T["split_plan"]("forward", n, 2, VARIANTS["U 8192w4"][1])[0]
            fill_ms = bench(lambda: T["split_flags"]("forward", x.shape[0], meta, x.device))
            print(f"flag fill alone (torch.full of {x.shape[0] * meta['SLICES']} words, graph-timed): "
                  f"{fill_ms * 1e3:.2f} us = {100 * fill_ms / (nbytes / copy * 1e-6):.2f}% of the copy's time",
                  flush=True)
        for rec in rows:
            if rec["dtype"] == dtype_name and rec["N"] == n and "GB/s 1" in rec:
                rec["copy GB/s"] = copy
                rec["% copy"] = 100 * (rec["GB/s 0"] + rec["GB/s 1"]) / 2 / copy
                rec["% r0/r1"] = f"{100 * rec['GB/s 0'] / copy:.1f}/{100 * rec['GB/s 1'] / copy:.1f}"
        part = pd.DataFrame([r for r in rows if r["dtype"] == dtype_name and r["N"] == n])
        cols = [c for c in ["variant", "kernel", "SLICES", "BLOCK_N", "warps", "pack", "regs", "spill", "per_sm",
                            "grid", "% copy", "% r0/r1", "err(full)", "determ", "err64 odd rows", "special"]
                if c in part.columns]
        print(f"\n== forward {dtype_name} N={n} copy {copy:.0f} GB/s ({time.time() - T0:.0f}s)\n"
              + part[cols].to_string(index=False, float_format=lambda f: f"{f:.3g}"), flush=True)
        del x, y, reference
        if DEV == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def dry_run():
    global CHECK_ROWS, TOTAL, POINTS, bench
    CHECK_ROWS = (16, 7, 3, 1)
    for v in VARIANTS:
        x = torch.randn(5, 300, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        print(v, describe(v, x, y), check(v, "bfloat16", 300), flush=True)
    TOTAL, POINTS = 2**11, [("bfloat16", 256)]
    bench = lambda fn, graph=True: (lambda t: (fn(), time.perf_counter() - t)[1] * 1e3)(time.perf_counter())
    print(sweep(POINTS)[["variant", "% copy", "determ"]].to_string())


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
        results.to_csv(os.path.join(out, "packed_sweep.csv"), index=False)
    print("\n== summary, % of the copy\n" + results.pivot_table(index="variant", columns=["dtype", "N"],
          values="% copy").to_string(float_format=lambda f: f"{f:.1f}"), flush=True)
    print(f"done {time.time() - T0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
