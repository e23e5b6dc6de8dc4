"""
Parallel reduction
==================

Many numbers into one, as fast as the memory delivers them: you build ``reduce_sum(x, dim=None)``, a
drop-in for :func:`torch.sum`, measured against PyTorch, ``torch.compile`` and a kernel that only reads
the same input (the *speed of light*) on the GPU that built this page.

**What you will learn**, as a ladder of three kernels: a row summed by a tree in one program; a tile
that walks rows of any length and packs short ones; the sum of every element, one long row split over a
persistent grid, its partial sums added in a fixed order so that every run gives the same bits.
"""

import datetime, os
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

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
# ``torch.sum(x, dim=1)`` on an :math:`M \times N` matrix reads every element once and writes one per
# row: :math:`4MN + 4M` bytes in fp32, :math:`2MN + 2M` in bf16. One addition an element is far below
# what the arithmetic units can do, so a perfect sum takes the time the GPU takes to *read* ``x``. Its
# *speed of light* is the GB/s of a **read-only pass** over the same tensor, and a sum along any dims is
# a matrix of rows (the reduced dims moved last): the same bytes, the same bound.
#
# Step 0: the plain kernel
# ------------------------
# A Triton kernel is a function that a grid of *programs* runs, each on one SM with ``num_warps``
# warps of 32 threads; ``tl.program_id(0)`` tells a program which one it is: here, which row it sums.
# ``tl.arange(0, BLOCK_N)`` is the vector :math:`0, 1, \ldots, \mathrm{BLOCK\_N} - 1`, spread over the
# program's threads; ``BLOCK_N`` is a ``tl.constexpr``, a compile-time constant (a power of two), for
# which Triton compiles a kernel of its own. ``tl.load`` reads the addresses of a block where its
# ``mask`` is true (``other`` elsewhere: the columns past the row), ``tl.store`` writes, rounding to the
# output's dtype (``out_ptr.dtype.element_ty``); offsets are ``int64`` so that they pass :math:`2^{31}`.
# ``kernel[grid](...)`` launches: ``plain_row_sum_kernel[(n_rows,)]`` runs a program a row. ``tl.sum``
# reduces the row as a *tree* (each thread adds its values, a warp's threads halve their partial sums by
# shuffles, the warps combine theirs through shared memory), not in the order of a running sum: the two
# differ by a few roundings. It adds in fp32 whatever ``x``'s dtype: a bf16 running sum keeps 8
# significant bits and stops growing once the next term is under half its last bit (deep dive 31
# measures it). Both strides are arguments: a column sum of ``x`` is a row sum of ``x.T``.

@triton.jit
def plain_row_sum_kernel(x_ptr, out_ptr, n_cols, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_m + cols.to(tl.int64) * stride_n, mask=cols < n_cols, other=0.0)
    total = tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))

PLAIN_MAX_N = 16384  # the whole row in registers: 32 fp32 a thread with 16 warps; longer rows would spill

