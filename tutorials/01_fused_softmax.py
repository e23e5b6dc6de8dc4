"""
Fused softmax
=============

Softmax turns each row of scores into probabilities. It does a handful of arithmetic operations per
element, so its speed is set by memory traffic alone: the best possible kernel reads the input once,
writes the output once, and runs as fast as a device-to-device copy of the same bytes, the *speed of
light*. On this page you build that kernel in Triton, forward and backward, as a drop-in replacement
for :func:`torch.softmax`, and measure it against PyTorch, ``torch.compile``, Liger-Kernel and quack.

**What you will learn**: how to count the bytes a kernel must move and predict its
speed before measuring it; how to fuse a row reduction into one pass, whole rows in registers and
several short rows a program, with its launch parameters in one small config function; how *online
softmax* streams rows too long for registers; and how to write the backward pass and wrap both in
``torch.autograd.Function``. Prerequisites: PyTorch; the Triton the page uses is explained where it first appears.
"""

import contextlib, datetime, math, os, platform, subprocess, timeit, warnings

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import matplotlib.pyplot as plt
import pandas as pd
import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The naive softmax and its bytes
# -------------------------------
# For a row :math:`x` of length :math:`N`:
#
# .. math::
#
#    y_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j .
#
# Subtracting the row maximum :math:`m` changes nothing mathematically but keeps :math:`e^{x - m}`
# at most 1, so large scores cannot overflow. Written with PyTorch operations, one per line, it is:

def naive_softmax(x):
    """Row softmax of a 2-D tensor, one PyTorch operation at a time."""
    x_max = x.max(dim=1, keepdim=True).values  # read M*N, write M
    z = x - x_max  # read M*N + M, write M*N
    numerator = torch.exp(z)  # read M*N, write M*N
    denominator = numerator.sum(dim=1, keepdim=True)  # read M*N, write M
    return numerator / denominator  # read M*N + M, write M*N

# %%
# Each operation is its own kernel and goes through memory: about :math:`5MN` elements read and
# :math:`3MN` written, :math:`8MN` in all. A kernel that keeps a row on chip needs only :math:`2MN`
# (read :math:`x`, write :math:`y`): at the memory's bandwidth, it should be **4 times faster**.
#
# The fused kernel
# ----------------
# **The Triton this page needs.** A kernel (``@triton.jit``) runs as many *programs* as its launch grid asks,
# ``kernel[(grid,)](...)``; ``tl.program_id(0)`` tells a program which one it is. ``tl.arange(0, BLOCK_N)`` is the
# block :math:`0, 1, \ldots`; ``tl.load`` reads and ``tl.store`` writes a block of addresses (``x_ptr + offsets``),
# ``mask=`` turning off lanes past the row's end (``other=``: what they load). ``tl.constexpr`` sizes are fixed at
# compile time, powers of two; ``num_warps`` (32 threads each) share a program's work; ``tl.sum``, ``tl.max`` reduce.
#
# One program handles ``BLOCK_M`` whole rows at a time: it loads them into registers, reduces each row
# to its maximum and its sum, and writes the result. Padding columns (the block is a power of two, the
# row need not be) load as :math:`-\infty`, whose exponential is 0. Rows past the end are clamped onto
# the last row: a duplicate never stored, not garbage. Arithmetic is in fp32 whatever the dtype: fp16
# and bf16 are read and written as such (half the bytes), but not rounded on the way.
#
# The loop over blocks ``pid``, ``pid + num_programs``, ... runs once here (a program per block); a *persistent*
# grid of fewer programs is measured in :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.

@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :],
                    mask=col_ok[None, :], other=-float("inf")).to(tl.float32)
        x_max = tl.max(x, axis=1)
        numerator = tl.exp(x - x_max[:, None])
        inv_denominator = 1.0 / tl.sum(numerator, axis=1)  # one division per row, not per element
        y = numerator * inv_denominator[:, None]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])

# %%
# **Launch parameters** come from ``_fused_config`` and the constants above it: change them there. Why
# each number, and the measurements behind it: :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.

