"""
Fused softmax
=============

Softmax does a few operations per element, so memory traffic alone sets its speed: the best kernel reads
the input once, writes the output once, and runs as fast as a copy of the same bytes, the *speed of
light*. You build it in Triton, forward and backward, as a drop-in for :func:`torch.softmax`, measured
against PyTorch, ``torch.compile``, Liger-Kernel and quack.

**What you will learn**: to count bytes and predict a speed-up; a ladder of two kernels (one row a
program, then several short rows a program, launched from one config function); the backward pass; the drop-in as
a PyTorch operator that a compiled model keeps. No Triton needed beforehand: this page is the site's Triton primer.
"""

import datetime, importlib.util, math, os, subprocess, warnings

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
# at most 1, so large scores cannot overflow. With PyTorch operations, one per line:

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
# (read :math:`x`, write :math:`y`): it should be **4 times faster**.
#
# A Triton primer
# ---------------
# A kernel is a function under ``@triton.jit``; ``kernel[(n,)](...)`` runs ``n`` copies of it, the *programs*,
# and ``tl.program_id(0)`` tells each which one it is. A program works on blocks: ``tl.arange(0, BLOCK_N)``
# is the block :math:`0, 1, \ldots`, and ``x_ptr + offsets`` a block of addresses (a tensor arrives as a
# pointer to its first element). ``tl.load`` reads a block, ``tl.store`` writes one; ``mask=`` turns off
# lanes past the data's end (``other=``: what they load). ``tl.constexpr`` arguments are fixed at compile
# time (one compilation per value): block sizes, powers of two. ``num_warps=`` at launch sets how many warps
# (32 threads each) share a program; ``tl.max`` and ``tl.sum`` reduce a block along an axis.
#
# Step 0: the plain kernel
# ------------------------
# One program a row loads the row into registers (``BLOCK_N``: its length rounded up to a power of two), takes
# its maximum and the sum of the exponentials, and stores :math:`y`. Padding lanes load :math:`-\infty`, whose
# exponential is 0. The arithmetic is fp32; fp16 and bf16 stay 16-bit in memory (half the bytes).

@triton.jit
def softmax_plain_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator * (1.0 / tl.sum(numerator, axis=0))  # one division a row, not one an element
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)

