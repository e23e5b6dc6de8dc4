"""
Parallel reduction
==================

Many numbers into one, as fast as the memory delivers them: you build ``reduce_sum(x, dim=None)``, a
drop-in for :func:`torch.sum`, measured against PyTorch, ``torch.compile`` and a kernel that only reads
the same input (the *speed of light*) on the GPU that built this page.

**What you will learn**, as a ladder of three kernels: a row summed by a tree in one program; a tile
that walks rows of any length and packs short ones; a long row split over a persistent grid, its
partial sums added in a fixed order. Also why running sums are fp32, and which designs give the same
bits every run. The Triton basics are in the primer of
:ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import datetime, os, platform, subprocess, timeit
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
# The bytes model
# ---------------
# Summing :math:`n` elements of :math:`b` bytes reads :math:`n b` bytes, one addition each, far below
# what the arithmetic units can do: a perfect sum takes the time the GPU takes to *read* them. Its
# *speed of light* is the GB/s of a **read-only pass** over the same tensor. A sum along dims is a matrix
# of rows to sum (the reduced dims moved last): the same bytes.
#
# Step 0: the plain kernel
# ------------------------
# One program per row loads the whole row as one block (the row rounded up to a power of two) and
# ``tl.sum`` reduces it as a *tree* (each thread adds its values, a warp's threads halve their partial
# sums by shuffles, the warps combine theirs through shared memory), not in the order of a running sum
# :math:`((x_0 + x_1) + x_2) + \cdots`: the two differ by a few roundings. With both strides, a column
# sum of ``x`` is a row sum of ``x.T``. Two limits: the row must fit in registers, and a short row gives
# its program little to read (64 fp32: 256 bytes).

@triton.jit
def plain_row_sum_kernel(x_ptr, out_ptr, n_cols, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_m + cols.to(tl.int64) * stride_n, mask=cols < n_cols, other=0.0)
    total = tl.sum(x.to(tl.float32), axis=0)  # the tree, in fp32 whatever x's dtype
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
# Step 1: a tile of fixed size
# ----------------------------
# The tile no longer follows the row: it is 4096 elements, ``BLOCK_M`` rows of ``BLOCK_N`` columns. A
# long row is walked ``BLOCK_N`` columns a step (``tl.range``: a loop in the kernel) into a fp32
# accumulator reduced at the end: any length. Short rows share a program, 64 rows of 64 a tile: 16 KB
# to read instead of 256 bytes, enough bytes in flight to hide the memory's latency. The drop-in runs
# this kernel for sums along dims. ``_row_config`` gives each thread 16 elements, hence
# ``BLOCK_M * BLOCK_N / 512`` warps (4 to 16). ``tl.program_id(1)`` and ``cols_per_split`` serve deep
# dive 31's split rows; here one split covers a row.

@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, cols_per_split,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # program (i, s): rows i*BLOCK_M ... , columns [s * cols_per_split, (s + 1) * cols_per_split)
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
    """(BLOCK_M, BLOCK_N, num_warps) of row_sum_kernel: a tile of 4096 elements, 16 per thread."""
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
# Why the running sums are fp32
# -----------------------------
# bf16 keeps 8 significant bits: once a running sum reaches 256 the next bf16 number is 258, so adding
# a value below 1 rounds back to 256 and the sum stops growing. The kernel below keeps ``LANES`` running
# sums rounded to ``ACC_DTYPE`` after each addition and sums bf16 numbers in :math:`[0, 1)`, against the
# float64 sum. (The interpreter truncates instead of rounding: there bf16 sums stall at 128.)

@triton.jit
def running_sum_kernel(x_ptr, out_ptr, n, LANES: tl.constexpr, ACC_DTYPE: tl.constexpr):
    lanes = tl.arange(0, LANES)
    acc = tl.zeros([LANES], tl.float32)
    for block in tl.range(0, tl.cdiv(n, LANES)):
        offs = tl.cast(block, tl.int64) * LANES + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc = (acc + x.to(tl.float32)).to(ACC_DTYPE).to(tl.float32)  # keep only ACC_DTYPE's bits
    tl.store(out_ptr, tl.sum(acc, axis=0))

DEMO_LANES, DEMO_PER_LANE = (1024, [4, 64, 1024, 4096]) if ON_GPU else (16, [4, 64, 1024])
torch.manual_seed(0)
rows = []
for per_lane in DEMO_PER_LANE:
    x = torch.rand(DEMO_LANES * per_lane, device=DEVICE).to(torch.bfloat16)
    row, exact = {"values per lane": per_lane}, x.double().sum().item()
    for name, acc_dtype in [("fp32", tl.float32), ("bf16", tl.bfloat16)]:
        out = torch.full((1,), float("nan"), device=DEVICE, dtype=torch.float32)
        running_sum_kernel[(1,)](x, out, x.numel(), LANES=DEMO_LANES, ACC_DTYPE=acc_dtype)
        row[f"error, {name}"] = abs(out.item() - exact) / exact
    rows.append(row)
demo = pd.DataFrame(rows).set_index("values per lane")
print(f"{DEMO_PER_LANE[-1]} values a lane: bf16 running sums off by {100 * demo['error, bf16'].iloc[-1]:.3g}%, fp32 by "
      f"{100 * demo['error, fp32'].iloc[-1]:.2g}%.")
demo.style.format("{:.1e}")

# %%
# So the kernels read bf16 as such (half the bytes of fp32), add in fp32 and round once, at the end.
#
# Step 2: one long row over many programs
# ---------------------------------------
# A sum of every element is one row of :math:`n`, which step 1 gives to one program: one SM of over a
# hundred. Step 2 splits it over a **persistent** grid, as many programs as the GPU holds at once:
# program ``pid`` walks blocks ``pid``, ``pid + num_programs``, ... and writes one partial sum; a
# one-program second launch adds them in an order fixed by the code and the grid: the same bits every
# run. Variants, measured below: **two-pass**, a program (and partial) per block, and **atomic**, each
# program adding its sum into one fp32 number (``tl.atomic_add``, an addition to memory that no other
# program interleaves) in whatever order programs finish.

@triton.jit
def sum_blocks_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ATOMIC: tl.constexpr):
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

DESIGNS = ("atomic", "two-pass", "persistent")
VECTOR_BLOCK = 4096  # elements a program loads per step: 8 per thread with 16 warps (16-byte loads)
VECTOR_NUM_WARPS = 16  # nothing else to overlap the loads with: many warps, many loads in flight
PROGRAMS_PER_SM = 4  # persistent grid: 4 x 16 warps = 64 warps, the most an SM holds
FINAL_BLOCK = 1024  # the second pass's block (4 warps): the persistent grid's partials in a step or two
NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4: the CPU's stand-in
# The n the persistent design is for, read by the site's landing page: every n (2**40: no last).
RANGE = {("sum of all elements", t): range(1, 2**40) for t in ("float32", "bfloat16")}

def _vector_config(n, design):
    """(grid, BLOCK, num_warps) of sum_blocks_kernel's first pass over n elements."""
    n_blocks = triton.cdiv(n, VECTOR_BLOCK)
    grid = min(n_blocks, PROGRAMS_PER_SM * NUM_SMS) if design == "persistent" else n_blocks
    return grid, VECTOR_BLOCK, VECTOR_NUM_WARPS

