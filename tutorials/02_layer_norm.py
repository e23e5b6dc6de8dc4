"""
Layer norm, forward and backward
================================

Layer normalization rescales every row of activations to zero mean and unit variance, then applies a
learned scale :math:`w` and shift :math:`b`. Like softmax it does a few operations per element, so its
speed is set by memory traffic: the best kernel runs as fast as a device-to-device copy of the same
bytes, the *speed of light*. The forward pass is a row reduction and fuses easily. The backward pass is
where the work is: the gradients of :math:`w` and :math:`b` are sums over *all rows*, and the design
most kernels use for them (Triton's own tutorial among them) is slow, needs a lock, and gives a
slightly different answer every time it runs. In this tutorial you build both designs, measure them
side by side, and replace the locked one with a persistent, lock-free reduction that is bitwise
deterministic, as a drop-in for :func:`torch.nn.functional.layer_norm`.

**What you will learn**

* how to count the bytes a layer norm must move, forward and backward, and predict its speed;
* how to fuse the statistics, the normalization and the affine step into one pass over each row, and
  how to keep the widest 16-bit rows at the copy's speed by staging them in shared memory (Gluon);
* how to derive the backward pass, and why :math:`dw` and :math:`db` are the hard part;
* how a spin-locked accumulation races, how to fix it, and why its result still changes between runs;
* how a persistent grid with per-program partial sums makes the reduction deterministic, and faster
  wherever its accumulators fit in registers (the benchmark shows where they stop fitting).

**Prerequisites**: PyTorch, the first two official Triton tutorials, and ideally tutorial 01 of this
site (fused softmax), whose block-size and grid heuristics this page reuses. On a machine without a
CUDA GPU this script still runs: its kernels go through Triton's interpreter on the CPU, with small
sizes.
"""

# %%
# Setup
# -----
# Every number below was measured when this page was built, on the machine described here. Without a
# CUDA GPU, Triton's interpreter runs the kernels on the CPU; it must be switched on before Triton is
# imported.

import datetime
import math
import os
import platform
import statistics
import subprocess
import time

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import matplotlib.pyplot as plt
import pandas as pd
import triton
import triton.language as tl
from triton.experimental import gluon  # Triton's lower-level language: used by one kernel below
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The naive layer norm and its bytes
# ----------------------------------
# For a row :math:`x` of length :math:`N`, with mean :math:`\mu`, variance :math:`\sigma^2` and a small
# :math:`\epsilon`,
#
# .. math::
#
#    \hat{x}_i = (x_i - \mu) \, r, \qquad r = \frac{1}{\sqrt{\sigma^2 + \epsilon}}, \qquad
#    y_i = \hat{x}_i \, w_i + b_i .
#
# :math:`r` is the reciprocal standard deviation, ``rstd`` in the code. Written with PyTorch
# operations, one per line:


def naive_layer_norm(x, weight, bias, eps=1e-5):
    """Layer norm over the last dimension, one PyTorch operation at a time."""
    mean = x.mean(dim=-1, keepdim=True)  # read MN
    xc = x - mean  # read MN, write MN
    var = (xc * xc).mean(dim=-1, keepdim=True)  # read MN, write MN; read MN
    x_hat = xc * torch.rsqrt(var + eps)  # read MN, write MN
    return x_hat * weight + bias  # read MN, write MN; read MN, write MN


# %%
# That is :math:`7MN` elements read and :math:`5MN` written, :math:`12MN` in all. A fused kernel keeps
# the row on chip: it reads :math:`x` once and writes :math:`y` once, :math:`2MN`, so it should be
# about **6 times faster** when both run at the memory's bandwidth. It also stores two floats per row,
# the mean and ``rstd``, for the backward pass: :math:`8M` bytes, negligible next to :math:`MN`
# elements.
#
# The forward kernel
# ------------------
# The layout is the one of tutorial 01: one program handles ``BLOCK_M`` whole rows at a time and walks
# over blocks of rows ``pid``, ``pid + num_programs``, ... . The statistics are computed in fp32 from
# the row held in registers: first the mean, then the variance of :math:`x - \mu` (two reductions over
# registers, no second read, and no cancellation as in :math:`E[x^2] - \mu^2`). Padding columns load as
# 0 and are masked out of the variance. The mean and ``rstd`` of each row are stored for the backward.


@triton.jit
def layer_norm_fwd_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
        # x is read once: loaded past L1 (".cg", L2 only), it leaves L1 to w and b, read by every row
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :],
                    mask=col_ok[None, :], other=0.0, cache_modifier=".cg").to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
        var = tl.sum(xc * xc, axis=1) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd[:, None]
        # w and b are loaded here, where they are used, not before the loop: held across the row's
        # reductions they would double the registers a thread needs for a wide row.
        if HAS_W:
            y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_B:
            y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)


# %%
# Reading x twice
# ---------------
# From :math:`N = 4096` on, a block is one row, and a program that holds a whole wide row in registers
# across its two reductions takes so many registers that few programs share an SM; while they reduce,
# little is on its way from memory. For rows of ``FWD_RELOAD_N`` columns (by element size) a second
# kernel reads :math:`x` twice instead: the first read, for the statistics, asks L2 to keep the row
# (``eviction_policy="evict_last"``, as for :math:`w` and :math:`b`); the second, for :math:`y`, finds
# it there and lets it go (``"evict_first"``), and :math:`y` is written with streaming stores. The
# second read costs L2 bandwidth, not DRAM bandwidth, as long as the row is still in L2: the rows in
# flight, one or two per SM, take less than half of an H100's 50 MB L2. ``torch.compile`` generates the
# same two reads for ``F.layer_norm`` at these widths.
#
# The kernel takes one row per program, with no loop, and addresses it from one 64-bit base pointer
# plus 32-bit offsets. Two earlier versions, a ``RELOAD`` switch in the block kernel above and this
# kernel walking rows in a loop, measured far slower than one read for 16-bit rows of 16384 columns on
# an H100, although the loop version's PTX issues the same loads with the same cache hints: a reminder
# to measure each variant rather than reason about it. On the same H100 (``dev/ln_fwd_reload_gpu.py``,
# ``dev/ln_reload_page_gpu.py``)
# this kernel measured faster than one read for fp32 rows of 8192 to 32768 columns and 16-bit rows of
# 8192 and 16384, and slower for 16-bit rows of 32768: those keep the single read.


