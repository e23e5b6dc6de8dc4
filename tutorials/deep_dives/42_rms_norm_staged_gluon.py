"""
RMSNorm, the widest 16-bit rows: stage the row in shared memory (Gluon)
=======================================================================

Tutorial 04's forward (:ref:`sphx_glr_tutorials_04_rms_norm.py`) keeps a whole row in registers. At
:math:`N = 32768` in bf16 that is 32 fp32 values in each of 1024 threads: one program fills an SM's
registers, so each SM works on one row at a time, and between loading it and storing it nothing else
is on its way from memory. A row whose length is not a power of two pays more: the tile is padded to
the next one. **What you will learn**: to hold the row in *shared memory* in its own
dtype instead, three rows to an SM, so that one program's reduction overlaps the others' loads and
stores; to write that kernel in **Gluon**, Triton's lower-level language, with explicit layouts and
asynchronous copies; where it is chosen (``_staged_config``). Without a GPU this page still runs (Gluon
kernels are compiled only for GPUs): the core kernel takes every row, and the page says so.
"""

import contextlib
import datetime
import functools
import importlib.util
import os
import platform
import subprocess
import timeit

import torch
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import matplotlib.pyplot as plt
import pandas as pd
import triton
import triton.language as tl
from triton.experimental import gluon  # Triton's lower-level language
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The core kernel we measure against
# ----------------------------------
# RMSNorm reads :math:`x` and writes :math:`y = r\,x \odot w` with :math:`r = 1/\sqrt{\frac{1}{N}\sum_j
# x_j^2 + \varepsilon}`: :math:`2MN` elements, a copy's bytes, the speed of light. Carried from tutorial 04
# unchanged: its fused kernel and the launch parameters it gets for rows held whole (``BLOCK_M`` rows of
# ``BLOCK_N`` columns a program, at most 128 bytes of :math:`x` a thread, 4 to 32 warps).

@triton.jit
def rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                        HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    # + 0 * n_rows: rows in n_rows' type (int32 below 2**31); offsets int64
    rows = (tl.program_id(0) + 0 * n_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # clamp: a duplicate row, never stored
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    sum_sq = tl.sum(x * x, axis=1)  # padding columns add 0
    rstd = tl.rsqrt(sum_sq / n_cols + eps)
    # run-time if: values past 1e19 overflow sum_sq; such rows sum (x / 2**80)**2
    if tl.sum((sum_sq == float("inf")).to(tl.int32), axis=0) > 0:
        x_small = x * 2.0**-80
        rstd = tl.where(sum_sq < float("inf"), rstd, 2.0**-80 * tl.rsqrt(tl.sum(x_small * x_small, axis=1) / n_cols))
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape),
             mask=row_ok[:, None] & (cols == 0)[None, :])

BYTES_PER_THREAD = 128  # tutorial 04: most of a tile one thread loads
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

def _fwd_config(n_rows, n_cols, element_size):  # (kernel, meta, grid)
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), triton.cdiv(n_rows, block_m)

def core_forward(x2d, w, y2d, rstd, eps):
    """Tutorial 04's launch of its fused forward, for the rows it holds whole (16-bit rows up to 32 K)."""
    kernel, meta, grid = _fwd_config(*x2d.shape, x2d.element_size())
    kernel[(grid,)](x2d, x2d if w is None else w, y2d, rstd, *x2d.shape, x2d.stride(0), y2d.stride(0), eps,
                    HAS_WEIGHT=w is not None, **meta)
    return "fused (core)"

# %%
# The row in shared memory
# ------------------------
# A Hopper SM has 228 KB of shared memory: three bf16 rows of 32 K (64 KB each) with room to spare. The
# staged kernel gives each program one row and few registers. It issues asynchronous copies of the whole
# row into shared memory (``cp.async``: global memory to shared memory without passing through registers),
# one *commit group* per ``CHUNK`` columns, then walks the row twice from shared memory: the sum of
# squares, chunk by chunk as each group lands, and :math:`y` with :math:`w` loaded chunk by chunk. Three
# programs share an SM, so while one sums, another's copies are in flight and a third stores; :math:`x`
# still comes from DRAM once. Each thread reads back, in the same layout, exactly what its own copies
# wrote, so waiting for its own groups needs no barrier between threads.
#
# ``triton.language`` decides by itself what goes through shared memory; **Gluon**
# (``triton.experimental.gluon``) lets the kernel say it: every tensor has an explicit *layout* (which thread
# holds which elements), and the kernel allocates shared memory and issues the copies. A copy moves 16
# aligned bytes and the mask at the row's end covers whole copies, so rows whose length or stride is not a
# multiple of 16 elements (what Triton specializes on) keep the core kernel, as do GPUs without ``cp.async``.

