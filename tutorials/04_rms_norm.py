"""
RMSNorm with a fused backward
=============================

RMSNorm, the normalization of today's language models, divides each row by its root mean square and
scales it by a learned weight. Its speed is set by memory traffic: the best kernel moves each byte once,
as fast as a copy of the same bytes, the *speed of light*. You build a drop-in replacement for
:func:`torch.nn.functional.rms_norm` whose backward is **one persistent kernel** reading the input and
the incoming gradient once for both gradients, and measure it against PyTorch, ``torch.compile`` and
Liger-Kernel on the GPU that built this page.

**What you will learn** (about 15 minutes): to count the bytes of a normalization and predict its
speed; to fuse two reductions of different loop orders (*mix-order reduction*) into one kernel, the
weight gradient in fp32 registers, one partial per program, summed in a fixed order (bitwise
deterministic); to stream rows too long for registers; where the dtype matters (bf16 in memory, fp32
for every statistic and partial sum). Prerequisites: :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import datetime, math, os, platform, statistics, subprocess, timeit

import torch
import torch.nn.functional as F
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# RMSNorm and its bytes
# ---------------------
# For a row :math:`x` of length :math:`N` and a weight :math:`w` of the same length,
#
# .. math::
#
#    r = \frac{1}{\sqrt{\frac{1}{N} \sum_j x_j^2 + \varepsilon}}, \qquad
#    \hat{x} = r \, x, \qquad y = \hat{x} \odot w .
#
# :math:`r` is the reciprocal of the root mean square (``rstd`` in the code). Written with PyTorch
# operations, one per line, in fp32:

def naive_rms_norm(x, weight, eps):
    """RMSNorm over the last dim, one PyTorch operation at a time, statistics in fp32."""
    x32 = x.float()  # free in fp32; in bf16 read MN, write MN
    mean_sq = x32.pow(2).mean(dim=-1, keepdim=True)  # pow: read MN, write MN; mean: read MN, write M
    rstd = torch.rsqrt(mean_sq + eps)  # M values
    return (x32 * rstd).to(x.dtype) * weight  # read MN + M, write MN; read MN + N, write MN

# %%
# In fp32 that is about :math:`4MN` elements read and :math:`3MN` written, where a kernel that keeps
# each row on chip needs :math:`2MN` (read :math:`x`, write :math:`y`): it should be about **3.5 times
# faster**. It also writes :math:`r` (one fp32 per row, too few to count) for the backward. A program
# handles ``BLOCK_M`` whole rows; rows past the end are clamped onto the last (a duplicate, never stored).

@triton.jit
def rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                        HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per block of BLOCK_M rows."""
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # clamp: a duplicate row, never stored
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)  # padding columns add 0
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)

# %%
# The backward pass, and why it is two reductions
# -----------------------------------------------
# With the incoming gradient :math:`dy` and :math:`g = dy \odot w`, the chain rule gives
#
# .. math::
#
#    dx = r \left( g - \hat{x} \, \frac{1}{N} \sum_j g_j \hat{x}_j \right), \qquad
#    dw_j = \sum_{\text{rows}} dy_j \, \hat{x}_j .
#
# :math:`dx` needs a dot product **along each row**, :math:`dw` a sum **down each column**. A compiler
# that fuses one reduction per kernel emits two kernels of different loop orders, both reading
# :math:`x` and :math:`dy`: :math:`5MN` elements moved where :math:`3MN` suffice, at best 3/5 of the
# speed of light. The fix is a *persistent* kernel: a few programs per SM walk their share of the
# rows, write :math:`dx`, and add :math:`dy \odot \hat{x}` into a ``dw_partial`` held in fp32
# registers across all their rows, stored once at the end: a :math:`P \times N` array, :math:`P` a few
# hundred where :math:`M` is often hundreds of thousands. A small second kernel sums the partials down
# each column in a fixed order, so :math:`dw` is bitwise the same on every run (Inductor generates this
# fusion as *mix-order reduction*; we write it by hand). With so few programs, each covers the
# memory's latency alone: it issues the loads of its *next* block before it computes this one.

