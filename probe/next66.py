"""Two questions for the next GPU session, one run (about 60 s on an H200). From the repository root:
python3 probe/next66.py   (no GPU: a small functional run through Triton's interpreter, no timings)

1. 01's forward below 4 warps and with L2 hints, where Helion is 1-4.5% faster (its picks: one row a program, 1-4
   warps at short rows, evict_last on x). Variants of 01's step 1 kernel, each checked against torch:
   "page" (01's launch), "floor 1" / "floor 2" (warps for 128 bytes a thread, at least 1 / 2), "page+last"
   (01's launch, x loaded evict_last), "page+first" (x evict_first), "floor 1+last". do_bench median, L2 flushed,
   2**26 elements, GB/s beside a copy.
2. The host's time a softmax call, forward and forward + backward (8 x 4096 bf16, the GPU idle): 01B's drop-in
   (torch.library.custom_op), the same launchers registered with torch.library.Library define/impl, and a plain
   torch.autograd.Function calling them, which torch.compile cannot keep whole. Prints JSON lines.
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
fwd, bwd = load_tutorial("01_fused_softmax"), load_tutorial("01_softmax_backward")


@triton.jit
def softmax_hint_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok, other=-float("inf"),
                eviction_policy=EVICT).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator * (1.0 / tl.sum(numerator, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)


def floor_config(least):
    def config(n_cols, element_size):
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, fwd["min_tile_bytes"]() // (block_n * element_size))
        return block_m, block_n, min(32, max(least, block_m * block_n * element_size // (32 * 128)))
    return config


VARIANTS = {"page": (fwd["_fused_config"], ""), "floor 1": (floor_config(1), ""), "floor 2": (floor_config(2), ""),
            "page+last": (fwd["_fused_config"], "evict_last"), "page+first": (fwd["_fused_config"], "evict_first"),
            "floor 1+last": (floor_config(1), "evict_last")}


def launch(config, evict, x, y):
    block_m, block_n, num_warps = config(x.shape[1], x.element_size())
    softmax_hint_kernel[(triton.cdiv(x.shape[0], block_m),)](x, y, *x.shape, x.stride(0), y.stride(0),
                                                             BLOCK_M=block_m, BLOCK_N=block_n, EVICT=evict,
                                                             num_warps=num_warps)


ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
for dtype in (torch.float32, torch.bfloat16):
    for n in [256, 512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [256, 1000]:
        x = torch.randn((2**26 if ON_GPU else 2**12) // n, n, device=DEV, dtype=dtype)
        y, out = torch.empty_like(x), torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        gbs = lambda t: 2 * x.numel() * x.element_size() / t * 1e-6
        row = {"dtype": str(dtype)[6:], "N": n, "copy": round(gbs(ms(lambda: out.copy_(x)))) if ON_GPU else None}
        for name, (config, evict) in VARIANTS.items():
            launch(config, evict, x, y)
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
            row[name] = round(gbs(ms(lambda: launch(config, evict, x, y)))) if ON_GPU else "ok"
            row[f"cfg {name}"] = "x".join(map(str, config(n, x.element_size())))
        print(json.dumps(row), flush=True)

# 2. The host's time a call
lib = torch.library.Library("sol_probe", "DEF")
lib.define("softmax_fwd(Tensor x) -> Tensor")
lib.define("softmax_bwd(Tensor y, Tensor dy) -> Tensor")


def _fwd_impl(x):
    y = torch.empty_like(x)
    bwd["softmax_rows_forward"](x, y)
    return y


def _bwd_impl(y, dy):
    dx = torch.empty_like(y)
    bwd["softmax_rows_backward"](y, dy, dx)
    return dx


lib.impl("softmax_fwd", _fwd_impl, "CUDA" if ON_GPU else "CPU")
lib.impl("softmax_bwd", _bwd_impl, "CUDA" if ON_GPU else "CPU")


class DefinedSoftmax(torch.autograd.Function):  # the define/impl operators under autograd
    @staticmethod
    def forward(ctx, x):
        y = torch.ops.sol_probe.softmax_fwd(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        return torch.ops.sol_probe.softmax_bwd(ctx.saved_tensors[0], dy)


class PlainSoftmax(torch.autograd.Function):  # the launchers alone
    @staticmethod
    def forward(ctx, x):
        y = _fwd_impl(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _bwd_impl(ctx.saved_tensors[0], dy)


def us(fn, k=2000 if ON_GPU else 20):
    for _ in range(10):
        fn()
    if ON_GPU:
        torch.cuda.synchronize()
    t = time.process_time()
    for _ in range(k):
        fn()
    if ON_GPU:
        torch.cuda.synchronize()
    return round((time.process_time() - t) / k * 1e6, 1)


x = torch.randn(8, 4096, device=DEV, dtype=torch.bfloat16)
xg, dy = x.clone().requires_grad_(), torch.randn_like(x)
ways = {"torch": lambda t: torch.softmax(t, -1), "custom_op drop-in": lambda t: bwd["softmax"](t, -1),
        "define/impl": DefinedSoftmax.apply, "autograd.Function": PlainSoftmax.apply}
row = {}
for name, fn in ways.items():
    torch.testing.assert_close(fn(x).float(), torch.softmax(x.float(), -1), atol=2e-2, rtol=2e-2)
    with torch.no_grad():
        row[f"{name}: forward us"] = us(lambda: fn(x))
    row[f"{name}: forward+backward us"] = us(lambda: torch.autograd.grad(fn(xg), xg, dy))
print(json.dumps(row), flush=True)
