"""The backward page's ladder, step 0: the plain kernel it ran before (plain_rms_norm_bwd_kernel, a row a program,
4 warps) against what it runs now (rms_norm_bwd_kernel at BLOCK_M = 1, 4 warps, a program a row), and the drop-in's
step 2 for scale, on bf16 and fp32 rows of 256 and 4096 and the backward page's sweep, M x N = 2**26, on a GPU.
The same bytes (x, dy read, dx and an fp32 partial a row written, the partials summed by torch); GB/s counts x, dy, dx.
Run from the repository root: python probe/rms_short.py"""

import importlib.util, pathlib, sys
import torch, triton, triton.language as tl

assert torch.cuda.is_available(), "a GPU is needed"


@triton.jit
def plain_rms_norm_bwd_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_cols, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    offs, mask = row.to(tl.int64) * n_cols + cols, cols < n_cols  # int64: offsets may pass 2**31
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat, g = x * rstd, dy * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dx = (g - x_hat * tl.sum(g * x_hat, axis=0) / n_cols) * rstd
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_partial_ptr + offs, dy * x_hat, mask=mask)


def plain_backward(x, w, rstd, dy, dx):  # the old step 0
    dw_partial = torch.empty(x.shape, device=x.device)
    plain_rms_norm_bwd_kernel[(len(x),)](x, w, rstd, dy, dx, dw_partial, x.shape[1],
                                         BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return dw_partial.sum(0)


# the page's kernel, config and launcher, from the page itself (its cells up to the appendix's machinery)
source = pathlib.Path("tutorials/04_rms_norm_backward.py").read_text()
pathlib.Path("/tmp/rms_bwd_page.py").write_text(source[: source.index("import importlib.util, shutil")])
_spec = importlib.util.spec_from_file_location("rms_bwd_page", "/tmp/rms_bwd_page.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
page = vars(_mod)
launch = page["rms_norm_rows_backward"]


def bench(fn):
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=5, rep=30, return_mode="median")


torch.cuda.set_stream(torch.cuda.Stream())
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
print("dtype     N      old step 0   new step 0   new/old   step 2 (GB/s)")
for dtype in (torch.bfloat16, torch.float32):
    for n in (256, 512, 1024, 2048, 4096, 8192):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        w, dy, dx = torch.rand(n, device="cuda", dtype=dtype) + 0.5, torch.randn_like(x), torch.empty_like(x)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
        gbs = lambda ms: 3 * x.numel() * x.element_size() / ms * 1e-6
        old = gbs(bench(lambda: plain_backward(x, w, rstd, dy, dx).to(w.dtype)))
        new = gbs(bench(lambda: launch(x, w, rstd, dy, dx, step=0).to(w.dtype)))
        two = gbs(bench(lambda: launch(x, w, rstd, dy, dx).to(w.dtype)))
        print(f"{str(dtype)[6:]:9} {n:<6} {old:10.0f}   {new:10.0f}   {new / old:7.3f}   {two:10.0f}")