def sum_vector(x, out, design="persistent"):
    """out[0] = sum of the contiguous 1-D tensor x, accumulated in fp32; returns the grid size. ``out`` is
    a 1-element tensor of any float dtype (fp32 for ``design="atomic"``, which adds into it)."""
    if design not in DESIGNS:
        raise ValueError(f"sum_vector: unknown design {design!r}; expected one of {DESIGNS}")
    if x.dim() != 1 or x.numel() > 1 and x.stride(0) != 1:  # the kernel reads x[i] at x_ptr + i
        raise ValueError(f"sum_vector: x must be 1-D with unit stride, got shape {list(x.shape)}, strides {x.stride()}")
    grid, block, num_warps = _vector_config(x.numel(), design)
    if design == "atomic":
        sum_blocks_kernel[(grid,)](x, out.zero_(), x.numel(), BLOCK=block, ATOMIC=True, num_warps=num_warps)
        return grid
    partials = out if grid == 1 else torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_blocks_kernel[(grid,)](x, partials, x.numel(), BLOCK=block, ATOMIC=False, num_warps=num_warps)
    if grid > 1:  # the second pass; one program alone wrote its sum straight to out
        sum_blocks_kernel[(1,)](partials, out, grid, BLOCK=FINAL_BLOCK, ATOMIC=False, num_warps=4)
    return grid

