"""Dev only: the softmax split forward at bf16 N = 32768 with 32 values per thread and no prefetch of
the next row, so that two or more programs fit per SM on 64 registers each (the page's 8192-column
slices of 4 warps hold 64 values per thread plus the prefetched next row: 128 registers, 4 per SM).
E.g. 2 slices of 16384 columns, 16 warps: two half-rows in flight per SM, each program's wait covered
by the other program, like layer norm's two-read kernel at bf16 16384 (2 programs of 512 threads).

PYTHONUNBUFFERED=1 python3 dev/softmax_split2_gpu.py
"""
import time

import torch
import triton
import triton.language as tl
from gpu_common import load, bench, rel

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
sm = load("tutorials/01_fused_softmax.py")
slice_shares, load_slice, slice_scale = sm["slice_shares"], sm["load_slice"], sm["slice_scale"]
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


@triton.jit
def split_fwd(x_ptr, y_ptr, flags_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
              SLICES: tl.constexpr, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    if PREFETCH:
        x_next = load_slice(x_ptr, group, n_rows, x_row_stride, cols, n_cols)
    for row in tl.range(group, n_rows, n_groups):
        if PREFETCH:
            x = x_next.to(tl.float32)
            x_next = load_slice(x_ptr, row + n_groups, n_rows, x_row_stride, cols, n_cols)
        else:
            x = load_slice(x_ptr, row, n_rows, x_row_stride, cols, n_cols).to(tl.float32)
        m, e, word = slice_shares(x)
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols,
                 (e * slice_scale(words, m)).to(y_ptr.dtype.element_ty), mask=col_ok)


n = 32768
m = 2 ** 26 // n
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3
y = torch.empty_like(x)
out = torch.empty_like(x)
ref = torch.softmax(x.double(), -1)
sms = torch.cuda.get_device_properties(0).multi_processor_count
copy_ms = bench(lambda: out.copy_(x), graph=False)


def launcher(slice_n, warps, prefetch, maxnreg, per_sm_cap):
    slices = n // slice_n
    meta = dict(SLICES=slices, BLOCK_N=slice_n, PREFETCH=prefetch, num_warps=warps)
    if maxnreg:
        meta["maxnreg"] = maxnreg
    stand_in = torch.empty(1, dtype=torch.int64, device="cuda")
    args = (x, y, stand_in, m, n, x.stride(0), y.stride(0))
    fit, limit, regs = sm["programs_per_sm"](split_fwd, args, meta)
    per_sm = min(fit, per_sm_cap or fit)
    groups = per_sm * sms // slices
    groups = triton.cdiv(m, triton.cdiv(m, groups))

    def run():
        flags = torch.full((m * slices,), -1, dtype=torch.int64, device="cuda")
        split_fwd[(groups * slices,)](x, y, flags, m, n, x.stride(0), y.stride(0), **meta)
    return run, f"{per_sm}/SM ({limit}, {regs} regs), {groups} groups"


print(f"copy {2 * x.numel() * 2 / copy_ms * 1e-6:.0f} GB/s", flush=True)
runs = [("page", lambda: sm["softmax_rows_forward"](x, y), "")]
for slice_n, warps, prefetch, maxnreg, cap in [
        (16384, 16, 0, None, None), (16384, 16, 0, 64, None), (16384, 16, 1, 64, None),
        (16384, 8, 0, None, None), (16384, 8, 0, 128, None),
        (8192, 8, 0, None, None), (8192, 8, 0, 64, None), (8192, 8, 1, 64, None), (8192, 4, 0, None, None),
        (8192, 4, 1, None, None), (4096, 4, 0, None, None), (4096, 4, 0, 64, None), (4096, 2, 0, None, None)]:
    try:
        fn, info = launcher(slice_n, warps, prefetch, maxnreg, cap)
    except Exception as e:
        print(slice_n, warps, "FAILED", type(e).__name__, str(e)[:200], flush=True)
        continue
    runs.append((f"split {slice_n} w{warps} prefetch {prefetch} maxnreg {maxnreg}", fn, info))
for name, fn, info in runs:
    y.fill_(float("nan"))
    try:
        fn()
        torch.cuda.synchronize()
        err = rel(y, ref)
        pcts = [copy_ms / bench(fn) * 100 for _ in range(3)]
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e)[:200], flush=True)
        continue
    print(f"{name:44s} {' '.join(f'{p:5.1f}' for p in pcts)} err {err:.1e} {info} t={time.time() - T0:.0f}s",
          flush=True)
