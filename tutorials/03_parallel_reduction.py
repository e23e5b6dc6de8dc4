"""
Parallel reduction
==================

A sum reads many numbers and writes one: memory sets its speed. You write the row sums of a matrix, ``x.sum(dim=1)``,
in Triton and measure them against PyTorch, ``torch.compile`` and the *speed of light*, a kernel that only reads the
same input, on the GPU that built this page.

**What you will learn**: to count a reduction's bytes; your first Triton kernel; a tile of fixed size that walks long
rows and packs short ones. No Triton needed beforehand. Rows of up to 64 K elements; the next page sums a whole tensor
and makes a drop-in for :func:`torch.sum`.
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
# The bytes model
# ---------------
# ``x.sum(dim=1)`` on an :math:`M \times N` matrix reads every element once and writes one a row:
# :math:`4MN + 4M` bytes in fp32, :math:`2MN + 2M` in bf16. One addition an element leaves the arithmetic units idle,
# so a perfect sum takes as long as *reading* ``x``: its speed of light is a **read-only pass** over the same tensor. A
# sum over other dims is the same problem, those dims moved last.
#
# Step 0: the plain kernel
# ------------------------
# Each program sums one row. The Triton it needs:
#
# * ``@triton.jit`` compiles a Python function for the GPU; ``kernel[(n,)](...)`` runs ``n`` copies, the *programs*,
#   each of ``num_warps`` warps of 32 threads; ``tl.program_id(0)`` is a program's number, here its row.
# * A tensor arrives as a pointer to its first element; pointer plus offsets (in elements, like torch's strides) is a
#   block of addresses, offsets in ``int64`` to pass 2**31.
# * ``tl.arange(0, BLOCK_N)`` is the block 0, 1, ..., BLOCK_N - 1; ``BLOCK_N: tl.constexpr`` is fixed at compile
#   time, a power of two: the row's length rounded up.
# * ``tl.load`` reads where ``mask`` is true and gives ``other`` elsewhere (0 adds nothing); ``tl.store`` writes.
#   ``.to`` converts: the sum is fp32 whatever ``x``'s dtype (a bf16 total stops growing once each term is under half
#   its last bit).
# * ``tl.sum`` adds a block as a *tree* (each thread its values, then a warp's threads in halves, then the warps),
#   a few roundings from a running sum.
#
# Both strides are arguments: a column sum is this kernel on ``x.T``.

@triton.jit
def plain_row_sum_kernel(x_ptr, out_ptr, n_cols, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_m + cols.to(tl.int64) * stride_n, mask=cols < n_cols, other=0.0)
    total = tl.sum(x.to(tl.float32), axis=0)
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))

PLAIN_MAX_N = 16384  # the whole row in registers: 32 fp32 a thread with 16 warps; longer rows would spill

def plain_sum_rows(x2d, out):  # out[i] = sum of row i of x2d (any strides)
    n_rows, n_cols = x2d.shape
    if n_cols > PLAIN_MAX_N:
        raise ValueError(f"plain_sum_rows: rows of {n_cols} elements; at most {PLAIN_MAX_N} fit in registers")
    block_n = triton.next_power_of_2(n_cols)
    num_warps = min(16, max(1, block_n // 256))  # 8 elements a thread to 16 warps (rows of 4096), then more
    plain_row_sum_kernel[(n_rows,)](x2d, out, n_cols, *x2d.stride(), BLOCK_N=block_n, num_warps=num_warps)

# %%
# Two limits: the row must fit in registers, and a short row gives a program little to read (64 fp32: 256 bytes) to
# keep memory busy.
#
# Step 1: a tile of fixed size
# ----------------------------
# A tile of 8192 elements (32 KB of fp32), ``BLOCK_M`` rows of ``BLOCK_N``: ``rows[:, None]`` and ``cols[None, :]``
# broadcast, as in torch, into its addresses. ``tl.range`` loops in the kernel: a long row is walked ``BLOCK_N`` columns
# a step into a ``tl.zeros`` fp32 tile, summed along ``axis=1`` at the end. Short rows share a tile: 128 rows of 64, 32
# KB of fp32 to read instead of 256 bytes. ``if EVEN:`` tests a ``tl.constexpr``, settled when the kernel compiles:
# where every tile is full, no masks: an instruction or two less an element, which short 16-bit rows show.
# ``evict_first`` marks the lines as read once: L2 drops them before lines that may be read again.

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

# %%
# **Launch parameters.** Memory stays busy when each SM has bandwidth x latency / SMs bytes in flight (Little's law;
# the ladder below prints this GPU's): a tile of 8192 elements, 16 warps of 16 a thread (four 16-byte
# loads in fp32), several programs an SM (measured: 2-6% faster than 4096 on rows of 4 K to 64 K).
#
# **The range.** ``RANGE``: rows of up to 64 K elements. The benchmark's 2**26 elements in rows that long make 1024
# programs; in rows of 2**20, 64, and most SMs wait.

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

RANGE = {("row sums", t): range(1, 65536 + 1) for t in ("float32", "bfloat16")}  # fp16: as bf16

# %%
# Appendix: how this page measures
# --------------------------------
# :func:`triton.testing.do_bench` (median, L2 flushed) times replays of a CUDA graph of each call: the GPU's cost, not
# Python's. GB/s counts the input, read once. The speed of light's read-only pass xors the tensor's 32-bit words into
# one word a program (``tl.xor_sum``), so that no load can be dropped; each benchmark takes the faster of
# ``READ_CONFIGS``: a measurement, not a proof. The copy beside it (bytes read and written) is timed without a graph,
# where CUDA may use a slower copy engine. The functions below are the page's machinery (the check, peers, timer,
# sweep, tables, plot, the sentences that read the numbers); the cells after the appendix call them.

# %%
import platform, subprocess, timeit
import matplotlib.pyplot as plt
import pandas as pd

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4: the CPU's stand-in

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
TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings (the interpreter's bf16 truncates)

def yardsticks(x):
    """(speed of light, copy) GB/s on x: the faster of READ_CONFIGS, and the copy."""
    nbytes, copy_out = x.numel() * x.element_size(), torch.empty_like(x)
    copy = 2 * nbytes / bench(lambda: copy_out.copy_(x), graph=False) * 1e-6
    if not ON_GPU:
        return copy, copy
    del copy_out
    return max(nbytes / bench(lambda c=c: read_pass(x, **c)) * 1e-6 for c in READ_CONFIGS), copy

CHECK_SHAPES = ([(4099, 1031), (7, 16384), (3_000_017, 7), (1031, 4099, "x.T")] if ON_GPU else
                [(257, 65), (3, 5003), (1000, 3), (65, 129, "x.T")])

def check(shapes):
    """Each step's and torch's relative error against the float64 row sums, fp32, fp16 and bf16, on short and long
    rows and on columns (rows of x.T, read N apart); the page stops unless ours are within TOLERANCE."""
    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for m, n, *layout in shapes:
            torch.manual_seed(m + n)
            x = (torch.randn(m, n, device=DEVICE) + 0.5).to(dtype)  # a non-zero mean, as activations have
            x = x.t() if layout else x
            ref = x.double().sum(1)
            row = {"rows x N": f"{x.shape[0]} x {x.shape[1]}" + (" (x.T)" if layout else ""), "dtype": str(dtype)[6:]}
            for name, launch in (("step 0", plain_sum_rows), ("step 1", sum_rows)):
                out = torch.full((x.shape[0],), float("nan"), device=DEVICE, dtype=dtype)  # unwritten: NaN
                launch(x, out)
                row[name] = ((out.double() - ref).norm() / ref.norm()).item()
            row["torch"] = ((x.sum(1).double() - ref).norm() / ref.norm()).item()
            rows.append(row)
    errors = pd.DataFrame(rows)
    assert (errors[["step 0", "step 1"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors.style.format({c: "{:.1e}" for c in ("step 0", "step 1", "torch")}).hide(axis="index")

LADDER_ELEMENTS = 2**26 if ON_GPU else 2**14  # 256 MB of fp32 on the GPU

def measure_ladder():
    """Each step on one fp32 tensor viewed as rows of 64 (packing matters) and of 4096 (one row a program is enough);
    each result checked against float64 first."""
    x = torch.randn(LADDER_ELEMENTS, device=DEVICE)
    light, row_out = yardsticks(x)[0], torch.empty(LADDER_ELEMENTS // 64, device=DEVICE)
    steps = [(0, "one row a program, whole in registers", plain_sum_rows),
             (1, "8192-element tiles: loop along long rows, pack short ones", sum_rows)]
    rows = []
    for step, idea, launch in steps:
        for n_cols in (64, 4096):
            xm = x.view(-1, n_cols)
            launch(xm, row_out)
            torch.testing.assert_close(row_out[:xm.shape[0]], xm.double().sum(1).float(), atol=1e-3 * n_cols**0.5,
                                       rtol=1e-4)
            gbps = LADDER_ELEMENTS * 4 / bench(lambda: launch(xm, row_out)) * 1e-6
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbps, "% of light": 100 * gbps / light})
    return pd.DataFrame(rows)

def launch_figures():  # Little's law with this GPU's figures: printed above the ladder
    if not ON_GPU:
        return "No GPU here: the interpreter runs the same tiles of 8192 elements."
    props = torch.cuda.get_device_properties(DEVICE)
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return f"This {props.name} does not report its memory clock and width: a tile of 8192 elements, several an SM."
    return (f"On this {props.name}: {bandwidth / 1e12:.2f} TB/s (peak) x 1 µs / {props.multi_processor_count} SMs = "
            f"{bandwidth * 1e-6 / props.multi_processor_count / 1024:.0f} KB in flight an SM; a tile of 8192 "
            f"elements is 32 KB in fp32, 16 KB in bf16, and an SM runs several.")
def show_ladder(ladder):
    """The ladder table (step | idea | N on the CPU, whose interpreter times are no GPU's speeds)."""
    print(launch_figures())
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}",
                               "% of light": "{:.3g}%"}).hide(axis="index")

