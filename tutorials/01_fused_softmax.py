"""
Fused softmax
=============

Softmax turns each row of scores into probabilities. It does a handful of arithmetic operations per
element, so its speed is set by memory traffic alone: the best possible kernel reads the input once,
writes the output once, and runs as fast as a device-to-device copy of the same bytes, the *speed of
light*. In this tutorial you build that kernel in Triton, forward and backward, as a drop-in
replacement for :func:`torch.softmax`, and measure it against PyTorch, ``torch.compile`` and
Liger-Kernel on the GPU that built this page.

**What you will learn**

* how to count the bytes a kernel must move, and predict its speed before measuring it;
* how to fuse a row reduction into one pass, and how to choose the block size, the warps and the grid;
* how *online softmax* handles rows too long to hold on chip, and what that costs;
* how to share one long row among several programs that wait for each other, what makes that safe
  (all of them on the GPU at once), and how publishing one row ahead shortens the wait;
* why a row that fills half the register file runs slower than two half-size rows, and how staging it
  in shared memory with Gluon (Triton's lower-level language) puts three such rows on each SM;
* how to write the backward pass and wrap both in ``torch.autograd.Function``.

**Prerequisites**: PyTorch, and the first two official Triton tutorials (vector add, the idea of a
program and a block). On a machine without a CUDA GPU this script still runs: its kernels go through
Triton's interpreter on the CPU, with small sizes.
"""

# %%
# Where this page was made
# ------------------------
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
import warnings

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


def environment_card():
    """The facts a reader needs to judge the numbers on this page."""
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
        "built": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    return pd.DataFrame({"": list(card.values())}, index=list(card.keys()))


if not ON_GPU:
    print(
        "No CUDA GPU was found. Every kernel on this page ran through Triton's interpreter on the CPU,\n"
        "with small tensors. The timings below measure the interpreter, not a GPU: they say nothing\n"
        "about how fast these kernels are. Run this script on a CUDA GPU for real numbers."
    )
environment_card()

# %%
# The naive softmax and its bytes
# -------------------------------
# For a row :math:`x` of length :math:`N`,
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
# :math:`3MN` written, :math:`8MN` in all. A kernel that keeps a row on chip between the steps needs
# only :math:`2MN`: read :math:`x` once, write :math:`y` once. If both run at the memory's bandwidth,
# the fused kernel should be about **4 times faster**. Keep that prediction in mind; we measure it
# below.
#
# The fused kernel
# ----------------
# One program handles ``BLOCK_M`` whole rows at a time: it loads them into registers, reduces each row
# to its maximum and its sum, and writes the result. Padding columns (the block is a power of two,
# the row need not be) load as :math:`-\infty`, whose exponential is 0, so they change neither the
# maximum nor the sum. Rows past the end are clamped onto the last row: the program computes a
# duplicate it never stores, instead of working on garbage.
#
# The program does not stop after one block of rows: it walks over blocks ``pid``,
# ``pid + num_programs``, ... . Launched with one program per block, that loop runs once; launched
# with fewer programs (a *persistent* grid, sized to what the GPU holds at once), each program handles
# several blocks in turn. Which one pays is measured below.


@triton.jit
def softmax_fwd_kernel(
    x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
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
# Arithmetic is in fp32 whatever the input dtype: fp16 and bf16 are read and written as such (half
# the bytes), but the exponentials and the sum are not rounded to 8 or 11 bits on the way.
#
# Rows too long for one block: online softmax
# -------------------------------------------
# A program can hold about 32 K fp32 values in registers (1024 threads, 32 each). A longer row must
# be streamed in chunks, and the catch is that the maximum is only known after the whole row has been
# read. *Online softmax* (Milakov and Gimelshein, 2018) keeps a running maximum :math:`m` and a running
# sum :math:`s` of :math:`e^{x - m}`; when a chunk raises the maximum to :math:`m'`, the sum so far is
# rescaled:
#
# .. math::
#
#    s' = s \, e^{m - m'} + \sum_{i \in \text{chunk}} e^{x_i - m'} .
#
# One pass yields both statistics, and a second pass writes :math:`y`. Each lane of the block keeps its
# own :math:`(m, s)`; the lanes are combined once at the end of the row. That is 3 row-sized transfers
# instead of 2, so when the second read misses the cache the kernel can reach at most 2/3 of the speed
# of light. Two things keep the second read in the L2 cache instead: the first pass loads with
# ``eviction_policy="evict_last"`` and the second with ``"evict_first"``, and the output is written
# with streaming stores (``cache_modifier=".cs"``) that do not push rows out of L2; and the second
# pass walks the row *backwards*, so it starts with the chunks read last. Further down, a third design
# reads a long row only once by sharing it among several programs; the online kernels stay as its
# fallback.


@triton.jit
def softmax_fwd_online_kernel(
    x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
    BLOCK_N: tl.constexpr,
):
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
# It is again a row reduction (one dot product per row) followed by an elementwise step, so it fuses
# the same way. It reads :math:`y` and :math:`dy` and writes :math:`dx`: 3 row-sized transfers at best.
# Saving :math:`y` in the forward pass (rather than :math:`x`) spares recomputing the exponentials.


@triton.jit
def softmax_bwd_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
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


@triton.jit
def softmax_bwd_online_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
    BLOCK_N: tl.constexpr,
):
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


