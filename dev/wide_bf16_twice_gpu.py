"""Dev only: bf16 rows of 32768 columns, the one width where layer norm's and softmax's forwards stay
near 93% of the copy on an H100. Both as "read twice" kernels (statistics from a first read that L2
keeps, the output from a second read), one row per program, with the register cap (maxnreg) that
lets two or more programs share an SM; against the pages' own launchers. Kernel-only, CUDA-graph
timed, % of an eager copy, checked against float64.

PYTHONUNBUFFERED=1 python3 dev/wide_bf16_twice_gpu.py
"""
import time

import torch
import triton
import triton.language as tl
from gpu_common import load, bench, rel

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
sm = load("tutorials/01_fused_softmax.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


@triton.jit
def softmax_twice(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
    y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
    x = tl.load(x_row + cols, mask=ok, other=-float("inf"), eviction_policy="evict_last").to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    x = tl.load(x_row + cols, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
    tl.store(y_row + cols, (tl.exp(x - m) / s).to(y_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")


n = 32768
m = 2 ** 26 // n
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3
w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
mean = torch.empty(m, device="cuda")
rstd = torch.empty(m, device="cuda")
out = torch.empty_like(x)
copy_ms = bench(lambda: out.copy_(x), graph=False)
del out
ln_ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
sm_ref = torch.softmax(x.double(), -1)

runs = [("LN page", lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), ln_ref)]
sm_fwd = sm.get("softmax_rows_forward") or sm.get("softmax_forward_rows")
if sm_fwd is not None:
    runs.append(("softmax page", lambda: sm_fwd(x, y), sm_ref))
for warps, maxnreg in [(32, None), (32, 32), (32, 40), (16, None), (16, 64), (16, 48), (8, None), (8, 128), (8, 96)]:
    meta = dict(BLOCK_N=n, num_warps=warps)
    if maxnreg:
        meta["maxnreg"] = maxnreg
    runs.append((f"LN twice w{warps} maxnreg {maxnreg}",
                 lambda meta=meta: ln["layer_norm_fwd_twice_kernel"][(m,)](
                     x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, HAS_W=True, HAS_B=True, **meta),
                 ln_ref))
    runs.append((f"softmax twice w{warps} maxnreg {maxnreg}",
                 lambda meta=meta: softmax_twice[(m,)](x, y, n, x.stride(0), y.stride(0), **meta), sm_ref))
for name, fn, ref in runs:
    y.fill_(float("nan"))
    try:
        fn()
        torch.cuda.synchronize()
        err = rel(y, ref)
        pcts = [copy_ms / bench(fn) * 100 for _ in range(3)]
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e)[:300], flush=True)
        continue
    print(f"{name:34s} {' '.join(f'{p:5.1f}' for p in pcts)} err {err:.1e} t={time.time() - T0:.0f}s", flush=True)
