"""
Layer norm, the widest 16-bit rows: stage the row in shared memory (Gluon)
==========================================================================

The core page's fused forward (:ref:`sphx_glr_tutorials_02_layer_norm.py`) holds a row in registers.
A bf16 row of :math:`N = 32768` is 64 KB as loaded and 128 KB as fp32 values, half of an SM's
registers: the program holding it is alone on its SM, and alone it loads the row, reduces it twice and
stores it, one phase after the other. **What you will learn**: how to keep such a
row in *shared memory* instead, three rows per SM, so that while one program reduces the others load
or store; how to write that kernel in **Gluon**, Triton's lower-level language, with explicit layouts
and asynchronous copies; and where it is chosen (``_staged_config``). Gluon kernels compile only for a
GPU: without one this page still runs, with the core kernel, and says that nothing was staged.
"""

import datetime
import functools
import importlib.util
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
from triton.experimental import gluon  # Triton's lower-level language
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The core kernel we start from
# -----------------------------
# The forward reads :math:`x` and writes :math:`y`, :math:`2MN` elements: the bytes of a copy, the speed
# of light. Carried from the core page, letter for letter: its fused kernel (``BLOCK_M`` whole rows per
# program, the statistics from registers, :math:`x` read once), its config (tiles of at least
# ``min_tile_bytes()``, from the device's bandwidth and ``LATENCY``) and its launch. The staged kernel below centres
# each row on its first value, as this kernel does.

