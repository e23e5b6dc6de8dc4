"""
RMSNorm with a fused backward
=============================

RMSNorm is the normalization layer of today's language models: each row of activations is divided by
its root mean square and scaled by a learned weight. Like softmax it does a few operations per
element, so its speed is set by memory traffic: the best possible kernel moves each byte it must move
exactly once and runs as fast as a device-to-device copy of the same bytes, the *speed of light*.

The forward pass is an easy row reduction. The backward pass is not: the gradient of the input needs
a sum **along** each row, the gradient of the weight a sum **across** rows, and the two reductions run
in different orders. In this tutorial you build a drop-in replacement for
:func:`torch.nn.functional.rms_norm` whose backward is **one persistent kernel** that reads the input
and the incoming gradient once and produces both gradients, and you measure it against PyTorch,
``torch.compile`` and Liger-Kernel on the GPU that built this page.

**What you will learn**

* how to count the bytes of a normalization, forward and backward, and predict its speed;
* how to fuse two reductions of different loop orders (*mix-order reduction*) into one kernel, with
  the weight gradient kept in fp32 registers, one partial per program, and summed in a fixed order so
  that it is bitwise deterministic;
* how programs that share a wide row exchange partial sums through global memory without waiting on
  the exchange: publish one block ahead, and keep 16-bit values packed two to a register;
* where the dtype matters: bf16 in memory, fp32 for every statistic and partial sum.

**Prerequisites**: the fused-softmax tutorial of this site (row reductions, block sizes, persistent
grids, ``torch.autograd.Function``). On a machine without a CUDA GPU this script still runs: its
kernels go through Triton's interpreter on the CPU, with small sizes.
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
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

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
# In fp32 that is about :math:`4MN` elements read and :math:`3MN` written, :math:`7MN` in all, where a
# kernel that keeps each row on chip needs :math:`2MN`: read :math:`x`, write :math:`y`. The fused
# forward should be about **3.5 times faster**. Besides :math:`y`, it writes :math:`r` (one fp32 per
# row) for the backward pass: :math:`M` values next to :math:`MN`, too few to count.
#
# The backward pass, and why it is two reductions
# -----------------------------------------------
# With the incoming gradient :math:`dy` and :math:`g = dy \odot w`, the chain rule gives
#
# .. math::
#
#    dx = r \left( g - \hat{x} \, \frac{1}{N} \sum_j g_j \hat{x}_j \right), \qquad
#    dw_j = \sum_{\text{rows}} dy_j \, \hat{x}_j .
#
# :math:`dx` needs one dot product **along each row**; :math:`dw` needs a sum **down each column**, over
# all :math:`M` rows. Both read the same :math:`x` and :math:`dy`, but a compiler that fuses one
# reduction per kernel emits two kernels with different loop orders: one walks the rows and writes
# :math:`dx` (reading :math:`x` and :math:`dy`), the other walks the columns and writes :math:`dw`
# (reading :math:`x` and :math:`dy` again). That is :math:`5MN` elements moved where :math:`3MN` suffice
# (:math:`x` and :math:`dy` read once, :math:`dx` written once): at best 3/5 of the speed of light.
#
# The fix is a *persistent* kernel. A fixed number of programs, one or two per SM, each walk their
# share of the rows. A program loads a block of rows once, computes their :math:`dx` and writes it,
# and adds :math:`dy \odot \hat{x}` into a ``dw_partial`` held in fp32 registers across all the rows
# it visits. At the end each program stores its ``dw_partial``: a small :math:`P \times N` fp32 array
# for :math:`P` programs (:math:`P` is a few hundred, :math:`M` is often hundreds of thousands). A
# second, small kernel sums those partials, column by column, always in the same order, so :math:`dw`
# is bitwise the same on every run. PyTorch's Inductor learned to generate this fusion under the name
# *mix-order reduction*; we write it by hand, and compare.
#
# With so few programs, each must keep enough bytes in flight to cover the memory's latency on its
# own: before it computes a block of rows, a program issues the loads of its *next* block, so the
# memory works while the arithmetic and the store of this block go on. The forward needs no
# persistence (it has nothing to accumulate across rows): it launches one program per block of rows
# and lets the hardware schedule them.


@triton.jit
def rms_norm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per block of BLOCK_M rows."""
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # clamp: a duplicate row, never stored
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :],
                mask=col_ok[None, :], other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)  # padding columns add 0
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)


