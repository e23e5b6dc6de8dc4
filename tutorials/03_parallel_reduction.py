"""
Parallel reduction
==================

Every kernel on this site reduces something: softmax sums each row, layer norm takes a mean and a
variance per row, and its backward pass sums the weight gradients over all the rows. This tutorial is
about the reduction itself: turning many numbers into one, or a matrix into one number per row or per
column, as fast as the memory can deliver the numbers. A sum does one addition per element it reads,
so its speed is set by the bytes read alone, and its yardstick is a kernel that does nothing but read
the same input: the *speed of light*, measured beside every benchmark. You build
``reduce_sum(x, dim=None)``, a drop-in for :func:`torch.sum`, and measure it against PyTorch and
``torch.compile`` on the GPU that built this page.

**What you will learn**

* how one program reduces a block with a tree (``tl.sum``), and three ways to combine the programs:
  one atomic add each, two passes, or a persistent grid with one partial sum per program;
* why the running sums must be kept in fp32 whatever the input dtype, shown on bf16;
* which designs give the same bits run after run (floating-point addition is not associative), and
  what that costs;
* why a column sum needs a different layout from a row sum, how the block shape is chosen, and how
  ``num_stages`` keeps the loads of the next tile in flight while the current one is added.

**Prerequisites**: PyTorch, the first two official Triton tutorials (vector add, the idea of a program
and a block), and ideally the fused-softmax tutorial on this site. On a machine without a CUDA GPU this
script still runs: its kernels go through Triton's interpreter on the CPU, with small sizes.
"""

# %%
# Setup
# -----
# Every number below was measured when this page was built, on the machine described here. Without a
# CUDA GPU, Triton's interpreter runs the kernels on the CPU; it must be switched on before Triton is
# imported.

import datetime
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

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")


BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The bytes model
# ---------------
# Summing :math:`n` elements of :math:`b` bytes each must read :math:`n b` bytes and writes a handful.
# Nothing else is left to save: the sum cannot skip bytes and does one addition per element, far
# below what the arithmetic units can do. So the time a perfect sum takes is the time the GPU takes to
# *read* :math:`n b` bytes, and the sum's *speed of light* is the GB/s of a kernel that does nothing
# but read the same tensor once: a **read-only pass**, measured beside every benchmark below, on the
# same tensors, timed the same way. A device-to-device copy of the tensor, the usual yardstick of
# memory bandwidth (its GB/s counting the bytes it reads and writes), is shown beside it for
# reference.
#
# The read-only pass below views the tensor's bytes as 32-bit words, whatever its dtype, and each
# program xors the words it loads into a vector of ``BLOCK`` words, reduces that vector with
# ``tl.xor_sum`` and stores the one word that results. The stored word depends on every word loaded,
# so the compiler cannot drop a load; xor has no rounding and no overflow, so the test suite can check
# that the xor of the stored words is the xor of all of the tensor's words, which it would not be if
# a byte were skipped.
#
# Each benchmark times the pass in the two configurations of ``READ_CONFIGS`` and takes the faster:
# plain loads, one program per block of 32 KB; and loads that ask the L2 cache to evict their lines
# first (``evict_first``), one program per block of 16 KB. Of the block sizes, warps, persistent grids
# and cache hints timed on an H100, the first read fastest at most sizes, the second at some. The
# speed of light is a measurement, not a proof: where a provider below measures above 100%, it read
# the tensor faster than either configuration of this pass did, in the same run.
#
# What stands between a sum and the speed of light is how the work is split among the GPU's
# programs, and how the programs' results are combined.


@triton.jit
def read_kernel(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], words_ptr.dtype.element_ty)
    for block in tl.range(pid, tl.cdiv(n_words, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, eviction_policy=EVICT)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))  # one word per program


READ_CONFIGS = (
    dict(block=8192, num_warps=16),  # 8192 words (32 KB) per program, 16 words per thread
    dict(block=4096, num_warps=8, evict="evict_first"),  # 4096 words (16 KB), 16 words per thread
)


def read_pass(x, block=8192, num_warps=16, evict="", programs_per_sm=None):
    """Read every byte of the contiguous tensor x once; returns one xor-word per program (int32).

    ``block`` 32-bit words per program and step; ``evict`` the loads' eviction policy ("" or
    "evict_first"); ``programs_per_sm=None`` launches one program per block, a number a persistent grid
    of that many programs per SM.
    """
    if not x.is_contiguous() or x.numel() * x.element_size() % 4:
        raise ValueError("read_pass: x must be contiguous and a whole number of 32-bit words long")
    words = x.view(-1).view(torch.int32)
    grid = triton.cdiv(words.numel(), block)
    if programs_per_sm:
        grid = min(grid, programs_per_sm * NUM_SMS)
    out = torch.empty(grid, device=x.device, dtype=torch.int32)
    read_kernel[(grid,)](words, out, words.numel(), BLOCK=block, EVICT=evict, num_warps=num_warps)
    return out


# %%
# Within one program: a tree
# --------------------------
# One program loads a block of ``BLOCK`` values (a power of two) and ``tl.sum`` reduces them: each
# thread adds its own values, then the threads of a warp exchange partial sums by shuffles, halving
# the number of partial sums at each step, then the warps combine theirs through shared memory. That
# is a *tree* of depth :math:`\log_2 \mathrm{BLOCK}`, and it is not the order of a running sum
# :math:`((x_0 + x_1) + x_2) + \cdots` : floating-point addition rounds after every step, so the two
# orders give slightly different results, both correct to a few units of rounding.
#
# A program that is given more than one block keeps a vector ``acc`` of ``BLOCK`` running sums, one per
# lane, adds each new block into it, and reduces ``acc`` with the tree once at the end. The kernel below
# walks the blocks ``pid``, ``pid + num_programs``, ... as in the softmax tutorial, so the same code
# serves every design of the next section; only the launch and the last line differ.


@triton.jit
def sum_blocks_kernel(
    x_ptr, out_ptr, n,
    BLOCK: tl.constexpr, ATOMIC: tl.constexpr,
):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)  # one running sum per lane, fp32 whatever x's dtype
    for block in tl.range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes  # int64: n may pass 2**31
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc += x.to(tl.float32)
    total = tl.sum(acc, axis=0)  # the tree
    if ATOMIC:
        tl.atomic_add(out_ptr, total)  # every program adds into one fp32 number
    else:
        tl.store(out_ptr + pid, total.to(out_ptr.dtype.element_ty))  # one partial sum per program


