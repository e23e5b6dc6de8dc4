"""
Parallel reduction, rows and columns: the layout of a matrix sum
================================================================

A matrix of :math:`M \times N` elements, stored row by row, is summed along its rows (``dim=1``: :math:`M` results,
the softmax and layer-norm pattern) or down its columns (``dim=0``: :math:`N` results, the weight-gradient pattern of
the layer-norm backward). The core page (:ref:`sphx_glr_tutorials_03_parallel_reduction.py`) sums both with one row
kernel, a column sum being a row sum of ``x.T``. **What you will learn**: why a column sum needs a layout of its own,
measured; the block shape in bytes for columns; splitting the reduced axis across programs when there are few rows or
strips, with a second pass that keeps the sum deterministic; ``num_stages``; the alternatives to the persistent grid of
:ref:`sphx_glr_tutorials_03_sum_of_all_elements.py`; why running sums are fp32. Measured against the core design,
``torch.sum``, ``torch.compile`` and a read-only pass at N = 16 to :math:`2^{20}`, fp32 and bf16.
"""

import contextlib, datetime, math, os, platform, subprocess, timeit
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import matplotlib.pyplot as plt, pandas as pd
import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The core kernel and the speed of light
# --------------------------------------
# Carried from the core page: the row kernel. A program owns ``BLOCK_M`` rows, walks them ``BLOCK_N`` columns at a time
# into a ``[BLOCK_M, BLOCK_N]`` fp32 accumulator, and stores :math:`\sum_j x_{ij}`; ``EVEN`` drops the masks where every
# tile is full, ``evict_first`` lets L2 drop lines read once. A column sum there is this kernel on ``x.T``.

@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    row_offs = rows.to(tl.int64) * stride_m
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        offs = row_offs[:, None] + cols.to(tl.int64)[None, :] * stride_n
        if EVEN:  # every tile full: no mask to compute and test an element
            x = tl.load(x_ptr + offs, eviction_policy="evict_first")
        else:
            x = tl.load(x_ptr + offs, mask=row_ok[:, None] & (cols < n_cols)[None, :], other=0.0,
                        eviction_policy="evict_first")
        acc += x.to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_ok)