@triton.jit
def layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                          EVEN: tl.constexpr, EVICT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < (BLOCK_N if EVEN else n_cols)  # EVEN (N is BLOCK_N): all true, the masks fold away
    k: tl.constexpr = 2.0**-16 / BLOCK_N
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # a program a block of rows
    row_ok, rows = rows < n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    x0 = tl.load(x_ptr + rows * x_row_stride).to(tl.float32) * k  # each row's first value (an L2 hit), times k
    md = tl.sum(tl.where(col_ok[None, :], x * k - x0[:, None], 0.0), axis=1) / n_cols
    xc = tl.where(col_ok[None, :], x * k - x0[:, None] - md[:, None], 0.0)
    q = tl.sum(xc * xc, axis=1) / n_cols  # the variance times k**2; past fp32's range, NaN (as torch's)
    rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))
    mean, rstd = (x0 + md) / k, tl.where(q == 0, 1.0 / tl.sqrt(eps), rstd)  # q == 0: a constant row, as torch
    # w and b loaded late: fewer registers held through the reductions
    y = xc * (1 / k) * rstd[:, None] * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y, mask=row_ok[:, None] & col_ok[None, :])
    tl.store(mean_ptr + rows[:, None] + cols[None, :], mean[:, None], mask=row_ok[:, None] & (cols == 0)[None, :])
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], rstd[:, None], mask=row_ok[:, None] & (cols == 0)[None, :])
MAX_FUSED_N = 32768  # the longest row held in registers: 32 fp32 a thread of 32 warps
def _fwd_config(n_rows, n_cols, element_size):
    block_m = max(1, min_tile_bytes() // ((block_n := triton.next_power_of_2(n_cols)) * element_size))
    big = (row := block_n * element_size) >= 65536  # rows of 64 KB or more: no L2 hint; of 64 KB, 64 values a thread
    warps = min(32, max(2, block_m * block_n // (32 * (64 if row == 65536 else 32))))  # a thread 32 values in fp32
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN=n_cols == block_n, EVICT="" if big else "evict_last",
                num_warps=warps), triton.cdiv(n_rows, block_m)
LATENCY = 1e-6  # seconds: a load from DRAM under load, about a microsecond

@functools.cache  # reads the device once: its memory clock costs the host more than a launch
def min_tile_bytes():
    props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return 4096
    in_flight = bandwidth * LATENCY / props.multi_processor_count  # bytes an SM keeps in flight
    programs = props.max_threads_per_multi_processor // (4 * 32)  # programs of 4 warps an SM holds
    return max(2048, triton.next_power_of_2(int(in_flight / programs)))  # 2 KB: a 16-byte load for each thread


def core_forward(x2d, y2d, weight, bias, mean, rstd, eps):
    """The core page's launch (its layer_norm_rows_forward) up to MAX_FUSED_N columns; past them, where the core
    page streams rows with deep dive 21's chunked kernel, this page (which times no such rows) runs the fused one."""
    meta, grid = _fwd_config(*x2d.shape, x2d.element_size())
    layer_norm_fwd_kernel[(grid,)](x2d, y2d, x2d.new_ones(x2d.shape[1]) if weight is None else weight,
                                   x2d.new_zeros(x2d.shape[1]) if bias is None else bias, mean, rstd, *x2d.shape,
                                   x2d.stride(0), y2d.stride(0), eps, **meta)
    return "fused (core)"


# %%
# Stage the row in shared memory
# ------------------------------
# Shared memory holds the row in its own dtype, and a Hopper SM's 228 KB hold three 64 KB rows. The
# kernel below gives each program one row and few registers: it copies the row into shared memory with
# asynchronous copies (``cp.async``, which do not go through registers), then reads it back in
# ``CHUNK``-column pieces, three times: the mean (of the deviations from the first value, as the core
# kernel's statistics: a constant row stays exactly 0), the squared deviations (where their squares pass
# fp32's range, the largest :math:`|x|` scales the row by a power of two and both run again), and :math:`y`
# (with :math:`w` and :math:`b` loaded piece by piece, late as in the core kernel). Three programs share an SM,
# and while one reduces, the others load or store; :math:`x` is still read from DRAM once:
#
# .. math::
#
#    \mu = \frac{1}{N} \sum_i x_i, \qquad r = \left(\frac{1}{N} \sum_i (x_i - \mu)^2 + \epsilon\right)^{-1/2},
#    \qquad y_i = (x_i - \mu) \, r \, w_i + b_i .
#
# ``triton.language`` decides by itself what goes through shared memory, so this kernel is written in
# **Gluon** (``triton.experimental.gluon``): every tensor has an explicit layout (which thread holds
# which elements), and the kernel allocates shared memory and issues the copies itself. Every piece is
# its own *commit group*, so the first pass starts on piece 0 while the later ones are still on their
# way; each thread reads back, with the same layout, exactly the elements its own copies wrote, so the
# waits need no barrier between threads. A copy moves 16 aligned bytes, with the mask at the row's end
# covering whole copies: rows whose length or stride is not a multiple of 16 elements, or whose address
# is not 16-byte aligned, keep the core kernel, as do GPUs before Ampere (no ``cp.async``) and programs
# that cannot have 64 KB of shared memory. The softmax pages stage their widest rows the same way.

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
    x0 = gl.load(x_row).to(gl.float32)  # as the core kernel's statistics: the deviations from the first value
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)  # chunk c has landed; later ones may still be in flight
        x = x_smem.index(c).load(layout).to(gl.float32)
        acc += gl.where(cols < n_cols - c * CHUNK, x - x0, 0.0)
    mean = x0 + gl.sum(acc, axis=0) / n_cols
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(CHUNKS):
        x = x_smem.index(c).load(layout).to(gl.float32)
        xc = gl.where(cols < n_cols - c * CHUNK, x - mean, 0.0)
        acc += xc * xc
    var = gl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / gl.sqrt(var + eps)
    if gl.where(var < 2.0**100, 0, 1) > 0:  # squares near fp32's limit (or inf, nan): again, scaled
        big = gl.zeros([CHUNK], gl.float32, layout)
        for k in range(CHUNKS):
            x = x_smem.index(k).load(layout).to(gl.float32)
            big = gl.maximum(big, gl.where(cols < n_cols - k * CHUNK, gl.abs(x), 0.0))
        m = gl.max(big, axis=0)
        e = m.to(gl.int32, bitcast=True) >> 23
        sc = gl.where(m > 2.0**40, ((274 - e) << 23).to(gl.float32, bitcast=True), 1.0)
        inv = gl.where(m > 2.0**40, ((e - 20) << 23).to(gl.float32, bitcast=True), 1.0)
        acc = gl.zeros([CHUNK], gl.float32, layout)
        for k in range(CHUNKS):
            x = x_smem.index(k).load(layout).to(gl.float32)
            acc += gl.where(cols < n_cols - k * CHUNK, x * sc - x0 * sc, 0.0)
        mean = x0 * sc + gl.sum(acc, axis=0) / n_cols
        acc = gl.zeros([CHUNK], gl.float32, layout)
        for k in range(CHUNKS):
            xc = gl.where(cols < n_cols - k * CHUNK, x_smem.index(k).load(layout).to(gl.float32) * sc - mean, 0.0)
            acc += xc * xc
        var, mean = gl.sum(acc, axis=0) / n_cols, mean * inv
        rstd = gl.where(var == 0, 1.0 / gl.sqrt(eps), sc / gl.sqrt(var + eps * sc * sc))
    y_row = y_ptr + row * y_row_stride
    for c in range(CHUNKS):
        col_ok = cols < n_cols - c * CHUNK
        y = (x_smem.index(c).load(layout).to(gl.float32) * 0.5 - mean * 0.5) * (rstd * 2)  # halves: no overflow
        if HAS_W:
            y = y * gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        if HAS_B:
            y = y + gl.load(b_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)
    gl.store(mean_ptr + row, mean)
    gl.store(rstd_ptr + row, rstd)


# %%
# Where it runs, and its launch parameters
# ----------------------------------------
# ``_staged_config`` is the one place to change: which rows are staged, the piece size, the warps and
# how many programs share an SM (which caps the registers per thread, ``maxnreg``).


def _staged_config(element_size):
    """The staged forward's table entry for this element size, or None (fp32: not staged).

    16-bit rows of MIN_N to MAX_N columns (below 16 K the core kernel keeps up; past 32 K a row is over
    64 KB and one program per SM again), copied in pieces of CHUNK_N columns, 16 warps (measured fastest
    on Hopper; the design record, dev/DESIGN.md in the repository), PER_SM = 3 programs per SM (three
    64 KB rows in 228 KB)."""
    return {2: dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=16, PER_SM=3)}.get(element_size)


