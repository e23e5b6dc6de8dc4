"""Dev only: re-time the page's column and row sums (tutorials/03) at the page's sizes, bf16 and fp32,
5 interleaved repeats, next to the page's read-only pass (as its yardsticks()) and an eager copy, to tell a
build's outlier from a real change. GB/s of bytes read.

PYTHONUNBUFFERED=1 python3 dev/colsum_recheck_gpu.py
"""
import time

import torch
import triton
from gpu_common import bench, load

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
red = load("tutorials/03_parallel_reduction.py")


def speed_of_light(x):  # the read-only pass as the page's yardsticks() times it (defined after its correctness section)
    nbytes = x.numel() * x.element_size()
    return max(nbytes / bench(lambda c=c: red["read_pass"](x, **c)) * 1e-6 for c in red["READ_CONFIGS"])


print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
for dtype in (torch.bfloat16, torch.float32):
    for n in (16, 256, 4096, 65536, 2 ** 20):
        x = torch.randn(2 ** 27 // n, n, device="cuda", dtype=dtype)
        out = torch.empty(n, device="cuda", dtype=torch.float32)
        out_r = torch.empty(x.shape[0], device="cuda", dtype=torch.float32)
        nbytes = x.numel() * x.element_size()
        ref = x.double().sum(0)
        red["sum_cols"](x, out)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        rows = {"light": [], "cols": [], "torch cols": [], "rows": []}
        for _ in range(5):
            rows["light"].append(speed_of_light(x))
            rows["cols"].append(nbytes / bench(lambda: red["sum_cols"](x, out)) * 1e-6)
            rows["torch cols"].append(nbytes / bench(lambda: torch.sum(x, 0)) * 1e-6)
            rows["rows"].append(nbytes / bench(lambda: red["sum_rows"](x, out_r)) * 1e-6)
        light = max(rows["light"])
        print(f"{str(dtype)[6:]:8s} N={n:8d} err {err:.1e} " + "  ".join(
            f"{k} {min(v):.0f}-{max(v):.0f}" + ("" if k == "light" else f" ({100 * min(v) / light:.1f}-{100 * max(v) / light:.1f}%)")
            for k, v in rows.items()) + f"  t={time.time() - T0:.0f}s", flush=True)
        del x
        torch.cuda.empty_cache()
