"""Dev only: every staged (Gluon) forward path of tutorials 01 and 02 on small tensors, for
compute-sanitizer (memcheck: out-of-bounds or misaligned accesses; racecheck: shared-memory hazards
between threads, which the kernels rule out by having each thread read back only what its own copies
wrote).

/usr/local/cuda/bin/compute-sanitizer --tool racecheck python3 dev/staged_sanitize.py
"""
import torch
from gpu_common import load

sm = load("tutorials/01_fused_softmax.py")
ln = load("tutorials/02_layer_norm.py")
for dtype in (torch.bfloat16, torch.float16):
    for n_cols in (32768, 20000, 16400):
        x = torch.randn(6, n_cols, device="cuda", dtype=dtype)
        assert sm["staged_plan"](x) is not None and ln["fwd_staged_plan"](x, {}) is not None
        y = torch.empty_like(x)
        sm["softmax_rows_forward"](x, y)
        w = torch.randn(n_cols, device="cuda", dtype=dtype)
        b = torch.randn(n_cols, device="cuda", dtype=dtype)
        mean = torch.empty(6, device="cuda")
        rstd = torch.empty(6, device="cuda")
        for ww, bb in ((w, b), (None, b), (w, None), (None, None)):
            ln["layer_norm_rows_forward"](x, y, ww, bb, mean, rstd, 1e-5)
torch.cuda.synchronize()
print("staged paths ran")
