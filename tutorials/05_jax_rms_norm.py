"""
RMSNorm in JAX with Pallas
==========================

RMSNorm reads a row, takes one sum over it and writes the row scaled: memory alone sets its speed, and the best kernel
runs as fast as a copy of the same bytes, the *speed of light*. This page writes its forward as a Pallas kernel
(``jax.experimental.pallas``, JAX's language for GPU kernels) and measures it against that copy and against what
``jax.jit`` makes of the formula. The backward and the differentiable drop-in are the next page,
:ref:`sphx_glr_tutorials_05_jax_rms_norm_backward.py`; over several GPUs,
:ref:`sphx_glr_tutorials_05_jax_rms_norm_sharded.py`.

**Which Pallas backend.** Pallas' Triton backend: it needs an NVIDIA GPU of compute capability 8.0 or newer
(elsewhere the page stops with a message); JAX 0.11 deprecates it in favour of Mosaic GPU (Hopper and newer).
Without a GPU, Pallas interprets the kernels on the CPU.

**What you will learn**: to count an op's bytes; a Pallas kernel (refs, masked loads and stores, a grid of
programs) and its launch, ``pl.pallas_call``; launch parameters from Little's law. No Pallas or Triton needed
beforehand; :ref:`sphx_glr_tutorials_04_rms_norm.py` builds the same design in Triton.
"""

import datetime, functools, importlib.metadata, importlib.util, os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: no GPU memory taken up front
import jax, jax.numpy as jnp, jaxlib
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

ON_GPU = jax.default_backend() == "gpu"
INTERPRET = not ON_GPU  # without a GPU, Pallas interprets the kernels on the CPU
version = lambda name: importlib.metadata.version(name) if importlib.util.find_spec(name) else "-"
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = jax.devices()[0].device_kind if ON_GPU else "CPU only, Pallas' interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · JAX {jax.__version__} · jaxlib {jaxlib.__version__} · {jax.device_count()} device(s) · "
      f"torch {version('torch')} · Triton {version('triton')} · {BUILT}")
if ON_GPU and tuple(map(int, (capability := jax.devices()[0].compute_capability).split("."))) < (8, 0):
    raise RuntimeError(f"This page needs compute capability 8.0 or newer for Pallas' Triton backend; {WHERE} has "
                       f"{capability}. Run it on an Ampere GPU or newer, or without a GPU (Pallas' interpreter).")

# %%
# The formula, and its bytes
# --------------------------
# For a row :math:`x` of length :math:`N` and a weight :math:`w` of :math:`N` values,
#
# .. math::
#
#    r = \frac{1}{\sqrt{\frac{1}{N}\sum_j x_j^2 + \varepsilon}}, \qquad y = r\,x \odot w .
#
# In ``jax.numpy``, computed in fp32 and rounded once at the end, as the kernels do; it is also the page's reference:

def rms_norm_reference(x, weight, eps=1e-6):
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # fp32 (float64 stays float64)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * rstd * weight.astype(x32.dtype)).astype(x.dtype)

# %%
# Run one operation at a time on :math:`M` rows in fp32, these lines move :math:`7MN` elements: the square reads and
# writes :math:`MN`, the mean reads them, each of the two products reads and writes :math:`MN`. A kernel that keeps a
# row on chip reads :math:`x` once and writes :math:`y` once, :math:`2MN`, the bytes of a copy of :math:`x`: so a copy
# is the speed of light, and the kernel can at best match it. ``jax.jit`` hands the lines to XLA, which fuses them as it
# sees fit: that fusion is the peer to beat.
#
# Step 0: the plain kernel
# ------------------------
# A kernel is a function that one *program* runs on a block of the data; a launch runs a grid of programs at once,
# and ``pl.program_id(0)`` is this program's number in it. The Pallas a kernel needs:
#
# * It gets *refs* (``x_ref``): views of arrays in GPU memory, not arrays. ``ref.at[idx]`` addresses a block of one,
#   indexed as in NumPy.
# * ``plgpu.load`` and ``plgpu.store`` (``plgpu``: Pallas' Triton backend) move a block between memory and the
#   registers under a ``mask``: a masked element is neither read (``other`` stands in) nor written.
# * A block is a power of two long (Triton's rule): the columns past :math:`N`, and the rows past :math:`M`, are masked
#   off. Keyword arguments in CAPS are compile-time constants; each value compiles a kernel of its own.
# * Between loads and stores the code is ``jax.numpy`` on blocks, held in registers.
#
# ``_tile`` gives a block's indices and mask (``rows[:, None]`` and ``cols[None, :]`` broadcast to a 2-D block, as in
# NumPy), ``_load`` reads a block in fp32. ``fwd_kernel`` gives a program ``BLOCK_M`` whole rows of ``BLOCK_N``
# columns: no loop, the rows sit in registers once. It stores :math:`y` and ``rstd``, :math:`r` of each row in fp32,
# which the backward reuses.