@triton.jit
def rms_norm_bwd_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols,
    x_row_stride, dy_row_stride, dx_row_stride,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """A persistent grid (at most one program per block of rows): program p does blocks p, p + P, ..."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:  # loaded once per program, reused for every row it visits
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    # One fp32 partial per (row slot, column), summed over rows only once at the end: adding a whole
    # tile each iteration costs no communication between warps.
    dw_partial = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # The loads of the first block; inside the loop, those of the next block are issued before this one
    # is computed. Rows past the end load as zeros (they add nothing to dw) and are never stored.
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
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    if COMPUTE_DW:  # every program stores its partial, zeros included: no buffer needs clearing
        tl.store(dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols + cols, tl.sum(dw_partial, axis=0), mask=col_ok)


@triton.jit
def dw_reduce_kernel(
    dw_partial_ptr, dw_ptr, n_partials, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
):
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
# Where the dtypes are: :math:`x`, :math:`w`, :math:`dy` and the outputs :math:`y` and :math:`dx` stay in
# the input's dtype in memory (half the bytes in bf16); everything computed, :math:`r`, the dot product
# of each row and ``dw_partial``, is fp32. Summing thousands of rows into a bf16 ``dw`` would lose most
# of its 8 bits of mantissa; in fp32 the error of that sum stays near fp32's rounding.
#
# The final sum reads :math:`P \times N` fp32 values. It is spread over many small programs, each
# summing a narrow strip of columns down all :math:`P` rows, so that it finishes in a few
# microseconds instead of leaving a few programs to walk the partials alone.
#
# Rows too long for registers
# ---------------------------
# A program holds at most a few tens of thousands of fp32 values in registers, and the backward needs
# three row-sized tiles at once (:math:`x`, :math:`dy`, ``dw_partial``), two more while it prefetches.
# Past ``MAX_FUSED_N`` columns (forward: ``FWD``, backward: ``BWD``), and in the forward past rows of
# ``MAX_FUSED_BYTES`` (an fp32 row of 32768 columns, whose program fills an SM alone and cannot
# overlap its loads with its stores: the two-pass kernel measured faster there on an H100,
# ``dev/fwd_wide_gpu.py``), the kernels stream each row
# in chunks of ``CHUNK_N``: a first pass reduces it (sum of squares forward, dot product
# backward), a second pass walks it backwards and writes the output. The first pass asks the cache to
# keep what it reads (``eviction_policy="evict_last"``), the second reads the row's last chunks first
# (the ones most likely to still be in L2) and marks them as done (``"evict_first"``), and the output
# is written with streaming stores (``cache_modifier=".cs"``), as in the softmax tutorial. Each pass
# issues the loads of its next chunk before it works on this one. The weight gradient no longer fits
# in registers: each program adds into its own row of ``dw_partial`` in global memory, which it alone
# touches, so it is still deterministic. These kernels read each row twice (the second time mostly
# from L2) and the backward also reads and writes its ``dw_partial`` row for every row, so they are
# the slow end of the range. The backward uses its chunked kernel only for rows past
# ``MAX_SPLIT_N``: the next section has a faster way for the rows in between.


@triton.jit
def rms_norm_fwd_chunked_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_WEIGHT: tl.constexpr, CHUNK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, CHUNK_N)
    n_chunks = tl.cdiv(n_cols, CHUNK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
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
            x_next = tl.load(x_row + offs, mask=(offs >= 0) & (offs < n_cols), other=0.0,
                             eviction_policy="evict_first")
            y = x * rstd
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            tl.store(y_row + here, y.to(y_ptr.dtype.element_ty), mask=here < n_cols, cache_modifier=".cs")


@triton.jit
def rms_norm_bwd_chunked_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols,
    x_row_stride, dy_row_stride, dx_row_stride,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, CHUNK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, CHUNK_N)
    n_chunks = tl.cdiv(n_cols, CHUNK_N)
    dw_row = dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols  # this program's partial
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        dy_row = dy_ptr + tl.cast(row, tl.int64) * dy_row_stride
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
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
            ok = here < n_cols
            x_hat = x * rstd
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(w_ptr + here, mask=ok, other=0.0).to(tl.float32)
            if COMPUTE_DW:  # the program's first row starts its partial: no buffer needs clearing
                dw = tl.load(dw_row + here, mask=ok & (here * 0 + row > pid), other=0.0)
                tl.store(dw_row + here, dw + dy * x_hat, mask=ok)
            tl.store(dx_row + here, ((g - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=ok,
                     cache_modifier=".cs")


# %%
# Wide rows: one row shared by several programs
# ---------------------------------------------
# The chunked kernel pays for its ``dw_partial`` row in memory on every row. There is a better way
# when the row is too wide for one program: split it. ``SLICES`` programs (a *group*) share each row,
# each owning a slice of ``BLOCK_N`` columns: it loads its slice of :math:`x` and :math:`dy` once and
# keeps ``dw`` for those columns in fp32 registers, as in the fused kernel. The one thing a slice cannot
# compute alone is :math:`c = \frac{1}{N}\sum_j g_j \hat{x}_j`, a sum over the whole row. So each program
# publishes its share of the sum in global memory, waits until the other slices of the row have
# published theirs, and adds the ``SLICES`` shares in a fixed order (the same bits in every program and
# on every run). Then it writes its slice of :math:`dx`.
#
# Waiting for another program is only safe if that program is running: the grid must fit on the GPU at
# once, or a waiting program could hold the SM that the program it waits for needs. The launcher sizes
# the grid from the compiled kernel's occupancy (the same ``programs_per_sm`` as above), and falls back
# to the chunked kernel when a group cannot fit. Another kernel that holds SMs forever while this one
# runs (on another stream) could still stall it; the kernels on this page never do.
#
# **Hiding the wait.** A wait costs more than it seems: a share goes to the L2 cache and comes back to
# another SM, a round trip of about a microsecond, as long as an H100 SM takes to stream a few tens of
# KB. A program that publishes a block's share and then waits for the shares of that same block stalls
# for a round trip on every block, and with one block of loads in flight the memory idles with it. So
# the kernel runs its exchange one block ahead (software pipelining):
#
# * it keeps **two blocks of loads in flight**, the next block and the one after;
# * before it waits for the shares of this block, it computes and **publishes its share of the next
#   block**. The other slices did the same one step earlier, so when a program asks for this block's
#   shares they are usually there already: the wait is one read, and the memory works meanwhile.
#
# Keeping two blocks in flight without the lookahead does not help: the program still stalls on every
# block, with more loads idle behind it (``dev/rms_lookahead_gpu.py`` in the repository measures both).
#
# **Registers.** Three blocks are alive at once (this one, the next, the one after). A 16-bit element
# loaded into registers takes a whole 32-bit register, so a bf16 block costs as many registers as an
# fp32 block of the same length, for half the bytes in flight. With ``PACK``, the kernel loads 16-bit
# rows as 32-bit words of two elements, keeps them packed while they wait in registers, and unpacks them
# only to compute (for bf16, a shift: its bits are the top half of an fp32); :math:`dx` is packed again
# to be stored. That needs rows of an even length, even strides and 4-byte aligned tensors, else the
# launcher turns ``PACK`` off. The launcher also caps each thread's registers (``maxnreg``) at the share
# of the register file that lets ``WARPS_PER_SM`` warps live on an SM together: two bf16 programs of 8
# warps per SM instead of one, twice the bytes in flight.
#
# **Two ways to wait**, both measured (``dev/split_bwd_gpu.py``):
#
# * **flag words** (``FLAG_WORDS=True``): each share is written as one 64-bit word, a "written" bit above
#   the fp32 bits of the value, into a buffer cleared before the launch. A program reads the words of its
#   rows until every bit is set: one round trip when the others are done. This is the faster way for
#   programs of up to 16 warps, which every split configuration below uses.
# * **a counter** per block of rows: shares are plain stores, then a barrier (so that every thread's
#   store is issued before the counter moves) and an atomic add with *release* semantics; one thread
#   polls the counter with *acquire* semantics, and the shares are then read past the L1 cache
#   (``cache_modifier=".cg"``: another SM wrote them). Three round trips, but only one thread polls;
#   with 32 warps, where 1024 threads reading the flag words would each take part in every poll, this
#   measured faster (before the lookahead), so the launcher keeps it for programs of 32 warps.
#
# The buffers are cleared by a ``torch.zeros`` per call (8 bytes per row and slice), so nothing carries
# over from one call to the next. Under Triton's interpreter, programs run one after another, never at
# the same time: a program waiting for the next one would wait forever, so there the launcher gives each
# row one slice (the same kernel, whose only shares are then its own, published one step before it
# reads them).


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
def tile_to_f32(tile, dtype: tl.constexpr, PACK: tl.constexpr):
    """A loaded tile as [BLOCK_M, BLOCK_N] fp32 values, in column order."""
    if PACK:  # the low half of a word is the even column (little-endian)
        if dtype == tl.bfloat16:  # bf16 is the top half of an fp32
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
def publish_share(shares_ptr, counter_ptr, block, n_blocks, rows, row_ok, part, share,
                  SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """This slice's share of each row's sum, for the other slices of the group."""
    if FLAG_WORDS:  # bit 32 says "written", the low 32 bits hold the fp32 value
        word = (share.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | 0x100000000
        tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")
    else:
        tl.store(shares_ptr + rows * SLICES + part, share, mask=row_ok)
        tl.debug_barrier()  # every thread's store is issued before the counter moves
        tl.atomic_add(counter_ptr + block, 1, mask=block < n_blocks, sem="release")


@triton.jit
def wait_for_shares(shares_ptr, counter_ptr, block, rows, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """[BLOCK_M, SLICES] shares of the rows of ``block``, once every slice has published them."""
    slots = shares_ptr + rows[:, None] * SLICES + tl.arange(0, SLICES)[None, :]
    if FLAG_WORDS:
        words = tl.load(slots, volatile=True)
        while tl.min(words >> 32) == 0:  # some slice has not written yet
            words = tl.load(slots, volatile=True)
        # A tile smaller than the program is held in several copies, one per group of warps, and the
        # test above may be decided on another warp's copy: a copy still unwritten here (loaded before
        # that slice wrote) is read again, once, instead of adding a share of 0.
        stale = (words >> 32) == 0
        words = tl.where(stale, tl.load(slots, mask=stale, other=0, volatile=True), words)
        shares = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        while arrived < SLICES:
            arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        shares = tl.load(slots, cache_modifier=".cg")
    return shares


@triton.jit
def rms_norm_bwd_split_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, shares_ptr, counter_ptr, n_rows, n_cols,
    x_row_stride, dy_row_stride, dx_row_stride,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr,
    PACK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N  # what a tile's row holds: words or elements
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # The loads of this program's first two blocks, and its share of the first one. (Names used in the
    # loop are not reused here: Triton would carry them around the loop.)
    first = group * BLOCK_M + tl.arange(0, BLOCK_M)
    x_this = load_tile(x_ptr, first, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_this = load_tile(dy_ptr, first, dy_row_stride, units, unit_ok, n_rows, PACK)
    second = first + n_groups * BLOCK_M
    x_next = load_tile(x_ptr, second, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_next = load_tile(dy_ptr, second, dy_row_stride, units, unit_ok, n_rows, PACK)
    first_ok = first < n_rows
    first = tl.minimum(first, n_rows - 1).to(tl.int64)
    first_g = tile_to_f32(dy_this, dtype, PACK)
    if HAS_WEIGHT:
        first_g = first_g * w[None, :]
    first_x_hat = tile_to_f32(x_this, dtype, PACK) * tl.load(rstd_ptr + first)[:, None]
    first_share = tl.sum(first_g * first_x_hat, axis=1)
    publish_share(shares_ptr, counter_ptr, group, n_blocks, first, first_ok, part, first_share, SLICES, FLAG_WORDS)
    for block in tl.range(group, n_blocks, n_groups):
        # the block after next: two blocks of loads in flight while this one is worked on
        after_rows = (block + 2 * n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_after = load_tile(x_ptr, after_rows, x_row_stride, units, unit_ok, n_rows, PACK)
        dy_after = load_tile(dy_ptr, after_rows, dy_row_stride, units, unit_ok, n_rows, PACK)
        # this block's values (its rstd loaded first: a load issued late stalls the program)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = tile_to_f32(x_this, dtype, PACK) * rstd[:, None]
        dy = tile_to_f32(dy_this, dtype, PACK)
        g = dy * w[None, :] if HAS_WEIGHT else dy
        # the next block's share, published before waiting for this block's shares (rows past the end
        # publish nothing)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        next_ok = next_rows < n_rows
        next_rows = tl.minimum(next_rows, n_rows - 1).to(tl.int64)
        next_x_hat = tile_to_f32(x_next, dtype, PACK) * tl.load(rstd_ptr + next_rows)[:, None]
        next_g = tile_to_f32(dy_next, dtype, PACK)
        if HAS_WEIGHT:
            next_g = next_g * w[None, :]
        publish_share(shares_ptr, counter_ptr, block + n_groups, n_blocks, next_rows, next_ok, part,
                      tl.sum(next_g * next_x_hat, axis=1), SLICES, FLAG_WORDS)
        # this block: dw, then dx once the group's shares are in
        if COMPUTE_DW:
            dw_acc += dy * x_hat
        shares = wait_for_shares(shares_ptr, counter_ptr, block, rows, SLICES, FLAG_WORDS)
        c = tl.sum(shares, axis=1) / n_cols
        dx = (g - x_hat * c[:, None]) * rstd[:, None]
        store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
        x_this, dy_this, x_next, dy_next = x_next, dy_next, x_after, dy_after
    if COMPUTE_DW:  # one partial row per group; each slice writes its columns of it
        tl.store(dw_partial_ptr + tl.cast(group, tl.int64) * n_cols + cols, tl.sum(dw_acc, axis=0), mask=col_ok)


# %%
# Block size, warps and grid
# --------------------------
# The choices live in one place, apart from the kernels, as in the softmax tutorial:
#
# * ``BLOCK_N`` is the row length rounded up to a power of two, up to ``MAX_FUSED_N`` elements (the
#   forward holds one tile per element, the backward three and two more in flight, so its limit is
#   lower). Wider backward rows are split into ``SLICES`` slices of at most ``SLICE_N`` columns (a
#   power of two of them), with blocks of about ``SPLIT["TILE"]`` elements: one row of 4096 columns per
#   block in both dtypes, as measured fastest on an H100 (``dev/rms_lookahead_gpu.py``). With
#   ``SPLIT["BYTES_PER_THREAD"]``, that is 8 warps per program in bf16 and 16 in fp32, so that
#   ``WARPS_PER_SM`` lets two bf16 programs or one fp32 program share an SM, each with its
#   ``maxnreg`` share of the registers.
# * ``BLOCK_M`` packs short rows so that each program moves at least ``MIN_ELEMENTS`` elements per
#   step: enough bytes in flight to hide the memory's latency.
# * ``num_warps`` comes from bytes, not elements: each thread handles about ``BYTES_PER_THREAD`` bytes
#   of each tensor, so a bf16 row gets half the warps of an fp32 row of the same length. The backward
#   keeps more tiles alive per thread (:math:`x`, :math:`dy`, the prefetched next block and
#   ``dw_partial``) where the forward keeps one, so it takes fewer bytes per thread, and half that
#   again for a row of ``WIDE_ROW_BYTES`` or more, which fills a program on its own (measured faster
#   on an H100 for bf16 rows of 8192 and fp32 rows of 4096; ``dev/sweep_gpu.py`` in the repository
#   times it).
# * The forward's grid is one program per block of rows. The backward's grid has as many programs per
#   SM as fit in ``WARPS_PER_SM`` warps, at least one (``CHUNK_PROGRAMS_PER_SM`` for long rows), and
#   never more than the compiled kernel's occupancy allows for the split kernel, whose programs wait
#   for each other. This sets :math:`P`, the number of ``dw_partial`` rows (one per group of slices),
#   kept small so that writing and summing the partials costs little next to the rows themselves.
#   Each program hides its latency by prefetching, not by having many neighbours on its SM.

FWD = dict(MAX_FUSED_N=32768, MAX_FUSED_BYTES=65536, MIN_ELEMENTS=4096, BYTES_PER_THREAD=64, CHUNK_N=8192,
           CHUNK_BYTES_PER_THREAD=16)
BWD = dict(MAX_FUSED_N=8192, MIN_ELEMENTS=4096, BYTES_PER_THREAD=32, WARPS_PER_SM=16,
           WIDE_ROW_BYTES=16384, MAX_SPLIT_N=131072, SLICE_N=4096, CHUNK_N=8192, CHUNK_PROGRAMS_PER_SM=1)
# The split kernel: slices of at most SLICE_N columns (BWD), blocks of about TILE elements per
# program, BYTES_PER_THREAD of each tile per thread (the same for every dtype).
SPLIT = dict(TILE=4096, BYTES_PER_THREAD=32)
NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4


def warps_for(n_elements, element_size, bytes_per_thread):
    """Warps such that each thread handles about bytes_per_thread bytes of a tile (4 to 32 warps)."""
    return min(32, max(4, n_elements * element_size // (32 * bytes_per_thread)))


def fused_config(n_cols, element_size, MIN_ELEMENTS, BYTES_PER_THREAD, **_):
    """(BLOCK_M, BLOCK_N, num_warps) for rows of n_cols <= MAX_FUSED_N elements."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)
    return block_m, block_n, warps_for(block_m * block_n, element_size, BYTES_PER_THREAD)