def plain_sum_rows(x2d, out):
    """out[i] = sum of row i of the 2-D tensor x2d (any strides), one program a row."""
    n_rows, n_cols = x2d.shape
    if n_cols > PLAIN_MAX_N:
        raise ValueError(f"plain_sum_rows: rows of {n_cols} elements; at most {PLAIN_MAX_N} fit in registers")
    block_n = triton.next_power_of_2(n_cols)
    num_warps = min(16, max(1, block_n // 256))  # 8 elements a thread (two 16-byte loads), at most 16 warps
    plain_row_sum_kernel[(n_rows,)](x2d, out, n_cols, *x2d.stride(), BLOCK_N=block_n, num_warps=num_warps)

# %%
# Two limits: the row must fit in registers, and a short row gives its program little to read (64 fp32:
# 256 bytes), where the memory needs many bytes in flight to stay busy.
#
# Step 1: a tile of fixed size
# ----------------------------
# The tile no longer follows the row: it is 4096 elements, ``BLOCK_M`` rows of ``BLOCK_N`` columns.
# ``rows[:, None]`` and ``cols[None, :]`` make a column and a row of a vector, which broadcast into the
# 2-D block of addresses, as in torch. A long row is walked ``BLOCK_N`` columns a step by ``tl.range``
# (a loop in the kernel) into a ``tl.zeros`` fp32 accumulator reduced at the end: any length. Short rows
# share a program, 64 rows of 64 a tile: 16 KB to read instead of 256 bytes. A second grid axis,
# ``tl.program_id(1)``, can split a row's columns over programs (``tl.minimum`` clips the last piece);
# here one split covers a row, and deep dive 31 splits them.

@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, cols_per_split,
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
                    mask=row_ok[:, None] & (cols < col_end)[None, :], other=0.0)
        acc += x.to(tl.float32)
    row_sum = tl.sum(acc, axis=1)
    out = out_ptr + pid_s.to(tl.int64) * n_rows + rows  # partials: one row of n_rows per split
    tl.store(out, row_sum.to(out_ptr.dtype.element_ty), mask=row_ok)

def _row_config(n_rows, n_cols):
    """(BLOCK_M, BLOCK_N, num_warps) of row_sum_kernel. A tile of 4096 elements is 16 KB of fp32 a program
    in flight; 16 elements a thread (four 16-byte fp32 loads) sets the warps, 4 to 16."""
    block_n = min(triton.next_power_of_2(n_cols), 2048)  # long rows are walked 2048 columns a step
    block_m = max(1, min(4096 // block_n, triton.next_power_of_2(n_rows)))  # short rows: many a tile
    num_warps = min(16, max(4, block_m * block_n // (32 * 16)))
    return block_m, block_n, num_warps

def sum_rows(x2d, out):
    """out[i] = sum of row i of the 2-D tensor x2d (any strides), in fp32; one program per BLOCK_M rows."""
    (n_rows, n_cols), (block_m, block_n, num_warps) = x2d.shape, _row_config(*x2d.shape)
    whole_row = triton.cdiv(n_cols, block_n) * block_n  # one "split" covering every column
    row_sum_kernel[(triton.cdiv(n_rows, block_m), 1)](x2d, out, n_rows, n_cols, *x2d.stride(), whole_row,
                                                      BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)

# %%
# Step 2: one long row over many programs
# ---------------------------------------
# A sum of every element is one row of :math:`n`, which step 1 gives to one program: one SM of the
# many. Step 2 splits it over a **persistent** grid, as many programs as the GPU holds at once: program
# ``pid`` walks blocks ``pid``, ``pid + num_programs``, ... (``tl.num_programs(0)`` is the grid's size)
# and stores one partial sum. Then each program takes a *ticket*: ``tl.atomic_add`` on one counter returns
# its value before the add, so exactly one program draws the last ticket, ``P - 1``; ``sem="acq_rel"``
# makes a program's store visible before its ticket, and the last program's loads see every store before
# its own. That program adds the *P* partials (``volatile``: read past L1, where no stale copy can hide) in
# an order fixed by the code and the grid, the same bits every run, and sets the counter back to 0 for
# the next call. One launch: a second launch to add the partials costs a few microseconds, as long as
# reading 10 MB. Deep dive 31 measures the alternatives: two launches, a program per block, and
# ``tl.atomic_add`` into one number, which adds in whatever order programs finish.

@triton.jit
def sum_kernel(x_ptr, partials_ptr, ticket_ptr, out_ptr, n, BLOCK: tl.constexpr, PARTIALS: tl.constexpr):
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)  # one running sum per lane
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc += x.to(tl.float32)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))  # this program's partial sum
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_programs - 1:  # the last ticket: every partial is stored
        p = tl.arange(0, PARTIALS)
        total = tl.sum(tl.load(partials_ptr + p, mask=p < n_programs, other=0.0, volatile=True), axis=0)
        tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(ticket_ptr, 0)  # the counter back to 0: the next launch needs no clearing

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4: the CPU's stand-in
# The n the persistent design is for, read by the site's landing page: every n (2**40: no last).
RANGE = {("sum of all elements", t): range(1, 2**40) for t in ("float32", "bfloat16")}

def _vector_config(n):
    """(grid, BLOCK, num_warps) of sum_kernel over n elements. The memory stays busy when every SM has
    bandwidth x latency / SMs bytes in flight (Little's law), 10 KB or more on a data-centre GPU: a program
    loads 4096 elements a step (16 KB of fp32; 8 a thread with 16 warps, 16-byte loads), and 4 programs an
    SM make 64 warps, as many as an sm_80 or sm_90 SM holds (sm_86 and sm_89 hold 48)."""
    return min(triton.cdiv(n, 4096), 4 * NUM_SMS), 4096, 16

_TICKETS = {}  # one counter a device and stream, allocated once (zeroed), left at 0 by every launch

def sum_vector(x, out):
    """out[0] = sum of the contiguous 1-D tensor x, accumulated in fp32, in one launch; returns its grid."""
    if x.dim() != 1 or x.numel() > 1 and x.stride(0) != 1:  # the kernel reads x[i] at x_ptr + i
        raise ValueError(f"sum_vector: x must be 1-D with unit stride, got shape {list(x.shape)}, strides {x.stride()}")
    grid, block, num_warps = _vector_config(x.numel())
    stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0
    if (key := (x.device, stream)) not in _TICKETS:
        _TICKETS[key] = torch.zeros(1, dtype=torch.int32, device=x.device)
    partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_kernel[(grid,)](x, partials, _TICKETS[key], out, x.numel(), BLOCK=block,
                        PARTIALS=triton.next_power_of_2(grid), num_warps=num_warps)
    return grid

# %%
# The drop-in function
# --------------------
# ``reduce_sum`` means what :func:`torch.sum` means. The reduced dims are permuted to the end and
# flattened into rows (a view where the strides allow; else one copy) for step 1's kernel; all of them
# is one long row for step 2. It runs as a PyTorch operator, ``torch.library.custom_op``: a model
# compiled with ``torch.compile(fullgraph=True)`` keeps it in its graph, and ``register_fake`` gives the
# compiler the output's shape and dtype without running it. The gradient, the upstream one broadcast
# back over the reduced dims, is torch ops: no kernel, and its own gradient is torch's too.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _flat(x):  # a unit-stride 1-D view where x's elements fill one dense block, else a contiguous copy
    dense = x.permute(sorted(range(x.dim()), key=lambda d: (-x.stride(d), -x.shape[d])))
    return dense.view(-1) if dense.is_contiguous() else x.contiguous().view(-1)  # strided, broadcast: copied

@torch.library.custom_op("sol::reduce_sum_03", mutates_args=())
def sum_op(x: torch.Tensor, dims: list[int], dtype: torch.dtype) -> torch.Tensor:
    """x summed over dims (sorted, distinct; every dim for a whole sum), in dtype, the reduced dims dropped."""
    kept = [d for d in range(x.dim()) if d not in dims]
    out = torch.empty([x.shape[d] for d in kept], device=x.device, dtype=dtype)
    if x.numel() == 0:
        out.zero_()  # a sum of nothing is 0
    elif not kept:
        sum_vector(_flat(x), out.view(1))
    else:
        sum_rows(x.permute(kept + dims).reshape(out.numel(), -1), out.view(-1))
    return out

@sum_op.register_fake
def _(x, dims, dtype):
    return x.new_empty([n for d, n in enumerate(x.shape) if d not in dims], dtype=dtype)

def _sum_setup(ctx, inputs, output):
    x, ctx.dims, _ = inputs
    ctx.shape, ctx.dtype = x.shape, x.dtype

def _sum_backward(ctx, grad):
    shape = [1 if d in ctx.dims else n for d, n in enumerate(ctx.shape)]  # the sum with keepdim
    return grad.reshape(shape).to(ctx.dtype).expand(ctx.shape), None, None

sum_op.register_autograd(_sum_backward, setup_context=_sum_setup)

def reduce_sum(input, dim=None, keepdim=False, *, dtype=None):  # torch's names, so keywords work too
    """Drop-in for ``torch.sum`` on float32, float16 and bfloat16 tensors, with autograd."""
    if not isinstance(x := input, torch.Tensor):
        raise TypeError(f"reduce_sum: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES or (dtype or x.dtype) not in SUPPORTED_DTYPES:
        raise TypeError(f"reduce_sum: x is {x.dtype}, dtype={dtype}; the kernels take float32, float16 and bfloat16")
    if x.device.type != DEVICE.type:
        raise ValueError(f"reduce_sum: x is on {x.device}; "
                         + ("a CUDA GPU is in use" if ON_GPU else "no GPU: the interpreter needs CPU tensors"))
    dims = () if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"reduce_sum: dim must be None, an int or a tuple or list of ints, got {dim!r}")
    ndim = max(x.dim(), 1)  # a 0-d tensor takes dim 0 or -1, as in torch
    if bad := [d for d in dims if not -ndim <= d < ndim]:
        raise IndexError(f"reduce_sum: dim {bad[0]} is out of range for a {x.dim()}-d tensor ([{-ndim}, {ndim - 1}])")
    if len(wrapped := [d % ndim for d in dims]) > len(set(wrapped)):  # a RuntimeError, as in torch.sum
        raise RuntimeError(f"reduce_sum: dim {max(wrapped, key=wrapped.count)} appears more than once in dim={dim!r}")
    dims = sorted(wrapped) if dims and x.dim() else list(range(x.dim()))  # None or (): every dim
    x = x if dtype in (None, x.dtype, torch.float32) else x.to(dtype)  # to fp32: exact, the kernels do it
    out = sum_op(x, dims, x.dtype if dtype is None else dtype)
    return out.view([1 if d in dims else n for d, n in enumerate(x.shape)]) if keepdim else out

# %%
# Appendix: how this page measures
# --------------------------------
# The measuring machinery, for reference: :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a
# CUDA graph of each call, the GPU's cost, not Python's. GB/s counts the input, read once. The copy (bytes read and
# written) is timed without a graph, where CUDA may use a slower copy engine.
# The speed of light's read-only pass xors the tensor's 32-bit words into one word per program (``tl.xor_sum``),
# so no load can be dropped; each benchmark takes the faster ``READ_CONFIGS``: a measurement, not a proof.

import platform, subprocess, timeit
import matplotlib.pyplot as plt
import pandas as pd

@triton.jit
def read_kernel(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], words_ptr.dtype.element_ty)
    for block in tl.range(pid, tl.cdiv(n_words, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, eviction_policy=EVICT)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))  # one word per program