def _tile(rows, cols, n_rows, n_cols):  # indices and in-bounds mask of the tile rows x cols
    return (rows[:, None], cols[None, :]), (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
def _load(ref, idx, ok):  # masked elements read as 0; everything is computed in fp32
    return plgpu.load(ref.at[idx], mask=ok, other=0).astype(jnp.float32)

def fwd_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, BLOCK_M, BLOCK_N):
    """Program p normalises rows p * BLOCK_M ... (p + 1) * BLOCK_M - 1, whole, in one go."""
    (n_rows, n_cols), cols = x_ref.shape, jnp.arange(BLOCK_N)
    rows = pl.program_id(0) * BLOCK_M + jnp.arange(BLOCK_M)
    idx, ok = _tile(rows, cols, n_rows, n_cols)
    x = _load(x_ref, idx, ok)
    rstd = jax.lax.rsqrt(jnp.sum(x * x, axis=1) / n_cols + eps)  # padding adds 0
    y = x * rstd[:, None] * _load(w_ref, cols, cols < n_cols)[None, :]
    plgpu.store(y_ref.at[idx], y.astype(y_ref.dtype), mask=ok)
    plgpu.store(rstd_ref.at[rows], rstd, mask=rows < n_rows)

# %%
# ``pl.pallas_call(kernel, grid=(P,), out_shape=...)`` makes a kernel a function of arrays, run by ``P`` programs
# (``out_shape``: the outputs' shapes and dtypes; the constants go in with ``functools.partial``). Its
# ``compiler_params`` set Triton's ``num_warps``, the warps of 32 threads that run a program, and ``num_stages``, how
# many loads Triton pipelines ahead in a loop (1: the forward has no loop). ``interpret=True`` runs it on the CPU.
# Step 0 runs a program a row, on Triton's default of 4 warps:

def one_row_a_program(x2d, w, eps=1e-6):  # step 0's launch
    kernel = functools.partial(fwd_kernel, eps=eps, BLOCK_M=1, BLOCK_N=pl.next_power_of_2(x2d.shape[1]))
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct(x2d.shape[:1], jnp.float32)
    return pl.pallas_call(kernel, out_shape=out_shape, grid=(x2d.shape[0],),
                          compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1),
                          interpret=INTERPRET)(x2d, w)

# %%
# Step 1: several rows a program, warps sized to the tile
# -------------------------------------------------------
# Memory is busy when each SM (a GPU's core; a program runs on one) keeps enough bytes in flight to cover a load's
# latency. By Little's law that is bandwidth x latency / SMs: about 20-55 KB on today's data-center GPUs (2-8 TB/s, a
# microsecond, 108-148 SMs). A program a row of 256 has 1 KB or less to load: too little, and each program also pays
# for its start. Step 1 changes the launch, not the kernel:
#
# * A program takes ``MIN_ELEMENTS`` elements or more (16 KB in fp32, and an SM runs several programs at once):
#   ``BLOCK_M`` short rows, or one long one.
# * Warps enough that a thread holds about 64 bytes of the tile (``_warps``), at most 16: a thread that held much more
#   would spill its registers to memory.
#
# ``_forward`` launches it and hands rows longer than ``FWD_WHOLE_ROW_N`` to XLA's formula (they do not fit a
# program's registers). ``RANGE`` holds the rows the page recommends the kernel for; past 8 K, on Hopper, deep dive 51
# splits a row over more threads.

MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
FWD_WHOLE_ROW_N = 16384  # the forward kernel's longest row: 32 fp32 a thread at 16 warps; longer rows go to XLA
# (direction, dtype) -> the N this page's kernel is for (the landing page's recommendation)
RANGE = {("forward", t): range(1, 8192 + 1) for t in ("float32", "bfloat16")}
# warps giving a thread about bytes_per_thread bytes of a tile of n elements; num_stages=1: the backward prefetches
_warps = lambda n, itemsize, bytes_per_thread: min(32, max(4, n * itemsize // (32 * bytes_per_thread)))
_params = lambda warps, stages=1: plgpu.CompilerParams(num_warps=warps, num_stages=stages)

def _fwd_config(n_rows, n_cols, itemsize):
    """(meta, grid, compiler params) of fwd_kernel: a program per block of MIN_ELEMENTS, or of one row."""
    block_n = pl.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
    # one tile alive: 64 bytes a thread, at most 16 warps (at 16 K: 32 fp32 a thread)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n), pl.cdiv(n_rows, block_m), \
        _params(min(16, _warps(block_m * block_n, itemsize, 64)))

def _forward(x2d, w, eps):
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((0,), f32)
    if n_cols > FWD_WHOLE_ROW_N:  # past the kernel's rows: XLA, with the rstd the backward needs
        rstd = jax.lax.rsqrt(jnp.mean(jnp.square(x2d.astype(f32)), axis=1) + eps)
        return (x2d.astype(f32) * rstd[:, None] * w.astype(f32)).astype(x2d.dtype), rstd
    meta, grid, params = _fwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((n_rows,), f32)
    return pl.pallas_call(functools.partial(fwd_kernel, eps=eps, **meta), out_shape=out_shape, grid=(grid,),
                          compiler_params=params, interpret=INTERPRET)(x2d, w)

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach: the check against float64, the timer, the ladder's and the benchmark's
# sweeps, the tables, the plot, the CSV for the landing page, the sentences that read the numbers and the environment
# card; the cells after the appendix call them. ``bench`` issues ``CALLS`` calls back to back (JAX queues them), waits
# for the last and takes the median of ``REPEATS`` runs; in the sweep the providers take turns ``ROUNDS`` times, the
# fastest round kept. The *speed of light* is a copy of :math:`x` in JAX (PyTorch's copy, when a CUDA PyTorch is
# installed, cross-checks it); GB/s counts :math:`x` read and :math:`y` written.

import contextlib, itertools, platform, statistics, subprocess, timeit
import matplotlib.pyplot as plt, numpy as np, pandas as pd

# 2**27 elements: each call's kernels run well past the host's time to start a call (at 2**26 a bf16 copy does not)
EPS, TOTAL_ELEMENTS, (CALLS, REPEATS, ROUNDS) = 1e-6, 2**27 if ON_GPU else 2**13, (10, 7, 2) if ON_GPU else (1, 1, 1)
SWEEP_N = [2**k for k in range(10, 16)] if ON_GPU else [1024, 4096]  # on the CPU: XLA compiles each N, slowly
NO_SPEED = ("No GPU here: this run checks the kernels' values through Pallas' interpreter (interpret=True, on the "
            "CPU); it measures no speed.")
TORCH_WHY = "no GPU" if not ON_GPU else "PyTorch not installed" if importlib.util.find_spec("torch") is None else ""
if not TORCH_WHY:
    import torch
    TORCH_WHY = "" if torch.cuda.is_available() else "this PyTorch sees no CUDA GPU"
if TORCH_WHY:
    print(f"PyTorch copy: not measured here ({TORCH_WHY}).")

# N = 1, odd lengths, and rows past FWD_WHOLE_ROW_N (XLA's formula inside _forward); step 0 on rows up to 4096
CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000)] if ON_GPU else \
    [(17, 1), (33, 257), (2, 20000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16; the page stops unless each step's error is within
    TOLERANCE of its dtype or twice XLA's."""
    errors = pd.DataFrame([check_row(s, d, jax.random.key(i)) for d in ("float32", "float16", "bfloat16")
                           for i, s in enumerate(shapes)])
    most = (2 * errors["XLA"]).clip(lower=errors.dtype.map(TOLERANCE))
    assert all((errors[step].isna() | (errors[step] <= most)).all() for step in ("step 0", "step 1")), errors
    return errors.style.format({c: "{:.1e}" for c in ("step 0", "step 1", "XLA")}, na_rep="-").hide(axis="index")

def check_row(shape, dtype, key):  # y's error relative to its size, against the formula in float64
    kx, kw = jax.random.split(key)
    x = (3 * jax.random.normal(kx, shape)).astype(dtype)
    w = (1 + 0.5 * jax.random.normal(kw, shape[-1:])).astype(dtype)
    with jax.enable_x64(True):
        ref = np.asarray(rms_norm_reference(jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64), EPS))
    ys = {"step 1": _forward(x, w, EPS)[0], "XLA": jax.jit(rms_norm_reference)(x, w, EPS)}
    if shape[1] <= 4096:  # step 0 on the ladder's rows (a longer row in 4 warps spills registers)
        ys["step 0"] = one_row_a_program(x, w, EPS)[0]
    error = lambda y: np.linalg.norm(np.asarray(y, np.float64) - ref) / np.linalg.norm(ref)
    return {"shape": f"{shape[0]} x {shape[1]}", "dtype": dtype} | {
        name: error(ys[name]) if name in ys else np.nan for name in ("step 0", "step 1", "XLA")}

def bench(fn, *args, wait=jax.block_until_ready):  # median ms of one call
    def run():  # CALLS calls back to back (JAX queues them), then one wait for the last
        for _ in range(CALLS):
            out = fn(*args)
        wait(out)
    run()  # compile and warm up outside the timing
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

def measure_ladder(steps, n_list, dtype=jnp.float32):  # step | idea | N | GB/s | % of light, as a Styler (.data)
    rows = []
    for n_cols in n_list:
        x = jax.random.normal(jax.random.key(0), (TOTAL_ELEMENTS // n_cols, n_cols), dtype)
        w, light = jnp.ones((n_cols,), dtype), 2 * x.nbytes / bench(jax.jit(jnp.copy), x) * 1e-6
        for step, (idea, fn) in steps.items():
            gbs = 2 * x.nbytes / bench(jax.jit(fn), x, w) * 1e-6
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbs, "% of light": 100 * gbs / light})
    ladder = pd.DataFrame(rows)
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
    return shown.style.format({"GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide()

def sweep():  # (records, table): the forward at every N, ours, XLA's and the copies
    copy, ours, records = jax.jit(jnp.copy), jax.jit(lambda x, w: _forward(x, w, EPS)[0]), []
    for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
        x = jax.random.normal(jax.random.key(0), (TOTAL_ELEMENTS // n_cols, n_cols), dtype)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
        runs = {"speed of light": (copy, (x,), {}), "XLA (jnp, jit)": (jax.jit(rms_norm_reference), (x, w), {}),
                "Pallas (ours)": (ours, (x, w), {})}  # provider: what bench() times
        if not TORCH_WHY:  # the same values, copied: a view of JAX's buffers freed after JAX's client ends crashes
            xt, sync = torch.from_dlpack(x).clone(), dict(wait=lambda _: torch.cuda.synchronize())
            runs["PyTorch copy"] = functools.partial(torch.Tensor.copy_, torch.empty_like(xt), xt), (), sync
        rounds = [{key: bench(fn, *args, **kw) for key, (fn, args, kw) in runs.items()} for _ in range(ROUNDS)]
        ms = {key: min(r[key] for r in rounds) for key in runs}
        light = 2 * x.nbytes / ms.pop("speed of light") * 1e-6
        for provider, t in ms.items():
            gbs = 2 * x.nbytes / t * 1e-6
            records.append({"direction": "forward", "dtype": dtype, "N": n_cols, "provider": provider, "GB/s": gbs,
                            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
        del x, w, runs
    results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
    results["dtype"] = pd.Categorical(results["dtype"], ["float32", "bfloat16"])  # fp32 first in tables and plot
    table = results.pivot(index=keys, columns="provider", values="GB/s").reindex(
        columns=["PyTorch copy", "XLA (jnp, jit)", "Pallas (ours)"])
    table.insert(0, "speed of light", results.groupby(keys, observed=True)["speed of light GB/s"].first())
    table["ours, % of light"] = table["Pallas (ours)"] / table["speed of light"] * 100
    table["ours / XLA"] = table["Pallas (ours)"] / table["XLA (jnp, jit)"]
    write_summary(table)
    return results, table

def show(table):  # the table in HTML
    return table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%",
                                                                       "ours / XLA": "{:.2f}"}, na_rep="-")

def plot(results):  # each provider as a percentage of the copy beside it
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white", layout="constrained")
    styles = {"Pallas (ours)": ("-o", "C0"), "XLA (jnp, jit)": ("--o", "C1"), "PyTorch copy": (":", "C7")}
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], observed=True)):
        shares = part.pivot(index="N", columns="provider", values="% of speed of light")
        shares.plot(ax=ax, style={p: styles[p][0] for p in shares}, color={p: styles[p][1] for p in shares},
                    markersize=3, title=f"{direction}, {dtype}", xlabel="row length N (elements)",
                    ylabel="% of the copy's GB/s")
        ax.set_xscale("log", base=2), ax.set_xticks(SWEEP_N, SWEEP_N), ax.minorticks_off()
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.grid(True, alpha=0.3), ax.legend(loc="best", fontsize=7)
    fig.suptitle(f"RMSNorm's forward in JAX, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def write_summary(table):  # the site's build gathers each page's summary for its landing page
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / XLA"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
            os.path.join(os.environ["SOL_RESULTS"], "05_jax_rms_norm.csv"))

def read_numbers(ladder, table):  # the sentences under "Reading the numbers", from this run's tables
    speed = ladder.set_index(["N", "step"])["GB/s"]
    for n_cols in ladder["N"].unique():
        print(f"At N = {n_cols}, step 1 ran at {speed[n_cols, 1] / speed[n_cols, 0]:.2f}x step 0's GB/s.")
    inside = [n in RANGE[d, t] for d, t, n in table.index]
    light, xla, past = table["ours, % of light"], table["ours / XLA"], table[[not i for i in inside]]
    xla_light = 100 * table["XLA (jnp, jit)"] / table["speed of light"]
    print(f"Inside its range (N up to {max(RANGE['forward', 'float32'])}) ours ran at {light[inside].min():.3g}-"
          f"{light[inside].max():.3g}% of the copy and {xla[inside].min():.2f}x to {xla[inside].max():.2f}x XLA's "
          f"fusion, which ran at {xla_light[inside].min():.3g}-{xla_light[inside].max():.3g}% of the copy.")
    peers, ours = table[inside].filter(items=["XLA (jnp, jit)"]), table["Pallas (ours)"]
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {ours[i]:,.0f})" for i in peers.index if ours[i] < peers.loc[i].max()]
    if lost:
        print(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    if len(past):
        print(f"Past it, {past['ours / XLA'].min():.2f}x to {past['ours / XLA'].max():.2f}x XLA's fusion; rows past "
              f"{FWD_WHOLE_ROW_N} are XLA's formula inside our op.")
    if light.max() > 100:
        top = light.idxmax()
        print(f"Ours read above the copy at {top}: {light.max():.1f}%; the two are timed apart, so a few percent "
              "either way is the timer's spread, not bytes saved.")

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), {jax.device_count()} JAX CPU devices"
    runtime, driver = "none: Pallas' interpreter (interpret=True); the timings are NOT GPU timings", "unknown"
    if ON_GPU:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        plugins = ", ".join(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                            if d.metadata["Name"].startswith("jax-cuda"))  # JAX's CUDA build
        sms = getattr(jax.devices()[0], "core_count", "?")
        device, runtime = f"{jax.device_count()} x {WHERE}, {sms} SMs", f"driver {driver}, {plugins}"
    card = {"device": device, "driver / CUDA": runtime, "JAX": jax.__version__, "jaxlib": jaxlib.__version__,
            "torch": version("torch"), "Triton": version("triton"), "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

def closing_card():  # the card; the site is built in one process, so this page's GPU memory is freed for the next
    card = environment_card()
    for array in jax.live_arrays():
        array.delete()
    jax.clear_caches()
    return card

# %%
# Correctness
# -----------
# Each step's :math:`y` against the formula in float64 (relative errors), beside XLA's in the same dtype. ``check``
# stops the page unless each is a few roundings of its dtype, or at most twice XLA's. Step 0 is checked on the
# ladder's rows, up to 4096 ("-" past them); step 1 also on rows past ``FWD_WHOLE_ROW_N``, XLA's formula inside.

check(CHECK_SHAPES)

# %%
# The ladder, measured
# --------------------
# Forward, fp32, rows of 256 (packing rows matters) and of 4096 (a row fills a program: the steps differ in warps):

ladder = measure_ladder({0: ("a row a program, 4 warps", one_row_a_program),
                         1: ("MIN_ELEMENTS a program, warps sized to the tile", functools.partial(_forward, eps=EPS))},
                        [256, 4096])
ladder

# %%
# Benchmark
# ---------
# :math:`2^{27}` elements as rows of N = 1 K to 32 K, fp32 and bf16, GB/s (higher is better):

results, table = sweep()  # and the landing page's CSV
show(table) if ON_GPU else print(NO_SPEED)

# %%
# Each provider in % of the copy timed beside it:

plot(results) if ON_GPU else None

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

read_numbers(ladder.data, table) if ON_GPU else print(NO_SPEED)

# %%
# Going further
# -------------
# **The backward and the drop-in** are the next page, :ref:`sphx_glr_tutorials_05_jax_rms_norm_backward.py`: two
# more kernels, joined to this forward by ``jax.custom_vjp``.
#
# **Past the range.** On Hopper, Mosaic GPU splits a long row over a program's warpgroups,
# :ref:`sphx_glr_tutorials_deep_dives_51_rms_norm_mosaic_gpu.py`; its backward streams the row through shared
# memory, :ref:`sphx_glr_tutorials_deep_dives_52_rms_norm_mosaic_gpu_backward.py`.
#
# **Exercises.** Give step 0 ``BLOCK_M`` rows a program and keep its 4 warps: which half of step 1 matters at N = 256?
# Halve and double ``MIN_ELEMENTS``: where does the ladder move? References: Zhang and Sennrich (2019), *Root Mean
# Square Layer Normalization*; the Pallas documentation.
#
# Where this page was made
# ------------------------

closing_card()