# %%
# Long rows read once: one row shared by several programs
# -------------------------------------------------------
# The online kernels pay for a long row with a second read. There is another way to keep a row that
# does not fit in one program on chip: spread it over several. ``SLICES`` programs (a *group*) share
# each row, each owning a slice of ``BLOCK_N`` columns that it loads once and keeps in registers. What
# a slice cannot know alone is a statistic of the whole row, so each program publishes its share of it
# in global memory, waits until every slice of the row has published, and combines the ``SLICES``
# shares itself:
#
# * forward, two numbers per slice: its maximum :math:`m_k` and its sum :math:`s_k = \sum e^{x - m_k}`
#   over its columns. The row's are :math:`m = \max_k m_k` and :math:`s = \sum_k s_k \, e^{m_k - m}`,
#   the rescaling of the online softmax, across programs instead of across chunks; then
#   :math:`y = e^{x - m_k} \cdot e^{m_k - m} / s`, from the exponentials the slice already holds.
# * backward, one number per slice: its share of :math:`\sum_j y_j \, dy_j`.
#
# Every program of the group combines the shares in the same fixed order, so all of them get the same
# bits, and so does every run: the result does not depend on which program published first. A group
# walks rows ``g``, ``g + G``, ... (``G`` groups), and issues the loads of its next row before it
# waits, so that the memory keeps working while the slices of a row wait for each other.
#
# **How a program waits.** Each share is one 64-bit *flag word* in a buffer cleared before the launch,
# written with an atomic exchange; the waiting program re-reads the row's words (``volatile``: past the
# L1 cache, which would keep returning the stale line) until every one is written. The backward packs
# a "written" bit above the fp32 bits of its share. The forward packs :math:`m_k` and :math:`s_k` into
# the two halves of the word, and "not written" is all ones, a pattern that no written word can have:
# its upper half would be a NaN, and a NaN maximum is always written as the one canonical NaN,
# ``0x7FC00000``. Since the value travels in the word that says it is there, no memory fence is
# needed. (A counter per row, incremented with release semantics after plain stores of the shares and
# polled with acquire semantics, as the RMSNorm tutorial also offers, measured slower here for every
# slice width and warp count tried.)
#
# **Why every program must be on the GPU at once.** Waiting for another program is only safe if that
# program is running. The hardware starts programs as SMs free up, so with more programs than the GPU
# holds at once, a waiting program could occupy the SM that the program it waits for needs, forever.
# The launcher therefore sizes the grid from the occupancy of the compiled kernel (the version Triton
# compiles for the call's own tensors: another dtype or stride can compile to another register count)
# and makes every group fit at once; when one group cannot fit, it falls back to the online kernels.
# Another kernel that holds SMs forever while this one runs, on another stream, could still stall it;
# nothing on this page does.
#
# **What quack does instead.** On Hopper, quack splits long rows the same way over a *cluster*: up to
# 16 thread blocks that the hardware guarantees to run at the same time on neighbouring SMs. They
# exchange their partial statistics through each other's shared memory (distributed shared memory)
# behind a cluster barrier. Triton exposes neither clusters nor distributed shared memory, so here the
# co-residency is the launcher's job (the occupancy-sized grid), the exchange goes through the L2
# cache, and the barrier is a loop that reads words another SM writes: a round trip to L2, about a
# microsecond, once per row, which the other programs on the SM and the prefetched next row cover.
#
# Under Triton's interpreter, programs run one after another, never at the same time: a program that
# waited for a later one would wait forever. There the launcher gives each row a single slice (the
# same kernel, whose wait then finds its own share).


