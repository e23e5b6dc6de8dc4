"""Where a GPU build's time goes, page by page and cell by cell (core pages and deep dives).

Runs each tutorial in its own process (as sphinx-gallery would, minus Sphinx), timing every "# %%"
cell, counting Triton compilations made in this process (ours, Liger's, the classic design's; Inductor
compiles in worker processes) with the seconds they took, and printing torch._dynamo's compile times.
Each tutorial's `results` DataFrame (when it has one) is written as CSV under $OUT (or /tmp).

PYTHONUNBUFFERED=1 python3 dev/profile_pages.py [01 12 02_layer_norm_backward ...]   (page numbers or stems; all
pages by default). With SOL_CPROFILE=40, each page's cells run under cProfile and its 40 functions of most
cumulative time are printed after them (cProfile slows Python-heavy work, tracing and compiling, more than kernels).
Each page runs as the site's build runs it: with one Triton cache folder, Helion's stored configs, and no Helion search
at a point with none stored, unless the environment says otherwise (``child_env``).
"""

import glob
import os
import subprocess
import sys
import time

CHILD = r"""
import os, sys, time, re
import torch
if not torch.cuda.is_available():  # as the pages do without a GPU, before Triton is imported: its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton, triton.compiler as jit  # JITFunction.create_binder imports compile from here
stats = {"n": 0, "s": 0.0, "by": {}}
real = jit.compile
def timed_compile(src, *a, **k):
    t = time.perf_counter()
    try:
        return real(src, *a, **k)
    finally:
        dt = time.perf_counter() - t
        stats["n"] += 1; stats["s"] += dt
        name = getattr(getattr(src, "fn", None), "__name__", "?")
        c = stats["by"].setdefault(name, [0, 0.0]); c[0] += 1; c[1] += dt
jit.compile = timed_compile
top = int(os.environ.get("SOL_CPROFILE", "0"))  # cProfile's top functions by cumulative time, after the cells
if top:
    import cProfile, pstats
    profile = cProfile.Profile()
path = sys.argv[1]
src = open(path).read()
cells = re.split(r"\n(?=# %%\n)", src)
g = {"__name__": "__main__", "__file__": os.path.abspath(path)}
t0 = time.time()
line = 0
for cell in cells:
    padded = "\n" * line + cell  # the file's own line numbers: Triton reads kernels' source through them
    line += cell.count("\n") + 1
    head = [l for l in cell.splitlines() if l.startswith("# ") and not l.startswith("# %%")][:1]
    n0, s0, t = stats["n"], stats["s"], time.time()
    if top:
        profile.enable()
    exec(compile(padded, path, "exec"), g)
    if top:
        profile.disable()
    dt = time.time() - t
    if dt > 0.5:
        print(
            f"  {dt:6.1f}s  compiles {stats['n'] - n0:3d} ({stats['s'] - s0:5.1f}s)  "
            f"{head[0][2:60] if head else ''}",
            flush=True,
        )
print(f"TOTAL {time.time() - t0:.1f}s, Triton compiles in this process {stats['n']} ({stats['s']:.1f}s)")
for name, (n, s) in sorted(stats["by"].items(), key=lambda kv: -kv[1][1])[:12]:
    print(f"    {name:40s} {n:4d} {s:6.1f}s")
try:
    import torch._dynamo.utils as du
    print(du.compile_times(repr="str", aggregate=True)[:3000])
except Exception as e:
    print("no dynamo compile times:", e)
if top:
    pstats.Stats(profile).sort_stats("cumulative").print_stats(top)
if "results" in g and hasattr(g["results"], "to_csv"):
    g["results"].to_csv(os.path.join(os.environ.get("OUT", "/tmp"), os.path.basename(path)[:-3] + "_results.csv"))
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(environ):
    """A page's environment, as the site's build gives it (conf.py) unless the caller set these: one Triton cache
    folder for all of a page's kernels, Helion's stored configs, and no Helion search where none is stored (a
    profile times the page, not Helion's autotuner)."""
    env = dict(environ, MPLBACKEND="Agg")
    env.setdefault("TRITON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".triton", "cache"))
    env.setdefault("SOL_HELION_CONFIGS", os.path.join(ROOT, "docs", "helion_configs.json"))
    env.setdefault("SOL_HELION_AUTOTUNE", "0")
    return env


def main(names):
    pages = sorted(
        glob.glob("tutorials/[0-9][0-9]_*.py") + glob.glob("tutorials/deep_dives/[0-9][0-9]_*.py"),
        key=os.path.basename,
    )
    for path in pages:
        name = os.path.basename(path)
        if names and name[:2] not in names and name[:-3] not in names:  # a number takes its pages, a stem its page
            continue
        t = time.time()
        print(f"== {name}", flush=True)
        subprocess.run([sys.executable, "-c", CHILD, path], check=False, env=child_env(os.environ))
        print(f"== {name} wall {time.time() - t:.1f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