# %%
# Across programs: three designs
# ------------------------------
# A GPU runs hundreds of programs at once, and each ends with one number. Combining them is the whole
# design question:
#
# a. **atomic**: one program per block; each adds its sum into a single fp32 number with
#    ``tl.atomic_add``. One launch (plus zeroing the output), but the additions arrive in whatever
#    order the programs finish.
# b. **two-pass**: one program per block; each writes its sum to a buffer of partial sums, and a second
#    launch of the same kernel with one program sums that buffer. The order is fixed by the code.
# c. **persistent**: only as many programs as the GPU holds at once; each walks many blocks, keeps its
#    running sums in registers and writes one partial; a one-program second pass sums those few
#    partials. Also a fixed order, and far fewer partials to write and read back.
#
# The choices (block size, warps, programs per SM) sit in one place. The memory must always have
# enough loads waiting to hide its latency, and a reduction has nothing else to overlap them with. A
# program loads ``VECTOR_BLOCK`` elements per step with ``VECTOR_NUM_WARPS`` warps (8 values, one or
# two 16-byte loads, per thread), and the persistent grid puts ``PROGRAMS_PER_SM`` such programs on
# each SM: 64 warps, the most an SM holds, so that while some warps add, the others' loads are in
# flight. These values were picked by timing a few dozen combinations on an H100; the exercise at the
# end invites you to redo that.

VECTOR_BLOCK = 4096  # elements one program of the 1-D kernels loads per step
VECTOR_NUM_WARPS = 16
PROGRAMS_PER_SM = 4  # programs per SM in the persistent grid: 4 x 16 warps
FINAL_BLOCK = 1024  # block of the one-program second pass
NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
DESIGNS = ("atomic", "two-pass", "persistent")


def vector_config(block=None, num_warps=None):
    """(BLOCK, num_warps) of the 1-D kernels; the arguments override the defaults."""
    return block or VECTOR_BLOCK, num_warps or VECTOR_NUM_WARPS


def sum_vector(x, out, design="persistent", block=None, num_warps=None, programs_per_sm=None):
    """out[0] = sum of the contiguous 1-D tensor x, accumulated in fp32; returns the grid size.

    ``out`` is a 1-element tensor of any float dtype (fp32 for ``design="atomic"``, which adds into it).
    """
    n = x.numel()
    block, num_warps = vector_config(block, num_warps)
    n_blocks = triton.cdiv(n, block)
    if design == "atomic":
        out.zero_()
        sum_blocks_kernel[(n_blocks,)](x, out, n, BLOCK=block, ATOMIC=True,
                                       num_warps=num_warps)
        return n_blocks
    if design == "two-pass":
        grid = n_blocks
    elif design == "persistent":
        grid = min(n_blocks, (programs_per_sm or PROGRAMS_PER_SM) * NUM_SMS)
    else:
        raise ValueError(f"sum_vector: unknown design {design!r}; expected one of {DESIGNS}")
    if grid == 1:  # one program covers it all: no second pass
        sum_blocks_kernel[(1,)](x, out, n, BLOCK=block, ATOMIC=False,
                                num_warps=num_warps)
        return 1
    partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_blocks_kernel[(grid,)](x, partials, n, BLOCK=block, ATOMIC=False,
                               num_warps=num_warps)
    sum_blocks_kernel[(1,)](partials, out, grid, BLOCK=FINAL_BLOCK, ATOMIC=False, num_warps=4)
    return grid


# %%
# Why the running sums are fp32
# -----------------------------
# bf16 keeps 8 significant bits. Once a running sum reaches 256, the next representable bf16 number
# is 258, so adding any value below 1 rounds back to 256: the sum stops growing. fp16 (11 bits) stalls
# the same way at 2048. To watch it happen, the kernel below is one program of ``LANES`` running sums,
# like ``acc`` above, except that after each addition it rounds the sums to ``ACC_DTYPE``: that is
# exactly a running sum held in ``ACC_DTYPE`` (a GPU adds bf16 numbers in fp32 and rounds the result
# too). It sums uniform random numbers in :math:`[0, 1)`, each lane adding up many values in turn,
# once with fp32 running sums and once with bf16 ones. The input is bf16 in both cases; the reference
# is the float64 sum of the same bf16 values, and :func:`torch.sum` (which also accumulates bf16 in
# fp32) is shown beside. (Triton's interpreter truncates instead of rounding, so there the bf16 sums
# stall already at 128.)


@triton.jit
def running_sum_kernel(x_ptr, out_ptr, n, LANES: tl.constexpr, ACC_DTYPE: tl.constexpr):
    lanes = tl.arange(0, LANES)
    acc = tl.zeros([LANES], tl.float32)
    for block in tl.range(0, tl.cdiv(n, LANES)):
        offs = tl.cast(block, tl.int64) * LANES + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc = (acc + x.to(tl.float32)).to(ACC_DTYPE).to(tl.float32)  # keep only ACC_DTYPE's bits
    tl.store(out_ptr, tl.sum(acc, axis=0))

DEMO_LANES = 1024 if ON_GPU else 16
DEMO_PER_LANE = [4, 64, 1024, 4096]


def accumulator_demo():
    torch.manual_seed(0)
    rows = []
    for per_lane in DEMO_PER_LANE:
        n = DEMO_LANES * per_lane
        x = torch.rand(n, device=DEVICE).to(torch.bfloat16)
        exact = x.double().sum().item()
        row = {"values per lane": per_lane, "n": n, "exact sum": exact}
        for name, acc_dtype in [("fp32 running sums", tl.float32), ("bf16 running sums", tl.bfloat16)]:
            out = torch.full((1,), float("nan"), device=DEVICE, dtype=torch.float32)
            running_sum_kernel[(1,)](x, out, n, LANES=DEMO_LANES, ACC_DTYPE=acc_dtype)
            row[name] = out.item()
        row["torch.sum (bf16)"] = x.sum().item()
        for name in ("fp32 running sums", "bf16 running sums", "torch.sum (bf16)"):
            row[f"error, {name.split(' ')[0]}"] = abs(row[name] - exact) / exact
        rows.append(row)
    return pd.DataFrame(rows).set_index("values per lane")


demo = accumulator_demo()
demo.style.format({c: "{:.1e}" if c.startswith("error") else "{:.4g}" for c in demo.columns})

# %%
# With fp32 running sums the error stays at the level of one rounding of the result; with bf16 ones it
# grows with the number of values each lane adds, until the sum is off by a large factor:

print(
    f"With {DEMO_PER_LANE[-1]} values per lane, bf16 running sums are off by "
    f"{100 * demo['error, bf16'].iloc[-1]:.3g}% of the exact sum; fp32 running sums by "
    f"{100 * demo['error, fp32'].iloc[-1]:.2g}%."
)

