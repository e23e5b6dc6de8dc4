"""Dev only: the split softmax kernels of tutorials/01_fused_softmax.py (each long row shared by SLICES
co-resident programs) swept over launch configs, against the page's online kernels, torch and a copy.

Part "page" first: the page's own benchmark (run_sweep: naive, torch, torch.compile, ours, graph-timed
through autograd as the page times them) at the long row lengths, the page's config table and its
split-vs-online table, and the occupancy the driver reports next to the page's formula.

Kernel only: each call (the page's launcher, buffers cleared as on the page) is captured in a CUDA graph
and its replays are timed by do_bench, next to an eager device-to-device copy of the same bytes. Every
config is checked against float64, for bitwise determinism over three runs, and (once per compiled
version) on rows of NaN / +-inf against torch.softmax. The kernels are compiled first by a pool of
processes (one compile per version: a few seconds each).

PYTHONUNBUFFERED=1 BUDGET=170 python3 dev/softmax_split_gpu.py [page] [sweep]
"""
import math
import multiprocessing as mp
import os
import sys
import time

import pandas as pd
import torch

T0 = time.time()
BUDGET = float(os.environ.get("BUDGET", "170"))
OUT = os.environ.get("OUT", "/tmp")
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
PAGE = "tutorials/01_fused_softmax.py"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CASES = [  # (direction, dtype, N), the ones below the goal first
    ("forward", "bfloat16", 65536), ("backward", "float32", 65536), ("backward", "float32", 262144),
    ("backward", "bfloat16", 262144), ("forward", "float32", 262144), ("forward", "bfloat16", 262144),
    ("backward", "bfloat16", 65536), ("forward", "float32", 65536), ("forward", "bfloat16", 32768),
    ("forward", "float32", 32768), ("backward", "float32", 32768), ("backward", "bfloat16", 32768),
    ("backward", "float32", 16384), ("forward", "bfloat16", 16384),
]


def load():
    src = open(PAGE).read()
    src = src[: src.index("# %%\n# Correctness")].replace("\nconfig_table()\n", "\n")
    g = {"__name__": "dev_softmax"}
    exec(compile(src, os.path.abspath(PAGE), "exec"), g)
    return g


def configs(direction, dtype, n):
    """split dicts to try: slice width x warps (8 to 128 values per thread), as many programs per SM as
    fit or at most 2-4. Earlier sweeps (4-32 warps, 1-8 per SM, flag words or a counter per row) found
    4 warps, as many per SM as fit and flag words best everywhere; the counter was dropped."""
    out = []
    for slice_n in (2048, 4096, 8192, 16384):
        if not 2 <= n // slice_n <= 128:
            continue
        for warps in (2, 4, 8):
            per_thread = slice_n // (32 * warps)
            if not 8 <= per_thread <= 128:
                continue
            for per_sm in (None, 4, 3, 2):
                out.append(dict(MIN_N=1, SLICE_N=slice_n, num_warps=warps, PER_SM=per_sm))
    return out


def stand_ins(T, direction, dtype, n, rows=16):
    x = torch.empty((rows, n), device="cuda", dtype=dtype)
    return (x, x) if direction == "forward" else (x, x, x)