@triton.jit
def layer_norm_fwd_twice_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)  # one row per program, no loop (see below)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride  # one 64-bit base; 32-bit offsets from it
    y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
    x = tl.load(x_row + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(col_ok, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    # the row again, from L2, which may now let it go
    x = tl.load(x_row + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    y = (x - mean) * rstd
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if HAS_B:
        y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok, cache_modifier=".cs")
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


# %%
# Rows too long for registers
# ---------------------------
# A program holds about 32 K fp32 values in registers. A longer row is streamed in chunks of
# ``CHUNK_N`` columns, twice: a first pass accumulates, per lane, the sum and the sum of squares of
# :math:`x - s`, where the shift :math:`s` is the row's first element; then
#
# .. math::
#
#    \mu = s + \frac{S_1}{N}, \qquad \sigma^2 = \frac{S_2}{N} - \left(\frac{S_1}{N}\right)^2,
#    \qquad S_k = \sum_i (x_i - s)^k .
#
# Shifting by a value from the row keeps the two sums small when the mean is large against the spread,
# which is what makes :math:`E[x^2] - \mu^2` lose digits. The second pass walks the row backwards (its
# last chunks are the most likely to still be in L2) and writes :math:`y`. Each pass issues the loads of
# its next chunk before it works on this one; the first asks L2 to keep the row
# (``eviction_policy="evict_last"``), the second lets it go, and :math:`y` is written with streaming
# stores. That is 3 row-sized transfers instead of 2: at most 2/3 of the speed of light once the second
# read misses the cache. (RMSNorm's forward, tutorial 04, streams fp32 rows of 32768 columns this way,
# faster than fused there; here, with a bias to read too, the fused kernel measured faster at that
# width on an H100, so the forward streams only rows of more than ``MAX_FUSED_N`` columns: 16-bit ones,
# and any past ``MAX_SPLIT_N``. Longer fp32 rows are split over several programs, as shown after the
# backward.)


@triton.jit
def layer_norm_fwd_chunked_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, CHUNK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, CHUNK_N)
    n_chunks = tl.cdiv(n_cols, CHUNK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        shift = tl.load(x_row).to(tl.float32)
        s1 = tl.zeros([CHUNK_N], tl.float32)
        s2 = tl.zeros([CHUNK_N], tl.float32)
        # each pass issues the loads of its next chunk before it works on this one; the first asks L2
        # to keep the row, the second reads it backwards and lets it go
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            offs = chunk * CHUNK_N + cols
            x = x_next.to(tl.float32)
            x_next = tl.load(x_row + offs + CHUNK_N, mask=offs + CHUNK_N < n_cols, other=0.0,
                             eviction_policy="evict_last")
            d = tl.where(offs < n_cols, x - shift, 0.0)
            s1 += d
            s2 += d * d
        m1 = tl.sum(s1, axis=0) / n_cols
        var = tl.maximum(tl.sum(s2, axis=0) / n_cols - m1 * m1, 0.0)
        mean = shift + m1
        rstd = 1.0 / tl.sqrt(var + eps)
        last = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + last, mask=last < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * CHUNK_N + cols  # backwards: the last chunks are in L2
            ok = offs < n_cols
            x = x_next.to(tl.float32)
            x_next = tl.load(x_row + offs - CHUNK_N, mask=(offs >= CHUNK_N) & (offs - CHUNK_N < n_cols), other=0.0,
                             eviction_policy="evict_first")
            y = (x - mean) * rstd
            if HAS_W:
                y = y * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(b_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


# %%
# The backward pass
# -----------------
# Write :math:`g = dy \odot w` for the incoming gradient scaled by the weight (:math:`g = dy` without
# a weight). Differentiating :math:`\hat{x}` through the mean and the variance of its row gives
#
# .. math::
#
#    dx = r \left( g - \frac{1}{N}\sum_j g_j - \hat{x} \, \frac{1}{N}\sum_j g_j \hat{x}_j \right),
#
# and for the parameters, summed over all :math:`M` rows,
#
# .. math::
#
#    dw = \sum_{\text{rows}} dy \odot \hat{x}, \qquad db = \sum_{\text{rows}} dy .
#
# :math:`dx` is like the softmax backward: two dot products along each row, then an elementwise step.
# It reads :math:`x` and :math:`dy` and writes :math:`dx`, 3 row-sized transfers; the mean and ``rstd``
# saved by the forward give :math:`\hat{x}` back without recomputing the statistics.
#
# :math:`dw` and :math:`db` are different: every row contributes to every column. Each program can sum
# the rows it handles, but the programs' sums must then be added together, and how that is done decides
# the speed and whether the result is reproducible.
#
# Design 1: a spin lock per group of rows (the classic)
# -----------------------------------------------------
# Triton's layer-norm tutorial (and Apex before it) does this: row :math:`i` computes its :math:`dx`,
# then adds its :math:`dy \odot \hat{x}` and :math:`dy` into buffer :math:`i \bmod G` of
# ``GROUP_SIZE_M`` buffers of width :math:`N`, holding a spin lock on that buffer while it does the
# read-add-write; a second kernel sums the ``GROUP_SIZE_M`` buffers. Two details matter.
#
# * **The race.** The lock is taken and released by one atomic instruction, executed by one thread of
#   the program, but the buffer is written by all of its threads. Released right after the stores are
#   *issued*, the lock can be handed to the next program while other warps of this one have not yet
#   written their columns; the next program then reads the old values there, and one row's
#   contribution is lost. The fix is a barrier between the stores and the release
#   (:func:`triton.language.debug_barrier`, ``__syncthreads()`` in CUDA), so that every warp's stores
#   precede the release, whose ``release`` ordering makes them visible GPU-wide. The buffer is also
#   read with ``cache_modifier=".cg"`` (from L2, not from an SM's L1 that may hold an older copy).
# * **The precision.** The official tutorial keeps the buffers in the input's dtype: in bf16 each
#   addition rounds to 8 bits of mantissa, and a buffer receives :math:`M/G` of them. Here they are
#   fp32.
#
# Even fixed, the design has two costs. Programs queue on the locks, and the order in which rows reach
# a buffer depends on which program gets the lock first, so fp32 additions happen in a different order
# on every run and the result changes in its last bits: measured below.


@triton.jit
def layer_norm_bwd_classic_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_buf_ptr, db_buf_ptr, lock_ptr,
    n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    GROUP_SIZE_M: tl.constexpr, HAS_W: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    row64 = tl.cast(row, tl.int64)
    x = tl.load(x_ptr + row64 * x_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row64 * dy_row_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    x_hat = tl.where(col_ok, (x - mean) * rstd, 0.0)
    g = dy
    if HAS_W:
        g = dy * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    c1 = tl.sum(x_hat * g, axis=0) / n_cols
    c2 = tl.sum(g, axis=0) / n_cols
    dx = (g - (x_hat * c1 + c2)) * rstd
    tl.store(dx_ptr + row64 * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=col_ok)
    # Add this row's dw, db into buffer (row % GROUP_SIZE_M), under its lock.
    group = row % GROUP_SIZE_M
    lock = lock_ptr + group
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    offs = group * n_cols + cols
    dw_old = tl.load(dw_buf_ptr + offs, mask=col_ok, other=0.0, cache_modifier=".cg")
    db_old = tl.load(db_buf_ptr + offs, mask=col_ok, other=0.0, cache_modifier=".cg")
    tl.store(dw_buf_ptr + offs, dw_old + dy * x_hat, mask=col_ok)
    tl.store(db_buf_ptr + offs, db_old + dy, mask=col_ok)
    tl.debug_barrier()  # the fix: every warp's stores come before the release
    tl.atomic_xchg(lock, 0)


# %%
# Design 2: a persistent, lock-free reduction
# -------------------------------------------
# Launch only as many programs as the GPU runs at once (a *persistent* grid, as in tutorial 01):
# program :math:`p` of :math:`P` takes the blocks of ``BLOCK_M`` rows :math:`p`, :math:`p + P`,
# :math:`p + 2P`, and so on. For each block it computes :math:`dx` and adds :math:`dy \odot \hat{x}` and :math:`dy` into
# accumulators that live in its registers, in fp32. When its rows are done it writes one partial row
# of :math:`dw` and one of :math:`db` into its own line of a ``[P, N]`` buffer: no other program
# touches that line, so there is no lock and no atomic. A small second kernel sums the lines, in a
# fixed order.
#
# With so few programs (one or two per SM), none can count on a neighbour to keep the memory busy
# while it computes: before it works on a block, a program issues the loads of its *next* block, so
# the next rows are on their way while this block's reductions and stores go on.
#
# Every addition happens in an order fixed by the grid and the code, not by the scheduler, so the
# result is the same to the last bit on every run (on the same GPU, with the same grid). And no program
# ever waits for another.


@triton.jit
def layer_norm_bwd_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Persistent: program p takes the blocks of rows p, p + P, p + 2P, ... (P programs)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:  # loaded once per program, reused for every row it visits
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # The loads of the first block; in the loop, those of the next block are issued before this one is
    # computed, so the memory works while the arithmetic and the stores go on. Rows past the end load
    # as zeros: dy = 0 adds nothing to dw and db, and they are never stored.
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
        mean = tl.load(mean_ptr + rows)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy
        if HAS_W:
            g = dy * w[None, :]
        c1 = tl.sum(x_hat * g, axis=1) / n_cols
        c2 = tl.sum(g, axis=1) / n_cols
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
        if COMPUTE_DWDB:
            dw_acc += dy * x_hat
            db_acc += dy
    if COMPUTE_DWDB:  # every program writes its whole line, zeros included: nothing needs clearing
        offs = tl.cast(pid, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)


# %%
# For wide rows the accumulators do not fit: at :math:`N` columns a program needs :math:`2N` fp32
# accumulators next to the row of :math:`x` and :math:`dy` it is working on, and past
# ``MAX_BWD_FUSED_N`` columns that exceeds the registers of one program (they would spill to local
# memory). The simplest way out, the chunked version below, streams each row twice, like the forward:
# a first pass for the two dot products, a second (backwards, for L2 hits) that writes :math:`dx` and
# adds into the program's own line of the partial buffer, in memory rather than registers. Still one
# writer per line: lock-free and deterministic, but the partial line is read and written once per row.
# It is the fallback; the next section splits the row instead.


@triton.jit
def layer_norm_bwd_chunked_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, rows_per_program,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, CHUNK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, CHUNK_N)
    n_chunks = tl.cdiv(n_cols, CHUNK_N)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    dw_line = dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols
    db_line = db_partial_ptr + tl.cast(pid, tl.int64) * n_cols
    for row in tl.range(row_start, row_end):
        row64 = tl.cast(row, tl.int64)
        x_row = x_ptr + row64 * x_row_stride
        dy_row = dy_ptr + row64 * dy_row_stride
        dx_row = dx_ptr + row64 * dx_row_stride
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        acc1 = tl.zeros([CHUNK_N], tl.float32)
        acc2 = tl.zeros([CHUNK_N], tl.float32)
        for chunk in range(0, n_chunks):
            offs = chunk * CHUNK_N + cols
            ok = offs < n_cols
            x = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
            g = tl.load(dy_row + offs, mask=ok, other=0.0).to(tl.float32)
            if HAS_W:
                g = g * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            acc1 += tl.where(ok, (x - mean) * rstd, 0.0) * g
            acc2 += g
        c1 = tl.sum(acc1, axis=0) / n_cols
        c2 = tl.sum(acc2, axis=0) / n_cols
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * CHUNK_N + cols
            ok = offs < n_cols
            x = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + offs, mask=ok, other=0.0).to(tl.float32)
            x_hat = (x - mean) * rstd
            g = dy
            if HAS_W:
                g = dy * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            dx = (g - (x_hat * c1 + c2)) * rstd
            tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=ok)
            if COMPUTE_DWDB:  # the first row of a program starts its line from 0, whatever was there
                not_first = ok & (cols * 0 + row > row_start)  # (a tensor: the interpreter's row is an int)
                dw_old = tl.load(dw_line + offs, mask=not_first, other=0.0)
                db_old = tl.load(db_line + offs, mask=not_first, other=0.0)
                tl.store(dw_line + offs, dw_old + dy * x_hat, mask=ok)
                tl.store(db_line + offs, db_old + dy, mask=ok)


# %%
# Wide rows: one row shared by several programs
# ---------------------------------------------
# The chunked kernel pays twice: it reads each row twice, and it reads and writes its partial line on
# every row. Tutorial 04 (RMSNorm) shows a better way for rows too wide for one program: *split* them.
# ``SLICES`` programs, a *group*, share each block of rows; each owns a slice of ``BLOCK_N`` columns,
# loads its slice of :math:`x` and :math:`dy` once, and keeps :math:`dw` and :math:`db` for those
# columns in fp32 registers across all the rows it visits, as the fused kernel does. What a slice cannot
# compute alone are the two sums along the row, :math:`\sum_j g_j \hat{x}_j` and :math:`\sum_j g_j`. Each
# program publishes its two shares in global memory, waits until every slice of its rows has published,
# adds the ``SLICES`` shares in a fixed order (the same bits in every program of the group, on every
# run) and writes its slice of :math:`dx`.
#
# A wait costs a round trip to the L2 cache per block, as long as an SM takes to stream tens of KB, so
# the kernel is arranged so that it rarely waits at all (tutorial 04 measures each step):
#
# * **one block ahead.** Before it waits for the shares of this block, a program computes and
#   publishes its shares of the *next* block; the other slices did the same one step earlier, so this
#   block's shares are usually there already.
# * **two blocks of loads in flight**, the next one and the one after, with their mean and ``rstd``:
#   nothing a step needs is loaded in that step.
# * **packed 16-bit rows** (``PACK``). A bf16 element loaded on its own takes a whole 32-bit register,
#   so the kernel loads 16-bit rows as 32-bit words of two elements and unpacks them only to compute
#   (a bf16 is the top half of an fp32: a shift); :math:`dx` is packed again to be stored. That needs
#   rows of even length, even strides and 4-byte aligned tensors, else ``PACK`` is off.
# * **a register budget** (``maxnreg``): each thread gets the share of the register file that lets
#   ``SPLIT_WARPS_PER_SM`` warps live on an SM together.
# * **small programs, several per SM.** While a program waits for its group, the other programs on its
#   SM go on loading and storing, so the more programs an SM holds, the less a wait costs. A 16-bit row
#   is cut into slices of 2048 columns for programs of 4 warps, four to an SM within the budget above.
#   For that, a step keeps nothing in registers but the tiles *as loaded* (this block's and the next
#   one's, still packed) with their statistics: :math:`\hat{x}` and :math:`dy` are recomputed from them
#   where they are used, a few instructions per element, rather than held as fp32 values. Held, they
#   pushed a 4-warp program past its 128 registers, and a program that spills to local memory is much
#   slower than one that recomputes (``dev/ln_split_v2_gpu.py`` times both).
#
# Waiting for another program is only safe if that program is running too: the whole grid must fit on
# the GPU at once. The launcher sizes it from the occupancy of the kernel Triton compiles for these
# very arguments, and falls back to the chunked kernel when a group cannot fit.
#
# A share is published in one of two ways, chosen by the program's size (tutorial 04 measures both):
#
# * **one 64-bit word per share** (``FLAG_WORDS=True``, up to 16 warps): the bits of the two fp32 sums
#   side by side, written with one atomic exchange into a buffer filled with ones (all 64 bits set)
#   before the launch. A program reads its rows' words until none is all ones: one round trip to the
#   L2 cache once the others are done. A written word can never be all ones, because its high half
#   would then be the bits ``0xFFFFFFFF``, a NaN, and the kernel replaces that one pattern by the
#   ordinary quiet NaN before it writes: the sum is still NaN, and the "not written" mark stays unique.
#   One subtlety, found the hard way: when the words of a block are fewer than the program's threads,
#   Triton keeps a copy per group of warps, and the loop's test may be decided on another warp's copy.
#   A warp whose own copy was loaded a moment too early would add a share it never saw (here, a NaN).
#   So after the loop, any copy that still reads "not written" is loaded once more. And the words are
#   read as a tile of at least ``MIN_SLOTS`` (32 for 16-bit rows: one per lane of a warp; the padding
#   slots read as zeros): with a tile of 8 or 16 words, the layout Triton chose for it cost the 4-warp
#   program enough registers to spill.
# * **a counter per block of rows** (32 warps): plain stores of the shares, a barrier so that every
#   thread's store is issued, an atomic add with *release* semantics; one thread polls the counter with
#   *acquire* semantics, then the shares are read from L2 (``cache_modifier=".cg"``). With 1024 threads
#   per program, one poller is cheaper than every thread reading the words.
#
# Under Triton's interpreter programs run one after another, so a program waiting for the next would
# wait forever: there the launcher gives a row a single slice, and the same kernel never waits.


@triton.jit
def load_tile(ptr, rows, row_stride, units, unit_ok, n_rows, PACK: tl.constexpr):
    """Rows ``rows`` of a slice (zeros past n_rows): [BLOCK_M, BLOCK_N] elements, or with PACK the
    [BLOCK_M, BLOCK_N // 2] 32-bit words that hold them two by two (``units`` count words then)."""
    ok = (rows < n_rows)[:, None] & unit_ok[None, :]
    rows = rows.to(tl.int64)
    if PACK:
        words = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        tile = tl.load(words + rows[:, None] * (row_stride // 2) + units[None, :], mask=ok, other=0)
    else:
        tile = tl.load(ptr + rows[:, None] * row_stride + units[None, :], mask=ok, other=0.0)
    return tile


@triton.jit
def unpack(tile, dtype: tl.constexpr, PACK: tl.constexpr):
    """A loaded tile as [BLOCK_M, BLOCK_N] fp32 values, in column order."""
    if PACK:  # the low half of a word is the even column (little-endian)
        if dtype == tl.bfloat16:  # a bf16 is the top half of an fp32
            lo = (tile << 16).to(tl.float32, bitcast=True)
            hi = (tile & -65536).to(tl.float32, bitcast=True)
        else:
            lo = tile.to(tl.int16).to(dtype, bitcast=True).to(tl.float32)
            hi = (tile >> 16).to(tl.int16).to(dtype, bitcast=True).to(tl.float32)
        values = tl.reshape(tl.join(lo, hi), [tile.shape[0], 2 * tile.shape[1]])
    else:
        values = tile.to(tl.float32)
    return values


@triton.jit
def store_tile(ptr, rows, row_stride, units, ok, values, PACK: tl.constexpr):
    """Stores [BLOCK_M, BLOCK_N] values in the dtype of ``ptr``, two by two in 32-bit words with PACK."""
    values = values.to(ptr.dtype.element_ty)
    if PACK:
        lo, hi = tl.split(tl.reshape(values, [values.shape[0], values.shape[1] // 2, 2]))
        word = (lo.to(tl.int16, bitcast=True).to(tl.int32) & 65535) | (hi.to(tl.int16, bitcast=True).to(tl.int32) << 16)
        words = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        tl.store(words + rows[:, None] * (row_stride // 2) + units[None, :], word, mask=ok)
    else:
        tl.store(ptr + rows[:, None] * row_stride + units[None, :], values, mask=ok)


@triton.jit
def publish_shares(shares_ptr, counter_ptr, block, n_blocks, n_rows, rows, row_ok, part, s1, s2,
                   SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """This slice's shares of each row's two sums, for the other slices of the group."""
    if FLAG_WORDS:  # one word: s1's bits above s2's; all ones means "not written"
        hi = s1.to(tl.int32, bitcast=True)
        hi = tl.where(hi == -1, 0x7FC00000, hi)  # the one NaN whose bits are all ones -> the quiet NaN
        word = (hi.to(tl.int64) << 32) | (s2.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
        tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")
    else:
        tl.store(shares_ptr + rows * SLICES + part, s1, mask=row_ok)
        tl.store(shares_ptr + (n_rows + rows) * SLICES + part, s2, mask=row_ok)
        tl.debug_barrier()  # every thread's stores are issued before the counter moves
        tl.atomic_add(counter_ptr + block, 1, mask=block < n_blocks, sem="release")


@triton.jit
def wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES: tl.constexpr, SLOTS: tl.constexpr,
                    FLAG_WORDS: tl.constexpr):
    """The two row sums of the rows of ``block``, once every slice has published its shares, added in
    slice order (SLOTS: SLICES rounded up to a power of two; the extra slots read as zeros)."""
    t1, t2 = wait_for_slices(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
    return tl.sum(t1, axis=1), tl.sum(t2, axis=1)


@triton.jit
def wait_for_slices(shares_ptr, counter_ptr, block, n_rows, rows, SLICES: tl.constexpr, SLOTS: tl.constexpr,
                    FLAG_WORDS: tl.constexpr):
    """Every slice's two shares of the rows of ``block``, as two [BLOCK_M, SLOTS] tiles, once all are in."""
    slot = tl.arange(0, SLOTS)
    slots = shares_ptr + rows[:, None] * SLICES + slot[None, :]
    mine = (slot < SLICES)[None, :]
    if FLAG_WORDS:
        words = tl.load(slots, mask=mine, other=0, volatile=True)
        while tl.max((words == -1).to(tl.int32)) > 0:  # some slice has not written yet
            words = tl.load(slots, mask=mine, other=0, volatile=True)
        # A tile smaller than the program is held in several copies, one per group of warps, and the
        # test above may be decided on another warp's copy: a copy still unwritten here (it was loaded
        # before that slice wrote) is read again, once. Measured: without this, dx had NaNs at 2 x 32 slots.
        stale = mine & (words == -1)
        words = tl.where(stale, tl.load(slots, mask=stale, other=0, volatile=True), words)
        t1 = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        t2 = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        while arrived < SLICES:
            arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        t1 = tl.load(slots, mask=mine, other=0.0, cache_modifier=".cg")
        t2 = tl.load(slots + n_rows * SLICES, mask=mine, other=0.0, cache_modifier=".cg")
    return t1, t2


@triton.jit
def load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, block, n_rows, x_row_stride, dy_row_stride, units, unit_ok,
               PACK: tl.constexpr, BLOCK_M: tl.constexpr):
    """A block's tiles of x and dy (as loaded: packed or not) and its rows' mean and rstd."""
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    x = load_tile(x_ptr, rows, x_row_stride, units, unit_ok, n_rows, PACK)
    dy = load_tile(dy_ptr, rows, dy_row_stride, units, unit_ok, n_rows, PACK)
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return x, dy, tl.load(mean_ptr + rows), tl.load(rstd_ptr + rows)


@triton.jit
def x_hat_and_dy(x, dy, mean, rstd, col_ok, dtype: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr):
    """A block's x_hat = (x - mean) * rstd (zero in padding columns) and dy, in fp32."""
    x_hat = unpack(x, dtype, PACK) * rstd[:, None] - (mean * rstd)[:, None]
    if not EVEN:
        x_hat = tl.where(col_ok[None, :], x_hat, 0.0)
    return x_hat, unpack(dy, dtype, PACK)


@triton.jit
def publish_block(shares_ptr, counter_ptr, block, n_blocks, n_rows, part, x, dy, mean, rstd, w, col_ok,
                  dtype: tl.constexpr, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr, PACK: tl.constexpr,
                  EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    """This slice's shares of the rows of ``block``, sum(g * x_hat) and sum(g) with g = dy * w, from the
    block's tiles as loaded (rows past the end publish nothing)."""
    x_hat, g = x_hat_and_dy(x, dy, mean, rstd, col_ok, dtype, PACK, EVEN)
    g = g * w[None, :]
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    publish_shares(shares_ptr, counter_ptr, block, n_blocks, n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64),
                   rows < n_rows, part, tl.sum(x_hat * g, axis=1), tl.sum(g, axis=1), SLICES, FLAG_WORDS)


@triton.jit
def layer_norm_bwd_split_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr,
    FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups).
    EVEN: the slices cover the row exactly (no padding columns to zero)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N  # a tile's row holds words, or elements
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.full([BLOCK_N], 1.0, tl.float32)
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # Only the tiles as loaded live from step to step: this block's and the next one's (x_hat and dy
    # are recomputed from them where they are used, a few instructions, rather than held in registers).
    # First: both blocks loaded, the shares of this program's first block published.
    x_this, dy_this, mean_this, rstd_this = load_block(
        x_ptr, dy_ptr, mean_ptr, rstd_ptr, group, n_rows, x_row_stride, dy_row_stride, units, unit_ok,
        PACK, BLOCK_M)
    x_next, dy_next, mean_next, rstd_next = load_block(
        x_ptr, dy_ptr, mean_ptr, rstd_ptr, group + n_groups, n_rows, x_row_stride, dy_row_stride, units,
        unit_ok, PACK, BLOCK_M)
    publish_block(shares_ptr, counter_ptr, group, n_blocks, n_rows, part, x_this, dy_this, mean_this, rstd_this,
                  w, col_ok, dtype, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
    for block in tl.range(group, n_blocks, n_groups):
        # the block after next: its loads are in flight while this step works (a load whose result is
        # needed in the same step would stall the program)
        x_after, dy_after, mean_after, rstd_after = load_block(
            x_ptr, dy_ptr, mean_ptr, rstd_ptr, block + 2 * n_groups, n_rows, x_row_stride, dy_row_stride,
            units, unit_ok, PACK, BLOCK_M)
        # the next block's shares, published before this block's are awaited (rows past the end publish
        # nothing)
        publish_block(shares_ptr, counter_ptr, block + n_groups, n_blocks, n_rows, part, x_next, dy_next,
                      mean_next, rstd_next, w, col_ok, dtype, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
        # this block: dw and db, then dx once the group's shares are in
        x_hat, dy = x_hat_and_dy(x_this, dy_this, mean_this, rstd_this, col_ok, dtype, PACK, EVEN)
        if COMPUTE_DWDB:
            dw_acc += dy * x_hat
            db_acc += dy
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # a padded row waits on the block's last row
        c1, c2 = wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
        dx = (dy * w[None, :] - (x_hat * (c1 / n_cols)[:, None] + (c2 / n_cols)[:, None])) * rstd_this[:, None]
        store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
        x_this, dy_this, mean_this, rstd_this = x_next, dy_next, mean_next, rstd_next
        x_next, dy_next, mean_next, rstd_next = x_after, dy_after, mean_after, rstd_after
    if COMPUTE_DWDB:  # one partial line per group; each slice writes its columns of it
        offs = tl.cast(group, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)


# %%
# The second pass, shared by both designs: each program owns ``BLOCK_C`` columns and adds the lines of
# the partial buffers top to bottom, ``BLOCK_P`` lines at a time, in fp32, then writes :math:`dw` and
# :math:`db` in the weight's dtype. Its order of additions is fixed, so it adds no non-determinism of
# its own.


@triton.jit
def sum_partials_kernel(
    dw_partial_ptr, db_partial_ptr, dw_ptr, db_ptr, n_partials, n_cols,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < n_cols
    dw_acc = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    db_acc = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for first in range(0, n_partials, BLOCK_P):
        lines = first + tl.arange(0, BLOCK_P)
        ok = (lines < n_partials)[:, None] & col_ok[None, :]
        offs = lines.to(tl.int64)[:, None] * n_cols + cols[None, :]
        dw_acc += tl.load(dw_partial_ptr + offs, mask=ok, other=0.0)
        db_acc += tl.load(db_partial_ptr + offs, mask=ok, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw_acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)
    tl.store(db_ptr + cols, tl.sum(db_acc, axis=0).to(db_ptr.dtype.element_ty), mask=col_ok)


# %%
# The same split for the forward
# -------------------------------
# Past ``MAX_FUSED_N`` the forward's chunked kernel reads each row twice. Split the row instead and it is
# read once: each program keeps its slice of :math:`w` and :math:`b` in registers for every row it
# visits, and an SM holds several programs, one loading while another stores. What a slice cannot
# compute alone are the row's mean and variance.
# Each slice publishes its own mean :math:`m_k` and sum of squared deviations :math:`q_k` over its
# :math:`n_k` columns, in one flag word as in the backward, and every program of the group combines them
# in slice order (Chan's formula, exact and stable):
#
# .. math::
#
#    \mu = \frac{1}{N} \sum_k n_k m_k, \qquad
#    \sigma^2 = \frac{1}{N} \left( \sum_k q_k + \sum_k n_k (m_k - \mu)^2 \right).
#
# The same lookahead applies: a program publishes the next block's statistics before it waits for this
# block's, with two blocks of loads in flight. Slice 0 stores the mean and ``rstd`` for the backward.
#
# Measured on an H100 (``dev/ln_fwd_split_gpu.py``), the split pays for fp32 rows longer than
# ``MAX_FUSED_N``, and only there. Every row costs each program an exchange with its group, whatever
# its bytes; a 16-bit slice moves half the bytes of an fp32 slice per exchange, and the 16-bit split
# ran no faster than the chunked kernel. At :math:`N \le` ``MAX_FUSED_N`` the fused kernel, with no
# exchange at all, was faster in both dtypes.


@triton.jit
def publish_stats(shares_ptr, rows, n_rows, part, tile, count, col_ok, dtype: tl.constexpr,
                  SLICES: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr):
    """This slice's mean and sum of squared deviations of each row of ``rows``, over its ``count``
    columns, published in its flag word (rows past the end publish nothing)."""
    x = unpack(tile, dtype, PACK)
    m = tl.sum(x, axis=1) / tl.maximum(count, 1.0)  # padding columns load as 0; an empty slice: 0, 0
    d = x - m[:, None]
    if not EVEN:
        d = tl.where(col_ok[None, :], d, 0.0)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    publish_shares(shares_ptr, shares_ptr, 0, 0, n_rows, rows, row_ok, part, m, tl.sum(d * d, axis=1),
                   SLICES, True)


@triton.jit
def layer_norm_fwd_split_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, shares_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr, PACK: tl.constexpr,
    EVEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.full([BLOCK_N], 1.0, tl.float32)
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.zeros([BLOCK_N], tl.float32)
    if HAS_B:
        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    count = tl.minimum(tl.maximum(n_cols - part * BLOCK_N, 0), BLOCK_N).to(tl.float32)  # this slice's columns
    slot = tl.arange(0, SLOTS)
    counts = tl.minimum(tl.maximum(n_cols - slot * BLOCK_N, 0), BLOCK_N).to(tl.float32)  # every slice's
    first = group * BLOCK_M + tl.arange(0, BLOCK_M)
    x_this = load_tile(x_ptr, first, x_row_stride, units, unit_ok, n_rows, PACK)
    x_next = load_tile(x_ptr, first + n_groups * BLOCK_M, x_row_stride, units, unit_ok, n_rows, PACK)
    publish_stats(shares_ptr, first, n_rows, part, x_this, count, col_ok, dtype, SLICES, PACK, EVEN)
    for block in tl.range(group, n_blocks, n_groups):
        after = (block + 2 * n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_after = load_tile(x_ptr, after, x_row_stride, units, unit_ok, n_rows, PACK)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        publish_stats(shares_ptr, next_rows, n_rows, part, x_next, count, col_ok, dtype, SLICES, PACK, EVEN)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        m_k, q_k = wait_for_slices(shares_ptr, shares_ptr, block, n_rows, rows, SLICES, SLOTS, True)
        mean = tl.sum(counts[None, :] * m_k, axis=1) / n_cols
        d = m_k - mean[:, None]
        var = (tl.sum(q_k, axis=1) + tl.sum(counts[None, :] * d * d, axis=1)) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        y = (unpack(x_this, dtype, PACK) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        store_tile(y_ptr, rows, y_row_stride, units, row_ok[:, None] & unit_ok[None, :], y, PACK)
        if part == 0:
            tl.store(mean_ptr + rows, mean, mask=row_ok)
            tl.store(rstd_ptr + rows, rstd, mask=row_ok)
        x_this, x_next = x_next, x_after


# %%
# The widest 16-bit rows: stage the row in shared memory
# ------------------------------------------------------
# A bf16 row of :math:`N = 32768` is 64 KB as loaded and 128 KB as fp32 values, half of an SM's
# registers: the fused kernel's program that holds it is alone on its SM, and alone it loads the row,
# reduces it twice and stores it, one phase after the other. Reading :math:`x` twice measured slower
# at that width on an H100 (``dev/ln_fwd_reload_gpu.py``), and the split above pays an exchange per
# row.
#
# Shared memory holds the row in its own dtype, and an H100's 228 KB per SM hold three such rows. The
# kernel below gives each program one row and few registers: it copies the row into shared memory with
# asynchronous copies (``cp.async``, which do not go through registers), then reads it back in
# ``CHUNK``-column pieces, three times: the sum, the squared deviations, and :math:`y` (with
# :math:`w` and :math:`b`, loaded piece by piece as in the fused kernel). Three programs share an SM,
# and while one reduces, the others load or store. :math:`x` is still read from DRAM once.
#
# ``triton.language`` decides by itself what goes through shared memory, so this kernel is written in
# **Gluon** (``triton.experimental.gluon``), the lower-level language that ships with Triton: every
# tensor has an explicit layout (which thread holds which elements), and the kernel allocates shared
# memory and issues the copies itself. Every piece is its own *commit group*, so the first pass
# starts on piece 0 while the later ones are still on their way; each thread reads back, with the same
# layout, exactly the elements its own copies wrote, so the waits need no barrier between threads.
# Gluon kernels compile only for a GPU (Triton's interpreter does not run them), and a copy moves 16
# aligned bytes, with the mask at the row's end covering whole copies: without a GPU, or for rows whose
# length or stride is not a multiple of 16 elements or whose address is not 16-byte aligned, the
# launcher keeps the kernels above, as it does on GPUs before Ampere (no ``cp.async``) or whose programs
# cannot have 64 KB of shared memory. The softmax tutorial stages its widest rows the same way.

# cp.async from global to shared memory: ``async_copy_global_to_shared`` in Triton 3.6, ``async_load``
# from 3.7 on (where the old name is deprecated)
async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def layer_norm_fwd_staged_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: gl.constexpr, HAS_B: gl.constexpr, CHUNKS: gl.constexpr, VEC: gl.constexpr, REP: gl.constexpr,
    EVEN: gl.constexpr,
):
    """One program per row: the row copied into shared memory once, then three passes over it."""
    # VEC contiguous elements (16 bytes) per thread, 32 threads per warp, the warps side by side; a chunk
    # is REP such runs per thread
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    CHUNK: gl.constexpr = VEC * 32 * gl.num_warps() * REP
    if EVEN:  # the row is a whole number of chunks: with a constant length every mask folds away
        n_cols = CHUNKS * CHUNK
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    x_row = x_ptr + row * x_row_stride
    x_smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [CHUNKS, CHUNK],
                                       gl.SwizzledSharedLayout(1, 1, 1, [0]))
    for c in gl.static_range(CHUNKS):  # issue every copy at once, one commit group per chunk
        async_load(x_smem.index(c), x_row + c * CHUNK + cols, mask=cols < n_cols - c * CHUNK)
        async_copy.commit_group()
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)  # chunk c has landed; later ones may still be in flight
        x = x_smem.index(c).load(layout).to(gl.float32)
        acc += gl.where(cols < n_cols - c * CHUNK, x, 0.0)
    mean = gl.sum(acc, axis=0) / n_cols
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(CHUNKS):
        x = x_smem.index(c).load(layout).to(gl.float32)
        xc = gl.where(cols < n_cols - c * CHUNK, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / gl.sqrt(gl.sum(acc, axis=0) / n_cols + eps)
    y_row = y_ptr + row * y_row_stride
    for c in range(CHUNKS):
        col_ok = cols < n_cols - c * CHUNK
        y = (x_smem.index(c).load(layout).to(gl.float32) - mean) * rstd
        if HAS_W:
            y = y * gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        if HAS_B:
            y = y + gl.load(b_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)
    gl.store(mean_ptr + row, mean)
    gl.store(rstd_ptr + row, rstd)


# %%
# Block size, warps and grid
# --------------------------
# The choices live here, apart from the kernels.
#
# * ``BLOCK_N`` is the row length rounded up to a power of two. The forward holds one row of
#   :math:`x` per program and stays fused up to ``MAX_FUSED_N`` columns, reading :math:`x` twice at the
#   widths of ``FWD_RELOAD_N`` (one row per program, no ``BLOCK_M``). The backward holds
#   :math:`x`, :math:`dy` and the two accumulators, four values per column, so it stays fused only up to
#   ``MAX_BWD_FUSED_N`` (per element size: a 16-bit row of 8192 columns already runs faster split).
#   Up to ``MAX_SPLIT_N`` a row is then split into slices of at most ``SLICE_N``
#   columns (``SPLIT``, per element size, as measured fastest on an H100 by ``dev/ln_lookahead_gpu.py``
#   and ``dev/ln_split_v2_gpu.py`` in the repository); past that the chunked kernel streams
#   ``CHUNK_N`` columns at a time. The forward past ``MAX_FUSED_N`` splits fp32 rows (``FWD_SPLIT``,
#   with as many programs per SM as fit in ``FWD_SPLIT_WARPS_PER_SM`` warps) and streams the others in
#   chunks of ``FWD_CHUNK_N``. On a GPU, 16-bit rows of 16 K to 32 K columns go to the staged kernel
#   first (``FWD_STAGED``: pieces of ``CHUNK_N`` columns, 16 warps, registers capped so that ``PER_SM``
#   programs share an SM; 16 warps measured fastest, ``dev/staged_check_gpu.py``).
# * ``BLOCK_M`` packs several short rows into one program so that each block moves at least
#   ``MIN_ELEMENTS`` elements (in the fused backward, ``BWD_MIN_BYTES`` bytes of :math:`x`: blocks of
#   the same bytes in both dtypes, measured best on an H100 by ``dev/ln_fused_cfg_gpu.py``), enough
#   bytes in flight to hide the memory's latency. In the single-read forward,
#   where a wide row's program takes so many registers that few fit on an SM, the compiled kernel's
#   occupancy decides: if the programs one SM holds carry fewer than ``FWD_MIN_BYTES_PER_SM`` bytes of
#   :math:`x`, each program takes twice the rows.
# * ``num_warps`` gives each thread about ``*_BYTES_PER_THREAD`` bytes of each tile as stored, so a
#   bf16 row gets half the warps of an fp32 row and, in the backward, twice the programs per SM: the
#   same bytes in flight per SM in both dtypes. The backward holds several tiles per element
#   (:math:`x`, :math:`dy`, the next block's :math:`x` and :math:`dy`, two fp32 accumulators), so each
#   thread gets fewer bytes than in the forward.
# * The forward grid is one program per block of rows, or, with ``persistent=True``, the number of
#   programs the GPU holds at once (tutorial 01 measures both; the plain grid is the default here).
# * The backward grid is persistent by design: its size is the number of partial lines. More programs
#   keep more loads in flight; fewer make the partial buffer (written once and read once by the second
#   pass, :math:`2 \times 2 \times 4` bytes per program and column) smaller next to the :math:`3MN`
#   elements of the main traffic, and give each program more rows to amortize its final store over.
#   Each program hides its latency by prefetching, so a few per SM suffice: as many as fit in
#   ``BWD_WARPS_PER_SM`` warps (at least one, and no more than the compiled kernel's occupancy
#   allows), times the number of SMs, and never more than there are blocks of rows. For the split
#   kernel, whole groups of ``SLICES`` programs, one partial line per group, and as many as fit in
#   ``SPLIT_WARPS_PER_SM`` warps (which also sets its register budget). Each program then
#   visits about ``rows_per_program`` rows: every :math:`P`-th block for the fused and split kernels,
#   a contiguous run for the chunked one.

MAX_FUSED_N = 32768  # forward: longest row kept whole in registers
MAX_BWD_FUSED_N = {2: 4096, 4: 8192}  # backward, by element size: longest row kept whole in one program
MIN_ELEMENTS = 4096  # fewest elements in one block of rows
BWD_MIN_BYTES = 8192  # fused backward: fewest bytes of x in one block of rows (bf16 4096 elements, fp32 2048)
FWD_BYTES_PER_THREAD = 64  # forward: bytes of x per thread (16 fp32 or 32 bf16 values)
FWD_MIN_BYTES_PER_SM = 40960  # forward: fewer bytes of x than this in the programs one SM holds: more rows
# forward, by element size: rows of these widths (first, last) read x twice, one row per program
FWD_RELOAD_N = {2: (8192, 16384), 4: (8192, 32768)}
FWD_CHUNK_N, FWD_CHUNK_WARPS = 8192, 32  # forward's chunked kernel, one program per row
BWD_BYTES_PER_THREAD = 32  # backward: bytes of each input tile per thread (8 fp32 or 16 bf16 values)
CHUNK_N = 4096  # columns per chunk of the chunked kernels
CHUNK_WARPS = 16
BWD_WARPS_PER_SM = 32  # backward: programs per SM are as many as fit in this many warps, at least 1
SPLIT_WARPS_PER_SM = 16  # the same for the split backward, whose register budget it also sets
MAX_SPLIT_N = 131072  # backward: longest row split over a group of programs; past it, chunked
# The split backward, by element size in bytes: slices of at most SLICE_N columns, at least MIN_SLICES
# of them, blocks of about TILE elements per program, BYTES_PER_THREAD of each tile per thread.
# MIN_SLOTS: the flag words are read as a tile of at least that many (padded slots read as zeros).
SPLIT = {2: dict(SLICE_N=2048, MIN_SLICES=2, TILE=2048, BYTES_PER_THREAD=32, MIN_SLOTS=32),
         4: dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32, MIN_SLOTS=1)}
# The split forward, by element size: rows of MIN_N to MAX_SPLIT_N columns, the rest as SPLIT above;
# as many programs per SM as fit in FWD_SPLIT_WARPS_PER_SM warps, which also sets the register budget.
# fp32 only: for 16-bit rows it measured no faster than the chunked kernel (dev/ln_fwd_split_gpu.py).
FWD_SPLIT = {4: dict(MIN_N=MAX_FUSED_N + 1, SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=64,
                     MIN_SLOTS=32)}
FWD_SPLIT_WARPS_PER_SM = 16
# The staged forward (GPU only), by element size: rows of MIN_N to MAX_N columns, copied in pieces of
# CHUNK_N columns, num_warps warps a program, registers capped so that PER_SM programs fit on an SM
# (the shared memory holds that many 64 KB rows). Checked first. A missing entry keeps the other kernels.
FWD_STAGED = {2: dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=16, PER_SM=3)}
SUM_BLOCK_P = 32  # second pass: partial lines summed at a time
SUM_BLOCK_C = 128 if ON_GPU else 4096  # second pass: columns per program (the interpreter wants few)


def fused_config(n_cols, bytes_per_element, bytes_per_thread, min_elements=None):
    """(BLOCK_M, BLOCK_N, num_warps): blocks of at least min_elements (MIN_ELEMENTS), bytes_per_thread
    per thread."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, (min_elements or MIN_ELEMENTS) // block_n)
    num_warps = min(32, max(4, block_m * block_n * bytes_per_element // (32 * bytes_per_thread)))
    return block_m, block_n, num_warps


_occupancy = {}


def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once, what limits it, registers."""
    # Triton compiles one version per dtype of each tensor, per pointer aligned to 16 bytes or not, and
    # per integer that is 1 or a multiple of 16: the key tells those versions apart.
    key = (kernel, tuple((a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                         else (a == 1, a % 16 == 0) if isinstance(a, int) else type(a) for a in args),
           tuple(sorted(meta.items())))
    if key in _occupancy:
        return _occupancy[key]
    threads = 32 * meta["num_warps"]
    if not ON_GPU:  # the interpreter runs programs one after another: any small grid will do
        result = (1, "interpreter", 0)
    else:
        props = torch.cuda.get_device_properties(DEVICE)
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        n_regs = max(compiled.n_regs, 1)
        smem = compiled.metadata.shared
        limits = {
            "threads": props.max_threads_per_multi_processor // threads,
            "registers": getattr(props, "regs_per_multiprocessor", 65536) // (n_regs * threads),
            "shared memory": (getattr(props, "shared_memory_per_multiprocessor", 233472) // smem)
            if smem else 32,
        }
        limit = min(limits, key=limits.get)
        result = (max(1, limits[limit]), limit, n_regs)
    _occupancy[key] = result
    return result


NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4


def fwd_split_plan(x2d, y2d, args, flags, cfg):
    """(meta-parameters, groups) of the split forward for these tensors, or None if a group cannot be
    on the GPU at once. ``args`` are the fused kernel's; the flag words go after mean and rstd."""
    meta = dict(flags, **slice_meta(x2d.shape[1], x2d.element_size(), cfg, (x2d, y2d), FWD_SPLIT_WARPS_PER_SM))
    stand_in = torch.empty(1, device=x2d.device, dtype=torch.int64)  # compiles as the real one; never read
    per_sm = programs_per_sm(layer_norm_fwd_split_kernel, args[:6] + (stand_in,) + args[6:], meta)[0]
    per_sm = min(per_sm, max(1, FWD_SPLIT_WARPS_PER_SM // meta["num_warps"]))
    groups = min(per_sm * NUM_SMS // meta["SLICES"], triton.cdiv(x2d.shape[0], meta["BLOCK_M"]))
    return (meta, groups) if groups > 0 else None


def staged_meta(n_cols, element_size, cfg, regs_per_sm):
    """The staged forward's meta-parameters for rows of n_cols elements under the ``FWD_STAGED`` entry
    cfg (HAS_W and HAS_B aside): registers capped so that ``PER_SM`` programs fit in regs_per_sm."""
    vec = 16 // element_size  # elements per 16-byte copy
    return dict(CHUNKS=triton.cdiv(n_cols, cfg["CHUNK_N"]), VEC=vec, EVEN=n_cols % cfg["CHUNK_N"] == 0,
                REP=cfg["CHUNK_N"] // (vec * 32 * cfg["num_warps"]), num_warps=cfg["num_warps"],
                maxnreg=min(255, regs_per_sm // (32 * cfg["num_warps"] * cfg["PER_SM"]) // 8 * 8))


def fwd_staged_plan(x2d, flags, staged=None):
    """Meta-parameters of the staged forward for the rows of x2d, or None where it is not used: no GPU,
    no entry in ``FWD_STAGED`` (``staged`` overrides it), a row length outside the entry's range, or
    rows whose length or stride is not a multiple of 16 elements, or not 16-byte aligned, or a GPU
    without ``cp.async`` (before Ampere) or without the shared memory for a row."""
    cfg = (FWD_STAGED if staged is None else staged).get(x2d.element_size())
    if not ON_GPU or cfg is None or not cfg["MIN_N"] <= x2d.shape[1] <= cfg["MAX_N"]:
        return None
    if x2d.shape[1] % 16 or x2d.stride(0) % 16 or x2d.data_ptr() % 16:  # 16-byte runs, masked whole
        return None
    props = torch.cuda.get_device_properties(DEVICE)
    meta = staged_meta(x2d.shape[1], x2d.element_size(), cfg, getattr(props, "regs_per_multiprocessor", 65536))
    row_bytes = meta["CHUNKS"] * cfg["CHUNK_N"] * x2d.element_size()
    # cp.async needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer, and the staged row must fit
    # in one program's shared memory (plus a little for the reductions)
    if torch.version.hip or props.major < 8 or \
            getattr(props, "shared_memory_per_block_optin", 49152) < row_bytes + 1024:
        return None
    return dict(flags, **meta)


def fwd_reads_twice(n_cols, element_size):
    """Whether the fused forward reads x twice (layer_norm_fwd_twice_kernel) at this width."""
    low, high = FWD_RELOAD_N.get(min(element_size, 4), (0, -1))
    return low <= n_cols <= high


def layer_norm_rows_forward(x2d, y2d, weight, bias, mean, rstd, eps, persistent=False, max_fused_n=None,
                            split=None, reload=None, staged=None):
    """y2d = layer_norm(x2d) along dim 1; mean, rstd (fp32, one per row) are written too.

    x2d and y2d are 2-D with unit stride along the row; weight and bias 1-D contiguous, or None.
    ``split`` overrides ``FWD_SPLIT`` (``{}``: never split), ``reload`` ``FWD_RELOAD_N`` (True or False:
    rows up to ``max_fused_n`` read x twice, or once, at any width), ``staged`` ``FWD_STAGED``.
    Returns the number of programs launched.
    """
    n_rows, n_cols = x2d.shape
    fused = n_cols <= (MAX_FUSED_N if max_fused_n is None else max_fused_n)
    args = (x2d, y2d, x2d if weight is None else weight, x2d if bias is None else bias, mean, rstd,
            n_rows, n_cols, x2d.stride(0), y2d.stride(0), eps)
    flags = dict(HAS_W=weight is not None, HAS_B=bias is not None)
    meta = fwd_staged_plan(x2d, flags, staged)
    if meta is not None and n_rows > 0:  # one program per row, persistent or not
        layer_norm_fwd_staged_kernel[(n_rows,)](*args[:6], *args[7:], **meta)
        return n_rows
    cfg = (FWD_SPLIT if split is None else split).get(min(x2d.element_size(), 4))
    plan = fwd_split_plan(x2d, y2d, args, flags, cfg) if cfg and cfg["MIN_N"] <= n_cols <= MAX_SPLIT_N else None
    if plan is not None:
        meta, groups = plan
        shares = torch.full((n_rows * meta["SLICES"],), -1, device=x2d.device, dtype=torch.int64)
        layer_norm_fwd_split_kernel[(groups * meta["SLICES"],)](*args[:6], shares, *args[6:], **meta)
        return groups * meta["SLICES"]
    if fused:
        if reload is None:
            reload = fwd_reads_twice(n_cols, x2d.element_size())
        block_m, block_n, num_warps = fused_config(n_cols, x2d.element_size(), FWD_BYTES_PER_THREAD)
        if reload:  # one program per row, persistent or not
            block_m, persistent = 1, False
            kernel, meta = layer_norm_fwd_twice_kernel, dict(flags, BLOCK_N=block_n, num_warps=num_warps)
        else:
            kernel, meta = layer_norm_fwd_kernel, dict(flags, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
            # Too few bytes on their way to an SM when few programs fit on it (a wide row takes many
            # registers): then each program takes twice the rows, with the same warps.
            if ON_GPU and n_rows > block_m:
                per_sm = programs_per_sm(kernel, args, meta)[0]
                if per_sm * block_m * block_n * x2d.element_size() < FWD_MIN_BYTES_PER_SM:
                    meta["BLOCK_M"] = block_m = 2 * block_m
        n_tasks = triton.cdiv(n_rows, block_m)
    else:
        kernel, meta = layer_norm_fwd_chunked_kernel, dict(flags, CHUNK_N=FWD_CHUNK_N, num_warps=FWD_CHUNK_WARPS)
        n_tasks = n_rows
    grid = n_tasks
    if persistent:
        grid = min(n_tasks, programs_per_sm(kernel, args, meta)[0] * NUM_SMS)
    kernel[(grid,)](*args, **meta)
    return grid


def slice_meta(n_cols, element_size, cfg, tensors, warps_per_sm):
    """The meta-parameters both split kernels share, for rows of n_cols split as ``cfg`` says (of the
    ``tensors`` given: whether their 16-bit rows can be loaded as 32-bit words); ``warps_per_sm`` sets
    the register budget."""
    slices = 1  # the interpreter runs one program at a time: a program must never wait for another
    if ON_GPU:
        slices = max(cfg["MIN_SLICES"], triton.cdiv(n_cols, cfg["SLICE_N"]))
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    block_m = max(1, cfg["TILE"] // block_n)
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * cfg["BYTES_PER_THREAD"])))
    # two 16-bit elements per 32-bit word: rows of even length, even strides, 4-byte aligned tensors
    pack = element_size == 2 and n_cols % 2 == 0 and all(
        t.stride(0) % 2 == 0 and t.data_ptr() % 4 == 0 for t in tensors)
    meta = dict(SLICES=slices, SLOTS=max(cfg.get("MIN_SLOTS", 1), triton.next_power_of_2(slices)), PACK=pack,
                EVEN=n_cols == slices * block_n, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    # Each thread's share of the registers when warps_per_sm warps live on an SM. Unpacked 16-bit rows
    # need more than that: they run with fewer programs per SM rather than spill their loads.
    if ON_GPU and (pack or element_size == 4):
        regs = getattr(torch.cuda.get_device_properties(DEVICE), "regs_per_multiprocessor", 65536)
        meta["maxnreg"] = min(255, regs // (32 * max(warps_per_sm, num_warps)) // 8 * 8)
    return meta


def split_config(n_cols, dtype, has_w, compute_dwdb, split=None, tensors=()):
    """meta-parameters of the split backward for rows of n_cols (of the tensors x2d, dy2d, dx2d, if
    given: whether their 16-bit rows can be loaded as 32-bit words)."""
    element_size = torch.empty((), dtype=dtype).element_size()
    meta = slice_meta(n_cols, element_size, (split or SPLIT)[min(element_size, 4)], tensors, SPLIT_WARPS_PER_SM)
    return dict(meta, HAS_W=has_w, COMPUTE_DWDB=compute_dwdb, FLAG_WORDS=meta["num_warps"] <= 16)


def split_buffers(n_rows, meta, device, launch=True):
    """The shares' slots (filled with ones when they are flag words) and the counters (zeroed).
    ``launch=False``: one-element buffers of the same types, enough to compile the kernel, and left
    uninitialized (nothing reads them; a fill would be one more kernel on every call)."""
    if not launch:
        return (torch.empty(1, device=device, dtype=torch.int64 if meta["FLAG_WORDS"] else torch.float32),
                torch.empty(1, device=device, dtype=torch.int64 if meta["FLAG_WORDS"] else torch.int32))
    size = n_rows * meta["SLICES"]
    if meta["FLAG_WORDS"]:
        shares = counter = torch.full((size,), -1, device=device, dtype=torch.int64)
    else:
        shares = torch.empty(2 * size, device=device, dtype=torch.float32)
        counter = torch.zeros(triton.cdiv(n_rows, meta["BLOCK_M"]), device=device, dtype=torch.int32)
    return shares, counter


def bwd_args(kernel, x2d, dy2d, dx2d, weight, mean, rstd, dw_partial, db_partial, meta, rows_per_program,
             launch=True):
    """The arguments of a backward kernel, in order."""
    n_rows, n_cols = x2d.shape
    args = (x2d, dy2d, dx2d, x2d if weight is None else weight, mean, rstd, dw_partial, db_partial)
    if kernel is layer_norm_bwd_split_kernel:
        args += split_buffers(n_rows, meta, x2d.device, launch)
    args += (n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    if kernel is layer_norm_bwd_chunked_kernel:  # contiguous runs of rows; the others stride
        args += (rows_per_program,)
    return args


def bwd_plan(x2d, has_w, compute_dwdb, max_fused_n=None, programs=None, max_split_n=None, split=None,
             tensors=None):
    """Kernel, meta-parameters and persistent grid of the backward for rows like x2d's.

    ``tensors`` (dy2d, dx2d, weight, mean, rstd) are the call's own: the kernel is compiled for them to
    learn its occupancy (Triton compiles one version per dtype, alignment and stride class). Without
    them, stand-ins of x2d's dtype. ``programs`` caps the number of partial lines (programs, or groups of
    programs for the split kernel); ``max_fused_n``, ``max_split_n`` and ``split`` override the limits.
    """
    n_rows, n_cols = x2d.shape
    flags = dict(HAS_W=has_w, COMPUTE_DWDB=compute_dwdb)
    fp32 = torch.empty(1, device=x2d.device, dtype=torch.float32)
    if tensors is None:
        tensors = (x2d, x2d, x2d if has_w else None, fp32, fp32)
    dy2d, dx2d, weight, mean, rstd = tensors
    slices = 1
    if n_cols <= (MAX_BWD_FUSED_N[min(x2d.element_size(), 4)] if max_fused_n is None else max_fused_n):
        block_m, block_n, num_warps = fused_config(n_cols, x2d.element_size(), BWD_BYTES_PER_THREAD,
                                                   BWD_MIN_BYTES // x2d.element_size())
        kernel = layer_norm_bwd_kernel
        meta = dict(flags, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    elif n_cols <= (MAX_SPLIT_N if max_split_n is None else max_split_n):
        kernel = layer_norm_bwd_split_kernel
        meta = split_config(n_cols, x2d.dtype, has_w, compute_dwdb, split, (x2d, dy2d, dx2d))
        block_m, slices = meta["BLOCK_M"], meta["SLICES"]
    else:
        block_m, kernel = 1, layer_norm_bwd_chunked_kernel
        meta = dict(flags, CHUNK_N=CHUNK_N, num_warps=CHUNK_WARPS)
    warm_args = bwd_args(kernel, x2d, dy2d, dx2d, weight, mean, rstd, fp32, fp32, meta, 1, launch=False)
    per_sm, limit, n_regs = programs_per_sm(kernel, warm_args, meta)
    n_blocks = triton.cdiv(n_rows, block_m)
    warps_per_sm = SPLIT_WARPS_PER_SM if kernel is layer_norm_bwd_split_kernel else BWD_WARPS_PER_SM
    lines = min(per_sm, max(1, warps_per_sm // meta["num_warps"])) * NUM_SMS // slices
    if kernel is layer_norm_bwd_split_kernel and lines == 0:  # a group cannot be on the GPU at once
        return bwd_plan(x2d, has_w, compute_dwdb, max_fused_n, programs, 0, split, tensors)
    lines = max(1, min(lines if programs is None else programs, n_blocks))
    rows_per_program = triton.cdiv(n_blocks, lines) * block_m
    lines = triton.cdiv(n_rows, rows_per_program)  # every program gets at least one row
    return dict(kernel=kernel, meta=meta, programs=lines * slices, lines=lines, rows_per_program=rows_per_program,
                per_sm=per_sm, limit=limit, n_regs=n_regs, block_m=block_m)


def sum_partials(dw_partial, db_partial, dw, db):
    """dw = dw_partial.sum(0), db = db_partial.sum(0), in a fixed order; dw and db in any float dtype."""
    n_partials, n_cols = dw_partial.shape
    sum_partials_kernel[(triton.cdiv(n_cols, SUM_BLOCK_C),)](
        dw_partial, db_partial, dw, db, n_partials, n_cols, BLOCK_P=SUM_BLOCK_P, BLOCK_C=SUM_BLOCK_C,
        num_warps=4,
    )


def layer_norm_rows_backward(x2d, dy2d, dx2d, weight, mean, rstd, dw=None, db=None, programs=None,
                             max_fused_n=None, max_split_n=None, split=None):
    """Design 2. dx2d <- dx; and, when dw and db (1-D, N elements) are given, the sums over rows.

    Returns the plan used (its grid and rows per program).
    """
    n_rows, n_cols = x2d.shape
    compute = dw is not None
    plan = bwd_plan(x2d, weight is not None, compute, max_fused_n, programs, max_split_n, split,
                    (dy2d, dx2d, weight, mean, rstd))
    # one line per program (per group for the split kernel), all written: nothing needs clearing
    shape = (plan["lines"], n_cols) if compute else (1,)
    dw_partial = torch.empty(shape, device=x2d.device, dtype=torch.float32)
    db_partial = torch.empty(shape, device=x2d.device, dtype=torch.float32)
    args = bwd_args(plan["kernel"], x2d, dy2d, dx2d, weight, mean, rstd, dw_partial, db_partial,
                    plan["meta"], plan["rows_per_program"])
    plan["kernel"][(plan["programs"],)](*args, **plan["meta"])
    if compute:
        sum_partials(dw_partial, db_partial, dw, db)
    return plan


def classic_group_size(n_cols):
    """GROUP_SIZE_M of Triton's layer-norm tutorial: fewer locks for wider rows."""
    if n_cols <= 1024:
        return 256
    if n_cols <= 4096:
        return 128
    if n_cols <= 8192:
        return 96
    return 64


def layer_norm_rows_backward_classic(x2d, dy2d, dx2d, weight, mean, rstd, dw, db):
    """Design 1: one program per row, dw and db added under GROUP_SIZE_M spin locks, fp32 buffers."""
    n_rows, n_cols = x2d.shape
    block_n = triton.next_power_of_2(n_cols)
    if block_n * x2d.element_size() > 65536:
        raise ValueError(
            f"classic layer-norm backward: a row of {n_cols} {x2d.dtype} elements exceeds its limit of "
            "64 KB per row (it keeps a whole row in registers); use layer_norm() instead"
        )
    groups = classic_group_size(n_cols)
    buffers = torch.zeros((2, groups, n_cols), device=x2d.device, dtype=torch.float32)
    locks = torch.zeros(groups, device=x2d.device, dtype=torch.int32)
    layer_norm_bwd_classic_kernel[(n_rows,)](
        x2d, dy2d, dx2d, x2d if weight is None else weight, mean, rstd, buffers[0], buffers[1], locks,
        n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0),
        GROUP_SIZE_M=groups, HAS_W=weight is not None, BLOCK_N=block_n,
        num_warps=min(max(block_n // 256, 1), 8),
    )
    sum_partials(buffers[0], buffers[1], dw, db)


# %%
# The drop-in function
# --------------------
# ``layer_norm(x, normalized_shape, weight, bias, eps)`` takes what
# :func:`torch.nn.functional.layer_norm` takes: any leading shape, a ``normalized_shape`` of one or
# more trailing dimensions (flattened into rows of :math:`N` elements), ``weight`` and ``bias`` each
# optional, non-contiguous and empty tensors, and gradients for ``x``, ``weight`` and ``bias``. The
# kernels want rows with unit stride: a tensor whose last dimensions are already laid out that way is
# used in place, anything else is copied once. The output is contiguous, as torch's is. Rows of any
# length work (the chunked kernels loop over them); what the kernels cannot do raises an error that
# says so.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"layer_norm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"layer_norm: {name} has dtype {t.dtype}; these kernels support float32, float16 and "
            "bfloat16 (use torch.nn.functional.layer_norm for other dtypes)"
        )
    if ON_GPU and t.device.type != "cuda":
        raise ValueError(
            f"layer_norm: {name} is on {t.device}, but a CUDA GPU is in use and the kernels run there; "
            "move it with .to('cuda')"
        )
    if not ON_GPU and t.device.type != "cpu":
        raise ValueError(
            f"layer_norm: {name} is on {t.device}; without a CUDA GPU the kernels run on the CPU "
            "through Triton's interpreter and need CPU tensors"
        )


def _rows(t, n_rows, n_cols):
    """A (n_rows, n_cols) view of t with unit stride along the row, copying only if needed."""
    t2d = t.reshape(n_rows, n_cols)
    if n_cols > 1 and t2d.stride(1) != 1:
        t2d = t2d.contiguous()
    return t2d


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, normalized_shape, eps, design):
        n_cols = math.prod(normalized_shape)
        n_rows = math.prod(x.shape[: x.dim() - len(normalized_shape)])
        x2d = _rows(x, n_rows, n_cols)
        w = None if weight is None else weight.reshape(n_cols).contiguous()
        b = None if bias is None else bias.reshape(n_cols).contiguous()
        y2d = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        mean = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        if y2d.numel() > 0:
            layer_norm_rows_forward(x2d, y2d, w, b, mean, rstd, eps)
        ctx.save_for_backward(x2d, w, mean, rstd)
        ctx.shapes = (x.shape, n_rows, n_cols, weight, bias)
        ctx.design = design
        return y2d.view(x.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2d, w, mean, rstd = ctx.saved_tensors
        x_shape, n_rows, n_cols, weight, bias = ctx.shapes
        _check(dy, "the gradient")
        dy2d = _rows(dy, n_rows, n_cols)
        dx2d = torch.empty((n_rows, n_cols), device=dy.device, dtype=x2d.dtype)
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = bias is not None and ctx.needs_input_grad[2]
        dw = torch.zeros(n_cols, device=dy.device, dtype=weight.dtype if need_dw else torch.float32)
        db = torch.zeros(n_cols, device=dy.device, dtype=bias.dtype if need_db else torch.float32)
        if dx2d.numel() > 0:
            if ctx.design == "classic":
                layer_norm_rows_backward_classic(x2d, dy2d, dx2d, w, mean, rstd, dw, db)
            elif need_dw or need_db:
                layer_norm_rows_backward(x2d, dy2d, dx2d, w, mean, rstd, dw, db)
            else:
                layer_norm_rows_backward(x2d, dy2d, dx2d, w, mean, rstd)
        return (dx2d.view(x_shape), dw.view(weight.shape) if need_dw else None,
                db.view(bias.shape) if need_db else None, None, None, None)


def _layer_norm(x, normalized_shape, weight, bias, eps, design):
    _check(x, "x")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    try:
        if isinstance(normalized_shape, (str, bytes)):
            raise TypeError
        normalized_shape = tuple(int(d) for d in normalized_shape)
    except (TypeError, ValueError):
        raise TypeError(
            f"layer_norm: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
        ) from None
    k = len(normalized_shape)
    if k == 0 or x.dim() < k or tuple(x.shape[x.dim() - k:]) != normalized_shape:
        raise ValueError(
            f"layer_norm: normalized_shape {list(normalized_shape)} must be one or more trailing "
            f"dimensions of x, whose shape is {list(x.shape)}"
        )
    for t, name in ((weight, "weight"), (bias, "bias")):
        if t is None:
            continue
        _check(t, name)
        if tuple(t.shape) != normalized_shape:
            raise ValueError(
                f"layer_norm: {name} has shape {list(t.shape)}, expected normalized_shape "
                f"{list(normalized_shape)}"
            )
        if t.device != x.device:
            raise ValueError(f"layer_norm: {name} is on {t.device} but x is on {x.device}")
    if math.prod(normalized_shape) >= 2**31:
        raise ValueError(
            f"layer_norm: rows of {math.prod(normalized_shape)} elements exceed the kernels' limit of "
            "2**31 - 1 elements per row"
        )
    return LayerNormFunction.apply(x, weight, bias, normalized_shape, float(eps), design)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Drop-in for torch.nn.functional.layer_norm on float32, float16 and bfloat16, with autograd."""
    return _layer_norm(x, normalized_shape, weight, bias, eps, "persistent")


def layer_norm_classic(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """The same forward, with design 1 (spin locks) for the backward: for comparison only."""
    return _layer_norm(x, normalized_shape, weight, bias, eps, "classic")


# %%
# Correctness
# -----------
# The reference is the naive layer norm above, in float64 and differentiated by autograd, on the same
# inputs (the same rounded values of :math:`x`, :math:`w`, :math:`b` and :math:`dy`). The error is
# :math:`\lVert out - ref \rVert / \lVert ref \rVert` for :math:`y`, :math:`dx`, :math:`dw` and
# :math:`db`, next to PyTorch's own error in the same dtype, and the :math:`dw` of design 1 where it
# runs. The rows have a mean far from zero, which is what breaks a careless variance. The shapes cover a
# single column, short rows packed several to a program, odd lengths, and rows long enough for the
# chunked kernels.

torch.manual_seed(0)
if ON_GPU:
    CHECK_SHAPES = [(4096, 1), (3000, 257), (2048, 4096), (512, 12_288), (64, 30_000), (16, 100_003)]
else:
    CHECK_SHAPES = [(17, 1), (33, 257), (6, 1000), (3, 40_000)]


def rel_error(out, ref, scale=1.0):
    """||out - ref|| / ||ref||. Where ref is exactly zero (dx when N = 1, whose terms all cancel), the
    error is taken relative to ``scale``, the size of the terms that cancel."""
    return ((out.double() - ref).norm() / (ref.norm() if ref.norm() > 0 else scale)).item()


def check_row(shape, dtype):
    n = shape[-1]
    x = (torch.randn(shape, device=DEVICE) * 3 + 10).to(dtype).requires_grad_(True)
    w = torch.randn(n, device=DEVICE).to(dtype).requires_grad_(True)
    b = torch.randn(n, device=DEVICE).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    ins64 = [t.detach().double().requires_grad_(True) for t in (x, w, b)]
    y64 = naive_layer_norm(*ins64)  # the textbook formula: exact zeros where N = 1
    grads64 = torch.autograd.grad(y64, ins64, dy.double())
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype).replace("torch.", "")}
    providers = [("ours", layer_norm), ("torch", torch.nn.functional.layer_norm)]
    if triton.next_power_of_2(n) * x.element_size() <= 65536:
        providers.append(("classic", layer_norm_classic))
    for name, fn in providers:
        y = fn(x, (n,), w, b)
        grads = torch.autograd.grad(y, (x, w, b), dy)
        if name == "classic":  # same forward and dx as ours; only its dw, db differ
            row["classic dw"] = rel_error(grads[1], grads64[1])
            continue
        row[f"{name} y"] = rel_error(y, y64.detach())
        # dx = rstd * (w*dy - mean(w*dy) - x_hat * mean(w*dy*x_hat)): its terms are about |w*dy| * rstd
        dx_terms = (dy.double() * ins64[1].detach()).norm().item() / math.sqrt(1e-5)
        for label, g, g64 in zip(("dx", "dw", "db"), grads, grads64):
            row[f"{name} {label}"] = rel_error(g, g64, dx_terms if label == "dx" else 1.0)
    return row


errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# The page is only built if every error is within its dtype's bound: a few units of rounding of the
# output dtype. (Triton's interpreter truncates fp32 -> bf16 instead of rounding to nearest, which
# doubles the bf16 error there; a GPU rounds.)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
OURS = ["ours y", "ours dx", "ours dw", "ours db", "classic dw"]
_bad = errors[~(errors[OURS].max(axis=1) <= errors.dtype.map(TOLERANCE))]
assert _bad.empty, "errors above tolerance " + str(TOLERANCE) + ":\n" + _bad.to_string()
errors.style.format({c: "{:.1e}" for c in errors.columns if c not in ("shape", "dtype")},
                    na_rep="-").hide(axis="index")

# %%
# Same inputs, same answer?
# -------------------------
# Both designs, several backward passes each on the same inputs (on a GPU ten, on a tensor of the size
# the benchmark uses at :math:`N = 4096`). The table counts how many *different* results (bit patterns) each gradient
# took, and the largest difference between two runs relative to the largest :math:`|dw|`.

if ON_GPU:
    DETERMINISM_SHAPE, DETERMINISM_RUNS = (2**26 // 4096, 4096), 10
else:  # the interpreter runs design 1 one program per row, slowly: fewer rows and runs
    DETERMINISM_SHAPE, DETERMINISM_RUNS = (16, 128), 3


def determinism_table(runs=DETERMINISM_RUNS):
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(DETERMINISM_SHAPE, device=DEVICE, dtype=dtype)
        dy = torch.randn_like(x)
        n_rows, n_cols = x.shape
        w = torch.randn(n_cols, device=DEVICE, dtype=dtype)
        y = torch.empty_like(x)
        mean = torch.empty(n_rows, device=DEVICE, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        layer_norm_rows_forward(x, y, w, None, mean, rstd, 1e-5)
        for design, backward in (("1: spin locks", layer_norm_rows_backward_classic),
                                 ("2: persistent, lock-free", layer_norm_rows_backward)):
            results = {"dx": [], "dw": [], "db": []}
            for _ in range(runs):
                dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
                backward(x, dy, dx, w, mean, rstd, dw, db)
                for name, t in (("dx", dx), ("dw", dw), ("db", db)):
                    results[name].append(t)
            row = {"design": design, "dtype": str(dtype).replace("torch.", ""), "runs": runs}
            for name, ts in results.items():  # distinct bit patterns, compared on the device
                distinct = []
                for t in ts:
                    if not any(torch.equal(t.view(torch.uint8), d.view(torch.uint8)) for d in distinct):
                        distinct.append(t)
                row[f"distinct {name}"] = len(distinct)
            dws = torch.stack([t.float() for t in results["dw"]])
            row["max dw spread / max |dw|"] = ((dws.max(0).values - dws.min(0).values).max()
                                               / dws.abs().max()).item()
            rows.append(row)
        del x, dy, y
    return pd.DataFrame(rows)


determinism = determinism_table()
determinism.style.format({"max dw spread / max |dw|": "{:.1e}"}).hide(axis="index")

# %%
# Computed from that table:

def determinism_summary():
    lines = []
    for design, part in determinism.groupby("design", sort=False):
        worst = part[["distinct dx", "distinct dw", "distinct db"]].max().max()
        lines.append(f"design {design}: at most {worst} distinct result(s) in {part.runs.iloc[0]} runs "
                     f"of any gradient, dtypes {', '.join(part.dtype)}.")
    if not ON_GPU:
        lines.append("The interpreter runs programs one after another, in order, so even the locks are "
                     "taken in the same order every time: only a GPU shows design 1's variation.")
    print("\n".join(lines))


determinism_summary()

# %%
# The plan at each width
# ----------------------
# What the heuristics choose for the benchmark's tensors (:math:`M N` fixed, so wider rows mean fewer of
# them), in bf16. *partial bytes* is the traffic of the partial buffer (written by the backward kernel,
# read by the second pass) relative to the :math:`3MN` elements of :math:`x`, :math:`dy` and
# :math:`dx`: the price of the lock-free reduction, largest where rows are wide and few. On the GPU
# registers per thread and the number of programs one SM holds come from the compiled kernel.

if ON_GPU:
    TOTAL_ELEMENTS = 2**26
    SWEEP_N = [2**k for k in range(9, 18)]
else:
    TOTAL_ELEMENTS = 2**14
    SWEEP_N = [256, 2048, 16384, 65536]


def plan_table(dtype=torch.bfloat16):
    rows = []
    for n_cols in SWEEP_N:
        n_rows = max(1, TOTAL_ELEMENTS // n_cols)
        x = torch.empty((n_rows, n_cols), device=DEVICE, dtype=dtype)
        plan = bwd_plan(x, True, True)
        kind = {layer_norm_bwd_kernel: "fused", layer_norm_bwd_split_kernel: "split"}.get(plan["kernel"], "chunked")
        partial_bytes = 2 * 2 * 4 * plan["lines"] * n_cols
        rows.append({
            "N": n_cols, "M": n_rows,
            "forward": "staged (Gluon)" if fwd_staged_plan(x, {}) else
            ("fused, x read twice" if fwd_reads_twice(n_cols, x.element_size()) else "fused")
            if n_cols <= MAX_FUSED_N else "chunked",
            "backward": kind, "slices": plan["meta"].get("SLICES", 1),
            "BLOCK_M": plan["block_m"], "BLOCK_N": plan["meta"].get("BLOCK_N", CHUNK_N),
            "num_warps": plan["meta"]["num_warps"],
            "registers / thread": plan["n_regs"] if ON_GPU else "-",
            "programs / SM": plan["per_sm"] if ON_GPU else "-",
            "grid": plan["programs"], "rows / program": plan["rows_per_program"],
            "partial bytes, % of 3MN": 100 * partial_bytes / (3 * n_rows * n_cols * x.element_size()),
        })
        del x
    return pd.DataFrame(rows).set_index("N").style.format({"partial bytes, % of 3MN": "{:.1f}%"})


plan_table()

# %%
# Benchmark
# ---------
# Each row of the sweep uses :math:`M \times N` elements with :math:`M N = 2^{26}` on a GPU (256 MB in
# fp32, 128 MB in bf16: far more than the 50 MB L2 cache, so every pass goes to memory). Every provider
# runs on the same tensors in the same process, timed by :func:`triton.testing.do_bench` (median, the
# L2 cache flushed before each run, warm-up excluded), on replays of a CUDA graph that captured the
# call: the GPU's time, without the Python work around the kernels. The *speed of light* is a
# device-to-device copy of the same tensor, timed the same way (without a graph), counting the bytes
# read and written.
#
# GB/s counts the bytes a perfect kernel must move: forward, :math:`x` read and :math:`y` written;
# backward, :math:`x` and :math:`dy` read and :math:`dx` written. The weight, the bias, their gradients,
# the saved statistics and the partial buffers are not counted: they are the kernel's overhead. Both
# directions are timed as in training, on inputs that require gradients: the forward saves what its
# backward needs, and the backward is ``torch.autograd.grad`` of :math:`x`, :math:`w` and :math:`b`, so
# it includes every kernel each provider launches for them. *classic* is our forward with design 1's
# backward. torch.compile compiles the forward and the backward of each shape once, together;
# Liger-Kernel and Apex are used when installed. A provider
# that does not support a size has a missing point ("-"), not a zero.

try:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
except ImportError:
    LigerLayerNormFunction = None
try:
    from apex.normalization.fused_layer_norm import fused_layer_norm_affine
except ImportError:
    fused_layer_norm_affine = None


if ON_GPU:
    # A CUDA graph cannot be captured on the default stream, and autograd runs a backward on the stream
    # of its forward: the rest of this page runs on a stream of its own.
    torch.cuda.set_stream(torch.cuda.Stream())


def bench(fn, graph=True):
    """Median time of one call of fn() in ms.

    On the GPU the call is captured once in a CUDA graph, and triton.testing.do_bench times replays
    of it (median, the L2 cache flushed before each, warm-up excluded): the same kernels with the same
    arguments, without Python's per-call work, so every provider is timed on what its kernels cost
    the GPU. ``graph=False`` times fn() itself: the speed of light does, because inside a graph CUDA
    may turn a large device-to-device copy into a copy-engine transfer, slower than the copy kernel
    PyTorch launches. On the CPU, a wall clock.
    """
    fn()  # compile and warm up outside the timing
    if ON_GPU:
        torch.cuda.synchronize()
        timed = fn
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured, stream=torch.cuda.current_stream()):
                fn()
            timed = captured.replay
        return triton.testing.do_bench(timed, warmup=5, rep=20, return_mode="median")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def providers():
    """name -> fn(x, w, b), layer norm over the last dim; peers that cannot run here are left out."""
    found = {
        "naive": naive_layer_norm,
        "torch": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b),
    }
    if ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        dynamo = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, 1024)  # one compilation per shape and dtype in the sweep
        found["torch.compile"] = torch.compile(
            lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b), dynamic=False)
        if LigerLayerNormFunction is not None:
            found["Liger"] = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
        if fused_layer_norm_affine is not None:
            found["Apex"] = lambda x, w, b: fused_layer_norm_affine(x, w, b, x.shape[-1:], 1e-5)
    found["classic"] = lambda x, w, b: layer_norm_classic(x, x.shape[-1:], w, b)
    found["ours"] = lambda x, w, b: layer_norm(x, x.shape[-1:], w, b)
    return found


PEERS = ["torch", "torch.compile", "Liger", "Apex"]
skipped = []


def run_sweep():
    records = []
    fns = providers()
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in SWEEP_N:
            n_rows = max(1, TOTAL_ELEMENTS // n_cols)
            x = torch.randn((n_rows, n_cols), device=DEVICE, dtype=dtype)
            w = torch.randn(n_cols, device=DEVICE, dtype=dtype)
            b = torch.randn(n_cols, device=DEVICE, dtype=dtype)
            dy = torch.randn_like(x)
            nbytes = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy_ms = bench(lambda: out.copy_(x), graph=False)
            reference = torch.nn.functional.layer_norm(x.float(), (n_cols,), w.float(), b.float())
            inputs = [t.requires_grad_(True) for t in (x, w, b)]
            for name, fn in fns.items():
                for direction in ("forward", "backward"):
                    rec = {"direction": direction, "dtype": str(dtype).replace("torch.", ""),
                           "N": n_cols, "provider": name,
                           "speed of light GB/s": 2 * nbytes / copy_ms * 1e-6}
                    try:
                        y = fn(*inputs)
                        if direction == "forward":
                            if name in ("ours", "classic"):
                                torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=2e-2)
                            ms, moved = bench(lambda: fn(*inputs)), 2 * nbytes
                        else:
                            ms = bench(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
                            moved = 3 * nbytes
                        rec["GB/s"] = moved / ms * 1e-6
                    except Exception as err:  # a peer's limit or failure: the point is missing
                        if name == "ours":
                            raise
                        skipped.append(f"{name}, {direction}, {rec['dtype']}, N = {n_cols}: "
                                       f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
                        rec["GB/s"] = float("nan")
                    rec["% of speed of light"] = 100 * rec["GB/s"] / rec["speed of light GB/s"]
                    records.append(rec)
                    y = None
            del x, dy, out, reference, w, b, inputs
            if ON_GPU:
                torch.cuda.empty_cache()
    return pd.DataFrame(records)


results = run_sweep()
print("Points left out:\n" + "\n".join(skipped) if skipped else "Every provider ran at every size.")


def sweep_table(direction):
    """GB/s per provider (columns) and row length (rows), with ours as % of the speed of light."""
    part = results[results.direction == direction]
    table = part.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in providers() if p in table.columns]]
    table.insert(0, "speed of light", part.groupby(["dtype", "N"])["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = [c for c in table.columns if c in PEERS]
    table["ours / best peer"] = table["ours"] / table[peers].max(axis=1)
    formats = {column: "{:.0f}" for column in table.columns}  # one call: a second .format() resets the rest
    formats.update({"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"})
    return table.style.format(formats, na_rep="-")


# %%
# Forward, GB/s (higher is better):

sweep_table("forward")

# %%
# Backward, GB/s:

sweep_table("backward")

# %%
# The same numbers as a plot, each provider as a fraction of the copy measured next to it:

def plot_sweep():
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey=True, facecolor="white")
    styles = {"naive": ":", "torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)),
              "Apex": (0, (5, 2)), "classic": (0, (1, 1)), "ours": "-"}
    for (i, direction), (j, dtype) in [((i, d), (j, t)) for i, d in enumerate(["forward", "backward"])
                                      for j, t in enumerate(["float32", "bfloat16"])]:
        ax = axes[i][j]
        part = results[(results.direction == direction) & (results.dtype == dtype)]
        for name, style in styles.items():
            line = part[part.provider == name]
            if len(line) and line["GB/s"].notna().any():
                ax.plot(line.N, line["% of speed of light"], linestyle=style, marker="o", markersize=3,
                        linewidth=2.5 if name == "ours" else 1.5, label=name)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{direction}, {dtype}")
        ax.grid(True, alpha=0.3)
        if j == 0:
            ax.set_ylabel("% of the copy's GB/s")
        if i == 1:
            ax.set_xlabel("row length N (elements)")
    axes[0][0].legend(loc="lower left", fontsize=8)
    where = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU, Triton interpreter (not GPU timings)"
    fig.suptitle(f"Layer norm, M x N = {TOTAL_ELEMENTS:,} elements, on {where}")
    fig.tight_layout()


plot_sweep()

# %%
# Reading the numbers
# -------------------
# The sentences below are computed from the tables above, in this build.

def summary():
    lines = []
    for direction in ("forward", "backward"):
        for dtype in ("float32", "bfloat16"):
            part = results[(results.direction == direction) & (results.dtype == dtype)]
            ours = part[part.provider == "ours"].set_index("N")
            peers = part[part.provider.isin(PEERS)].groupby("N")["GB/s"].max()
            pct = ours["% of speed of light"]
            ratio = (ours["GB/s"] / peers).dropna()
            line = (f"{direction}, {dtype}: ours runs at {pct.min():.3g}% (N = {pct.idxmin()}) to "
                    f"{pct.max():.3g}% (N = {pct.idxmax()}) of the copy")
            if len(ratio):
                line += (f"; against the best peer at each N, from {ratio.min():.3g}x "
                         f"(N = {ratio.idxmin()}) to {ratio.max():.3g}x (N = {ratio.idxmax()})")
            if direction == "backward":
                classic = (ours["GB/s"] / part[part.provider == "classic"].set_index("N")["GB/s"]).dropna()
                if len(classic):
                    line += (f"; design 2 is {classic.min():.3g}x to {classic.max():.3g}x as fast as "
                             f"design 1 where both run")
            lines.append(line + ".")
    fwd = results[(results.direction == "forward") & (results.dtype == "float32")].set_index(["N", "provider"])["GB/s"]
    n_mid = SWEEP_N[len(SWEEP_N) // 2]
    lines.append(
        f"Fusion: at N = {n_mid} in fp32, the fused forward is {fwd[(n_mid, 'ours')] / fwd[(n_mid, 'naive')]:.3g}x "
        f"faster than the naive layer norm (the bytes model predicted 6x)."
    )
    if not ON_GPU:
        lines.append("These are interpreter timings on a CPU: they do not say anything about GPU speed.")
    print("\n".join(lines))


summary()

# %%
# Does staging pay?
# -----------------
# 16-bit rows from 16 K to 32 K columns, forward: the staged kernel against what the launcher runs
# without it (``staged={}``), each timed as above next to a copy of the same bytes. Rows of 16384
# columns are below ``FWD_STAGED``'s range (forced here, for comparison) and 24576 is between the
# sweep's powers of two. Without a GPU there is nothing to compare: Gluon kernels do not run in
# Triton's interpreter.

FORCE_STAGED = {size: dict(cfg, MIN_N=1) for size, cfg in FWD_STAGED.items()}


def staged_table():
    rows = []
    for n_cols in (16384, 24576, 32768):
        x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
        w, b = torch.randn(n_cols, device=DEVICE, dtype=x.dtype), torch.randn(n_cols, device=DEVICE, dtype=x.dtype)
        y, out = torch.empty_like(x), torch.empty_like(x)
        mean = torch.empty(x.shape[0], device=DEVICE)
        rstd = torch.empty_like(mean)
        moved = 2 * x.numel() * x.element_size()
        row = {"dtype": "bfloat16", "N": n_cols, "copy GB/s": moved / bench(lambda: out.copy_(x), graph=False) * 1e-6}
        for label, staged in (("staged", FORCE_STAGED), ("without", {})):
            ms = bench(lambda: layer_norm_rows_forward(x, y, w, b, mean, rstd, 1e-5, staged=staged))
            row[f"{label}: % of copy"] = 100 * moved / ms * 1e-6 / row["copy GB/s"]
        rows.append(row)
        del x, y, out
    return pd.DataFrame(rows).set_index(["dtype", "N"])


if ON_GPU:
    staged_vs_registers = staged_table()
    for (dtype, n_cols), row in staged_vs_registers.iterrows():
        print(f"{dtype}, N = {n_cols}: staged {row['staged: % of copy']:.1f}% of the copy, "
              f"without it {row['without: % of copy']:.1f}%")
else:
    staged_vs_registers = pd.DataFrame({"": ["Gluon kernels need a GPU: nothing measured on this machine"]})
staged_vs_registers.style.format({c: "{:.1f}" for c in staged_vs_registers.columns if "GB/s" in c or "%" in c})

# %%
# What still limits the kernel, and what to try
# ---------------------------------------------
# * **Wide bf16 rows in the backward.** The split kernel reads each row once and rarely waits; in
#   fp32 it runs near the copy, in bf16 a few points further from it (compare the dtypes in the table
#   above). What set the bf16 speed, on an H100, was how many programs share an SM: two 8-warp programs
#   per SM, three, four 4-warp programs measured better at each step, as long as nothing spilled
#   (``dev/ln_split_v2_gpu.py``). The register budget is now the wall: 128 registers for four programs of
#   4 warps. Fewer registers per element would let more in: paired bf16x2 arithmetic, :math:`dw` and
#   :math:`db` kept in shared memory instead of registers, or :math:`dw` and :math:`db` moved to a pass
#   of their own, at the price of reading :math:`x` and :math:`dy` twice.
# * **Few, wide rows.** At a fixed :math:`MN`, wide rows mean few of them: each program gets few rows
#   to amortize its partial line over, and the partial buffer grows relative to the main traffic (the
#   plan table shows by how much). A grid with fewer programs than SMs would shrink it, at the price of
#   bandwidth; a reduction of the partial lines inside the backward kernel (the last program to finish
#   sums them, found with one atomic counter) would save a launch.
# * **The widest 16-bit rows in the forward.** Before the staged kernel, every design tried for bf16
#   rows of 32 K stayed a few points under the copy on an H100: :math:`w` and :math:`b` loaded before
#   the statistics, L2 eviction hints, a persistent grid, one Welford reduction instead of two, the split
#   above, smaller chunks, :math:`x` read twice (``dev/ln_fwd_variants_gpu.py``,
#   ``dev/ln_fwd_reload_gpu.py``); a persistent Gluon program with :math:`w` and :math:`b` in shared
#   memory and the next row copied in behind the current one (``dev/gluon_wide_gpu.py``); torch.compile's
#   layout, one small program per row streaming it twice (``dev/rowchunk_gpu.py``). Nsight Compute
#   showed why: one 1024-thread program per SM, held there by its registers. Staging the row in shared
#   memory (``dev/gluon_staged_gpu.py`` has its sweep) is what put three rows on each SM. Past 64 KB a
#   row leaves one program per SM again: fp32 rows of 32 K, or 16-bit rows of 64 K. Exercise: give
#   ``FWD_STAGED`` an entry for fp32 rows of 16 K (64 KB too) and compare it with the fused kernel.
# * **Long 16-bit rows in the forward.** The chunked forward reads each row twice; once the second read
#   misses L2 it is capped at 2/3 of the copy. The split above reads it once, but its exchange per row
#   costs a 16-bit slice as much as an fp32 one for half the bytes.
# * **Exercises.** Change ``BWD_WARPS_PER_SM`` and ``BWD_BYTES_PER_THREAD`` and rerun the plan
#   table and the benchmark: which widths move, and why? Turn the kernels into RMSNorm (no mean, no
#   bias): what changes in the backward formula, and in the speed?
#
# References: Ba, Kiros and Hinton, *Layer Normalization* (2016); the Triton layer-norm tutorial
# (design 1, with fp16 partial sums); Liger-Kernel's layer norm (per-program fp32 partials); quack's
# RMSNorm and its "speed of light" write-up.

# %%
# Deep dives
# ----------
# Three techniques of this page also stand alone, each measured against the fused and chunked kernels
# and the peers on the widths where it matters:
#
# * :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py`: reading x twice, and one row
#   split across programs, for the forward;
# * :ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py`: the widest 16-bit rows staged
#   in shared memory with Gluon;
# * :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py`: the backward with one row shared
#   by several programs.

# %%
# Where this page was made
# ------------------------
# The full environment card of the build that measured every number above.

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    if ON_GPU:
        props = torch.cuda.get_device_properties(DEVICE)
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.split("\n")[0].strip()
        except (OSError, subprocess.SubprocessError):
            driver = "unknown (nvidia-smi not available)"
        device = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        runtime = f"driver {driver}, CUDA {torch.version.cuda}"
        mode = "CUDA GPU: real kernels at full size"
    else:
        device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU"
        runtime = "none: Triton's interpreter (TRITON_INTERPRET=1)"
        mode = "interpreter on the CPU, small sizes: the timings are NOT GPU timings"
    card = {
        "device": device,
        "driver / CUDA": runtime,
        "mode": mode,
        "torch": torch.__version__,
        "Triton": triton.__version__,
        "Python": platform.python_version(),
        "built": BUILT,
    }
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()


environment_card()
