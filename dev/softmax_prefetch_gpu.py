"""Dev only: online softmax kernels that prefetch the next chunk while working on this one, against the
tutorial's online kernels, on long rows. Prints one table."""
import itertools
import pathlib
import runpy
import tempfile

import pandas as pd
import torch
import triton
import triton.language as tl

src = pathlib.Path(__file__).resolve().parents[1].joinpath("tutorials/01_fused_softmax.py").read_text()
prefix = pathlib.Path(tempfile.mkdtemp()) / "softmax_kernels.py"
prefix.write_text(src.split("# Correctness\n")[0])
ns = runpy.run_path(str(prefix), run_name="softmax_dev")


@triton.jit
def fwd_prefetch(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"), eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            offs = (chunk + 1) * BLOCK_N + cols
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy="evict_last")
            m_new = tl.maximum(m, x)
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.exp(x - shift)
            m = m_new
        row_max = tl.max(m, axis=0)
        shift = tl.where(row_max == -float("inf"), 0.0, row_max)
        inv_sum = 1.0 / tl.sum(s * tl.exp(m - shift), axis=0)
        offs = (n_chunks - 1) * BLOCK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            offs_this = (n_chunks - 1 - chunk) * BLOCK_N + cols
            offs = offs_this - BLOCK_N
            x_next = tl.load(x_row + offs, mask=(offs >= 0) & (offs < n_cols), other=-float("inf"),
                             eviction_policy="evict_first")
            y = tl.exp(x - shift) * inv_sum
            tl.store(y_row + offs_this, y.to(y_ptr.dtype.element_ty), mask=offs_this < n_cols, cache_modifier=".cs")


@triton.jit
def bwd_prefetch(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                 BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        dy_row = dy_ptr + tl.cast(row, tl.int64) * dy_row_stride
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        acc = tl.zeros([BLOCK_N], tl.float32)
        y_n = tl.load(y_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_n = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            y, dy = y_n, dy_n
            offs = (chunk + 1) * BLOCK_N + cols
            y_n = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_n = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            acc += y.to(tl.float32) * dy.to(tl.float32)
        dot = tl.sum(acc, axis=0)
        offs = (n_chunks - 1) * BLOCK_N + cols
        y_n = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_n = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            y, dy = y_n, dy_n
            offs_this = (n_chunks - 1 - chunk) * BLOCK_N + cols
            offs = offs_this - BLOCK_N
            ok = (offs >= 0) & (offs < n_cols)
            y_n = tl.load(y_row + offs, mask=ok, other=0.0, eviction_policy="evict_first")
            dy_n = tl.load(dy_row + offs, mask=ok, other=0.0, eviction_policy="evict_first")
            dx = y.to(tl.float32) * (dy.to(tl.float32) - dot)
            tl.store(dx_row + offs_this, dx.to(dx_ptr.dtype.element_ty), mask=offs_this < n_cols, cache_modifier=".cs")


def bench(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


print(torch.cuda.get_device_name(0), flush=True)
rows = []
for dtype in (torch.float32, torch.bfloat16):
    for n in (32768, 65536, 131072, 262144):
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype); y = torch.empty_like(x)
        dy = torch.randn_like(x); dx = torch.empty_like(x)
        nb = x.numel() * x.element_size()
        copy = 2 * nb / bench(lambda: y.copy_(x)) * 1e-6
        ref = torch.softmax(x.float(), -1)
        ns["softmax_rows_forward"](x, y)
        ydx = y.clone()
        cur_f = 2 * nb / bench(lambda: ns["softmax_rows_forward"](x, y)) * 1e-6 / copy
        cur_b = 3 * nb / bench(lambda: ns["softmax_rows_backward"](ydx, dy, dx)) * 1e-6 / copy
        ref_dx = dx.clone()
        best = {"fwd": [], "bwd": []}
        for bn, w in itertools.product((4096, 8192, 16384), (16, 32)):
            y2 = torch.full_like(x, float("nan"))
            fwd_prefetch[(m,)](x, y2, m, n, n, n, BLOCK_N=bn, num_warps=w)
            torch.testing.assert_close(y2.float(), ref, atol=2e-2, rtol=2e-2)
            f = 2 * nb / bench(lambda: fwd_prefetch[(m,)](x, y2, m, n, n, n, BLOCK_N=bn, num_warps=w)) * 1e-6 / copy
            dx2 = torch.full_like(x, float("nan"))
            bwd_prefetch[(m,)](ydx, dy, dx2, m, n, n, n, n, BLOCK_N=bn, num_warps=w)
            torch.testing.assert_close(dx2.float(), ref_dx.float(), atol=1e-2, rtol=1e-2)
            b = 3 * nb / bench(lambda: bwd_prefetch[(m,)](ydx, dy, dx2, m, n, n, n, n, BLOCK_N=bn, num_warps=w)) * 1e-6 / copy
            best["fwd"].append((round(f, 3), bn, w)); best["bwd"].append((round(b, 3), bn, w))
        rows.append(dict(dtype=str(dtype)[6:], N=n, copy=round(copy), cur_fwd=round(cur_f, 3),
                         pre_fwd=sorted(best["fwd"], reverse=True)[:2], cur_bwd=round(cur_b, 3),
                         pre_bwd=sorted(best["bwd"], reverse=True)[:2]))
        print(rows[-1], flush=True)
        del x, y, dy, dx, ydx, ref, ref_dx
        torch.cuda.empty_cache()
pd.set_option("display.width", 250)
print(pd.DataFrame(rows).to_string())
