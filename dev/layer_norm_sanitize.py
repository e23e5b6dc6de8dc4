"""Scratch: small calls of every layer-norm forward (fused, split, chunked) and backward (fused, split with
flag words and with a counter, packed and unpacked rows, chunked, classic), for compute-sanitizer;
checks y, dx, dw, db against float64.

compute-sanitizer --tool memcheck python3 dev/layer_norm_sanitize.py
"""
import importlib.util

import torch

src = open("tutorials/02_layer_norm.py").read()
with open("/tmp/ln02_head_san.py", "w") as f:  # Triton's JIT wants its kernels in a real file
    f.write(src.split("# %%\n# Correctness\n")[0])
spec = importlib.util.spec_from_file_location("ln02_head_san", "/tmp/ln02_head_san.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
g = mod.__dict__


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


worst = 0.0
for dtype in (torch.bfloat16, torch.float32):
    for m, n in ((64, 300), (64, 8192), (64, 20000), (33, 20001), (40, 32768), (9, 40001), (17, 65536)):
        x = torch.randn(m, n, device="cuda", dtype=dtype) * 2 + 1
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        for fw, fb in ((w, b), (None, None)):  # the split forward for fp32 rows past MAX_FUSED_N
            y = torch.full_like(x, float("nan"))
            grid = g["layer_norm_rows_forward"](x, y, fw, fb, mean, rstd, 1e-5)
            xd = x.double()
            y64 = (xd - xd.mean(1, keepdim=True)) / (xd.var(1, unbiased=False, keepdim=True) + 1e-5).sqrt()
            if fw is not None:
                y64 = y64 * w.double() + b.double()
            e = rel(y, y64)
            worst = max(worst, e if dtype == torch.float32 else e / 100)
            print(dtype, m, n, "forward", "affine" if fw is not None else "plain", grid, f"err {e:.2e}", flush=True)
        xh = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
        gg = dy.double() * w.double()
        dx64 = (gg - xh * (gg * xh).mean(1, keepdim=True) - gg.mean(1, keepdim=True)) * rstd.double()[:, None]
        counter = {2: dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=4),
                   4: dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=4)}
        for kw in ({}, dict(split=counter), dict(max_split_n=0)):
            dx, dw, db = torch.full_like(x, float("nan")), torch.empty_like(w), torch.empty_like(w)
            plan = g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, **kw)
            e = max(rel(dx, dx64), rel(dw, (dy.double() * xh).sum(0)), rel(db, dy.double().sum(0)))
            worst = max(worst, e if dtype == torch.float32 else e / 100)
            print(dtype, m, n, plan["kernel"].__name__, plan["meta"].get("SLICES"), plan["meta"].get("FLAG_WORDS"),
                  plan["meta"].get("PACK"), f"err {e:.2e}", flush=True)
        if n <= 16384:
            xg = x.detach().requires_grad_(True)
            y = g["layer_norm_classic"](xg, (n,), w, b)
            torch.autograd.grad(y, (xg,), dy)
torch.cuda.synchronize()
print("sanitize script done, worst scaled error", worst)
