"""
RMSNorm with a fused backward
=============================

RMSNorm divides each row by its root mean square and scales it by a weight. The best kernel moves each byte
once, as fast as a copy (the *speed of light*). You build a drop-in for :func:`torch.nn.functional.rms_norm`,
measured against PyTorch, ``torch.compile``, Liger-Kernel and quack on the GPU that built this page.

**What you will learn**, as a ladder of backward kernels: a row a program; several rows a program; a
persistent grid that sums the weight gradient in registers, then in a fixed order (deterministic).
Triton basics: :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import datetime, importlib.util, itertools, math, os, shutil, subprocess, timeit, typing
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
# For a row :math:`x` of length :math:`N` and a weight :math:`w`,
#
# .. math::
#
#    r = \frac{1}{\sqrt{\frac{1}{N} \sum_j x_j^2 + \varepsilon}}, \qquad \hat{x} = r \, x, \qquad y = \hat{x} \odot w .
#
# One PyTorch operation a line, in fp32:

def naive_rms_norm(x, weight, eps):
    x32 = x.float()
    mean_sq = x32.pow(2).mean(dim=-1, keepdim=True)  # read MN, write MN; read MN, write M
    rstd = torch.rsqrt(mean_sq + eps)
    return (x32 * rstd).to(x.dtype) * weight  # read MN, write MN; read MN, write MN

# %%
# That reads :math:`4MN` elements and writes :math:`3MN`; a kernel keeping rows on chip moves :math:`2MN`,
# **3.5 times faster**. The backward, with :math:`g = dy \odot w`,
#
# .. math::
#
#    dx = r \left(g - \hat{x} \frac{1}{N} \sum_j g_j \hat{x}_j\right), \qquad dw_j = \sum_{\text{rows}} dy_j \hat{x}_j ,
#
# sums along rows and down columns; at best it reads x, dy and writes dx. Sums are fp32 (bf16 keeps 8 bits).
#
# Step 0: the plain backward
# --------------------------
# A program a row loads its row (a power of two, masked) into registers with the default 4 warps, writes dx and,
# as a row of fp32 ``dw_partial``, its share of dw; ``dw_reduce_kernel`` sums the M partials down each column in a
# fixed order. To remove: rows of 256 bf16 (512 bytes a program), partials (8 bytes an element beside x, dy, dx's 6).

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

def plain_backward(x, w, rstd, dy, dx, dw):  # contiguous rows
    dw_partial, reduce = torch.empty(x.shape, device=x.device), _reduce_config(x.shape[1])
    plain_rms_norm_bwd_kernel[(len(x),)](x, w, rstd, dy, dx, dw_partial, x.shape[1], BLOCK_N=triton.next_power_of_2(x.shape[1]))
    dw_reduce_kernel[(triton.cdiv(x.shape[1], reduce["BLOCK_N"]),)](dw_partial, dw, len(x), x.shape[1], **reduce)

# %%
# Step 1: several rows a program
# ------------------------------
# A program takes ``BLOCK_M`` rows of ``BLOCK_N`` columns, at least ``MIN_ELEMENTS`` (rows of 256: 16 a program),
# warps sized to the tile. The ladder times this in the backward (step 2's kernel, a program a block); the
# drop-in's forward below is built so. Rows past the end are clamped to the last (``tl.minimum``): no row mask on
# loads, the duplicate never stored. ``tl.sum`` leaves ``rstd`` in every thread of its row; a 1-D store would go
# through shared memory, so it is stored in the tile's shape (``tl.broadcast_to``), masked to column 0.

@triton.jit
def rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                        HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per block of BLOCK_M rows."""
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    # in n_rows' type: Triton passes 2**31 rows or more as int64, and program_id * BLOCK_M may pass 2**31 there
    rows = (tl.program_id(0) + 0 * n_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # clamp: a duplicate row, never stored
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
    sum_sq = tl.sum(x * x, axis=1)  # padding columns add 0
    rstd = tl.rsqrt(sum_sq / n_cols + eps)
    # Values past about 1e19 overflow sum_sq in fp32 (torch's rms_norm returns 0 there). Such a row, rare, sums
    # (x / 2**80)**2 instead: exact (a power of two), finite for 2**31 values up to 2**48, eps negligible beside it.
    if tl.sum((sum_sq == float("inf")).to(tl.int32), axis=0) > 0:
        x_small = x * 2.0**-80
        rstd = tl.where(sum_sq < float("inf"), rstd, 2.0**-80 * tl.rsqrt(tl.sum(x_small * x_small, axis=1) / n_cols))
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    # by column 0's thread of each row; + cols (masked) keeps the tile's layout: no trip through shared memory
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape),
             mask=row_ok[:, None] & (cols == 0)[None, :])

