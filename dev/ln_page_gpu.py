"""Dev only: run tutorials/02_layer_norm.py once on the GPU (as the tests load it), print the tables
the page would show (plan table, correctness, determinism, the sweep as % of the copy), then run
tests/test_layer_norm.py against that same loaded page: the split kernels with real waits between slices.

PYTHONUNBUFFERED=1 python3 dev/ln_page_gpu.py
"""
import os
import sys
import time

import pandas as pd

T0 = time.time()
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 200)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import conftest  # noqa: E402  (the tests' own loader, so that pytest reuses this run of the page)

T = conftest.load_tutorial("02_layer_norm")
print(f"page ran in {time.time() - T0:.0f}s", flush=True)
print(T["plan_table"]().to_string(), flush=True)
print(T["determinism"].to_string(), flush=True)
print(T["errors"].to_string(), flush=True)
results = T["results"]
results.to_csv(os.path.join(os.environ.get("OUT", "/tmp"), "page_results.csv"), index=False)
for direction in ("forward", "backward"):
    part = results[results.direction == direction]
    print(f"\n== {direction}, % of the copy\n"
          + part.pivot_table(index=["dtype", "N"], columns="provider", values="% of speed of light")
          .to_string(float_format=lambda v: f"{v:.1f}"), flush=True)

import pytest  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
rc = pytest.main(["-q", "-x", "-p", "no:cacheprovider", os.path.join(root, "tests", "test_layer_norm.py")])
print(f"pytest rc={rc}, total {time.time() - T0:.0f}s", flush=True)
sys.exit(int(rc))
