"""
Layer norm backward: a spin lock or a persistent grid
=====================================================

The gradients of a layer norm's weight and bias, :math:`dw` and :math:`db`, are sums over *all rows*,
so the programs that handle the rows must add up what each found. Triton's own layer-norm tutorial,
and Apex before it, does that under spin locks. This page builds that classic design, shows the race
hidden in it and its fix, and measures it against the persistent, lock-free design of
:ref:`sphx_glr_tutorials_02_layer_norm_backward.py`, whose kernels it carries so that it runs alone: which is
faster, and which gives the same bits on every run.

**What you will learn**: how a spin lock is built from atomics in Triton; why
releasing it right after the stores loses rows, and what a barrier changes; why even the fixed design
gives a different :math:`dw` on every run; and what a persistent grid with one partial line per
program buys instead. Prerequisites: the layer-norm page above (its backward formula).
"""

import datetime, importlib.util, os, platform, subprocess, timeit

import torch
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The sums over rows
# ------------------
# With :math:`\hat{x}` a row normalized by its mean and ``rstd`` :math:`r` (saved by the forward) and
# :math:`g = dy \odot w`,
#
# .. math::
#
#    dx = r \left( g - \frac{1}{N}\sum_j g_j - \hat{x} \, \frac{1}{N}\sum_j g_j \hat{x}_j \right),
#    \qquad dw = \sum_{\text{rows}} dy \odot \hat{x}, \qquad db = \sum_{\text{rows}} dy .
#
# :math:`dx` needs only its own row. :math:`dw` and :math:`db` need every row: each program sums the
# rows it handles, and the programs' sums must then be added. A perfect kernel moves :math:`x` and
# :math:`dy` in and :math:`dx` out, :math:`3MN` elements; whatever the sum across programs costs on top
# is its price. Here the forward's statistics come from PyTorch, in fp32, as a forward saves them.

def row_statistics(x2d, eps=1e-5):
    """The mean and rstd of each row, in fp32, as the forward saves them for its backward."""
    var, mean = torch.var_mean(x2d.double(), dim=1, correction=0)  # float64: no fp32 overflow past |x| ~ 1e19
    return mean.float(), torch.rsqrt(var + eps).float()

# %%
# Design 1: a spin lock per group of rows (the classic)
# -----------------------------------------------------
# One program per row writes :math:`dx`, then adds its :math:`dy \odot \hat{x}` and :math:`dy` into
# buffer :math:`i \bmod G` of ``GROUP_SIZE_M`` buffers of width :math:`N`, holding that buffer's lock
# for the read-add-write; a second kernel sums the buffers. The lock is a word in memory: a program
# takes it when ``atomic_cas`` turns its 0 into 1, and gives it back with ``atomic_xchg``. Two details:
#
# * **The race.** One thread of the program takes and releases the lock, but all its threads write the
#   buffer. Released as soon as the stores are *issued*, the lock can pass to the next program before
#   some warps of this one have written; the next program reads old values there and a row is lost.
#   The fix is a barrier before the release (:func:`triton.language.debug_barrier`,
#   ``__syncthreads()`` in CUDA): every warp's stores come first, and the release's memory order makes
#   them visible GPU-wide. The buffer is read past L1 (``.cg``), which may hold an older copy.
# * **The precision.** The official tutorial keeps the buffers in the input's dtype: in bf16 each
#   addition rounds to 8 bits of mantissa, :math:`M/G` times. Here they are fp32.
#
# Even fixed, programs queue on the locks, and rows reach a buffer in the order programs win its lock:
# the fp32 additions change order on every run, and so do the last bits of :math:`dw` and :math:`db`.

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

def _classic_config(n_cols):
    """Design 1 as in Triton's tutorial: (GROUP_SIZE_M, num_warps), fewer locks for wider rows."""
    groups = 256 if n_cols <= 1024 else 128 if n_cols <= 4096 else 96 if n_cols <= 8192 else 64
    return groups, min(max(triton.next_power_of_2(n_cols) // 256, 1), 8)

# %%
# Design 2: a persistent, lock-free reduction
# -------------------------------------------
# Carried from :ref:`sphx_glr_tutorials_02_layer_norm_backward.py`, which explains it: one program an SM, its
# loads pipelined, each taking every :math:`P`-th block of rows, its :math:`dw` and :math:`db` summed
# in fp32 registers and written once into its own line of a ``[P, N]`` buffer; no lock, no atomic, no
# program waits for another, and every addition happens in an order the grid and the code fix. Both
# designs end with the same second pass over the buffers, top to bottom, in fp32.

@triton.jit
def layer_norm_bwd_kernel(x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
                          n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, STAGES: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)  # loaded once, for every row the program takes
    dw_acc, db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32), tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok, rows = rows < n_rows, rows.to(tl.int64)
        ok = row_ok[:, None] & col_ok[None, :]  # rows past the end load as zeros: dy = 0 adds nothing to dw, db
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        mean, rstd = tl.load(mean_ptr + rows, mask=row_ok, other=0.0), tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        c1, c2 = tl.sum(x_hat * g, axis=1) / n_cols, tl.sum(g, axis=1) / n_cols
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx, mask=ok)
        dw_acc += dy * x_hat
        db_acc += dy
    offs = pid.to(tl.int64) * n_cols + cols  # every program writes its whole line, zeros included: no clearing
    tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
    tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)

