"""Dev only: bf16 rows of 32768 columns, layer norm and softmax forwards as persistent programs (one per
SM, or two) whose row loop is software-pipelined by Triton (tl.range(num_stages=...): the next row's
loads go to shared memory while this row is reduced); against the pages' own launchers. Kernel-only,
CUDA-graph timed, % of an eager copy, checked against float64. Written in session 11 and checked under
the interpreter only: the device budget ran out before it ran on the GPU (a next step, dev/NOTES.md).

PYTHONUNBUFFERED=1 python3 dev/wide_bf16_pipelined_gpu.py
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
def ln_pipe(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, xs, ys, eps,
            BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + tl.cast(row, tl.int64) * xs + cols, mask=ok, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(ok, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd * tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32) \
            + tl.load(b_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_ptr + tl.cast(row, tl.int64) * ys + cols, y.to(y_ptr.dtype.element_ty), mask=ok)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def sm_pipe(x_ptr, y_ptr, n_rows, n_cols, xs, ys, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + tl.cast(row, tl.int64) * xs + cols, mask=ok, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + tl.cast(row, tl.int64) * ys + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
                 mask=ok)


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
sms = torch.cuda.get_device_properties(0).multi_processor_count
runs = [("LN page", lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), ln_ref),
        ("softmax page", lambda: sm["softmax_rows_forward"](x, y), sm_ref)]
for warps, stages, per_sm in [(32, 2, 1), (32, 3, 1), (16, 2, 1), (16, 2, 2), (16, 3, 1), (8, 2, 1), (8, 2, 2), (32, 1, 1)]:
    grid = (per_sm * sms,)
    runs.append((f"LN pipe w{warps} stages {stages} {per_sm}/SM",
                 lambda grid=grid, warps=warps, stages=stages: ln_pipe[grid](
                     x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, BLOCK_N=n, STAGES=stages,
                     num_warps=warps), ln_ref))
    runs.append((f"softmax pipe w{warps} stages {stages} {per_sm}/SM",
                 lambda grid=grid, warps=warps, stages=stages: sm_pipe[grid](
                     x, y, m, n, x.stride(0), y.stride(0), BLOCK_N=n, STAGES=stages, num_warps=warps), sm_ref))
for name, fn, ref in runs:
    y.fill_(float("nan"))
    try:
        fn()
        torch.cuda.synchronize()
        err = rel(y, ref)
        pcts = [copy_ms / bench(fn) * 100 for _ in range(3)]
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e)[:200], flush=True)
        continue
    print(f"{name:36s} {' '.join(f'{p:5.1f}' for p in pcts)} err {err:.1e} t={time.time() - T0:.0f}s", flush=True)