# %%
# The drop-in function
# --------------------
# ``reduce_sum`` means what :func:`torch.sum` means. The reduced dims are permuted to the end and
# flattened into rows (a view where the strides allow; else one copy) for step 1's kernel; all of them
# is one long row for step 2's persistent design. The gradient, the upstream gradient broadcast back
# over the reduced dims, needs no kernel.

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _flat(x):  # a unit-stride 1-D view where x's elements fill one dense block, else a contiguous copy
    dense = x.permute(sorted(range(x.dim()), key=lambda d: (-x.stride(d), -x.shape[d])))
    return dense.view(-1) if dense.is_contiguous() else x.contiguous().view(-1)  # strided, broadcast: copied

# The kernels run inside a PyTorch operator, ``torch.library.custom_op``: a model compiled with
# ``torch.compile(fullgraph=True)`` keeps it in its graph, with no break, and ``register_fake`` tells the compiler the
# output's shape and dtype without running it. The gradient is the upstream one broadcast back, in torch ops, so a
# gradient of the gradient is torch's too.

@torch.library.custom_op("sol::reduce_sum_03", mutates_args=())
def sum_op(x: torch.Tensor, dims: list[int], dtype: torch.dtype) -> torch.Tensor:
    """x summed over dims (sorted, distinct; every dim for a whole sum), in dtype, the reduced dims dropped."""
    kept = [d for d in range(x.dim()) if d not in dims]
    out = torch.empty([x.shape[d] for d in kept], device=x.device, dtype=dtype)
    if x.numel() == 0:
        out.zero_()  # a sum of nothing is 0
    elif not kept:
        sum_vector(_flat(x), out.view(1), "persistent")
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
        raise ValueError(f"reduce_sum: x is on {x.device}; " + ("a CUDA GPU is in use" if ON_GPU else "no GPU: the interpreter needs CPU tensors"))
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
# Correctness
# -----------
# :math:`\lVert out - ref \rVert / \lVert ref \rVert` against the float64 sum, beside :func:`torch.sum`'s:
# the page builds only if ours are within a few roundings.

torch.manual_seed(0)
CHECK_CASES = ([((1,), None), ((1_000_003,), None), ((2**26,), None), ((4099, 1031), 0), ((4099, 1031), 1),
                ((7, 3_000_017), 1), ((3_000_017, 7), 0), ((1031, 4099), "0 of x.T"), ((16, 33, 65), (0, 2))] if ON_GPU else
               [((1,), None), ((10_007,), None), ((257, 65), 0), ((257, 65), 1), ((3, 5003), 1), ((5003, 3), 0),
                ((65, 129), "0 of x.T"), ((4, 9, 17), (0, 2))])

def check_row(shape, dim, dtype):
    x = torch.randn(shape, device=DEVICE) + 0.5  # a non-zero mean, as activations have
    if dtype == torch.float16:  # fp16 stops at 65504: scale so that even the sum of everything fits
        x *= min(1.0, 2000.0 / x.numel())
    x, dim = (x.to(dtype).t(), 0) if dim == "0 of x.T" else (x.to(dtype), dim)
    ref = x.double().sum() if dim is None else x.double().sum(dim)
    error = lambda out: ((out.double() - ref).norm() / ref.norm()).item()
    return {"shape": " x ".join(map(str, x.shape)) + (" (transposed)" if not x.is_contiguous() else ""),
            "dim": str(dim), "dtype": str(dtype)[6:], "ours": error(reduce_sum(x, dim)),
            "torch": error(torch.sum(x) if dim is None else torch.sum(x, dim))}

