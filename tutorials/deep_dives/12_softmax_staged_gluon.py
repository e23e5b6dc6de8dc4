"""
Softmax, the widest 16-bit rows: stage the row in shared memory (Gluon)
=======================================================================

The core page's fused kernel (:ref:`sphx_glr_tutorials_01_fused_softmax.py`) holds a row in
registers. A bf16 row of :math:`N = 32768` is 64 KB as loaded and 128 KB as fp32 values, half of an
SM's 256 KB of registers: the 32-warp program that holds it is alone on its SM, and alone it loads the
row, reduces it twice and stores it, one phase after the other, with nothing from another row to fill
the gaps. **What you will learn**: how to keep such a row in *shared memory*
instead, three rows per SM, so that while one program reduces the others load or store; how to write
that kernel in **Gluon**, Triton's lower-level language, with explicit layouts and asynchronous
copies; and where it is chosen (``_staged_config``). Gluon kernels compile only for a GPU: without one
this page still runs, with the core kernel, and says that nothing was staged.
"""

import datetime, functools, importlib.util, os, platform, subprocess, timeit
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

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
# The forward reads :math:`x` and writes :math:`y = e^{x - m} / \sum_j e^{x_j - m}` (:math:`m` the row
# maximum), :math:`2MN` elements: the bytes of a copy, the speed of light. Carried from the core page:
# its fused kernel (``BLOCK_M`` whole rows per program, in registers) and its launch.

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


LATENCY = 1e-6  # seconds: a load from DRAM under load, about a microsecond

BYTES_PER_THREAD = 128  # most of a tile one thread loads

@functools.cache  # reads the device once: its memory clock costs the host more than a launch
def min_tile_bytes():
    props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return 4096
    in_flight = bandwidth * LATENCY / props.multi_processor_count  # bytes an SM keeps in flight
    programs = props.max_threads_per_multi_processor // (4 * 32)  # programs of 4 warps an SM holds
    return max(2048, triton.next_power_of_2(int(in_flight / programs)))  # 2 KB: a 16-byte load for each thread


def _core_meta(n_cols, element_size):
    """The core page's _fused_config: BLOCK_M rows of BLOCK_N columns a program, BYTES_PER_THREAD a thread."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))  # a tile of at least min_tile_bytes()
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)


def core_forward(x2d, y2d):
    """The core page's launch of the fused forward (rows of up to 32768 columns)."""
    meta = _core_meta(x2d.shape[1], x2d.element_size())
    softmax_fwd_kernel[(triton.cdiv(x2d.shape[0], meta["BLOCK_M"]),)](
        x2d, y2d, *x2d.shape, x2d.stride(0), y2d.stride(0), **meta)
    return "fused (core)"


# %%
# Stage the row in shared memory
# ------------------------------
# Shared memory holds the row in its own dtype, and a Hopper SM's 228 KB hold three 64 KB rows. So
# the kernel below gives each program one row and no more registers than it needs: it copies the row
# from global into shared memory with asynchronous copies (``cp.async``, which do not go through
# registers), then reads it back three times in ``CHUNK``-column pieces: the maximum, the sum of
# exponentials, and :math:`y`. Three programs, three rows, share an SM, limited by shared memory, and
# while one reduces the others load or store. The row is still read from DRAM once.
#
# ``triton.language`` decides by itself what goes through shared memory, so this kernel is written in
# **Gluon** (``triton.experimental.gluon``): every tensor has an explicit *layout* (which thread holds
# which elements), and the kernel allocates shared memory and issues the copies itself. Three details:
#
# * each thread holds runs of 8 (bf16) contiguous elements, 16 bytes, one ``cp.async`` each;
# * every piece is its own *commit group*, so the first pass starts on piece 0 while the later pieces
#   are still on their way (``wait_group(k)``: wait until at most ``k`` groups are still in flight);
# * a thread reads back, with the same layout, exactly the elements its own copies wrote, so the waits
#   need no barrier between threads.
#
# A copy moves 16 aligned bytes, and the mask at the row's end must cover whole copies: rows whose
# length or stride is not a multiple of 16 elements, or whose address is not 16-byte aligned, keep the
# core kernel, as do GPUs before Ampere (no ``cp.async``), programs that cannot have 64 KB of shared
# memory, and Triton's interpreter, which does not run Gluon kernels.

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
# Where it runs, and its launch parameters
# ----------------------------------------
# ``_staged_config`` is the one place to change: which rows are staged, the piece size, the warps, and
# how many programs share an SM, which caps the registers per thread (``maxnreg``).