# %%
# Step 2: a persistent backward
# -----------------------------
# P programs, a few an SM, walk blocks ``pid``, ``pid + P``, ... (``tl.range``, as in 01), adding ``dy * x_hat``
# into a ``dw_partial`` tile in fp32 registers, stored once: P partials, not one a block. So few programs must
# keep the memory busy alone: each loads its next block before computing this one. The drop-in's backward:

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

# %%
# Rows too long for registers
# ---------------------------
# Past ``MAX_FUSED_N`` rows stream in chunks, read twice, as in 01; past ``RANGE`` the deep dives are faster.

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
        sum_sq = tl.sum(sum_sq, axis=0)
        rstd = tl.rsqrt(sum_sq / n_cols + eps)
        if sum_sq == float("inf"):  # values past 1e19, as in the fused kernel: the row again, scaled by 2**-80
            sum_small = tl.zeros([CHUNK_N], tl.float32)
            for k in range(0, n_chunks):
                offs = k * CHUNK_N + cols
                x_small = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32) * 2.0**-80
                sum_small += x_small * x_small
            rstd = 2.0**-80 * tl.rsqrt(tl.sum(sum_small, axis=0) / n_cols)
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
            acc += dy * (x * rstd)  # x_hat first: dy * x may overflow where x is huge
        c = tl.sum(acc, axis=0) / n_cols  # (1/N) sum g * x_hat
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
# Each value was timed fastest on an H100.

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # grids count SMs (4 on the CPU)
MAX_FUSED_N = {"forward": 32768, "backward": 8192}  # whole rows: the backward holds five row tiles, the forward one
MAX_FUSED_BYTES = 65536  # an fp32 row of 32 K would fill an SM alone
MIN_ELEMENTS = 4096  # elements a program moves a step: enough bytes in flight to hide latency
CHUNK_N = {"forward": 16384, "backward": 8192}  # columns a chunk; the backward holds x, dy and their next chunks
RANGE = {("forward", "float32"): range(1, 32768 + 1), ("forward", "bfloat16"): range(1, 16384 + 1),  # the N these
         ("backward", "float32"): range(1, 8192 + 1), ("backward", "bfloat16"): range(1, 8192 + 1)}  # kernels are for
# warps for about bytes_per_thread bytes of an n-element tile a thread (4 to 32)
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))

def _fwd_config(n_rows, n_cols, element_size, chunk_n=None):
    """(kernel, meta, grid): a program per block of rows (not persistent: nothing to accumulate)."""
    if chunk_n is None and n_cols <= MAX_FUSED_N["forward"] and n_cols * element_size <= MAX_FUSED_BYTES:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
        num_warps = _warps(block_m * block_n, element_size, 64)  # one tile alive: 64 bytes (four loads) a thread
        return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            triton.cdiv(n_rows, block_m)
    chunk = chunk_n or CHUNK_N["forward"]  # 32 values of a chunk a thread: 16 warps for 16 K columns
    return rms_norm_fwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 32 * element_size)), n_rows