def compile_some(jobs):
    """Worker: compile each (direction, dtype, n, split) version once (into Triton's disk cache)."""
    T = load()
    done = 0
    for direction, dtype_name, n, cfg in jobs:
        if time.time() - T0 > 0.45 * BUDGET:
            break
        split = {(direction, 2): cfg, (direction, 4): cfg}
        ts = stand_ins(T, direction, DTYPES[dtype_name], n)
        launch = T["forward_launch"] if direction == "forward" else T["backward_launch"]
        try:
            launch(*ts, split=split, n_rows=2**26 // n)
            done += 1
        except Exception as e:  # reported again by the main process
            print("compile failed", direction, dtype_name, n, cfg, repr(e)[:300], flush=True)
    return done


def page_part():
    """The page's own code on the GPU: config table, split-vs-online table, run_sweep at long rows."""
    src = open(PAGE).read()
    T = load()
    bench_src = src[src.index("# %%\n# Benchmark"): src.index("results = run_sweep()")]
    exec(compile(bench_src, os.path.abspath(PAGE), "exec"), T)
    print(T["config_table"]().to_string(), flush=True)
    for (direction, size), cfg in T["SPLIT"].items():  # occupancy: the page's formula, the driver's
        dtype = torch.float32 if size == 4 else torch.bfloat16
        for n in (65536, 262144):
            x = torch.empty((16, n), device="cuda", dtype=dtype)
            launch = T["forward_launch"] if direction == "forward" else T["backward_launch"]
            kernel, grid, args, meta = launch(*([x] * (2 if direction == "forward" else 3)), n_rows=2**26 // n)
            compiled = kernel.warmup(*args, grid=(1,), **meta)
            compiled._init_handles()
            print(direction, dtype, n, "grid", grid, "per SM (page)", T["programs_per_sm"](kernel, args, meta),
                  "driver", T["driver_occupancy"](compiled, 32 * meta["num_warps"], compiled.metadata.shared),
                  "spills", getattr(compiled, "n_spills", "?"), flush=True)
    split_src = src[src.index("# %%\n# Does the split pay?"): src.index("# %%\n# Going further")]
    exec(compile(split_src, os.path.abspath(PAGE), "exec"), T)
    print(T["split_vs_online"].to_string(float_format=lambda v: f"{v:.0f}"), flush=True)
    T["SWEEP_N"] = [32768, 65536, 262144]
    results = T["run_sweep"]()
    results.to_csv(os.path.join(OUT, "page_sweep.csv"), index=False)
    T["results"] = results
    for direction in ("forward", "backward"):
        part = results[results.direction == direction]
        print(f"\n== {direction}, % of the copy\n"
              + part.pivot_table(index=["dtype", "N"], columns="provider", values="% of speed of light")
              .to_string(float_format=lambda v: f"{v:.1f}"), flush=True)
    print(f"page part done {time.time() - T0:.0f}s", flush=True)


def main():
    parts = sys.argv[1:] or ["page", "sweep"]
    if "page" in parts:
        page_part()
    if "sweep" not in parts:
        return
    cases = CASES
    jobs, seen = [], set()
    for direction, dtype_name, n in cases:
        for cfg in configs(direction, dtype_name, n):
            key = (direction, dtype_name, n, cfg["SLICE_N"], cfg["num_warps"])
            if key not in seen:
                seen.add(key)
                jobs.append((direction, dtype_name, n, cfg))
    workers = min(14, max(1, (os.cpu_count() or 2) - 2))
    print(f"{len(jobs)} versions to compile on {workers} processes", flush=True)
    with mp.get_context("spawn").Pool(workers) as pool:
        compiled = sum(pool.map(compile_some, [jobs[i::workers] for i in range(workers)]))
    print(f"compiled {compiled} in {time.time() - T0:.0f}s", flush=True)

    import triton
    T = load()
    torch.cuda.set_stream(torch.cuda.Stream())
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

    def bench(fn, graph=True):
        fn()
        torch.cuda.synchronize()
        if not graph:
            return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=torch.cuda.current_stream()):
            fn()
        return triton.testing.do_bench(g.replay, warmup=5, rep=20, return_mode="median")

    def rel(a, ref):
        return ((a.double() - ref).norm() / ref.norm()).item()

    recs = []
    special_done, timed = set(), set()
    for direction, dtype_name, n in cases:
        if time.time() - T0 > BUDGET:
            break
        dtype = DTYPES[dtype_name]
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 4
        out = torch.empty_like(x)
        nbytes = x.numel() * x.element_size()
        copy = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        if direction == "forward":
            ref = torch.softmax(x.double(), -1)
            moved = 2 * nbytes
            def call(split):
                return T["softmax_rows_forward"](x, out, split=split)
            torch_fn = lambda: torch.softmax(x, -1)
        else:
            y = torch.softmax(x.float(), -1).to(dtype)
            dy = torch.randn_like(x)
            yd = y.double()
            ref = yd * (dy.double() - (yd * dy.double()).sum(-1, keepdim=True))
            del yd
            moved = 3 * nbytes
            def call(split):
                return T["softmax_rows_backward"](y, dy, out, split=split)
            torch_fn = lambda: torch._softmax_backward_data(dy, y, -1, dtype)
        base = dict(direction=direction, dtype=dtype_name, N=n, copy_GBs=copy)
        for name, fn in (("page", lambda: call({})), ("torch", torch_fn)):
            ms = bench(fn)
            r = fn() if name == "torch" else (fn(), out)[1]
            recs.append(dict(base, cfg=name, pct=100 * moved / ms * 1e-6 / copy, err=rel(r, ref)))
            print(recs[-1], flush=True)
        for cfg in configs(direction, dtype_name, n):
            if time.time() - T0 > BUDGET:
                break
            split = {(direction, 2): cfg, (direction, 4): cfg}
            rec = dict(base, cfg="split", **{k: v for k, v in cfg.items() if k != "MIN_N"})
            try:
                launch = T["forward_launch"] if direction == "forward" else T["backward_launch"]
                rec["kernel"] = T["KERNEL_NAMES"][launch(*stand_ins(T, direction, dtype, n), split=split)[0]]
                if rec["kernel"] != "split":  # a group does not fit: the launcher fell back
                    recs.append(rec)
                    continue
                out.fill_(float("nan"))
                grid = call(split)
                torch.cuda.synchronize()
                rec["grid"] = grid
                key = (direction, dtype_name, n, cfg["SLICE_N"], cfg["num_warps"])
                if (key, grid) in timed:  # PER_SM capped by the occupancy: the same launch again
                    continue
                timed.add((key, grid))
                rec["err"] = rel(out, ref)
                first = out.clone()
                call(split)
                call(split)
                rec["deterministic"] = bool(torch.equal(out, first))
                del first
                ms = bench(lambda: call(split))
                rec["pct"] = 100 * moved / ms * 1e-6 / copy
                if key not in special_done:  # NaN / inf rows, compiled the same way (16 rows)
                    special_done.add(key)
                    rec["special_ok"] = special_check(T, direction, dtype, n, split)
            except Exception as e:
                rec["error"] = repr(e)[:200]
            recs.append(rec)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()
                           if k not in ("direction", "copy_GBs")), flush=True)
        del x, out, ref
        if direction == "backward":
            del y, dy
        torch.cuda.empty_cache()
        pd.DataFrame(recs).to_csv(os.path.join(OUT, "softmax_split.csv"), index=False)
    df = pd.DataFrame(recs)
    df.to_csv(os.path.join(OUT, "softmax_split.csv"), index=False)
    split = df[df.cfg == "split"].dropna(subset=["pct"])
    if len(split):
        best = split.loc[split.groupby(["direction", "dtype", "N"])["pct"].idxmax()]
        page = df[df.cfg == "page"].set_index(["direction", "dtype", "N"])["pct"].rename("page_pct")
        print(best.join(page, on=["direction", "dtype", "N"]).to_string(index=False), flush=True)
        # the best single config per (direction, element size) over all N
        for (direction, dtype_name), part in split.groupby(["direction", "dtype"]):
            part = part.fillna({"PER_SM": 0})  # 0: as many as fit
            piv = part.pivot_table(index=["SLICE_N", "num_warps", "PER_SM"], columns="N", values="pct")
            piv["min 65536+"] = piv[[c for c in piv.columns if c >= 65536]].min(axis=1)
            print(f"\n{direction} {dtype_name}: top configs by worst N\n"
                  + piv.sort_values("min 65536+", ascending=False).head(10).to_string(float_format=lambda v: f"{v:.1f}"))
    print(f"done {time.time() - T0:.0f}s", flush=True)