_occupancy = {}


def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once, and what limits it."""
    # Triton compiles one version per dtype of each argument and per integer that is 1 or a multiple of
    # 16 (and per pointer aligned to 16 bytes): the key tells those versions apart.
    key = (kernel, tuple(a.dtype if isinstance(a, torch.Tensor) else (a == 1, a % 16 == 0) for a in args),
           tuple(sorted(meta.items())))
    if key in _occupancy:
        return _occupancy[key]
    threads = 32 * meta["num_warps"]
    if not ON_GPU:  # nothing is compiled under the interpreter
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


def forward_launch(n_rows, n_cols, element_size, has_weight, chunk_n=None, config=None):
    """(kernel, grid, meta) of the forward for these sizes."""
    cfg = config or FWD
    if chunk_n is None and n_cols <= cfg["MAX_FUSED_N"] and n_cols * element_size <= cfg["MAX_FUSED_BYTES"]:
        block_m, block_n, num_warps = fused_config(n_cols, element_size, **cfg)
        meta = dict(HAS_WEIGHT=has_weight, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        return rms_norm_fwd_kernel, triton.cdiv(n_rows, block_m), meta
    chunk = chunk_n or cfg["CHUNK_N"]
    meta = dict(HAS_WEIGHT=has_weight, CHUNK_N=chunk,
                num_warps=warps_for(chunk, element_size, cfg["CHUNK_BYTES_PER_THREAD"]))
    return rms_norm_fwd_chunked_kernel, n_rows, meta  # one program per row


def split_args(x2d, w, rstd, dy2d, dx2d, dw_partial, meta, clear=True):
    """The split kernel's arguments: the tensors, the shares' slots (cleared when they are flag words)
    and the counters (cleared), then the sizes and strides. ``clear=False``: one-element buffers of the
    same types, enough to compile the kernel, and left uninitialized (nothing reads them; a fill would be
    one more kernel on every call)."""
    n_rows, n_cols = x2d.shape
    if not clear:
        shares = torch.empty(1, device=x2d.device, dtype=torch.int64 if meta["FLAG_WORDS"] else torch.float32)
        counter = torch.empty(1, device=x2d.device, dtype=torch.int64 if meta["FLAG_WORDS"] else torch.int32)
    elif meta["FLAG_WORDS"]:
        shares = counter = torch.zeros((n_rows, meta["SLICES"]), device=x2d.device, dtype=torch.int64)
    else:
        shares = torch.empty((n_rows, meta["SLICES"]), device=x2d.device, dtype=torch.float32)
        counter = torch.zeros(triton.cdiv(n_rows, meta["BLOCK_M"]), device=x2d.device, dtype=torch.int32)
    return (x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, shares, counter, n_rows, n_cols,
            x2d.stride(0), dy2d.stride(0), dx2d.stride(0))


def split_plan(n_cols, dtype, has_weight, compute_dw, config=None, tensors=None):
    """meta-parameters of the split backward for rows of n_cols (of the tensors x2d, dy2d, dx2d, if
    given: whether their 16-bit rows can be loaded as 32-bit words)."""
    cfg = config or BWD
    element_size = torch.empty((), dtype=dtype).element_size()
    split = cfg.get("SPLIT", SPLIT)
    slices = 1  # the interpreter runs one program at a time: a program must never wait for another
    if ON_GPU:
        slices = min(cfg["MAX_SPLIT_N"] // cfg["SLICE_N"], triton.next_power_of_2(triton.cdiv(n_cols, cfg["SLICE_N"])))
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    block_m = max(1, split["TILE"] // block_n)
    num_warps = warps_for(block_m * block_n, element_size, split["BYTES_PER_THREAD"])
    # two 16-bit elements per 32-bit word: even rows, even strides, 4-byte aligned tensors
    pack = element_size == 2 and n_cols % 2 == 0 and all(
        t.stride(0) % 2 == 0 and t.data_ptr() % 4 == 0 for t in (tensors or ()))
    meta = dict(HAS_WEIGHT=has_weight, COMPUTE_DW=compute_dw, SLICES=slices, FLAG_WORDS=num_warps <= 16,
                PACK=pack, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    # Each thread's share of the registers when WARPS_PER_SM warps live on an SM. Unpacked 16-bit rows
    # need more than that: they run with fewer programs per SM rather than spill their loads.
    if ON_GPU and (pack or element_size == 4):
        regs = getattr(torch.cuda.get_device_properties(DEVICE), "regs_per_multiprocessor", 65536)
        meta["maxnreg"] = min(255, regs // (32 * max(cfg["WARPS_PER_SM"], num_warps)) // 8 * 8)
    return meta


def split_grid(x2d, w, rstd, dy2d, dx2d, meta, config=None, n_rows=None):
    """Programs of the split kernel for these very tensors, so that the occupancy is the one of the
    version Triton compiles for them: whole groups, all on the GPU at once; 0 if a group cannot fit."""
    cfg = config or BWD
    args = split_args(x2d, w, rstd, dy2d, dx2d, rstd, meta, clear=False)
    fit, _, _ = programs_per_sm(rms_norm_bwd_split_kernel, args, meta)
    per_sm = min(fit, max(1, cfg["WARPS_PER_SM"] // meta["num_warps"]))
    n_rows = x2d.shape[0] if n_rows is None else n_rows
    groups = min(triton.cdiv(n_rows, meta["BLOCK_M"]), per_sm * NUM_SMS // meta["SLICES"])
    return groups * meta["SLICES"]


def backward_launch(n_rows, n_cols, element_size, has_weight, compute_dw, chunk_n=None, config=None,
                    dtype=None, tensors=None):
    """(kernel, grid, meta) of the backward for these sizes. The kernel writes grid // SLICES partial
    rows of dw (SLICES is 1 but for the split kernel). ``tensors`` (x2d, w, rstd, dy2d, dx2d) are those
    of the call, which the split kernel's grid is sized for; without them, contiguous rows."""
    cfg = config or BWD
    if chunk_n is None and n_cols <= cfg["MAX_FUSED_N"]:
        # A row of WIDE_ROW_BYTES or more is a whole block on its own: it gets half the bytes per
        # thread, twice the warps, to spread its loads and its reduction over more threads.
        wide = n_cols * element_size >= cfg["WIDE_ROW_BYTES"]
        block_m, block_n, num_warps = fused_config(
            n_cols, element_size, **dict(cfg, BYTES_PER_THREAD=cfg["BYTES_PER_THREAD"] // (2 if wide else 1)))
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        per_sm = max(1, cfg["WARPS_PER_SM"] // num_warps)
        kernel, n_tasks = rms_norm_bwd_kernel, triton.cdiv(n_rows, block_m)
    else:
        if chunk_n is None and n_cols <= cfg["MAX_SPLIT_N"]:
            dtype = dtype or {2: torch.bfloat16, 4: torch.float32}.get(element_size, torch.float32)
            if tensors is None:  # a few contiguous rows: the version Triton compiles for such rows
                x = torch.empty((16, n_cols), device=DEVICE, dtype=dtype)
                r = torch.empty(16, device=DEVICE, dtype=torch.float32)
                tensors = (x, x, r, x, x)
            x2d, _, _, dy2d, dx2d = tensors
            meta = split_plan(n_cols, dtype, has_weight, compute_dw, cfg, (x2d, dy2d, dx2d))
            grid = split_grid(*tensors, meta, cfg, n_rows)  # its programs wait for each other: all fit
            if grid > 0:
                return rms_norm_bwd_split_kernel, grid, meta
        chunk = chunk_n or cfg["CHUNK_N"]
        meta = dict(CHUNK_N=chunk, num_warps=warps_for(chunk, element_size, cfg["BYTES_PER_THREAD"]))
        kernel, n_tasks, per_sm = rms_norm_bwd_chunked_kernel, n_rows, cfg["CHUNK_PROGRAMS_PER_SM"]
    meta.update(HAS_WEIGHT=has_weight, COMPUTE_DW=compute_dw)
    return kernel, max(1, min(n_tasks, per_sm * NUM_SMS)), meta


def rms_norm_rows_forward(x2d, w, y2d, rstd, eps, chunk_n=None, config=None):
    """y2d = rms_norm(x2d) * w along dim 1, rstd[i] = 1 / rms of row i. Returns the grid size.

    x2d and y2d are 2-D with unit stride along the row; w is None or 1-D contiguous. ``chunk_n`` forces
    the chunked kernel with that chunk; ``config`` overrides ``FWD``.
    """
    n_rows, n_cols = x2d.shape
    kernel, grid, meta = forward_launch(n_rows, n_cols, x2d.element_size(), w is not None, chunk_n, config)
    kernel[(grid,)](x2d, x2d if w is None else w, y2d, rstd, n_rows, n_cols, x2d.stride(0), y2d.stride(0),
                    eps, **meta)
    return grid


def rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw, chunk_n=None, config=None):
    """dx2d and (when dw is not None) dw from x2d, w, rstd and dy2d. Returns the grid size.

    dw is a 1-D tensor of n_cols elements in the weight's dtype, written entirely. ``chunk_n`` forces
    the chunked kernel with that chunk; ``config`` overrides ``BWD``.
    """
    n_rows, n_cols = x2d.shape
    compute_dw = w is not None and dw is not None
    kernel, grid, meta = backward_launch(n_rows, n_cols, x2d.element_size(), w is not None, compute_dw,
                                         chunk_n, config, x2d.dtype, (x2d, w, rstd, dy2d, dx2d))
    n_partials = grid // meta.get("SLICES", 1)
    # every program writes its whole partial row: no buffer needs clearing
    dw_partial = torch.empty((n_partials, n_cols), dtype=torch.float32, device=x2d.device) if compute_dw else rstd
    if kernel is rms_norm_bwd_split_kernel:
        args = split_args(x2d, w, rstd, dy2d, dx2d, dw_partial, meta)
    else:
        args = (x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, n_rows, n_cols,
                x2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    kernel[(grid,)](*args, **meta)
    if compute_dw:  # narrow strips of columns: many programs, each summing all P partials in order
        block_n = 16 if n_cols <= 4096 else 32
        dw_reduce_kernel[(triton.cdiv(n_cols, block_n),)](
            dw_partial, dw, n_partials, n_cols, BLOCK_P=64, BLOCK_N=block_n, num_warps=4)
    return grid


# %%
# The choices for each row length, and what the compiled kernels say about occupancy (on the GPU,
# registers per thread come from the compiler; under the interpreter there is nothing to compile):

def config_table(dtype=torch.bfloat16):
    rows = []
    x = torch.empty((1, 2**17), device=DEVICE, dtype=dtype)
    r = torch.empty(1, device=DEVICE, dtype=torch.float32)
    for n_cols in [2**k for k in range(9, 18)]:
        row = {"N": n_cols}
        for direction in ("forward", "backward"):
            if direction == "forward":
                kernel, _, meta = forward_launch(1, n_cols, x.element_size(), True)
                args = (x, x, x, r, 1, n_cols, n_cols, n_cols, 1e-6)
            else:
                kernel, _, meta = backward_launch(2**16, n_cols, x.element_size(), True, True, dtype=dtype)
                args = (x, x, r, x, x, r, 1, n_cols, n_cols, n_cols, n_cols)
                if "SLICES" in meta:  # (a few rows of the real stride: the version Triton compiles)
                    xs = torch.empty((16, n_cols), device=DEVICE, dtype=dtype)
                    rs = torch.empty(16, device=DEVICE, dtype=torch.float32)
                    args = split_args(xs, xs, rs, xs, xs, rs, meta)
            per_sm, limit, n_regs = programs_per_sm(kernel, args, meta)
            if "CHUNK_N" in meta:
                row[f"{direction}: tile"] = f"chunks of {meta['CHUNK_N']}"
            else:
                row[f"{direction}: tile"] = f"{meta['BLOCK_M']} x {meta['BLOCK_N']}"
            if "SLICES" in meta:
                row[f"{direction}: tile"] += f", 1/{meta['SLICES']} of a row"
            row[f"{direction}: warps"] = meta["num_warps"]
            row[f"{direction}: registers"] = n_regs if ON_GPU else "-"
            row[f"{direction}: programs / SM"] = per_sm if ON_GPU else "-"
            row[f"{direction}: limited by"] = limit
        rows.append(row)
    return pd.DataFrame(rows).set_index("N")


config_table()

# %%
# The drop-in function
# --------------------
# ``rms_norm(x, normalized_shape, weight=None, eps=None)`` takes what
# :func:`torch.nn.functional.rms_norm` takes: any leading shape, a ``normalized_shape`` of one or more
# trailing dimensions (flattened into one row), an optional weight of that shape, and ``eps``, which
# defaults, as in PyTorch, to the machine epsilon of fp32 (PyTorch computes in fp32 for all three
# dtypes and takes that type's epsilon). Non-contiguous inputs are copied once to contiguous rows when
# they must be. The output has the input's dtype and shape; gradients flow to ``x`` and ``weight``.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"rms_norm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"rms_norm: {name} has dtype {t.dtype}; these kernels support float32, float16 and "
            "bfloat16 (use torch.nn.functional.rms_norm for other dtypes)"
        )
    if ON_GPU and t.device.type != "cuda":
        raise ValueError(
            f"rms_norm: {name} is on {t.device}, but a CUDA GPU is in use and the kernels run there; "
            "move it with .to('cuda')"
        )
    if not ON_GPU and t.device.type != "cpu":
        raise ValueError(
            f"rms_norm: {name} is on {t.device}; without a CUDA GPU the kernels run on the CPU "
            "through Triton's interpreter and need CPU tensors"
        )


def _as_rows(t, n_cols):
    """A 2-D view (or, when no view can do, a copy) of ``t`` with rows of n_cols and unit stride."""
    t2d = t.reshape(t.numel() // n_cols if n_cols else 0, n_cols)
    return t2d if t2d.stride(-1) == 1 or n_cols == 1 else t2d.contiguous()


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, n_cols, eps):
        x2d = _as_rows(x, n_cols)
        w = None if weight is None else weight.reshape(-1).contiguous()
        y2d = torch.empty(x2d.shape, dtype=x.dtype, device=x.device)
        rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x.device)
        if x2d.numel() > 0:
            rms_norm_rows_forward(x2d, w, y2d, rstd, eps)
        ctx.save_for_backward(x2d, w, rstd)
        ctx.x_shape, ctx.w_shape = x.shape, None if weight is None else weight.shape
        ctx.w_dtype = None if weight is None else weight.dtype
        return y2d.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2d, w, rstd = ctx.saved_tensors
        _check(dy, "the gradient")
        dy2d = _as_rows(dy.to(x2d.dtype), x2d.shape[1])
        dx2d = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
        want_dw = w is not None and ctx.needs_input_grad[1]
        dw = torch.empty(x2d.shape[1], dtype=ctx.w_dtype, device=x2d.device) if want_dw else None
        if x2d.numel() > 0:
            rms_norm_rows_backward(x2d, w, rstd, dy2d, dx2d, dw)
        elif dw is not None:
            dw.zero_()  # no rows: the sum over rows is empty
        return dx2d.view(ctx.x_shape), None if dw is None else dw.view(ctx.w_shape), None, None


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """Drop-in for ``torch.nn.functional.rms_norm`` on float32, float16 and bfloat16, with autograd."""
    _check(x, "x")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if not isinstance(normalized_shape, (tuple, list, torch.Size)) or not all(
        isinstance(d, int) for d in normalized_shape
    ):
        raise TypeError(f"rms_norm: normalized_shape must be a tuple of ints, got {normalized_shape!r}")
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0:
        raise ValueError("rms_norm: normalized_shape must have at least one dimension, got ()")
    if k > x.dim() or tuple(x.shape[x.dim() - k:]) != normalized_shape:
        raise ValueError(
            f"rms_norm: normalized_shape {list(normalized_shape)} must match the last {k} dimension(s) "
            f"of x, whose shape is {list(x.shape)}"
        )
    if weight is not None:
        _check(weight, "weight")
        if tuple(weight.shape) != normalized_shape:
            raise ValueError(
                f"rms_norm: weight has shape {list(weight.shape)}, expected normalized_shape "
                f"{list(normalized_shape)}"
            )
        if weight.device != x.device:
            raise ValueError(f"rms_norm: weight is on {weight.device} but x is on {x.device}")
    if eps is None:
        eps = torch.finfo(torch.float32).eps
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a float or None, got {type(eps).__name__}")
    n_cols = math.prod(normalized_shape)
    if n_cols >= 2**31:
        raise ValueError(f"rms_norm: rows of {n_cols} elements exceed the kernels' limit of 2**31 - 1")
    return RMSNormFunction.apply(x, weight, n_cols, float(eps))


# %%
# Correctness
# -----------
# The reference is :func:`torch.nn.functional.rms_norm` in float64 on the same inputs. The error is
# :math:`\lVert out - ref \rVert / \lVert ref \rVert` for :math:`y`, :math:`dx` and :math:`dw`, next to
# PyTorch's own error in the same dtype: ours should be no worse. The shapes cover a row of one
# element, odd row lengths, several rows per program, and rows long enough for the split and chunked
# kernels.

torch.manual_seed(0)
if ON_GPU:
    CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 100_003),
                    (4, 200_001)]
