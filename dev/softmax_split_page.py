"""Dev only: run tutorials/01_fused_softmax.py once on the GPU (as the tests load it), print the tables
the page would show (config table, correctness, the sweep as % of the copy, split vs online), then run
tests/test_softmax.py against that same loaded page: the split kernels with real waits between slices.

PYTHONUNBUFFERED=1 python3 dev/softmax_split_page.py
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

T = conftest.load_tutorial("01_fused_softmax")
print(f"page ran in {time.time() - T0:.0f}s", flush=True)
print(T["config_table"]().to_string(), flush=True)
print(T["errors"].to_string(), flush=True)
results = T["results"]
results.to_csv(os.path.join(os.environ.get("OUT", "/tmp"), "page_results.csv"), index=False)
for direction in ("forward", "backward"):
    part = results[results.direction == direction]
    print(f"\n== {direction}, % of the copy\n"
          + part.pivot_table(index=["dtype", "N"], columns="provider", values="% of speed of light")
          .to_string(float_format=lambda v: f"{v:.1f}"), flush=True)
print(T["split_vs_online"].to_string(float_format=lambda v: f"{v:.0f}"), flush=True)

import pytest  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
rc = pytest.main(["-q", "-x", "-p", "no:cacheprovider", os.path.join(root, "tests", "test_softmax.py")])
print(f"pytest rc={rc}, total {time.time() - T0:.0f}s", flush=True)
sys.exit(int(rc))
