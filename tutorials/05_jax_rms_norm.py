"""
RMSNorm as a JAX custom op
==========================

Tutorial 04's RMSNorm for JAX: Pallas kernels (``jax.experimental.pallas``) made one differentiable function with
``jax.custom_vjp``, measured against the speed of light (a copy) and XLA's fusion of the formula. Over several GPUs:
:ref:`sphx_glr_tutorials_05_jax_rms_norm_sharded.py`.

**Which Pallas backend.** Pallas' Triton backend, whose kernels read like tutorial 04's: it needs an NVIDIA GPU of
compute capability 8.0 or newer (elsewhere the page stops with a message); JAX 0.11 deprecates it in favour of Mosaic
GPU (Hopper and newer). Without a GPU, Pallas interprets the kernels on the CPU.

**What you will learn**: a masked Pallas kernel and its launch; the gradient through ``jax.custom_vjp``, with
:math:`dw` summed in fp32 in a fixed order (bitwise repeatable). Prerequisites:
:ref:`sphx_glr_tutorials_04_rms_norm.py`.
"""

import datetime, functools, importlib.metadata, importlib.util, itertools, os, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: no GPU memory taken up front
import jax, jax.numpy as jnp, jaxlib, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import matplotlib.pyplot as plt, pandas as pd

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
# For a row :math:`x` of length :math:`N`, :math:`r = 1 / \sqrt{\frac{1}{N}\sum_j x_j^2 + \varepsilon}` and
# :math:`y = r\,x \odot w`. In ``jax.numpy``, in fp32 and rounded once (as our kernels do):

def rms_norm_reference(x, weight, eps=1e-6):
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # fp32 (float64 stays float64)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * rstd * weight.astype(x32.dtype)).astype(x.dtype)

# %%
# The forward reads :math:`x` and writes :math:`y`: :math:`2MN` elements (:math:`4MN` bytes in bf16), a copy's bytes;
# XLA under ``jax.jit`` fuses it as it sees fit. The backward (tutorial 04 derives it) sums :math:`dx`'s terms
# **along each row** and :math:`dw` **down each column**: a fusion of one loop order reads :math:`x, dy` twice,
# :math:`5MN` elements, where one kernel moves :math:`3MN` (:math:`x, dy` in, :math:`dx` out).
#
# The forward kernel, step 0: a block of whole rows a program
# ------------------------------------------------------------
# A Pallas kernel gets *refs* (``x_ref``), views of arrays in GPU memory; ``ref.at[idx]`` addresses a tile of one and
# ``plgpu.load``/``plgpu.store`` move it under a ``mask`` (masked elements are neither read, ``other`` standing in,
# nor written). ``pl.program_id(0)`` is this program's index in the grid. A program takes ``BLOCK_M`` whole rows; a
# tile is a power of two wide (Triton's are), so columns past :math:`N` and rows past :math:`M` are masked. Arguments
# in CAPS are compile-time constants. No loop: the tile sits in registers once.

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
# ``pl.pallas_call(kernel, grid=(P,), out_shape=...)`` makes a kernel a function of arrays run by ``P`` programs
# (``out_shape``: the outputs' shapes and dtypes); ``compiler_params`` sets Triton's ``num_warps`` (warps of 32
# threads a program), ``interpret=True`` runs it on the CPU. ``rstd``, one fp32 a row, is saved for the backward.
#
# The backward: one kernel for both gradients
# -------------------------------------------
# As in tutorial 04: a *persistent* grid, a few programs an SM, each looping (``jax.lax.fori_loop``) over blocks
# :math:`p, p + P, \ldots` (:math:`P` = ``pl.num_programs(0)``): it writes :math:`dx`, adds :math:`dy \odot \hat{x}`
# into an fp32 ``dw_partial`` kept in registers and loads the next block before it works on this one. A second kernel
# sums the partials in a fixed order.