@triton.jit
def rms_norm_bwd_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols, x_row_stride,
                        dy_row_stride, dx_row_stride, HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A persistent grid (at most one program per block of rows): program p does blocks p, p + P, ..."""
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:  # loaded once per program, reused for every row it visits
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    # One fp32 partial per (row slot, column), summed over rows once at the end: no talk between warps.
    dw_partial = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # The first block's loads; in the loop, the next block's are issued before this one is computed.
    # Rows past the end load as zeros (they add nothing to dw) and are never stored.
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    in_range = (rows < n_rows)[:, None] & col_ok[None, :]
    rows = rows.to(tl.int64)
    x_next = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
    dy_next = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_programs):
        x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        next_rows = (block + n_programs) * BLOCK_M + tl.arange(0, BLOCK_M)
        in_range = (next_rows < n_rows)[:, None] & col_ok[None, :]  # past the end: loads nothing
        next_rows = next_rows.to(tl.int64)
        x_next = tl.load(x_ptr + next_rows[:, None] * x_row_stride + cols[None, :], mask=in_range, other=0.0)
        dy_next = tl.load(dy_ptr + next_rows[:, None] * dy_row_stride + cols[None, :], mask=in_range, other=0.0)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = x * rstd[:, None]
        g = dy * w[None, :] if HAS_WEIGHT else dy
        if COMPUTE_DW:
            dw_partial += dy * x_hat
        c = tl.sum(g * x_hat, axis=1) / n_cols  # the row reduction of dx
        dx = (g - x_hat * c[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    if COMPUTE_DW:  # every program stores its partial, zeros included: no buffer needs clearing
        tl.store(dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols + cols, tl.sum(dw_partial, axis=0), mask=col_ok)

@triton.jit
def dw_reduce_kernel(dw_partial_ptr, dw_ptr, n_partials, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """dw[j] = sum_p dw_partial[p, j]: a fixed order of additions, hence bitwise deterministic."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], tl.float32)
    for start in range(0, n_partials, BLOCK_P):
        p = (start + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(dw_partial_ptr + p[:, None] * n_cols + cols[None, :],
                       mask=(p < n_partials)[:, None] & col_ok[None, :], other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)

# %%
# Tensors stay in the input's dtype in memory (half the bytes in bf16); :math:`r`, the dot products and
# ``dw_partial`` are fp32: a bf16 sum of thousands of rows would lose most of its 8 bits of mantissa.
#
# Rows too long for registers
# ---------------------------
# The backward holds three row-sized tiles (:math:`x`, :math:`dy`, ``dw_partial``) and two in flight,
# the forward one. Past what a program holds, the simplest correct design streams each row in chunks:
# a first pass reduces it and asks the cache to keep it (``evict_last``); a second walks it *backwards*
# (its last chunks likeliest still in L2), marks them done (``evict_first``) and writes with streaming
# stores (``.cs``), each pass loading its next chunk first. The backward adds into its own row of
# ``dw_partial`` in global memory (still deterministic). Each row is read twice, mostly from L2.

@triton.jit
def rms_norm_fwd_chunked_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                                HAS_WEIGHT: tl.constexpr, CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row, y_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, y_ptr + tl.cast(row, tl.int64) * y_row_stride
        sum_sq = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            offs = (chunk + 1) * CHUNK_N + cols  # the next chunk (past the end: loads nothing)
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            sum_sq += x * x
        rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / n_cols + eps)
        tl.store(rstd_ptr + row, rstd)
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols  # backwards: the last chunks are in L2
            offs = here - CHUNK_N
            x_next = tl.load(x_row + offs, mask=(offs >= 0) & (offs < n_cols), other=0.0, eviction_policy="evict_first")
            y = x * rstd
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            tl.store(y_row + here, y.to(y_ptr.dtype.element_ty), mask=here < n_cols, cache_modifier=".cs")