# two ways to read: which is faster depends on the device and the size, and each benchmark takes the faster
READ_CONFIGS = (dict(block=8192, num_warps=16), dict(block=4096, num_warps=8, evict="evict_first"))

def read_pass(x, block=8192, num_warps=16, evict="", programs_per_sm=None):
    """One xor-word per program (int32) over every byte of the contiguous x; programs_per_sm: persistent."""
    if not x.is_contiguous() or x.numel() * x.element_size() % 4:
        raise ValueError("read_pass: x must be contiguous and a whole number of 32-bit words long")
    words = x.view(-1).view(torch.int32)
    grid = triton.cdiv(words.numel(), block)
    grid = min(grid, programs_per_sm * NUM_SMS) if programs_per_sm else grid
    out = torch.empty(grid, device=x.device, dtype=torch.int32)
    read_kernel[(grid,)](words, out, words.numel(), BLOCK=block, EVICT=evict, num_warps=num_warps)
    return out

if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn, graph=True):
    """Median ms of one fn(): CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=5, rep=15, return_mode="median")

def peer_missing(peer, why):
    """The one wording of a peer this run cannot measure."""
    print(f"{peer}: not measured here ({why}).")

LIGHT = "the read-only pass" if ON_GPU else "the copy"
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."

def yardsticks(x):
    """(speed of light, copy) GB/s on x: the faster of READ_CONFIGS, and the copy."""
    nbytes, copy_out = x.numel() * x.element_size(), torch.empty_like(x)
    copy = 2 * nbytes / bench(lambda: copy_out.copy_(x), graph=False) * 1e-6
    if not ON_GPU:
        return copy, copy
    del copy_out
    return max(nbytes / bench(lambda c=c: read_pass(x, **c)) * 1e-6 for c in READ_CONFIGS), copy

def check_errors():
    """Relative errors against the float64 sum, ours and torch.sum's, on shapes, dims and dtypes that reach every
    path: whole sums (one pass and two), rows, columns (strided rows), several dims."""
    torch.manual_seed(0)
    cases = ([((1,), None), ((1_000_003,), None), ((2**26,), None), ((4099, 1031), 0), ((4099, 1031), 1),
              ((7, 3_000_017), 1), ((3_000_017, 7), 0), ((1031, 4099), "0 of x.T"), ((16, 33, 65), (0, 2))] if ON_GPU else
             [((1,), None), ((10_007,), None), ((257, 65), 0), ((257, 65), 1), ((3, 5003), 1), ((5003, 3), 0),
              ((65, 129), "0 of x.T"), ((4, 9, 17), (0, 2))])
    rows = []
    for dtype in SUPPORTED_DTYPES:
        for shape, dim in cases:
            x = torch.randn(shape, device=DEVICE) + 0.5  # a non-zero mean, as activations have
            if dtype == torch.float16:  # fp16 stops at 65504: scale so that even the sum of everything fits
                x *= min(1.0, 2000.0 / x.numel())
            x, dim = (x.to(dtype).t(), 0) if dim == "0 of x.T" else (x.to(dtype), dim)
            ref = x.double().sum() if dim is None else x.double().sum(dim)
            error = lambda out: ((out.double() - ref).norm() / ref.norm()).item()
            rows.append({"shape": " x ".join(map(str, x.shape)) + (" (transposed)" if not x.is_contiguous() else ""),
                         "dim": str(dim), "dtype": str(dtype)[6:], "ours": error(reduce_sum(x, dim)),
                         "torch": error(torch.sum(x) if dim is None else torch.sum(x, dim))})
    errors = pd.DataFrame(rows)
    tolerance = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
    assert (errors["ours"] <= errors.dtype.map(tolerance)).all(), errors
    return errors

LADDER_ELEMENTS = 2**26 if ON_GPU else 2**14  # 256 MB of fp32 on the GPU

def measure_ladder():
    """Each step on one fp32 tensor viewed as rows of N: 64 (packing matters), 4096 (one row a program is enough)
    and one row of every element (splitting matters); each result checked against float64 first."""
    x = torch.randn(LADDER_ELEMENTS, device=DEVICE)
    light, row_out = yardsticks(x)[0], torch.empty(LADDER_ELEMENTS // 64, device=DEVICE)
    steps = [(0, "one row a program, whole in registers", plain_sum_rows, (64, 4096)),
             (1, "4096-element tiles: loop along long rows, pack short ones", sum_rows, (64, 4096, LADDER_ELEMENTS)),
             (2, "one row over a persistent grid, partials in a fixed order",
              lambda xm, out: sum_vector(xm.view(-1), out[:1]), (LADDER_ELEMENTS,))]
    rows = []
    for step, idea, launch, widths in steps:
        for n_cols in widths:
            xm = x.view(-1, n_cols)
            launch(xm, row_out)
            torch.testing.assert_close(row_out[:xm.shape[0]], xm.double().sum(1).float(), atol=1e-3 * n_cols**0.5,
                                       rtol=1e-4)
            gbps = LADDER_ELEMENTS * 4 / bench(lambda: launch(xm, row_out)) * 1e-6
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbps, "% of light": 100 * gbps / light})
    return pd.DataFrame(rows)

def show_ladder(ladder):
    """The ladder table (step | idea | N on the CPU, whose interpreter times are no GPU's speeds)."""
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}",
                               "% of light": "{:.3g}%"}).hide(axis="index")