def _core_row_config(n_rows, n_cols):  # (BLOCK_M, BLOCK_N, num_warps) of row_sum_kernel
    block_n = min(triton.next_power_of_2(n_cols), 8192)  # a long row fills the tile alone: 8192 columns a step
    block_m = max(1, min(8192 // block_n, triton.next_power_of_2(n_rows)))  # short rows: many a tile
    num_warps = min(16, max(4, block_m * block_n // (32 * 16)))  # 16 elements a thread, 4 to 16 warps
    return block_m, block_n, num_warps

def core_sum_rows(x2d, out):
    """The core page's row sum: one program per BLOCK_M rows, one split covering each row. Returns config."""
    (n_rows, n_cols), (block_m, block_n, num_warps) = x2d.shape, _core_row_config(*x2d.shape)
    row_sum_kernel[(triton.cdiv(n_rows, block_m),)](x2d, out, n_rows, n_cols, *x2d.stride(), BLOCK_M=block_m, BLOCK_N=block_n,
                                                    EVEN=n_rows % block_m == 0 and n_cols % block_n == 0, num_warps=num_warps)
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": num_warps, "SPLIT": 1}

# %%
# The speed of light, the core page's read-only pass: 32-bit words xored a program (no load dropped), two configs.

@triton.jit
def read_kernel(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr, EVICT: tl.constexpr, EVEN: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], words_ptr.dtype.element_ty)
    for block in tl.range(pid, tl.cdiv(n_words, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        if EVEN:  # every block full: no mask, as the fastest kernel reading these words would have none
            acc ^= tl.load(words_ptr + offs, eviction_policy=EVICT)
        else:
            acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, eviction_policy=EVICT)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))  # one word per program

READ_CONFIGS = (dict(block=8192, num_warps=16), dict(block=4096, num_warps=8, evict="evict_first"))

def read_pass(x, block=8192, num_warps=16, evict=""):  # one xor-word a program over every byte of x
    if not x.is_contiguous() or x.numel() * x.element_size() % 4:
        raise ValueError("read_pass: x must be contiguous and a whole number of 32-bit words long")
    words = x.view(-1).view(torch.int32)
    out = torch.empty(triton.cdiv(words.numel(), block), device=x.device, dtype=torch.int32)
    read_kernel[(out.numel(),)](words, out, words.numel(), BLOCK=block, EVICT=evict,
                                EVEN=words.numel() % block == 0, num_warps=num_warps)
    return out

# %%
# Why a column sum needs its own layout
# -------------------------------------
# Memory is read fastest when neighbouring threads load neighbouring addresses (*coalesced* loads). In the row kernel on
# ``x.T`` neighbouring lanes walk down a column of ``x``, :math:`N` elements apart, each on a different 128-byte line,
# most of which is thrown away. A column sum keeps the tile's contiguous axis along the rows of ``x``: a program owns
# ``BLOCK_N`` columns, a strip, walks down them ``BLOCK_M`` rows at a time, and ends with ``tl.sum(acc, axis=0)``. With
# only :math:`N / \mathrm{BLOCK\_N}` strips, the rows are split into ``SPLIT`` ranges, and a second pass (the same
# kernel on the ``SPLIT x N`` partials) adds them in a fixed order: the deterministic version of the atomics of
# layer-norm backward kernels. Long rows split the same way: ``split_row_sum_kernel``, the core row kernel with a second
# grid axis, program (i, s) summing columns ``[s * cols_per_split, (s + 1) * cols_per_split)`` of its rows into ``SPLIT
# x M`` partials.
#
# ``tl.range(..., num_stages=2)`` *pipelines* a loop: Triton copies the next tile into shared memory asynchronously
# while the current one is added (a loop without a matrix product is pipelined only when ``num_stages`` is given).

@triton.jit
def split_row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, cols_per_split,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, pid_s = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    row_offs = rows.to(tl.int64) * stride_m
    col_start = pid_s * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(col_start, col_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row_offs[:, None] + cols.to(tl.int64)[None, :] * stride_n,
                    mask=row_ok[:, None] & (cols < col_end)[None, :], other=0.0, eviction_policy="evict_first")
        acc += x.to(tl.float32)
    out = out_ptr + pid_s.to(tl.int64) * n_rows + rows  # partials: one row of n_rows per split
    tl.store(out, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_ok)

@triton.jit
def col_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, rows_per_split,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # program (j, s): columns j*BLOCK_N ... , rows [s * rows_per_split, (s + 1) * rows_per_split)
    pid_n, pid_s = tl.program_id(0), tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    col_offs = cols.to(tl.int64) * stride_n
    row_start = pid_s * rows_per_split
    row_end = tl.minimum(row_start + rows_per_split, n_rows)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # num_stages=2: the loads of the next tile are issued before this one is added
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
# **Launch parameters** come from ``tile_config`` (the tile) and ``choose_split`` (the grid), with the constants above
# them, each with its reason; the layout table below measures the strip width. Each piece of a split walks at least
# ``MIN_STEPS`` tiles (or the partials it writes count against the bytes it reads), and the grid holds up to ``WAVES``
# programs per SM. The column kernel's split is rounded *down*: a grid a little over ``WAVES`` programs per SM timed
# slower than one just under it on Hopper (its last programs run on an otherwise idle GPU). The row kernel's split is
# rounded up, which timed faster for its longest rows.

TILE = 4096  # elements per tile of the row kernel, whatever the dtype
ELEMENTS_PER_THREAD = 16  # of the row kernel's tile
ROW_BLOCK_N = 2048  # longest step along a row
COL_TILE_BYTES = 16384  # bytes per tile of the column kernel, whatever the dtype
COL_BYTES_PER_THREAD = {4: 64, 2: 128}  # 16 fp32 or 64 bf16 a thread (half the warps: faster at 16 bits on Hopper)
COL_BLOCK_BYTES = 256  # strip width: two whole 128-byte lines of each row, narrow enough to leave many strips
MIN_STEPS = 4  # tiles each piece of a split walks at least
WAVES = 4  # programs per SM in a split grid
NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
# The N these kernels are for (the landing page reads it; 2**40: no last): column sums, rows past the core page's
RANGE = {(k, t): range(s, 2**40) for k, s in (("row sums", 65537), ("column sums", 1)) for t in ("float32", "bfloat16")}

def tile_config(n_rows, n_cols, dtype, along, block_n=None, tile=None):
    """(BLOCK_M, BLOCK_N, num_warps) for a sum along 'rows' (dim=1) or 'cols' (dim=0); ``tile``
    (elements) and ``block_n`` override the defaults."""
    element_size = torch.empty((), dtype=dtype).element_size()
    if along == "rows":
        tile, per_thread, widest = tile or TILE, ELEMENTS_PER_THREAD, ROW_BLOCK_N
    else:  # the column tile is counted in bytes: fp16/bf16 tiles hold twice the values of fp32 ones
        tile = tile or COL_TILE_BYTES // element_size
        per_thread = COL_BYTES_PER_THREAD[element_size] // element_size
        widest = COL_BLOCK_BYTES // element_size
    if block_n is None:
        block_n = min(triton.next_power_of_2(n_cols), widest)  # narrower if the matrix is
    block_m = max(1, min(tile // block_n, triton.next_power_of_2(n_rows)))  # fills the rest of the tile
    num_warps = min(16, max(4, block_m * block_n // (32 * per_thread)))
    return block_m, block_n, num_warps

def choose_split(n_programs, reduced_len, step, round_up=False):
    """(pieces, length of each) of the reduced axis, each a multiple of ``step``, for a grid of
    n_programs * pieces: at most WAVES programs per SM, or with ``round_up`` at least that many."""
    most = max(1, reduced_len // (step * MIN_STEPS))  # every piece walks at least MIN_STEPS tiles
    slots = WAVES * NUM_SMS
    wanted = triton.cdiv(slots, n_programs) if round_up else slots // n_programs
    split = max(1, min(most, wanted, 65535))  # 65535: the most programs a grid's second axis holds
    if round_up and split > 1:  # pieces rounded down to a multiple of step: at least `split` of them
        per_split = reduced_len // split // step * step
    else:  # rounded up: at most `split` of them
        per_split = triton.cdiv(triton.cdiv(reduced_len, split), step) * step
    return triton.cdiv(reduced_len, per_split), per_split

def sum_rows(x2d, out, block_n=None, tile=None):
    """out[i] = sum of row i of the 2-D tensor x2d (any strides), accumulated in fp32. Returns config."""
    n_rows, n_cols = x2d.shape
    block_m, block_n, num_warps = tile_config(n_rows, n_cols, x2d.dtype, "rows", block_n, tile)
    n_blocks = triton.cdiv(n_rows, block_m)
    split, per_split = choose_split(n_blocks, n_cols, block_n, round_up=True)
    target = out if split == 1 else torch.empty((split, n_rows), device=x2d.device, dtype=torch.float32)
    split_row_sum_kernel[(n_blocks, split)](x2d, target, n_rows, n_cols, x2d.stride(0), x2d.stride(1), per_split,
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
# The choices for a few shapes of :math:`2^{27}` elements (:math:`2^{14}` under the interpreter), in bf16:

MATRIX_ELEMENTS = 2**27 if ON_GPU else 2**14
config_rows = []
for n_cols in [16, 256, 4096, 65536][: 4 if ON_GPU else 3]:
    x = torch.zeros((MATRIX_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
    for along, fn, length in [("rows (dim=1)", sum_rows, x.shape[0]), ("columns (dim=0)", sum_cols, n_cols)]:
        config = fn(x, torch.empty(length, device=DEVICE, dtype=x.dtype))
        config_rows.append({"M x N": f"{x.shape[0]} x {n_cols}", "sum along": along, **config})
pd.DataFrame(config_rows).set_index(["M x N", "sum along"])

# %%
# The drop-in for one dimension
# -----------------------------
# ``sum_dim(x, dim)`` is :func:`torch.sum` along one dimension of a float tensor, a PyTorch operator that a compiled
# model keeps in its graph (no autograd: the whole-sum page's ``reduce_sum`` shows the gradient). The tensor is viewed
# as :math:`A \times R \times B` around the reduced dimension of length :math:`R`: when :math:`B = 1` that is a row sum,
# when :math:`A = 1` a column sum, and otherwise the reduced dimension is moved last and copied (one more pass). The row
# and column kernels take both strides: no copy otherwise.

@torch.library.custom_op("sol::sum_dim_31", mutates_args=())
def sum_dim(x: torch.Tensor, dim: int) -> torch.Tensor:
    """torch.sum(x, dim) for one int dim of a float32/float16/bfloat16 tensor, accumulated in fp32."""
    if not -x.dim() <= dim < max(1, x.dim()) or x.dim() == 0:
        raise IndexError(f"sum_dim: dim {dim} of a tensor of {x.dim()} dimensions (sum a 0-d tensor with torch.sum)")
    shape, dim = list(x.shape), dim % x.dim()
    length = shape.pop(dim)
    out = torch.empty(shape, device=x.device, dtype=x.dtype)
    if x.numel() == 0:
        return out.zero_()
    before = math.prod(x.shape[:dim])
    after = out.numel() // before
    if after == 1:  # rows of length `length`
        sum_rows(x.reshape(before, length), out.view(-1))
    elif before == 1:  # columns of length `length`
        sum_cols(x.reshape(length, after), out.view(-1))
    else:  # A x R x B with A, B > 1: move the reduced dim last (a copy), then sum rows
        sum_rows(x.movedim(dim, -1).reshape(-1, length), out.view(-1))
    return out
sum_dim.register_fake(lambda x, dim: x.new_empty([s for i, s in enumerate(x.shape) if i != dim % x.dim()]))

# %%
# The sum of every element: three designs
# ---------------------------------------
# :ref:`sphx_glr_tutorials_03_sum_of_all_elements.py` sums a whole tensor over a **persistent** grid (a program walks
# blocks ``pid``, ``pid + num_programs``, ...); the last program to finish adds the partials in order. Here the partials
# are added by a second, one-program launch (**persistent**), and two alternatives are a flag of the kernel:
# **two-pass**, a program per block of 4096, and **atomic**, each program adding its sum into one fp32 number with
# ``tl.atomic_add`` (an addition to memory no other program interleaves) as programs finish: one launch, roundings in
# any order.

@triton.jit
def sum_blocks_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ATOMIC: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)  # one running sum per lane
    for block in tl.range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc += x.to(tl.float32)
    total = tl.sum(acc, axis=0)
    if ATOMIC:
        tl.atomic_add(out_ptr, total)  # every program adds into one fp32 number
    else:
        tl.store(out_ptr + pid, total.to(out_ptr.dtype.element_ty))  # one partial sum per program

DESIGNS = ("atomic", "two-pass", "persistent")

def sum_vector(x, out, design="persistent"):
    """out[0] = sum of the contiguous 1-D tensor x, in fp32, by one of DESIGNS ("persistent": the whole-sum page's
    grid); ``out`` is fp32 for "atomic", which adds into it. Returns the first pass's grid."""
    if design not in DESIGNS or x.dim() != 1 or x.numel() > 1 and x.stride(0) != 1:
        raise ValueError(f"sum_vector: a design of {DESIGNS} and a unit-stride 1-D x, got {design!r}, {x.stride()}")
    n_blocks = triton.cdiv(x.numel(), 4096)
    grid = min(n_blocks, 4 * NUM_SMS) if design == "persistent" else n_blocks  # the whole-sum page's persistent grid
    atomic = design == "atomic"
    partials = out.zero_() if atomic else out if grid == 1 else torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_blocks_kernel[(grid,)](x, partials, x.numel(), BLOCK=4096, ATOMIC=atomic, num_warps=16)
    if grid > 1 and not atomic:  # the second pass; one program alone wrote its sum straight to out
        sum_blocks_kernel[(1,)](partials, out, grid, BLOCK=1024, ATOMIC=False, num_warps=4)
    return grid

# %%
# Correctness
# -----------
# Against the float64 sum: :math:`\lVert out - ref \rVert / \lVert ref \rVert`, beside :func:`torch.sum`'s own error;
# the shapes include transposed matrices and splits (a second pass). Each sum is run twice: the split and its second
# pass add in a fixed order, so the bits must agree.

torch.manual_seed(0)
CHECK_CASES = ([((4099, 1031), 0), ((4099, 1031), 1), ((7, 3_000_017), 1), ((3_000_017, 7), 0), ((1031, 4099), "0 of x.T"),
                ((16, 33, 65), 1), ((16, 33, 65), 0)] if ON_GPU else
               [((257, 65), 0), ((257, 65), 1), ((3, 5003), 1), ((5003, 3), 0), ((65, 129), "0 of x.T"),
                ((4, 9, 17), 1), ((4, 9, 17), 0)])
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def check_row(shape, dim, dtype):
    x = torch.randn(shape, device=DEVICE) + 0.5  # a non-zero mean, as activations have
    if dtype == torch.float16:  # fp16 stops at 65504: scale so that even the sum of everything fits
        x *= min(1.0, 2000.0 / x.numel())
    x, dim = (x.to(dtype).t(), 0) if dim == "0 of x.T" else (x.to(dtype), dim)
    ref = x.double().sum(dim)
    error = lambda out: ((out.double() - ref).norm() / ref.norm()).item()
    ours = sum_dim(x, dim)
    return {"shape": " x ".join(map(str, x.shape)) + (" (transposed)" if not x.is_contiguous() else ""),
            "dim": dim, "dtype": str(dtype)[6:], "ours": error(ours), "torch": error(torch.sum(x, dim)),
            "same bits twice": torch.equal(ours, sum_dim(x, dim))}

errors = pd.DataFrame([check_row(s, d, t) for t in SUPPORTED_DTYPES for s, d in CHECK_CASES])
TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}  # the interpreter truncates to bf16
assert (errors["ours"] <= errors.dtype.map(TOLERANCE)).all() and errors["same bits twice"].all(), errors
errors.style.format({"ours": "{:.1e}", "torch": "{:.1e}"}).hide(axis="index")

# %%
# Benchmark
# ---------
# Matrices of :math:`M \times N = 2^{27}` elements (512 MB in fp32, far past a GPU's L2), summed along rows and down
# columns, fp32 and bf16: this page's kernels against the core design (for rows, measured only where this page splits;
# for columns, the row kernel on ``x.T``), :func:`torch.sum` and ``torch.compile``, timed by
# :func:`triton.testing.do_bench` (median, L2 flushed) on replays of a CUDA graph of the call. The copy (bytes read and
# written, timed without a graph, where CUDA may use a slower copy engine) is shown for reference. GB/s counts the
# input, read once.

SWEEP_N = [16, 256, 4096, 65536, 2**20] if ON_GPU else [16, 256, 4096]
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
INDUCTOR = ON_GPU or print("torch.compile: not measured here (no GPU).")  # on the CPU it would time a C++ compiler
torch.cuda.set_stream(torch.cuda.Stream()) if ON_GPU else None  # a CUDA graph cannot be captured on the default stream

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:  # the copy passes graph=False
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")

LIGHT = "the read-only pass" if ON_GPU else "the copy"  # on the CPU (the interpreter reads slowly) the copy stands in

def yardsticks(x):
    """(speed of light, copy) GB/s on x: the faster READ_CONFIGS of the read-only pass (bytes read) and
    the copy (bytes read and written). On the CPU the copy is both."""
    nbytes, copy_out = x.numel() * x.element_size(), torch.empty_like(x)
    copy = 2 * nbytes / bench(lambda: copy_out.copy_(x), graph=False) * 1e-6
    if not ON_GPU:
        return copy, copy
    del copy_out
    return max(nbytes / bench(lambda c=c: read_pass(x, **c)) * 1e-6 for c in READ_CONFIGS), copy

def providers(along, out):
    """name -> a sum of x along `along` into `out` (torch's return it); those that cannot run here are left out."""
    dim = 1 if along == "rows" else 0
    found = {"torch": lambda t: torch.sum(t, dim)}
    if INDUCTOR:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: t.sum(dim), dynamic=False)
    found["core design"] = (lambda t: core_sum_rows(t, out)) if along == "rows" else (lambda t: core_sum_rows(t.t(), out))
    found["ours"] = (lambda t: sum_rows(t, out)) if along == "rows" else (lambda t: sum_cols(t, out))
    return found

records = []
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in SWEEP_N:
        x = torch.randn((MATRIX_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=dtype)
        (light, copy), nbytes = yardsticks(x), x.numel() * x.element_size()
        for along in ("rows", "cols"):
            dim, direction = (1, "row sums") if along == "rows" else (0, "column sums")  # the front page's names
            out, reference = torch.empty(x.shape[1 - dim], device=DEVICE, dtype=dtype), x.float().sum(dim)
            block_m, block_n, _ = tile_config(*x.shape, dtype, "rows")  # does this page split these rows?
            split = choose_split(triton.cdiv(x.shape[0], block_m), n_cols, block_n, round_up=True)[0]
            found, gbps = providers(along, out), {}
            for name, fn in found.items():
                if name == "core design" and along == "rows" and split == 1:  # ours' very launch: measured once
                    continue
                result = fn(x)
                torch.testing.assert_close((result if isinstance(result, torch.Tensor) else out).float(), reference,
                                           atol=1e-1, rtol=1e-2)
                gbps[name] = nbytes / bench(lambda: fn(x)) * 1e-6
            gbps.setdefault("core design", gbps["ours"])
            records += [{"sweep": along, "direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                         "GB/s": value, "speed of light GB/s": light, "copy GB/s": copy,
                         "% of speed of light": 100 * value / light} for name, value in gbps.items()]
        del x
        torch.cuda.empty_cache() if ON_GPU else None
results = pd.DataFrame(records)

def sweep_table(sweep):
    """GB/s per provider (columns), dtype and N (rows), with ours as % of the speed of light."""
    part = results[results.sweep == sweep]
    table = part.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in ["torch", "torch.compile", "core design", "ours"] if p in table.columns]]
    first = part.groupby(["dtype", "N"]).first()
    table.insert(0, "copy (reference)", first["copy GB/s"])
    table.insert(0, "speed of light", first["speed of light GB/s"])
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / torch"] = table["ours"] / table["torch"]
    table["ours / core design"] = table["ours"] / table["core design"]
    formats = {column: "{:.0f}" for column in table.columns}  # one call: a second .format() resets the rest
    formats.update({"ours, % of light": "{:.1f}%", "ours / torch": "{:.2f}", "ours / core design": "{:.2f}"})
    return table.style.format(formats, na_rep="-")

# %%
# Sums along the rows (``dim=1``) of :math:`M \times N` matrices, GB/s of bytes read (higher is better):

sweep_table("rows") if ON_GPU else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# Sums down the columns (``dim=0``), GB/s:

sweep_table("cols") if ON_GPU else None

# %%
# As a plot (on a GPU), in % of the read-only pass measured next to each point; the thin grey line is the copy:

if ON_GPU:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey=True, facecolor="white")
    styles = {"torch": "--", "torch.compile": "-.", "core design": ":", "ours": "-"}
    for (i, sweep), (j, dtype) in [(s, d) for s in enumerate(["rows", "cols"]) for d in enumerate(["float32", "bfloat16"])]:
        ax, part = axes[i][j], results[(results.sweep == sweep) & (results.dtype == dtype)]
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of speed of light"], linestyle=styles[name], marker="o", markersize=3,
                    linewidth=2.5 if name == "ours" else 1.5, label=name)
        light = part.groupby("N")[["speed of light GB/s", "copy GB/s"]].first()
        ax.plot(light.index, 100 * light["copy GB/s"] / light["speed of light GB/s"], color="grey", linewidth=1,
                linestyle=":", label="copy (reference)")
        ax.axhline(100, color="black", linewidth=1, label=f"speed of light ({LIGHT[4:]})")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.set(title=f"{'rows (dim=1)' if sweep == 'rows' else 'columns (dim=0)'}, {dtype}",
               ylabel=f"% of {LIGHT}'s GB/s" if j == 0 else None, xlabel="row length N (elements)" if i == 1 else None)
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.suptitle(f"Matrix sums, M x N = {MATRIX_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()

# %%
# The layout of a column sum, measured
# ------------------------------------
# The core design's column sum (the row kernel on ``x.T``) against the column kernel with strips of several widths
# ``BLOCK_N``, on the same fp32 matrix of :math:`2^{27}` elements, :math:`N = 4096`, as a percentage of the read-only
# pass over the same matrix (the copy, bytes read and written, in its own row for reference).

LAYOUT_N = 4096 if ON_GPU else 256
x = torch.randn((MATRIX_ELEMENTS // LAYOUT_N, LAYOUT_N), device=DEVICE)
out, nbytes = torch.empty(LAYOUT_N, device=DEVICE), x.numel() * x.element_size()
light, copy = yardsticks(x)
layout_rows = [{"variant": f"{LIGHT[4:]} (speed of light)", "(BLOCK_M, BLOCK_N, SPLIT)": "-", "GB/s": light,
                "% of speed of light": 100.0},
               {"variant": "copy (reference, bytes read + written)", "(BLOCK_M, BLOCK_N, SPLIT)": "-", "GB/s": copy,
                "% of speed of light": 100 * copy / light}]
cases = {"row kernel on x.T (core design)": lambda: core_sum_rows(x.t(), out)}
for block_n in (16, 64, 128, 256, 1024):
    cases[f"column kernel, BLOCK_N = {block_n}"] = lambda b=block_n: sum_cols(x, out, block_n=b)
cases["column kernel, default"] = lambda: sum_cols(x, out)
cases["torch.sum(x, 0)"] = lambda: torch.sum(x, 0)
for name, fn in cases.items():
    config = fn()  # ours return their configuration, torch.sum its result
    torch.testing.assert_close(config if isinstance(config, torch.Tensor) else out, x.sum(0), atol=1e-2, rtol=1e-3)
    shape = "-" if isinstance(config, torch.Tensor) else f"({config['BLOCK_M']}, {config['BLOCK_N']}, {config['SPLIT']})"
    gbps = nbytes / bench(fn) * 1e-6
    layout_rows.append({"variant": name, "(BLOCK_M, BLOCK_N, SPLIT)": shape, "GB/s": gbps,
                        "% of speed of light": 100 * gbps / light})
del x
layout = pd.DataFrame(layout_rows).set_index("variant")
layout.style.format({"GB/s": "{:.0f}", "% of speed of light": "{:.1f}%"}) if ON_GPU else layout[["(BLOCK_M, BLOCK_N, SPLIT)"]]

# %%
# The whole sum's designs, measured
# ---------------------------------
# Against ``torch.sum`` on vectors of fp32 and bf16, in GB/s (on the CPU, the error against float64), and how many
# distinct results ``RUNS`` runs of the same sum gave:

VECTOR_N, RUNS = ([2**20, 2**24, 2**28], 20) if ON_GPU else ([2**10, 2**14], 3)
records = []
for dtype in (torch.float32, torch.bfloat16):
    for n in VECTOR_N:
        x, out = torch.randn(n, device=DEVICE, dtype=dtype) + 0.5, torch.empty(1, device=DEVICE)
        reference = x.double().sum().item()
        designs = {d: lambda d=d: (sum_vector(x, out, d), out)[1] for d in DESIGNS} | {"torch.sum": lambda: x.sum()}
        for name, fn in designs.items():
            runs = {fn().double().item() for _ in range(RUNS)}
            gbps = x.numel() * x.element_size() / bench(fn) * 1e-6
            records.append({"dtype": str(dtype)[6:], "n": n, "design": name, "GB/s": gbps,
                            "error": abs(min(runs) - reference) / abs(reference), "distinct results": len(runs)})
vector, by = pd.DataFrame(records), dict(index=["dtype", "n"], columns="design", sort=False)
vector.pivot_table(values="GB/s" if ON_GPU else "error", **by).join(vector.pivot_table(values="distinct results", **by)
                                                                   .add_suffix(", results")).style.format(
    lambda v: f"{v:,.0f}" if v >= 1 else f"{v:.1e}")

# %%
# Why the running sums are fp32
# -----------------------------
# The kernels read bf16 as such, add in fp32 and round once. bf16 keeps 8 significant bits: once a running sum reaches
# 256 the next bf16 number is 258, so adding a value below 1 rounds back to 256. ``DEMO_LANES`` running sums of bf16
# values in :math:`[0, 1)`, each addition rounded to the accumulator's dtype (as a kernel's ``.to(tl.bfloat16)`` would),
# against the float64 sum:

DEMO_LANES, DEMO_PER_LANE = (1024, [4, 64, 1024, 4096]) if ON_GPU else (16, [4, 64, 1024])
torch.manual_seed(0)
rows = []
for per_lane in DEMO_PER_LANE:
    x = torch.rand(per_lane, DEMO_LANES, device=DEVICE).to(torch.bfloat16)
    row, exact = {"values per lane": per_lane}, x.double().sum().item()
    for name, acc_dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        acc = torch.zeros(DEMO_LANES, device=DEVICE, dtype=acc_dtype)
        for values in x:  # one step: each lane adds its next value, rounded to acc_dtype
            acc += values
        row[f"error, {name}"] = abs(acc.double().sum().item() - exact) / exact
    rows.append(row)
demo = pd.DataFrame(rows).set_index("values per lane")
demo.style.format("{:.1e}")

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

if ON_GPU:
    for sweep, what in [("rows", "Row sums"), ("cols", "Column sums")]:
        for dtype in ("float32", "bfloat16"):
            part = results[(results.sweep == sweep) & (results.dtype == dtype)]
            ours, torch_, core = (part[part.provider == p].set_index("N") for p in ("ours", "torch", "core design"))
            ratio, gain = ours["GB/s"] / torch_["GB/s"], ours["GB/s"] / core["GB/s"]
            print(f"{what}, {dtype}: ours at {ours['% of speed of light'].min():.3g}-{ours['% of speed of light'].max():.3g}% "
                  f"of {LIGHT} over N = {min(SWEEP_N)}..{max(SWEEP_N)}; against torch.sum from {ratio.min():.3g}x "
                  f"(N = {ratio.idxmin()}) to {ratio.max():.3g}x (N = {ratio.idxmax()}); against the core design "
                  f"{gain.min():.3g}x to {gain.max():.3g}x (largest at N = {gain.idxmax()}).")
    print("Layout: the column kernel (default) reads at {:.3g}x the speed of the row kernel walking down the columns "
          "of x.T.".format(layout.loc["column kernel, default", "GB/s"] / layout.loc["row kernel on x.T (core design)", "GB/s"]))
    top = vector[vector.n == VECTOR_N[-1]].set_index(["dtype", "design"])
    varying = sorted(set(vector.design[vector["distinct results"] > 1]))
    print(f"Whole sums at n = {VECTOR_N[-1]:,}: the persistent design read " + " and ".join(
          f"{top.loc[(t, 'persistent'), 'GB/s'] / top.loc[(t, 'atomic'), 'GB/s']:.3g}x as fast as the atomic one in {t}"
          for t in ("float32", "bfloat16")) + f"; over {RUNS} runs " + (f"{', '.join(varying)} gave more than one result."
          if varying else "every design gave one result.") + f" Running sums of {DEMO_PER_LANE[-1]} values a lane: bf16 "
          f"off by {100 * demo['error, bf16'].iloc[-1]:.3g}%, fp32 by {100 * demo['error, fp32'].iloc[-1]:.2g}%.")
else:
    print(NO_SPEED)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    light = results.pivot_table(index=["direction", "dtype", "N"], columns="provider", values="% of speed of light",
                                sort=False)
    summary = pd.DataFrame({"ours, % of light": light.ours,
                            "ours / best peer": light.ours / light.filter(items=["torch", "torch.compile"]).max(axis=1)})
    summary.assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in summary.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "31_reduction_rows_and_columns.csv"))

# %%
# Going further
# -------------
# * **What is left between the bf16 column sums and the read-only pass.** A bf16 sum takes half the time of an fp32
#   one, so every fixed cost of a call, the split's second launch among them, weighs twice as much. Not faster than
#   the kernel above on Hopper: TMA loads, a persistent grid over the strips, wider strips or tiles, more warps, bf16
#   pairs as 32-bit words, eviction hints; the whole-sum page's single launch would remove the second launch.
# * **Exercise.** Change ``TILE``, ``COL_TILE_BYTES``, ``COL_BYTES_PER_THREAD``, ``COL_BLOCK_BYTES``: which sizes
#   move, and why? Drop ``num_stages=2`` from the column kernel, or round its split up (``round_up=True``).
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; CUB's device-wide reductions; the Triton
# tutorials' layer-norm backward (weight gradients by atomics and a lock: the split column sum is deterministic).

def environment_card():  # everything a reader needs to judge this page's numbers, shown collapsed
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch": torch.__version__, "Triton":
            triton.__version__, "Python": platform.python_version(), "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
        card["device"] = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        driver = "unknown"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(smi.split(), capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        card["driver / CUDA"] = f"driver {driver}, CUDA {torch.version.cuda}"
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()

environment_card()
