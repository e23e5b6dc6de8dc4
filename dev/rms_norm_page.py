"""Run tutorials/04_rms_norm.py cell by cell (as sphinx-gallery would), printing each cell's time and
the tables the page would show. PYTHONUNBUFFERED=1 python3 dev/rms_norm_page.py"""
import os
import time

import pandas as pd

pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_rows", 200)
path = os.path.abspath("tutorials/04_rms_norm.py")
src = open(path).read()
g = {"__name__": "__main__", "__file__": path}
line = 0
T0 = time.time()
for i, cell in enumerate(src.split("\n# %%")):
    text = ("\n" * line) + (cell if i == 0 else "# %%" + cell)
    line += cell.count("\n") + 1
    t = time.time()
    exec(compile(text, path, "exec"), g)  # line numbers match the file, so @triton.jit finds its source
    print(f"--- cell {i}: {time.time() - t:.1f}s (total {time.time() - T0:.0f}s)", flush=True)
    if "results" in g and i and "run_sweep()" in cell:
        r = g["results"]
        t2 = r.pivot_table(index=["direction", "dtype", "N"], columns="provider", values="GB/s")
        t2["light"] = r.groupby(["direction", "dtype", "N"])["speed of light GB/s"].first()
        print(t2.round(0).to_string(), flush=True)
        print((t2.drop(columns="light").div(t2["light"], axis=0) * 100).round(1).to_string(), flush=True)
for name in ("config_table", "errors"):
    v = g[name]() if callable(g[name]) else g[name]
    print(v.to_string() if hasattr(v, "to_string") else v)
print(g["two_pass_table"]().data.round(2).to_string())