# The N this kernel is for, where the site's landing page recommends it: the rows it stages (from _staged_config)
RANGE = {("forward", "bfloat16"): range(_staged_config(2)["MIN_N"], _staged_config(2)["MAX_N"] + 1)}


def staged_meta(n_cols, element_size, cfg, regs_per_sm):
    """The staged forward's meta-parameters for rows of n_cols elements under the entry cfg (HAS_W and
    HAS_B aside): registers capped so that ``PER_SM`` programs fit in regs_per_sm."""
    vec = 16 // element_size  # elements per 16-byte copy
    return dict(CHUNKS=triton.cdiv(n_cols, cfg["CHUNK_N"]), VEC=vec, EVEN=n_cols % cfg["CHUNK_N"] == 0,
                REP=cfg["CHUNK_N"] // (vec * 32 * cfg["num_warps"]), num_warps=cfg["num_warps"],
                maxnreg=min(255, regs_per_sm // (32 * cfg["num_warps"] * cfg["PER_SM"]) // 8 * 8))


def staged_plan(x2d, flags, cfg=None):
    """Meta-parameters of the staged forward for the rows of x2d, or None where it is not used: no GPU,
    no entry (``cfg`` replaces ``_staged_config``'s; ``{}``: none), a row length outside the entry's range, rows whose
    length or stride is not a multiple of 16 elements or not 16-byte aligned, a GPU without ``cp.async``
    (before Ampere) or without the shared memory for a row."""
    cfg = _staged_config(x2d.element_size()) if cfg is None else cfg
    if not ON_GPU or not cfg or not cfg["MIN_N"] <= x2d.shape[1] <= cfg["MAX_N"]:
        return None
    if x2d.shape[1] % 16 or x2d.stride(0) % 16 or x2d.data_ptr() % 16:  # 16-byte runs, masked whole
        return None
    props = torch.cuda.get_device_properties(DEVICE)
    meta = staged_meta(x2d.shape[1], x2d.element_size(), cfg, getattr(props, "regs_per_multiprocessor", 65536))
    row_bytes = meta["CHUNKS"] * cfg["CHUNK_N"] * x2d.element_size()
    # the staged row must fit in one program's shared memory (plus a little for the reductions)
    if torch.version.hip or props.major < 8 or getattr(props, "shared_memory_per_block_optin", 49152) < row_bytes + 1024:
        return None
    return dict(flags, **meta)


def layer_norm_staged_forward(x2d, y2d, weight, bias, mean, rstd, eps, cfg=None):
    """y2d = layer_norm(x2d) along dim 1, mean and rstd (fp32) too: staged where ``staged_plan`` says,
    the core kernel elsewhere. Returns which ran."""
    meta = staged_plan(x2d, dict(HAS_W=weight is not None, HAS_B=bias is not None), cfg)
    if meta is None or x2d.shape[0] == 0:
        return core_forward(x2d, y2d, weight, bias, mean, rstd, eps)
    layer_norm_fwd_staged_kernel[(x2d.shape[0],)](  # one program per row
        x2d, y2d, x2d if weight is None else weight, x2d if bias is None else bias, mean, rstd,
        x2d.shape[1], x2d.stride(0), y2d.stride(0), eps, **meta)
    return "staged (Gluon)"


def layer_norm_forward(x, weight=None, bias=None, eps=1e-5, cfg=None):
    """F.layer_norm(x, x.shape[-1:], weight, bias, eps), forward only, float32 / float16 / bfloat16."""
    x2d = x.reshape(-1, x.shape[-1])
    x2d = x2d.contiguous() if x2d.shape[1] > 1 and x2d.stride(1) != 1 else x2d
    y2d = torch.empty(x2d.shape, device=x.device, dtype=x.dtype)
    mean, rstd = (torch.empty(x2d.shape[0], device=x.device, dtype=torch.float32) for _ in range(2))
    if y2d.numel():
        w, b = (None if t is None else t.contiguous() for t in (weight, bias))
        layer_norm_staged_forward(x2d, y2d, w, b, mean, rstd, eps, cfg)
    return y2d.view(x.shape)


# %%
# Correctness
# -----------
# :math:`\lVert y - y_{64} \rVert / \lVert y_{64} \rVert` against float64 on the same rounded inputs
# (rows with a mean far from zero): whole pieces, a masked last piece, a row stride past the row, and a
# length that is not a multiple of 16 (the core kernel takes it), next to PyTorch's error.

torch.manual_seed(0)
CHECK = [(67, 32768, 32768), (67, 20000, 20000), (33, 32752, 32784), (9, 16385, 16400)] if ON_GPU else \
    [(2, 20000, 20000), (1, 16385, 16400)]  # (rows, N, row stride)
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding


def check(rows, n, stride, dtype):
    x = (torch.randn(rows, stride, device=DEVICE) * 3 + 10).to(dtype)[:, :n]
    w, b = (torch.randn(n, device=DEVICE).to(dtype) for _ in range(2))
    y64 = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
    y = torch.full_like(x, float("nan"))
    kernel = layer_norm_staged_forward(x, y, w, b, *torch.empty(2, rows, device=DEVICE), 1e-5)
    err = lambda t: ((t.double() - y64).norm() / y64.norm()).item()
    return {"shape": f"{rows} x {n} (stride {stride})", "dtype": str(dtype)[6:], "kernel": kernel,
            "ours y": err(y), "torch y": err(torch.nn.functional.layer_norm(x, (n,), w, b))}


errors = pd.DataFrame([check(*c, d) for d in (torch.bfloat16, torch.float16) for c in CHECK])
assert (errors["ours y"] <= errors.dtype.map(TOLERANCE)).all(), "errors above tolerance:\n" + errors.to_string()
errors.style.format({"ours y": "{:.1e}", "torch y": "{:.1e}"}).hide(axis="index")

# %%
# Does staging pay?
# -----------------
# bf16 rows of 16 K to 32 K columns, :math:`M N = 2^{26}` on a GPU (far past the 50 MB L2): the staged
# kernel against the core's fused kernel and the peers, each timed by :func:`triton.testing.do_bench`
# (median, L2 flushed) on replays of a CUDA graph of the call, next to a copy of the same tensor (the
# speed of light, timed without a graph). Rows of 16384 columns are below the staged range (forced
# here, for comparison; the launcher leaves them to the kernel that reads :math:`x` twice, in
# :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py`), and 24576 is not a power of two.
# The peers: PyTorch, ``torch.compile``, Liger-Kernel and quack (CuTe-DSL kernels, compute capability 9.0
# and newer); "-": a peer's limit. quack's layer norm is a pair of functions, ``layernorm_fwd`` and
# ``layernorm_bwd``, that take the weight and bias in fp32: a small autograd function joins them, given fp32
# copies made once per point, outside the timing.

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


inductor = peer_module("torch.compile", "torch")  # on the CPU, Inductor would time a C++ compiler, not a GPU
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

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**15
WIDTHS = [16384, 24576, 32768] if ON_GPU else [16384]
FORCE = dict(_staged_config(2), MIN_N=1)  # the staged kernel at 16384 too
if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())


def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    fn()  # compile and warm up outside the timing
    if ON_GPU:
        torch.cuda.synchronize()
        timed = fn
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
                fn()
            timed = captured.replay
        return triton.testing.do_bench(timed, warmup=1, rep=5, return_mode="median")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def providers():
    """name -> fn(x, w, b); peers that cannot run here are left out, and the staged kernel without a GPU."""
    found = {"torch": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)}
    if inductor:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):  # one compilation per shape and dtype
                setattr(torch._dynamo.config, knob, 1024)
        found["torch.compile"] = torch.compile(
            lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b), dynamic=False)
    if liger:
        found["Liger"] = lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)
    if quack:  # w32, b32: the fp32 copies of w, b that the loop below makes at each point
        found["quack"] = lambda x, w, b: QuackLayerNorm.apply(x, w, b, w32, b32, 1e-5)
    found["core"] = lambda x, w, b: layer_norm_forward(x, w, b, cfg={})  # {}: no staging
    if ON_GPU:
        found["staged"] = lambda x, w, b: layer_norm_forward(x, w, b, cfg=FORCE)
    return found