def _staged_config(element_size):
    """The staged forward's entry for this element size, or None (fp32: not staged).

    16-bit rows of MIN_N to MAX_N columns (at 16 K the core kernel, two programs per SM, keeps up; past
    32 K a row is over 64 KB and one program per SM again), copied in pieces of CHUNK_N columns, 8 warps
    a program (measured fastest on Hopper; the design record, dev/DESIGN.md in the repository), and
    registers capped so that PER_SM = 3 programs share an SM (three 64 KB rows in 228 KB)."""
    return {2: dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=8, PER_SM=3)}.get(element_size)


# The N this kernel is for, where the site's landing page recommends it: the rows it stages (from _staged_config)
RANGE = {("forward", "bfloat16"): range(_staged_config(2)["MIN_N"], _staged_config(2)["MAX_N"] + 1)}


def staged_meta(n_cols, element_size, cfg, regs_per_sm):
    """The staged kernel's meta-parameters for rows of n_cols elements under the ``STAGED`` entry cfg:
    registers capped so that ``PER_SM`` programs fit in regs_per_sm registers."""
    vec = 16 // element_size  # elements per 16-byte copy
    return dict(CHUNKS=triton.cdiv(n_cols, cfg["CHUNK_N"]), VEC=vec, EVEN=n_cols % cfg["CHUNK_N"] == 0,
                REP=cfg["CHUNK_N"] // (vec * 32 * cfg["num_warps"]), num_warps=cfg["num_warps"],
                maxnreg=min(255, regs_per_sm // (32 * cfg["num_warps"] * cfg["PER_SM"]) // 8 * 8))


def staged_plan(x2d, cfg=None):
    """Meta-parameters of the staged kernel for the rows of x2d, or None where it is not used: no GPU,
    no entry (``cfg`` replaces ``_staged_config``'s; ``{}``: none), a row length outside the entry's
    range, rows whose length or stride is not a multiple of 16 elements or not 16-byte aligned, a GPU
    without ``cp.async`` (before Ampere) or without the shared memory for a row."""
    cfg = _staged_config(x2d.element_size()) if cfg is None else cfg
    if not ON_GPU or not cfg or not cfg["MIN_N"] <= x2d.shape[1] <= cfg["MAX_N"]:
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



def softmax_staged_forward(x2d, y2d, cfg=None):
    """y2d = softmax(x2d) along dim 1 (2-D, unit-stride rows): staged where ``staged_plan`` says, the
    core kernel elsewhere. Returns the name of the kernel that ran."""
    meta = staged_plan(x2d, cfg)
    if meta is None or x2d.shape[0] == 0:
        return core_forward(x2d, y2d)
    softmax_fwd_staged_kernel[(x2d.shape[0],)](x2d, y2d, x2d.shape[1], x2d.stride(0), y2d.stride(0), **meta)  # a program per row
    return "staged (Gluon)"


def softmax_forward(x, cfg=None):
    """torch.softmax(x, -1), forward only, for float32 / float16 / bfloat16 tensors (0-d and empty ones too)."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"softmax_forward: x has dtype {x.dtype}; the kernels take float32, float16 and bfloat16")
    n_cols = x.shape[-1] if x.dim() else 1
    x2d = x.reshape(x.numel() // n_cols if n_cols else 0, n_cols)  # rows of any view: strided, or copied to unit stride
    x2d = x2d.contiguous() if x2d.shape[1] > 1 and x2d.stride(1) != 1 else x2d
    y2d = torch.empty(x2d.shape, device=x.device, dtype=x.dtype)
    if y2d.numel():
        softmax_staged_forward(x2d, y2d, cfg)
    return y2d.view(x.shape)


# %%
# Correctness
# -----------
# :math:`\lVert y - y_{64} \rVert / \lVert y_{64} \rVert` against float64 on the same inputs, outputs
# poisoned with NaN first: whole pieces, a masked last piece, a row stride past the row, a length that
# is not a multiple of 16 (the core kernel takes it), and rows with :math:`\pm\infty` and NaN, next to
# PyTorch's error; each run twice (the same bits every run).

torch.manual_seed(0)
CHECK = [(67, 32768, 32768), (67, 20000, 20000), (33, 32752, 32784), (9, 16385, 16400), (9, 32767, 32767)] \
    if ON_GPU else [(3, 20000, 20000), (3, 16385, 16400)]  # (rows, N, row stride)
TOLERANCE = {"float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding (the interpreter truncates to bf16)


def check(rows, n, stride, dtype):
    x = (torch.randn(rows, stride, device=DEVICE) * 3).to(dtype)[:, :n]
    x[0, 5], x[1, 7], x[2, :n // 2] = float("nan"), float("inf"), -float("inf")  # as torch: NaN, NaN, zeros
    ref = torch.softmax(x.double(), -1)
    y, again = torch.full_like(x, float("nan")), torch.empty_like(x)
    kernel = softmax_staged_forward(x, y)
    softmax_staged_forward(x, again)
    ok = ~ref.isnan().any(-1)  # rows without NaN: the error; the NaN rows must come out NaN
    err = lambda t: ((t[ok].double() - ref[ok]).norm() / ref[ok].norm()).item()
    return {"shape": f"{rows} x {n} (stride {stride})", "dtype": str(dtype)[6:], "kernel": kernel, "ours y": err(y),
            "torch y": err(torch.softmax(x, -1)), "NaN rows as torch": torch.equal(y.isnan(), torch.softmax(x, -1).isnan()),
            "repeatable": torch.equal(y.view(torch.int16), again.view(torch.int16))}


errors = pd.DataFrame([check(*c, d) for d in (torch.bfloat16, torch.float16) for c in CHECK])
assert (errors["ours y"] <= errors.dtype.map(TOLERANCE)).all() and errors["NaN rows as torch"].all() \
    and errors.repeatable.all(), "errors above tolerance:\n" + errors.to_string()
errors.style.format({"ours y": "{:.1e}", "torch y": "{:.1e}"}).hide(axis="index")

# %%
# Does staging pay?
# -----------------
# bf16 rows of 16 K to 32 K columns, :math:`M N = 2^{26}` on a GPU (far past the 50 MB L2): the staged
# kernel against the core's fused kernel and the peers, each timed by :func:`triton.testing.do_bench`
# (median, L2 flushed) on replays of a CUDA graph of the call, next to a copy of the same tensor (the
# speed of light, timed without a graph). Rows of 16384 columns are below the staged range (forced
# here, for comparison), and 24576 is between the powers of two. The *programs / SM* columns are what
# the compiled kernels report: the reason staging pays. The peers: PyTorch, ``torch.compile``, Liger-Kernel
# and quack (``quack.softmax``, CuTe-DSL kernels for compute capability 9.0 and newer); "-": a peer's limit.

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
liger = peer_module("Liger-Kernel", "liger_kernel.ops.softmax")
quack = peer_module("quack", "quack", min_major=9)  # Dao-AILab's CuTe-DSL kernels
TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**15
WIDTHS = [16384, 24576, 32768] if ON_GPU else [16384]
FORCE = dict(_staged_config(2), MIN_N=1)  # the staged kernel at 16384 too
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


def providers():
    """name -> softmax(x, -1), forward; peers that cannot run here are left out, and staging without a GPU."""
    found = {"torch": lambda x: torch.softmax(x, -1)}
    if inductor:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):  # one compilation per shape
                setattr(torch._dynamo.config, knob, 1024)
        found["torch.compile"] = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False)
    if liger:
        found["Liger"] = liger.LigerSoftmaxFunction.apply
    if quack:
        found["quack"] = quack.softmax  # rows along the last dim of a 2-D tensor
    found["core"] = lambda x: softmax_forward(x, cfg={})  # {}: no staging
    if ON_GPU:
        found["staged"] = lambda x: softmax_forward(x, cfg=FORCE)
    return found

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



def programs_per_sm_at(x, y, cfg):
    """Programs per SM of what ``softmax_staged_forward(x, y, cfg)`` runs: the staged or the core kernel."""
    meta = staged_plan(x, cfg)
    if meta is None:
        return programs_per_sm(softmax_fwd_kernel, (x, y, *x.shape, x.stride(0), y.stride(0)),
                               _core_meta(x.shape[1], x.element_size()))[0]
    return programs_per_sm(softmax_fwd_staged_kernel, (x, y, x.shape[1], x.stride(0), y.stride(0)), meta)[0]


records, fns, missing = [], providers(), {}
for n_cols in WIDTHS:
    x = torch.randn((TOTAL_ELEMENTS // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
    moved, out = 2 * x.numel() * x.element_size(), torch.empty_like(x)
    light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
    reference = torch.softmax(x.float(), -1)
    for name, fn in fns.items():
        try:
            torch.testing.assert_close(fn(x).float(), reference, atol=1e-2, rtol=1e-2)
            gbs = moved / bench(lambda: fn(x)) * 1e-6
        except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
            if name in ("core", "staged"):
                raise
            why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
            missing.setdefault((name, why), []).append(f"N = {n_cols}")
            gbs = float("nan")
        records.append({"dtype": "bfloat16", "N": n_cols, "provider": name, "GB/s": gbs,
                        "speed of light GB/s": light, "% of light": 100 * gbs / light})
    records[-1]["programs / SM"] = {"core": programs_per_sm_at(x, out, {}), "staged": programs_per_sm_at(x, out, FORCE)}
    del x, out, reference
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
per_sm = results.dropna(subset=["programs / SM"]).set_index(["dtype", "N"])["programs / SM"] if ON_GPU else None
for kernel in ("core", "staged"):
    table[f"{kernel}: programs / SM"] = [per_sm[key][kernel] if ON_GPU else float("nan") for key in table.index]
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
    ax.set_title(f"Softmax forward, bf16, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}", fontsize=9)
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

if ON_GPU:
    for (_, n_cols), row in table.iterrows():
        print(f"bf16, N = {n_cols}: staged {row['staged, % of light']:.1f}% of the copy with "
              f"{row['staged: programs / SM']:.0f} programs per SM, the core kernel {row['core, % of light']:.1f}% with "
              f"{row['core: programs / SM']:.0f} ({row['staged / core']:.3g}x), the best peer "
              f"{row['staged'] / row['staged / best peer']:.0f} GB/s ({row['staged / best peer']:.3g}x).")
else:
    print(NO_SPEED)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["staged, % of light", "staged / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="forward", recommended=[int(n in RANGE.get(("forward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "12_softmax_staged_gluon.csv"))

# %%
# Going further
# -------------
# * **Rows past shared memory.** The staged kernel stops at 64 KB rows, three to an SM. A bf16 row of
#   65536 columns (128 KB) would leave one program per SM again; the split kernels of
#   :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` share such rows among SMs through L2
#   (and take the 32 K rows this kernel cannot: unaligned, or no GPU for Gluon). Before the staged
#   kernel, other designs for bf16 rows of 32 K measured slower than the split kernel on Hopper (the
#   design record, dev/DESIGN.md in the repository): a persistent Gluon program that copies the next
#   row into shared memory while it works on this one, two reads of the row in small programs as
#   torch.compile does, and one block-wide reduction instead of two.
# * **Exercise.** Give ``_staged_config`` an entry for fp32 rows of 16 K (64 KB too) and compare it
#   with the core kernel; or change ``num_warps`` and ``PER_SM`` and watch the programs per SM.
#
# The layer-norm pages stage their widest rows the same way:
# :ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py`. Launch parameters in general:
# :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.
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