else:
    CHECK_SHAPES = [(17, 1), (33, 257), (8, 1000), (3, 40_000)]


def rel_error(out, ref):
    """||out - ref|| / ||ref||; where ref is all zeros (dx when N = 1), the absolute error."""
    return ((out.double() - ref).norm() / ref.norm().clamp(min=1.0 if ref.norm() == 0 else 0.0)).item()


def check_row(shape, dtype):
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(3).requires_grad_(True)
    w = (1 + 0.5 * torch.randn(shape[-1], device=DEVICE)).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True)
    y64 = F.rms_norm(x64, shape[-1:], w64, eps=1e-6)
    dx64, dw64 = torch.autograd.grad(y64, (x64, w64), dy.double())
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype).replace("torch.", "")}
    for name, fn in [("ours", rms_norm), ("torch", F.rms_norm)]:
        y = fn(x, shape[-1:], w, eps=1e-6)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        row[f"{name} y"] = rel_error(y, y64.detach())
        row[f"{name} dx"] = rel_error(dx, dx64)
        row[f"{name} dw"] = rel_error(dw, dw64)
    return row


errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# The page is only built if every error is within its dtype's bound, a few units of rounding of the
# output dtype, or at most twice PyTorch's error on the same input. The second case is a row of one
# element: there :math:`\hat{x}^2 = x^2 / (x^2 + \varepsilon)` is 1 up to :math:`\varepsilon`, so
# :math:`dx` is a difference of two nearly equal numbers and no fp32 computation gets it to fp32 accuracy.
# (Triton's interpreter truncates fp32 -> bf16 instead of rounding to nearest, which doubles the bf16
# error there; a GPU rounds.)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
for q in ("y", "dx", "dw"):
    bound = (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))
    assert (errors[f"ours {q}"] <= bound).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns if c[-2:] in (" y", "dx", "dw")}).hide(axis="index")