records, fns, missing = [], providers(), {}
for n_cols in WIDTHS:
    x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
    w, b = torch.randn(n_cols, device=DEVICE, dtype=x.dtype), torch.randn(n_cols, device=DEVICE, dtype=x.dtype)
    w32, b32 = w.float(), b.float()  # for quack, outside the timing
    moved, out = 2 * x.numel() * x.element_size(), torch.empty_like(x)
    light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
    for name, fn in fns.items():
        try:
            gbs = moved / bench(lambda: fn(x, w, b)) * 1e-6
        except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
            if name in ("core", "staged"):
                raise
            why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
            missing.setdefault((name, why), []).append(f"N = {n_cols}")
            gbs = float("nan")
        records.append({"dtype": "bfloat16", "N": n_cols, "provider": name, "GB/s": gbs,
                        "speed of light GB/s": light, "% of light": 100 * gbs / light})
    del x, out
for (name, why), points in missing.items():  # once per peer and reason
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)
table = results.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)
table = table[[p for p in fns if p in table.columns]]
table.insert(0, "speed of light", results.groupby(["dtype", "N"])["speed of light GB/s"].first())
if "staged" not in table:  # no GPU: nothing staged, nothing measured for it
    table["staged"] = float("nan")
table["staged, % of light"] = 100 * table["staged"] / table["speed of light"]
table["core, % of light"] = 100 * table["core"] / table["speed of light"]
table["staged / core"] = table["staged"] / table["core"]
table["staged / best peer"] = table["staged"] / table[[p for p in ("torch", "torch.compile", "Liger", "quack") if p in table]].max(axis=1)
table.style.format({c: "{:.0f}" for c in table.columns} | {"staged, % of light": "{:.1f}%", "core, % of light": "{:.1f}%",
                   "staged / core": "{:.2f}", "staged / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED, "Gluon kernels do not run in the interpreter: nothing was staged here.")

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it (on a GPU):

if ON_GPU:
    fig, ax = plt.subplots(figsize=(7, 4), facecolor="white")
    styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "core": ":",
              "staged": "-"}
    for name, line in results.groupby("provider", sort=False):
        ax.plot(line.N, line["% of light"], linestyle=styles[name], marker="o", label=name,
                linewidth=2.5 if name == "staged" else 1.5)
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.set(xlabel="row length N (elements)", ylabel="% of the copy's GB/s", xticks=WIDTHS)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"Layer norm forward, bf16, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}", fontsize=9)
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