def ladder_sentences(ladder):
    """What each step gained or lost, from the ladder table just measured."""
    if not ON_GPU:
        return NO_SPEED
    speed, n, top = ladder.set_index(["step", "N"])["GB/s"], LADDER_ELEMENTS, ladder.loc[ladder["% of light"].idxmax()]
    return (f"Packing short rows (step 1) read rows of 64 {speed[1, 64] / speed[0, 64]:.3g}x as fast as one row a "
            f"program (step 0), and rows of 4096 at {speed[1, 4096] / speed[0, 4096]:.3g}x its speed. On one row of "
            f"{n:,}, the persistent grid (step 2) read {speed[2, n] / speed[1, n]:.3g}x as fast as step 1's lone "
            "program." + (f" Step {top['step']:.0f} at N = {top['N']:,.0f} read at {top['% of light']:.4g}% of "
                          f"{LIGHT}: that pass is a measured kernel, not a bound." if top["% of light"] > 100 else ""))

SWEEP_VECTOR = [2**20, 2**22, 2**24, 2**26, 2**28] if ON_GPU else [2**10, 2**12, 2**14]

def providers(out):
    """name -> a whole sum of x (ours writes it to ``out``); torch.compile on a GPU only."""
    found = {"torch": torch.sum}
    if ON_GPU:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: t.sum(), dynamic=False)
    return found | {"ours": lambda t: sum_vector(t, out)}