# %%
# Benchmark
# ---------
# Each point of the sweep uses :math:`M \times N` elements with :math:`M N = 2^{26}` on a GPU (256 MB in
# fp32, 128 MB in bf16: far more than the 50 MB L2 cache, so every pass really goes to memory). Every
# provider runs on the same tensors in the same process, timed by :func:`triton.testing.do_bench`
# (median, the L2 cache flushed before each run, warm-up excluded), on replays of a CUDA graph that
# captured the call: the GPU's time, without the Python work around the kernels. The *speed of
# light* is a device-to-device copy of :math:`x`, timed the same way (without a graph), counting the
# bytes read and written.
#
# GB/s counts the bytes a perfect kernel must move: forward, :math:`x` read and :math:`y` written;
# backward, :math:`x` and :math:`dy` read and :math:`dx` written. The weight, its gradient, :math:`r` and
# our ``dw_partial`` are not counted: whoever moves them pays for it in time. Both directions are timed
# as in training, on an :math:`x` and :math:`w` that require gradients (a forward then saves what its
# backward needs); the backward is ``torch.autograd.grad`` of :math:`y` with respect to both, so every
# provider produces both gradients. torch.compile compiles the forward and backward of each shape once,
# together, with its default settings, under
# which Inductor may apply its mix-order reduction (the setting is shown below the tables). Liger-Kernel
# runs without its in-place option, which would overwrite :math:`dy`.