@triton.jit
def rms_norm_bwd_chunked_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols, x_row_stride,
                                dy_row_stride, dx_row_stride, HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr,
                                CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    dw_row = dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols  # this program's partial
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dy_row, dx_row = x_ptr + row64 * x_row_stride, dy_ptr + row64 * dy_row_stride, dx_ptr + row64 * dx_row_stride
        rstd = tl.load(rstd_ptr + row)
        # Pass 1: the dot product of g = dy * w and x, two chunks in flight.
        acc = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_next = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
            here = chunk * CHUNK_N + cols
            offs = here + CHUNK_N
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            if HAS_WEIGHT:
                dy = dy * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            acc += dy * x
        c = tl.sum(acc, axis=0) * rstd / n_cols  # (1/N) sum g * x_hat
        # Pass 2, backwards: dx, and dw_partial += dy * x_hat.
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols
            offs = here - CHUNK_N
            in_row = (offs >= 0) & (offs < n_cols)
            x_next = tl.load(x_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            ok, x_hat, g = here < n_cols, x * rstd, dy
            if HAS_WEIGHT:
                g = dy * tl.load(w_ptr + here, mask=ok, other=0.0).to(tl.float32)
            if COMPUTE_DW:  # the program's first row starts its partial: no buffer needs clearing
                dw = tl.load(dw_row + here, mask=ok & (here * 0 + row > pid), other=0.0)
                tl.store(dw_row + here, dw + dy * x_hat, mask=ok)
            tl.store(dx_row + here, ((g - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")

# %%
# Launch parameters
# -----------------
# Each kernel's block sizes, warps and grid come from its config function: change them there. Each
# number was measured fastest on an H100 (the design record, dev/DESIGN.md in the repository).

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
MAX_FUSED_N = {"forward": 32768, "backward": 8192}  # longest row a program holds (backward: 3 tiles + 2 in flight)
MAX_FUSED_BYTES = 65536  # forward: an fp32 row of 32 K fills an SM alone, its loads and stores serialized
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
CHUNK_N = 8192  # columns per chunk of the two-pass kernels

def _warps(n_elements, element_size, bytes_per_thread):
    """Warps such that each thread handles about bytes_per_thread bytes of a tile (4 to 32 warps)."""
    return min(32, max(4, n_elements * element_size // (32 * bytes_per_thread)))

def _fwd_config(n_rows, n_cols, element_size, chunk_n=None):
    """(kernel, meta, grid) of the forward, one program per block of rows (nothing to accumulate across
    rows: no need to be persistent). ``chunk_n`` forces the chunked kernel."""
    if chunk_n is None and n_cols <= MAX_FUSED_N["forward"] and n_cols * element_size <= MAX_FUSED_BYTES:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
        num_warps = _warps(block_m * block_n, element_size, 64)  # one tile alive: 64 bytes a thread
        return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            triton.cdiv(n_rows, block_m)
    chunk = chunk_n or CHUNK_N
    return rms_norm_fwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 16)), n_rows

def _bwd_config(n_rows, n_cols, element_size, chunk_n=None):
    """(kernel, meta, grid) of the backward: persistent, as many programs per SM as fit in 16 warps (at
    least one), so that P, the number of dw partials, stays small. ``chunk_n`` forces the chunked kernel."""
    if chunk_n is None and n_cols <= MAX_FUSED_N["backward"]:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)
        # x, dy, the next block's and dw_partial alive: 32 bytes a thread; 16 (twice the warps to spread
        # loads and row sums) for a row of 16 KB or more, which fills a program alone
        num_warps = _warps(block_m * block_n, element_size, 16 if n_cols * element_size >= 16384 else 32)
        return rms_norm_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            max(1, min(triton.cdiv(n_rows, block_m), max(1, 16 // num_warps) * NUM_SMS))
    chunk = chunk_n or CHUNK_N  # one program per SM, 32 bytes of a chunk per thread
    return rms_norm_bwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 32)), \
        max(1, min(n_rows, NUM_SMS))

def _reduce_config(n_cols):
    """dw_reduce_kernel: narrow strips of columns, many programs, each summing all partials in order."""
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32, num_warps=4)

# %%
# The launchers and the drop-in function
# --------------------------------------

def rms_norm_rows_forward(x2d, w, y2d, rstd, eps, chunk_n=None):  # the two kernels' arguments
    n_rows, n_cols = x2d.shape
    kernel, meta, grid = _fwd_config(n_rows, n_cols, x2d.element_size(), chunk_n)
    kernel[(grid,)](x2d, x2d if w is None else w, y2d, rstd, n_rows, n_cols, x2d.stride(0), y2d.stride(0),
                    eps, HAS_WEIGHT=w is not None, **meta)

def rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw, chunk_n=None, programs=None):
    """dx2d and dw (unless None); ``programs`` overrides the grid. Returns the number of dw partials."""
    n_rows, n_cols = x2d.shape
    kernel, meta, grid = _bwd_config(n_rows, n_cols, x2d.element_size(), chunk_n)
    grid, compute_dw = min(programs, n_rows) if programs else grid, w is not None and dw is not None
    # every program writes its whole partial row: no buffer needs clearing
    dw_partial = torch.empty((grid, n_cols), dtype=torch.float32, device=x2d.device) if compute_dw else rstd
    kernel[(grid,)](x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, n_rows, n_cols, x2d.stride(0),
                    dy2d.stride(0), dx2d.stride(0), HAS_WEIGHT=w is not None, COMPUTE_DW=compute_dw, **meta)
    if compute_dw:
        reduce = _reduce_config(n_cols)
        dw_reduce_kernel[(triton.cdiv(n_cols, reduce["BLOCK_N"]),)](dw_partial, dw, grid, n_cols, **reduce)
    return grid

# %%
# ``rms_norm`` takes what :func:`torch.nn.functional.rms_norm` takes: trailing dimensions flattened into
# a row, an optional weight, ``eps`` defaulting to fp32's epsilon as in PyTorch; non-contiguous rows are
# copied once; anything the kernels do not handle raises an error that says so.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def _check(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"rms_norm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"rms_norm: {name} has dtype {t.dtype}; these kernels support float32, float16 and "
                        "bfloat16 (use torch.nn.functional.rms_norm for other dtypes)")
    if t.device.type != DEVICE.type:
        raise ValueError(f"rms_norm: {name} is on {t.device}, but the kernels run on {DEVICE.type} here "
                         f"({'a CUDA GPU' if ON_GPU else 'no CUDA GPU: Triton interprets them on the CPU'}); "
                         f"move it with .to('{DEVICE.type}')")

def _as_rows(t, n_cols):
    """A 2-D view (or, when no view can do, a copy) of ``t`` with rows of n_cols and unit stride."""
    t2d = t.reshape(t.numel() // n_cols if n_cols else 0, n_cols)
    return t2d if t2d.stride(-1) == 1 or n_cols == 1 else t2d.contiguous()

class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, n_cols, eps):
        x2d, w = _as_rows(x, n_cols), None if weight is None else weight.reshape(-1).contiguous()
        y2d = torch.empty(x2d.shape, dtype=x.dtype, device=x.device)
        rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x.device)
        if x2d.numel() > 0:
            rms_norm_rows_forward(x2d, w, y2d, rstd, eps)
        ctx.save_for_backward(x2d, w, rstd)
        ctx.x_shape, ctx.weight = x.shape, None if weight is None else (weight.shape, weight.dtype)
        return y2d.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, w, rstd = ctx.saved_tensors
        _check(dy, "the gradient")
        dy2d, dx2d = _as_rows(dy.to(x2d.dtype), x2d.shape[1]), torch.empty_like(x2d)
        dw = torch.empty(x2d.shape[1], dtype=ctx.weight[1], device=x2d.device) \
            if w is not None and ctx.needs_input_grad[1] else None
        if x2d.numel() > 0:
            rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw)
        elif dw is not None:
            dw.zero_()  # no rows: the sum over rows is empty
        return dx2d.view(ctx.x_shape), None if dw is None else dw.view(ctx.weight[0]), None, None