def measure_sweep():
    """GB/s and error of each provider's whole sum, fp32 and bf16, over SWEEP_VECTOR."""
    if not ON_GPU:
        peer_missing("torch.compile", "no GPU")
    records = []
    for dtype in (torch.float32, torch.bfloat16):
        for n in SWEEP_VECTOR:
            x, out = torch.randn(n, device=DEVICE, dtype=dtype), torch.empty(1, device=DEVICE, dtype=torch.float32)
            (light, copy), reference = yardsticks(x), x.double().sum().float()
            atol = 1e-7 * x.float().abs().sum().item() + 1e-2  # huge fp32 sums round a little
            for name, fn in providers(out).items():
                mine = not isinstance(result := fn(x), torch.Tensor)  # ours: fp32 out; torch's: x's dtype
                value = (out if mine else result).float().reshape(())
                torch.testing.assert_close(value, reference, atol=atol, rtol=1e-3 if mine else 1e-2)
                gbps = x.numel() * x.element_size() / bench(lambda: fn(x)) * 1e-6
                records.append({"dtype": str(dtype)[6:], "n": n, "provider": name, "GB/s": gbps,
                                "speed of light GB/s": light, "copy GB/s": copy, "% of speed of light": 100 * gbps / light,
                                "error": abs(value.double().item() - reference.item()) / abs(reference.item())})
            del x
        if ON_GPU:
            torch.cuda.empty_cache()
    return pd.DataFrame(records)