# Backward: 32 bytes a thread of each of five live tiles (x, dy, the next block's, dw_partial); 16 once a 16 KB
# row is the tile (more loads in flight); programs an SM: as many as fit in 16 warps, to hide latency with P small.
def _bwd_config(n_rows, n_cols, element_size, chunk_n=None):
    if chunk_n is None and n_cols <= MAX_FUSED_N["backward"]:
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MIN_ELEMENTS // block_n)
        num_warps = _warps(block_m * block_n, element_size, 16 if n_cols * element_size >= 16384 else 32)
        return rms_norm_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
            max(1, min(triton.cdiv(n_rows, block_m), max(1, 16 // num_warps) * NUM_SMS))
    chunk = chunk_n or CHUNK_N["backward"]  # one program per SM, 32 bytes of a chunk per thread
    return rms_norm_bwd_chunked_kernel, dict(CHUNK_N=chunk, num_warps=_warps(chunk, element_size, 32)), \
        max(1, min(n_rows, NUM_SMS))

# dw's sum: 64 partials a step, in order; narrow strips (16 columns, 32 past 4096) of 4 warps: many programs.
def _reduce_config(n_cols):
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32, num_warps=4)

# %%
# The drop-in function
# --------------------
# ``rms_norm`` takes what :func:`torch.nn.functional.rms_norm` takes; errors name what the kernels lack. They run as
# two PyTorch operators (``torch.library.custom_op``): a model compiled with ``torch.compile(fullgraph=True)`` keeps
# them in its graph, unbroken; ``register_fake`` tells the compiler their outputs' shapes without running a kernel.

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
def _as_rows(t, n_cols):  # a view where one can do
    t2d = t.reshape(t.numel() // n_cols if n_cols else 0, n_cols)
    return t2d if t2d.stride(-1) == 1 or n_cols == 1 else t2d.contiguous()
@torch.library.custom_op("sol::rms_norm_fwd_04", mutates_args=())
def rms_norm_fwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and each row's rstd (fp32, for the backward) of rows x of any strides, in new tensors."""
    y, rstd = rms_norm_fwd_fake(x, w, eps)
    if x.numel():
        rms_norm_rows_forward(_as_rows(x, x.shape[1]), w if w is None else w.contiguous(), y, rstd, eps)
    return y, rstd
@rms_norm_fwd_op.register_fake
def rms_norm_fwd_fake(x, w, eps):  # shapes and dtypes only
    return x.new_empty(x.shape), x.new_empty(x.shape[0], dtype=torch.float32)

@torch.library.custom_op("sol::rms_norm_bwd_04", mutates_args=())
def rms_norm_bwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], rstd: torch.Tensor, dy: torch.Tensor,
                    compute_dw: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """dx, and dw (empty unless compute_dw and a weight), in new tensors; rows of any strides."""
    (dx, dw), n_cols = rms_norm_bwd_fake(x, w, rstd, dy, compute_dw), x.shape[1]
    if x.numel():
        rms_norm_rows_backward(_as_rows(x, n_cols), w if w is None else w.contiguous(), rstd.contiguous(),
                               _as_rows(dy, n_cols), dx, dw if dw.numel() else None)
    return dx, dw if x.numel() else dw.zero_()  # no rows: dw sums over none
@rms_norm_bwd_op.register_fake
def rms_norm_bwd_fake(x, w, rstd, dy, compute_dw):
    return x.new_empty(x.shape), w.new_empty(w.shape) if compute_dw and w is not None else x.new_empty(0)

def _setup(ctx, inputs, output):  # keeps x, w and rstd for the backward
    ctx.save_for_backward(inputs[0], inputs[1], output[1])
    ctx.mark_non_differentiable(output[1])
def _backward(ctx, dy, _):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
        raise RuntimeError("rms_norm: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's rms_norm there")
    dx, dw = rms_norm_bwd_op(*ctx.saved_tensors, dy, ctx.needs_input_grad[1])
    return dx, dw if ctx.needs_input_grad[1] else None, None
rms_norm_fwd_op.register_autograd(_backward, setup_context=_setup)

def rms_norm(input, normalized_shape, weight=None, eps=None):
    """Drop-in for F.rms_norm, with autograd."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    for name, t in {"input": input, "weight": input if weight is None else weight}.items():
        if not isinstance(t, torch.Tensor) or t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"rms_norm: {name} is {getattr(t, 'dtype', type(t).__name__)}; the kernels take "
                            "torch.Tensors of dtype float32, float16 and bfloat16 (else use F.rms_norm)")
        if t.device.type != DEVICE.type:
            raise ValueError(f"rms_norm: {name} is on {t.device}, the kernels on {'cuda' if ON_GPU else 'the CPU'}")
    if not all(isinstance(d, int) for d in shape) or not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError("rms_norm: normalized_shape must be a tuple of ints, eps a float or None")
    if not 0 < len(shape) <= input.dim() or input.shape[-len(shape):] != shape or math.prod(shape) >= 2**31:
        raise ValueError(f"rms_norm: normalized_shape {shape} must be at least one of the last dims of {input.shape}, "
                         "under 2**31 elements")
    if weight is not None and (weight.shape != shape or weight.device != input.device):
        raise ValueError(f"rms_norm: weight has shape {weight.shape} on {weight.device}, not {shape} on {input.device}")
    w = None if weight is None else weight.reshape(-1).contiguous()
    return rms_norm_fwd_op(_as_rows(input, math.prod(shape)), w, float(eps))[0].view(input.shape)

# %%
# Correctness
# -----------
# Relative errors against float64 (dx's against its terms' size, ``r * g``: they cancel at N = 1), within a few
# roundings of the dtype (the interpreter truncates to bf16: twice a GPU's error).

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 100_003), (4, 200_001)] \
    if ON_GPU else [(17, 1), (33, 257), (8, 1000), (3, 40_000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
def check_row(shape, dtype):
    x, w, dy = (torch.randn(s, device=DEVICE, dtype=dtype) for s in (shape, shape[-1:], shape))
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    refs = [y64 := F.rms_norm(x64, shape[-1:], w64, 1e-6), *torch.autograd.grad(y64, (x64, w64), dy.double())]
    scales = refs[0].norm(), (dy * w * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)).norm(), refs[2].norm()
    outs = [y := rms_norm(x.requires_grad_(), shape[-1:], w.requires_grad_(), 1e-6), *torch.autograd.grad(y, (x, w), dy)]
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    return row | {q: ((out - ref).norm() / scale).item() for q, out, ref, scale in zip(("y", "dx", "dw"), outs, refs, scales)}

torch.manual_seed(0)
errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
assert (errors[["y", "dx", "dw"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format("{:.1e}", subset=["y", "dx", "dw"]).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# :math:`MN = 2^{26}` elements on a GPU; :func:`triton.testing.do_bench` (median, L2 flushed) of CUDA-graph replays;
# the *speed of light*: a copy of x, without a graph. GB/s counts x, y forward, x, dy, dx backward.

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
SWEEP_N = {"forward": [2**k for k in range(9, 17)], "backward": [2**k for k in range(9, 14)]} if ON_GPU \
    else dict.fromkeys(["forward", "backward"], [256, 1024, 4096])
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
if ON_GPU:  # graph capture needs a side stream
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):  # ms; on the CPU, one call's wall clock
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # a warm-up, outside the capture (torch.cuda.graph synchronizes before it captures)
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=5, rep=15, return_mode="median")

def tensors(n_cols, dtype):  # and a copy's GB/s
    x = torch.randn(TOTAL_ELEMENTS // n_cols, n_cols, device=DEVICE, dtype=dtype)
    w, dy, out = torch.rand(n_cols, device=DEVICE, dtype=dtype) + 0.5, torch.randn_like(x), torch.empty_like(x)
    return x, w, dy, 2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6
gbps = lambda forward, x, ms: (2 if forward else 3) * x.numel() * x.element_size() / ms * 1e-6  # x, y or x, dy, dx
def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
fns = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
if peer_module("torch.compile", "torch"):  # on the CPU, Inductor would time a C++ compiler
    torch._dynamo.config.recompile_limit = 1024  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
if liger := peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"):
    fns["Liger"] = lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)  # not in place
if quack := peer_module("quack", "quack", min_major=9):
    fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
fns["ours"] = lambda x, w: rms_norm(x, x.shape[-1:], w, EPS)

def write_results(table):  # for the landing page
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "04_rms_norm.csv"))
def environment_card():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.split("\n")[0] if ON_GPU and shutil.which("nvidia-smi") else "?"
    card = {"device": WHERE, "driver / CUDA": f"driver {smi}, CUDA {torch.version.cuda}" if ON_GPU else "none: Triton's interpreter",
            "torch": torch.__version__, "Triton": triton.__version__, "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = pd.Series(card, name="").to_frame().to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{html}</details>"})()

# %%
# The ladder, measured
# --------------------
# The backward with dw on bf16 rows of 256 (packing matters) and 4096 (a row fills a program):

LADDER = {0: ("a row a program, a dw partial per row", plain_backward),
          1: ("several rows a program, warps sized to the tile",
              lambda x, *args: rms_norm_rows_backward(x, *args, programs=x.numel() // MIN_ELEMENTS)),
          2: ("persistent: dw in registers, the next block loaded ahead", rms_norm_rows_backward)}
rows = []
for n_cols in (256, 4096):
    x, w, dy, light = tensors(n_cols, torch.bfloat16)
    dx, dw, rstd = torch.empty_like(x), torch.empty_like(w), torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
    for step, (idea, launch) in LADDER.items():
        speed = gbps(False, x, bench(lambda: launch(x, w, rstd, dy, dx, dw)))
        rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": speed, "% of light": 100 * speed / light})
ladder = pd.DataFrame(rows).sort_values("step", kind="stable")
shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide()

# %%
# Benchmark
# ---------
# The drop-in against its peers ("-": a peer's limit); the backward over its fused range.

records = []
for dtype, n_cols in itertools.product((torch.float32, torch.bfloat16), sorted(set(SWEEP_N["forward"] + SWEEP_N["backward"]))):
    x, w, dy, light = tensors(n_cols, dtype)
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    record = lambda direction, name, ms: records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols,
        "provider": name, "GB/s": gbps(direction == "forward", x, ms), "speed of light GB/s": light})
    for name, fn in fns.items():
        for direction in (d for d in SWEEP_N if n_cols in SWEEP_N[d]):
            try:
                y = fn(xg, wg)
                record(direction, name, bench((lambda: fn(xg, wg)) if direction == "forward" else
                                              lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)))
            except Exception as err:  # a peer's limit
                if name == "ours":
                    raise
                print(f"{name}: no {direction} {dtype} N = {n_cols}: {type(err).__name__}")
                record(direction, name, float("nan"))
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of speed of light"] = 100 * results["GB/s"] / results["speed of light GB/s"]
table = results.pivot(index=keys, columns="provider", values="GB/s").loc[["forward", "backward"], list(fns)]
table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
write_results(table)
table.style.format("{:.4g}", na_rep="-").format({"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"},
                                                na_rep="-") if ON_GPU else print(NO_SPEED)

# %%
# As a plot, in % of the copy measured beside each point (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        pct = part.pivot(index="N", columns="provider", values="% of speed of light")
        pct.plot(ax=ax, logx=True, style="o--", ms=3, grid=True, title=f"{direction}, {dtype}",
                 xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)"), ax.legend(fontsize=7)
    fig.suptitle(f"RMSNorm, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")

# %%
# Reading the numbers
# -------------------

inside = [n in RANGE.get((d, t), ()) for d, t, n in table.index]
light, peer = table["ours, % of light"], table["ours / best peer"][inside]
naive, past = (table.ours / table.naive).sort_index()["forward", "float32"], light[[not i for i in inside]]
speed, s = ladder.set_index(["step", "N"])["GB/s"], ladder[ladder.N == 256].set_index("step")["% of light"]
print(NO_SPEED if not ON_GPU else
      f"Step 1 ran {speed[1, 256] / speed[0, 256]:.3g}x as fast as step 0 at N = 256, "
      f"{speed[1, 4096] / speed[0, 4096]:.3g}x at 4096; step 2 ran {speed[2, 256] / speed[1, 256]:.3g}x and "
      f"{speed[2, 4096] / speed[1, 4096]:.3g}x as fast as step 1.\nInside its range ours ran at "
      f"{light[inside].min():.3g}-{light[inside].max():.3g}% of the copy, {peer.min():.3g}-{peer.max():.3g}x the best "
      f"peer. The fp32 forward ran {naive.min():.3g}-{naive.max():.3g}x the naive speed (the bytes model: 3.5x).\n"
      + (f"Past its range ours fell to {past.min():.3g}% at N = {past.idxmin()[2]}: a 16-bit row of 32 K fills an SM, "
         "longer rows are read twice; deep dive 42 stages them in shared memory.\n" if len(past) else "")
      + f"Take away the bytes: at N = 256 the same x, dy, dx moved at {s[0]:.3g}% of the copy with a partial per row "
      f"(step 0), {s[2]:.3g}% with {_bwd_config(TOTAL_ELEMENTS // 256, 256, 2)[2]} partials in all (step 2).")

# %%
# Going further
# -------------
# **Past the range**: forward, :ref:`sphx_glr_tutorials_deep_dives_42_rms_norm_staged_gluon.py` stages 16-bit rows in
# shared memory; backward, :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py` shares a row among
# programs. **Exercise**: give each thread 64 bytes in ``_bwd_config``: what spills? Reference: Zhang, Sennrich (2019).

environment_card()
