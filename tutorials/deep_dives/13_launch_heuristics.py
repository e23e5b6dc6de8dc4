"""
Launch parameters: block size, warps and grid, chosen and measured
==================================================================

A kernel's code says what one program does; its launch parameters say how big a program is and how
many run: the block of rows and columns it holds, its warps, the grid. They decide whether a
memory-bound kernel reaches the speed of light as much as the code does. **What you will learn**,
with the core softmax kernels (:ref:`sphx_glr_tutorials_01_fused_softmax.py`) as the example: how
``BLOCK_N``, ``BLOCK_M`` and ``num_warps`` follow from a few numbers kept in one small config
function; how to ask the compiled kernel how many programs share an SM, and what limits them
(threads, registers, shared memory); and whether a *persistent* grid, sized to what the GPU holds at
once, beats one program per block of rows. The same questions apply to every kernel on this site.
"""

import datetime, functools, os, platform, subprocess, timeit
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
# The kernels
# -----------
# Carried from the core page, the fused forward and backward (``BLOCK_M`` whole rows of ``BLOCK_N``
# columns per program, in registers), and from deep dive 11 the online forward (one row per program, streamed
# in chunks of ``BLOCK_N``). Each program walks blocks ``pid``, ``pid + num_programs``, ...: with one program per
# block that loop runs once; with fewer programs, each handles several blocks in turn.

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
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=-float("inf"),
                    eviction_policy="evict_last").to(tl.float32)
        x_max = tl.max(x, axis=1)
        numerator = tl.exp(x - x_max[:, None])
        inv_denominator = 1.0 / tl.sum(numerator, axis=1)  # one division per row, not per element
        y = numerator * inv_denominator[:, None]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])

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
        y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                     eviction_policy="evict_last").to(tl.float32)
        dot = tl.sum(y * dy, axis=1)
        dx = y * (dy - dot[:, None])
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])

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
# One config function
# -------------------
# Every size the fused kernels are launched with comes from ``_fused_config``, and the reason for each
# number sits beside it. The principles carry over to any row kernel:
#
# * ``BLOCK_N`` is the row length rounded up to a power of two (Triton blocks are powers of two), so a
#   row is held whole. A program of 32 warps has 1024 threads of at most 64 registers each; a row of
#   ``MAX_FUSED_N`` = 32 K fp32 values uses half of them. The backward holds two rows (:math:`y` and
#   :math:`dy`), so it stays fused only to ``MAX_FUSED_BWD_N``: past that an fp32 row spills registers
#   to local memory, and even in bf16 the online kernel measured faster. Longer rows are streamed.
# * ``BLOCK_M`` packs several short rows into one program so that its tile holds at least ``min_tile_bytes()``:
#   to draw its share of the bandwidth an SM keeps bandwidth x latency / SMs bytes in flight (``LATENCY``, a
#   loaded DRAM access, about a microsecond), and its 2048 threads make 16 programs of 4 warps, each loading a
#   16th. At 3.35 TB/s and 132 SMs that is 25 KB an SM, a tile of 2 KB (a power of two, rounded up); at 4.8 TB/s
#   36 KB, 4 KB. A smaller tile cannot hide the memory's latency, and every program pays a start-up.
# * ``num_warps`` gives each thread at most ``BYTES_PER_THREAD`` bytes of the tile, 4 to 32 warps: the fewer the
#   warps of a row, the cheaper its two reductions (a maximum and a sum), which cross warps through shared memory.
#   The backward widens :math:`y` and :math:`dy` to fp32, so it is sized as fp32.
#
# ``BYTES_PER_THREAD`` and ``LATENCY`` were chosen by measurement (deep dive 14's autotuner and the design record,
# dev/DESIGN.md in the repository); the measurements below check them on the GPU that built this page.

MAX_FUSED_N = 32768  # forward: longest row held whole in registers
MAX_FUSED_BWD_N = 16384  # backward: two rows held
BYTES_PER_THREAD = 128  # most of the tile one thread loads: 32 fp32 values, 64 of 16 bits
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