ROWS_ELEMENTS, SWEEP_N = (2**26, [16, 64, 256, 1024, 4096, 16384, 65536, 2**20]) if ON_GPU else (2**14, [16, 256, 4096])

def providers(out):
    """name -> the row sums of a matrix (ours writes them to ``out``); torch.compile on a GPU only."""
    found = {"torch": lambda t: t.sum(dim=1)}
    if ON_GPU:
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        found["torch.compile"] = torch.compile(lambda t: t.sum(dim=1), dynamic=False)
    return found | {"ours": lambda t: sum_rows(t, out)}

def measure_sweep():
    """GB/s and error of each provider's row sums, fp32 and bf16, on ROWS_ELEMENTS elements as rows of each N."""
    if not ON_GPU:
        peer_missing("torch.compile", "no GPU")
    records = []
    for dtype in (torch.float32, torch.bfloat16):
        for n in SWEEP_N:
            x = torch.randn(ROWS_ELEMENTS // n, n, device=DEVICE, dtype=dtype)
            out, reference = torch.empty(len(x), device=DEVICE, dtype=dtype), x.double().sum(1)
            light, copy = yardsticks(x)
            for name, fn in providers(out).items():
                value = out if (result := fn(x)) is None else result
                error = ((value.double() - reference).norm() / reference.norm()).item()
                assert name != "ours" or error <= TOLERANCE[str(dtype)[6:]], (name, n, dtype, error)
                gbps = x.numel() * x.element_size() / bench(lambda: fn(x)) * 1e-6
                records.append({"direction": "row sums", "dtype": str(dtype)[6:], "N": n, "provider": name,
                                "GB/s": gbps, "speed of light GB/s": light, "copy GB/s": copy,
                                "% of speed of light": 100 * gbps / light, "error": error})
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
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "03_parallel_reduction.csv"))
    if not ON_GPU:  # the interpreter's times are no GPU's speeds: each provider's error against the float64 sums
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
        ax.axvline(RANGE[direction, dtype][-1], color="gray", linestyle=":", linewidth=1, label="end of RANGE")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)",
               ylabel=f"% of {LIGHT}'s GB/s" if ax is axes[0] else None)
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Row sums, M x N = {ROWS_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()
    plt.show()

def reading(table, ladder):
    """The sentences that read this run's tables: inside the range, past it, the ladder, any point over the light."""
    if not ON_GPU:
        return NO_SPEED
    table = table.data  # the summary's Styler holds the table
    inside = table[[n in RANGE.get((d, t), ()) for d, t, n in table.index]]
    pct, vs_peer = inside["ours, % of light"], inside["ours / best peer"]
    _, t, n = pct.idxmin()
    text = [f"Inside its range ours reads at {pct.min():.3g}-{pct.max():.3g}% of {LIGHT} (median {pct.median():.3g}%), "
            f"{vs_peer.min():.3g}-{vs_peer.max():.3g}x the faster peer; its slowest point is {t} at N = {n:,}."]
    peers = inside.filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {inside.ours[i]:,.0f})" for i in peers.index if inside.ours[i] < peers.loc[i].max()]
    if lost:
        text.append(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    past, m = table.drop(inside.index)["ours, % of light"], ROWS_ELEMENTS // SWEEP_N[-1]
    if len(past):
        text.append("Past it (" + ", ".join(f"{t} N = {n:,}: {v:.3g}%" for (_, t, n), v in past.items()) + f"): at "
                    f"N = {SWEEP_N[-1]:,} the matrix has {m:,} rows, {triton.cdiv(m, _row_config(m, SWEEP_N[-1])[0])} "
                    f"programs for {NUM_SMS} SMs; deep dive 31 splits each row over programs.")
    speed = ladder.set_index(["step", "N"])["GB/s"]
    gain = speed[1, 64] / speed[0, 64]
    text.append(f"In the ladder, packing short rows (step 1) read rows of 64 {gain:.3g}x as fast as one row a program "
                f"(step 0), and rows of 4096 at {speed[1, 4096] / speed[0, 4096]:.3g}x its speed" + (
                    ": the same additions, more bytes in flight a program." if gain > 1.1 else "."))
    over = table["ours, % of light"][table["ours, % of light"] > 100]
    if len(over):
        text.append(f"Ours read above {LIGHT} at {len(over)} of {len(table)} points, at most {over.max():.4g}%: the "
                    "read-only pass is a measured kernel, not a bound, and one launch of it can be timed a little "
                    "slower than another kernel reading the same bytes.")
    return "\n".join(text)

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
# Each step's relative error against float64, beside ``torch.sum``'s, on rows and on columns (rows of ``x.T``):

check(CHECK_SHAPES)

# %%
# The ladder, measured
# --------------------
# Each step on one fp32 tensor as rows of 64 (packing matters) and of 4096 (it does not):

ladder = measure_ladder()
show_ladder(ladder)

# %%
# Benchmark
# ---------
# 2**26 elements as rows of N = 16 to 2**20, GB/s (higher is better):

table = summary(measure_sweep())
table

# %%
# In % of the speed of light measured beside each point:

plot(table)

# %%
# Reading the numbers
# -------------------

print(reading(table, ladder))

# %%
# Going further
# -------------
# **The whole tensor and the drop-in**: :ref:`sphx_glr_tutorials_03_sum_of_all_elements.py`.
#
# **Where this design stops.** Few rows leave SMs idle, and a column sum's lanes read N elements apart:
# :ref:`sphx_glr_tutorials_deep_dives_31_reduction_rows_and_columns.py` splits rows and lays out a kernel for columns.
#
# **Exercise.** Change ``_row_config``'s tile (8192) and elements a thread (16): which N move, and why?
#
# References: Mark Harris, *Optimizing Parallel Reduction in CUDA*; CUB's device-wide reductions.

environment_card()