# cp.async from global to shared memory: ``async_copy_global_to_shared`` in Triton 3.6, ``async_load`` from 3.7
async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def rms_norm_fwd_staged_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, x_row_stride, y_row_stride, eps,
                               HAS_WEIGHT: gl.constexpr, CHUNKS: gl.constexpr, VEC: gl.constexpr,
                               REP: gl.constexpr, EVEN: gl.constexpr):
    """One program per row: copied into shared memory once, read from there twice."""
    # each thread: REP runs of VEC contiguous elements (16 bytes); 32 threads a warp, the warps side by side
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    CHUNK: gl.constexpr = VEC * 32 * gl.num_warps() * REP
    if EVEN:  # a whole number of chunks: a constant length folds every mask away
        n_cols = CHUNKS * CHUNK
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    x_row, y_row = x_ptr + row * x_row_stride, y_ptr + row * y_row_stride
    staged = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [CHUNKS, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    for c in gl.static_range(CHUNKS):  # every copy issued at once, a commit group per chunk
        async_load(staged.index(c), x_row + c * CHUNK + cols, mask=cols < n_cols - c * CHUNK)
        async_copy.commit_group()
    sum_sq = gl.zeros([CHUNK], gl.float32, layout)
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)  # chunk c has landed; later ones may still be on their way
        x = staged.index(c).load(layout).to(gl.float32)
        sum_sq += gl.where(cols < n_cols - c * CHUNK, x * x, 0.0)
    sum_sq = gl.sum(sum_sq, axis=0)
    rstd = gl.rsqrt(sum_sq / n_cols + eps)
    if sum_sq == float("inf"):  # values past 1e19, rare: the row again, scaled by 2**-80 (as tutorial 04's kernels)
        sum_small = gl.zeros([CHUNK], gl.float32, layout)
        for k in range(CHUNKS):
            x_small = staged.index(k).load(layout).to(gl.float32) * 2.0**-80
            sum_small += gl.where(cols < n_cols - k * CHUNK, x_small * x_small, 0.0)
        rstd = 2.0**-80 * gl.rsqrt(gl.sum(sum_small, axis=0) / n_cols)
    for c in range(CHUNKS):
        col_ok = cols < n_cols - c * CHUNK
        y = staged.index(c).load(layout).to(gl.float32) * rstd
        if HAS_WEIGHT:
            y = y * gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)
    gl.store(rstd_ptr + row, rstd)


# %%
# Where it runs, and its launch parameters
# ----------------------------------------
# ``_staged_config`` is the one place to change them; ``staged_plan`` turns them into meta-parameters for
# a given tensor, or says that the core kernel keeps it.

def _staged_config(element_size):
    """16-bit rows of MIN_N to MAX_N columns (the core kernel keeps up to 16 K; past 32 K a row is over 64 KB),
    copied in chunks of CHUNK_N columns by 8 warps, PER_SM = 3 programs an SM (three 64 KB rows in 228 KB);
    measured fastest of 4 K-16 K chunks, 8-32 warps, 2-3 programs an SM on Hopper (dev/DESIGN.md). fp32: none."""
    return {2: dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=8, PER_SM=3)}.get(element_size)


# The N this kernel is for, where the site's landing page recommends it: the rows it stages (from _staged_config)
RANGE = {("forward", "bfloat16"): range(_staged_config(2)["MIN_N"], _staged_config(2)["MAX_N"] + 1)}


