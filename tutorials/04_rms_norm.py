"""
Fused RMSNorm
=============

You write RMSNorm's forward in Triton, moving each byte once, and measure it against a copy (the *speed of light*),
PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion.

**What you will learn**: to count bytes; a row a program; a tile of rows a program, sized by Little's law. No Triton
needed beforehand. Rows of up to 16 K elements.
"""

import datetime, math, os, torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")

# %%
# RMSNorm and its bytes
# ---------------------
# For a row *x* of length *N* and a weight *w*,
#
# .. math::
#
#    r = \frac{1}{\sqrt{\frac{1}{N} \sum_j x_j^2 + \varepsilon}}, \qquad y = r \, x \odot w .
#
# PyTorch runs it op by op, each through memory (comments count elements):

def naive_rms_norm(x, weight, eps):
    x32 = x.float()
    mean_sq = x32.pow(2).mean(dim=-1, keepdim=True)  # read MN, write MN; read MN, write M
    rstd = torch.rsqrt(mean_sq + eps)
    return (x32 * rstd).to(x.dtype) * weight  # read MN, write MN; read MN, write MN

# %%
# :math:`7MN` elements. A kernel reading *x* and writing *y* once moves :math:`2MN`: **3.5 times** faster.
#
# Step 0: a row a program
# -----------------------
# A program loads its row, sums its squares, stores *y* and *r* (``rstd``, for the backward):
#
# - ``@triton.jit`` compiles a function for the GPU; ``kernel[(M,)](...)`` runs M *programs*; ``tl.program_id(0)``
#   is a program's number: its row.
# - A tensor arrives as a pointer to its first element; ``x_ptr + offs`` is a block of addresses.
# - ``BLOCK_N: tl.constexpr``, fixed at compile time, is the row's length rounded up to a power of two;
#   ``tl.arange(0, BLOCK_N)`` numbers the columns, ``mask`` its real columns.
# - ``tl.load(..., mask=mask, other=0.0)`` reads where the mask holds, 0 elsewhere; ``tl.store`` writes there.
# - ``tl.sum(..., axis=0)`` adds the row across the program's threads (4 warps by default); ``.to`` converts.

@triton.jit
def plain_rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    offs, mask = row.to(tl.int64) * n_cols + cols, cols < n_cols  # int64: offsets may pass 2**31
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)

# %%
# Step 1: a tile of rows a program
# --------------------------------
# A row of 256 bf16 is 512 bytes; to hide memory's latency an SM needs bandwidth x latency / SMs in flight (Little's
# law; the ladder below prints this GPU's). Step 1 gives a program ``BLOCK_M`` rows: ``rows[:, None]`` and
# ``cols[None, :]`` broadcast into a tile as in PyTorch, ``axis=1`` sums each row, ``tl.minimum`` keeps every load on a
# real row, and ``HAS_WEIGHT``, a ``constexpr``, compiles out an absent weight. ``tl.where(c, a, b)`` is
# ``torch.where``; ``tl.broadcast_to`` spreads ``rstd`` over the tile, for column 0 to store.

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

# %%
# **Launch parameters**: the 12-16 programs of 4 warps an SM holds share those bytes, so a tile holds
# ``min_tile_bytes()`` or more (appendix), a thread at most ``BYTES_PER_THREAD``. ``eviction_policy="evict_last"`` has
# L2 evict x's lines last: measured faster.
#
# **The range.** ``RANGE`` stops at 16 K: past that a 16-bit row fills an SM alone;
# :ref:`sphx_glr_tutorials_deep_dives_42_rms_norm_staged_gluon.py` and
# :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py` take such rows.

BYTES_PER_THREAD = 128  # most of a tile one thread loads: 32 fp32 values, 64 of 16 bits

def _fwd_config(n_rows, n_cols, element_size):  # (kernel, meta, grid)
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), triton.cdiv(n_rows, block_m)

def rms_norm_rows_forward(x, w, y, rstd, eps):  # x, y: rows of unit stride along the row; w: None, or contiguous
    kernel, meta, grid = _fwd_config(*x.shape, x.element_size())
    kernel[(grid,)](x, x if w is None else w, y, rstd, *x.shape, x.stride(0), y.stride(0), eps,
                    HAS_WEIGHT=w is not None, **meta)

