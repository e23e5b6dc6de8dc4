"""Three questions, one GPU run (about 120 s on an H200). From the repository root: python3 probe/next68.py
(no GPU: a small functional run through Triton's interpreter, no timings).

1. 01B's backward with L2 hints: eviction_policy on y and dy loads ("", evict_last, evict_first), 01's launch.
   GB/s counts y, dy read and dx written, 2**26 elements, beside a copy.
2. 04's forward on 01's tile model, x loaded with and without evict_last (page: 04's own launch).
3. The host's time of a softmax call, three ways of making it an operator: "custom_op" (01B's drop-in operator:
   torch.library.custom_op + register_autograd), "define/impl" (torch.library.Library define + impl + register_fake,
   the gradient in a torch.autograd.Function outside the operator), "define/impl, eager direct" (the same, but the
   Function calls the launchers directly when not compiling). Eager and torch.compile(fullgraph=True), forward and
   forward + backward, on 8 x 4096 bf16 (the GPU idle), perf_counter and process_time. Then at 8192 x 8192 bf16,
   eager, wall time a call (is the host or the GPU the bound?).
"""
import json, os, sys, time

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
core, bwd, rms = load_tutorial("01_fused_softmax"), load_tutorial("01_softmax_backward"), load_tutorial("04_rms_norm")
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
SIZES = [256, 1024, 4096, 8192, 16384] if ON_GPU else [256, 1000]
TOTAL = 2**26 if ON_GPU else 2**12


@triton.jit
def bwd_hint_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EY: tl.constexpr, EDY: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok, other=0.0,
                eviction_policy=EY).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok, other=0.0,
                 eviction_policy=EDY).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)


BWD = {"page": ("", ""), "y last": ("evict_last", ""), "dy last": ("", "evict_last"),
       "both last": ("evict_last", "evict_last"), "both first": ("evict_first", "evict_first")}