if ON_GPU:
    for (_, n_cols), row in table.iterrows():
        print(f"bf16, N = {n_cols}: staged {row['staged, % of light']:.1f}% of the copy, the core kernel "
              f"{row['core, % of light']:.1f}% ({row['staged / core']:.3g}x), the best peer "
              f"{row['staged'] / row['staged / best peer']:.0f} GB/s ({row['staged / best peer']:.3g}x).")
else:
    print(NO_SPEED)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["staged, % of light", "staged / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="forward", recommended=[int(n in RANGE.get(("forward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "22_layer_norm_staged_gluon.csv"))

# %%
# Going further
# -------------
# Past 64 KB a row leaves one program per SM again: fp32 rows of 32 K, or 16-bit rows of 64 K (the core
# page streams those in chunks). Before staging, every design tried for bf16 rows of 32 K on Hopper
# stayed a few points under the copy (loads of :math:`w`, :math:`b` moved, eviction hints, a persistent
# grid, Welford, a split row, smaller chunks, :math:`x` read twice); Nsight Compute showed one 1024-thread
# program per SM, held there by its registers. Exercise: give ``_staged_config`` an entry for fp32 rows
# of 16 K (64 KB too) and compare it with the core kernel. The wide-row deep dives:
# :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py` (forward) and
# :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py` (backward).
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
    return type("Collapsed", (), {"_repr_html_": lambda self: f"<details><summary>Full environment card</summary>{table}</details>"})()


environment_card()
