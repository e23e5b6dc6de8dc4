"""
Fused softmax
=============

Softmax does a few operations per element, so memory alone sets its speed: the best kernel reads the input once,
writes the output once, and runs as fast as a copy of the same bytes, the *speed of light*. You write its forward in
Triton and measure it against PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion.

**What you will learn**: to count bytes; your first Triton kernel; launch parameters from the device (Little's
law). No Triton needed beforehand. Rows of up to 32 K elements in fp32, 16 K in 16 bits.
"""

import datetime, functools, math, os, pandas as pd, torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import triton, triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The naive softmax and its bytes
# -------------------------------
# For a row :math:`x` of length :math:`N`:
#
# .. math::
#
#    y_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j .
#
# Subtracting the maximum :math:`m` keeps :math:`e^{x - m}` at most 1. In PyTorch, one operation a line:

def naive_softmax(x):  # rows of a 2-D tensor
    x_max = x.max(dim=1, keepdim=True).values  # read M*N, write M
    z = x - x_max  # read M*N + M, write M*N
    numerator = torch.exp(z)  # read M*N, write M*N
    denominator = numerator.sum(dim=1, keepdim=True)  # read M*N, write M
    return numerator / denominator  # read M*N + M, write M*N

# %%
# Each line is a kernel of its own that goes through memory: about :math:`8MN` elements moved in all. A kernel that
# keeps a row on chip reads :math:`x` once and writes :math:`y` once, :math:`2MN` elements: **4 times faster**.
# ``torch.softmax`` is such a kernel already; the target is a copy of the same bytes.
#
# Step 0: the plain kernel
# ------------------------
# One program a row loads it into registers, takes the maximum and the sum of the exponentials, and stores
# :math:`y`. The Triton it needs:
#
# * ``@triton.jit`` compiles a Python function for the GPU; ``kernel[(n,)](...)`` runs ``n`` copies, the
#   *programs* (a thread block each); ``tl.program_id(0)`` is a program's number.
# * A tensor arrives as a pointer to its first element; ``x_ptr + tl.arange(0, BLOCK_N)`` is a block of
#   addresses, counted in elements, as torch's strides are.
# * ``BLOCK_N: tl.constexpr`` is fixed at compile time, a power of two (as ``tl.arange`` needs): the row's length
#   rounded up.
# * ``tl.load`` and ``tl.store`` read and write a block; ``mask=`` turns off the elements past the row's end, which
#   load ``other=`` (:math:`-\infty`, whose exponential is 0).
# * ``tl.max`` and ``tl.sum`` reduce a block; ``.to`` converts: fp32 arithmetic, memory in the tensor's dtype
#   (``y_ptr.dtype.element_ty``).

@triton.jit
def softmax_plain_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator * (1.0 / tl.sum(numerator, axis=0))  # one division a row, not one an element
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)

# %%
# ``num_warps=``, a launch option, sets a program's warps (of 32 threads): here a warp per 256 elements, 4 to 32.

