"""
Autotuning against a launch model
=================================

The core softmax page (:ref:`sphx_glr_tutorials_01_fused_softmax.py`) computes its launch from a model: a few
numbers read from the device (bandwidth, SMs, threads) and Little's law. An autotuner assumes nothing: it compiles
every config of a search space, times each on the GPU, and keeps the fastest. This page launches the same kernel
three ways at each row length, at the model's config, at ``triton.autotune``'s pick from the very space the model
chooses from, and as a Helion kernel, and sets them against a copy of the same bytes, the speed of light.

**What you will learn**: how to wrap a kernel in ``triton.autotune`` with a search space and a pruning rule, and
what its tuning costs; how far a launch computed from the device falls from the best one a search finds, and where;
and how to read an autotuner's picks back into a model's few numbers, so that the model chooses them without a
search. Prerequisites: the core page above (its step 1 kernel and its launch parameters) and
:ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.
"""

import datetime, functools, math, os, platform, time, timeit

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
# The kernel and its launch model
# -------------------------------
# Carried letter for letter from the core page: its step 1 kernel (``BLOCK_M`` whole rows of ``BLOCK_N`` columns a
# program, in registers) and the lines that choose its launch. The model has two numbers a reader may change:
#
# * ``LATENCY``, through ``min_tile_bytes()``. To keep the memory busy, each SM must have bandwidth x latency / SMs
#   bytes on their way from DRAM at any moment (Little's law). An SM runs 16 programs of 4 warps at once (its 2048
#   threads), so each program's tile must hold at least a 16th of that: the fewest bytes of a tile. Rows shorter than
#   that are packed, ``BLOCK_M`` of them, into such a tile; a longer row is a tile of its own.
# * ``BYTES_PER_THREAD``: the most bytes of the tile one thread loads. The model gives a tile enough warps (4 to
#   32) that no thread loads more.
#
# So the model's choice at a row length is one point of a small space: ``BLOCK_M`` and ``num_warps``, each a power
# of two. That space is what the autotuner below searches.

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