errors = pd.DataFrame([check_row(s, d, t) for t in SUPPORTED_DTYPES for s, d in CHECK_CASES])
TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
assert (errors["ours"] <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({"ours": "{:.1e}", "torch": "{:.1e}"}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# The measuring machinery, for reference: :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a
# CUDA graph of each call, the GPU's cost, not Python's. GB/s counts the input, read once. The copy (bytes read and
# written) is timed without a graph, where CUDA may use a slower copy engine.
# The speed of light's read-only pass xors the tensor's 32-bit words into one word per program (``tl.xor_sum``),
# so no load can be dropped; each benchmark takes the faster ``READ_CONFIGS``: a measurement, not a proof.

@triton.jit
def read_kernel(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], words_ptr.dtype.element_ty)
    for block in tl.range(pid, tl.cdiv(n_words, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, eviction_policy=EVICT)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))  # one word per program

# timed on an H100: 8192 words a program fastest at most sizes, 4096 with evict_first loads at some
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

# %%
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

def providers(out):
    """name -> a whole sum of x (ours write it to ``out``); torch.compile on a GPU only."""
    found = {"torch": torch.sum}
    if ON_GPU:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: t.sum(), dynamic=False)
    return found | {design: (lambda t, d=design: sum_vector(t, out, d)) for design in DESIGNS}

LIGHT = "the read-only pass" if ON_GPU else "the copy"
def yardsticks(x):
    """(speed of light, copy) GB/s on x: the faster of READ_CONFIGS, and the copy."""
    nbytes, copy_out = x.numel() * x.element_size(), torch.empty_like(x)
    copy = 2 * nbytes / bench(lambda: copy_out.copy_(x), graph=False) * 1e-6
    if not ON_GPU:
        return copy, copy
    del copy_out
    return max(nbytes / bench(lambda c=c: read_pass(x, **c)) * 1e-6 for c in READ_CONFIGS), copy

def write_results(table):
    """The summary the site's landing page reads."""
    if os.environ.get("SOL_RESULTS"):
        peers = table.filter(items=["torch", "torch.compile"]).max(axis=1)
        summary = pd.DataFrame({"ours, % of light": table["persistent, % of light"], "ours / best peer": table["persistent"] / peers})
        summary.rename_axis(["dtype", "N"]).assign(direction="sum of all elements", recommended=[
            int(n in RANGE.get(("sum of all elements", t), ())) for t, n in summary.index]).to_csv(
            os.path.join(os.environ["SOL_RESULTS"], "03_parallel_reduction.csv"))

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
# The ladder, measured
# --------------------
# Each step on one fp32 tensor viewed as rows of N: 64 (packing matters), 4096 (one row a program is
# enough) and one row of every element (splitting matters).

LADDER_ELEMENTS = 2**26 if ON_GPU else 2**14  # 256 MB of fp32 on the GPU
x = torch.randn(LADDER_ELEMENTS, device=DEVICE)
light, row_out = yardsticks(x)[0], torch.empty(LADDER_ELEMENTS // 64, device=DEVICE)
steps = [(0, "one row a program, whole in registers", plain_sum_rows, (64, 4096)),
         (1, "4096-element tiles: loop along long rows, pack short ones", sum_rows, (64, 4096, LADDER_ELEMENTS)),
         (2, "one row over a persistent grid, partials in a fixed order", lambda xm, out: sum_vector(xm.view(-1), out[:1]),
          (LADDER_ELEMENTS,))]
rows = []
for step, idea, launch, widths in steps:
    for n_cols in widths:
        xm = x.view(-1, n_cols)
        launch(xm, row_out)
        torch.testing.assert_close(row_out[:xm.shape[0]], xm.double().sum(1).float(), atol=1e-3 * n_cols**0.5, rtol=1e-4)
        gbps = LADDER_ELEMENTS * 4 / bench(lambda: launch(xm, row_out)) * 1e-6
        rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbps, "% of light": 100 * gbps / light})
