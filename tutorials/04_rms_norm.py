"""
RMSNorm with a fused backward
=============================

RMSNorm, the normalization of today's language models, divides each row by its root mean square and
scales it by a learned weight. Memory traffic sets its speed: the best kernel moves each byte once, as
fast as a copy (the *speed of light*). You build a drop-in for :func:`torch.nn.functional.rms_norm`
whose backward is **one persistent kernel** reading the input and the incoming gradient once for both
gradients, measured against PyTorch, ``torch.compile``, Liger-Kernel and quack on the GPU that built this page.

**What you will learn**: to predict a normalization's speed from its bytes; to fuse
two reductions of different loop orders (*mix-order reduction*) into one kernel, the weight gradient in
fp32 registers, one partial per program, summed in a fixed order (bitwise deterministic); to stream rows
too long for registers; where the dtype matters. Prerequisites: :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import contextlib, datetime, itertools, math, os, platform, subprocess, timeit
import torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

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
#    r = \frac{1}{\sqrt{\frac{1}{N} \sum_j x_j^2 + \varepsilon}}, \qquad \hat{x} = r \, x, \qquad y = \hat{x} \odot w .
#
# :math:`r` (``rstd``) is the reciprocal of the root mean square. One PyTorch operation a line, in fp32:

def naive_rms_norm(x, weight, eps):  # over the last dim
    x32 = x.float()  # free in fp32; in bf16 read MN, write MN
    mean_sq = x32.pow(2).mean(dim=-1, keepdim=True)  # pow: read MN, write MN; mean: read MN, write M
    rstd = torch.rsqrt(mean_sq + eps)  # M values
    return (x32 * rstd).to(x.dtype) * weight  # read MN + M, write MN; read MN + N, write MN

# %%
# In fp32 that is :math:`4MN` elements read and :math:`3MN` written, where a kernel keeping each row on chip
# moves :math:`2MN` (:math:`x` in, :math:`y` out, and :math:`r`, one fp32 a row): about **3.5 times faster**.

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
    # by column 0's thread of each row; + cols (masked) keeps the tile's layout: no trip through shared memory
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape),
             mask=row_ok[:, None] & (cols == 0)[None, :])

# %%
# The backward pass, and why it is two reductions
# -----------------------------------------------
# With the incoming gradient :math:`dy` and :math:`g = dy \odot w`, the chain rule gives
#
# .. math::
#
#    dx = r \left(g - \hat{x} \frac{1}{N} \sum_j g_j \hat{x}_j\right), \qquad dw_j = \sum_{\text{rows}} dy_j \hat{x}_j .
#
# :math:`dx` needs a dot product **along each row**, :math:`dw` a sum **down each column**. One kernel per
# reduction means two kernels reading :math:`x` and :math:`dy`: :math:`5MN` elements where :math:`3MN` suffice.
# A *persistent* kernel fuses them (*mix-order reduction*): a few programs per SM walk their share of the
# rows, write :math:`dx`, and add :math:`dy \odot \hat{x}` into a ``dw_partial`` in fp32 registers, stored
# once at the end: :math:`P \times N`, :math:`P` a few hundred where :math:`M` is often hundreds of thousands.
# A second kernel sums the partials down each column in a fixed order: :math:`dw` is bitwise the same on
# every run. So few programs hide the memory's latency alone: each loads its *next* block before computing.

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
# The backward holds three row-sized tiles and two in flight, the forward one. Past that, the simplest correct
# design streams each row in chunks: a first pass reduces it, asking L2 to keep it (``evict_last``); a second
# walks it *backwards* (last chunks first, likeliest in L2), marking them done (``evict_first``), with streaming
# stores (``.cs``); each pass loads its next chunk first. The backward adds into its program's ``dw_partial`` row.

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
# One config function a kernel sets them (change them there); each was measured fastest on an H100 (dev/DESIGN.md).

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
MAX_FUSED_N = {"forward": 32768, "backward": 8192}  # longest row a program holds
MAX_FUSED_BYTES = 65536  # forward: an fp32 row of 32 K fills an SM alone, its loads and stores serialized
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
CHUNK_N = {"forward": 16384, "backward": 8192}  # columns per chunk of the two-pass kernels
# The N these kernels are for: the site's landing page recommends them there (past them: "Going further")
RANGE = {("forward", "float32"): range(1, 32768 + 1), ("forward", "bfloat16"): range(1, 16384 + 1),
         ("backward", "float32"): range(1, 8192 + 1), ("backward", "bfloat16"): range(1, 8192 + 1)}

# warps such that each thread handles about bytes_per_thread bytes of a tile of n elements (4 to 32 warps)
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))

def _fwd_config(n_rows, n_cols, element_size, chunk_n=None):
    """(kernel, meta, grid): a program per block of rows (not persistent: nothing to accumulate)."""
    if chunk_n is None and n_cols <= MAX_FUSED_N["forward"] and n_cols * element_size <= MAX_FUSED_BYTES:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
        num_warps = _warps(block_m * block_n, element_size, 64)  # one tile alive: 64 bytes a thread
        return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            triton.cdiv(n_rows, block_m)
    chunk = chunk_n or CHUNK_N["forward"]  # 32 values of a chunk a thread: 16 warps for 16 K columns
    return rms_norm_fwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 32 * element_size)), n_rows

def _bwd_config(n_rows, n_cols, element_size, chunk_n=None):
    """(kernel, meta, grid): persistent, as many programs an SM as fit in 16 warps (P stays small)."""
    if chunk_n is None and n_cols <= MAX_FUSED_N["backward"]:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)
        # x, dy, the next block's and dw_partial alive: 32 bytes a thread; 16 once a 16 KB row fills a program
        num_warps = _warps(block_m * block_n, element_size, 16 if n_cols * element_size >= 16384 else 32)
        return rms_norm_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            max(1, min(triton.cdiv(n_rows, block_m), max(1, 16 // num_warps) * NUM_SMS))
    chunk = chunk_n or CHUNK_N["backward"]  # one program per SM, 32 bytes of a chunk per thread
    return rms_norm_bwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 32)), \
        max(1, min(n_rows, NUM_SMS))

def _reduce_config(n_cols):
    """dw_reduce_kernel: narrow strips of columns, many programs, each summing all partials in order."""
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32, num_warps=4)

# %%
# The launchers and the drop-in function
# --------------------------------------
# ``rms_norm`` takes what :func:`torch.nn.functional.rms_norm` takes (``eps`` defaults to fp32's
# epsilon); non-contiguous rows are copied once; what the kernels do not handle raises an error saying so.

def rms_norm_rows_forward(x2d, w, y2d, rstd, eps, chunk_n=None):  # chunk_n forces the chunked kernel
    n_rows, n_cols = x2d.shape
    kernel, meta, grid = _fwd_config(n_rows, n_cols, x2d.element_size(), chunk_n)
    kernel[(grid,)](x2d, x2d if w is None else w, y2d, rstd, n_rows, n_cols, x2d.stride(0), y2d.stride(0),
                    eps, HAS_WEIGHT=w is not None, **meta)

def rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw, chunk_n=None, programs=None):
    """dx2d and dw (unless None); ``programs`` overrides the grid. Returns the number of dw partials."""
    n_rows, n_cols = x2d.shape
    kernel, meta, grid = _bwd_config(n_rows, n_cols, x2d.element_size(), chunk_n)
    grid, compute_dw = min(programs, n_rows) if programs else grid, w is not None and dw is not None
    dw_partial = torch.empty((grid, n_cols), dtype=torch.float32, device=x2d.device) if compute_dw else rstd
    kernel[(grid,)](x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, n_rows, n_cols, x2d.stride(0),
                    dy2d.stride(0), dx2d.stride(0), HAS_WEIGHT=w is not None, COMPUTE_DW=compute_dw, **meta)
    if compute_dw:
        reduce = _reduce_config(n_cols)
        dw_reduce_kernel[(triton.cdiv(n_cols, reduce["BLOCK_N"]),)](dw_partial, dw, grid, n_cols, **reduce)
    return grid

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

def _as_rows(t, n_cols):  # a 2-D view of t (a copy where no view can do): rows of n_cols, unit stride
    t2d = t.reshape(t.numel() // n_cols if n_cols else 0, n_cols)
    return t2d if t2d.stride(-1) == 1 or n_cols == 1 else t2d.contiguous()

class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, n_cols, eps):
        x2d, w = _as_rows(x, n_cols), None if weight is None else weight.reshape(-1).contiguous()
        y2d, rstd = x2d.new_empty(x2d.shape), x2d.new_empty(x2d.shape[0], dtype=torch.float32)
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
        dw = x2d.new_empty(x2d.shape[1], dtype=ctx.weight[1]) if w is not None and ctx.needs_input_grad[1] else None
        if x2d.numel() > 0:
            rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw)
        elif dw is not None:
            dw.zero_()  # no rows: the sum over rows is empty
        return dx2d.view(ctx.x_shape), None if dw is None else dw.view(ctx.weight[0]), None, None

def rms_norm(input, normalized_shape, weight=None, eps=None):
    """Drop-in for ``torch.nn.functional.rms_norm`` on float32, float16 and bfloat16, with autograd."""
    _check(input, "input")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    if not isinstance(shape, (tuple, list, torch.Size)) or not all(isinstance(d, int) for d in shape):
        raise TypeError(f"rms_norm: normalized_shape must be a tuple of ints, got {normalized_shape!r}")
    shape, k = tuple(shape), len(shape)
    if k == 0:
        raise ValueError("rms_norm: normalized_shape must have at least one dimension, got ()")
    if k > input.dim() or tuple(input.shape[input.dim() - k:]) != shape:
        raise ValueError(f"rms_norm: normalized_shape {list(shape)} must match the last {k} dimension(s) "
                         f"of input, whose shape is {list(input.shape)}")
    if weight is not None:
        _check(weight, "weight")
        if tuple(weight.shape) != shape:
            raise ValueError(f"rms_norm: weight has shape {list(weight.shape)}, expected normalized_shape "
                             f"{list(shape)}")
        if weight.device != input.device:
            raise ValueError(f"rms_norm: weight is on {weight.device} but input is on {input.device}")
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a float or None, got {type(eps).__name__}")
    if (n_cols := math.prod(shape)) >= 2**31:
        raise ValueError(f"rms_norm: rows of {n_cols} elements exceed the kernels' limit of 2**31 - 1")
    return RMSNormFunction.apply(input, weight, n_cols, float(eps))

# %%
# Correctness
# -----------
# Against F.rms_norm in float64, :math:`\lVert out - ref \rVert / \lVert ref \rVert` of :math:`y, dx, dw` next to PyTorch's
# error: N = 1, odd N, short and chunked rows; :math:`dx` against the size of its terms, :math:`r g` (at N = 1 they cancel).

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 100_003), (4, 200_001)] \
    if ON_GPU else [(17, 1), (33, 257), (8, 1000), (3, 40_000)]

def check_row(shape, dtype):
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(3).requires_grad_(True)
    w = (1 + 0.5 * torch.randn(shape[-1], device=DEVICE)).to(dtype).requires_grad_(True)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    dy, y64 = torch.randn(shape, device=DEVICE, dtype=dtype), F.rms_norm(x64, shape[-1:], w64, 1e-6)
    refs = (y64.detach(), *torch.autograd.grad(y64, (x64, w64), dy.double()))
    r_g = dy.double() * w64.detach() * torch.rsqrt(x64.detach().pow(2).mean(-1, keepdim=True) + 1e-6)
    scales = [refs[0].norm(), r_g.norm(), refs[2].norm()]  # ||out - ref|| over these
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn in [("ours", rms_norm), ("torch", F.rms_norm)]:
        outs = (y := fn(x, shape[-1:], w, eps=1e-6), *torch.autograd.grad(y, (x, w), dy))
        row |= {f"{name} {q}": ((out.double() - ref).norm() / scale).item()
                for q, out, ref, scale in zip(("y", "dx", "dw"), outs, refs, scales)}
    return row

torch.manual_seed(0)
errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# Each error must be a few roundings of the dtype (the interpreter truncates to bf16: twice a GPU's error) or twice PyTorch's.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
for q in ("y", "dx", "dw"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Benchmark
# ---------
# :math:`MN = 2^{26}` elements on a GPU (far past the 50 MB L2), the same tensors for every provider, timed by
# :func:`triton.testing.do_bench` (median, L2 flushed) on CUDA-graph replays: the kernels' cost, not Python's. The
# *speed of light* is a copy of :math:`x`, timed without a graph (in one, CUDA may use a slower copy engine). GB/s
# counts :math:`x, y` forward, :math:`x, dy, dx` backward, run as in training; Liger runs without its in-place
# option, quack (CuTe-DSL kernels, compute capability 9.0+) as ``quack.rmsnorm``. *dx, then dw* is the backward
# without mix-order reduction: our :math:`dx`, then :func:`torch.einsum` for :math:`dw` (its fp32 copies make the
# saving an upper bound; a lean second pass: 5/3). The backward sweeps the fused range; "-": a peer's limit.

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
SWEEP_N = {"forward": [2**k for k in range(9, 17)], "backward": [2**k for k in range(9, 14)]} if ON_GPU \
    else {"forward": [256, 1024, 4096], "backward": [256, 1024, 4096]}

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=5, rep=15, return_mode="median")

fns = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
if ON_GPU:  # peers that cannot run here are left out: on the CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # graphs are not captured on the default stream (nor autograd's)
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
    with contextlib.suppress(ImportError):  # Liger, when installed
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        fns["Liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
if ON_GPU and torch.cuda.get_device_capability()[0] >= 9:  # quack (Dao-AILab's CuTe-DSL kernels), where it runs
    try:
        import quack
        fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
    except Exception as err:  # not installed, or its CUDA DSL fails to load here: no quack column
        print(f"No quack column: quack is not installed or does not load here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
else:
    print("No quack column: quack needs an NVIDIA GPU of compute capability 9.0 or newer" + ("." if ON_GPU else "; no GPU here."))
fns["ours"], records, missing = lambda x, w: rms_norm(x, x.shape[-1:], w, EPS), [], {}
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in sorted(set(SWEEP_N["forward"]) | set(SWEEP_N["backward"])):
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        w = (1 + 0.1 * torch.randn(n_cols, device=DEVICE)).to(dtype)
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = F.rms_norm(x.float(), (n_cols,), w.float(), EPS)
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)  # as in training
        point = lambda direction, name, ms: records.append({"direction": direction, "dtype": str(dtype)[6:],
            "N": n_cols, "provider": name, "GB/s": (gbs := (2 if direction == "forward" else 3) * nbytes / ms * 1e-6),
            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
        for name, fn in fns.items():
            for direction in (d for d in ("forward", "backward") if n_cols in SWEEP_N[d]):
                try:
                    y = fn(xg, wg)
                    if direction == "forward":
                        torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=2e-2)
                    point(direction, name, bench((lambda: fn(xg, wg)) if direction == "forward" else
                                                 lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)))
                except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
                    if name == "ours":
                        raise
                    why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} N = {n_cols}")
                    point(direction, name, float("nan"))
                y = None
        if n_cols in SWEEP_N["backward"]:  # dx (our kernel, no dw), then dw (einsum in fp32)
            rstd, dx = torch.rsqrt(x.float().pow(2).mean(-1) + EPS), torch.empty_like(x)
            pass2 = lambda: torch.einsum("mn,mn,m->n", dy.float(), x.float(), rstd)
            point("backward", "dx, then dw", bench(lambda: (rms_norm_rows_backward(x, w, rstd, dy, dx, None), pass2())))
        del x, w, xg, wg, dy, out, reference
        torch.cuda.empty_cache() if ON_GPU else None
for (name, why), points in missing.items():
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
table = results.pivot(index=keys, columns="provider", values="GB/s").loc[["forward", "backward"], [*fns, "dx, then dw"]]
table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"},
                   na_rep="-")

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
styles = {"naive": ":", "torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "ours": "-"}
for ax, (direction, dtype) in zip(axes.flat, itertools.product(["forward", "backward"], ["float32", "bfloat16"])):
    part = results[(results.direction == direction) & (results.dtype == dtype)]
    for name, line in part.groupby("provider", sort=False):  # "dx, then dw" densely dotted
        ax.semilogx(line.N, line["% of speed of light"], base=2, linestyle=styles.get(name, (0, (1, 1))), marker="o",
                    markersize=3, linewidth=2.5 if name == "ours" else 1.5, label=name)
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.grid(True, alpha=0.3)
    ax.set(title=f"{direction}, {dtype}", ylabel="% of the copy's GB/s" if dtype == "float32" else None,
           xlabel="row length N (elements)")
    ax.legend(loc="lower left", fontsize=7)
fig.suptitle(f"RMSNorm, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

for (direction, dtype), part in table.groupby(level=["direction", "dtype"], sort=False):
    part = part.droplevel(["direction", "dtype"])  # indexed by N
    light, ratio, s = part["ours, % of light"], part["ours / best peer"].dropna(), part["ours"] / part["dx, then dw"]
    short = [n for n in part.index if light[n] < 95 or ratio.get(n, 1) < 0.99]  # the site's bar: both
    print(f"{direction}, {dtype}: ours runs at {light.min():.3g}-{light.max():.3g}% of the copy over N = "
          f"{part.index.min()}..{part.index.max()}; against the best peer at each N, from {ratio.min():.3g}x "
          f"(N = {ratio.idxmin()}) to {ratio.max():.3g}x (N = {ratio.idxmax()}); under 95% of the copy or 0.99x "
          f"the best peer at N = {short or 'no N'}.")
    if direction == "forward":
        chunked = [n for n in part.index if _fwd_config(1, n, 4 if dtype == "float32" else 2)[0] is rms_norm_fwd_chunked_kernel]
        print(f"    the chunked kernel ran at N = {chunked or 'no N'}")
    else:
        print(f"    one kernel for both gradients runs at {s.min():.3g}x to {s.max():.3g}x the speed of dx, then dw")
n_mid, fwd = SWEEP_N["forward"][len(SWEEP_N["forward"]) // 2], table.xs(("forward", "float32"), level=[0, 1])
print(f"Fusion: at N = {n_mid} in fp32, the fused forward is {fwd.ours[n_mid] / fwd.naive[n_mid]:.3g}x faster than "
      f"the naive one-operation-at-a-time RMSNorm (the bytes model predicted 3.5x).")
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
        .to_csv(os.path.join(os.environ["SOL_RESULTS"], "04_rms_norm.csv"))
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Where this design stops.** Whole rows in registers stop at ``MAX_FUSED_N`` (forward 32 K, 16 K in fp32 by
# ``MAX_FUSED_BYTES``; backward 8 K); past it rows are read twice and the backward moves a ``dw_partial`` row
# per row. Past ``RANGE`` the site recommends, **forward**, 16-bit rows staged in shared memory,
# :ref:`sphx_glr_tutorials_deep_dives_42_rms_norm_staged_gluon.py` (longer rows: this page's chunked kernel); **backward**,
# a row shared by programs, :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py` (chunked past 128 K).
# **Gaps, and what was tried** (this build's are the N named above): quack holds a forward's row of 64 K in the shared
# memory of a *cluster* of SMs, read once, where ours reads it twice; this page holds a 16-bit row of 32 K an SM. Tried on an H100
# (``dev/DESIGN.md``): chunks of 4-32 K columns, 8-32 warps, persistent grids, capped registers for two rows an SM;
# none faster. Triton 3.6 cannot compile a reduction across a cluster's blocks (Gluon in Triton 3.9 can). **Exercise**:
# give each thread 64 bytes in ``_bwd_config``; what spills? References: Zhang and Sennrich (2019); Liger; Inductor; quack.
#
# Where this page was made
# ------------------------

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU"
    runtime = "none: Triton's interpreter (TRITON_INTERPRET=1); the timings are NOT GPU timings"
    if ON_GPU:
        props, driver = torch.cuda.get_device_properties(DEVICE), "unknown (no nvidia-smi)"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        device = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        runtime = f"driver {driver}, CUDA {torch.version.cuda}"
    card = {"device": device, "driver / CUDA": runtime, "torch": torch.__version__,
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

environment_card()