def rms_norm(x, normalized_shape, weight=None, eps=None):
    """Drop-in for ``torch.nn.functional.rms_norm`` on float32, float16 and bfloat16, with autograd."""
    _check(x, "x")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    if not isinstance(shape, (tuple, list, torch.Size)) or not all(isinstance(d, int) for d in shape):
        raise TypeError(f"rms_norm: normalized_shape must be a tuple of ints, got {normalized_shape!r}")
    shape, k = tuple(shape), len(shape)
    if k == 0:
        raise ValueError("rms_norm: normalized_shape must have at least one dimension, got ()")
    if k > x.dim() or tuple(x.shape[x.dim() - k:]) != shape:
        raise ValueError(f"rms_norm: normalized_shape {list(shape)} must match the last {k} dimension(s) "
                         f"of x, whose shape is {list(x.shape)}")
    if weight is not None:
        _check(weight, "weight")
        if tuple(weight.shape) != shape:
            raise ValueError(f"rms_norm: weight has shape {list(weight.shape)}, expected normalized_shape {list(shape)}")
        if weight.device != x.device:
            raise ValueError(f"rms_norm: weight is on {weight.device} but x is on {x.device}")
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a float or None, got {type(eps).__name__}")
    if math.prod(shape) >= 2**31:
        raise ValueError(f"rms_norm: rows of {math.prod(shape)} elements exceed the kernels' limit of 2**31 - 1")
    return RMSNormFunction.apply(x, weight, math.prod(shape), float(eps))