def plain_softmax_rows(x2d, y2d):
    """y2d = softmax(x2d) along dim 1, one program a row (rows of unit stride, at most 32 K)."""
    block_n = triton.next_power_of_2(x2d.shape[1])
    num_warps = min(32, max(4, block_n // 256))  # 8 fp32 a thread (two 16-byte loads); 32 warps: a program's most
    softmax_plain_kernel[(x2d.shape[0],)](x2d, y2d, x2d.shape[1], x2d.stride(0), y2d.stride(0),
                                          BLOCK_N=block_n, num_warps=num_warps)

# %%
# Step 1: several short rows a program
# ------------------------------------
# A row of 256 fp32 is 1 KB: step 0 runs :math:`2^{18}` such programs for :math:`2^{26}` elements, each
# paying its start, each with too few loads in flight to hide the memory's latency. Step 1 gives a program
# ``BLOCK_M`` rows, at least ``MIN_ELEMENTS`` elements (16 KB of fp32), warps sized to that tile, reduced
# along axis 1; rows of 4096 or more stay one a program. Two details: the loop over blocks ``pid``,
# ``pid + num_programs``, ... runs once here (deep dive 13 runs it on a *persistent* grid of fewer programs),
# and rows past the end are clamped onto the last (never stored), so loads need no row mask.

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
# **Launch parameters** come from ``_fused_config`` and the constants above it: change them there.
# :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py` measures each choice.

MAX_FUSED_N = 32768  # forward: longest row held whole in registers (1024 threads, 32 fp32 values each)
MAX_FUSED_BWD_N = 16384  # backward: it holds two rows (y and dy); past this an fp32 row spills
MIN_ELEMENTS = 4096  # fewest elements a program handles: fewer cannot keep enough bytes in flight
BYTES_PER_THREAD = 32  # of the row, per thread: two 16-byte loads in flight, room for a 2nd program/SM
# The N these kernels are for: the site's front page recommends them there
RANGE = {("forward", "float32"): range(1, 32768 + 1), ("forward", "bfloat16"): range(1, 16384 + 1),
         ("backward", "float32"): range(1, 32768 + 1), ("backward", "bfloat16"): range(1, 32768 + 1)}

# num_warps: at most 32 (1024 threads, a program's limit); the floor of 4 never binds (a tile holds MIN_ELEMENTS or more)
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
# A row reduction (one dot product a row) and an elementwise step: it fuses as step 1 does, reading
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
# Rows longer than the registers hold
# -----------------------------------
# Past ``MAX_FUSED_N`` (backward: ``MAX_FUSED_BWD_N``) a row is streamed in chunks. *Online softmax* keeps a
# running maximum :math:`m` and sum :math:`s` of :math:`e^{x - m}`, rescaled when a chunk raises the maximum
# to :math:`m'`: :math:`s' = s \, e^{m - m'} + \sum_{\text{chunk}} e^{x_i - m'}`; a second pass writes
# :math:`y`. Cache hints keep the row in L2 for that pass:
# :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` explains them, and reads a long row once.

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

# chunks of 16 K: 16 fp32 a thread at 32 warps (a program's most), leaving registers for the running m and s
def _online_config(n_cols):
    """Meta-parameters of the online kernels: chunks of BLOCK_N columns, one 32-warp program a row."""
    return dict(BLOCK_N=16384, num_warps=32)

# %%
# The launchers and the drop-in
# -----------------------------
# Step 1's kernel where a row fits in registers, else the online one. ``torch.compile`` cannot trace a Triton launch
# from Python: a compiled model would break its graph there. ``torch.library.custom_op`` makes each launch an operator
# that stays in the graph as it is; ``register_fake`` tells the compiler its output's shape and dtype without running
# it, ``register_autograd`` gives it its backward. The operators take rows (2-D); ``softmax`` takes what
# :func:`torch.softmax` takes (any shape, ``dim``, layout and dtype cast, empty and 0-d tensors) and moves ``dim`` last.

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

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _rows_op(launch, *rows):
    """launch(*rows, out) on 2-D rows of unit stride (a copy where not), out a new tensor shaped like rows[0]."""
    out = rows[0].new_empty(rows[0].shape)  # never an input or a view of one
    if out.numel() > 0:
        launch(*[t if t.stride(1) == 1 else t.contiguous() for t in rows], out)  # dy from .sum(): stride 0
    return out

@torch.library.custom_op("sol::softmax_fwd_01", mutates_args=())
def softmax_fwd_op(x2d: torch.Tensor) -> torch.Tensor:
    return _rows_op(softmax_rows_forward, x2d)
softmax_fwd_op.register_fake(lambda x2d: x2d.new_empty(x2d.shape))

@torch.library.custom_op("sol::softmax_bwd_01", mutates_args=())
def softmax_bwd_op(y2d: torch.Tensor, dy2d: torch.Tensor) -> torch.Tensor:
    return _rows_op(softmax_rows_backward, y2d, dy2d)  # the kernels read dy in any float dtype
softmax_bwd_op.register_fake(lambda y2d, dy2d: y2d.new_empty(y2d.shape))

def _backward(ctx, dy2d):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
        raise RuntimeError("softmax: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's softmax there")
    return softmax_bwd_op(ctx.saved_tensors[0], dy2d)
softmax_fwd_op.register_autograd(_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))

def softmax(input, dim=-1, dtype=None):
    """Drop-in for ``torch.softmax(input, dim, dtype=None)`` on float32, float16 and bfloat16, with autograd."""
    if not isinstance(input, torch.Tensor) or not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"softmax: input must be a torch.Tensor and dim must be an int, got {type(input).__name__}, "
                        f"{type(dim).__name__}")
    for name, t in (("input's dtype is ", input.dtype if dtype is None else None), ("dtype=", dtype)):
        if t is not None and t not in SUPPORTED_DTYPES:  # with dtype=, any input is cast to it first, as in torch
            raise TypeError(f"softmax: {name}{t}; these kernels support float32, float16 and bfloat16 (else use torch.softmax)")
    if input.device.type != DEVICE.type:
        raise ValueError(f"softmax: input is on {input.device}, the kernels run on {DEVICE.type} here: use .to('{DEVICE.type}')")
    x, ndim = input if dtype is None else input.to(dtype), max(input.dim(), 1)  # 0-d: dim 0 or -1, as in torch
    if not -ndim <= dim < ndim:
        raise IndexError(f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor (expected [{-ndim}, {ndim - 1}])")
    rows = x.movedim(dim, -1) if x.dim() else x.reshape(1)  # 0-d: a row of one. reshape copies only where it must
    if rows.shape[-1] >= 2**31:
        raise ValueError(f"softmax: rows of {rows.shape[-1]} elements exceed the kernels' limit of 2**31 - 1")
    y = softmax_fwd_op(rows.reshape(math.prod(rows.shape[:-1]), rows.shape[-1])).view(rows.shape).movedim(-1, dim)
    return y.reshape(x.shape).contiguous() if x.is_contiguous() else y

# %%
# Correctness
# -----------
# The error :math:`\lVert out - ref \rVert / \lVert ref \rVert` against float64, forward and backward, next to
# PyTorch's own in the same dtype: ours should be no worse. The shapes reach each of the drop-in's kernels.

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (64, 30000), (16, 100_003), (4, 262_144)] if ON_GPU else \
    [(17, 1), (33, 257), (8, 1000), (3, 40_000), (2, 70_001)]

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    y64 = torch.softmax(x64 := x.detach().double().requires_grad_(True), dim=-1)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    err = lambda out, ref: ((out.double() - ref).norm() / (ref.norm() if ref.norm() > 0 else 1)).item()  # ref = 0: dx at N = 1
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn in [("ours", softmax), ("torch", torch.softmax)]:
        y = fn(x, dim=-1)
        row[f"{name} fwd"], row[f"{name} bwd"] = err(y, y64.detach()), err(torch.autograd.grad(y, x, dy)[0], dx64)
    return row

errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# No page unless each error is a few roundings of its dtype (the interpreter truncates to bf16)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
assert (errors[["ours fwd", "ours bwd"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns if c.endswith(("fwd", "bwd"))}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA graph of each call: the GPU's
# cost, not Python's. The *speed of light* is a copy of the same tensor, timed beside it without a graph
# (CUDA may make a captured copy a slower copy-engine transfer). GB/s counts the bytes a perfect kernel
# moves: :math:`x, y` forward; :math:`y, dy, dx` backward, timed as in training.

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
def load_peer(peer, module, min_cc=(0, 0)):
    """A peer's module, or None where it cannot run here (no column), saying why in the page's one wording."""
    cc = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = ("not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else
           "" if cc >= min_cc else "needs compute capability {}.{} or newer; this GPU has {}.{}".format(*min_cc, *cc))
    if not why:
        try:
            return importlib.import_module(module)
        except Exception as err:  # installed, yet it does not load here
            why = " ".join(f"{type(err).__name__}: {err}".split())[:100]
    print(f"{peer}: not measured here ({why}).")

liger, quack = load_peer("Liger-Kernel", "liger_kernel.ops.softmax"), load_peer("quack", "quack", min_cc=(9, 0))
inductor = load_peer("torch.compile", "torch._inductor")  # Inductor's CPU code would time a C++ compiler, not a GPU
if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of one fn(), CUDA-graph replays timed by do_bench; without a GPU, NaN: one call, timed not at all."""
    fn()  # compile and warm up outside the timing (on the CPU: the run that checks it)
    if not ON_GPU:
        return math.nan
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=5, rep=15, return_mode="median")

def providers():  # name -> softmax along the last dim
    found = {"naive": naive_softmax, "torch": lambda t: torch.softmax(t, dim=-1)}
    if inductor:
        warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
    peers = {"Liger": liger and liger.LigerSoftmaxFunction.apply, "quack": quack and quack.softmax}
    return found | {name: fn for name, fn in peers.items() if fn} | {"ours": softmax}

def write_results(table):  # the summary the site's front page reads
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_fused_softmax.csv"))

def environment_card():
    """The full environment card, shown collapsed."""
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch":
            torch.__version__, "Triton": triton.__version__, "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
        card["device"] = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        try:
            driver = subprocess.run(smi.split(), capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            driver = "unknown"
        card["driver / CUDA"] = f"driver {driver}, CUDA {torch.version.cuda}"
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()

# %%
# The ladder, measured
# --------------------
# Each step's forward on one fp32 tensor viewed as rows of 256 (packing matters) and 4096 (both launch alike).

LADDER_ELEMENTS = 2**26 if ON_GPU else 2**15  # 256 MB of fp32 on the GPU, far past its L2
x, y = torch.randn(LADDER_ELEMENTS, device=DEVICE), torch.empty(LADDER_ELEMENTS, device=DEVICE)
light = 2 * LADDER_ELEMENTS * 4 / bench(lambda: y.copy_(x), graph=False) * 1e-6
steps = [(0, "one row a program, the whole row in registers", plain_softmax_rows),
         (1, "several short rows a program, warps sized to the tile", softmax_rows_forward)]
rows = []
for step, idea, launch in steps:
    for n_cols in (256, 4096):
        xm, ym = x.view(-1, n_cols), y.view(-1, n_cols)
        gbps = 2 * LADDER_ELEMENTS * 4 / bench(lambda: launch(xm, ym)) * 1e-6  # bench runs it at least once
        torch.testing.assert_close(ym, torch.softmax(xm, dim=-1))
        rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbps, "% of light": 100 * gbps / light})
ladder = pd.DataFrame(rows)
shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide()

# %%
# Benchmark
# ---------
# :math:`M \times N = 2^{26}` elements on a GPU, N up to the 32 K this design is built for; "-" marks a
# point a peer cannot run.

TOTAL_ELEMENTS, SWEEP_N = (2**26, [2**k for k in range(8, 16)]) if ON_GPU else (2**15, [256, 1024, 4096, 16384, 32768])
records, fns, missing = [], providers(), {}
for dtype, n_cols in [(dtype, n) for dtype in (torch.float32, torch.bfloat16) for n in SWEEP_N]:
    x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
    dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
    light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
    reference, xg = torch.softmax(x.float(), dim=-1), x.requires_grad_(True)
    for name, fn in fns.items():
        y = None
        for direction, passes, call in (("forward", 2, lambda: fn(xg)),
                                        ("backward", 3, lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))):
            try:
                if y is None:  # one forward: the backward differentiates it
                    y = fn(xg)
                    torch.testing.assert_close(y.float(), reference, atol=1e-2, rtol=1e-2)
                gbs = passes * nbytes / bench(call) * 1e-6
            except Exception as err:  # a peer's limit: its point shows "-", and why is printed below
                if name == "ours":
                    raise
                missing.setdefault(f"{name}, {direction}: {type(err).__name__}: {' '.join(str(err).split())[:100]}", []).append(n_cols)
                gbs = float("nan")
            records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name, "GB/s": gbs,
                            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
for why, points in missing.items():
    print(f"Not measured at N = {points}: {why}")
results = pd.DataFrame(records)

# %%
# Forward and backward, GB/s (higher is better):

INDEX, PEERS = ["direction", "dtype", "N"], [p for p in ("torch", "torch.compile", "Liger", "quack") if p in fns]
table = results.pivot_table(index=INDEX, columns="provider", values="GB/s", dropna=False)[list(fns)].reindex(["forward", "backward"], level=0)
table.insert(0, "speed of light", results.groupby(INDEX)["speed of light GB/s"].first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table[PEERS].max(axis=1)
write_results(table)
fmt = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
table.style.format(fmt, na_rep="-") if ON_GPU else print(NO_SPEED)

# %%
# As a plot, each provider in % of the copy measured beside it (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey=True, facecolor="white")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of speed of light"], marker="o", markersize=3, label=name,
                    linewidth=2.5 if name == "ours" else 1.2)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.label_outer()
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Softmax, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# From the tables above, as this build measured them:

inside = table[[n in RANGE.get((d, t), ()) for d, t, n in table.index]]
pct, vs_peer, past = inside["ours, % of light"], inside["ours / best peer"], table.drop(inside.index)["ours, % of light"]
if ON_GPU:
    (d, t, n), fp32, n_mid = pct.idxmin(), table.loc["forward"].loc["float32"], SWEEP_N[len(SWEEP_N) // 2]
    packing = ladder.pivot(index="N", columns="step", values="GB/s").pipe(lambda gbs: gbs[1] / gbs[0])  # step 1 / 0
    why = (", short rows: a program spends more of its time starting and reducing than moving bytes" if n <= 1024 else
           ", rows for the online backward, which reads y and dy twice" if d == "backward" and n > MAX_FUSED_BWD_N else
           ", long rows: one fills much of an SM's registers, leaving few programs to overlap loads and stores"
           if n >= 16384 else "")
    print(f"Inside its range ours runs at {pct.min():.3g}-{pct.max():.3g}% of the copy (median {pct.median():.3g}%), "
          f"{vs_peer.min():.3g}-{vs_peer.max():.3g}x the best peer; its slowest point is {d} {t} at N = {n}{why}.")
    past_points = ", ".join(f"{d} {t} N = {n}: {v:.3g}%" for (d, t, n), v in past.items())
    print((f"Past its range ({past_points}) a 16-bit row of 32 K fills half an SM's registers, one program an SM: "
           if len(past) else "Past its range, ") + "deep dive 12 stages such rows in shared memory, and deep dive 11 "
          "takes rows past 32 K.")
    print(f"At N = {n_mid} in fp32 ours ran {fp32.ours[n_mid] / fp32.naive[n_mid]:.3g}x as fast as the naive softmax "
          f"(the bytes model said 4x). In the ladder, packing short rows ran rows of 256 at {packing[256]:.3g}x step "
          f"0's speed (rows of 4096, launched alike: {packing[4096]:.3g}x): a memory-bound kernel reaches a copy's "
          "speed by moving each byte once with enough bytes in flight per program.")
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# **Where this design stops.** Past ``RANGE``: 16-bit forward rows of 16 K to 32 K staged in shared memory
# with Gluon, :ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`; longer rows split across
# programs, :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py`. How ``BLOCK_M``, ``num_warps`` and
# the grid were chosen: :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.
#
# **Exercise.** Change ``MIN_ELEMENTS`` and ``BYTES_PER_THREAD`` and rerun the ladder and the benchmark:
# which row lengths move, and why? ``softmax(x, dim=0)`` copies ``x``: write a kernel that reduces down
# columns instead (:ref:`sphx_glr_tutorials_03_parallel_reduction.py` shows the pattern).
#
# References: Milakov and Gimelshein, *Online normalizer calculation for softmax* (2018); Triton's
# fused-softmax tutorial; quack's softmax and its "speed of light" write-up.

environment_card()