def _fused_config(n_cols, element_size):
    """(BLOCK_M, BLOCK_N, num_warps) of the fused kernels (the backward passes element_size 4)."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return block_m, block_n, num_warps


def _online_config(n_cols):
    """The online kernels: chunks of 16384 columns (32 K fp32 values would not leave room for the
    running statistics), one 32-warp program per row."""
    return dict(BLOCK_N=16384, num_warps=32)


# %%
# What the compiled kernel says
# -----------------------------
# How many programs share an SM depends on the compiled kernel: its threads, its registers per thread
# (the compiler decides; they are handed out in blocks of 256 per warp) and its shared memory, against
# the SM's limits. ``programs_per_sm`` reads them from the kernel Triton compiled for the call's own
# arguments (another dtype, or an integer that is or is not a multiple of 16, compiles another
# version) and asks CUDA's occupancy calculator too, keeping the lower count. Under the interpreter
# there is nothing compiled: it answers 1. The split kernels of
# :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` need this count to be right: their
# programs wait for each other, so all of them must fit at once.

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


def launch(direction, tensors, persistent=False, n_rows=None):
    """(kernel, grid, args, meta) of the core page's launch for y = softmax(x) (tensors x, y) or its
    backward (y, dy, dx): one program per block of rows, or, ``persistent``, no more programs than the
    GPU holds at once. ``n_rows`` sizes the grid for that many rows instead of the tensors'."""
    rows, n_cols = tensors[0].shape
    n_rows = rows if n_rows is None else n_rows
    args = (*tensors, rows, n_cols, *(t.stride(0) for t in tensors))
    if n_cols > (MAX_FUSED_N if direction == "forward" else MAX_FUSED_BWD_N):
        assert direction == "forward", "this page carries the online forward only"
        kernel, meta, block_m = softmax_fwd_online_kernel, _online_config(n_cols), 1
    else:
        block_m, block_n, num_warps = _fused_config(n_cols, tensors[0].element_size() if direction == "forward" else 4)
        kernel = softmax_fwd_kernel if direction == "forward" else softmax_bwd_kernel
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    grid = triton.cdiv(n_rows, block_m)
    if persistent:
        grid = min(grid, programs_per_sm(kernel, args, meta)[0] * NUM_SMS)
    return kernel, grid, args, meta


def run(direction, tensors, persistent=False):
    """Launch it; returns the grid."""
    kernel, grid, args, meta = launch(direction, tensors, persistent)
    kernel[(grid,)](*args, **meta)
    return grid


# %%
# The choices at each row length, and what the compiled kernels report (registers per thread and
# programs per SM on a GPU; under the interpreter there is nothing to compile), with the grid at
# :math:`M N = 2^{26}`:

def config_row(direction, dtype, n_cols):
    x = torch.empty((16, n_cols), device=DEVICE, dtype=dtype)  # 16 stand-in rows compile like the real ones
    kernel, grid, args, meta = launch(direction, (x,) * (2 if direction == "forward" else 3), n_rows=2**26 // n_cols)
    per_sm, limit, n_regs = programs_per_sm(kernel, args, meta)
    return {"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "BLOCK_M": meta.get("BLOCK_M", 1),
            "BLOCK_N": meta["BLOCK_N"], "num_warps": meta["num_warps"], "registers / thread": n_regs if ON_GPU else "-",
            "programs / SM": per_sm if ON_GPU else "-", "limited by": limit, "grid at M x N = 2**26": grid}


configs = pd.DataFrame([config_row("forward", d, 2**k) for d in (torch.float32, torch.bfloat16) for k in range(8, 16)]
                       + [config_row("backward", d, 2**k) for d in (torch.float32, torch.bfloat16) for k in range(8, 15)])
configs.set_index(["direction", "dtype", "N"])

# %%
# Does a persistent grid pay?
# ---------------------------
# The fused forward at a short and a middle row length and the online forward at the longest, fp32
# and bf16, :math:`M N = 2^{26}` on a GPU, launched both ways: one program per block of rows, and the
# occupancy-sized persistent grid whose programs each walk several blocks. A persistent program pays
# its start-up once and can issue the loads of its next block while others finish; a plain grid leaves
# that to the hardware's block scheduler, which starts a new program the moment an old one ends. Each
# is timed by :func:`triton.testing.do_bench` (median, L2 flushed) on replays of a CUDA graph, next to
# a copy of the same tensor (the speed of light, timed without a graph).

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**15
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
POINTS = [256, 8192, 262144] if ON_GPU else [256, 4096, 65536]
if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())