def sweep_table(results):
    """GB/s of every provider (ours as % of light and against torch) on a GPU; each one's error on the CPU."""
    table = results.pivot_table(index=["dtype", "n"], columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in ["torch", "torch.compile", "ours"] if p in table.columns]]
    table.insert(0, "speed of light", results.groupby(["dtype", "n"])["speed of light GB/s"].first())
    table.insert(1, "copy (reference)", results.groupby(["dtype", "n"])["copy GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / torch"] = table["ours"] / table["torch"]
    write_results(table)
    if not ON_GPU:  # the interpreter's times are no GPU's speeds: each provider's error against the float64 sum
        table = results.pivot_table(index=["dtype", "n"], columns="provider", values="error").add_suffix(", error")
    return table.style.format({c: "{:.0f}" for c in table.columns} | {c: "{:.1e}" for c in table.columns if
                              c.endswith("error")} | {"ours, % of light": "{:.1f}%", "ours / torch": "{:.2f}x"}, na_rep="-")

def write_results(table):
    """The summary the site's landing page reads."""
    if os.environ.get("SOL_RESULTS"):
        peers = table.filter(items=["torch", "torch.compile"]).max(axis=1)
        summary = pd.DataFrame({"ours, % of light": table["ours, % of light"], "ours / best peer": table["ours"] / peers})
        summary.rename_axis(["dtype", "N"]).assign(direction="sum of all elements", recommended=[
            int(n in RANGE.get(("sum of all elements", t), ())) for t, n in summary.index]).to_csv(
            os.path.join(os.environ["SOL_RESULTS"], "03_parallel_reduction.csv"))

def plot_sweep(results):
    """Each provider in % of the speed of light measured beside it, fp32 and bf16 side by side."""
    if not ON_GPU:
        return print(NO_SPEED)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white")
    for ax, dtype in zip(axes, ["float32", "bfloat16"]):
        for name, line in results[results.dtype == dtype].groupby("provider", sort=False):
            ax.plot(line.n, line["% of speed of light"], marker="o", markersize=3,
                    linewidth=2.5 if name == "ours" else 1.2, label=name)
        ax.axhline(100, color="black", linewidth=1, label=f"speed of light ({LIGHT[4:]})")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"whole vector, {dtype}", xlabel="elements n", ylabel=f"% of {LIGHT}'s GB/s" if ax is axes[0] else None)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Whole sums, on {WHERE}")
    fig.tight_layout()
    plt.show()

