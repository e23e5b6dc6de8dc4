"""
Sum of all elements in one launch
=================================

:ref:`sphx_glr_tutorials_03_parallel_reduction.py` summed each row of a matrix. This page sums every element,
``x.sum()``, over the whole GPU in one launch, measured against PyTorch, ``torch.compile`` and the read-only pass on
the GPU that built this page; then makes both sums a drop-in for :func:`torch.sum`, with autograd, that
``torch.compile(fullgraph=True)`` keeps in its graph.

**What you will learn**: a *persistent* grid; an atomic ticket that lets the last program add the partial sums in a
fixed order, the same bits every run; an operator of your own with ``torch.library.custom_op``. Prerequisite: the
row-sum page, whose step 1 this page carries in its appendix.
"""

import datetime, os, torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import triton, triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# Step 2: one long row over many programs
# ---------------------------------------
# A sum of all n elements reads 4n bytes in fp32, 2n in bf16, and writes one number: its speed of light is the
# read-only pass, as for rows. It is one row of n, which the row-sum page's step 1 gives to one program: one SM of the
# many. Step 2 splits it over a **persistent** grid, as many programs as the GPU holds at once: program ``pid`` walks
# blocks ``pid``, ``pid + num_programs``, ... (``tl.num_programs(0)`` is the grid's size, the third argument of
# ``tl.range`` its step) and stores one partial sum.
#
# Then the partials must be added. Each program takes a *ticket*: ``tl.atomic_add`` on one counter returns its
# value before the add, so of the P programs one draws the last ticket, ``P - 1``. ``sem="acq_rel"`` orders memory
# around it: a program's store is visible before its ticket, and the last program's loads see every store made
# before. That program loads the P partials as one block of ``PARTIALS``, P rounded up to a power of two
# (``volatile``: read past L1, a guard beside acq_rel), adds them in an order fixed by the code and the grid, so
# every run gives the same bits, and puts the counter back to 0 for the next call (``tl.atomic_xchg``). One launch: a
# second to add the partials would cost microseconds, the time to read megabytes.

@triton.jit
def sum_kernel(x_ptr, partials_ptr, ticket_ptr, out_ptr, n, BLOCK: tl.constexpr, PARTIALS: tl.constexpr,
               EVICT: tl.constexpr):
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)  # one running sum per lane
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy=EVICT)  # read once
        acc += x.to(tl.float32)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))  # this program's partial sum
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_programs - 1:  # a run-time if: the last program enters
        p = tl.arange(0, PARTIALS)
        total = tl.sum(tl.load(partials_ptr + p, mask=p < n_programs, other=0.0, volatile=True), axis=0)
        tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(ticket_ptr, 0)  # the counter back to 0: the next launch needs no clearing

# %%
# **Launch parameters**, by Little's law as on the row-sum page: a program loads 4096 elements a step (16 KB of fp32;
# 16 warps of 8 a thread, 16-byte loads), as many programs an SM as its warps hold (``WARPS_PER_SM`` / 16: 4 on sm_80
# and sm_90, 3 on sm_86 and sm_89). ``EVICT``: ``"evict_first"`` lets L2 drop these lines first; measured faster while
# *x* fits in 4 L2s, slower past. The counter is made once a device and stream, zeroed; every launch leaves it at 0.
# ``RANGE``: every n.

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4: the CPU's stand-in
L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 2**25
WARPS_PER_SM = torch.cuda.get_device_properties(DEVICE).max_threads_per_multi_processor // 32 if ON_GPU else 64
RANGE = {("sum of all elements", t): range(1, 2**40) for t in ("float32", "bfloat16")}  # 2**40: no last