@triton.jit
def slice_shares(x):
    """A slice's exponentials and its flag word: its maximum m_k (a NaN as the one canonical NaN, never
    all ones) in the upper half, its sum s_k of exp(x - m_k) in the lower half."""
    m = tl.max(x, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)  # a slice of -inf only: no exp(-inf - (-inf))
    e = tl.exp(x - shift)
    s = tl.sum(e, axis=0)
    m_bits = tl.where(m != m, 0x7FC00000, m.to(tl.int32, bitcast=True))
    word = (m_bits.to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    return m, e, word


@triton.jit
def load_slice(x_ptr, row, n_rows, x_row_stride, cols, n_cols):
    """This slice of a row, in its own dtype; past the last row nothing is loaded (cols < 0 masks all)."""
    return tl.load(x_ptr + tl.cast(row, tl.int64) * x_row_stride + cols,
                   mask=cols < tl.where(row < n_rows, n_cols, 0), other=-float("inf"))


@triton.jit
def slice_scale(words, m):
    """From the group's flag words and this slice's maximum m: the factor that turns the slice's
    exp(x - m) into y = exp(x - row_max) / row_sum, the slices combined in slice order."""
    m_k = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    s_k = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    row_max = tl.max(m_k, axis=0)
    row_shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(s_k * tl.exp(m_k - row_shift), axis=0)  # a NaN or +inf anywhere: NaN, as in torch
    # e * exp(m - row_max) <= 1: the exp(x - m) a slice holds, rescaled to the row's maximum
    return tl.where(m == -float("inf"), 0.0, tl.exp(m - row_shift)) / row_sum


@triton.jit
def softmax_fwd_split_kernel(
    x_ptr, y_ptr, flags_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
    SLICES: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group g does rows g, g + G, ... (G groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    x_next = load_slice(x_ptr, group, n_rows, x_row_stride, cols, n_cols)
    for row in tl.range(group, n_rows, n_groups):
        x = x_next.to(tl.float32)
        next_row = row + n_groups  # its loads are in flight while this row waits
        x_next = load_slice(x_ptr, next_row, n_rows, x_row_stride, cols, n_cols)
        m, e, word = slice_shares(x)  # this slice's shares: its maximum and its sum of exp(x - m)
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols,
                 (e * slice_scale(words, m)).to(y_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def softmax_bwd_split_kernel(
    y_ptr, dy_ptr, dx_ptr, flags_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
    SLICES: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """The backward's groups walk the rows as the forward's do; one share per slice: sum(y * dy)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    first = cols < tl.where(group < n_rows, n_cols, 0)
    y_next = tl.load(y_ptr + tl.cast(group, tl.int64) * y_row_stride + cols, mask=first, other=0.0)
    dy_next = tl.load(dy_ptr + tl.cast(group, tl.int64) * dy_row_stride + cols, mask=first, other=0.0)
    for row in tl.range(group, n_rows, n_groups):
        y, dy = y_next.to(tl.float32), dy_next.to(tl.float32)
        next_row = row + n_groups
        in_range = cols < tl.where(next_row < n_rows, n_cols, 0)
        y_next = tl.load(y_ptr + tl.cast(next_row, tl.int64) * y_row_stride + cols, mask=in_range, other=0.0)
        dy_next = tl.load(dy_ptr + tl.cast(next_row, tl.int64) * dy_row_stride + cols, mask=in_range, other=0.0)
        mine = tl.sum(y * dy, axis=0)  # this slice's share of the row's dot product
        word = (mine.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | 0x100000000  # "written"
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.min(words >> 32, axis=0) == 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        dot = tl.sum((words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), axis=0)
        dx = y * (dy - dot)
        tl.store(dx_ptr + tl.cast(row, tl.int64) * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty),
                 mask=col_ok)


# %%
# Waiting less: a lookahead of one row
# ------------------------------------
# In the kernels above a program publishes its share of a row and at once waits for the other slices'
# shares of *the same row*. Each row therefore costs a round trip through L2: the slowest slice of the
# group publishes, and only then can every other slice read the words and write its part of the row.
# The prefetched next row keeps the memory busy meanwhile, and so do the other programs on the SM, but
# a program that waits issues nothing new.
#
# The lookahead moves the publishing one row ahead. A program computes and publishes its shares of the
# group's *next* row (whose loads it issued one row earlier) before it waits for this row's, which the
# other slices published, the same way, one row earlier. By the time a program reads the words, they
# are usually written: the round trip overlaps a whole row of work instead of sitting in front of the
# store. The order of the combination does not change, so the result keeps the same bits.
#
# The price is registers. A program now holds two rows' exponentials in fp32 (this row's, waiting to be
# scaled, and the next row's, just summed) and the loads of the row after next, where the kernel above
# holds one row in fp32 and the next in its own dtype. At the same slice width fewer programs fit on an
# SM, and programs per SM are what hide each wait in the kernel above. Which of the two wins depends on
# the dtype and the row: ``SPLIT`` turns the lookahead on (``LOOKAHEAD``) only where it measured faster
# (``dev/softmax_lookahead_gpu.py`` in the repository), and the split table further down times it next
# to the same slices without it. Recomputing :math:`e^{x - m}` from the raw :math:`x` at the store
# instead of holding it saved no registers and measured slower.
#
# One more detail of the wait: a tile smaller than the program (here the ``SLICES`` flag words) is held
# in several copies, one per group of threads, and each loads its own. The lookahead kernel re-reads,
# once, any copy still unwritten after the loop, so that no thread can combine a word it loaded before
# its slice wrote it, whichever copy decided that the loop was over.


@triton.jit
def softmax_fwd_lookahead_kernel(
    x_ptr, y_ptr, flags_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
    SLICES: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group g does rows g, g + G, ... (G groups).
    Each program publishes its shares of the group's *next* row before it waits for this row's."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    # The first row's shares, published before the loop; the second row's loads in flight. (Names used
    # in the loop are not reused here: Triton would carry them around the loop.)
    x_first = load_slice(x_ptr, group, n_rows, x_row_stride, cols, n_cols)
    m_first, e_first, word = slice_shares(x_first.to(tl.float32))
    x_next = load_slice(x_ptr, group + n_groups, n_rows, x_row_stride, cols, n_cols)
    tl.atomic_xchg(flags_ptr + group * SLICES + part, word, mask=group < n_rows, sem="relaxed")
    m, e = m_first, e_first
    for row in tl.range(group, n_rows, n_groups):
        # the row after next: its loads are in flight while this row waits and is written
        x_after = load_slice(x_ptr, row + 2 * n_groups, n_rows, x_row_stride, cols, n_cols)
        # the next row's shares, published before waiting for this row's (which the group's other
        # programs published one row earlier, so the wait is mostly over before it starts)
        next_row = row + n_groups
        m_next, e_next, word = slice_shares(x_next.to(tl.float32))
        tl.atomic_xchg(flags_ptr + next_row * SLICES + part, word, mask=next_row < n_rows, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        # The test above may have been decided on another warp's copy of the words (a tile smaller than
        # the program is held once per group of threads): a copy still unwritten is read again, once.
        stale = words == -1
        words = tl.where(stale, tl.load(flags_ptr + row * SLICES + slots, mask=stale, other=-1, volatile=True),
                         words)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols,
                 (e * slice_scale(words, m)).to(y_ptr.dtype.element_ty), mask=col_ok)
        m, e, x_next = m_next, e_next, x_after


# %%
# Rows that fit in registers only once: stage them in shared memory
# -----------------------------------------------------------------
# A bf16 row of :math:`N = 32768` is 64 KB as loaded and 128 KB as fp32 values: half of an SM's
# 256 KB of registers. The fused kernel's 32-warp program that holds it is therefore alone on its
# SM, and alone it loads the row, reduces it twice, and stores it, one phase after the other, with
# nothing from another row to fill the gaps. Two 16-bit rows of 16384 columns, each in its own program
# on the same SM, do overlap, and that width runs at the copy's speed (the sweep below shows both).
#
# Shared memory holds the row in its own dtype, and an H100's 228 KB per SM holds three 64 KB rows.
# So the kernel below gives each program one row and no more registers than it needs: it copies the
# row from global into shared memory with asynchronous copies (``cp.async``, which do not go through
# registers), then reads it back three times in ``CHUNK``-column pieces: the maximum, the sum of
# exponentials, and :math:`y`. Three programs, three rows, share an SM, limited by shared memory, and
# while one reduces the others load or store. The row is still read from DRAM once.
#
# ``triton.language`` decides by itself what goes through shared memory, so this kernel is written in
# **Gluon** (``triton.experimental.gluon``), the lower-level language that ships with Triton: every
# tensor has an explicit *layout* (which thread holds which elements), and a kernel allocates shared
# memory and issues the copies itself. Three details:
#
# * each thread holds runs of 8 (bf16) contiguous elements, 16 bytes, one ``cp.async`` each;
# * every piece is its own *commit group*, so the first pass starts on piece 0 while the later pieces
#   are still on their way (``wait_group(k)``: wait until at most ``k`` groups are still in flight);
# * a thread reads back, with the same layout, exactly the elements its own copies wrote, so the waits
#   need no barrier between threads.
#
# Gluon kernels compile only for a GPU: Triton's interpreter does not run them. Without a GPU the
# launcher keeps the kernels above, and so it does for rows whose length or stride is not a multiple
# of 16 elements, or whose address is not 16-byte aligned: a copy moves 16 aligned bytes, and the mask
# at the row's end must cover whole copies. So it does on GPUs before Ampere (no ``cp.async``) and on
# GPUs whose programs cannot have 64 KB of shared memory. ``STAGED`` below says which rows take this
# kernel; its settings were measured on an H100.

# cp.async from global to shared memory: ``async_copy_global_to_shared`` in Triton 3.6, ``async_load``
# from 3.7 on (where the old name is deprecated)
async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def softmax_fwd_staged_kernel(
    x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride,
    CHUNKS: gl.constexpr, VEC: gl.constexpr, REP: gl.constexpr, EVEN: gl.constexpr,
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
    m = gl.full([CHUNK], -float("inf"), gl.float32, layout)  # running max, per lane
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)  # chunk c has landed; later ones may still be in flight
        x = x_smem.index(c).load(layout).to(gl.float32)
        m = gl.maximum(m, gl.where(cols < n_cols - c * CHUNK, x, -float("inf")))
    row_max = gl.max(m, axis=0)
    shift = gl.where(row_max == -float("inf"), 0.0, row_max)  # a row of -inf: y is NaN, as in torch
    s = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(CHUNKS):
        x = x_smem.index(c).load(layout).to(gl.float32)
        s += gl.where(cols < n_cols - c * CHUNK, gl.exp(x - shift), 0.0)
    inv_sum = 1.0 / gl.sum(s, axis=0)
    y_row = y_ptr + row * y_row_stride
    for c in range(CHUNKS):
        y = gl.exp(x_smem.index(c).load(layout).to(gl.float32) - shift) * inv_sum
        gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols - c * CHUNK)


# %%
# Block size, warps and grid
# --------------------------
# These choices live in one place, apart from the kernels:
#
# * ``BLOCK_N`` is the row length rounded up to a power of two (Triton blocks are powers of two). A
#   program of 32 warps has 1024 threads of at most 64 registers each; a row of ``MAX_FUSED_N`` = 32 K
#   fp32 values uses half of them. The backward pass holds two rows (:math:`y` and :math:`dy`), so it
#   stays fused only up to ``MAX_FUSED_BWD_N``: past that, an fp32 row spills registers to local
#   memory, and even in bf16 the online kernel, which keeps two chunks in flight, measured faster.
#   Longer rows take the online kernels, which stream ``ONLINE_BLOCK_N`` columns at a time, or the
#   split kernels where ``SPLIT`` has an entry and the row has at least its ``MIN_N`` columns.
# * ``SPLIT`` sets the split kernels per direction and element size: the shortest row they take
#   (``MIN_N``), slices of ``SLICE_N`` columns (``SLICES`` is the row length over that, rounded up to a
#   power of two) and ``num_warps``. Small programs won the sweep on an H100
#   (``dev/softmax_split_gpu.py`` in the repository): 2 to 4 warps, each thread holding 32 to 64 values
#   of each row, and as many programs per SM as the registers allow. While one program of an SM waits
#   for its group, the others load and store; a few large programs per SM leave it idle during each
#   wait. For bf16 that holds from
#   rows of 32 K on, where the fused kernel's one 32-warp program per SM cannot overlap its load and
#   store phases (at 32 K the staged kernel comes first, and the split takes the rows it cannot: no
#   GPU, or rows not aligned to 16 elements). ``LOOKAHEAD`` picks the lookahead kernel: on for the
#   fp32 forward, whose slices of 2048 columns in 2 warps measured fastest with it
#   (``dev/softmax_lookahead_gpu.py``); off for bf16, where the kernel without it, with more programs
#   per SM, stayed ahead at every slice width tried.
# * ``STAGED`` sets the staged kernel for 16-bit rows of 16 K to 32 K columns: pieces of ``CHUNK_N``
#   columns, ``num_warps`` warps, and a register cap that lets ``PER_SM`` programs share an SM (three
#   64 KB rows fill an H100's shared memory). 8 warps measured fastest for the softmax
#   (``dev/staged_check_gpu.py``); at 16 K columns the fused kernel, two programs per SM, is as fast.
# * The split grid is as many whole groups as the GPU holds at once, and no more than needed for the
#   fewest rows per group: 1024 rows with room for 33 groups take 32 groups of 32 rows, rather than 33
#   groups of which one walks a 32nd row alone at the end.
# * ``BLOCK_M`` packs several short rows into one program so that each program moves at least
#   ``MIN_ELEMENTS`` elements: a program that loads only 256 values cannot keep enough bytes in flight
#   to hide the memory's latency.
# * ``num_warps`` gives each thread about ``BYTES_PER_THREAD`` bytes of the row in the forward (8 fp32
#   or 16 bf16 values: two 16-byte loads in flight per thread, and room left in the register file for a
#   second program per SM). The backward holds two rows, both widened to fp32, so it gives each thread
#   ``BYTES_PER_THREAD`` of fp32 values of each, whatever the input dtype.
# * The grid. A *persistent* grid is the number of SMs times the number of programs one SM holds at
#   once, which the compiled kernel tells us (registers per thread, shared memory, threads): each
#   program then walks several blocks of rows. The kernels can run either way, and a measurement
#   further down compares the two. On the H100 this tutorial was tuned on, one program per block of
#   rows was as fast or faster for every kernel and row length we swept: each program is short, and the
#   hardware starts a new one the moment an old one ends, so the persistent loop only adds work. The
#   default is therefore the plain grid; ``persistent=True`` is there to measure it on your GPU.

MAX_FUSED_N = 32768  # forward: longest row kept whole in registers
MAX_FUSED_BWD_N = 16384  # backward: longest row of y (and of dy) kept whole in registers
MIN_ELEMENTS = 4096  # fewest elements one program of the fused kernels handles
BYTES_PER_THREAD = 32
ONLINE_BLOCK_N = 16384  # columns per chunk of the online kernels
ONLINE_NUM_WARPS = 32
# The split kernels, by direction and element size (2 = fp16/bf16, 4 = fp32): rows of MIN_N columns or
# more are cut into slices of about SLICE_N columns, each a program of num_warps warps; as many programs
# per SM as fit (or at most PER_SM, where an entry sets it); LOOKAHEAD=True takes the lookahead kernel
# (forward only). A missing entry keeps the other kernels.
SPLIT = {
    ("forward", 2): dict(MIN_N=32768, SLICE_N=8192, num_warps=4),
    ("forward", 4): dict(MIN_N=65536, SLICE_N=2048, num_warps=2, LOOKAHEAD=True),
    ("backward", 2): dict(MIN_N=65536, SLICE_N=4096, num_warps=4),
    ("backward", 4): dict(MIN_N=65536, SLICE_N=4096, num_warps=4),
}
# The staged kernel (forward, GPU only), by element size: rows of MIN_N to MAX_N columns, copied in
# pieces of CHUNK_N columns, num_warps warps a program, and registers capped so that PER_SM programs
# fit on an SM (the shared memory allows that many 64 KB rows). Checked before SPLIT. A missing entry
# keeps the other kernels.
STAGED = {2: dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=8, PER_SM=3)}


def fused_config(n_cols, element_size):
    """(BLOCK_M, BLOCK_N, num_warps) for rows short enough for the fused kernels."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)
    elements_per_thread = BYTES_PER_THREAD // element_size
    num_warps = min(32, max(4, block_m * block_n // (32 * elements_per_thread)))
    return block_m, block_n, num_warps


_occupancy = {}


def driver_occupancy(compiled, threads, smem):
    """Programs of this compiled kernel per SM by CUDA's occupancy calculator; None if it cannot say."""
    try:
        import ctypes
        count = ctypes.c_int()
        error = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(count), ctypes.c_void_p(compiled.function), ctypes.c_int(threads), ctypes.c_size_t(smem))
        return count.value if error == 0 else None
    except (OSError, AttributeError, TypeError):
        return None


def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once, and what limits it."""
    # Triton compiles one version per dtype of each argument and per integer that is 1 or a multiple of
    # 16 (and per pointer aligned to 16 bytes): the key tells those versions apart.
    key = (kernel, tuple(a.dtype if isinstance(a, torch.Tensor) else (a == 1, a % 16 == 0) for a in args),
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
        # registers are handed out in blocks of 256 per warp
        regs_per_warp = triton.cdiv(n_regs * 32, 256) * 256
        limits = {
            "threads": props.max_threads_per_multi_processor // threads,
            "registers": getattr(props, "regs_per_multiprocessor", 65536) // regs_per_warp // meta["num_warps"],
            "shared memory": (getattr(props, "shared_memory_per_multiprocessor", 233472) // smem)
            if smem else 32,
        }
        limit = min(limits, key=limits.get)
        fit = limits[limit]
        driver = driver_occupancy(compiled, threads, smem)  # the driver's own count, where it answers
        if driver is not None and driver < fit:
            fit, limit = driver, "driver"
        result = (max(1, fit), limit, n_regs)
    _occupancy[key] = result
    return result


NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4


def forward_plan(n_cols, element_size):
    """(kernel, meta-parameters, rows per program) of the forward for rows of n_cols elements."""
    if n_cols <= MAX_FUSED_N:
        block_m, block_n, num_warps = fused_config(n_cols, element_size)
        return softmax_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), block_m
    return softmax_fwd_online_kernel, dict(BLOCK_N=ONLINE_BLOCK_N, num_warps=ONLINE_NUM_WARPS), 1


def backward_plan(n_cols):
    """The same for the backward, which holds y and dy as fp32 whatever their dtype."""
    if n_cols <= MAX_FUSED_BWD_N:
        block_m, block_n, num_warps = fused_config(n_cols, 4)
        return softmax_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), block_m
    return softmax_bwd_online_kernel, dict(BLOCK_N=ONLINE_BLOCK_N, num_warps=ONLINE_NUM_WARPS), 1


def split_plan(direction, n_cols, element_size, split=None):
    """(meta-parameters, programs per SM wanted, lookahead or not) of the split kernel, or None where
    it is not used."""
    cfg = (SPLIT if split is None else split).get((direction, min(element_size, 4)))
    if cfg is None or n_cols < cfg["MIN_N"]:
        return None
    slices = 1  # the interpreter runs one program at a time: a program must never wait for another
    if ON_GPU:
        slices = triton.next_power_of_2(triton.cdiv(n_cols, cfg["SLICE_N"]))
    meta = dict(SLICES=slices, BLOCK_N=triton.next_power_of_2(triton.cdiv(n_cols, slices)),
                num_warps=cfg["num_warps"])
    return meta, cfg.get("PER_SM"), cfg.get("LOOKAHEAD", False)


def staged_meta(n_cols, element_size, cfg, regs_per_sm):
    """The staged kernel's meta-parameters for rows of n_cols elements under the ``STAGED`` entry cfg:
    registers capped so that ``PER_SM`` programs fit in regs_per_sm registers."""
    vec = 16 // element_size  # elements per 16-byte copy
    return dict(CHUNKS=triton.cdiv(n_cols, cfg["CHUNK_N"]), VEC=vec, EVEN=n_cols % cfg["CHUNK_N"] == 0,
                REP=cfg["CHUNK_N"] // (vec * 32 * cfg["num_warps"]), num_warps=cfg["num_warps"],
                maxnreg=min(255, regs_per_sm // (32 * cfg["num_warps"] * cfg["PER_SM"]) // 8 * 8))


def staged_plan(x2d, staged=None):
    """Meta-parameters of the staged kernel for the rows of x2d, or None where it is not used: no GPU,
    no entry in ``STAGED`` (``staged`` overrides it), a row length outside the entry's range, or rows
    whose length or stride is not a multiple of 16 elements, or not 16-byte aligned, or a GPU without
    ``cp.async`` (before Ampere) or without the shared memory for a row."""
    cfg = (STAGED if staged is None else staged).get(x2d.element_size())
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
    return meta


def split_flags(direction, n_rows, meta, device):
    """The flag words of a split launch, one per slice of each row, cleared to "not written": all ones
    in the forward, a clear "written" bit in the backward."""
    return torch.full((n_rows * meta["SLICES"],), -1 if direction == "forward" else 0, dtype=torch.int64,
                      device=device)


def split_grid(kernel, args, meta, per_sm, n_rows):
    """Programs of the split kernel: whole groups, every one on the GPU at once (they wait for each
    other), sized from the occupancy of the version Triton compiles for these very arguments, and at
    most per_sm programs per SM unless per_sm is None; 0 when one group cannot fit."""
    fit, _, _ = programs_per_sm(kernel, args, meta)
    most = min(fit, per_sm or fit) * NUM_SMS // meta["SLICES"]
    if most == 0:
        return 0
    # as many groups as needed for the fewest rows per group: then every group walks as many rows
    groups = triton.cdiv(n_rows, triton.cdiv(n_rows, most))
    return groups * meta["SLICES"]


def forward_launch(x2d, y2d, persistent=False, split=None, n_rows=None, staged=None):
    """(kernel, grid, args, meta) of the forward on these tensors. ``split`` overrides ``SPLIT`` (``{}``:
    never split), ``staged`` ``STAGED``; ``n_rows`` sizes the grid for that many rows instead of x2d's
    (for the table below). The staged kernel takes one program per row, persistent or not."""
    n_rows = x2d.shape[0] if n_rows is None else n_rows
    n_cols = x2d.shape[1]
    meta = staged_plan(x2d, staged)
    if meta is not None:
        return softmax_fwd_staged_kernel, n_rows, (x2d, y2d, n_cols, x2d.stride(0), y2d.stride(0)), meta
    sizes = (x2d.shape[0], n_cols, x2d.stride(0), y2d.stride(0))
    plan = split_plan("forward", n_cols, x2d.element_size(), split)
    if plan is not None:
        meta, per_sm, lookahead = plan
        kernel = softmax_fwd_lookahead_kernel if lookahead else softmax_fwd_split_kernel
        stand_in = torch.empty(1, dtype=torch.int64, device=x2d.device)  # compiles as the real ones; never read
        grid = split_grid(kernel, (x2d, y2d, stand_in, *sizes), meta, per_sm, n_rows)
        if grid > 0:
            flags = split_flags("forward", x2d.shape[0], meta, x2d.device)
            return kernel, grid, (x2d, y2d, flags, *sizes), meta
    kernel, meta, block_m = forward_plan(n_cols, x2d.element_size())
    grid = triton.cdiv(n_rows, block_m)
    if persistent:
        grid = min(grid, programs_per_sm(kernel, (x2d, y2d, *sizes), meta)[0] * NUM_SMS)
    return kernel, grid, (x2d, y2d, *sizes), meta


def backward_launch(y2d, dy2d, dx2d, persistent=False, split=None, n_rows=None):
    """The same for the backward."""
    n_rows = y2d.shape[0] if n_rows is None else n_rows
    n_cols = y2d.shape[1]
    sizes = (y2d.shape[0], n_cols, y2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    plan = split_plan("backward", n_cols, y2d.element_size(), split)
    if plan is not None:
        meta, per_sm, _ = plan  # the backward has no lookahead version
        stand_in = torch.empty(1, dtype=torch.int64, device=y2d.device)
        grid = split_grid(softmax_bwd_split_kernel, (y2d, dy2d, dx2d, stand_in, *sizes), meta, per_sm, n_rows)
        if grid > 0:
            flags = split_flags("backward", y2d.shape[0], meta, y2d.device)
            return softmax_bwd_split_kernel, grid, (y2d, dy2d, dx2d, flags, *sizes), meta
    kernel, meta, block_m = backward_plan(n_cols)
    grid = triton.cdiv(n_rows, block_m)
    if persistent:
        grid = min(grid, programs_per_sm(kernel, (y2d, dy2d, dx2d, *sizes), meta)[0] * NUM_SMS)
    return kernel, grid, (y2d, dy2d, dx2d, *sizes), meta


def softmax_rows_forward(x2d, y2d, persistent=False, split=None, staged=None):
    """y2d = softmax(x2d) along dim 1. Both 2-D, unit stride along the row. Returns the grid size."""
    kernel, grid, args, meta = forward_launch(x2d, y2d, persistent, split, staged=staged)
    kernel[(grid,)](*args, **meta)
    return grid


def softmax_rows_backward(y2d, dy2d, dx2d, persistent=False, split=None):
    """dx2d = y2d * (dy2d - rowsum(y2d * dy2d)). All 2-D, unit stride along the row."""
    kernel, grid, args, meta = backward_launch(y2d, dy2d, dx2d, persistent, split)
    kernel[(grid,)](*args, **meta)
    return grid


# %%
# The choices for each row length, and what the compiled kernel says about occupancy (on the GPU,
# registers per thread come from the compiler; under the interpreter there is nothing to compile):

KERNEL_NAMES = {softmax_fwd_kernel: "fused", softmax_bwd_kernel: "fused",
                softmax_fwd_online_kernel: "online", softmax_bwd_online_kernel: "online",
                softmax_fwd_split_kernel: "split", softmax_bwd_split_kernel: "split",
                softmax_fwd_lookahead_kernel: "split, lookahead", softmax_fwd_staged_kernel: "staged (Gluon)"}


def config_table():
    """One row per direction, dtype and row length: the kernel, its sizes and its grid at 2**26 elements."""
    rows = []
    for direction in ("forward", "backward"):
        for dtype, n_cols in [(d, 2**k) for d in (torch.float32, torch.bfloat16) for k in range(8, 19)]:
            if direction == "backward" and n_cols <= MAX_FUSED_BWD_N // 4:
                continue  # fused, sized by the rule of the forward's fp32 rows: left out to keep it short
            # 16 stand-in rows: compiled like the real ones (a row count that is a multiple of 16)
            x = torch.empty((16, n_cols), device=DEVICE, dtype=dtype)
            n_rows = 2**26 // n_cols
            if direction == "forward":
                kernel, grid, args, meta = forward_launch(x, x, n_rows=n_rows)
            else:
                kernel, grid, args, meta = backward_launch(x, x, x, n_rows=n_rows)
            per_sm, limit, n_regs = programs_per_sm(kernel, args, meta)
            rows.append({
                "direction": direction, "dtype": str(dtype).replace("torch.", ""), "N": n_cols,
                "kernel": KERNEL_NAMES[kernel], "BLOCK_M": meta.get("BLOCK_M", 1),
                # the staged kernel: CHUNKS pieces of VEC * 32 * num_warps * REP columns
                "BLOCK_N": meta.get("BLOCK_N", meta.get("CHUNKS", 0) * meta.get("VEC", 0) * 32 * meta["num_warps"]
                                    * meta.get("REP", 0)),
                "SLICES": meta.get("SLICES", 1), "num_warps": meta["num_warps"],
                "registers / thread": n_regs if ON_GPU else "-",
                "programs / SM": per_sm if ON_GPU else "-", "limited by": limit,
                "grid at M x N = 2**26": grid,
            })
    return pd.DataFrame(rows).set_index(["direction", "dtype", "N"])


config_table()

# %%
# The drop-in function
# --------------------
# ``softmax(x, dim)`` accepts what :func:`torch.softmax` accepts: any shape, any ``dim`` (negative
# too), non-contiguous tensors, empty and 0-d tensors. The kernels want rows with unit stride, so the
# softmax dimension is moved last; when it already is last and the rows are evenly spaced, nothing is
# copied, otherwise one copy makes it so (that copy costs a pass over memory: softmax over the last
# dimension is the fast path). The result has the input's shape and, for a contiguous input, its
# layout. Anything the kernels do not handle raises an error that says so.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"softmax: {name} has dtype {x.dtype}; these kernels support float32, float16 and "
            "bfloat16 (use torch.softmax for other dtypes)"
        )
    if ON_GPU and x.device.type != "cuda":
        raise ValueError(
            f"softmax: {name} is on {x.device}, but a CUDA GPU is in use and the kernels run there; "
            f"move it with .to('cuda')"
        )
    if not ON_GPU and x.device.type != "cpu":
        raise ValueError(
            f"softmax: {name} is on {x.device}; without a CUDA GPU the kernels run on the CPU "
            "through Triton's interpreter and need CPU tensors"
        )


def _as_rows(t, dim):
    """A 2-D view (or copy) of ``t`` whose rows run along ``dim`` with unit stride."""
    t = t.movedim(dim, -1)
    if t.stride(-1) != 1:
        t = t.contiguous()
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
        dy = dy.to(y.dtype)
        y2d, dy2d = _as_rows(y, ctx.dim), _as_rows(dy, ctx.dim)
        dx2d = torch.empty(y2d.shape, dtype=y.dtype, device=y.device)
        if y2d.numel() > 0:
            softmax_rows_backward(y2d, dy2d, dx2d)
        return _from_rows(dx2d, y, ctx.dim), None


def softmax(x, dim=-1):
    """Drop-in for ``torch.softmax(x, dim)`` on float32, float16 and bfloat16 tensors, with autograd."""
    _check(x, "x")
    if not isinstance(dim, int):
        raise TypeError(f"softmax: dim must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)  # a 0-d tensor takes dim 0 or -1, as in torch
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor "
            f"(expected a value in [{-ndim}, {ndim - 1}])"
        )
    if x.dim() == 0:
        return SoftmaxFunction.apply(x.reshape(1), 0).reshape(())
    if x.shape[dim] >= 2**31:
        raise ValueError(f"softmax: rows of {x.shape[dim]} elements exceed the kernels' limit of 2**31 - 1")
    return SoftmaxFunction.apply(x, dim % x.dim())


# %%
# Correctness
# -----------
# The reference is :func:`torch.softmax` in float64 on the same inputs. The error is
# :math:`\lVert out - ref \rVert / \lVert ref \rVert`, forward and backward, next to PyTorch's own
# error in the same dtype: ours should be no worse. The shapes cover short rows, one program holding
# several rows, a row of odd length, and rows long enough for the online and the split kernels.

torch.manual_seed(0)
if ON_GPU:
    CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (64, 30000), (16, 100_003), (4, 262_144)]
else:
    CHECK_SHAPES = [(17, 1), (33, 257), (8, 1000), (3, 40_000), (2, 70_001)]


def rel_error(out, ref):
    """||out - ref|| / ||ref||; where ref is all zeros (dx when N = 1), the absolute error."""
    return ((out.double() - ref).norm() / ref.norm().clamp(min=1.0 if ref.norm() == 0 else 0.0)).item()


def check_row(shape, dtype):
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    x64 = x.detach().double().requires_grad_(True)
    y64 = torch.softmax(x64, dim=-1)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype).replace("torch.", "")}
    for name, fn in [("ours", softmax), ("torch", torch.softmax)]:
        y = fn(x, dim=-1)
        (dx,) = torch.autograd.grad(y, x, dy)
        row[f"{name} fwd"] = rel_error(y, y64.detach())
        row[f"{name} bwd"] = rel_error(dx, dx64)
    return row


errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# The page is only built if every error is within its dtype's bound: a few units of rounding of the
# output dtype. (Triton's interpreter truncates fp32 -> bf16 instead of rounding to nearest, which
# doubles the bf16 error there; a GPU rounds.)
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
assert (errors[["ours fwd", "ours bwd"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns if c.endswith(("fwd", "bwd"))}).hide(axis="index")

# %%
# Benchmark
# ---------
# Each row of the sweep uses :math:`M \times N` elements with :math:`M N = 2^{26}` on a GPU (256 MB in
# fp32, 128 MB in bf16: far more than the 50 MB L2 cache, so every pass really goes to memory). Every
# provider runs on the same tensors in the same process, timed by :func:`triton.testing.do_bench`
# (median, the L2 cache flushed before each run, warm-up excluded). Each call is first captured in a
# CUDA graph and the graph's replays are timed, so the numbers are what the kernels cost the GPU, not
# the Python work around them (autograd, argument checks, kernel launches), which for a 0.1 ms
# backward can take as long as the kernel. The *speed of light* is a device-to-device copy of the same
# tensor, timed the same way (without a graph), counting the bytes read and written.
#
# GB/s counts the bytes a perfect kernel must move: forward, :math:`x` read and :math:`y` written;
# backward, :math:`y` and :math:`dy` read and :math:`dx` written. Both directions are timed as in
# training, on an :math:`x` that requires gradients (the backward is ``torch.autograd.grad``);
# torch.compile compiles the forward and backward of each shape once, together. Liger-Kernel stops at
# :math:`N = 65536` (its single-block kernel); beyond that its points are missing, not zero.

if ON_GPU:
    TOTAL_ELEMENTS = 2**26
    SWEEP_N = [2**k for k in range(8, 19)]
else:
    TOTAL_ELEMENTS = 2**15
    SWEEP_N = [256, 1024, 4096, 16384, 65536]

try:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
except ImportError:
    LigerSoftmaxFunction = None


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
    """name -> softmax function along the last dim; peers that cannot run here are left out."""
    found = {"naive": naive_softmax, "torch": lambda t: torch.softmax(t, dim=-1)}
    if ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note on long rows
        dynamo = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, 1024)  # one compilation per shape and dtype in the sweep
        found["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
        if LigerSoftmaxFunction is not None:
            found["Liger"] = LigerSoftmaxFunction.apply
    found["ours"] = softmax
    return found


def run_sweep():
    records = []
    fns = providers()
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in SWEEP_N:
            n_rows = max(1, TOTAL_ELEMENTS // n_cols)
            x = torch.randn((n_rows, n_cols), device=DEVICE, dtype=dtype)
            dy = torch.randn_like(x)
            nbytes = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy_ms = bench(lambda: out.copy_(x), graph=False)
            reference = torch.softmax(x.float(), dim=-1)
            xg = x.requires_grad_(True)  # both directions as in training
            for name, fn in fns.items():
                for direction in ("forward", "backward"):
                    rec = {"direction": direction, "dtype": str(dtype).replace("torch.", ""),
                           "N": n_cols, "provider": name,
                           "speed of light GB/s": 2 * nbytes / copy_ms * 1e-6}
                    try:
                        y = fn(xg)
                        if direction == "forward":
                            torch.testing.assert_close(y.float(), reference, atol=1e-2, rtol=1e-2)
                            ms, moved = bench(lambda: fn(xg)), 2 * nbytes
                        else:
                            ms = bench(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
                            moved = 3 * nbytes
                        rec["GB/s"] = moved / ms * 1e-6
                    except RuntimeError as err:  # a peer's documented limit: the point is missing
                        if name == "ours" or "exceeds" not in str(err):
                            raise
                        rec["GB/s"] = float("nan")
                    rec["% of speed of light"] = 100 * rec["GB/s"] / rec["speed of light GB/s"]
                    records.append(rec)
                    y = None
            del x, xg, dy, out, reference
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
    formats = {column: "{:.0f}" for column in table.columns}
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
    fig.suptitle(f"Softmax, M x N = {TOTAL_ELEMENTS:,} elements, on {where}")
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
        f"Fusion: at N = {n_mid} in fp32, the fused kernel is {fwd[(n_mid, 'ours')] / fwd[(n_mid, 'naive')]:.3g}x "
        f"faster than the naive five-kernel softmax (the bytes model predicted 4x)."
    )
    if not ON_GPU:
        lines.append("These are interpreter timings on a CPU: they do not say anything about GPU speed.")
    print("\n".join(lines))


summary()

# %%
# Does a persistent grid pay?
# ---------------------------
# The fused and online forward kernels at a short, a middle and the longest row length (the split
# kernels left out: their grid is persistent by design), launched both ways: one program per block of
# rows, and the occupancy-sized persistent grid whose programs each walk several blocks. A persistent program pays its start-up once and can issue the loads of its next block while
# other programs finish; a plain grid leaves that to the hardware's block scheduler. Which wins here is
# printed below the table.

def persistence_table():
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in [SWEEP_N[0], SWEEP_N[len(SWEEP_N) // 2], SWEEP_N[-1]]:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            row = {"dtype": str(dtype).replace("torch.", ""), "N": n_cols}
            for persistent in (False, True):
                grid = softmax_rows_forward(x, y, persistent=persistent, split={}, staged={})
                ms = bench(lambda: softmax_rows_forward(x, y, persistent=persistent, split={}, staged={}))
                label = "persistent" if persistent else "one program per block"
                row[f"{label}: programs"] = grid
                row[f"{label}: GB/s"] = nbytes / ms * 1e-6
            rows.append(row)
    return pd.DataFrame(rows).set_index(["dtype", "N"])


persistence = persistence_table()
faster = persistence["persistent: GB/s"] / persistence["one program per block: GB/s"]
for (dtype, n_cols), ratio in faster.items():
    print(f"{dtype}, N = {n_cols}: the persistent grid runs at {ratio:.2f}x the speed of the plain grid")
persistence.style.format("{:.0f}")

# %%
# Does the split pay?
# -------------------
# The longest rows, forward and backward, through the split kernels and through the online kernels
# they replace (``split={}`` forces the latter), timed as above. The split reads each row once but
# waits once per row; the online kernels never wait but read each row twice, the second time mostly
# from L2. Where ``SPLIT`` turns the lookahead on, the same slices are also timed without it.

NO_LOOKAHEAD = {key: dict(cfg, LOOKAHEAD=False) for key, cfg in SPLIT.items()}


def split_table():
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        size = torch.empty((), dtype=dtype).element_size()
        for n_cols in [n for n in SWEEP_N if split_plan("forward", n, size) or split_plan("backward", n, size)]:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            y, dy, dx = torch.empty_like(x), torch.randn_like(x), torch.empty_like(x)
            softmax_rows_forward(x, y)
            nbytes = x.numel() * x.element_size()
            for direction in ("forward", "backward"):
                row = {"direction": direction, "dtype": str(dtype).replace("torch.", ""), "N": n_cols}
                for label, split in (("online", {}), ("split", None), ("no lookahead", NO_LOOKAHEAD)):
                    if label == "no lookahead" and row["split: kernel"] != "split, lookahead":
                        continue  # the lookahead is off here: the same kernel as "split"
                    if direction == "forward":
                        kernel = forward_launch(x, y, split=split, staged={})[0]
                        ms, moved = bench(lambda: softmax_rows_forward(x, y, split=split, staged={})), 2 * nbytes
                    else:
                        kernel = backward_launch(y, dy, dx, split=split)[0]
                        ms, moved = bench(lambda: softmax_rows_backward(y, dy, dx, split=split)), 3 * nbytes
                    row[f"{label}: kernel"] = KERNEL_NAMES[kernel]
                    row[f"{label}: GB/s"] = moved / ms * 1e-6
                rows.append(row)
            del x, y, dy, dx
    return pd.DataFrame(rows).set_index(["direction", "dtype", "N"])


split_vs_online = split_table()
for (direction, dtype, n_cols), row in split_vs_online.iterrows():
    if row["split: kernel"].startswith("split"):
        print(f"{direction}, {dtype}, N = {n_cols}: the split kernel runs at "
              f"{row['split: GB/s'] / row['online: GB/s']:.2f}x the speed of the online kernel")
        if row["split: kernel"] == "split, lookahead":
            print(f"    with its lookahead, {row['split: GB/s'] / row['no lookahead: GB/s']:.2f}x the speed of "
                  f"the same slices without it")
    else:
        print(f"{direction}, {dtype}, N = {n_cols}: not split here (SPLIT has no entry, or a group does not fit)")
split_vs_online.style.format({c: "{:.0f}" for c in split_vs_online.columns if c.endswith("GB/s")}, na_rep="-")

# %%
# Does staging pay?
# -----------------
# 16-bit rows from 16 K to 32 K columns, forward: the staged kernel against what the launcher runs
# without it (``staged={}``), each timed as above next to a copy of the same bytes. Rows of 16384
# columns are below ``STAGED``'s range (forced here, for comparison) and 24576 is between the sweep's
# powers of two. On a machine without a GPU there is nothing to compare: Gluon kernels do not run in
# Triton's interpreter.

FORCE_STAGED = {size: dict(cfg, MIN_N=1) for size, cfg in STAGED.items()}


def staged_table():
    rows = []
    for n_cols in (16384, 24576, 32768):
        x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
        y, out = torch.empty_like(x), torch.empty_like(x)
        moved = 2 * x.numel() * x.element_size()
        row = {"dtype": "bfloat16", "N": n_cols, "copy GB/s": moved / bench(lambda: out.copy_(x), graph=False) * 1e-6}
        for label, staged in (("staged", FORCE_STAGED), ("without", {})):
            kernel, _, args, meta = forward_launch(x, y, staged=staged)
            row[f"{label}: kernel"] = KERNEL_NAMES[kernel]
            row[f"{label}: programs / SM"] = programs_per_sm(kernel, args, meta)[0]
            row[f"{label}: % of copy"] = 100 * moved / bench(lambda: softmax_rows_forward(x, y, staged=staged)) \
                * 1e-6 / row["copy GB/s"]
        rows.append(row)
        del x, y, out
    return pd.DataFrame(rows).set_index(["dtype", "N"])


if ON_GPU:
    staged_vs_registers = staged_table()
    for (dtype, n_cols), row in staged_vs_registers.iterrows():
        print(f"{dtype}, N = {n_cols}: staged {row['staged: % of copy']:.1f}% of the copy, "
              f"{row['without: kernel']} {row['without: % of copy']:.1f}%")
else:
    staged_vs_registers = pd.DataFrame({"": ["Gluon kernels need a GPU: nothing measured on this machine"]})
staged_vs_registers.style.format({c: "{:.1f}" for c in staged_vs_registers.columns if "GB/s" in c or "%" in c})

# %%
# Going further
# -------------
# * **Long rows.** The split kernels read a long row once, and pay one wait per row: a round trip
#   through L2 that the prefetch of the next row covers only if the group's programs run in step.
#   quack gets the same single read with less waiting from the hardware: a *cluster* of thread blocks
#   is guaranteed to run at once on neighbouring SMs, and they exchange their partial statistics
#   through each other's shared memory (Hopper's distributed shared memory) behind a cluster barrier,
#   not through L2. Triton exposes neither today; CuTe-DSL or CUDA C++ do. Exercise: change ``SPLIT``
#   (the slice width, the warps, ``LOOKAHEAD``) and rerun the table above. The lookahead pays in fp32
#   but not in bf16, where holding two rows of fp32 exponentials costs the programs per SM that hide
#   the wait: can you hold the next row in 16 bits until its share is published, and keep the programs
#   per SM of the kernel without lookahead? A lookahead backward is the same change, with one share
#   per slice.
# * **Rows past shared memory.** The staged kernel stops at 64 KB rows, three to an SM. A bf16 row of
#   65536 columns (128 KB) would leave one program per SM again, the problem the staged kernel solves
#   at 32 K; the split kernels share such rows among SMs through L2 instead, and a cluster (above)
#   would share them through distributed shared memory. Before the staged kernel, these designs for
#   bf16 rows of 32 K all measured slower than the split kernel on an H100 (scripts in the
#   repository's ``dev/``): a persistent Gluon program that copies the next row into shared memory
#   while it works on this one (``gluon_wide_gpu.py``), two reads of the row in small programs as
#   torch.compile does (``rowchunk_gpu.py``), one block-wide reduction instead of two
#   (``onereduce_gpu.py``); ``gluon_staged_gpu.py`` has the staged kernel's sweep. Exercise: give
#   ``STAGED`` an entry for fp32 rows of 16 K (64 KB too) and compare it with the fused kernel.
# * **Other dimensions.** ``softmax(x, dim=0)`` copies ``x`` so that rows are contiguous. A kernel that
#   reduces down columns (coalesced loads along the rows, one partial per column) would skip that copy:
#   the parallel-reduction tutorial shows the pattern.
# * **Exercise.** Change ``MIN_ELEMENTS`` and ``BYTES_PER_THREAD`` and rerun the benchmark: which
#   row lengths move, and why?
#
# References: Milakov and Gimelshein, *Online normalizer calculation for softmax* (2018); the Triton
# fused-softmax tutorial; quack's softmax and its "speed of light" write-up.