# (BLOCK_M, BLOCK_N, num_warps): the model's launch for rows of n_cols elements of element_size bytes
def _fused_config(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return block_m, block_n, num_warps

RANGE = {}  # the N the site recommends this page for: none (it compares ways to choose a launch, not a kernel)

def model_softmax(x):
    """softmax(x) along its rows at the model's launch (the core page's ``softmax_rows_forward``)."""
    y = torch.empty_like(x)
    block_m, block_n, num_warps = _fused_config(x.shape[1], x.element_size())
    softmax_fwd_kernel[(triton.cdiv(x.shape[0], block_m),)](x, y, *x.shape, x.stride(0), y.stride(0),
                                                            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return y

# %%
# The autotuner's search space
# ----------------------------
# ``triton.autotune(configs, key)`` wraps a kernel: the first call at each new value of the ``key`` arguments (and
# new dtypes) runs every config of ``configs`` on that call's own arguments, times each, and keeps the fastest for
# that key; later calls launch it at once. A ``triton.Config`` holds the ``constexpr`` values it sets and launch
# options such as ``num_warps``; the caller passes the rest (here ``BLOCK_N``, fixed by the row) and the grid as a
# function of the config. ``prune_configs_by={"early_config_prune": ...}`` drops configs before any is compiled.
#
# The space is the model's own, and a little more: ``BLOCK_M`` from 1 to 16 (powers of two) holds every pick the
# model makes at rows of 256 or more where ``min_tile_bytes()`` is at most 8 KB (the table below gives this GPU's),
# and more rows where it is less; ``num_warps`` runs over the model's clamp (4 to 32) and the two powers below it,
# which the model never picks (one warp reduces its rows in registers: no shared memory, no barrier between warps).
# Pruned, at each row length, to tiles of at most ``MAX_FUSED_N`` elements, the largest the model launches, and to
# at most 4 x ``BYTES_PER_THREAD`` bytes a thread (past that its values crowd its 255 registers). On a GPU the
# autotuner times each config with Triton's benchmarker (the median of many runs); under the interpreter, once on
# the CPU's wall clock.

WARPS = [1, 2, 4, 8, 16, 32]  # _fused_config's clamp (4 to 32), and below it
BLOCK_MS = [1, 2, 4, 8, 16]  # rows of 256 or more in a tile
SPACE = [triton.Config({"BLOCK_M": block_m}, num_warps=num_warps) for block_m in BLOCK_MS for num_warps in WARPS]

def fits(configs, named_args, **kwargs):
    """The configs whose tile (BLOCK_M rows of BLOCK_N) holds at most MAX_FUSED_N elements, at most 4 x
    BYTES_PER_THREAD bytes of x a thread."""
    size = named_args["x_ptr"].element_size()
    return [c for c in configs if (tile := c.kwargs["BLOCK_M"] * kwargs["BLOCK_N"]) <= MAX_FUSED_N
            and tile * size <= 4 * BYTES_PER_THREAD * 32 * c.num_warps]

def wall_clock(fn, quantiles=None):
    """The interpreter's stand-in for Triton's benchmarker: one call, in ms, as [median, 20th, 80th percentile]."""
    return [1e3 * timeit.timeit(fn, number=1)] * 3

# on a GPU, Triton's do_bench over 20 ms a config: its default, 100 ms, would make each tuning five times as long
autotuned = triton.autotune(SPACE, key=["n_cols"], prune_configs_by={"early_config_prune": fits},
                            do_bench=functools.partial(triton.testing.do_bench, warmup=5, rep=20) if ON_GPU
                            else wall_clock)(softmax_fwd_kernel)

def autotuned_softmax(x):
    """softmax(x) along its rows at the autotuner's pick for this row length and dtype (it tunes on a first call)."""
    y = torch.empty_like(x)
    autotuned[lambda meta: (triton.cdiv(x.shape[0], meta["BLOCK_M"]),)](
        x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return y

# %%
# At each row length of the sweep, the configs the autotuner tries and the model's pick among them:

SWEEP_DTYPES = (torch.float32, torch.bfloat16)
SWEEP_N = [256, 1024, 4096, 16384]  # every other power of two: each point costs the build a tuning

def describe(block_m, block_n, num_warps):
    return f"{block_m} x {block_n}, {num_warps} warps"

def space_row(dtype, n_cols):
    block_m, block_n, num_warps = _fused_config(n_cols, dtype.itemsize)
    x = {"x_ptr": torch.empty(0, dtype=dtype)}  # what the autotuner hands its pruning rule: the arguments by name
    tried = [(c.kwargs["BLOCK_M"], c.num_warps) for c in fits(SPACE, x, BLOCK_N=block_n)]
    return {"dtype": str(dtype)[6:], "N": n_cols, "model's config": describe(block_m, block_n, num_warps),
            "configs tried": len(tried), "model's pick in the space": (block_m, num_warps) in tried}

space = pd.DataFrame([space_row(t, n) for t in SWEEP_DTYPES for n in SWEEP_N]).set_index(["dtype", "N"])
assert space["model's pick in the space"].all(), space
print(f"The space: {len(BLOCK_MS)} values of BLOCK_M x {len(WARPS)} of num_warps = {len(SPACE)} configs; "
      f"{space['configs tried'].min()} to {space['configs tried'].max()} a row length after pruning, "
      f"{space['configs tried'].sum()} over the sweep.")
space

# %%
# Correctness
# -----------
# Both launches against float64 at rows that are not powers of two (relative errors; the autotuner tunes at each
# row length and dtype, its ``key``, so each check runs its own pick); Helion's at every point of the sweep below.

CHECK_SHAPES = [(33, 257), (5, 3000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings (the interpreter's bf16 truncates)

def relative_error(y, x):
    y64 = torch.softmax(x.double(), dim=-1)
    return ((y.double() - y64).norm() / y64.norm()).item()

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4)
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for way, softmax in (("model", model_softmax), ("autotuner", autotuned_softmax)):
        row[way] = relative_error(softmax(x), x)
    return row

errors = pd.DataFrame([check_row(s, t) for t in SWEEP_DTYPES for s in CHECK_SHAPES])
assert (errors[["model", "autotuner"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
errors.style.format({"model": "{:.1e}", "autotuner": "{:.1e}"}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# At each point (dtype, N; :math:`M N = 2^{26}` elements on a GPU) the page times a copy of the tensor (the speed of
# light, without a CUDA graph: CUDA may make a captured copy a slower copy-engine transfer) and runs each way once on
# a wall clock, its *first call*: the model's compiles one kernel; the autotuner's compiles and times every config of
# its space, its *tuning*; Helion's compiles at its stored config, or autotunes. Each result is checked against
# float64; then :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA graph of each call. GB/s
# counts :math:`x` read and :math:`y` written. The autotuner keeps its timing of every config it tried
# (``configs_timings``, without a graph): the last section reads the model against those. Where an earlier run left
# the configs in Triton's cache (the site's build compiles every page first), the tuning is the timing alone.
#
# Helion, where installed, runs the core page's ``helion_softmax`` at the configs its search found for each point on
# this GPU (``helion_tuned``), autotuning where none is stored; without a GPU, in its reference mode (values only).

# %%
import collections, importlib.metadata, importlib.util, json, pathlib, subprocess

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**15

def load_helion():
    """Helion's module, or None (no column), saying why in one line."""
    why = "not installed" if importlib.util.find_spec("helion") is None else ""
    try:
        return print(f"Helion: not measured here ({why}).") if why else importlib.import_module("helion")
    except Exception as err:  # installed, yet it does not load here
        print(f"Helion: not measured here ({' '.join(f'{type(err).__name__}: {err}'.split())[:100]}).")

helion = load_helion()
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

def helion_searches(op):
    """{(dtype, N): (seconds, configs tested)} of Helion's searches on this GPU, from helion_tuned's file; else NaN."""
    path = pathlib.Path(os.environ.get("SOL_HELION_CONFIGS", ""))
    entry = json.loads(path.read_text()).get(WHERE, {}) if path.is_file() else {}
    return collections.defaultdict(lambda: (math.nan, math.nan), {
        (t, int(n)): (r.get("seconds", math.nan), r.get("tested", math.nan))
        for t, by_n in entry.get("configs", {}).get(op, {}).items() for n, r in by_n.items()})

def ways():
    """Way -> softmax(x) along the rows: the model's launch, the autotuner's, Helion's where it runs."""
    found = {"model": model_softmax, "autotuner": autotuned_softmax}
    if helion and ON_GPU:
        found["Helion"] = helion_tuned(helion_softmax, "softmax forward",
                                       [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])
    elif helion:
        helion_softmax.settings.ref_mode = helion.RefMode.EAGER
        print("Helion: run in its reference mode (eager PyTorch on the CPU): its values are checked; nothing is "
              "compiled or tuned.")
        found["Helion"] = helion_softmax
    return found

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

def first_call(fn):
    """(fn()'s result, its wall-clock seconds, the GPU's work included)."""
    sync = torch.cuda.synchronize if ON_GPU else lambda: None
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start

def helion_config(x, block_n):
    """The config Helion ran x at (its rows a tile and warps), where it says; "-" in reference mode."""
    config = getattr(helion_softmax.bind((x,)), "_config", None)
    return describe(config.block_sizes[0], block_n, config.num_warps) if ON_GPU and config else "-"

def sweep(fns):
    """Per point: each way's config, first call, error against float64 and GB/s next to a copy's; and the
    autotuner's timing of every config it tried, {(dtype, N): {(BLOCK_M, num_warps): ms}}."""
    records, tuning, searched = [], {}, helion_searches("softmax forward")
    autotuned.cache.clear()  # every point tunes here, whatever ran before
    for dtype in SWEEP_DTYPES:
        for n_cols in SWEEP_N:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            out, nbytes, block_n = torch.empty_like(x), 2 * x.numel() * x.element_size(), triton.next_power_of_2(n_cols)
            light = nbytes / bench(lambda: out.copy_(x), False) * 1e-6
            row = {"dtype": str(dtype)[6:], "N": n_cols, "copy: GB/s": light}
            for way, fn in fns.items():
                try:
                    y, row[f"{way}: first call s"] = first_call(lambda: fn(x))
                except RuntimeError as err:  # Helion at a point with no stored config, in a build that tunes none
                    if "SOL_HELION_AUTOTUNE=0" not in str(err):
                        raise
                    continue
                row[f"{way}: error"] = relative_error(y, x)
                assert row[f"{way}: error"] <= TOLERANCE[row["dtype"]], (way, row)
                del y
                row[f"{way}: ms"] = bench(lambda: fn(x))
                row[f"{way}: GB/s"] = nbytes / row[f"{way}: ms"] * 1e-6
                row[f"{way}: % of light"] = 100 * row[f"{way}: GB/s"] / row["copy: GB/s"]
                if way == "model":
                    row["model: config"] = describe(*_fused_config(n_cols, x.element_size()))
                elif way == "autotuner":
                    pick = autotuned.best_config
                    row["autotuner: config"] = describe(pick.kwargs["BLOCK_M"], block_n, pick.num_warps)
                    row["autotuner: configs tried"] = len(autotuned.configs_timings)
                    tuning[row["dtype"], n_cols] = {(c.kwargs["BLOCK_M"], c.num_warps): t[0] if isinstance(t, list)
                                                    else t for c, t in autotuned.configs_timings.items()}
                else:
                    row["Helion: config"] = helion_config(x, block_n)
                    row["Helion: tuned s"], row["Helion: configs tested"] = searched[row["dtype"], n_cols]
            records.append(row)
            del x, out
    return pd.DataFrame(records).set_index(["dtype", "N"]), tuning

def summary(results):
    """The table: each way's config, GB/s and % of light, the autotuner's search and tuning (on a GPU); under the
    interpreter, the configs the model picks and the size of the search."""
    if not ON_GPU:  # the interpreter's times are no GPU's speeds, and its picks follow them
        print("The autotuner ran here through Triton's interpreter, each config timed by one call on the CPU's wall "
              "clock: its picks follow the interpreter, not a GPU, and are not shown.")
        shown = results[["model: config", "autotuner: configs tried"]]
    else:
        columns = ["copy: GB/s", "model: config", "model: GB/s", "model: % of light", "autotuner: config",
                   "autotuner: GB/s", "autotuner: % of light", "autotuner: configs tried", "autotuner: first call s"]
        if "Helion: GB/s" in results:
            columns += [f"Helion: {c}" for c in ("config", "GB/s", "% of light", "tuned s", "configs tested",
                                                 "first call s") if f"Helion: {c}" in results]
        shown = results[columns]
    shown = shown.set_axis(pd.MultiIndex.from_tuples([tuple(c.split(": ")) for c in shown.columns]), axis=1)
    fmt = {c: "{:,.0f}" if c[1] == "GB/s" else "{:.3g}%" if c[1] == "% of light" else "{:.3g}"
           for c in shown.columns if c[1] not in ("config", "configs tried")}
    return shown.style.format(fmt, na_rep="-")  # the Styler: its .data is the table

def plot(results):
    """Each way in % of the copy measured beside it, one panel per dtype (on a GPU)."""
    if not ON_GPU:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white")
    for ax, (dtype, part) in zip(axes, results.groupby(level="dtype", sort=False)):
        n = part.index.get_level_values("N")
        for way, style in (("model", "o-"), ("autotuner", "s--"), ("Helion", "^:")):
            if f"{way}: GB/s" in part:
                ax.plot(n, part[f"{way}: % of light"], style, markersize=4, label=f"{way}'s launch")
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"softmax forward, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.label_outer()
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"One kernel, three launches, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()
    plt.show()

def point(key):
    return f"{key[0]} N = {key[1]}"

def span(values, digits=".2g"):  # "2.1-7.9", or "7.9" for one value
    low, high = f"{values.min():{digits}}", f"{values.max():{digits}}"
    return low if low == high else f"{low}-{high}"

LABEL = {"model": "the model's launch", "autotuner": "the autotuner's", "Helion": "Helion's"}
NOISE = 1  # %: run to run, a way faster by less than this is not called faster

def reading(results):
    """The sentences that read this run's table."""
    names = [w for w in ("model", "autotuner", "Helion") if f"{w}: GB/s" in results]
    gbs = results[[f"{w}: GB/s" for w in names]].set_axis(names, axis=1)
    pct = results[[f"{w}: % of light" for w in names]].set_axis(names, axis=1)
    text = ["Of the copy's speed, " + "; ".join(f"{LABEL[w]} ran at {pct[w].min():.3g}-{pct[w].max():.3g}% (median "
                                                f"{pct[w].median():.3g}%)" for w in names) + "."]
    winner = gbs.idxmax(axis=1)
    lead = 100 * (gbs.max(axis=1) / gbs.apply(lambda r: r.nlargest(2).iloc[-1], axis=1) - 1)  # % over the next
    clear = lead > NOISE
    wins = [f"{LABEL[w]} at {(won := clear & (winner == w)).sum()}" + (
        f" (by up to {lead[won].max():.2g}%, at {point(lead[won].idxmax())})" if won.any() else "") for w in names]
    text.append(f"Fastest by more than {NOISE}% over the next, of {len(gbs)} points: {', '.join(wins)}; the fastest "
                f"two were within {NOISE}% at {(~clear).sum()}.")
    same = results["autotuner: config"] == results["model: config"]
    ratio = (gbs.autotuner / gbs.model)[~same]
    text.append(f"The autotuner picked the model's own config at {same.sum()} of {len(same)} points"
                + (f"; elsewhere its pick ran at {ratio.min():.4g}-{ratio.max():.4g}x the model's GB/s (median "
                   f"{ratio.median():.4g}x; the most, at {point(ratio.idxmax())})." if len(ratio) else "."))
    extra = results["autotuner: first call s"] - results["model: first call s"]
    saved = (results["model: ms"] - results["autotuner: ms"])[~same] / 1e3  # seconds a call, where the picks differ
    gained = saved[saved > NOISE / 100 * results["model: ms"][saved.index] / 1e3]  # past the noise
    calls = extra[gained.index] / gained
    text.append(f"Tuning took {extra.min():.3g}-{extra.max():.3g} s a point beyond the model's first call "
                f"({extra.sum():.3g} s in all, {results['autotuner: configs tried'].sum()} configs timed, compiled "
                "where Triton's cache lacked them). "
                + (f"Where its pick beat the model's launch by more than {NOISE}% ({len(calls)} of {len(results)} "
                   f"points), a call saved at most {1e6 * gained.max():.3g} µs, so the tuning pays for itself after "
                   f"about {calls.min():,.0f} calls at {point(calls.idxmin())}"
                   + (f" and {calls.max():,.0f} at {point(calls.idxmax())}" if len(calls) > 1 else "")
                   + "; at the other points it never does." if len(calls) else
                   "It picked the model's own config everywhere: the tuning confirmed the model and bought nothing "
                   "else." if same.all() else f"Where its pick differed it ran within {NOISE}% of the model's "
                   "launch, the least gap this page calls faster: the tuning bought nothing measurable in this run."))
    if "Helion" in names:
        alike = results["Helion: config"] == results["model: config"]
        slower = (100 * (1 - gbs.Helion / gbs.model))[alike]
        slower = slower[slower > NOISE]
        if len(slower):
            text.append(f"At {', '.join(point(k) for k in slower.index)} Helion ran the model's own launch (the same "
                        f"rows a tile and warps) {span(slower)}% slower than the model's: "
                        "the same tile, so the gap lies in what else its config sets (loads' eviction, stages, "
                        "indexing) or in the code it generates.")
        text.append(f"Helion's first call took {results['Helion: first call s'].min():.3g}-"
                    f"{results['Helion: first call s'].max():.3g} s a point: its compile at a stored config, or its "
                    "autotuning where none was stored (the Helion line above says which).")
        tuned, tested = (results.get(f"Helion: {c}", pd.Series()).dropna() for c in ("tuned s", "configs tested"))
        text.append(f"Its search (effort quick, ahead of the build) took {tuned.min():.3g}-{tuned.max():.3g} s a point "
                    f"at the {len(tuned)} of {len(results)} points whose time was stored ({tuned.sum():.3g} s in all)"
                    + (f" and tested {span(tested, '.0f')} configs a point ({tested.sum():.0f} in all; the autotuner "
                       f"tried {span(results['autotuner: configs tried'], '.0f')})" if len(tested) else "") + "."
                    if len(tuned) else "Its search's time was not stored with its configs.")
    return "\n".join(text)

def model_pick(n_cols, element_size, tile_bytes, per_thread):
    """(BLOCK_M, num_warps) that _fused_config gives with tiles of at least tile_bytes, per_thread bytes a thread."""
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, tile_bytes // (block_n * element_size))
    return block_m, min(32, max(4, block_m * block_n * element_size // (32 * per_thread)))

def implied(results, tuning):
    """Per point, the model's config and the autotuner's pick read as the model's numbers: each one's tile and bytes
    a thread, and the model's config by the autotuner's own timings (its time over the best, its rank)."""
    rows = []
    for (dtype, n_cols), times in tuning.items():
        size, block_n = getattr(torch, dtype).itemsize, triton.next_power_of_2(n_cols)
        best = min(times, key=times.get)
        model = model_pick(n_cols, size, min_tile_bytes(), BYTES_PER_THREAD)
        rows.append({"dtype": dtype, "N": n_cols, "model: tile": model[0] * block_n, "pick: tile": best[0] * block_n,
                     "model: bytes a thread": model[0] * block_n * size // (32 * model[1]),
                     "pick: bytes a thread": best[0] * block_n * size // (32 * best[1]), "pick: warps": best[1],
                     "model: time / best": times[model] / times[best],
                     "model: rank": sorted(times.values()).index(times[model]) + 1, "configs tried": len(times)})
    return pd.DataFrame(rows).set_index(["dtype", "N"])

def refit(tuning):
    """Every (tile bytes, bytes a thread), powers of two, whose picks lie in the space at every point, scored by the
    autotuner's own timings: the geometric mean and the worst of its picks' time over the best, and the points where
    it picks what the autotuner picked. Best first; a tie goes to the smaller change from the model's numbers."""
    rows, now = [], (min_tile_bytes(), BYTES_PER_THREAD)
    for tile_bytes in [2**k for k in range(10, 18)]:  # 1 KB to 128 KB
        for per_thread in (16, 32, 64, 128, 256):
            slow, same = [], 0
            for (dtype, n_cols), times in tuning.items():
                pick = model_pick(n_cols, getattr(torch, dtype).itemsize, tile_bytes, per_thread)
                slow.append(times.get(pick, math.inf) / min(times.values()))
                same += pick == min(times, key=times.get)
            if math.isfinite(max(slow)):
                change = abs(math.log2(tile_bytes / now[0])) + abs(math.log2(per_thread / now[1]))
                rows.append({"tile bytes": tile_bytes, "bytes a thread": per_thread,
                             "time / best": math.prod(slow) ** (1 / len(slow)), "worst": max(slow),
                             "same picks": same, "change": change, "the model's": (tile_bytes, per_thread) == now})
    return pd.DataFrame(rows).sort_values(["time / best", "change"]).reset_index(drop=True)

def adjusting(table, fits_):
    """The sentences that read the model against the autotuner's timings, and the numbers that would close the gap."""
    props = torch.cuda.get_device_properties(DEVICE)
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    programs, sms = props.max_threads_per_multi_processor // (4 * 32), props.multi_processor_count
    now, best = fits_[fits_["the model's"]].iloc[0], fits_.iloc[0]
    worst = table["model: time / best"].idxmax()
    at = table.loc[worst]
    text = [f"By the autotuner's own timings the model's config was the best of its space at "
            f"{(table['model: rank'] == 1).sum()} of {len(table)} points; over all of them it took "
            f"{now['time / best']:.4g}x the best config's time (geometric mean), {now['worst']:.4g}x at the worst"
            + (f" ({point(worst)}, where the autotuner's tile was {int(at['pick: tile']):,} elements at "
               f"{int(at['pick: bytes a thread'])} bytes a thread against the model's {int(at['model: tile']):,} at "
               f"{int(at['model: bytes a thread'])})." if now["worst"] > 1 else ".")]
    below = table.index[table["pick: warps"] < 4]  # under _fused_config's floor of 4 warps: no pair gives those
    if len(below):
        text.append(f"At {', '.join(point(k) for k in below)} the autotuner picked fewer than 4 warps, below the "
                    "model's floor: a term it lacks (one warp reduces its rows in registers). That floor cost it "
                    f"{table.loc[below, 'model: time / best'].max():.3f}x the best config's time there, at most.")
    if best["the model's"]:
        text.append(f"No other pair of tile bytes and bytes a thread (powers of two) does better: the model's "
                    f"numbers (tiles of {min_tile_bytes():,} bytes or more, {BYTES_PER_THREAD} bytes a thread) stand "
                    "on this GPU.")
    else:
        tile, per_thread = int(best["tile bytes"]), int(best["bytes a thread"])
        text.append(f"The pair closest to the autotuner is tiles of {tile:,} bytes or more and {per_thread} bytes a "
                    f"thread: {best['time / best']:.3g}x the best time (worst {best['worst']:.3g}x), the autotuner's "
                    f"own pick at {best['same picks']} of {len(table)} points against the model's "
                    f"{now['same picks']}.")
        if tile != min_tile_bytes() and tile > 2048 and bandwidth:  # as min_tile_bytes() reads it
            low, high = tile / 2 * programs * sms / bandwidth, tile * programs * sms / bandwidth
            text.append(f"A tile of {tile:,} bytes is {tile * programs / 1024:.3g} KB in flight an SM over its "
                        f"{programs} programs of 4 warps; min_tile_bytes() gives it for LATENCY between "
                        f"{1e6 * low:.3g} and {1e6 * high:.3g} µs at this GPU's {bandwidth / 1e12:.3g} TB/s and {sms} "
                        f"SMs (it is {1e6 * LATENCY:.3g} µs now).")
    return "\n".join(text)

def environment_card():
    """The full environment card, shown collapsed."""
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
# Three launches, measured
# ------------------------
# Each way's config, GB/s, % of the copy and first call (the autotuner's: its tuning); Helion's search (seconds,
# configs tested), where stored. Past 100%: the copy is timed without a CUDA graph, each way through one; the autotuner timed its configs
# without one, so its pick may trail another it tried by up to ``NOISE``. Every point moves 2^26 elements, waves of
# programs at every launch: fewer rows than fill the GPU are not measured here.

results, tuning = sweep(ways())
table = summary(results)
table

# %%
# Each way in % of the copy measured beside it:

plot(results)

# %%
# Reading the numbers
# -------------------

print(reading(results) if ON_GPU else NO_SPEED)

# %%
# Making the model choose what the autotuner chose
# ------------------------------------------------
# The two picks meet in the model's terms. A config's *tile* is ``BLOCK_M`` x ``BLOCK_N`` elements: the model's is
# ``min_tile_bytes()`` for short rows and one row past it, so a pick of a bigger tile at short rows says the SM needs
# more bytes in flight than bandwidth x ``LATENCY`` / SMs (a longer ``LATENCY`` gives them); a pick of one row where
# the model packs several says it needs fewer. Its *bytes a thread* are the tile's bytes over ``32 * num_warps``
# threads: the model gives each at most ``BYTES_PER_THREAD``. The autotuner timed every config, the model's included,
# so it also says what the model's choice costs at each point: below, its time over the best config's and its rank.
#
# Changing the numbers: try every pair of tile bytes and bytes a thread (powers of two) whose picks lie in the
# space, score each by the autotuner's own timings of the configs it would pick, and keep the best. One pair for
# every row length and both dtypes is the point of a model: where no pair comes close, the model lacks a term (the
# dtype, the row's length), not a number.

comparison = implied(results, tuning) if ON_GPU else None
print(adjusting(comparison, refit(tuning)) if ON_GPU else NO_SPEED)
comparison if comparison is None else comparison.style.format(
    {"model: time / best": "{:.3f}x", "model: tile": "{:,}", "pick: tile": "{:,}"})

# %%
# Going further
# -------------
# * **Exercise.** Where the last section names a pair other than the model's, set ``LATENCY`` and
#   ``BYTES_PER_THREAD`` above to it and rerun the page: does the model now pick what the autotuner picks, and does the
#   core page's benchmark move? Where it names none, shift each number by a power of two and watch the picks' cost.
# * **Exercise.** Widen the space (``BLOCK_M`` past 16, ``num_stages``) and watch the tuning time grow against what
#   the picks gain. ``prune_configs_by`` also takes a ``perf_model`` and ``top_k``: the model can rank the space.
# * Where a model and an autotuner disagree the model can also be missing a term: deep dive 13
#   (:ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`) reads the compiled kernel (registers, programs an
#   SM) that such a term would come from.
#
# Where this page was made
# ------------------------

environment_card()