MAX_FUSED_N = 32768  # forward: longest row held whole in registers (1024 threads, 32 fp32 values each)
MAX_FUSED_BWD_N = 16384  # backward: it holds two rows (y and dy); past this an fp32 row spills
MIN_ELEMENTS = 4096  # fewest elements a program handles: fewer cannot keep enough bytes in flight
BYTES_PER_THREAD = 32  # of the row, per thread: two 16-byte loads in flight, room for a 2nd program/SM
# The N these kernels are for: the site's landing page recommends them there (past them: "Going further")
RANGE = {("forward", "float32"): range(1, 32768 + 1), ("forward", "bfloat16"): range(1, 16384 + 1),
         ("backward", "float32"): range(1, 32768 + 1), ("backward", "bfloat16"): range(1, 32768 + 1)}

def _fused_config(n_cols, element_size):
    """(BLOCK_M, BLOCK_N, num_warps) of the fused kernels, for rows of n_cols elements of element_size
    bytes (the backward passes 4: it widens y and dy to fp32 whatever their dtype)."""
    block_n = triton.next_power_of_2(n_cols)  # Triton blocks are powers of two
    block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
    elements_per_thread = BYTES_PER_THREAD // element_size
    num_warps = min(32, max(4, block_m * block_n // (32 * elements_per_thread)))
    return block_m, block_n, num_warps

# %%
# The backward pass
# -----------------
# With :math:`y = \mathrm{softmax}(x)` and the incoming gradient :math:`dy`, the chain rule through the
# Jacobian :math:`\partial y_i / \partial x_j = y_i(\delta_{ij} - y_j)` gives
#
# .. math::
#
#    dx = y \odot \left(dy - \sum_j y_j \, dy_j\right) .
#
# A row reduction (one dot product per row) and an elementwise step: it fuses the same way, reading
# :math:`y` and :math:`dy` and writing :math:`dx`. Saving :math:`y` (not :math:`x`) spares the exponentials.

@triton.jit
def softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :],
                    mask=col_ok[None, :], other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :],
                     mask=col_ok[None, :], other=0.0).to(tl.float32)
        dot = tl.sum(y * dy, axis=1)
        dx = y * (dy - dot[:, None])
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])

# %%
# Rows too long for registers: online softmax
# -------------------------------------------
# A longer row than a program can hold must be streamed in chunks, and the maximum is only known
# after the whole row has been read. *Online softmax* (Milakov and Gimelshein, 2018) keeps a running
# maximum :math:`m` and a running sum :math:`s` of :math:`e^{x - m}`; when a chunk raises the maximum
# to :math:`m'`, the sum so far is rescaled: :math:`s' = s \, e^{m - m'} + \sum_{i \in \text{chunk}}
# e^{x_i - m'}`. One pass yields both statistics, a second writes :math:`y`: 3 row-sized transfers, 2/3
# of the speed of light if the second read went to DRAM. So it is kept in L2: pass 1 loads with
# ``evict_last``, pass 2 walks the row *backwards* (last read, first reread) with ``evict_first`` and
# streaming stores (``.cs``). The backward does the same, two chunks in flight. The simplest design
# correct at any length; reading a long row once, shared among several programs, is
# :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py`.

@triton.jit
def softmax_fwd_online_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                              BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)  # running max, per lane
        s = tl.zeros([BLOCK_N], tl.float32)  # running sum of exp(x - m), per lane
        for chunk in range(0, n_chunks):
            offs = chunk * BLOCK_N + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"),
                        eviction_policy="evict_last").to(tl.float32)  # keep it in L2 for pass 2
            m_new = tl.maximum(m, x)
            # A lane that has seen only -inf keeps m = -inf; shift by 0 there so that
            # exp(-inf - (-inf)) = NaN never appears. A real NaN or +inf in the row still gives NaN.
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.exp(x - shift)
            m = m_new
        row_max = tl.max(m, axis=0)
        shift = tl.where(row_max == -float("inf"), 0.0, row_max)
        inv_sum = 1.0 / tl.sum(s * tl.exp(m - shift), axis=0)
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * BLOCK_N + cols  # backwards: the last chunks are in L2
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"),
                        eviction_policy="evict_first").to(tl.float32)  # last use
            y = tl.exp(x - shift) * inv_sum
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n_cols,
                     cache_modifier=".cs")  # streaming store: do not push rows out of L2