# %%
# Correctness
# -----------
# Against F.rms_norm in float64, :math:`\lVert out - ref \rVert / \lVert ref \rVert` of :math:`y`,
# :math:`dx`, :math:`dw` next to PyTorch's own error: N = 1, odd N, short rows, chunked rows.

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 100_003), (4, 200_001)] \
    if ON_GPU else [(17, 1), (33, 257), (8, 1000), (3, 40_000)]

def check_row(shape, dtype):
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(3).requires_grad_(True)
    w = (1 + 0.5 * torch.randn(shape[-1], device=DEVICE)).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    y64 = F.rms_norm(x64 := x.detach().double().requires_grad_(True), shape[-1:], w64 := w.detach().double().requires_grad_(True), 1e-6)
    refs = (y64.detach(), *torch.autograd.grad(y64, (x64, w64), dy.double()))
    # ||out - ref|| / ||ref||; where ref is all zeros (dx when N = 1), the absolute error
    err = lambda out, ref: ((out.double() - ref).norm() / ref.norm().clamp(min=1.0 if ref.norm() == 0 else 0.0)).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn in [("ours", rms_norm), ("torch", F.rms_norm)]:
        y = fn(x, shape[-1:], w, eps=1e-6)
        outs = (y, *torch.autograd.grad(y, (x, w), dy))
        row |= {f"{name} {q}": err(out, ref) for q, out, ref in zip(("y", "dx", "dw"), outs, refs)}
    return row

torch.manual_seed(0)
errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# The page builds only if each error is a few roundings of the output dtype (the interpreter truncates
# to bf16: twice a GPU's error), or at most twice PyTorch's: for N = 1, x_hat^2 = x^2 / (x^2 + eps) is 1
# up to eps, and dx a difference of two nearly equal numbers.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
for q in ("y", "dx", "dw"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Benchmark
# ---------
# :math:`MN = 2^{26}` elements on a GPU (far past the 50 MB L2), every provider on the same tensors,
# timed by :func:`triton.testing.do_bench` (median, L2 flushed) on CUDA-graph replays of the call: the
# kernels' cost, not Python's. The *speed of light* is a copy of :math:`x`, timed without a graph (in
# one, CUDA may use a slower copy engine). GB/s counts :math:`x, y` forward, :math:`x, dy, dx` backward,
# both run as in training (``autograd.grad`` of :math:`x` and :math:`w`). Liger runs without its
# in-place option. *dx, then dw* is the backward without mix-order reduction: our kernel for
# :math:`dx` alone, then :func:`torch.einsum` for :math:`dw` (einsum makes fp32 copies: an upper bound
# on the saving, which a lean second pass would bring to 5/3). The backward sweeps the fused range.

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
SWEEP_N = {"forward": [2**k for k in range(9, 17)], "backward": [2**k for k in range(9, 14)]} if ON_GPU \
    else {"forward": [256, 1024, 4096], "backward": [256, 1024, 4096]}
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
except ImportError:  # not installed: no Liger column
    LigerRMSNormFunction = None
if ON_GPU:  # a graph cannot be captured on the default stream; autograd runs a backward on its forward's
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    fn()  # compile and warm up outside the timing
    if not ON_GPU:
        return 1e3 * statistics.median(timeit.repeat(fn, number=1, repeat=3))
    torch.cuda.synchronize()
    timed = fn
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream()):
            fn()
        timed = captured.replay
    return triton.testing.do_bench(timed, warmup=5, rep=20, return_mode="median")