EPS = 1e-6
if ON_GPU:
    TOTAL_ELEMENTS = 2**26
    SWEEP_N = [2**k for k in range(9, 17)]
else:
    TOTAL_ELEMENTS = 2**13
    SWEEP_N = [256, 1024, 4096]

try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
except ImportError:
    LigerRMSNormFunction = None


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
    """name -> f(x, w), RMSNorm over the last dim; peers that cannot run here are left out."""
    found = {
        "naive": lambda x, w: naive_rms_norm(x, w, EPS),
        "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS),
    }
    if ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        dynamo = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, 1024)  # one compilation per shape and dtype in the sweep
        found["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
        if LigerRMSNormFunction is not None:
            found["Liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    found["ours"] = lambda x, w: rms_norm(x, x.shape[-1:], w, EPS)
    return found


def run_sweep():
    records = []
    fns = providers()
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in SWEEP_N:
            n_rows = max(1, TOTAL_ELEMENTS // n_cols)
            x = torch.randn((n_rows, n_cols), device=DEVICE, dtype=dtype)
            w = (1 + 0.1 * torch.randn(n_cols, device=DEVICE)).to(dtype)
            dy = torch.randn_like(x)
            nbytes = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy_ms = bench(lambda: out.copy_(x), graph=False)
            reference = F.rms_norm(x.float(), (n_cols,), w.float(), EPS)
            xg, wg = x.requires_grad_(True), w.requires_grad_(True)  # both directions as in training
            for name, fn in fns.items():
                for direction in ("forward", "backward"):
                    rec = {"direction": direction, "dtype": str(dtype).replace("torch.", ""),
                           "N": n_cols, "provider": name,
                           "speed of light GB/s": 2 * nbytes / copy_ms * 1e-6}
                    try:
                        y = fn(xg, wg)
                        if direction == "forward":
                            torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=2e-2)
                            ms, moved = bench(lambda: fn(xg, wg)), 2 * nbytes
                        else:
                            ms = bench(lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True))
                            moved = 3 * nbytes
                        rec["GB/s"] = moved / ms * 1e-6
                    except (RuntimeError, ValueError) as err:  # a peer's limit: the point is missing
                        if name == "ours":
                            raise
                        print(f"{name}, {direction}, {dtype}, N = {n_cols}: not measured ({str(err)[:120]})")
                        rec["GB/s"] = float("nan")
                    rec["% of speed of light"] = 100 * rec["GB/s"] / rec["speed of light GB/s"]
                    records.append(rec)
                    y = None
            del x, w, xg, wg, dy, out, reference
            if ON_GPU:
                torch.cuda.empty_cache()
    return pd.DataFrame(records)


results = run_sweep()


def sweep_table(direction):
    """GB/s per provider (columns) and row length (rows), with ours as % of the speed of light."""
    part = results[results.direction == direction]
    table = part.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in providers() if p in table.columns]]
    table.insert(0, "speed of light", part.groupby(["dtype", "N"])["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = [c for c in table.columns if c not in ("naive", "ours", "speed of light", "ours, % of light")]
    table["ours / best peer"] = table["ours"] / table[peers].max(axis=1)
    formats = {column: "{:.0f}" for column in table.columns}  # one call: a second .format() resets the rest
    formats.update({"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"})
    return table.style.format(formats, na_rep="-")


# %%
# Forward, GB/s (higher is better):

sweep_table("forward")

# %%
# Backward, GB/s (both gradients):

sweep_table("backward")

# %%
# The same numbers as a plot, each provider as a fraction of the copy measured next to it:

def plot_sweep():
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey=True, facecolor="white")
    styles = {"naive": ":", "torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "ours": "-"}
    for (i, direction), (j, dtype) in [((i, d), (j, t)) for i, d in enumerate(["forward", "backward"])
                                      for j, t in enumerate(["float32", "bfloat16"])]:
        ax = axes[i][j]
        part = results[(results.direction == direction) & (results.dtype == dtype)]
        for name, style in styles.items():
            line = part[part.provider == name]
            if len(line):
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
    fig.suptitle(f"RMSNorm, M x N = {TOTAL_ELEMENTS:,} elements, on {where}")
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
            peers = part[~part.provider.isin(["ours", "naive"])].groupby("N")["GB/s"].max()
            lo, hi = ours["% of speed of light"].min(), ours["% of speed of light"].max()
            ratio = (ours["GB/s"] / peers).dropna()
            lines.append(
                f"{direction}, {dtype}: ours runs at {lo:.3g}-{hi:.3g}% of the copy over N = "
                f"{min(SWEEP_N)}..{max(SWEEP_N)}; against the best peer at each N it ranges from "
                f"{ratio.min():.3g}x (N = {ratio.idxmin()}) to {ratio.max():.3g}x (N = {ratio.idxmax()})."
            )
    fwd = results[(results.direction == "forward") & (results.dtype == "float32")].set_index(["N", "provider"])["GB/s"]
    n_mid = SWEEP_N[len(SWEEP_N) // 2]
    lines.append(
        f"Fusion: at N = {n_mid} in fp32, the fused forward is {fwd[(n_mid, 'ours')] / fwd[(n_mid, 'naive')]:.3g}x "
        f"faster than the naive one-operation-at-a-time RMSNorm (the bytes model predicted 3.5x)."
    )
    if ON_GPU:
        mix = getattr(getattr(torch._inductor.config, "triton", None), "mix_order_reduction", None)
        lines.append(
            f"Inductor's mix-order reduction setting in this torch ({torch.__version__}): "
            f"{'not present' if mix is None else mix}."
        )
    else:
        lines.append("These are interpreter timings on a CPU: they do not say anything about GPU speed.")
    print("\n".join(lines))


summary()

# %%
# What the one-kernel backward saves
# ----------------------------------
# The same backward computed the way a compiler without mix-order reduction would: our kernel for
# :math:`dx` alone, then a second pass over :math:`x` and :math:`dy` for :math:`dw`, here
# :func:`torch.einsum` in fp32. Both columns count the same model bytes, so their ratio is the saving.
# Take it as an upper bound: einsum makes fp32 copies and products on its way, where a second kernel
# that read :math:`x` and :math:`dy` once would bring the two-pass backward to :math:`5MN` elements
# moved, and the fair saving to the bytes model's 5/3. Both kernels are called directly here, without
# autograd, as they would be inside a compiled graph.

def two_pass_table():
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in dict.fromkeys([SWEEP_N[1], SWEEP_N[len(SWEEP_N) // 2], SWEEP_N[-2]]):
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            w = torch.ones(n_cols, device=DEVICE, dtype=dtype)
            dy, dx = torch.randn_like(x), torch.empty_like(x)
            rstd = torch.empty(x.shape[0], device=DEVICE, dtype=torch.float32)
            rms_norm_rows_forward(x, w, torch.empty_like(x), rstd, EPS)
            dw = torch.empty_like(w)
            nbytes = 3 * x.numel() * x.element_size()

            def two_pass():
                rms_norm_rows_backward(x, w, rstd, dy, dx, None)
                return torch.einsum("mn,mn,m->n", dy.float(), x.float(), rstd)

            one = bench(lambda: rms_norm_rows_backward(x, w, rstd, dy, dx, dw))
            two = bench(two_pass)
            rows.append({"dtype": str(dtype).replace("torch.", ""), "N": n_cols,
                         "one kernel: GB/s": nbytes / one * 1e-6, "dx, then dw: GB/s": nbytes / two * 1e-6,
                         "speed-up": two / one})
    table = pd.DataFrame(rows).set_index(["dtype", "N"])
    return table.style.format({c: "{:.2f}x" if c == "speed-up" else "{:.0f}" for c in table.columns})


two_pass_table()

# %%
# Going further
# -------------
# * **Long rows.** The split backward shares a row between programs through global memory; it hides
#   the L2 round trip of each exchange behind a block of work, at the price of a third block of
#   registers. quack spreads a row over a *cluster* of thread blocks that read each other's shared
#   memory (Hopper's distributed shared memory), a much shorter trip, which Triton does not expose
#   today. A row length just past a power of two of ``SLICE_N`` leaves its last slices nearly empty:
#   slices of a size that divides the row would waste no programs. Past ``MAX_SPLIT_N`` columns, the
#   chunked kernels read each row twice and keep ``dw_partial`` in global memory. The forward at long
#   rows could use the split too, with the sum of squares as the shared value.
# * **The size of** :math:`P`. Each program of the backward writes one fp32 row of ``dw_partial``, and
#   the final pass reads them all: :math:`8PN` bytes next to the :math:`3MN \times` (element size) of
#   the model. When :math:`M` is small (few tokens, a wide model) that is no longer negligible: try a
#   split of the columns between programs, and measure.
# * **Launch cost.** The backward through autograd pays Python's price for a custom
#   ``torch.autograd.Function`` and two Triton launches on every call. When the kernels take less
#   time than that (short rows in bf16), the GPU waits for the CPU; CUDA graphs, or ``torch.compile``
#   around the whole model, remove that cost.
# * **Fuse the residual add.** In a transformer block RMSNorm follows ``h = h + f(h)``; a kernel that
#   reads both operands, writes the sum and its norm saves a full pass over ``h``.
# * **Exercise.** Change ``BWD["BYTES_PER_THREAD"]`` to 64 and rerun ``config_table()`` on a GPU:
#   which row lengths start spilling registers, and what does it do to the backward's GB/s?
#
# References: Zhang and Sennrich, *Root Mean Square Layer Normalization* (2019); the Triton
# layer-norm tutorial (its partial weight gradients are fp16 behind a lock, so not deterministic);
# Liger-Kernel's RMSNorm; PyTorch Inductor's mix-order reduction; quack's RMSNorm.

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