def special_check(T, direction, dtype, n, split):
    """Rows with NaN, +inf, all -inf, some -inf: as torch.softmax (forward), finite where torch is."""
    x = torch.randn(16, n, device="cuda", dtype=torch.float32)
    x[0, 1] = math.nan
    x[1, n - 2] = math.inf
    x[2] = -math.inf
    x[3, : n // 2] = -math.inf
    x[4, 0], x[4, n - 1] = math.inf, -math.inf
    x[5, n // 3] = 1e4  # one huge score: y is one-hot
    x[6] = torch.tensor(-1, dtype=torch.int32).view(torch.float32)  # NaNs whose bits are all ones
    x = x.to(dtype)
    expected = torch.softmax(x.float(), -1)
    if direction == "forward":
        got = torch.full_like(x, 7.0)
        T["softmax_rows_forward"](x, got, split=split)
        return bool(torch.allclose(got.float(), expected, atol=1e-2, rtol=1e-2, equal_nan=True))
    y = expected.to(dtype)
    dy = torch.randn_like(y)
    got = torch.full_like(y, 7.0)
    T["softmax_rows_backward"](y, dy, got, split=split)
    want = torch._softmax_backward_data(dy.float(), y.float(), -1, torch.float32)
    return bool(torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2, equal_nan=True))


if __name__ == "__main__":
    main()