del x, row_out
ladder = pd.DataFrame(rows)
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
shown.style.format({"N": "{:,}", "GB/s": lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}", "% of light": "{:.3g}%"}).hide(
    axis="index")

# %%
speed = ladder.set_index(["step", "N"])["GB/s"]
if not ON_GPU:
    print(NO_SPEED)
else:
    print(f"Packing short rows (step 1) read rows of 64 {speed[1, 64] / speed[0, 64]:.3g}x as fast as one row a program "
          f"(step 0), and rows of 4096 at {speed[1, 4096] / speed[0, 4096]:.3g}x its speed. On one row of {LADDER_ELEMENTS:,}, "
          f"the persistent grid (step 2) read {speed[2, LADDER_ELEMENTS] / speed[1, LADDER_ELEMENTS]:.3g}x as fast as step 1's lone program.")

# %%
# Benchmark: the whole vector
# ---------------------------
# A few MB to 1 GiB in fp32 and bf16, step 2's designs against the peers:

SWEEP_VECTOR = [2**20, 2**22, 2**24, 2**26, 2**28] if ON_GPU else [2**10, 2**12, 2**14]
records = []
if not ON_GPU:
    peer_missing("torch.compile", "no GPU")
for dtype in (torch.float32, torch.bfloat16):
    for n in SWEEP_VECTOR:
        x, out = torch.randn(n, device=DEVICE, dtype=dtype), torch.empty(1, device=DEVICE, dtype=torch.float32)
        (light, copy), reference = yardsticks(x), x.double().sum().float()
        atol = 1e-7 * x.float().abs().sum().item() + 1e-2  # huge fp32 sums round a little
        for name, fn in providers(out).items():
            mine = not isinstance(result := fn(x), torch.Tensor)  # ours: fp32 out; torch's: x's dtype
            torch.testing.assert_close((out if mine else result).float().reshape(()), reference, atol=atol,
                                       rtol=1e-3 if mine else 1e-2)
            gbps = x.numel() * x.element_size() / bench(lambda: fn(x)) * 1e-6
            error = abs((out if mine else result).double().item() - reference.item()) / abs(reference.item())
            records.append({"dtype": str(dtype)[6:], "n": n, "provider": name, "GB/s": gbps, "speed of light GB/s": light,
                            "copy GB/s": copy, "% of speed of light": 100 * gbps / light, "error": error})
        del x
    if ON_GPU:
        torch.cuda.empty_cache()
results = pd.DataFrame(records)
table = results.pivot_table(index=["dtype", "n"], columns="provider", values="GB/s", dropna=False)
table = table[[p for p in ["torch", "torch.compile", *DESIGNS] if p in table.columns]]
table.insert(0, "speed of light", results.groupby(["dtype", "n"])["speed of light GB/s"].first())
table.insert(1, "copy (reference)", results.groupby(["dtype", "n"])["copy GB/s"].first())
table["persistent, % of light"] = table["persistent"] / table["speed of light"] * 100
table["persistent / torch"] = table["persistent"] / table["torch"]
write_results(table)
if not ON_GPU:  # the interpreter's times are no GPU's speeds: each provider's error against the float64 sum instead
    table = results.pivot_table(index=["dtype", "n"], columns="provider", values="error").add_suffix(", error")
table.style.format({c: "{:.0f}" for c in table.columns} | {c: "{:.1e}" for c in table.columns if c.endswith("error")}
                   | {"persistent, % of light": "{:.1f}%", "persistent / torch": "{:.2f}x"}, na_rep="-")

# %%
# As a plot, in % of the speed of light measured beside each point:

if ON_GPU:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white")
    for ax, dtype in zip(axes, ["float32", "bfloat16"]):
        for name, line in results[results.dtype == dtype].groupby("provider", sort=False):
            ax.plot(line.n, line["% of speed of light"], marker="o", markersize=3,
                    linewidth=2.5 if name == "persistent" else 1.2, label=name)
        ax.axhline(100, color="black", linewidth=1, label=f"speed of light ({LIGHT[4:]})")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"whole vector, {dtype}", xlabel="elements n", ylabel=f"% of {LIGHT}'s GB/s" if ax is axes[0] else None)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Whole sums, on {WHERE}")
    fig.tight_layout()