def plain_softmax_rows(x2d, y2d):
    block_n = triton.next_power_of_2(x2d.shape[1])
    num_warps = min(32, max(4, block_n // 256))
    softmax_plain_kernel[(x2d.shape[0],)](x2d, y2d, x2d.shape[1], x2d.stride(0), y2d.stride(0),
                                          BLOCK_N=block_n, num_warps=num_warps)

# %%
# Step 1: several short rows a program
# ------------------------------------
# In rows of 256, step 0 runs :math:`2^{18}` programs on the ladder's :math:`2^{26}` elements, each paying its start
# with too few loads in flight to hide memory's latency. Step 1 gives a program a tile of ``BLOCK_M`` rows:
# ``rows[:, None] * stride + cols[None, :]`` broadcasts, as in PyTorch, into a ``BLOCK_M`` x ``BLOCK_N`` tile of
# addresses, and ``axis=1`` reduces each row of it. ``tl.minimum`` clamps rows past the last onto it, so every load
# reads a real row; the store's mask drops them. ``eviction_policy="evict_last"`` has L2 evict :math:`x`'s lines last:
# measured, a few percent faster.

@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: M * N may pass 2**31
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok, other=-float("inf"),
                eviction_policy="evict_last").to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator * (1.0 / tl.sum(numerator, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

# %%
# **Launch parameters** come from the device. To hide memory's latency an SM needs bandwidth x latency / SMs bytes in
# flight (Little's law; the ladder below prints this GPU's figures). A program loads its whole tile at once and an SM
# holds 12 to 16 programs of 4 warps, so ``min_tile_bytes`` is that share, rounded up to a power of two: 2 KB or more.
# ``_fused_config`` packs short rows into such a tile (a longer row is a tile alone) and gives it 4 warps, more only
# where a thread would load over ``BYTES_PER_THREAD``: few warps keep reductions across warps cheap.
#
# **The range.** ``RANGE`` (in the appendix) holds the rows these kernels are for.

MAX_FUSED_N = 32768  # forward: longest row held whole in registers (1024 threads, 32 fp32 values each)
BYTES_PER_THREAD = 128  # most of a tile one thread loads: 32 fp32 values, 64 of 16 bits
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

# (BLOCK_M, BLOCK_N, num_warps) for rows of n_cols elements of element_size bytes
def _fused_config(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return block_m, block_n, num_warps

def softmax_rows_forward(x2d, y2d):
    """y2d = softmax(x2d) along dim 1, rows of at most MAX_FUSED_N. Both 2-D, unit stride along the row."""
    block_m, block_n, num_warps = _fused_config(x2d.shape[1], x2d.element_size())
    softmax_fwd_kernel[(triton.cdiv(x2d.shape[0], block_m),)](x2d, y2d, *x2d.shape, x2d.stride(0), y2d.stride(0),
                                                              BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)

# %%
# Appendix: how this page measures
# --------------------------------
# :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA graph of each call: the GPU's
# cost, not Python's. The *speed of light* is a copy of the same tensor, timed beside it without a graph
# (CUDA may make a captured copy a slower copy-engine transfer). GB/s counts the bytes a perfect kernel
# moves: :math:`x` read and :math:`y` written. The functions below are the page's machinery (the check, peers,
# timer, sweep, tables, plot, the sentences that read the numbers); the cells after the appendix call them.
# Helion, where installed, is a peer of its own kind: a kernel written in PyTorch ops on a tile of rows, which Helion
# compiles to Triton, its launch chosen by Helion's autotuner (per GPU and point: ``helion_tuned``).

# (direction, dtype) -> the N these kernels are for (fp16: as bf16); the deep dives take the other N
RANGE = {("forward", "float32"): range(1, MAX_FUSED_N + 1), ("forward", "bfloat16"): range(1, 16384 + 1)}

# %%
import importlib.metadata, importlib.util, json, subprocess, warnings
import matplotlib.pyplot as plt

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
TOTAL_ELEMENTS, SWEEP_N = (2**26, [2**k for k in range(8, 16)]) if ON_GPU else (2**15, [256, 1024, 4096, 16384, 32768])
SWEEP_DTYPES = (torch.float32, torch.bfloat16)

def load_peer(peer, module, min_cc=(0, 0)):
    """A peer's module, or None where it cannot run here (no column), saying why in the page's one wording."""
    cc = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = ("not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else
           "" if cc >= min_cc else "needs compute capability {}.{} or newer; this GPU has {}.{}".format(*min_cc, *cc))
    if not why:
        try:
            return importlib.import_module(module)
        except Exception as err:  # installed, yet it does not load here
            why = " ".join(f"{type(err).__name__}: {err}".split())[:100]
    print(f"{peer}: not measured here ({why}).")

liger, quack = load_peer("Liger-Kernel", "liger_kernel.ops.softmax"), load_peer("quack", "quack", min_cc=(9, 0))
inductor = load_peer("torch.compile", "torch._inductor")  # Inductor's CPU code would time a C++ compiler, not a GPU
helion = load_peer("Helion", "helion")
if helion:  # a tile of rows a program, as step 1; Helion picks the tile, warps and loads
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_softmax(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        for rows in hl.tile(x.size(0)):
            x_rows = x[rows, :].to(torch.float32)
            numerator = torch.exp(x_rows - torch.amax(x_rows, dim=1, keepdim=True))
            y[rows, :] = (numerator / torch.sum(numerator, dim=1, keepdim=True)).to(y.dtype)
        return y

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

if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of one fn(), CUDA-graph replays timed by do_bench; without a GPU, NaN: one call, timed not at all."""
    fn()  # compile and warm up outside the timing (on the CPU: the run that checks it)
    if not ON_GPU:
        return math.nan
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")

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
def measure_ladder(steps, elements=2**26 if ON_GPU else 2**15):
    """Each step's forward on one fp32 tensor (on a GPU 256 MB, far past its L2) viewed as rows of 256 and 4096."""
    print(launch_figures())
    x, y, rows = torch.randn(elements, device=DEVICE), torch.empty(elements, device=DEVICE), []
    light = 2 * elements * 4 / bench(lambda: y.copy_(x), graph=False) * 1e-6
    for step, idea, launch in steps:
        for n_cols in (256, 4096):
            xm, ym = x.view(-1, n_cols), y.view(-1, n_cols)
            gbps = 2 * elements * 4 / bench(lambda: launch(xm, ym)) * 1e-6  # bench runs it at least once
            torch.testing.assert_close(ym, torch.softmax(xm, dim=-1))
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbps, "% of light": 100 * gbps / light})
    ladder = pd.DataFrame(rows)
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
    return shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide()  # .data: the table

def providers():  # name -> softmax along the last dim
    found = {"naive": naive_softmax, "torch": lambda t: torch.softmax(t, dim=-1)}
    if inductor:
        warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
    peers = {"Liger": liger and liger.LigerSoftmaxFunction.apply, "quack": quack and quack.softmax,
             "Helion": helion and helion_tuned(helion_softmax, "softmax forward",
                                               [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])}
    return found | {name: fn for name, fn in peers.items() if fn} | {"ours": ours}

def ours(x):  # step 1 on rows of up to MAX_FUSED_N, PyTorch's softmax past them
    if x.shape[-1] > MAX_FUSED_N:
        return torch.softmax(x, dim=-1)
    y = torch.empty_like(x)
    softmax_rows_forward(x, y)
    return y

def sweep(fns):
    """GB/s of each provider's forward, fp32 and bf16, at each N of SWEEP_N, next to a copy."""
    records, missing = [], {}
    for dtype, n_cols in [(dtype, n) for dtype in SWEEP_DTYPES for n in SWEEP_N]:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        out, nbytes = torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = torch.softmax(x.float(), dim=-1)
        for name, fn in fns.items():
            try:
                torch.testing.assert_close(fn(x).float(), reference, atol=1e-2, rtol=1e-2)
                gbs = 2 * nbytes / bench(lambda: fn(x)) * 1e-6
            except Exception as err:  # a peer's limit: its point shows "-", and why is printed below
                if name == "ours":
                    raise
                why = f"{name}: {type(err).__name__}: {' '.join(str(err).split())[:100]}"
                missing.setdefault(why, []).append(n_cols)
                gbs = float("nan")
            records.append({"direction": "forward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                            "GB/s": gbs, "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
    for why, points in missing.items():
        print(f"Not measured at N = {points}: {why}")
    return pd.DataFrame(records)

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def summary(results):
    """The table of GB/s by direction, dtype and N, with ours in % of light and against the best peer; written for
    the site's landing page when the build names a folder for it."""
    fns, index = list(results.provider.unique()), ["direction", "dtype", "N"]
    peers = [p for p in PEERS if p in fns]
    table = results.pivot_table(index=index, columns="provider", values="GB/s", dropna=False)[fns]
    table.insert(0, "speed of light", results.groupby(index)["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table[peers].max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # the summary the site's landing page reads
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_fused_softmax.csv"))
    if not ON_GPU:
        return print(NO_SPEED)
    fmt = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(fmt, na_rep="-")  # the Styler: its .data is the table

def plot(table):
    """Each provider in % of the copy measured beside it, one panel per direction and dtype (on a GPU)."""
    if not ON_GPU:
        return
    table = table.data  # the summary's Styler holds the table
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True, sharey=True, facecolor="white")
    for ax, ((direction, dtype), part) in zip(axes.flat, table.groupby(level=[0, 1], sort=False)):
        for name in part.columns[1:-2]:  # the providers: after the speed of light, before ours in % and vs peers
            ax.plot(part.index.get_level_values("N"), 100 * part[name] / part["speed of light"], marker="o",
                    markersize=3, label=name, linewidth=2.5 if name == "ours" else 1.2)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.label_outer()
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Softmax, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()
    plt.show()

def reading(table, ladder):
    """The sentences that read this run's tables."""
    inside = table[[n in RANGE.get((d, t), ()) for d, t, n in table.index]]
    pct, vs_peer = inside["ours, % of light"], inside["ours / best peer"]
    past = table.drop(inside.index)["ours, % of light"]
    (_, t, n), fp32, n_mid = pct.idxmin(), table.loc["forward"].loc["float32"], SWEEP_N[len(SWEEP_N) // 2]
    packing = ladder.pivot(index="N", columns="step", values="GB/s").pipe(lambda gbs: gbs[1] / gbs[0])  # step 1 / 0
    why = (", short rows: a program spends more of its time starting and reducing than moving bytes" if n <= 1024 else
           ", long rows: one fills much of an SM's registers, leaving few programs to overlap loads and stores"
           if n >= 16384 else "")
    text = [f"Inside its range ours runs at {pct.min():.3g}-{pct.max():.3g}% of the copy (median {pct.median():.3g}%), "
            f"{vs_peer.min():.3g}-{vs_peer.max():.3g}x the best peer; its slowest point is {t} at N = {n}{why}."]
    peers = inside.filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {inside.ours[i]:,.0f})" for i in peers.index if inside.ours[i] < peers.loc[i].max()]
    if lost:
        text.append(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    points = lambda column: ", ".join(f"{t} N = {n}: {v:.4g}%" for (_, t, n), v in column.items())  # noqa: E731
    over = table["ours, % of light"][table["ours, % of light"] > 100]
    if len(over):
        text.append(f"The forward ran above 100% of the copy ({points(over)}) by at most {over.max() - 100:.2g} "
                    "points: it moves the same bytes the same way as the copy (a read for each write), so the gap "
                    "is how the two timings differ (the copy is timed without a CUDA graph), not a faster way to "
                    "move bytes.")
    if "Helion" in table and inside.Helion.notna().any():  # else no point of Helion's ran
        helion_pct, ratio = inside.Helion / inside["speed of light"] * 100, inside.ours / inside.Helion
        text.append(f"Helion's kernel (PyTorch ops on a tile of rows, its launch autotuned) ran inside the range at "
                    f"{helion_pct.min():.3g}-{helion_pct.max():.3g}% of the copy; ours ran {ratio.min():.3g}-"
                    f"{ratio.max():.3g}x its speed.")
    if len(past):
        text.append(f"Past its range ({points(past)}) the site recommends other pages: deep dive 12 for 16-bit "
                    f"rows of 16 K to 32 K (staged in shared memory), deep dive 11 for rows past {MAX_FUSED_N}.")
    text.append(f"At N = {n_mid} in fp32 ours ran {fp32.ours[n_mid] / fp32.naive[n_mid]:.3g}x as fast as the naive "
                f"softmax (the bytes model said 4x). In the ladder, packing short rows ran rows of 256 at "
                f"{packing[256]:.3g}x step 0's speed (rows of 4096, a row a program in both: {packing[4096]:.3g}x): a "
                "memory-bound kernel reaches a copy's speed by moving each byte once with enough bytes in flight "
                "per program.")
    return "\n".join(text)

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (64, 30000)] if ON_GPU else [(17, 1), (33, 257), (3, 20_000)]

TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings (the interpreter's bf16 truncates)

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16, asserted within TOLERANCE."""
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    assert (errors[["step 0", "step 1"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors.style.format({c: "{:.1e}" for c in ("step 0", "step 1", "torch")}).hide(axis="index")

def check_row(shape, dtype):
    """Each step's and torch's relative error against float64 on rows of shape's length, x scaled to spread them."""
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4)
    y64 = torch.softmax(x.double(), dim=-1)
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, launch in (("step 0", plain_softmax_rows), ("step 1", softmax_rows_forward)):
        y = torch.full_like(x, float("nan"))  # a lane left unwritten shows as NaN
        launch(x, y)
        row[name] = ((y.double() - y64).norm() / y64.norm()).item()
    row["torch"] = ((torch.softmax(x, dim=-1).double() - y64).norm() / y64.norm()).item()
    return row

def environment_card():
    """The full environment card, shown collapsed."""
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch": torch.__version__,
            "Triton": triton.__version__, "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
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
# Relative errors against float64, each step's and PyTorch's; ``check`` stops the page past a few roundings.

check(CHECK_SHAPES)

# %%
# The ladder, measured
# --------------------
# Each step on one fp32 tensor viewed as rows of 256 (packing matters) and of 4096 (a row a program in both):

ladder = measure_ladder([(0, "one row a program", plain_softmax_rows), (1, "short rows packed", softmax_rows_forward)])
ladder

# %%
# Benchmark
# ---------
# :math:`2^{26}` elements in rows of N = 256 to 32 K, GB/s; "-": a point a peer cannot run.

table = summary(sweep(providers()))
table

# %%
# Each provider in % of the copy measured beside it:

plot(table)

# %%
# Reading the numbers
# -------------------

print(reading(table.data, ladder.data) if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# **The backward and the drop-in** are the next page, :ref:`sphx_glr_tutorials_01_softmax_backward.py`.
#
# **Deep dives**: :ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`,
# :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py`,
# :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`,
# :ref:`sphx_glr_tutorials_deep_dives_14_autotuning_against_a_launch_model.py`.
#
# **Exercise.** Change ``BYTES_PER_THREAD`` and ``LATENCY``: which rows move, and why?

environment_card()