def providers():
    """name -> f(x, w), RMSNorm over the last dim; peers that cannot run here are left out."""
    found = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
    if ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
        if LigerRMSNormFunction is not None:
            found["Liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    return found | {"ours": lambda x, w: rms_norm(x, x.shape[-1:], w, EPS)}

def two_passes(x, w, dy):
    """The backward as dx (our kernel, no dw), then dw (einsum in fp32): a call for bench()."""
    x, w, rstd, dx = x.detach(), w.detach(), torch.rsqrt(x.detach().float().pow(2).mean(-1) + EPS), torch.empty_like(x)
    return lambda: (rms_norm_rows_backward(x, w, rstd, dy, dx, None), torch.einsum("mn,mn,m->n", dy.float(), x.float(), rstd))

records, fns = [], providers()
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in sorted(set(SWEEP_N["forward"]) | set(SWEEP_N["backward"])):
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        w = (1 + 0.1 * torch.randn(n_cols, device=DEVICE)).to(dtype)
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = F.rms_norm(x.float(), (n_cols,), w.float(), EPS)
        xg, wg = x.requires_grad_(True), w.requires_grad_(True)  # both directions as in training
        point = lambda direction, name, ms, moved: records.append({
            "direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name, "GB/s": moved / ms * 1e-6,
            "speed of light GB/s": light, "% of speed of light": 100 * moved / ms * 1e-6 / light})
        for name, fn in fns.items():
            for direction in (d for d in ("forward", "backward") if n_cols in SWEEP_N[d]):
                try:
                    y = fn(xg, wg)
                    if direction == "forward":
                        torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=2e-2)
                        point(direction, name, bench(lambda: fn(xg, wg)), 2 * nbytes)
                    else:
                        point(direction, name, bench(lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)), 3 * nbytes)
                except (RuntimeError, ValueError) as err:  # a peer's limit: the point is missing
                    if name == "ours":
                        raise
                    print(f"{name}, {direction}, {dtype}, N = {n_cols}: not measured ({str(err)[:120]})")
                    point(direction, name, float("nan"), 0)
                y = None
        if n_cols in SWEEP_N["backward"]:
            point("backward", "dx, then dw", bench(two_passes(x, w, dy)), 3 * nbytes)
        del x, w, xg, wg, dy, out, reference
        torch.cuda.empty_cache() if ON_GPU else None
results = pd.DataFrame(records)