def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")


rows = []
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in POINTS:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        y, nbytes = torch.empty_like(x), 2 * x.numel() * x.element_size()
        row = {"dtype": str(dtype)[6:], "N": n_cols, "kernel": "fused" if n_cols <= MAX_FUSED_N else "online",
               "copy GB/s": nbytes / bench(lambda: y.copy_(x), graph=False) * 1e-6}
        for persistent, label in ((False, "one program per block"), (True, "persistent")):
            row[f"{label}: programs"] = run("forward", (x, y), persistent)
            torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), atol=1e-2, rtol=1e-2)
            row[f"{label}: GB/s"] = nbytes / bench(lambda: run("forward", (x, y), persistent)) * 1e-6
            row[f"{label}: % of copy"] = 100 * row[f"{label}: GB/s"] / row["copy GB/s"]
        rows.append(row)
        del x, y
persistence = pd.DataFrame(rows).set_index(["dtype", "N"])
persistence["persistent / plain"] = persistence["persistent: GB/s"] / persistence["one program per block: GB/s"]
shown = persistence if ON_GPU else persistence.filter(regex="kernel|programs")  # interpreter times: no GPU's speeds
shown.style.format({c: "{:.0f}" for c in shown.columns if c != "kernel"}
                   | {c: "{:.1f}%" for c in shown.columns if "%" in c} | {"persistent / plain": "{:.2f}"})

# %%
# The same numbers as a plot (on a GPU):

if ON_GPU:
    fig, ax = plt.subplots(figsize=(7, 4), facecolor="white")
    labels = [f"{dtype}\nN = {n}" for dtype, n in persistence.index]
    for i, (label, hatch) in enumerate((("one program per block", ""), ("persistent", "//"))):
        ax.bar([k + 0.4 * i for k in range(len(labels))], persistence[f"{label}: % of copy"], width=0.4, label=label,
               hatch=hatch, edgecolor="black")
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.set(xticks=[k + 0.2 for k in range(len(labels))], ylabel="% of the copy's GB/s")
    ax.set_xticklabels(labels, fontsize=8)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"Softmax forward, plain and persistent grids, on {WHERE}", fontsize=9)
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

if ON_GPU:
    for (dtype, n_cols), row in persistence.iterrows():
        print(f"{dtype}, N = {n_cols} ({row['kernel']}): {row['persistent: programs']} persistent programs instead "
              f"of {row['one program per block: programs']}, at {row['persistent / plain']:.2f}x the speed of the "
              "plain grid.")
    faster = (persistence["persistent / plain"] > 1.01).sum()
    print(f"The persistent grid was more than 1% faster at {faster} of {len(persistence)} points here"
          + (", so the core page keeps one program per block of rows." if faster == 0 else
             ": the core page keeps one program per block of rows, the simpler launch, which the design record "
             "(dev/DESIGN.md in the repository) measured as fast or faster across its sweeps."))
    fwd = configs[configs.direction == "forward"]
    print(f"Forward, programs per SM from the compiled kernels: {fwd['programs / SM'].min()} to "
          f"{fwd['programs / SM'].max()}, most often limited by {fwd['limited by'].mode()[0]}.")
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# * **Exercise.** Change ``LATENCY`` and ``BYTES_PER_THREAD`` in the block above ``_fused_config``
#   and rerun the core page's benchmark (or this page's tables): which row lengths move, and why? Watch
#   the programs per SM and what limits them.
# * **Exercise.** On your GPU, does the persistent grid win anywhere? A GPU with fewer SMs, or a kernel
#   with a longer start-up (one that loads weights once per program, like the layer-norm backward),
#   changes the answer.
# * The other kernels on the site keep their launch parameters the same way, one config function
#   beside each kernel: ``_split_config`` in
#   :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` and ``_staged_config`` in
#   :ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`, where the number of programs per
#   SM is itself a parameter (co-resident groups; a register cap so that three programs fit).
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