def bwd_kernel(x_ref, w_ref, rstd_ref, dy_ref, dx_ref, dw_partial_ref, *, BLOCK_M, BLOCK_N):
    """Program p does blocks p, p + P, ... and stores its dw_partial row, zeros included."""
    (n_rows, n_cols), pid, n_programs = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    cols = jnp.arange(BLOCK_N)
    w = _load(w_ref, cols, cols < n_cols)[None, :]  # loaded once per program

    def x_and_dy(rows):
        idx, ok = _tile(rows, cols, n_rows, n_cols)
        return _load(x_ref, idx, ok), _load(dy_ref, idx, ok)

    def step(i, carry):
        dw_partial, (x, dy) = carry
        rows = (pid + i * n_programs) * BLOCK_M + jnp.arange(BLOCK_M)
        rstd = plgpu.load(rstd_ref.at[rows], mask=rows < n_rows, other=0)[:, None]
        ahead = x_and_dy(rows + n_programs * BLOCK_M)  # the next block's loads go out first; past the end: none
        mean_gx_hat = jnp.sum(dy * w * x, axis=1, keepdims=True) * rstd / n_cols  # (1/N) sum_j g_j x_hat_j
        x_hat, (idx, ok) = x * rstd, _tile(rows, cols, n_rows, n_cols)
        plgpu.store(dx_ref.at[idx], ((dy * w - x_hat * mean_gx_hat) * rstd).astype(dx_ref.dtype), mask=ok)
        return dw_partial + dy * x_hat, ahead  # the column reduction, in fp32

    init = jnp.zeros((BLOCK_M, BLOCK_N), jnp.float32), x_and_dy(pid * BLOCK_M + jnp.arange(BLOCK_M))
    n_mine = pl.cdiv(pl.cdiv(n_rows, BLOCK_M) - pid, n_programs)  # blocks pid, pid + P, ... before the end
    dw_partial, _ = jax.lax.fori_loop(0, n_mine, step, init)
    plgpu.store(dw_partial_ref.at[pid, cols], jnp.sum(dw_partial, axis=0), mask=cols < n_cols)

def dw_sum_kernel(dw_partial_ref, dw_ref, *, BLOCK_P, BLOCK_N):
    """dw[j] = sum over p of dw_partial[p, j] in a fixed order: bitwise the same on every run."""
    n_partials, n_cols = dw_partial_ref.shape
    cols = pl.program_id(0) * BLOCK_N + jnp.arange(BLOCK_N)
    add = lambda i, a: a + _load(dw_partial_ref, *_tile(i * BLOCK_P + jnp.arange(BLOCK_P), cols, n_partials, n_cols))
    acc = jax.lax.fori_loop(0, pl.cdiv(n_partials, BLOCK_P), add, jnp.zeros((BLOCK_P, BLOCK_N), jnp.float32))
    plgpu.store(dw_ref.at[cols], jnp.sum(acc, axis=0), mask=cols < n_cols)

# %%
# Launch parameters
# -----------------
# Memory is busy when each SM has enough bytes in flight to cover a load's latency (Little's law: bytes in flight an
# SM = bandwidth x latency / SMs). So a program moves at least ``MIN_ELEMENTS`` (several short rows), and a thread
# holds a few dozen bytes of a tile: more would spill registers.

NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4  # a GPU's SMs; on the CPU, four stand-ins
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
FWD_WHOLE_ROW_N = 16384  # the forward kernel's longest row: 32 fp32 a thread at 16 warps; longer rows go to XLA
WHOLE_ROW_N = 8192  # the backward's longest row: x, dy, the next block's and dw_partial in registers; longer: XLA
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
# The N these kernels are for (the landing page's recommendation)
RANGE = {(d, t): range(1, 8192 + 1) for d in ("forward", "backward") for t in ("float32", "bfloat16")}
# warps giving a thread about bytes_per_thread bytes of a tile of n elements; num_stages=1: we prefetch by hand
_warps = lambda n, itemsize, bytes_per_thread: min(32, max(4, n * itemsize // (32 * bytes_per_thread)))
_params = lambda warps, stages=1: plgpu.CompilerParams(num_warps=warps, num_stages=stages)

def _fwd_config(n_rows, n_cols, itemsize):
    """(meta, grid, compiler params) of fwd_kernel: a program per block of MIN_ELEMENTS, or of one row."""
    block_n = pl.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
    # one tile alive: 64 bytes a thread, at most 16 warps (at 16 K: 32 fp32 a thread)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n), pl.cdiv(n_rows, block_m), \
        _params(min(16, _warps(block_m * block_n, itemsize, 64)))

def _bwd_config(n_rows, n_cols, itemsize):
    """(meta, grid, compiler params): persistent; the grid depends on the shape only, so do dw's sums."""
    block_n = pl.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)
    # x, dy, the next block's and dw_partial alive: 32 bytes a thread; 16 once a 16 KB row fills a program
    warps = _warps(block_m * block_n, itemsize, 16 if n_cols * itemsize >= 16384 else 32)
    grid = min(pl.cdiv(n_rows, block_m), max(1, WARPS_PER_SM // warps) * NUM_SMS)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n), max(1, grid), _params(warps)

def _sum_config(n_cols):
    """dw_sum_kernel: narrow strips of columns, many programs, each summing all partials in order."""
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32), _params(4)

# %%
# The drop-in function
# --------------------
# ``jax.custom_vjp`` pairs forward and backward; the forward saves :math:`x`, :math:`w`, ``rstd``. Rows longer than
# the kernels hold take XLA's formulas ("Going further").

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

def _backward(x2d, w, rstd, dy2d):  # dx in x's dtype, dw in fp32 (the sum over this device's rows)
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:  # no rows: the sum over rows is empty
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((n_cols,), f32)
    if n_cols > WHOLE_ROW_N:  # past the kernel's rows: the same formulas, in XLA
        x, dy, r = x2d.astype(f32), dy2d.astype(f32), rstd[:, None]
        g, x_hat = dy * w.astype(f32), x * r
        dx = r * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
        return dx.astype(x2d.dtype), jnp.sum(dy * x_hat, axis=0)
    meta, grid, params = _bwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((grid, n_cols), f32)
    dx, dw_partial = pl.pallas_call(functools.partial(bwd_kernel, **meta), out_shape=out_shape, grid=(grid,),
                                    compiler_params=params, interpret=INTERPRET)(x2d, w, rstd, dy2d)
    meta, params = _sum_config(n_cols)
    dw = pl.pallas_call(functools.partial(dw_sum_kernel, **meta), out_shape=jax.ShapeDtypeStruct((n_cols,), f32),
                        grid=(pl.cdiv(n_cols, meta["BLOCK_N"]),), compiler_params=params,
                        interpret=INTERPRET)(dw_partial)
    return dx, dw

def differentiable(forward, backward):
    """f(x, w) with our gradient: forward(x, w) -> (y, rstd), backward(x, w, rstd, dy) -> (dx, dw in fp32)."""
    def f_forward(x, w):
        y, rstd = forward(x, w)
        return y, (x, w, rstd)  # what the backward gets
    def f_backward(saved, dy):
        dx, dw = backward(*saved, dy)
        return dx, dw.astype(saved[1].dtype)
    f = jax.custom_vjp(lambda x, w: forward(x, w)[0])
    f.defvjp(f_forward, f_backward)
    return f

_rms_norm_rows = functools.cache(lambda eps: differentiable(functools.partial(_forward, eps=eps), _backward))
DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)
def _check(x, weight, eps):  # errors that name the limit and the way around it
    if bad := [f"{n} has dtype {t.dtype}" for n, t in (("x", x), ("weight", weight)) if t.dtype not in DTYPES]:
        raise TypeError(f"rms_norm: {bad[0]}; float32, float16 and bfloat16 are supported (cast with .astype)")
    if x.ndim == 0 or x.shape[-1] == 0 or tuple(weight.shape) != x.shape[-1:]:
        raise ValueError(f"rms_norm: x has shape {tuple(x.shape)}, weight {tuple(weight.shape)}: x needs a last "
                         "axis of 1 or more elements (the rows), weight that axis's length, (N,)")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a Python float (it is compiled in), got {type(eps).__name__}")

def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x (..., N), weight (N,): differentiable, jit-able; fp32, fp16, bf16."""
    _check(x := jnp.asarray(x), weight := jnp.asarray(weight), eps)
    return _rms_norm_rows(float(eps))(x.reshape(-1, x.shape[-1]), weight).reshape(x.shape)

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach: ``check_row`` (the errors), the timers, the tables, the plot, the CSV, the
# environment card. ``bench`` issues ``CALLS`` calls back to back (JAX queues them), waits for the last and takes the
# median of ``REPEATS`` runs; in the sweep the providers take turns ``ROUNDS`` times, the fastest round kept. The
# *speed of light* is a copy of :math:`x` in JAX (PyTorch's copy, when a CUDA PyTorch is installed, cross-checks it);
# GB/s counts :math:`x, y` forward, :math:`x, dy, dx` backward. ``write_summary`` writes the landing page's CSV.

import contextlib, platform, subprocess  # the environment card's

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

def gradients(fn, x, w, dy):
    y, pullback = jax.vjp(fn, x, w)
    return (y, *pullback(dy))
def check_row(shape, dtype, key):  # dx's error relative to the size of its terms, r g (at N = 1 they cancel)
    x, w, dy = ((s * jax.random.normal(k, n) + c).astype(dtype) for s, c, k, n in
                zip((3, 0.5, 1), (0, 1, 0), jax.random.split(key, 3), (shape, shape[-1:], shape)))
    with jax.enable_x64(True):
        x64, w64, dy64 = (jnp.asarray(t, jnp.float64) for t in (x, w, dy))
        refs = [np.asarray(r) for r in gradients(rms_norm_reference, x64, w64, dy64)]
        r_g = np.asarray(dy64 * w64 * jax.lax.rsqrt(jnp.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6))
    scales = [np.linalg.norm(refs[0]), np.linalg.norm(r_g), np.linalg.norm(refs[2])]
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": dtype}
    for name, fn in [("Pallas", rms_norm), ("XLA", rms_norm_reference)]:
        row |= {f"{name} {q}": np.linalg.norm(np.asarray(out, np.float64) - ref) / scale
                for q, out, ref, scale in zip(("y", "dx", "dw"), gradients(jax.jit(fn), x, w, dy), refs, scales)}
    return row

def bench(fn, *args, wait=jax.block_until_ready):  # median ms of one call
    def run():  # CALLS calls back to back (JAX queues them), then one wait for the last
        for _ in range(CALLS):
            out = fn(*args)
        wait(out)
    run()  # compile and warm up outside the timing
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

def measure_ladder(steps, n_list, dtype=jnp.float32):  # step | idea | N | GB/s | % of light (forward)
    rows = []
    for n_cols in n_list:
        x = jax.random.normal(jax.random.key(0), (TOTAL_ELEMENTS // n_cols, n_cols), dtype)
        w, light = jnp.ones((n_cols,), dtype), 2 * x.nbytes / bench(jax.jit(jnp.copy), x) * 1e-6
        for step, (idea, fn) in steps.items():
            gbs = 2 * x.nbytes / bench(jax.jit(fn), x, w) * 1e-6
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbs, "% of light": 100 * gbs / light})
    return pd.DataFrame(rows)

def sweep():  # (records, table): every N, both directions, ours, XLA's and the copies
    copy, pull, records = jax.jit(jnp.copy), jax.jit(lambda pullback, dy: pullback(dy)), []  # jit takes a pullback
    for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
        x, dy = (jax.random.normal(jax.random.key(k), (TOTAL_ELEMENTS // n_cols, n_cols), dtype) for k in (0, 1))
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
        runs = {("copy", "speed of light"): (copy, (x,), {})}  # (direction, provider): what bench() times
        for provider, fn in [("XLA (jnp, jit)", jax.jit(rms_norm_reference)), ("Pallas (ours)", jax.jit(rms_norm))]:
            runs |= {("forward", provider): (fn, (x, w), {}),
                     ("backward", provider): (pull, (jax.vjp(fn, x, w)[1], dy), {})}
        if not TORCH_WHY:  # the same values, copied: a view of JAX's buffers freed after JAX's client ends crashes
            xt, sync = torch.from_dlpack(x).clone(), dict(wait=lambda _: torch.cuda.synchronize())
            runs["forward", "PyTorch copy"] = functools.partial(torch.Tensor.copy_, torch.empty_like(xt), xt), (), sync
        rounds = [{key: bench(fn, *args, **kw) for key, (fn, args, kw) in runs.items()} for _ in range(ROUNDS)]
        ms = {key: min(r[key] for r in rounds) for key in runs}
        light = 2 * x.nbytes / ms.pop(("copy", "speed of light")) * 1e-6
        for (direction, provider), t in ms.items():
            gbs = (2 if direction == "forward" else 3) * x.nbytes / t * 1e-6
            records.append({"direction": direction, "dtype": dtype, "N": n_cols, "provider": provider, "GB/s": gbs,
                            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
        del x, w, dy, runs
    results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
    results["dtype"] = pd.Categorical(results["dtype"], ["float32", "bfloat16"])  # fp32 first in tables and plot
    table = results.pivot(index=keys, columns="provider", values="GB/s").reindex(
        columns=["PyTorch copy", "XLA (jnp, jit)", "Pallas (ours)"]).loc[["forward", "backward"]]
    table.insert(0, "speed of light", results.groupby(keys, observed=True)["speed of light GB/s"].first())
    table["ours, % of light"] = table["Pallas (ours)"] / table["speed of light"] * 100
    table["ours / XLA"] = table["Pallas (ours)"] / table["XLA (jnp, jit)"]
    write_summary(table)
    return results, table

def show(table):  # the table in HTML
    return table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%",
                                                                       "ours / XLA": "{:.2f}"}, na_rep="-")

def plot(results):  # each provider as a percentage of the copy beside it
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
    styles = {"Pallas (ours)": ("-o", "C0"), "XLA (jnp, jit)": ("--o", "C1"), "PyTorch copy": (":", "C7")}
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], observed=True)):
        shares = part.pivot(index="N", columns="provider", values="% of speed of light")
        shares.plot(ax=ax, style={p: styles[p][0] for p in shares}, color={p: styles[p][1] for p in shares},
                    markersize=3, title=f"{direction}, {dtype}", xlabel="row length N (elements)",
                    ylabel="% of the copy's GB/s")
        ax.set_xscale("log", base=2), ax.set_xticks(SWEEP_N, SWEEP_N), ax.minorticks_off()
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.grid(True, alpha=0.3), ax.legend(loc="best", fontsize=7)
    fig.suptitle(f"RMSNorm in JAX, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def write_summary(table):  # the site's build gathers each page's summary for its landing page
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / XLA"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
            os.path.join(os.environ["SOL_RESULTS"], "05_jax_rms_norm.csv"))

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
        device, runtime = f"{jax.device_count()} x {WHERE}, {NUM_SMS} SMs", f"driver {driver}, {plugins}"
    card = {"device": device, "driver / CUDA": runtime, "JAX": jax.__version__, "jaxlib": jaxlib.__version__,
            "torch": version("torch"), "Triton": version("triton"), "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()


def read_numbers(ladder, table):  # the sentences under "Reading the numbers", from this run's tables
    speed = ladder.set_index(["N", "step"])["GB/s"]
    for n_cols in ladder["N"].unique():
        print(f"At N = {n_cols}, step 1 ran at {speed[n_cols, 1] / speed[n_cols, 0]:.2f}x step 0's GB/s.")
    inside = [n in RANGE[d, t] for d, t, n in table.index]
    light, xla, past = table["ours, % of light"], table["ours / XLA"], table[[not i for i in inside]]
    print(f"Inside its range (N up to {max(RANGE['forward', 'float32'])}) ours ran at {light[inside].min():.3g}-"
          f"{light[inside].max():.3g}% of the copy and {xla[inside].min():.2f}x to {xla[inside].max():.2f}x XLA's "
          "fusion.")
    if len(past):
        print(f"Past it, {past['ours / XLA'].min():.2f}x to {past['ours / XLA'].max():.2f}x XLA's fusion: forward rows "
              f"past {FWD_WHOLE_ROW_N} and backward rows past {WHOLE_ROW_N} are XLA's formulas inside our op.")
    if light.max() > 100:
        top = light.idxmax()
        print(f"Ours read above the copy at {top}: {light.max():.1f}%; the two are timed apart, so a few percent "
              "either way is the timer's spread, not bytes saved.")

def closing_card():  # the card; the site is built in one process, so this page's GPU memory is freed for the next
    card = environment_card()
    for array in jax.live_arrays():
        array.delete()
    jax.clear_caches()
    return card

# %%
# Correctness
# -----------
# Relative errors of :math:`y, dx, dw` against ``jax.vjp`` of the formula in float64, beside XLA's.

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000)] if ON_GPU else [(17, 1), (33, 257)]
errors = pd.DataFrame([check_row(s, d, jax.random.key(i)) for d in ("float32", "float16", "bfloat16")
                       for i, s in enumerate(CHECK_SHAPES)])
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's
for q in ("y", "dx", "dw"):
    assert (errors[f"Pallas {q}"] <= (2 * errors[f"XLA {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# The ladder, measured
# --------------------
# Step 0 launches ``fwd_kernel`` a row a program with Triton's default 4 warps; step 1 is the drop-in's launch
# (``_fwd_config``). Forward, fp32, a short row and a long one:

def one_row_a_program(x2d, w):  # step 0's launch
    kernel = functools.partial(fwd_kernel, eps=EPS, BLOCK_M=1, BLOCK_N=pl.next_power_of_2(x2d.shape[1]))
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct(x2d.shape[:1], jnp.float32)
    return pl.pallas_call(kernel, out_shape=out_shape, grid=(x2d.shape[0],), compiler_params=_params(4),
                          interpret=INTERPRET)(x2d, w)

ladder = measure_ladder({0: ("a row a program, 4 warps", one_row_a_program),
                         1: ("MIN_ELEMENTS a program, warps sized to the tile", functools.partial(_forward, eps=EPS))},
                        [256, 4096])
(ladder if ON_GPU else ladder[["step", "idea", "N"]]).style.format({"GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide()

# %%
# Benchmark
# ---------
# Every N, both directions, against XLA's fusion of the formula and of its ``jax.vjp``.

results, table = sweep()  # and the landing page's CSV
show(table) if ON_GPU else print(NO_SPEED)

# %%

plot(results) if ON_GPU else None

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

read_numbers(ladder, table) if ON_GPU else print(NO_SPEED)

# %%
# Going further
# -------------
# **Past the range** the drop-in hands rows to XLA's formulas (the backward's past 8 K, the forward's past 16 K). On
# Hopper, Mosaic GPU takes over there: a row split over a program's warpgroups for the forward
# (:ref:`sphx_glr_tutorials_deep_dives_51_rms_norm_mosaic_gpu.py`), shared memory and clusters for the backward
# (:ref:`sphx_glr_tutorials_deep_dives_52_rms_norm_mosaic_gpu_backward.py`). **Exercises**: sum :math:`dw` with
# ``jnp.sum(dw_partial, axis=0)``: is it bitwise repeatable on your GPU? Give step 0 ``BLOCK_M`` rows a program and 4
# warps: which half of step 1 matters at N = 256? References: Zhang and Sennrich (2019); the Pallas documentation.
#
# Where this page was made
# ------------------------

closing_card()