@triton.jit
def softmax_bwd_online_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                              BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        dy_row = dy_ptr + tl.cast(row, tl.int64) * dy_row_stride
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        # Pass 1: dot = sum(y * dy). Each iteration issues the loads of the next chunk before it
        # works on this one, so two chunks are in flight (the last, fully masked load reads nothing).
        acc = tl.zeros([BLOCK_N], tl.float32)
        y_next = tl.load(y_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_next = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            y, dy = y_next, dy_next
            offs = (chunk + 1) * BLOCK_N + cols
            y_next = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            acc += y.to(tl.float32) * dy.to(tl.float32)
        dot = tl.sum(acc, axis=0)
        # Pass 2, backwards and prefetching the same way: dx = y * (dy - dot).
        offs = (n_chunks - 1) * BLOCK_N + cols
        y_next = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            y, dy = y_next, dy_next
            offs_here = (n_chunks - 1 - chunk) * BLOCK_N + cols
            offs = offs_here - BLOCK_N
            in_row = (offs >= 0) & (offs < n_cols)
            y_next = tl.load(y_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dx = y.to(tl.float32) * (dy.to(tl.float32) - dot)
            tl.store(dx_row + offs_here, dx.to(dx_ptr.dtype.element_ty), mask=offs_here < n_cols,
                     cache_modifier=".cs")

def _online_config(n_cols):
    """Meta-parameters of the online kernels: chunks of BLOCK_N columns, one 32-warp program a row."""
    return dict(BLOCK_N=16384, num_warps=32)

# %%
# The launchers and the drop-in function
# --------------------------------------
# The fused kernel where the row fits in registers, else the online one; a program per block of rows.

def softmax_rows_forward(x2d, y2d):
    """y2d = softmax(x2d) along dim 1. Both 2-D, unit stride along the row. Returns the kernel's name."""
    args = (x2d, y2d, *x2d.shape, x2d.stride(0), y2d.stride(0))
    if x2d.shape[1] > MAX_FUSED_N:
        softmax_fwd_online_kernel[(x2d.shape[0],)](*args, **_online_config(x2d.shape[1]))
        return "online"
    block_m, block_n, num_warps = _fused_config(x2d.shape[1], x2d.element_size())
    softmax_fwd_kernel[(triton.cdiv(x2d.shape[0], block_m),)](*args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return "fused"

def softmax_rows_backward(y2d, dy2d, dx2d):
    """dx2d = y2d * (dy2d - rowsum(y2d * dy2d)). All 2-D, unit stride along the row."""
    args = (y2d, dy2d, dx2d, *y2d.shape, y2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    if y2d.shape[1] > MAX_FUSED_BWD_N:
        softmax_bwd_online_kernel[(y2d.shape[0],)](*args, **_online_config(y2d.shape[1]))
        return "online"
    block_m, block_n, num_warps = _fused_config(y2d.shape[1], 4)  # y and dy held as fp32
    softmax_bwd_kernel[(triton.cdiv(y2d.shape[0], block_m),)](*args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return "fused"

# %%
# ``softmax(input, dim, dtype=None)`` takes what :func:`torch.softmax` takes: any shape and ``dim``, non-contiguous,
# empty and 0-d tensors, a cast first. The softmax dimension is moved last; where its rows then have unit stride and
# even spacing nothing is copied, elsewhere one copy makes it so (a pass over memory: the last dimension
# is the fast path). Anything the kernels do not handle raises an error that says so.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _check(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"softmax: {name} has dtype {x.dtype}; these kernels support float32, float16 and "
                        "bfloat16 (use torch.softmax for other dtypes)")
    if x.device.type != DEVICE.type:
        raise ValueError(f"softmax: {name} is on {x.device}, but the kernels run on {DEVICE.type} here "
                         f"({'a CUDA GPU' if ON_GPU else 'no CUDA GPU: Triton interprets them on the CPU'}); "
                         f"move it with .to('{DEVICE.type}')")

def _as_rows(t, dim):
    """A 2-D view (or copy) of ``t`` whose rows run along ``dim`` with unit stride."""
    t = t.movedim(dim, -1)
    t = t if t.stride(-1) == 1 else t.contiguous()
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])

def _from_rows(rows2d, like, dim):
    """Undo ``_as_rows``: shape ``rows2d`` like ``like``, with ``like``'s layout when it is contiguous."""
    out = rows2d.view(like.movedim(dim, -1).shape).movedim(-1, dim)
    return out.contiguous() if like.is_contiguous() else out

class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        x2d = _as_rows(x, dim)
        y2d = torch.empty(x2d.shape, dtype=x.dtype, device=x.device)
        if x2d.numel() > 0:
            softmax_rows_forward(x2d, y2d)
        y = _from_rows(y2d, x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        _check(dy, "the gradient")
        y2d, dy2d = _as_rows(y, ctx.dim), _as_rows(dy.to(y.dtype), ctx.dim)
        dx2d = torch.empty(y2d.shape, dtype=y.dtype, device=y.device)
        if y2d.numel() > 0:
            softmax_rows_backward(y2d, dy2d, dx2d)
        return _from_rows(dx2d, y, ctx.dim), None

def softmax(input, dim=-1, dtype=None):
    """Drop-in for ``torch.softmax(input, dim, dtype=None)`` on float32, float16 and bfloat16, with autograd."""
    _check(input, "input")
    if dtype is not None and dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"softmax: dtype={dtype}; these kernels support float32, float16 and bfloat16")
    x = input if dtype is None else input.to(dtype)  # as torch.softmax: cast first, autograd casts back
    if not isinstance(dim, int):
        raise TypeError(f"softmax: dim must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)  # a 0-d tensor takes dim 0 or -1, as in torch
    if not -ndim <= dim < ndim:
        raise IndexError(f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor "
                         f"(expected a value in [{-ndim}, {ndim - 1}])")
    if x.dim() == 0:
        return SoftmaxFunction.apply(x.reshape(1), 0).reshape(())
    if x.shape[dim] >= 2**31:
        raise ValueError(f"softmax: rows of {x.shape[dim]} elements exceed the kernels' limit of 2**31 - 1")
    return SoftmaxFunction.apply(x, dim % x.dim())

# %%
# Correctness
# -----------
# Against :func:`torch.softmax` in float64, the error :math:`\lVert out - ref \rVert / \lVert ref \rVert`
# forward and backward, next to PyTorch's own in the same dtype: ours should be no worse. Short rows,
# several rows a program, a row of odd length, and rows long enough for the online kernels.

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (64, 30000), (16, 100_003), (4, 262_144)] if ON_GPU else \
    [(17, 1), (33, 257), (8, 1000), (3, 40_000), (2, 70_001)]

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    y64 = torch.softmax(x64 := x.detach().double().requires_grad_(True), dim=-1)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    # ||out - ref|| / ||ref||; where ref is all zeros (dx when N = 1), the absolute error
    err = lambda out, ref: ((out.double() - ref).norm() / ref.norm().clamp(min=1.0 if ref.norm() == 0 else 0.0)).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn in [("ours", softmax), ("torch", torch.softmax)]:
        y = fn(x, dim=-1)
        row[f"{name} fwd"], row[f"{name} bwd"] = err(y, y64.detach()), err(torch.autograd.grad(y, x, dy)[0], dx64)
    return row

errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# The page builds only if each error is a few roundings of the dtype (the interpreter truncates to bf16)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
assert (errors[["ours fwd", "ours bwd"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns if c.endswith(("fwd", "bwd"))}).hide(axis="index")

# %%
# Benchmark
# ---------
# :math:`M \times N = 2^{26}` elements on a GPU (256 MB in fp32, far past the 50 MB L2), N up to the
# 32 K this design is built for. Every provider runs on the same tensors, timed by
# :func:`triton.testing.do_bench` (median, L2 flushed) on replays of a CUDA graph of the call: what the
# kernels cost the GPU, not the Python around them. The *speed of light* is a copy of the same tensor,
# timed without a graph (in one, CUDA may make a large copy a slower copy-engine transfer). GB/s counts
# the bytes a perfect kernel moves: :math:`x, y` forward; :math:`y, dy, dx` backward, timed as in
# training on an :math:`x` that requires gradients (``torch.autograd.grad``). quack (CuTe-DSL kernels, for
# compute capability 9.0 and newer) runs as ``quack.softmax``; "-" marks a point a peer cannot run.

TOTAL_ELEMENTS, SWEEP_N = (2**26, [2**k for k in range(8, 16)]) if ON_GPU else (2**15, [256, 1024, 4096, 16384, 32768])
LigerSoftmaxFunction = None  # not installed: no Liger column
with contextlib.suppress(ImportError):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
quack = None  # quack (Dao-AILab's CuTe-DSL kernels), where it runs: installed, on compute capability 9.0 and newer
if ON_GPU and torch.cuda.get_device_capability()[0] >= 9:
    try:
        import quack
    except Exception as err:  # not installed, or its CUDA DSL fails to load here: no quack column
        print(f"No quack column: quack is not installed or does not load here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
else:
    print("No quack column: quack needs an NVIDIA GPU of compute capability 9.0 or newer" + ("." if ON_GPU else "; no GPU here."))
if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing (torch.cuda.graph and do_bench synchronize first)
    timed = fn
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        timed = captured.replay
    return triton.testing.do_bench(timed, warmup=5, rep=15, return_mode="median")

def providers():
    """name -> softmax along the last dim; peers that cannot run here are left out."""
    found = {"naive": naive_softmax, "torch": lambda t: torch.softmax(t, dim=-1)}
    if ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note on long rows
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
        if LigerSoftmaxFunction is not None:
            found["Liger"] = LigerSoftmaxFunction.apply
        if quack is not None:
            found["quack"] = quack.softmax  # rows along the last dim of a 2-D tensor, with autograd
    return found | {"ours": softmax}

records, fns, missing = [], providers(), {}
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in SWEEP_N:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = torch.softmax(x.float(), dim=-1)
        xg = x.requires_grad_(True)  # both directions as in training
        for name, fn in fns.items():
            y = None
            for direction, moved, call in (("forward", 2 * nbytes, lambda: fn(xg)),
                                           ("backward", 3 * nbytes, lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))):
                try:
                    y = fn(xg) if y is None else y  # one forward: the backward differentiates it
                    if direction == "forward":
                        torch.testing.assert_close(y.float(), reference, atol=1e-2, rtol=1e-2)
                    gbs = moved / bench(call) * 1e-6
                except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
                    if name == "ours":
                        raise
                    why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} N = {n_cols}")
                    gbs = float("nan")
                records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                                "GB/s": gbs, "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
            y = None
        del x, xg, dy, out, reference
for (name, why), points in missing.items():
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)

def sweep_table(direction):
    """GB/s per provider (columns), dtype and row length (rows), with ours as % of the speed of light."""
    part = results[results.direction == direction]
    table = part.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)[list(fns)]
    table.insert(0, "speed of light", part.groupby(["dtype", "N"])["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table[[p for p in ("torch", "torch.compile", "Liger", "quack") if p in table]].max(axis=1)
    return table

# %%
# Forward and backward, GB/s (higher is better):

table = pd.concat({direction: sweep_table(direction) for direction in ("forward", "backward")}, names=["direction"])
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"},
                   na_rep="-")

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey=True, facecolor="white")
styles = {"naive": ":", "torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "ours": "-"}
for (i, direction), (j, dtype) in [(d, t) for d in enumerate(["forward", "backward"]) for t in enumerate(["float32", "bfloat16"])]:
    ax, part = axes[i][j], results[(results.direction == direction) & (results.dtype == dtype)]
    for name, line in part.groupby("provider", sort=False):
        ax.plot(line.N, line["% of speed of light"], linestyle=styles[name], marker="o", markersize=3,
                linewidth=2.5 if name == "ours" else 1.5, label=name)
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    ax.set(title=f"{direction}, {dtype}", ylabel="% of the copy's GB/s" if j == 0 else None,
           xlabel="row length N (elements)" if i == 1 else None)
axes[0][0].legend(loc="lower left", fontsize=8)
fig.suptitle(f"Softmax, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:
for direction, longest_fused in (("forward", MAX_FUSED_N), ("backward", MAX_FUSED_BWD_N)):
    for dtype in ("float32", "bfloat16"):
        part = results[(results.direction == direction) & (results.dtype == dtype)]
        ours = part[part.provider == "ours"].set_index("N")
        ratio = (ours["GB/s"] / part[~part.provider.isin(["ours", "naive"])].groupby("N")["GB/s"].max()).dropna()
        print(f"{direction}, {dtype}: ours runs at {ours['% of speed of light'].min():.3g}-"
              f"{ours['% of speed of light'].max():.3g}% of the copy over N = {min(SWEEP_N)}..{max(SWEEP_N)}; "
              f"against the best peer at each N, from {ratio.min():.3g}x (N = {ratio.idxmin()}) to "
              f"{ratio.max():.3g}x (N = {ratio.idxmax()}).")
    print(f"    {direction}: the online kernel ran at {[n for n in SWEEP_N if n > longest_fused] or 'no N: fused throughout'}")
fwd = results[(results.direction == "forward") & (results.dtype == "float32")].set_index(["N", "provider"])["GB/s"]
n_mid = SWEEP_N[len(SWEEP_N) // 2]
print(f"Fusion: at N = {n_mid} in fp32, the fused kernel is {fwd[(n_mid, 'ours')] / fwd[(n_mid, 'naive')]:.3g}x "
      f"faster than the naive five-kernel softmax (the bytes model predicted 4x).")
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
        .to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_fused_softmax.csv"))
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Where this design stops.** Whole rows in registers stop at ``MAX_FUSED_N`` columns forward and
# ``MAX_FUSED_BWD_N`` backward; past them the online kernels read each row twice. A 16-bit row of 16 K
# to 32 K fits but fills half an SM's registers: one program per SM, its load, reductions and store
# one after the other. Past ``RANGE`` the site recommends a deep dive: for 16-bit forward rows, staging them in
# shared memory with Gluon, :ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`; for longer rows,
# splitting each row across programs, :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py`.
#
# How ``BLOCK_M``, ``num_warps`` and the grid were chosen, how many programs share an SM, and whether
# a persistent grid pays: :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.
#
# * **Other dimensions.** ``softmax(x, dim=0)`` copies ``x``; a kernel that reduces down columns would
#   skip that copy (the parallel-reduction tutorial shows the pattern).
# * **Exercise.** Change ``MIN_ELEMENTS`` and ``BYTES_PER_THREAD`` beside ``_fused_config`` and rerun
#   the benchmark: which row lengths move, and why?
#
# References: Milakov and Gimelshein, *Online normalizer calculation for softmax* (2018); Triton's
# fused-softmax tutorial; quack's softmax and its "speed of light" write-up.
#
# Where this page was made
# ------------------------

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    if ON_GPU:
        props = torch.cuda.get_device_properties(DEVICE)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            driver = "unknown (no nvidia-smi)"
        device = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        runtime = f"driver {driver}, CUDA {torch.version.cuda}"
    else:
        device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU"
        runtime = "none: Triton's interpreter (TRITON_INTERPRET=1); the timings are NOT GPU timings"
    card = {"device": device, "driver / CUDA": runtime, "torch": torch.__version__,
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()

environment_card()