# %%
# So the kernels on this site read fp16 and bf16 as such (half the bytes of fp32) but add in fp32, and
# round to the input dtype once, at the very end.
#
# Reducing a matrix: rows and columns
# -----------------------------------
# A matrix of :math:`M \times N` elements, stored row by row, can be summed along its rows
# (``dim=1``: :math:`M` results, the softmax and layer-norm pattern) or down its columns (``dim=0``:
# :math:`N` results, the weight-gradient pattern of the layer-norm backward, which sums over all the
# rows of a batch).
#
# Memory is read fastest when neighbouring threads load neighbouring addresses (*coalesced* loads),
# so in both cases a program loads a tile of ``BLOCK_M`` rows by ``BLOCK_N`` columns, the columns
# contiguous. What differs is the axis the tile is reduced along:
#
# * **Row sums.** A program owns ``BLOCK_M`` rows and walks along them ``BLOCK_N`` columns at a time,
#   adding each tile into a ``[BLOCK_M, BLOCK_N]`` accumulator; at the end ``tl.sum(acc, axis=1)``
#   gives one sum per row. Short rows get many rows per program (``BLOCK_M`` large); when there are
#   too few rows to fill the GPU, each row is also split into ``SPLIT`` column ranges, one program each,
#   and a second pass adds the ``SPLIT`` partial sums of each row.
# * **Column sums.** Walking down a column reads one element per row: a tile ``BLOCK_N`` columns wide
#   is the way to keep loads coalesced. A program owns ``BLOCK_N`` columns and a range of rows, walks
#   down them ``BLOCK_M`` rows at a time, and ends with ``tl.sum(acc, axis=0)``: one partial sum per
#   column. With only :math:`N / \mathrm{BLOCK\_N}` column strips, the rows are split into ``SPLIT``
#   ranges so that the GPU has enough programs, and a second pass (the same kernel on the
#   ``SPLIT x N`` matrix of partials) adds them. This is the deterministic version of what
#   layer-norm backward kernels usually do with atomics.
#
# Both kernels take the strides of both axes, so a transposed or sliced matrix needs no copy.