def _vector_config(n, element_size):  # (grid, meta) of sum_kernel over n elements
    evict = "evict_first" if n * element_size <= 4 * L2_BYTES else ""  # (the paragraph above)
    return min(triton.cdiv(n, 4096), WARPS_PER_SM // 16 * NUM_SMS), dict(BLOCK=4096, EVICT=evict, num_warps=16)

_TICKETS = {}  # one counter a device and stream

def sum_vector(x, out):
    """out[0] = sum of the contiguous 1-D tensor x, accumulated in fp32, in one launch; returns its grid."""
    if x.dim() != 1 or x.numel() > 1 and x.stride(0) != 1:  # the kernel reads x[i] at x_ptr + i
        raise ValueError(f"sum_vector: x must be 1-D with unit stride, shape {list(x.shape)}, strides {x.stride()}")
    grid, meta = _vector_config(x.numel(), x.element_size())
    stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0
    if (key := (x.device, stream)) not in _TICKETS:
        _TICKETS[key] = torch.zeros(1, dtype=torch.int32, device=x.device)
    partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_kernel[(grid,)](x, partials, _TICKETS[key], out, x.numel(), PARTIALS=triton.next_power_of_2(grid), **meta)
    return grid

# %%
# The drop-in function
# --------------------
# ``reduce_sum`` takes :func:`torch.sum`'s arguments and checks them as torch does (``_checked``, in the appendix). The
# reduced dims are moved last and flattened into rows (a view where the strides allow, else one copy) for the row-sum
# page's ``sum_rows``, carried in the appendix; a sum of every dim is one long row for step 2. What runs inside need
# not be traced: ``torch.library.custom_op`` makes the sum an operator that stays in a compiled graph,
# ``register_fake`` gives the compiler its output's shape and dtype without running it, ``register_autograd`` its
# backward. The gradient of a sum is the upstream one broadcast back over the reduced dims: torch ops, no kernel.
#
# To take it into your code, copy the page above its appendix and the appendix's carried kernels, launchers and
# helpers; leave the machinery after them.

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
    dims = _checked(input, dim, dtype)  # sorted; None or (): every dim
    x = input if dtype in (None, input.dtype, torch.float32) else input.to(dtype)  # fp32: the kernels add in it
    out = sum_op(x, dims, x.dtype if dtype is None else dtype)
    return out.view([1 if d in dims else n for d, n in enumerate(x.shape)]) if keepdim else out

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach. First, the row sums: the row-sum page's step 1, its config and launcher,
# letter for letter as that page writes and explains them (a test keeps the two the same). Then the drop-in's helpers
# and the machinery (the check, peers, timer, sweep, tables, plot, the sentences that read the numbers); the cells
# after the appendix call them. :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA graph of
# each call: the GPU's cost, not Python's. GB/s counts the input, read once. The speed of light's read-only pass xors
# the tensor's 32-bit words into one word a program (``tl.xor_sum``), so that no load can be dropped; each benchmark
# takes the faster of ``READ_CONFIGS``: a measurement, not a proof. The copy beside it (bytes read and written) is
# timed without a graph, where CUDA may use a slower copy engine.

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

def _row_config(n_rows, n_cols):  # (BLOCK_M, BLOCK_N, num_warps) of row_sum_kernel
    block_n = min(triton.next_power_of_2(n_cols), 8192)  # a long row fills the tile alone: 8192 columns a step
    block_m = max(1, min(8192 // block_n, triton.next_power_of_2(n_rows)))  # short rows: many a tile
    num_warps = min(16, max(4, block_m * block_n // (32 * 16)))  # 16 elements a thread, 4 to 16 warps
    return block_m, block_n, num_warps

def sum_rows(x2d, out):  # out[i] = sum of row i of x2d (any strides), one program per BLOCK_M rows
    (n_rows, n_cols), (block_m, block_n, num_warps) = x2d.shape, _row_config(*x2d.shape)
    even = n_rows % block_m == 0 and n_cols % block_n == 0  # every tile full
    row_sum_kernel[(triton.cdiv(n_rows, block_m),)](x2d, out, n_rows, n_cols, *x2d.stride(),
                                                    BLOCK_M=block_m, BLOCK_N=block_n, EVEN=even, num_warps=num_warps)

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def _flat(x):  # a unit-stride 1-D view where x's elements fill one dense block, else a contiguous copy
    dense = x.permute(sorted(range(x.dim()), key=lambda d: (-x.stride(d), -x.shape[d])))
    return dense.view(-1) if dense.is_contiguous() else x.contiguous().view(-1)  # strided, broadcast: copied

def _checked(x, dim, dtype):
    """reduce_sum's arguments, checked as torch.sum checks them (each error names the limit); returns the dims to sum,
    sorted and distinct: every dim for None or ()."""
    if not isinstance(x, torch.Tensor):
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
    return sorted(wrapped) if dims and x.dim() else list(range(x.dim()))

# %%
import platform, subprocess, timeit
import matplotlib.pyplot as plt
import pandas as pd

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
    read_kernel[(grid,)](words, out, words.numel(), BLOCK=block, EVICT=evict,
                         EVEN=words.numel() % block == 0, num_warps=num_warps)
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
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")

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
    path: whole sums (one program and many), rows, columns (strided rows), several dims; asserted within a few
    roundings. Returns the table."""
    torch.manual_seed(0)
    cases = ([((1,), None), ((1_000_003,), None), ((2**26,), None), ((4099, 1031), 0), ((4099, 1031), 1),
              ((7, 3_000_017), 1), ((3_000_017, 7), 0), ((1031, 4099), "0 of x.T"), ((16, 33, 65), (0, 2))]
             if ON_GPU else
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
    return errors.style.format({"ours": "{:.1e}", "torch": "{:.1e}"}).hide(axis="index")  # .data: the table

LADDER_ELEMENTS = 2**26 if ON_GPU else 2**14  # 256 MB of fp32 on the GPU

def measure_steps():
    """Step 1 (carried) and step 2 on one fp32 tensor of LADDER_ELEMENTS as one row, each checked against float64
    first."""
    x = torch.randn(LADDER_ELEMENTS, device=DEVICE)
    light, out = yardsticks(x)[0], torch.empty(1, device=DEVICE)
    steps = [(1, "the row-sum page's tile: one program walks the row", lambda: sum_rows(x.view(1, -1), out)),
             (2, "one row over a persistent grid, partials in a fixed order", lambda: sum_vector(x, out))]
    rows = []
    for step, idea, launch in steps:
        launch()
        torch.testing.assert_close(out, x.double().sum().float().view(1), atol=1e-3 * LADDER_ELEMENTS**0.5, rtol=1e-4)
        gbps = LADDER_ELEMENTS * 4 / bench(launch) * 1e-6
        rows.append({"step": step, "idea": idea, "N": LADDER_ELEMENTS, "GB/s": gbps, "% of light": 100 * gbps / light})
    return pd.DataFrame(rows)

def show_steps(steps):
    """The steps' table (step | idea | N on the CPU, whose interpreter times are no GPU's speeds)."""
    shown = steps if ON_GPU else steps[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}",
                               "% of light": "{:.3g}%"}).hide(axis="index")

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
                records.append({"direction": "sum of all elements", "dtype": str(dtype)[6:], "N": n,
                                "provider": name, "GB/s": gbps, "speed of light GB/s": light, "copy GB/s": copy,
                                "% of speed of light": 100 * gbps / light,
                                "error": abs(value.double().item() - reference.item()) / abs(reference.item())})
            del x
        if ON_GPU:
            torch.cuda.empty_cache()
    return pd.DataFrame(records)

PEERS = ["torch", "torch.compile"]  # what "ours / best peer" and the reading compare with
def summary(results):
    """GB/s of every provider (ours as % of light and against the faster peer) on a GPU, each one's error on the CPU;
    written for the site's landing page when the build names a folder for it."""
    index = ["direction", "dtype", "N"]
    table = results.pivot_table(index=index, columns="provider", values="GB/s", dropna=False)
    table = table[[p for p in ["torch", "torch.compile", "ours"] if p in table.columns]]
    table.insert(0, "speed of light", results.groupby(index)["speed of light GB/s"].first())
    table.insert(1, "copy (reference)", results.groupby(index)["copy GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table.filter(items=PEERS).max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # the summary the site's landing page reads
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "03_sum_of_all_elements.csv"))
    if not ON_GPU:  # the interpreter's times are no GPU's speeds: each provider's error against the float64 sum
        errors = results.pivot_table(index=index, columns="provider", values="error").add_suffix(", error")
        return errors.style.format("{:.1e}")
    fmt = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(fmt, na_rep="-")  # the Styler: its .data is the table

def plot(table):
    """Each provider in % of the speed of light measured beside it, fp32 and bf16 side by side (on a GPU)."""
    if not ON_GPU:
        return
    table = table.data  # the summary's Styler holds the table
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white")
    for ax, ((direction, dtype), part) in zip(axes, table.groupby(level=[0, 1], sort=False)):
        for name in [p for p in ("torch", "torch.compile", "ours") if p in part.columns]:
            ax.plot(part.index.get_level_values("N"), 100 * part[name] / part["speed of light"], marker="o",
                    markersize=3, linewidth=2.5 if name == "ours" else 1.2, label=name)
        ax.axhline(100, color="black", linewidth=1, label=f"speed of light ({LIGHT[4:]})")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="elements n",
               ylabel=f"% of {LIGHT}'s GB/s" if ax is axes[0] else None)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Whole sums, on {WHERE}")
    fig.tight_layout()
    plt.show()

def fixed_cost():
    """ms of ``sum_kernel`` launched as one program that reads nothing (n = 0), timed as every provider is: the part
    of a short sum's time that no byte pays for (the launch, the ticket, the timer's own events)."""
    x, out, partials = (torch.zeros(1, device=DEVICE) for _ in range(3))
    ticket = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    return bench(lambda: sum_kernel[(1,)](x, partials, ticket, out, 0, BLOCK=4096, PARTIALS=1, EVICT="", num_warps=16))

def reading(table, steps, fixed):
    """Where ours stands at the largest and the smallest n (there beside ``fixed``, the ms of a launch that reads
    nothing), what step 2 gained over step 1, and any point that read above the speed of light."""
    if not ON_GPU:
        return NO_SPEED
    table, (first, last) = table.data, (SWEEP_VECTOR[0], SWEEP_VECTOR[-1])  # the summary's Styler holds the table
    pct, vs_peer = table["ours, % of light"], table["ours / best peer"]
    at = lambda t, n: ("sum of all elements", t, n)  # noqa: E731
    text = [f"At n = {last:,} ours reads at " + " and ".join(
        f"{pct[at(t, last)]:.3g}% of {LIGHT} in {t} ({vs_peer[at(t, last)]:.3g}x the faster peer)"
        for t in ("float32", "bfloat16")) + "."]
    fp32 = table.loc[at("float32", first)]
    ours_us, light_us = first * 4e-3 / fp32["ours"], first * 4e-3 / fp32["speed of light"]
    text.append(f"At n = {first:,} a whole fp32 sum takes {ours_us:.3g} us, {fp32['ours, % of light']:.3g}% of "
                f"{LIGHT}, which itself takes {light_us:.3g} us. The same kernel launched as one program that reads "
                f"nothing took {fixed * 1e3:.3g} us in this run, {100 * fixed * 1e3 / ours_us:.0f}% of ours: at so "
                "short a time the launch, not the bytes, sets the pace.")
    peers = table.filter(items=PEERS)
    for (d, t, n), row in table[vs_peer < 1].iterrows():  # where a peer wins: which, and by how much, in time
        best, size = peers.loc[d, t, n].idxmax(), n * (2 if t == "bfloat16" else 4) * 1e-3
        text.append(f"{best} wins at {t} n = {n:,}: {size / row[best]:.3g} us against ours' {size / row['ours']:.3g}.")
    speed = steps.set_index("step")["GB/s"]
    text.append(f"On one row of {LADDER_ELEMENTS:,} elements the persistent grid (step 2) read "
                f"{speed[2] / speed[1]:.3g}x as fast as step 1's lone program.")
    over = pct[pct > 100]
    if len(over):
        text.append(f"Ours read above {LIGHT} at {len(over)} of {len(table)} points, at most {over.max():.4g}%: the "
                    "read-only pass is a measured kernel, not a bound, and one launch of it can be timed a little "
                    "slower than another kernel reading the same bytes.")
    return "\n".join(text)

def check_compiled(loss, *params):
    """loss() compiled whole: fullgraph=True raises at a graph break (without a GPU the aot_eager backend, as Inductor's
    CPU code would need a C++ compiler); the compiled step's gradients must be eager's."""
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    torch.testing.assert_close(*[torch.autograd.grad(fn(), params) for fn in (compiled, loss)])
    return "compiled with fullgraph=True: one graph, forward and backward; its gradients are eager's"

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch": torch.__version__,
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
            "packages": os.getenv("SOL_LOCK", "not pinned")}
    if ON_GPU:
        props = torch.cuda.get_device_properties(DEVICE)
        smi = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
        card["device"] = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        try:
            driver = subprocess.run(smi.split(), capture_output=True, text=True, timeout=10, check=True).stdout
            driver = driver.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            driver = "unknown"
        card["driver / CUDA"] = f"driver {driver}, CUDA {torch.version.cuda}"
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    html = f"<details><summary>Full environment card</summary>{table}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()  # shown as its HTML, collapsed

# %%
# Correctness
# -----------
# :math:`\lVert out - ref \rVert / \lVert ref \rVert` against the float64 sum, beside :func:`torch.sum`'s, on whole
# sums, rows, columns (``x.T``) and several dims: the page builds only if ours are within a few roundings.

check_errors()

# %%
# Step 2 against step 1, measured
# -------------------------------
# One fp32 tensor as a single row, summed by the row-sum page's step 1 and by step 2:

steps = measure_steps()
show_steps(steps)

# %%
# **In a compiled model.** A layer and the drop-in, compiled whole with ``torch.compile(fullgraph=True)``, forward and
# backward; ``check_compiled`` (in the appendix) fails at a graph break and compares the gradients with eager's.

layer, h = torch.nn.Linear(64, 1000, device=DEVICE), torch.randn(32, 64, device=DEVICE)
check_compiled(lambda: reduce_sum(reduce_sum(layer(h).square(), 1).sqrt()), layer.weight)

# %%
# Benchmark: the whole tensor
# ---------------------------
# A few MB to 1 GiB in fp32 and bf16, ours (step 2) against the peers, GB/s (higher is better):

(table := summary(measure_sweep()))

# %%
# Each provider in % of the speed of light measured beside it:

plot(table)

# %%
# Reading the numbers
# -------------------

print(reading(table, steps, fixed_cost()))

# %%
# Going further
# -------------
# **Other designs.** :ref:`sphx_glr_tutorials_deep_dives_31_reduction_rows_and_columns.py` measures two launches, a
# program per block, and ``tl.atomic_add`` into one number, which adds in whatever order programs finish.
#
# **Exercise.** Change ``_vector_config``'s constants (4096 elements a step, 16 warps a program): which sizes move, and
# why?
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; CUB's device-wide reductions.

environment_card()