# %%
# Appendix: how this page measures
# --------------------------------
# :math:`MN = 2^{26}` elements on a GPU; :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA
# graph of each call: the GPU's cost, not Python's. The *speed of light* is a copy of :math:`x`, timed beside it without
# a graph. GB/s counts :math:`x` read and :math:`y` written. The forward is timed as training runs it, on inputs that
# require a gradient. Past ``MAX_ROW_BYTES`` "ours" is what the drop-in (the operator page) runs there: deep dive 41's
# forward, a row streamed in chunks, carried below. Errors are relative to float64, within a few roundings of the
# dtype (the interpreter truncates to bf16: twice a GPU's error). The functions below are the page's machinery; the
# cells after the appendix call them.
# Helion, where installed, is a peer of its own kind: a kernel written in PyTorch ops on a tile of rows, which Helion
# compiles to Triton, its launch chosen by Helion's autotuner (per GPU and point: ``helion_tuned``). First the fused
# softmax page's ``min_tile_bytes``, letter for letter; then step 0's launch: a program a row.

import functools, importlib.metadata, importlib.util, json, shutil, subprocess, timeit
import matplotlib.pyplot as plt

RANGE = {("forward", dtype): range(1, 16385) for dtype in ("float32", "bfloat16")}  # the N step 1 is for (fp16 too)

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

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
MAX_ROW_BYTES = 65536  # the longest row held whole in registers: 1024 threads, 16 or 32 fp32 values each
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
SWEEP_N = [2**k for k in range(9, 17)] if ON_GPU else [256, 1024, 4096]
SWEEP_DTYPES = (torch.float32, torch.bfloat16)
CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384)] if ON_GPU else \
    [(17, 1), (33, 257), (8, 1000), (3, 16384)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
if ON_GPU:  # graph capture needs a side stream
    torch.cuda.set_stream(torch.cuda.Stream())

def plain_forward(x, w, y, rstd, eps):  # contiguous rows and a weight
    plain_rms_norm_fwd_kernel[(len(x),)](x, w, y, rstd, x.shape[1], eps, BLOCK_N=triton.next_power_of_2(x.shape[1]))

def check_row(shape, dtype):
    """Each step's and torch's relative error against float64: of y, or of rstd where that is larger."""
    x, w = torch.randn(shape, device=DEVICE, dtype=dtype), torch.rand(shape[1], device=DEVICE, dtype=dtype) + 0.5
    y64, r64 = F.rms_norm(x.double(), shape[1:], w.double(), EPS), torch.rsqrt(x.double().square().mean(1) + EPS)
    err = lambda out, ref: ((out.double() - ref).norm() / ref.norm()).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, launch in (("step 0", plain_forward), ("step 1", rms_norm_rows_forward)):
        y, rstd = torch.full_like(x, math.nan), torch.full((shape[0],), math.nan, device=DEVICE)  # NaN: unwritten
        launch(x, w, y, rstd, EPS)
        row[name] = max(err(y, y64), err(rstd, r64))
    return row | {"torch": err(F.rms_norm(x, shape[1:], w, EPS), y64)}

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16, asserted within TOLERANCE."""
    torch.manual_seed(0)
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    assert (errors[["step 0", "step 1"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors

# %%

def bench(fn, graph=True):  # ms; on the CPU, one call's wall clock
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # a warm-up, outside the capture (torch.cuda.graph synchronizes before it captures)
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")

def tensors(n_cols, dtype):  # x, w and a copy's GB/s
    x = torch.randn(TOTAL_ELEMENTS // n_cols, n_cols, device=DEVICE, dtype=dtype)
    w, out = torch.rand(n_cols, device=DEVICE, dtype=dtype) + 0.5, torch.empty_like(x)
    return x, w, 2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6

gbps = lambda x, ms: 2 * x.numel() * x.element_size() / ms * 1e-6  # x read, y written

def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")

# Rows past ``MAX_ROW_BYTES``: deep dive 41's forward, letter for letter, a program a row streaming it in chunks, twice.
# warps such that each thread handles about bytes_per_thread bytes of an n-element tile (4 to 32 warps)
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))
@triton.jit
def rms_norm_fwd_chunked_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                                HAS_WEIGHT: tl.constexpr, CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row, y_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, y_ptr + tl.cast(row, tl.int64) * y_row_stride
        sum_sq = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            offs = (chunk + 1) * CHUNK_N + cols  # the next chunk (past the end: loads nothing)
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            sum_sq += x * x
        sum_sq = tl.sum(sum_sq, axis=0)
        rstd = tl.rsqrt(sum_sq / n_cols + eps)
        if sum_sq == float("inf"):  # values past 1e19, as in the fused kernel: the row again, scaled by 2**-80
            sum_small = tl.zeros([CHUNK_N], tl.float32)
            for k in range(0, n_chunks):
                offs = k * CHUNK_N + cols
                x_small = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32) * 2.0**-80
                sum_small += x_small * x_small
            rstd = 2.0**-80 * tl.rsqrt(tl.sum(sum_small, axis=0) / n_cols)
        tl.store(rstd_ptr + row, rstd)
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols  # backwards: the last chunks are in L2
            offs = here - CHUNK_N
            x_next = tl.load(x_row + offs, mask=(offs >= 0) & (offs < n_cols), other=0.0, eviction_policy="evict_first")
            y = x * rstd
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            tl.store(y_row + here, y.to(y_ptr.dtype.element_ty), mask=here < n_cols, cache_modifier=".cs")
# (meta, grid) of the chunked forward: a program a row. Its next chunk, 16 K values (32 a thread of 16 warps), is in
# flight: 32 KB (bf16) to 64 KB (fp32), about what an SM needs (Little's law: bandwidth x latency / SMs) to hide latency.
def _fwd_config_chunked(n_rows, element_size):
    return dict(CHUNK_N=16384, num_warps=_warps(16384, element_size, 32 * element_size)), n_rows
def chunked_forward(x, w, eps):  # y, rstd of rows past MAX_ROW_BYTES (contiguous), by deep dive 41's launch
    y, rstd = torch.empty_like(x), torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    meta, grid = _fwd_config_chunked(x.shape[0], x.element_size())
    if grid:
        rms_norm_fwd_chunked_kernel[(grid,)](x, x if w is None else w, y, rstd, *x.shape, x.stride(0), y.stride(0), eps,
                                             HAS_WEIGHT=w is not None, **meta)
    return y, rstd

def ours(x, w):  # step 1; past MAX_ROW_BYTES, as the operator page's drop-in: deep dive 41's forward
    if x.shape[1] * x.element_size() > MAX_ROW_BYTES:
        return chunked_forward(x, w, EPS)[0]
    y, rstd = torch.empty_like(x), torch.empty(len(x), device=x.device)
    rms_norm_rows_forward(x, w, y, rstd, EPS)
    return y

fns = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
if peer_module("torch.compile", "torch"):  # on the CPU, Inductor would time a C++ compiler
    torch._dynamo.config.recompile_limit = 1024  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
if liger := peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"):
    fns["Liger"] = lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)  # not in place
if quack := peer_module("quack", "quack", min_major=9):
    fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
if helion := peer_module("Helion", "helion"):  # a tile of rows a program, as step 1; Helion picks the tile and warps
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        y, rstd = torch.empty_like(x), torch.empty(x.size(0), dtype=torch.float32, device=x.device)
        for rows in hl.tile(x.size(0)):
            x_rows = x[rows, :].to(torch.float32)
            rstd_rows = torch.rsqrt(torch.mean(x_rows * x_rows, dim=1) + eps)
            y[rows, :] = (x_rows * rstd_rows[:, None] * w[None, :].to(torch.float32)).to(y.dtype)
            rstd[rows] = rstd_rows
        return y, rstd

def helion_tuned(kernel, op, points):
    """kernel(*args), each point (dtype, N) at the config dev/helion_tune.py tuned on this GPU, read from the JSON
    file the build names in SOL_HELION_CONFIGS; a point with none autotunes at its first call (effort "quick"),
    kept for this run, or where SOL_HELION_AUTOTUNE=0 is not measured. One line says which."""
    path, entry = os.environ.get("SOL_HELION_CONFIGS", ""), {}
    if os.path.isfile(path):
        with open(path) as f:
            entry = json.load(f).get(WHERE, {})
    same = entry.get("helion") == importlib.metadata.version("helion")
    stored = entry.get("configs", {}).get(op, {}) if same else {}
    missing = [f"{t} N = {n}" for t, n in points if str(n) not in stored.get(t, {})]
    why = ("no file of tuned configs (SOL_HELION_CONFIGS)" if not os.path.isfile(path) else
           f"none tuned on {WHERE}" if not entry else "" if same else f"those stored are Helion {entry.get('helion')}'s")
    off = os.environ.get("SOL_HELION_AUTOTUNE") == "0"  # a build without autotuning: untuned points not measured
    how = "not measured here (SOL_HELION_AUTOTUNE=0)" if off else "autotuned here (effort quick)"
    print(f"Helion: every point at the config tuned on this GPU ({entry.get('tuned')}); none autotuned here."
          if not missing else f"Helion: {how} at each point: {why or 'none stored'}."
          if len(missing) == len(points) else f"Helion: tuned configs at {len(points) - len(missing)} of "
          f"{len(points)} points; {how}: {', '.join(missing)}.")
    configured = set()

    def run(*args):
        bound = kernel.bind(args)  # one per shape and dtype
        point = stored.get(str(args[0].dtype)[6:], {}).get(str(args[0].shape[-1]))
        if off and not point:
            raise RuntimeError(f"no config tuned on {WHERE} for this point, and SOL_HELION_AUTOTUNE=0")
        if point and id(bound) not in configured:
            bound.set_config(helion.Config(**point["config"]))
            configured.add(id(bound))
        return bound(*args)
    return run

if helion:
    helion_forward = helion_tuned(helion_rms_norm, "rms_norm forward",
                                  [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])
    fns["Helion"] = lambda x, w: helion_forward(x, w, EPS)[0]
fns["ours"] = ours

LADDER = {0: ("a row a program", plain_forward),
          1: ("a tile of rows a program, warps sized to the tile", rms_norm_rows_forward)}

def measure_ladder():  # the forward on bf16 rows of 256 (packing matters) and 4096 (a row fills a tile)
    rows = []
    for n_cols in (256, 4096):
        x, w, light = tensors(n_cols, torch.bfloat16)
        y, rstd = torch.empty_like(x), torch.empty(len(x), device=DEVICE)
        for step, (idea, launch) in LADDER.items():
            speed = gbps(x, bench(lambda: launch(x, w, y, rstd, EPS)))
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": speed, "% of light": 100 * speed / light})
    return pd.DataFrame(rows).sort_values("step", kind="stable")

def launch_figures():  # Little's law with this GPU's figures, as min_tile_bytes reads them: printed above the ladder
    if not ON_GPU:
        return f"No GPU here to read: tiles of {min_tile_bytes() // 1024} KB, min_tile_bytes()'s default."
    props = torch.cuda.get_device_properties(DEVICE)
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return (f"This {props.name} does not report its memory clock and width: "
                f"tiles of {min_tile_bytes() // 1024} KB or more.")
    sms, programs = props.multi_processor_count, props.max_threads_per_multi_processor // (4 * 32)
    return (f"On this {props.name}: {bandwidth / 1e12:.2f} TB/s (peak) x {LATENCY * 1e6:g} µs / {sms} SMs = "
            f"{bandwidth * LATENCY / sms / 1024:.0f} KB in flight an SM; shared by its {programs} programs of 4 warps: "
            f"tiles of {min_tile_bytes() // 1024} KB or more.")
def show_ladder(ladder):  # the interpreter's times are no GPU's speeds
    print(launch_figures())
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide()

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def benchmark():  # the forward against its peers: (records, table)
    records = []
    for dtype, n_cols in [(dtype, n) for dtype in SWEEP_DTYPES for n in SWEEP_N]:
        x, w, light = tensors(n_cols, dtype)
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        for name, fn in fns.items():
            try:
                speed = gbps(x, bench(lambda: fn(xg, wg)))
            except Exception as err:  # a peer's limit
                if name == "ours":
                    raise
                print(f"{name}: no forward {dtype} N = {n_cols}: {type(err).__name__}")
                speed = math.nan
            records.append({"direction": "forward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                            "GB/s": speed, "speed of light GB/s": light})
    results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
    results["% of speed of light"] = 100 * results["GB/s"] / results["speed of light GB/s"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=PEERS)
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # for the landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "04_rms_norm.csv"))
    return results, table

def show(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-") if ON_GPU else print(NO_SPEED)  # one call: a second resets the rest

def plot(results):  # in % of the copy measured beside each point; none without a GPU
    if not ON_GPU:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white", layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        pct = part.pivot(index="N", columns="provider", values="% of speed of light")
        pct.plot(ax=ax, logx=True, style="o--", ms=3, grid=True, title=f"{direction}, {dtype}",
                 xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)"), ax.legend(fontsize=7)
    fig.suptitle(f"RMSNorm forward, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def reading(ladder, table):  # three to five sentences computed from this run's tables
    if not ON_GPU:
        return NO_SPEED
    speed, meta = ladder.set_index(["step", "N"])["GB/s"], _fwd_config(TOTAL_ELEMENTS // 4096, 4096, 2)[1]
    text = (f"Step 1 ran {speed[1, 256] / speed[0, 256]:.2f}x as fast as step 0 on rows of 256, "
            f"{speed[1, 4096] / speed[0, 4096]:.2f}x on rows of 4,096, where its tile is {meta['BLOCK_M']} row and "
            f"its warps {meta['num_warps']}, as step 0's.")
    inside = [n in RANGE.get((d, t), ()) for d, t, n in table.index]
    light, peer = table["ours, % of light"], table["ours / best peer"][inside]
    naive, past = (table.ours / table.naive)[inside]["forward", "float32"], light[[not i for i in inside]]
    peers = table[inside].filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    won = f" A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + "." if lost else ""
    text += (f"\nInside its range ours ran at {light[inside].min():.3g}-{light[inside].max():.3g}% of the copy, "
             f"{peer.min():.3g}-{peer.max():.3g}x the best peer. The fp32 forward there ran "
             f"{naive.min():.3g}-{naive.max():.3g}x the naive speed (the bytes model: 3.5x, were each naive operation "
             f"as fast as a copy{'; they ran slower' if naive.min() > 3.5 else ''}).{won}")
    if "Helion" in table and table.Helion[inside].notna().any():  # else no point of Helion's ran
        helion_pct, ratio = (table.Helion / table["speed of light"] * 100)[inside], (table.ours / table.Helion)[inside]
        text += (f"\nHelion's kernel (PyTorch ops on a tile of rows, its launch autotuned) ran inside the range at "
                 f"{helion_pct.min():.3g}-{helion_pct.max():.3g}% of the copy; ours ran {ratio.min():.3g}-"
                 f"{ratio.max():.3g}x its speed.")
    held = [n * (2 if t == "bfloat16" else 4) <= MAX_ROW_BYTES for _, t, n in past.index]
    points = lambda part: ", ".join(f"{t} N = {n:,} ({pct:.3g}%)" for (_, t, n), pct in part.items())
    if any(held):
        text += f"\nPast its range, at {points(past[held])}, a row fills an SM: deep dive 42 stages such rows."
    if not all(held):
        text += (f"\nAt {points(past[[not h for h in held]])} the row no longer fits in registers: the drop-in streams it "
                 "in chunks, twice, with deep dive 41's kernel.")
    return text

def environment_card():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.split("\n")[0] if ON_GPU and shutil.which("nvidia-smi") else "?"
    card = {"device": WHERE, "driver / CUDA": f"driver {smi}, CUDA {torch.version.cuda}" if ON_GPU else
            "none: Triton's interpreter", "torch": torch.__version__, "Triton": triton.__version__, "built": BUILT,
            "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = pd.Series(card, name="").to_frame().to_html()
    summary = f"<details><summary>Full environment card</summary>{html}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: summary})()

# %%
# Correctness
# -----------
# Errors against float64, beside torch's:

(errors := check(CHECK_SHAPES)).style.format("{:.1e}", subset=["step 0", "step 1", "torch"]).hide(axis="index")

# %%
# The ladder, measured
# --------------------
# bf16 rows of 256, 4096:

show_ladder(ladder := measure_ladder())

# %%
# Benchmark
# ---------
# Step 1 against its peers, GB/s:

results, table = benchmark()
show(table)

# %%

plot(results)

# %%
# Reading the numbers
# -------------------

print(reading(ladder, table))

# %%
# Going further
# -------------
# **Next**: :ref:`sphx_glr_tutorials_04_rms_norm_backward.py`; the drop-in:
# :ref:`sphx_glr_tutorials_04_rms_norm_operator.py`.
# **Exercise**: ``BYTES_PER_THREAD`` at 32: which rows gain, and why? Reference: Zhang, Sennrich (2019).

environment_card()