def sweep_sentences(results):
    """Where ours stands at the largest and the smallest n, and any point that read above the speed of light."""
    if not ON_GPU:
        return NO_SPEED
    big = results[results.n == SWEEP_VECTOR[-1]].pivot_table(index="dtype", columns="provider", values="% of speed of light")
    small = results[(results.n == SWEEP_VECTOR[0]) & (results.dtype == "float32") & (results.provider == "ours")].iloc[0]
    text = f"At n = {SWEEP_VECTOR[-1]:,} ours reads at " + " and ".join(
        f"{big.ours[t]:.3g}% of {LIGHT} in {t} ({big.ours[t] / big.filter(items=['torch', 'torch.compile']).loc[t].max():.3g}x "
        "the faster peer)" for t in big.index) + "."
    text += (f" At n = {SWEEP_VECTOR[0]:,} a whole fp32 sum takes {SWEEP_VECTOR[0] * 4e-3 / small['GB/s']:.3g} us, "
             f"{small['% of speed of light']:.3g}% of {LIGHT}: the launches of its two passes are a fixed part of so "
             "short a time.")
    over = results[results["% of speed of light"] > 100]
    if len(over):
        top = over.loc[over["% of speed of light"].idxmax()]
        text += (f" {len(over)} points read above {LIGHT}, at most {top['% of speed of light']:.4g}% "
                 f"({top['provider']}, {top['dtype']}, n = {top['n']:,}): the read-only pass is a measured kernel, "
                 "not a bound, and one launch of it can be timed a little slower than another kernel reading the same bytes.")
    return text

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch": torch.__version__, "Triton":
            triton.__version__, "Python": platform.python_version(), "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
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
# Correctness
# -----------
# :math:`\lVert out - ref \rVert / \lVert ref \rVert` against the float64 sum, beside :func:`torch.sum`'s,
# on whole sums, rows, columns (``x.T``) and several dims: the page builds only if ours are within a few
# roundings.

errors = check_errors()
errors.style.format({"ours": "{:.1e}", "torch": "{:.1e}"}).hide(axis="index")

# %%
# The ladder, measured
# --------------------
# Each step on one fp32 tensor viewed as rows of N: 64 (packing matters), 4096 (one row a program is
# enough) and one row of every element (splitting matters).

ladder = measure_ladder()
show_ladder(ladder)

# %%
print(ladder_sentences(ladder))

# %%
# Benchmark: the whole vector
# ---------------------------
# A few MB to 1 GiB in fp32 and bf16, ours (step 2) against the peers:

results = measure_sweep()
sweep_table(results)

# %%
# As a plot, in % of the speed of light measured beside each point:

plot_sweep(results)

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

print(sweep_sentences(results))

# %%
# Going further
# -------------
# **Where this design stops.** Step 1's kernel is slow where rows are too few to fill the GPU and for
# column sums (``dim=0``, read :math:`N` apart):
# :ref:`sphx_glr_tutorials_deep_dives_31_reduction_rows_and_columns.py` splits rows across programs, as
# step 2 does, lays out a kernel for columns, measures the whole sum's alternatives (a program per
# block; atomics, whose bits change from run to run) and shows why running sums are fp32. **One
# launch, still deterministic**: each program writes its partial and counts itself with
# ``tl.atomic_add``; the last sums the partials in their fixed order (as CUB does). **Exercise.**
# Change ``_vector_config``'s constants: which sizes move, and why?
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; CUB's device-wide reductions.

environment_card()