def sweep_table(direction):
    """GB/s per provider (columns), dtype and row length (rows), with ours as % of the speed of light."""
    part = results[results.direction == direction]
    table = part.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in [*fns, "dx, then dw"] if p in table.columns]]
    table.insert(0, "speed of light", part.groupby(["dtype", "N"])["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table[[p for p in ("torch", "torch.compile", "Liger") if p in table]].max(axis=1)
    return table

# %%
# Forward and backward, GB/s (higher is better):

table = pd.concat({direction: sweep_table(direction) for direction in ("forward", "backward")}, names=["direction"])
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"},
                   na_rep="-")

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white")
styles = {"naive": ":", "torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "ours": "-", "dx, then dw": (0, (1, 1))}
for (i, direction), (j, dtype) in [(d, t) for d in enumerate(["forward", "backward"]) for t in enumerate(["float32", "bfloat16"])]:
    ax, part = axes[i][j], results[(results.direction == direction) & (results.dtype == dtype)]
    for name, line in part.groupby("provider", sort=False):
        ax.plot(line.N, line["% of speed of light"], linestyle=styles[name], marker="o", markersize=3,
                linewidth=2.5 if name == "ours" else 1.5, label=name)
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    ax.set(title=f"{direction}, {dtype}", ylabel="% of the copy's GB/s" if j == 0 else None, xlabel="row length N (elements)")
    ax.legend(loc="lower left", fontsize=7)
fig.suptitle(f"RMSNorm, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

for (direction, dtype), part in results.groupby(["direction", "dtype"], sort=False):
    ours = part[part.provider == "ours"].set_index("N")
    ratio = (ours["GB/s"] / part[part.provider.isin(["torch", "torch.compile", "Liger"])].groupby("N")["GB/s"].max()).dropna()
    print(f"{direction}, {dtype}: ours runs at {ours['% of speed of light'].min():.3g}-{ours['% of speed of light'].max():.3g}% "
          f"of the copy over N = {ours.index.min()}..{ours.index.max()}; against the best peer at each N, from "
          f"{ratio.min():.3g}x (N = {ratio.idxmin()}) to {ratio.max():.3g}x (N = {ratio.idxmax()}).")
    if direction == "forward":
        print(f"    the chunked kernel ran at N = {[n for n in ours.index if _fwd_config(1, n, 4 if dtype == 'float32' else 2)[0] is rms_norm_fwd_chunked_kernel] or 'no N'}")
    else:
        saving = ours["GB/s"] / part[part.provider == "dx, then dw"].set_index("N")["GB/s"]
        print(f"    one kernel for both gradients runs at {saving.min():.3g}x to {saving.max():.3g}x the speed of dx, then dw")
fwd = results[(results.direction == "forward") & (results.dtype == "float32")].set_index(["N", "provider"])["GB/s"]
n_mid = SWEEP_N["forward"][len(SWEEP_N["forward"]) // 2]
print(f"Fusion: at N = {n_mid} in fp32, the fused forward is {fwd[(n_mid, 'ours')] / fwd[(n_mid, 'naive')]:.3g}x "
      f"faster than the naive one-operation-at-a-time RMSNorm (the bytes model predicted 3.5x).")
if ON_GPU:
    mix = getattr(getattr(torch._inductor.config, "triton", None), "mix_order_reduction", None)
    print(f"Inductor's mix-order reduction setting in this torch ({torch.__version__}): {'not present' if mix is None else mix}.")
else:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Where this design stops.** Whole rows in registers stop at ``MAX_FUSED_N`` (forward 32 K, 16 K in
# fp32 by ``MAX_FUSED_BYTES``; backward 8 K); past them each row is read twice, and the backward moves
# its ``dw_partial`` row for every row. The fastest kernel on this site, every dtype:
#
# * **forward**: fused (this page) up to ``MAX_FUSED_N``, chunked (this page) past it;
# * **backward**: fused (this page) up to 8 K; 8 K to 128 K, one row shared by several programs that
#   exchange row sums without waiting, :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py`;
#   chunked (this page) past 128 K.
#
# Next: the :math:`8PN` bytes of partials weigh on few, wide rows (split the columns too); short bf16
# rows through autograd wait for the CPU (CUDA graphs remove it); fusing the residual add before
# RMSNorm saves a pass. **Exercise**: give each thread 64 bytes in ``_bwd_config``; what spills?
#
# References: Zhang and Sennrich, *Root Mean Square Layer Normalization* (2019); the Triton layer-norm
# tutorial (its partial weight gradients are fp16 behind a lock: not deterministic); Liger-Kernel's
# RMSNorm; PyTorch Inductor's mix-order reduction; quack's RMSNorm.
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
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT}
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()

environment_card()