# The core page's launch parameters for rows that fit in one program (this page's sweep stops there).
PROPS = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None
NUM_SMS = PROPS.multi_processor_count if ON_GPU else 4  # any will do on a CPU
SMEM_PER_BLOCK = PROPS.shared_memory_per_block_optin if ON_GPU else 232448
SMEM_PER_SM = PROPS.shared_memory_per_multiprocessor if ON_GPU else 233472
# Little's law: the bytes an SM keeps in flight, bandwidth (2 x memory clock x bus width) x 1 us / SMs (0: unknown)
IN_FLIGHT = 2 * getattr(PROPS, "memory_clock_rate", 0) * 1e3 * getattr(PROPS, "memory_bus_width", 0) / 8e6 / NUM_SMS
MAX_BWD_FUSED_N = 8192  # x, dy and two fp32 accumulators of a block fit one program's registers
# The N design 2 is for, where the site's landing page recommends it: none here. It is the core page's backward,
# which the landing page names at those N; design 1 is the classic design it is measured against.
RANGE = {}

def _bwd_config(n_rows, n_cols, element_size, programs=None, stages=None):
    """(meta, lines): a line of partials a program, ``programs`` lines at most; ``stages`` replaces STAGES."""
    # blocks of 8 KB of x (a row, where one is longer), 32 fp32 values a thread (more would spill); a stage holds a
    # block of x and of dy, within SMEM_PER_BLOCK (16-bit tiles count 4 bytes a value; 16 KB spare): up to 4 under
    # 96 KB, else 3 where they fit, else 1 (2 stages ran slower than 1 at every N measured)
    block_m = max(1, 8192 // element_size // (block_n := triton.next_power_of_2(n_cols)))
    tile = 2 * block_m * block_n
    fit = min(98304 // (tile * element_size), room := (SMEM_PER_BLOCK - 16384) // (tile * max(element_size, 4)))
    # where one program's 4 stages hold less than 2 latencies' bytes, two programs of 3 stages share the SM: one
    # loads while the other reduces and stores
    two = fit >= 6 and 4 * tile * element_size < 2 * IN_FLIGHT and 6 * tile * max(element_size, 4) + 32768 < SMEM_PER_SM
    meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=min(32, max(4, block_m * block_n // 1024)),
                STAGES=stages or (3 if two else min(4, fit) if fit >= 3 else 3 if room >= 3 else 1))  # 4 of 16 KB tiles
    n_blocks = triton.cdiv(n_rows, block_m)
    lines = max(1, min(NUM_SMS * (1 + two) if programs is None else programs, n_blocks))
    return meta, triton.cdiv(n_blocks, triton.cdiv(n_blocks, lines))  # blocks spread evenly: no line left idle

def sum_partials(partials, dwdb):
    """dwdb = partials.sum(1): the lines of dw ([0]) and of db ([1]) in one launch, in fp32, in the fixed order torch
    adds a column (the core page's second pass)."""
    torch.sum(partials, 1, out=dwdb)


# %%
# The two launchers, on 2-D tensors whose rows have unit stride: ``dx2d`` and ``dwdb`` (*dw*, *db*: ``[2, N]``,
# fp32) are written.

def backward_classic(x2d, dy2d, dx2d, weight, mean, rstd, dwdb):
    """Design 1: one program per row, dw and db added under GROUP_SIZE_M spin locks into fp32 buffers."""
    n_rows, n_cols = x2d.shape
    if triton.next_power_of_2(n_cols) * x2d.element_size() > 65536:
        raise ValueError(f"classic layer-norm backward: a row of {n_cols} {x2d.dtype} elements exceeds its "
                         "limit of 64 KB per row (it keeps a whole row in registers)")
    groups, num_warps = _classic_config(n_cols)
    buffers = torch.zeros((2, groups, n_cols), device=x2d.device, dtype=torch.float32)
    locks = torch.zeros(groups, device=x2d.device, dtype=torch.int32)
    layer_norm_bwd_classic_kernel[(n_rows,)](
        x2d, dy2d, dx2d, weight, mean, rstd, buffers[0], buffers[1], locks, n_cols,
        x2d.stride(0), dy2d.stride(0), dx2d.stride(0), GROUP_SIZE_M=groups, HAS_W=True,
        BLOCK_N=triton.next_power_of_2(n_cols), num_warps=num_warps)
    sum_partials(buffers, dwdb)

def backward_persistent(x2d, dy2d, dx2d, weight, mean, rstd, dwdb, programs=None):
    """Design 2, as the core page launches it for rows that fit in one program."""
    n_rows, n_cols = x2d.shape
    if n_cols > MAX_BWD_FUSED_N:
        raise ValueError(f"rows of {n_cols} columns take deep dive 23's kernels, not carried here")
    meta, lines = _bwd_config(n_rows, n_cols, x2d.element_size(), programs)
    # one line per program, every line written: nothing needs clearing
    partials = torch.empty((2, lines, n_cols), device=x2d.device, dtype=torch.float32)
    layer_norm_bwd_kernel[(lines,)](x2d, dy2d, dx2d, weight, mean, rstd, partials[0], partials[1], n_rows, n_cols,
                                    x2d.stride(0), dy2d.stride(0), dx2d.stride(0), **meta)
    sum_partials(partials, dwdb)

DESIGNS = {"1: spin locks": backward_classic, "2: persistent": backward_persistent}

# %%
# Correctness
# -----------
# Both designs against float64 autograd of the textbook formula, on the same rounded inputs whose rows
# have a mean far from zero: :math:`\lVert out - ref \rVert / \lVert ref \rVert`.

def check(shape, dtype):
    x = (torch.randn(shape, device=DEVICE) * 3 + 10).to(dtype)
    w, dy = torch.randn(shape[1], device=DEVICE).to(dtype), torch.randn(shape, device=DEVICE, dtype=dtype)
    x64, w64 = x.double().requires_grad_(True), w.double().requires_grad_(True)
    b64 = torch.zeros_like(w64, requires_grad=True)
    y64 = torch.nn.functional.layer_norm(x64, shape[1:], w64, b64)
    refs = torch.autograd.grad(y64, (x64, w64, b64), dy.double())
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for design, backward in DESIGNS.items():
        dx, dwdb = torch.empty_like(x), torch.empty(2, shape[1], device=DEVICE)
        backward(x, dy, dx, w, *row_statistics(x), dwdb)
        outs = dx, *dwdb
        for q, out, ref in zip(("dx", "dw", "db"), outs, refs):
            row[f"{design[:1]}: {q}"] = ((out.double() - ref).norm() / ref.norm()).item()
    return row

torch.manual_seed(0)
errors = pd.DataFrame([check(s, d) for d in (torch.float32, torch.bfloat16)
                       for s in ([(3000, 257), (2048, 1024), (512, 4096)] if ON_GPU else [(33, 257), (9, 1000)])])
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # a few roundings (the interpreter truncates to bf16)
assert (errors.iloc[:, 2:].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Same inputs, same answer?
# -------------------------
# Each design, several backward passes on the same inputs (on a GPU ten, at :math:`N = 4096` on the
# benchmark's :math:`2^{26}` elements): how many runs gave bits unlike the first run's, and the largest
# difference between two runs' :math:`dw`, relative to the largest :math:`|dw|`.

DETERMINISM_SHAPE, RUNS = ((2**26 // 4096, 4096), 10) if ON_GPU else ((16, 128), 3)
rows = []
for dtype in (torch.float32, torch.bfloat16):
    x = torch.randn(DETERMINISM_SHAPE, device=DEVICE, dtype=dtype)
    dy, w, stats = torch.randn_like(x), torch.randn(x.shape[1], device=DEVICE, dtype=dtype), row_statistics(x)
    for design, backward in DESIGNS.items():
        runs = [(torch.empty_like(x), torch.empty(2, x.shape[1], device=DEVICE)) for _ in range(RUNS)]
        for dx, dwdb in runs:
            backward(x, dy, dx, w, *stats, dwdb)
        runs = [(dx, *dwdb) for dx, dwdb in runs]
        dws = torch.stack([run[1].float() for run in runs])
        rows.append({"design": design, "dtype": str(dtype)[6:], "runs": RUNS} | {
            f"unlike run 1: {g}": sum(not torch.equal(run[i].view(torch.uint8), runs[0][i].view(torch.uint8))
                                      for run in runs) for i, g in enumerate(("dx", "dw", "db"))} | {
            "max dw spread / max |dw|": ((dws.max(0).values - dws.min(0).values).max() / dws.abs().max()).item()})
    del x, dy, runs, dws
determinism = pd.DataFrame(rows)
for design, part in determinism.groupby("design", sort=False):
    print(f"design {design}: {part.filter(like='unlike').max().max()} of {RUNS} runs differ from the first in "
          f"some gradient ({', '.join(part.dtype)}).")
if not ON_GPU:
    print("The interpreter runs programs one after another, so even the locks are taken in the same order "
          "every time: only a GPU shows design 1's variation.")
determinism.style.format({"max dw spread / max |dw|": "{:.1e}"}).hide(axis="index")

# %%
# Benchmark
# ---------
# :math:`M N = 2^{26}` elements on a GPU (far past the 50 MB L2), the backward only, on rows that fit
# in one program. The two designs run from their launchers on saved statistics; the peers run
# ``torch.autograd.grad`` of :math:`x, w, b` (every kernel they launch for them). Timed by
# :func:`triton.testing.do_bench` (median, L2 flushed) on CUDA-graph replays; the *speed of light* is a
# copy of :math:`x`, timed without a graph. GB/s counts :math:`x, dy` read and :math:`dx` written. The peers
# are PyTorch, ``torch.compile``, Liger-Kernel and quack (CuTe-DSL kernels, compute capability 9.0 and newer).
# quack's layer norm is a pair of functions, ``layernorm_fwd`` and ``layernorm_bwd``, that take the weight and
# bias in fp32: a small autograd function joins them, given fp32 copies made once per point, outside the timing.

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."

def peer_module(peer, module, min_major=0):
    """The peer's module, or None, saying why it is not measured here."""
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")

inductor = peer_module("torch.compile", "torch")  # on the CPU, Inductor would time a C++ compiler here, not a GPU
liger = peer_module("Liger-Kernel", "liger_kernel.ops.layer_norm")
quack = peer_module("quack", "quack.rmsnorm", min_major=9)  # Dao-AILab's CuTe-DSL kernels: layernorm_fwd, _bwd

class QuackLayerNorm(torch.autograd.Function):
    """quack's layer-norm pair as one autograd function; w32, b32: fp32 copies of w, b, made once by the caller."""
    @staticmethod
    def forward(ctx, x, w, b, w32, b32, eps):
        y, rstd, mean = quack.layernorm_fwd(x, w32, b32, eps, return_rstd=True, return_mean=True)
        ctx.save_for_backward(x, w32, rstd, mean)
        ctx.dtypes = w.dtype, b.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w32, rstd, mean = ctx.saved_tensors
        dx, dw, db = quack.layernorm_bwd(x, w32, dy.contiguous(), rstd, mean, True)  # dw, db in fp32
        return dx, dw.to(ctx.dtypes[0]), db.to(ctx.dtypes[1]), None, None, None

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**14
SWEEP_N = [512, 1024, 2048, 4096] if ON_GPU else [256, 2048]
PEERS = ["torch", "torch.compile", "Liger", "quack"]
if ON_GPU:  # autograd runs a backward on its forward's stream, and a graph cannot capture the default one
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of fn(): do_bench on CUDA-graph replays on a GPU, a wall clock on the CPU."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    timed = fn
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        timed = captured.replay
    return triton.testing.do_bench(timed, warmup=1, rep=5, return_mode="median")

peers = {"torch": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)}
if inductor:
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    torch._functorch.config.donated_buffer = False  # its backward is timed again and again (retain_graph=True)
    peers["torch.compile"] = torch.compile(peers["torch"], dynamic=False)
if liger:
    peers["Liger"] = lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)
if quack:  # w32, b32: the fp32 copies of w, b that the loop below makes at each point
    peers["quack"] = lambda x, w, b: QuackLayerNorm.apply(x, w, b, w32, b32, 1e-5)

records, missing = [], {}
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in SWEEP_N:
        x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=dtype)
        w, b = (torch.randn(n_cols, device=DEVICE, dtype=dtype) for _ in range(2))
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        stats, dx, dwdb = row_statistics(x), torch.empty_like(x), torch.empty(2, n_cols, device=DEVICE)
        times = {}
        for name, backward in DESIGNS.items():
            times[name] = bench(lambda: backward(x, dy, dx, w, *stats, dwdb))
        inputs = [t.requires_grad_(True) for t in (x, w, b)]
        w32, b32 = w.detach().float(), b.detach().float()  # for quack, outside the timing
        for name, fn in peers.items():
            try:
                y = fn(*inputs)
                times[name] = bench(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
            except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
                why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                missing.setdefault((name, why), []).append(f"{str(dtype)[6:]} N = {n_cols}")
                times[name] = float("nan")
            y = None
        for name, ms in times.items():
            records.append({"dtype": str(dtype)[6:], "N": n_cols, "provider": name, "GB/s": 3 * nbytes / ms * 1e-6,
                            "speed of light GB/s": light, "% of speed of light": 100 * 3 * nbytes / ms * 1e-6 / light})
        del x, w, b, dy, out, dx, inputs, w32, b32
for (name, why), points in missing.items():
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)
table = results.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", sort=False)
table = table.reindex(columns=[*DESIGNS, *peers])
table.insert(0, "speed of light", results.groupby(["dtype", "N"], sort=False)["speed of light GB/s"].first())
table["design 2 / design 1"] = table["2: persistent"] / table["1: spin locks"]
table["design 2, % of light"] = 100 * table["2: persistent"] / table["speed of light"]
table["design 2 / best peer"] = table["2: persistent"] / table[[p for p in PEERS if p in table]].max(axis=1)
table.style.format({c: "{:.0f}" for c in table.columns} | {"design 2, % of light": "{:.1f}%",
                   "design 2 / design 1": "{:.2f}", "design 2 / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, facecolor="white")
    styles = {"1: spin locks": (0, (1, 1)), "2: persistent": "-", "torch": "--", "torch.compile": "-.",
              "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1))}
    for ax, (dtype, part) in zip(axes, results.groupby("dtype", sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of speed of light"], linestyle=styles[name], marker="o", markersize=3,
                    linewidth=2.5 if name == "2: persistent" else 1.5, label=name)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.set(title=f"backward, {dtype}", xlabel="row length N (elements)",
               ylabel="% of the copy's GB/s" if ax is axes[0] else None)
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Layer norm backward, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

worst = determinism.set_index(["design", "dtype"]).filter(like="unlike").max(axis=1)
if ON_GPU:
    for dtype, part in table.groupby(level="dtype", sort=False):
        ratio, pct = part["design 2 / design 1"].droplevel(0), part["design 2, % of light"].droplevel(0)
        print(f"{dtype}: design 2 is {ratio.min():.3g}x (N = {ratio.idxmin()}) to {ratio.max():.3g}x "
              f"(N = {ratio.idxmax()}) as fast as design 1, and runs at {pct.min():.3g}% to {pct.max():.3g}% "
              "of the copy.")
    print(f"Design 1 gave bits unlike its first run in up to {worst.loc['1: spin locks'].max()} of {RUNS} runs; "
          f"design 2 in {worst.loc['2: persistent'].max()}.")
else:
    print(NO_SPEED)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    summary = table[["design 2, % of light", "design 2 / best peer"]]
    summary.set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="backward", recommended=[int(n in RANGE.get(("backward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "24_layer_norm_backward_locks.csv"))

# %%
# Going further
# -------------
# * **Wider rows.** Design 1 keeps a row in one program's registers (64 KB at most); so does design 2
#   up to ``MAX_BWD_FUSED_N``. Past that :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py`
#   streams rows in chunks, or splits each row over programs
#   that exchange their row sums, still lock-free and deterministic.
# * **Exercises.** Delete the ``debug_barrier`` in design 1 and compare its :math:`dw` with float64 on a
#   GPU over many runs: how often is a row lost? Change ``GROUP_SIZE_M``: how do speed and spread move?
#   Make the buffers bf16, as in the official tutorial, and compare the error table.
#
# References: Triton's layer-norm tutorial (design 1 with fp16 buffers); Apex's fused layer norm;
# Liger-Kernel's layer norm (per-program fp32 partials, as design 2); quack's (per-CTA fp32 partials, likewise).
#
# Where this page was made
# ------------------------

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    if ON_GPU:
        props = torch.cuda.get_device_properties(DEVICE)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            driver = "unknown (no nvidia-smi)"
        device = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        runtime = f"driver {driver}, CUDA {torch.version.cuda}"
    else:
        device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU"
        runtime = "none: Triton's interpreter (TRITON_INTERPRET=1)"
    card = {"device": device, "driver / CUDA": runtime, "torch": torch.__version__,
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    html = f"<details><summary>Full environment card</summary>{table}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

environment_card()