for dtype in (torch.float32, torch.bfloat16):
    for n in SIZES:
        y = torch.softmax(torch.randn(TOTAL // n, n, device=DEV), -1).to(dtype)
        dy, dx, out = torch.randn_like(y), torch.empty_like(y), torch.empty_like(y)
        ref = (y.float() * (dy.float() - (y.float() * dy.float()).sum(1, keepdim=True)))
        bm, bn, nw = bwd["_fused_config"](n, 4)
        row = {"part": "1 backward", "dtype": str(dtype)[6:], "N": n, "cfg": f"{bm}x{bn}x{nw}",
               "copy": round(2 * y.numel() * y.element_size() / ms(lambda: out.copy_(y)) * 1e-6) if ON_GPU else None}
        for name, (ey, edy) in BWD.items():
            run = lambda: bwd_hint_kernel[(triton.cdiv(len(y), bm),)](y, dy, dx, *y.shape, n, n, n, BLOCK_M=bm,
                                                                       BLOCK_N=bn, EY=ey, EDY=edy, num_warps=nw)
            run()
            torch.testing.assert_close(dx.float(), ref, atol=2e-2, rtol=2e-2)
            row[name] = round(3 * y.numel() * y.element_size() / ms(run) * 1e-6) if ON_GPU else "ok"
        print(json.dumps(row), flush=True)


@triton.jit
def rms_hint_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    rows = (tl.program_id(0) + 0 * n_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    sum_sq = tl.sum(x * x, axis=1)
    rstd = tl.rsqrt(sum_sq / n_cols + eps)
    y = x * rstd[:, None] * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape),
             mask=row_ok[:, None] & (cols == 0)[None, :])


for dtype in (torch.float32, torch.bfloat16):
    for n in [512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [512, 1000]:
        x = torch.randn(TOTAL // n, n, device=DEV, dtype=dtype)
        w = torch.rand(n, device=DEV, dtype=dtype) + 0.5
        y, rstd, out = torch.empty_like(x), torch.empty(len(x), device=DEV), torch.empty_like(x)
        ref = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-6)
        gbs = lambda t: 2 * x.numel() * x.element_size() / t * 1e-6
        bm, bn, nw = core["_fused_config"](n, x.element_size())
        row = {"part": "2 rms forward", "dtype": str(dtype)[6:], "N": n, "cfg": f"{bm}x{bn}x{nw}",
               "copy": round(gbs(ms(lambda: out.copy_(x)))) if ON_GPU else None}
        page_run = lambda: rms["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)
        page_run()
        row["page"] = round(gbs(ms(page_run))) if ON_GPU else "ok"
        for name, ev in {"01 model": "", "01 model+last": "evict_last"}.items():
            run = lambda: rms_hint_kernel[(triton.cdiv(len(x), bm),)](x, w, y, rstd, *x.shape, n, n, 1e-6, BLOCK_M=bm,
                                                                       BLOCK_N=bn, EVICT=ev, num_warps=nw)
            run()
            torch.testing.assert_close(y.double(), ref, atol=5e-2, rtol=2e-2)
            row[name] = round(gbs(ms(run))) if ON_GPU else "ok"
        print(json.dumps(row), flush=True)

# 3. host time
lib = torch.library.Library("sol_probe68", "DEF")
lib.define("softmax_fwd(Tensor x) -> Tensor")
lib.define("softmax_bwd(Tensor y, Tensor dy) -> Tensor")
_rows_op, fwd_launch, bwd_launch = bwd["_rows_op"], bwd["softmax_rows_forward"], bwd["softmax_rows_backward"]
lib.impl("softmax_fwd", lambda x: _rows_op(fwd_launch, x), "CompositeExplicitAutograd")
lib.impl("softmax_bwd", lambda y, dy: _rows_op(bwd_launch, y, dy), "CompositeExplicitAutograd")
torch.library.register_fake("sol_probe68::softmax_fwd", lambda x: x.new_empty(x.shape))
torch.library.register_fake("sol_probe68::softmax_bwd", lambda y, dy: y.new_empty(y.shape))


class Defined(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.ops.sol_probe68.softmax_fwd(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        return torch.ops.sol_probe68.softmax_bwd(ctx.saved_tensors[0], dy)


class Direct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.ops.sol_probe68.softmax_fwd(x) if torch.compiler.is_compiling() else _rows_op(fwd_launch, x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        y = ctx.saved_tensors[0]
        return torch.ops.sol_probe68.softmax_bwd(y, dy) if torch.compiler.is_compiling() else _rows_op(bwd_launch, y, dy)


def timed(fn, k=1000 if ON_GPU else 10):
    for _ in range(10):
        fn()
    if ON_GPU:
        torch.cuda.synchronize()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(k):
        fn()
    if ON_GPU:
        torch.cuda.synchronize()
    return round((time.perf_counter() - t) / k * 1e6, 1), round((time.process_time() - c) / k * 1e6, 1)


torch._dynamo.config.recompile_limit = 64
WAYS = {"torch": lambda t: torch.softmax(t, -1), "custom_op": bwd["softmax_fwd_op"], "define/impl": Defined.apply,
        "define/impl, eager direct": Direct.apply}
for shape in ((8, 4096), (8192, 8192)) if ON_GPU else ((8, 1000),):
    x = torch.randn(*shape, device=DEV, dtype=torch.bfloat16)
    xg, dy = x.clone().requires_grad_(), torch.randn_like(x)
    for compiled in (False, True) if shape[0] == 8 else (False,):
        torch._dynamo.reset()
        row = {"part": "3 host", "shape": shape, "compiled": compiled}
        for name, fn in WAYS.items():
            f = torch.compile(fn, fullgraph=True) if compiled else fn
            torch.testing.assert_close(f(x).float(), torch.softmax(x.float(), -1), atol=2e-2, rtol=2e-2)
            g = torch.autograd.grad(f(xg), xg, dy)[0]
            ref = torch.autograd.grad(torch.softmax(xg.float(), -1), xg, dy.float())[0]
            torch.testing.assert_close(g.float(), ref.float(), atol=2e-2, rtol=2e-2)
            with torch.no_grad():
                row[f"{name}: fwd us (wall, cpu)"] = timed(lambda: f(x))
            row[f"{name}: fwd+bwd us (wall, cpu)"] = timed(lambda: torch.autograd.grad(f(xg), xg, dy))
        print(json.dumps(row), flush=True)