@triton.jit
def row_sum_kernel(
    x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, cols_per_split,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # program (i, s): rows i*BLOCK_M ... , columns [s * cols_per_split, (s + 1) * cols_per_split)
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    row_offs = rows.to(tl.int64) * stride_m
    col_start = pid_s * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(col_start, col_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row_offs[:, None] + cols.to(tl.int64)[None, :] * stride_n,
                    mask=row_ok[:, None] & (cols < col_end)[None, :], other=0.0)
        acc += x.to(tl.float32)
    row_sum = tl.sum(acc, axis=1)
    out = out_ptr + pid_s.to(tl.int64) * n_rows + rows  # partials: one row of n_rows per split
    tl.store(out, row_sum.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def col_sum_kernel(
    x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, rows_per_split,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # program (j, s): columns j*BLOCK_N ... , rows [s * rows_per_split, (s + 1) * rows_per_split)
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    col_offs = cols.to(tl.int64) * stride_n
    row_start = pid_s * rows_per_split
    row_end = tl.minimum(row_start + rows_per_split, n_rows)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # num_stages=2: the loads of the next tile are issued before this one is added (see below)
    for start in tl.range(row_start, row_end, BLOCK_M, num_stages=2):
        rows = start + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_m + col_offs[None, :],
                    mask=(rows < row_end)[:, None] & col_ok[None, :], other=0.0)
        acc += x.to(tl.float32)
    col_sum = tl.sum(acc, axis=0)
    out = out_ptr + pid_s.to(tl.int64) * n_cols + cols  # partials: one row of n_cols per split
    tl.store(out, col_sum.to(out_ptr.dtype.element_ty), mask=col_ok)


# %%
# Choosing the block shape and the split
# --------------------------------------
# Each kernel loads one tile per step, and its tile's size sets the warps:
#
# * row sums: a tile of ``TILE`` elements, each thread ``ELEMENTS_PER_THREAD`` of them. ``BLOCK_N`` is
#   the row length rounded up to a power of two, at most ``ROW_BLOCK_N``; ``BLOCK_M`` fills the rest of
#   the tile, so short rows are packed many to a program.
# * column sums: a tile of ``COL_TILE_BYTES`` bytes whatever the dtype, each thread
#   ``COL_BYTES_PER_THREAD`` bytes of it, which depend on the element size: fp16 and bf16 tiles hold
#   twice the values of fp32 ones, and they went faster with twice the bytes per thread (half the
#   warps) on an H100. ``BLOCK_N`` spans ``COL_BLOCK_BYTES`` of contiguous bytes per row (less if the
#   matrix is narrower): two whole 128-byte lines of each row, and narrow enough to leave many column
#   strips to share out. ``BLOCK_M`` fills the rest of the tile. Wider strips read the same lines but
#   leave fewer programs; the section *The layout of a column sum, measured* below times the choice.
#
# A program of the column kernel walks many tiles, and a plain loop waits for each tile's loads before
# it adds them and issues the next ones. ``tl.range(..., num_stages=2)`` *pipelines* the loop: Triton
# copies the next tile into shared memory asynchronously while the current one is added, so the
# memory always has a second tile's loads to work on. (Triton pipelines a loop that has no matrix
# product only when its ``num_stages`` is given.)
#
# Then the split. Each program should walk at least ``MIN_STEPS`` tiles (or the partial sums it
# writes begin to count against the bytes it reads), and the grid should hold up to ``WAVES`` programs
# per SM, so that the last programs do not leave the GPU idle. ``SPLIT`` is the number of pieces of
# the reduced axis that gets there, within those bounds. For the column kernel it is rounded *down*:
# a grid a little over ``WAVES`` programs per SM timed slower than one just under it (its last few
# programs run when the others are done, on an otherwise idle GPU), and a matrix whose column strips
# alone nearly fill the GPU gains nothing from a split but a second pass. The row kernel's split is
# rounded up, which timed faster for its longest rows. As for the 1-D kernels, these values were
# picked by timing a few combinations on an H100.

TILE = 4096  # elements per tile of the row kernel
ELEMENTS_PER_THREAD = 16  # of the row kernel's tile
ROW_BLOCK_N = 2048
COL_TILE_BYTES = 16384  # bytes per tile of the column kernel
COL_BYTES_PER_THREAD = {4: 64, 2: 128}  # by element size: 16 fp32 values, or 64 fp16/bf16 ones
COL_BLOCK_BYTES = 256
MIN_STEPS = 4
WAVES = 4  # programs per SM in a split grid


def tile_config(n_rows, n_cols, dtype, along, block_n=None, tile=None):
    """(BLOCK_M, BLOCK_N, num_warps) for a sum along 'rows' (dim=1) or 'cols' (dim=0).

    ``tile`` (elements) and ``block_n`` override the defaults.
    """
    element_size = torch.empty((), dtype=dtype).element_size()
    if along == "rows":
        tile, per_thread, widest = tile or TILE, ELEMENTS_PER_THREAD, ROW_BLOCK_N
    else:
        tile = tile or COL_TILE_BYTES // element_size
        per_thread = COL_BYTES_PER_THREAD[element_size] // element_size
        widest = COL_BLOCK_BYTES // element_size
    if block_n is None:
        block_n = min(triton.next_power_of_2(n_cols), widest)
    block_m = max(1, min(tile // block_n, triton.next_power_of_2(n_rows)))
    num_warps = min(16, max(4, block_m * block_n // (32 * per_thread)))
    return block_m, block_n, num_warps


def choose_split(n_programs, reduced_len, step, round_up=False):
    """Pieces of the reduced axis (each a multiple of ``step`` long) for a grid of n_programs * pieces.

    The grid holds at most WAVES programs per SM, or with ``round_up`` at least that many.
    """
    most = max(1, reduced_len // (step * MIN_STEPS))  # every piece walks at least MIN_STEPS tiles
    slots = WAVES * NUM_SMS
    wanted = triton.cdiv(slots, n_programs) if round_up else slots // n_programs
    split = max(1, min(most, wanted, 65535))
    per_split = triton.cdiv(triton.cdiv(reduced_len, split), step) * step
    return triton.cdiv(reduced_len, per_split), per_split


def sum_rows(x2d, out, block_n=None, tile=None):
    """out[i] = sum of row i of the 2-D tensor x2d (any strides), accumulated in fp32. Returns config."""
    n_rows, n_cols = x2d.shape
    block_m, block_n, num_warps = tile_config(n_rows, n_cols, x2d.dtype, "rows", block_n, tile)
    n_blocks = triton.cdiv(n_rows, block_m)
    split, per_split = choose_split(n_blocks, n_cols, block_n, round_up=True)
    target = out if split == 1 else torch.empty((split, n_rows), device=x2d.device, dtype=torch.float32)
    row_sum_kernel[(n_blocks, split)](x2d, target, n_rows, n_cols, x2d.stride(0), x2d.stride(1), per_split,
                                      BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    if split > 1:  # second pass: column sums of the (split, n_rows) partials
        sum_cols(target, out)
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": num_warps, "SPLIT": split}


def sum_cols(x2d, out, block_n=None, tile=None):
    """out[j] = sum of column j of the 2-D tensor x2d (any strides), accumulated in fp32. Returns config."""
    n_rows, n_cols = x2d.shape
    block_m, block_n, num_warps = tile_config(n_rows, n_cols, x2d.dtype, "cols", block_n, tile)
    n_strips = triton.cdiv(n_cols, block_n)
    split, per_split = choose_split(n_strips, n_rows, block_m)
    target = out if split == 1 else torch.empty((split, n_cols), device=x2d.device, dtype=torch.float32)
    col_sum_kernel[(n_strips, split)](x2d, target, n_rows, n_cols, x2d.stride(0), x2d.stride(1), per_split,
                                      BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    if split > 1:  # second pass: the same kernel on the (split, n_cols) partials
        sum_cols(target, out)
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": num_warps, "SPLIT": split}


# %%
# The choices for a few shapes of :math:`2^{27}` elements (:math:`2^{14}` under the interpreter), in
# bf16:

MATRIX_ELEMENTS = 2**27 if ON_GPU else 2**14


def config_table(dtype=torch.bfloat16):
    rows = []
    for n_cols in [16, 256, 4096, 65536][: 4 if ON_GPU else 3]:
        n_rows = MATRIX_ELEMENTS // n_cols
        x = torch.zeros((n_rows, n_cols), device=DEVICE, dtype=dtype)
        for along, fn, length in [("rows (dim=1)", sum_rows, n_rows), ("columns (dim=0)", sum_cols, n_cols)]:
            config = fn(x, torch.empty(length, device=DEVICE, dtype=dtype))
            rows.append({"M x N": f"{n_rows} x {n_cols}", "sum along": along, **config})
    return pd.DataFrame(rows).set_index(["M x N", "sum along"])


config_table()

# %%
# The drop-in function
# --------------------
# ``reduce_sum(x, dim=None, keepdim=False)`` means what :func:`torch.sum` means: with ``dim=None`` the
# sum of every element, as a 0-d tensor; with one ``dim`` (negative too) the sum along it. The result
# has the input's dtype, accumulated in fp32 and rounded once. Empty inputs give 0, as in torch.
#
# * ``dim=None`` uses the persistent design. A tensor whose elements fill one block of memory (a
#   contiguous tensor, or a transposed or permuted one) is summed where it lies; anything else is
#   copied first, which costs one more pass.
# * a 1-D or 2-D tensor with a ``dim`` goes to the row or column kernel, with its strides, no copy.
#   Tensors of more dimensions are viewed as :math:`A \times R \times B` around the reduced one of length
#   :math:`R`: when :math:`B = 1` that is a row sum, when :math:`A = 1` a column sum, and otherwise the
#   reduced dimension is moved last and copied (one more pass).
# * gradients: the gradient of a sum is the incoming gradient broadcast back over the reduced
#   elements, which needs no kernel.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"reduce_sum: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"reduce_sum: x has dtype {x.dtype}; these kernels support float32, float16 and bfloat16 "
            "(use torch.sum for other dtypes)"
        )
    if ON_GPU and x.device.type != "cuda":
        raise ValueError(
            f"reduce_sum: x is on {x.device}, but a CUDA GPU is in use and the kernels run there; "
            "move it with .to('cuda')"
        )
    if not ON_GPU and x.device.type != "cpu":
        raise ValueError(
            f"reduce_sum: x is on {x.device}; without a CUDA GPU the kernels run on the CPU "
            "through Triton's interpreter and need CPU tensors"
        )


def _flat(x):
    """x as a 1-D tensor over the same memory when its elements fill one dense block, else a copy."""
    order = sorted(range(x.dim()), key=lambda d: (-x.stride(d), -x.shape[d]))
    dense = x.permute(order)
    return dense.view(-1) if dense.is_contiguous() else x.reshape(-1)


def _sum_all(x):
    out = torch.empty(1, device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        return out.zero_().reshape(())
    sum_vector(_flat(x), out, "persistent")
    return out.reshape(())


def _sum_dim(x, dim):
    shape = list(x.shape)
    length = shape.pop(dim)
    out = torch.empty(shape, device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        return out.zero_()
    before = 1
    for size in x.shape[:dim]:
        before *= size
    after = out.numel() // before
    if after == 1:  # rows of length `length`
        sum_rows(x.reshape(before, length), out.view(-1))
    elif before == 1:  # columns of length `length`
        sum_cols(x.reshape(length, after), out.view(-1))
    else:  # A x R x B with A, B > 1: move the reduced dim last (a copy), then sum rows
        sum_rows(x.movedim(dim, -1).reshape(-1, length), out.view(-1))
    return out


class SumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim):
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        if dim is None:
            out = _sum_all(x)
            return out.reshape([1] * x.dim()) if keepdim else out
        out = _sum_dim(x, dim)
        return out.unsqueeze(dim) if keepdim else out

    @staticmethod
    def backward(ctx, grad):
        if ctx.dim is not None and not ctx.keepdim:
            grad = grad.unsqueeze(ctx.dim)
        return grad.expand(ctx.shape), None, None


def reduce_sum(x, dim=None, keepdim=False):
    """Drop-in for ``torch.sum(x, dim, keepdim)`` on float32, float16 and bfloat16 tensors, with autograd.

    ``dim`` is None (all elements) or a single int; fp32 accumulation, result in x's dtype.
    """
    _check(x)
    if dim is not None:
        if isinstance(dim, (tuple, list)):
            if len(dim) != 1:
                raise TypeError(
                    f"reduce_sum: dim={tuple(dim)} names several dims; this function reduces one dim or "
                    "all of them (dim=None): call it once per dim, or flatten those dims first"
                )
            dim = dim[0]
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"reduce_sum: dim must be None or an int, got {type(dim).__name__}")
        ndim = max(x.dim(), 1)  # a 0-d tensor takes dim 0 or -1, as in torch
        if not -ndim <= dim < ndim:
            raise IndexError(
                f"reduce_sum: dim {dim} is out of range for a {x.dim()}-d tensor "
                f"(expected a value in [{-ndim}, {ndim - 1}])"
            )
        if x.dim() == 0:
            return SumFunction.apply(x, None, False)
        dim %= x.dim()
    return SumFunction.apply(x, dim, keepdim)


# %%
# Correctness
# -----------
# The reference is the float64 sum of the same values. The error is
# :math:`\lVert out - ref \rVert / \lVert ref \rVert`, next to :func:`torch.sum`'s own error in the
# same dtype: ours should be no worse than a rounding or two of the output dtype. The shapes cover one
# element, odd and prime lengths, a transposed matrix, and sizes that need a second pass.

torch.manual_seed(0)
if ON_GPU:
    CHECK_CASES = [((1,), None), ((1_000_003,), None), ((2**26,), None), ((4099, 1031), None),
                   ((4099, 1031), 0), ((4099, 1031), 1), ((7, 3_000_017), 1), ((3_000_017, 7), 0),
                   ((1031, 4099), "0 of x.T"), ((16, 33, 65), 1)]
else:
    CHECK_CASES = [((1,), None), ((10_007,), None), ((257, 65), None), ((257, 65), 0), ((257, 65), 1),
                   ((3, 5003), 1), ((5003, 3), 0), ((65, 129), "0 of x.T"), ((4, 9, 17), 1)]


def rel_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def check_row(shape, dim, dtype):
    x = torch.randn(shape, device=DEVICE) + 0.5  # a non-zero mean, as activations have
    if dtype == torch.float16:  # fp16 stops at 65504: scale so that even the sum of everything fits
        x *= min(1.0, 2000.0 / x.numel())
    x = x.to(dtype)
    if dim == "0 of x.T":
        x, dim = x.t(), 0
    ref = x.double().sum() if dim is None else x.double().sum(dim)
    return {
        "shape": " x ".join(map(str, x.shape)) + (" (transposed)" if not x.is_contiguous() else ""),
        "dim": "None" if dim is None else str(dim), "dtype": str(dtype).replace("torch.", ""),
        "ours": rel_error(reduce_sum(x, dim), ref),
        "torch": rel_error(torch.sum(x) if dim is None else torch.sum(x, dim), ref),
    }


errors = pd.DataFrame([check_row(s, d, t) for t in SUPPORTED_DTYPES for s, d in CHECK_CASES])
# The page is only built if every error is within a few roundings of the output dtype (Triton's
# interpreter truncates fp32 -> bf16 instead of rounding to nearest, which doubles the bf16 error).
TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
assert (errors["ours"] <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({"ours": "{:.1e}", "torch": "{:.1e}"}).hide(axis="index")

# %%
# Benchmark
# ---------
# Two sweeps, every provider on the same tensors in the same process, timed by
# :func:`triton.testing.do_bench` (median, the L2 cache flushed before each run, warm-up excluded) on
# replays of a CUDA graph that captured the call (the GPU's time, without the Python work around the
# kernels), next to the read-only pass of the same tensor, timed the same way, and a device-to-device
# copy of it (timed without a graph, see ``bench``):
#
# * **the whole vector**: :math:`n` elements, from a few MB to 1 GiB in fp32, each design of
#   ``sum_vector`` against :func:`torch.sum` and ``torch.compile``;
# * **a matrix** of :math:`M \times N = 2^{27}` elements (512 MB in fp32, 256 MB in bf16: far more than
#   the 50 MB L2 cache), summed along rows and down columns, :math:`N` swept.
#
# GB/s counts the bytes a perfect kernel must move: the input, read once (the few outputs are not
# counted). The speed of light is the read-only pass's GB/s; the copy's GB/s, counting the bytes it
# reads and writes, is shown for reference. The two need not agree: before each timed call
# ``do_bench`` empties the L2 cache by writing zeros over a buffer larger than it, and the lines this
# leaves dirty are written back to memory during the next timed call, whatever it is. A copy moves
# twice the bytes of a read of the same tensor, so that write-back weighs on it half as much; the
# tables show what it costs the read-only pass and the sums alike.

if ON_GPU:
    SWEEP_VECTOR = [2**20, 2**22, 2**24, 2**26, 2**28]
    SWEEP_N = [16, 256, 4096, 65536, 2**20]
else:
    SWEEP_VECTOR = [2**10, 2**12, 2**14]
    SWEEP_N = [16, 256, 4096]


if ON_GPU:
    # A CUDA graph cannot be captured on the default stream, and autograd runs a backward on the stream
    # of its forward: the rest of this page runs on a stream of its own.
    torch.cuda.set_stream(torch.cuda.Stream())


def bench(fn, graph=True):
    """Median time of one call of fn() in ms.

    On the GPU the call is captured once in a CUDA graph, and triton.testing.do_bench times replays
    of it (median, the L2 cache flushed before each, warm-up excluded): the same kernels with the same
    arguments, without Python's per-call work, so every provider is timed on what its kernels cost
    the GPU. ``graph=False`` times fn() itself: the reference copy does, because inside a graph CUDA
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


def compiled(fn):
    """torch.compile(fn) on the GPU (one compilation per shape and dtype); None on the CPU."""
    if not ON_GPU:  # Inductor's CPU code would time a C++ compiler here, not a GPU
        return None
    dynamo = torch._dynamo.config
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo, knob):
            setattr(dynamo, knob, 1024)
    return torch.compile(fn, dynamic=False)


def vector_providers(out):
    found = {"torch": torch.sum, "torch.compile": compiled(lambda t: t.sum())}
    for design in DESIGNS:
        found[design] = lambda t, design=design: sum_vector(t, out, design)
    return {name: fn for name, fn in found.items() if fn is not None}


def matrix_providers(along, out):
    dim = 1 if along == "rows" else 0
    found = {"torch": lambda t: torch.sum(t, dim), "torch.compile": compiled(lambda t: t.sum(dim))}
    found["ours"] = (lambda t: sum_rows(t, out)) if along == "rows" else (lambda t: sum_cols(t, out))
    return {name: fn for name, fn in found.items() if fn is not None}


# On the CPU the interpreter runs the read-only pass thousands of times slower than the memory could
# feed it, which would put torch's native sums at millions of percent: there the copy stands in for it
# (these are not GPU timings anyway).
LIGHT = "the read-only pass" if ON_GPU else "the copy"


def yardsticks(x):
    """(speed of light, copy), GB/s on x: the faster configuration (READ_CONFIGS) of the read-only pass,
    in bytes read, and the copy, in bytes read and written (timed without a graph, see ``bench``). On
    the CPU the copy is both."""
    nbytes = x.numel() * x.element_size()
    copy_out = torch.empty_like(x)
    copy = 2 * nbytes / bench(lambda: copy_out.copy_(x), graph=False) * 1e-6
    del copy_out
    if not ON_GPU:
        return copy, copy
    return max(nbytes / bench(lambda c=c: read_pass(x, **c)) * 1e-6 for c in READ_CONFIGS), copy


def measure(records, x, providers, check, **labels):
    """Time the read-only pass, the copy and every provider on x; append one record per provider."""
    nbytes = x.numel() * x.element_size()
    light, copy = yardsticks(x)
    reference = check()
    for name, fn in providers.items():
        result = fn(x)  # torch's providers return the sum; ours write it to `out`, checked by the caller
        if isinstance(result, torch.Tensor):
            torch.testing.assert_close(result.float(), reference, atol=1e-2, rtol=1e-2)
        gbps = nbytes / bench(lambda: fn(x)) * 1e-6
        records.append({**labels, "provider": name, "speed of light GB/s": light, "copy GB/s": copy,
                        "GB/s": gbps, "% of speed of light": 100 * gbps / light})


def run_sweeps():
    records = []
    for dtype in (torch.float32, torch.bfloat16):
        label = str(dtype).replace("torch.", "")
        for n in SWEEP_VECTOR:
            x = torch.randn(n, device=DEVICE, dtype=dtype)
            out = torch.empty(1, device=DEVICE, dtype=torch.float32)
            providers = vector_providers(out)
            measure(records, x, providers, lambda: x.float().sum(), sweep="vector", dtype=label, size=n)
            assert torch.allclose(out, x.float().sum(), rtol=1e-3, atol=1e-2), "sum_vector is wrong"
            del x
        for n_cols in SWEEP_N:
            x = torch.randn((MATRIX_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=dtype)
            for along in ("rows", "cols"):
                out = torch.empty(x.shape[0] if along == "rows" else n_cols, device=DEVICE, dtype=dtype)
                dim = 1 if along == "rows" else 0
                measure(records, x, matrix_providers(along, out), lambda: x.float().sum(dim),
                        sweep=along, dtype=label, size=n_cols)
                torch.testing.assert_close(out.float(), x.float().sum(dim), atol=1e-1, rtol=1e-2)
            del x
        if ON_GPU:
            torch.cuda.empty_cache()
    return pd.DataFrame(records)


results = run_sweeps()


def sweep_table(sweep, ours):
    """GB/s per provider (columns) and size (rows), with ours as % of the speed of light (the read-only
    pass); the copy's GB/s (bytes read and written) is there for reference."""
    part = results[results.sweep == sweep]
    table = part.pivot_table(index=["dtype", "size"], columns="provider", values="GB/s", dropna=False)
    order = [p for p in ["torch", "torch.compile", *DESIGNS, "ours"] if p in table.columns]
    table = table[order]
    first = part.groupby(["dtype", "size"]).first()
    table.insert(0, "copy (reference)", first["copy GB/s"])
    table.insert(0, "speed of light", first["speed of light GB/s"])
    table[f"{ours}, % of light"] = table[ours] / table["speed of light"] * 100
    table[f"{ours} / torch"] = table[ours] / table["torch"]
    table.index.names = ["dtype", "n" if sweep == "vector" else "N"]
    formats = {column: "{:.0f}" for column in table.columns}  # one call: a second .format() resets the rest
    formats.update({f"{ours}, % of light": "{:.1f}%", f"{ours} / torch": "{:.2f}"})
    return table.style.format(formats, na_rep="-")


# %%
# The whole vector, GB/s of bytes read (higher is better). *speed of light* is the read-only pass of
# the same tensor, *copy (reference)* the device-to-device copy's GB/s counting bytes read and written:

sweep_table("vector", "persistent")

# %%
# Sums along the rows (``dim=1``) of :math:`M \times N` matrices, GB/s:

sweep_table("rows", "ours")

# %%
# Sums down the columns (``dim=0``), GB/s:

sweep_table("cols", "ours")

# %%
# The same numbers as a plot, each provider as a fraction of the read-only pass measured next to it;
# the thin grey line is the copy, on the same scale:


def plot_sweeps():
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharey=True, facecolor="white")
    styles = {"torch": "--", "torch.compile": "-.", "atomic": ":", "two-pass": (0, (3, 1, 1, 1)),
              "persistent": "-", "ours": "-"}
    titles = {"vector": "whole vector", "rows": "rows (dim=1)", "cols": "columns (dim=0)"}
    for i, dtype in enumerate(["float32", "bfloat16"]):
        for j, sweep in enumerate(["vector", "rows", "cols"]):
            ax = axes[i][j]
            part = results[(results.sweep == sweep) & (results.dtype == dtype)]
            for name, style in styles.items():
                line = part[part.provider == name]
                if len(line):
                    ax.plot(line["size"], line["% of speed of light"], linestyle=style, marker="o",
                            markersize=3, linewidth=2.5 if name in ("persistent", "ours") else 1.5,
                            label=name)
            light = part.groupby("size")[["speed of light GB/s", "copy GB/s"]].first()
            ax.plot(light.index, 100 * light["copy GB/s"] / light["speed of light GB/s"], color="grey",
                    linewidth=1, linestyle=":", label="copy (reference)")
            ax.axhline(100, color="black", linewidth=1, label=f"speed of light ({LIGHT.removeprefix('the ')})")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{titles[sweep]}, {dtype}")
            ax.grid(True, alpha=0.3)
            if j == 0:
                ax.set_ylabel(f"% of {LIGHT}'s GB/s")
            if i == 1:
                ax.set_xlabel("elements n" if sweep == "vector" else "row length N (elements)")
            if i == 0:
                ax.legend(loc="lower right", fontsize=7)
    where = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU, Triton interpreter (not GPU timings)"
    fig.suptitle(f"Sums, matrices of M x N = {MATRIX_ELEMENTS:,} elements, on {where}")
    fig.tight_layout()


plot_sweeps()

# %%
# Determinism, measured
# ---------------------
# Each design runs the same sum on the same fp32 input many times, and we count the distinct bit
# patterns among the results. The two-pass and persistent designs add in an order fixed by the code
# and the grid, so they must give one result every time (on one GPU: the persistent grid depends on its
# number of SMs). The atomic design adds the programs' sums in the order they finish, which changes
# from run to run. The cost of determinism is read from the vector sweep at its largest size.

DETERMINISM_RUNS = 20 if ON_GPU else 5
DETERMINISM_N = 2**26 if ON_GPU else 2**14


def determinism_table():
    torch.manual_seed(1)
    x = torch.randn(DETERMINISM_N, device=DEVICE) + 0.5
    xm = x.view(-1, 1024)
    out = torch.empty(1, device=DEVICE, dtype=torch.float32)
    out_cols = torch.empty(1024, device=DEVICE, dtype=torch.float32)
    cases = {f"sum_vector, {design}": lambda d=design: (sum_vector(x, out, d), out.clone())[1]
             for design in DESIGNS}
    cases["torch.sum"] = lambda: torch.sum(x)
    cases["sum_cols (dim=0)"] = lambda: (sum_cols(xm, out_cols), out_cols.clone())[1]
    cases["torch.sum(dim=0)"] = lambda: torch.sum(xm, 0)
    largest = results[(results.sweep == "vector") & (results.dtype == "float32")
                      & (results["size"] == SWEEP_VECTOR[-1])].set_index("provider")
    rows = []
    for name, fn in cases.items():
        distinct = []
        for _ in range(DETERMINISM_RUNS):
            result = fn()
            if not any(torch.equal(result, seen) for seen in distinct):
                distinct.append(result)
        provider = name.split(", ")[-1] if name.startswith("sum_vector") else {"torch.sum": "torch"}.get(name)
        rows.append({
            "design": name, "runs": DETERMINISM_RUNS, "distinct results": len(distinct),
            "bitwise reproducible": "yes" if len(distinct) == 1 else "no",
            f"GB/s at n = {SWEEP_VECTOR[-1]:,}": largest["GB/s"].get(provider, float("nan")),
        })
    return pd.DataFrame(rows).set_index("design")


determinism = determinism_table()
determinism.style.format({f"GB/s at n = {SWEEP_VECTOR[-1]:,}": "{:.0f}"}, na_rep="-")

# %%
# The layout of a column sum, measured
# ------------------------------------
# What if the column sum reused the row kernel on the transposed matrix ``x.T``? Its "rows" are then
# the columns of ``x``, :math:`N` elements apart in memory: each thread's loads land on a different
# 128-byte line and most of every line fetched is thrown away. The table times that against the
# column kernel with strips of several widths ``BLOCK_N``, on the same fp32 matrix of
# :math:`2^{27}` elements, :math:`N = 4096`, as a percentage of the read-only pass over the same matrix
# (the copy's GB/s, bytes read and written, in its own row for reference).

LAYOUT_N = 4096 if ON_GPU else 256


def layout_table():
    x = torch.randn((MATRIX_ELEMENTS // LAYOUT_N, LAYOUT_N), device=DEVICE)
    out = torch.empty(LAYOUT_N, device=DEVICE)
    nbytes = x.numel() * x.element_size()
    light, copy = yardsticks(x)
    rows = [{"variant": f"{LIGHT.removeprefix('the ')} (speed of light)", "(BLOCK_M, BLOCK_N, SPLIT)": "-", "GB/s": light,
             "% of speed of light": 100.0},
            {"variant": "copy (reference, bytes read + written)", "(BLOCK_M, BLOCK_N, SPLIT)": "-", "GB/s": copy,
             "% of speed of light": 100 * copy / light}]
    cases = {"row kernel on x.T": lambda: sum_rows(x.t(), out)}
    for block_n in (16, 64, 128, 256, 1024):
        cases[f"column kernel, BLOCK_N = {block_n}"] = lambda b=block_n: sum_cols(x, out, block_n=b)
    cases["column kernel, default"] = lambda: sum_cols(x, out)
    cases["torch.sum(x, 0)"] = lambda: torch.sum(x, 0)
    for name, fn in cases.items():
        config = fn()  # ours return their configuration, torch.sum its result
        result = config if isinstance(config, torch.Tensor) else out
        torch.testing.assert_close(result, x.sum(0), atol=1e-2, rtol=1e-3)
        shape = "-" if isinstance(config, torch.Tensor) else \
            f"({config['BLOCK_M']}, {config['BLOCK_N']}, {config['SPLIT']})"
        gbps = nbytes / bench(fn) * 1e-6
        rows.append({"variant": name, "(BLOCK_M, BLOCK_N, SPLIT)": shape,
                     "GB/s": gbps, "% of speed of light": 100 * gbps / light})
    return pd.DataFrame(rows).set_index("variant")


layout = layout_table()
layout.style.format({"GB/s": "{:.0f}", "% of speed of light": "{:.1f}%"})

# %%
# Reading the numbers
# -------------------
# The sentences below are computed from the tables above, in this build.


BIG_BYTES = 2**28 if ON_GPU else 2**14  # "large" inputs in the summary: 256 MB and more on the GPU
BIG = f"{BIG_BYTES // 2**20} MB" if ON_GPU else f"{BIG_BYTES // 2**10} KB"


def summary():
    lines = []
    element_size = results.dtype.map({"float32": 4, "bfloat16": 2})
    nbytes = element_size * results["size"].where(results.sweep == "vector", MATRIX_ELEMENTS)
    large = results[nbytes >= BIG_BYTES]
    ratio = large["speed of light GB/s"] / large["copy GB/s"]
    if ON_GPU:  # on the CPU the copy is the speed of light itself
        lines.append(
            f"Speed of light: on inputs of {BIG} and more {LIGHT} read "
            f"{large['speed of light GB/s'].min():.0f}-{large['speed of light GB/s'].max():.0f} GB/s, "
            f"{100 * ratio.min():.3g}-{100 * ratio.max():.3g}% of the copy's "
            f"{large['copy GB/s'].min():.0f}-{large['copy GB/s'].max():.0f} GB/s (bytes read and written)."
        )
    for sweep, provider, what in [("vector", "persistent", "the persistent whole-vector sum"),
                                  ("cols", "ours", "the column sums"), ("rows", "ours", "the row sums")]:
        part = large[(large.sweep == sweep) & (large.provider == provider)]
        lines.append(
            f"On those inputs {what} read at {part['% of speed of light'].min():.3g}-"
            f"{part['% of speed of light'].max():.3g}% of {LIGHT} "
            f"(lowest: {part.loc[part['% of speed of light'].idxmin(), 'dtype']}, "
            f"{'n' if sweep == 'vector' else 'N'} = {part.loc[part['% of speed of light'].idxmin(), 'size']:,})."
        )
    for dtype in ("float32", "bfloat16"):
        vec = results[(results.sweep == "vector") & (results.dtype == dtype)]
        big = vec[vec["size"] == vec["size"].max()].set_index("provider")
        best = big.loc[list(DESIGNS), "GB/s"].idxmax()
        lines.append(
            f"Whole vector, {dtype}, n = {vec['size'].max():,}: the persistent design reads at "
            f"{big.loc['persistent', '% of speed of light']:.3g}% of {LIGHT} "
            f"({big.loc['persistent', 'GB/s'] / big.loc['torch', 'GB/s']:.3g}x torch.sum); the fastest "
            f"design there is {best} ({big.loc[best, '% of speed of light']:.3g}%)."
        )
        for sweep, what in [("rows", "Row sums"), ("cols", "Column sums")]:
            part = results[(results.sweep == sweep) & (results.dtype == dtype)]
            ours = part[part.provider == "ours"].set_index("size")
            torch_ = part[part.provider == "torch"].set_index("size")
            ratio = ours["GB/s"] / torch_["GB/s"]
            lines.append(
                f"{what}, {dtype}: ours at {ours['% of speed of light'].min():.3g}-"
                f"{ours['% of speed of light'].max():.3g}% of {LIGHT} over N = "
                f"{min(SWEEP_N)}..{max(SWEEP_N)}; "
                f"against torch.sum from {ratio.min():.3g}x (N = {ratio.idxmin()}) to "
                f"{ratio.max():.3g}x (N = {ratio.idxmax()})."
            )
    varying = determinism[determinism["distinct results"] > 1].index.tolist()
    lines.append(
        f"Determinism: over {DETERMINISM_RUNS} runs, "
        + (f"{', '.join(varying)} gave more than one result; every other design gave one."
           if varying else "every design gave one result"
           + (" (the interpreter runs programs one after another, so even atomics add in a fixed order)."
              if not ON_GPU else "."))
    )
    strided = layout.loc["row kernel on x.T", "GB/s"]
    lines.append(
        f"Layout: the column kernel (default) reads at {layout.loc['column kernel, default', 'GB/s'] / strided:.3g}x "
        f"the speed of the row kernel walking down the columns of x.T."
    )
    if not ON_GPU:
        lines.append("These are interpreter timings on a CPU: they do not say anything about GPU speed.")
    print("\n".join(lines))


summary()

# %%
# Going further
# -------------
# * **One launch, still deterministic.** The two-pass designs pay a second, tiny launch. The last
#   program to finish can do the second pass instead: each program writes its partial, then increments
#   a counter with ``tl.atomic_add``; the one that sees the count reach the grid size sums the partials
#   in their fixed order. The order of additions no longer depends on timing, only the choice of which
#   program does them. This is what CUB's single-pass reductions and PyTorch's own reduction kernel do.
# * **What is left between the bf16 column sums and the read-only pass.** A bf16 sum of the same
#   number of elements takes half the time of an fp32 one, so every fixed cost of a call weighs twice
#   as much. The write-back of the lines ``do_bench``'s flush leaves dirty is one such cost, but the
#   read-only pass pays it too: it is inside the speed of light (and it is why a read can measure below
#   the copy, which moves twice the bytes in its timed call). The split grid's second launch is not:
#   the read-only pass has none. Things that did not beat the kernel above on an H100, for the
#   curious: Hopper's TMA loads (``TensorDescriptor``), a persistent grid walking the strips, wider
#   strips or tiles, more warps, bf16 pairs loaded as 32-bit words, and eviction hints on the loads
#   (``evict_first``, streaming loads). The single-launch design of the first bullet removes the
#   second launch.
# * **Wider accumulation.** fp32 running sums lose digits too, only much later: a lane that adds
#   :math:`10^8` values has the same problem as a bf16 lane adding :math:`10^3`. Kahan (compensated)
#   summation keeps a second fp32 number per lane with the rounding error of each addition; it costs
#   three more additions per element, which a memory-bound kernel gets for free.
# * **Other reductions.** Replace the addition by ``tl.maximum`` and zero by :math:`-\infty` and the same
#   kernels compute a max; max is associative, so every design is deterministic.
# * **Exercise.** Change ``VECTOR_NUM_WARPS``, ``PROGRAMS_PER_SM``, ``TILE``, ``COL_TILE_BYTES``,
#   ``COL_BYTES_PER_THREAD`` and ``COL_BLOCK_BYTES`` and rerun the benchmark: which sizes move, and
#   why? The row kernel's bf16 tile of ``TILE`` elements holds half the bytes of an fp32 one, where
#   the column kernel counts its tile in bytes: does counting the row tile in bytes change the bf16
#   row sums? Drop ``num_stages=2`` from the column kernel: what does each dtype lose? Round the
#   column kernel's split up (pass ``round_up=True`` to ``choose_split`` in ``sum_cols``): which
#   widths :math:`N` change?
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; the CUB library's device-wide
# reductions; the layer-norm backward of the Triton tutorials, which sums weight gradients with
# atomics and a lock.

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