def staged_meta(n_cols, element_size, cfg, regs_per_sm):
    """The staged kernel's meta-parameters (HAS_WEIGHT aside) for rows of n_cols elements under the entry cfg:
    registers capped so that ``PER_SM`` programs fit in regs_per_sm."""
    vec = 16 // element_size  # elements a 16-byte copy moves
    return dict(CHUNKS=triton.cdiv(n_cols, cfg["CHUNK_N"]), VEC=vec, EVEN=n_cols % cfg["CHUNK_N"] == 0,
                REP=cfg["CHUNK_N"] // (vec * 32 * cfg["num_warps"]), num_warps=cfg["num_warps"],
                maxnreg=min(255, regs_per_sm // (32 * cfg["num_warps"] * cfg["PER_SM"]) // 8 * 8))


def staged_plan(x2d, cfg=None):
    """``staged_meta`` for the rows of x2d, or None where the core kernel keeps them: no GPU, no entry (``cfg``
    replaces ``_staged_config``'s; ``{}``: none), a length out of range, 16-byte copies that do not fit the
    rows, no ``cp.async``, too little shared memory."""
    cfg = _staged_config(x2d.element_size()) if cfg is None else cfg
    if not ON_GPU or not cfg or not cfg["MIN_N"] <= x2d.shape[1] <= cfg["MAX_N"]:
        return None
    if x2d.shape[1] % 16 or x2d.stride(0) % 16 or x2d.data_ptr() % 16:  # as Triton specializes: 16-byte copies, whole
        return None
    props = torch.cuda.get_device_properties(DEVICE)
    meta = staged_meta(x2d.shape[1], x2d.element_size(), cfg, getattr(props, "regs_per_multiprocessor", 65536))
    if torch.version.hip or props.major < 8 or \
            getattr(props, "shared_memory_per_block_optin", 49152) < meta["CHUNKS"] * cfg["CHUNK_N"] * x2d.element_size() + 1024:
        return None
    return meta


def rms_norm_staged_forward(x2d, w, y2d, rstd, eps, cfg=None):
    """y2d and rstd (fp32) of the rows of x2d: staged where ``staged_plan`` says, the core kernel elsewhere.
    Returns which ran."""
    meta = staged_plan(x2d, cfg)
    if meta is None or x2d.shape[0] == 0:
        return core_forward(x2d, w, y2d, rstd, eps)
    rms_norm_fwd_staged_kernel[(x2d.shape[0],)](x2d, x2d if w is None else w, y2d, rstd, x2d.shape[1], x2d.stride(0),
                                                y2d.stride(0), eps, HAS_WEIGHT=w is not None, **meta)
    return "staged (Gluon)"


def rms_norm_forward(x, weight=None, eps=1e-6, cfg=None):
    """F.rms_norm(x, x.shape[-1:], weight, eps), forward only, for 16-bit rows of up to 32768 (the core
    kernel's limit; tutorial 04's ``rms_norm`` takes any shape, with autograd)."""
    if x.dtype not in (torch.float16, torch.bfloat16) or x.dim() == 0 or x.shape[-1] > 32768:
        raise ValueError(f"rms_norm_forward: 16-bit rows of up to 32768 elements (got {x.dtype}, shape "
                         f"{tuple(x.shape)}); tutorial 04's rms_norm takes every row")
    if weight is not None and (weight.shape != x.shape[-1:] or not weight.is_floating_point()):
        raise ValueError(f"rms_norm_forward: weight has shape {tuple(weight.shape)} and dtype {weight.dtype}, "
                         f"expected ({x.shape[-1]},) of a floating dtype")
    x2d = x.reshape(x.numel() // x.shape[-1] if x.shape[-1] else 0, x.shape[-1])  # rows of any view (copied if needed)
    x2d = x2d.contiguous() if x2d.shape[1] > 1 and x2d.stride(1) != 1 else x2d
    y2d, rstd = torch.empty_like(x2d), torch.empty(x2d.shape[0], device=x.device, dtype=torch.float32)
    if x2d.numel():
        rms_norm_staged_forward(x2d, None if weight is None else weight.contiguous(), y2d, rstd, eps, cfg)
    return y2d.view(x.shape)


# %%
# Correctness
# -----------
# :math:`\lVert y - y_{64} \rVert / \lVert y_{64} \rVert` against float64 on the same rounded inputs, next
# to PyTorch's error: whole chunks, a masked last chunk, a row stride past the row, and a length that is
# not a multiple of 16, which the core kernel takes.

torch.manual_seed(0)
CHECK = [(67, 32768, 32768), (67, 20000, 20000), (33, 32752, 32784), (9, 16390, 16400)] if ON_GPU else \
    [(2, 20000, 20000), (1, 16390, 16400)]  # (rows, N, row stride)
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding


def check(rows, n, stride, dtype):
    x = (torch.randn(rows, stride, device=DEVICE) * 3).to(dtype)[:, :n]
    w = (1 + 0.5 * torch.randn(n, device=DEVICE)).to(dtype)
    y64, r64 = F.rms_norm(x.double(), (n,), w.double(), 1e-6), torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    y, rstd = torch.full_like(x, float("nan")), torch.full((rows,), float("nan"), device=DEVICE)
    kernel = rms_norm_staged_forward(x, w, y, rstd, 1e-6)
    err = lambda t, ref: ((t.double() - ref).norm() / ref.norm()).item()
    return {"shape": f"{rows} x {n} (stride {stride})", "dtype": str(dtype)[6:], "kernel": kernel,
            "ours y": err(y, y64), "ours rstd": err(rstd, r64), "torch y": err(F.rms_norm(x, (n,), w, 1e-6), y64)}


errors = pd.DataFrame([check(*c, d) for d in (torch.bfloat16, torch.float16) for c in CHECK])
assert (errors["ours y"] <= errors.dtype.map(TOLERANCE)).all() and (errors["ours rstd"] < 1e-5).all(), errors
errors.style.format({c: "{:.1e}" for c in ("ours y", "ours rstd", "torch y")}).hide(axis="index")

# %%
# Does staging pay?
# -----------------
# bf16 rows of 16 K to 32 K columns, :math:`MN = 2^{26}` elements on a GPU (far past the 50 MB L2): the
# staged kernel against the core kernel and the peers, each timed by :func:`triton.testing.do_bench`
# (median, L2 flushed) on replays of a CUDA graph of the call, next to a copy of the same tensor (the
# speed of light, timed without a graph). 16384 is below the staged range (forced here, to compare);
# 20000 and 24576 are not powers of two. Peers: PyTorch, ``torch.compile``, Liger-Kernel and quack
# (``quack.rmsnorm``, CuTe-DSL kernels for compute capability 9.0 and newer); "-": a peer's limit.

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**15
WIDTHS = [16384, 20000, 24576, 32768] if ON_GPU else [16384]
FORCE = dict(_staged_config(2), MIN_N=1)  # the staged kernel at 16384 too


def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")


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


fns = {"torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}  # name -> fn(x, w); peers that cannot run: left out
if ON_GPU:
    torch.cuda.set_stream(torch.cuda.Stream())  # a CUDA graph cannot be captured on the default stream
if peer_module("torch.compile", "torch"):  # on the CPU, Inductor would time a C++ compiler
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):  # one compilation per shape
            setattr(torch._dynamo.config, knob, 1024)
    fns["torch.compile"] = torch.compile(fns["torch"], dynamic=False)
if liger := peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"):
    fns["Liger"] = lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
if quack := peer_module("quack", "quack", min_major=9):  # Dao-AILab's CuTe-DSL kernels
    fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
fns["core"] = lambda x, w: rms_norm_forward(x, w, EPS, cfg={})  # {}: nothing staged
if ON_GPU:  # Gluon kernels do not run in the interpreter
    fns["staged"] = lambda x, w: rms_norm_forward(x, w, EPS, cfg=FORCE)

records, missing = [], {}
for n_cols in WIDTHS:
    x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
    w = (1 + 0.1 * torch.randn(n_cols, device=DEVICE)).to(x.dtype)
    moved, out = 2 * x.numel() * x.element_size(), torch.empty_like(x)
    light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
    for name, fn in fns.items():
        try:
            gbs = moved / bench(lambda: fn(x, w)) * 1e-6
        except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
            if name in ("core", "staged"):
                raise
            missing.setdefault((name, " ".join(f"{type(err).__name__}: {err}".split())[:120]), []).append(f"N = {n_cols}")
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
    ax.set_title(f"RMSNorm forward, bf16, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}", fontsize=9)
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

if ON_GPU:
    for (_, n_cols), row in table.iterrows():
        print(f"bf16, N = {n_cols}: staged {row['staged, % of light']:.1f}% of the copy, the core kernel "
              f"{row['core, % of light']:.1f}% ({row['staged / core']:.3g}x); against the best peer "
              f"{row['staged / best peer']:.3g}x.")
    short = table[(table["staged, % of light"] < 95) | (table["staged / best peer"] < 0.99)].index  # the site's bar: both
    print("Under 95% of the copy or 0.99x the best peer: " + ("; ".join(f"N = {n}" for _, n in short) or "none"))
else:
    print(NO_SPEED)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["staged, % of light", "staged / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="forward", recommended=[int(n in RANGE.get(("forward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "42_rms_norm_staged_gluon.csv"))

# %%
# Going further
# -------------
# Past 64 KB a row is one program an SM again (fp32 rows of 32 K, 16-bit rows of 64 K: deep dive 41 reads
# those twice, in chunks); quack spreads such a row over a *cluster* of SMs that share their shared memory,
# which Triton 3.6 cannot compile (Gluon in Triton 3.9 can). The same staging serves softmax
# (:ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`) and layer norm
# (:ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py`); the RMSNorm backward's wide rows:
# :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py`. **Exercise**: give ``_staged_config`` an
# fp32 entry for rows of 16 K (64 KB too) and compare it with the core kernel.
#
# Where this page was made
# ------------------------

card = {"device": f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU",
        "driver / CUDA": "none: Triton's interpreter (TRITON_INTERPRET=1)"}
if ON_GPU:
    props, driver = torch.cuda.get_device_properties(DEVICE), "unknown (no nvidia-smi)"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
    card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
            "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
card |= {"torch": torch.__version__, "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
         "packages": os.environ.get("SOL_LOCK", "not pinned")}
html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
type("Collapsed", (), {"_repr_html_": lambda self: html})()  # everything needed to judge this page's numbers, collapsed