else:
    print(NO_SPEED)

# %%
# Determinism, measured
# ---------------------
# The same fp32 sum many times: we count the distinct bit patterns. Only the atomic design's order is
# not fixed by the code and the grid.

DETERMINISM_RUNS = 20 if ON_GPU else 5
torch.manual_seed(1)
x = torch.randn(2**26 if ON_GPU else 2**14, device=DEVICE) + 0.5
xm, out = x.view(-1, 1024), torch.empty(1, device=DEVICE, dtype=torch.float32)
cases = {f"sum_vector, {design}": lambda d=design: (sum_vector(x, out, d), out.clone())[1] for design in DESIGNS}
cases |= {"reduce_sum(dim=0)": lambda: reduce_sum(xm, 0), "torch.sum": lambda: torch.sum(x)}
rows = []
for name, fn in cases.items():
    distinct = []
    for result in (fn() for _ in range(DETERMINISM_RUNS)):
        distinct += [] if any(torch.equal(result, seen) for seen in distinct) else [result]
    rows.append({"design": name, "runs": DETERMINISM_RUNS, "distinct results": len(distinct)})
del x, xm
determinism = pd.DataFrame(rows).set_index("design")
determinism

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

varying = determinism.index[determinism["distinct results"] > 1].tolist()
if not ON_GPU:
    print(NO_SPEED + f" Over {DETERMINISM_RUNS} runs " + (f"{', '.join(varying)} gave more than one result." if varying
          else "every design gave one result (the interpreter runs programs one after another)."))
else:
    big = results[results.n == SWEEP_VECTOR[-1]].pivot_table(index="dtype", columns="provider", values="% of speed of light")
    small = results[(results.n == SWEEP_VECTOR[0]) & (results.dtype == "float32") & (results.provider == "persistent")]
    small, vs_atomic = small.iloc[0], big.persistent / big.atomic
    print(f"At n = {SWEEP_VECTOR[-1]:,} the persistent design reads at " + " and ".join(
        f"{big.persistent[t]:.3g}% of {LIGHT} in {t} "
        f"({big.persistent[t] / big.filter(items=['torch', 'torch.compile']).loc[t].max():.3g}x the faster peer)"
        for t in big.index) + ".")
    print(f"At n = {SWEEP_VECTOR[0]:,} a whole fp32 sum takes {SWEEP_VECTOR[0] * 4e-3 / small['GB/s']:.3g} us, "
          f"{small['% of speed of light']:.3g}% of {LIGHT}: the launches of its two passes are a fixed part of so short "
          "a time. Sums along dims run step 1's kernel; where their rows are few or strided, deep dive 31 takes over.")
    print(f"Over {DETERMINISM_RUNS} runs " + (f"{', '.join(varying)} gave more than one result" if varying else
          "every design gave one result") + f"; at the largest n the persistent design read "
          f"{vs_atomic.min():.3g}-{vs_atomic.max():.3g}x as fast as the atomic one, so the same bits every run cost "
          + ("nothing measurable." if vs_atomic.min() > 0.97 else "some speed, which the drop-in pays."))

# %%
# Going further
# -------------
# **Where this design stops.** Step 1's kernel is slow where rows are too few to fill the GPU and for
# column sums (``dim=0``, read :math:`N` apart):
# :ref:`sphx_glr_tutorials_deep_dives_31_reduction_rows_and_columns.py` splits rows across programs, as
# step 2 does, and lays out a kernel for columns. **One launch, still deterministic**: each program
# writes its partial and counts itself with ``tl.atomic_add``; the last sums the partials in their fixed
# order (as CUB does). **Exercise.** Change ``_vector_config``'s constants: which sizes move, and why?
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; CUB's device-wide reductions.

environment_card()
