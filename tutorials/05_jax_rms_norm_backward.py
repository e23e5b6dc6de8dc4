"""
RMSNorm backward in JAX and the drop-in
=======================================

:ref:`sphx_glr_tutorials_05_jax_rms_norm.py` wrote RMSNorm's forward as a Pallas kernel. This page adds the
backward, a kernel for :math:`dx` and partial sums of :math:`dw` and one that adds the partials, and joins them to the
forward with ``jax.custom_vjp``: ``rms_norm``, a function ``jax.grad`` and ``jax.jit`` take. Measured as training
runs it, against XLA's fusion.

**What you will learn**: the backward's bytes; a *persistent* kernel that loads the next block while it works on this
one; a weight gradient the same to the bit on every run; ``jax.custom_vjp``. Prerequisite: the forward page, whose
kernel the appendix carries. Needs compute capability 8.0 or newer, or no GPU.
"""

import datetime, functools, importlib.metadata, importlib.util, os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: no GPU memory taken up front
import jax, jax.numpy as jnp, jaxlib
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

ON_GPU = jax.default_backend() == "gpu"
version = lambda name: importlib.metadata.version(name) if importlib.util.find_spec(name) else "-"
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = jax.devices()[0].device_kind if ON_GPU else "CPU only, Pallas' interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · JAX {jax.__version__} · jaxlib {jaxlib.__version__} · {jax.device_count()} device(s) · "
      f"torch {version('torch')} · Triton {version('triton')} · {BUILT}")
if ON_GPU and tuple(map(int, (capability := jax.devices()[0].compute_capability).split("."))) < (8, 0):
    raise RuntimeError(f"This page needs compute capability 8.0 or newer for Pallas' Triton backend; {WHERE} has "
                       f"{capability}. Run it on an Ampere GPU or newer, or without a GPU (Pallas' interpreter).")

# %%
# The backward, and its bytes
# ---------------------------
# With :math:`\hat{x} = r\,x` and :math:`g = dy \odot w` (the incoming gradient through the weight), the chain rule
# gives, a row at a time,
#
# .. math::
#
#    dx = r \left(g - \hat{x}\; \frac{1}{N}\sum_j g_j \hat{x}_j\right), \qquad
#    dw = \sum_{\text{rows}} dy \odot \hat{x} .
#
# The second term is the path through :math:`r`. :math:`dx` sums **along each row**, :math:`dw` **down each column**:
# a fusion of one loop order reads :math:`x, dy` twice, :math:`5MN` elements. One kernel for both moves :math:`3MN`
# (:math:`x, dy` in, :math:`dx` out), plus :math:`r` and :math:`dw`.
#
# The dx kernel: a persistent grid
# --------------------------------
# ``bwd_kernel`` takes blocks as the forward does (its ``_tile`` and ``_load`` are in the appendix), with three
# changes for the column sum :math:`dw`:
#
# * **Persistent.** Program :math:`p` of :math:`P` (``pl.num_programs(0)``) walks blocks :math:`p, p + P, \ldots` in
#   a ``jax.lax.fori_loop``, whose body ``step(i, carry)`` returns the *carry*, what lives from one trip to the next.
# * **dw in registers.** The carry holds ``dw_partial``, the program's fp32 sum of :math:`dy \odot \hat{x}`; at the end
#   the program stores it as one row of partials: :math:`P` rows written, not :math:`M`.
# * **The next block's loads first.** The carry holds this block's :math:`x, dy`; ``step`` issues the next block's
#   loads (``ahead``) before it computes, so memory works while the arithmetic runs.

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

# %%
# Launch parameters
# -----------------
# A block is the forward's (``MIN_ELEMENTS``, or a whole row). A thread holds :math:`x, dy`, the next block's two and
# ``dw_partial``, so it gets 32 bytes of a tile (16 from rows of 16 KB): more warps than the forward. The grid: on
# each SM as many programs as fit in ``WARPS_PER_SM`` warps, never more than the blocks; it depends on the shape
# only, and so does the order of the sum. Rows past ``WHOLE_ROW_N`` do not fit: XLA's formulas take them.

NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4  # a GPU's SMs; on the CPU, four stand-ins
WHOLE_ROW_N = 8192  # the backward's longest row: x, dy, the next block's and dw_partial in registers; longer: XLA
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
RANGE = {("backward", t): range(1, WHOLE_ROW_N + 1) for t in ("float32", "bfloat16")}

def _bwd_config(n_rows, n_cols, itemsize):
    """(meta, grid, compiler params): persistent; the grid depends on the shape only, so do dw's sums."""
    block_n = pl.next_power_of_2(n_cols)
    block_m = max(1, MIN_ELEMENTS // block_n)
    # x, dy, the next block's and dw_partial alive: 32 bytes a thread; 16 once a 16 KB row fills a program
    warps = _warps(block_m * block_n, itemsize, 16 if n_cols * itemsize >= 16384 else 32)
    grid = min(pl.cdiv(n_rows, block_m), max(1, WARPS_PER_SM // warps) * NUM_SMS)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n), max(1, grid), _params(warps)

# %%
# **dw, summed in a fixed order.** ``dw_sum_kernel`` (in the appendix, with ``_backward``, which launches both) gives
# each program a strip of columns of ``dw_partial`` and adds its :math:`P` rows in one order: the same bits on every
# run, as atomic adds are not.
#
# The drop-in
# -----------
# ``jax.custom_vjp`` gives a function a gradient of your own: ``f_forward`` returns the output and the *residuals*
# (:math:`x`, :math:`w`, ``rstd``), ``f_backward`` takes them and :math:`dy` and returns a gradient an input
# (:math:`dw` in :math:`w`'s dtype). ``rms_norm`` takes any shape ``(..., N)`` as rows, its arguments checked
# (``_check``, in the appendix); ``functools.cache`` keeps one function an ``eps``.

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

def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x (..., N), weight (N,): differentiable, jit-able; fp32, fp16, bf16."""
    _check(x := jnp.asarray(x), weight := jnp.asarray(weight), eps)
    return _rms_norm_rows(float(eps))(x.reshape(-1, x.shape[-1]), weight).reshape(x.shape)

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach. First, the forward: the forward page's formula, kernel, launch parameters
# and ``_forward``, letter for letter as that page writes and explains them (a test keeps the two the same). Then this
# page's sum of the partials and the backward's launch, ``_backward``, and the drop-in's argument checks. Then the
# machinery: the check against float64, the timer, the sweep, the table, the plot, the CSV for the landing page, the
# sentences that read the numbers and the environment card; the cells after the appendix call them. ``bench`` issues
# ``CALLS`` calls back to back (JAX queues them), waits for the last and takes the median of ``REPEATS`` runs; in the
# sweep the providers take turns ``ROUNDS`` times, the fastest round kept. The *speed of light* is a copy of :math:`x`
# in JAX; GB/s counts :math:`x, dy` read and :math:`dx` written, the backward timed as training runs it, the pullback
# of ``jax.vjp``.

# The forward page's formula, kernel, launch parameters and launch, letter for letter
def rms_norm_reference(x, weight, eps=1e-6):
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # fp32 (float64 stays float64)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * rstd * weight.astype(x32.dtype)).astype(x.dtype)

INTERPRET = not ON_GPU  # without a GPU, Pallas interprets the kernels on the CPU

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

MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
FWD_WHOLE_ROW_N = 16384  # the forward kernel's longest row: 32 fp32 a thread at 16 warps; longer rows go to XLA
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

# This page's: dw's partials summed in a fixed order, the backward's launch, the drop-in's argument checks
def dw_sum_kernel(dw_partial_ref, dw_ref, *, BLOCK_P, BLOCK_N):
    """dw[j] = sum over p of dw_partial[p, j] in a fixed order: bitwise the same on every run."""
    n_partials, n_cols = dw_partial_ref.shape
    cols = pl.program_id(0) * BLOCK_N + jnp.arange(BLOCK_N)
    add = lambda i, a: a + _load(dw_partial_ref, *_tile(i * BLOCK_P + jnp.arange(BLOCK_P), cols, n_partials, n_cols))
    acc = jax.lax.fori_loop(0, pl.cdiv(n_partials, BLOCK_P), add, jnp.zeros((BLOCK_P, BLOCK_N), jnp.float32))
    plgpu.store(dw_ref.at[cols], jnp.sum(acc, axis=0), mask=cols < n_cols)

def _sum_config(n_cols):
    """dw_sum_kernel: narrow strips of columns, many programs, each summing all partials in order."""
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32), _params(4)

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

DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)
def _check(x, weight, eps):  # errors that name the limit and the way around it
    if bad := [f"{n} has dtype {t.dtype}" for n, t in (("x", x), ("weight", weight)) if t.dtype not in DTYPES]:
        raise TypeError(f"rms_norm: {bad[0]}; float32, float16 and bfloat16 are supported (cast with .astype)")
    if x.ndim == 0 or x.shape[-1] == 0 or tuple(weight.shape) != x.shape[-1:]:
        raise ValueError(f"rms_norm: x has shape {tuple(x.shape)}, weight {tuple(weight.shape)}: x needs a last "
                         "axis of 1 or more elements (the rows), weight that axis's length, (N,)")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a Python float (it is compiled in), got {type(eps).__name__}")

# %%
import contextlib, itertools, platform, statistics, subprocess, timeit
import matplotlib.pyplot as plt, numpy as np, pandas as pd

# 2**27 elements: each call's kernels run well past the host's time to start a call (at 2**26 a bf16 copy does not)
EPS, TOTAL_ELEMENTS, (CALLS, REPEATS, ROUNDS) = 1e-6, 2**27 if ON_GPU else 2**13, (10, 7, 2) if ON_GPU else (1, 1, 1)
SWEEP_N = [2**k for k in range(10, 16)] if ON_GPU else [1024, 4096]  # on the CPU: XLA compiles each N, slowly
NO_SPEED = ("No GPU here: this run checks the kernels' values through Pallas' interpreter (interpret=True, on the "
            "CPU); it measures no speed.")
# N = 1, odd lengths, and rows past both kernels' (XLA's formulas inside the op)
CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000)] if ON_GPU else [(17, 1), (33, 257)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's

def gradients(fn, x, w, dy):
    y, pullback = jax.vjp(fn, x, w)
    return (y, *pullback(dy))

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16; the page stops unless each of ours is within
    TOLERANCE of its dtype or twice XLA's."""
    errors = pd.DataFrame([check_row(s, d, jax.random.key(i)) for d in ("float32", "float16", "bfloat16")
                           for i, s in enumerate(shapes)])
    for q in ("y", "dx", "dw"):
        assert (errors[f"Pallas {q}"] <= (2 * errors[f"XLA {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
    return errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

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

def bench(fn, *args):  # median ms of one call
    def run():  # CALLS calls back to back (JAX queues them), then one wait for the last
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    run()  # compile and warm up outside the timing
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

def sweep():  # the backward at every N, ours and XLA's, beside a copy
    copy, pull, records = jax.jit(jnp.copy), jax.jit(lambda pullback, dy: pullback(dy)), []  # jit takes a pullback
    for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
        x, dy = (jax.random.normal(jax.random.key(k), (TOTAL_ELEMENTS // n_cols, n_cols), dtype) for k in (0, 1))
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
        runs = {"speed of light": (copy, (x,))}  # provider: what bench() times
        for provider, fn in [("XLA (jnp, jit)", jax.jit(rms_norm_reference)), ("Pallas (ours)", jax.jit(rms_norm))]:
            runs[provider] = pull, (jax.vjp(fn, x, w)[1], dy)  # the pullback of one forward, as training runs it
        rounds = [{key: bench(fn, *args) for key, (fn, args) in runs.items()} for _ in range(ROUNDS)]
        ms = {key: min(r[key] for r in rounds) for key in runs}
        light = 2 * x.nbytes / ms.pop("speed of light") * 1e-6
        for provider, t in ms.items():
            gbs = 3 * x.nbytes / t * 1e-6
            records.append({"direction": "backward", "dtype": dtype, "N": n_cols, "provider": provider, "GB/s": gbs,
                            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
        del x, w, dy, runs
    return pd.DataFrame(records)

def summary(results):
    """The table of GB/s by direction, dtype and N, with ours in % of light and against XLA's, as a Styler (.data:
    the table); written for the site's landing page when the build names a folder for it."""
    keys = ["direction", "dtype", "N"]
    results["dtype"] = pd.Categorical(results["dtype"], ["float32", "bfloat16"])  # fp32 first in tables and plot
    table = results.pivot(index=keys, columns="provider", values="GB/s")[["XLA (jnp, jit)", "Pallas (ours)"]]
    table.insert(0, "speed of light", results.groupby(keys, observed=True)["speed of light GB/s"].first())
    table["ours, % of light"] = table["Pallas (ours)"] / table["speed of light"] * 100
    table["ours / XLA"] = table["Pallas (ours)"] / table["XLA (jnp, jit)"]
    if os.environ.get("SOL_RESULTS"):  # the summary the site's landing page reads
        table[["ours, % of light", "ours / XLA"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
            os.path.join(os.environ["SOL_RESULTS"], "05_jax_rms_norm_backward.csv"))
    fmt = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / XLA": "{:.2f}"}
    return table.style.format(fmt, na_rep="-")

def plot(table):  # ours and XLA's as a percentage of the copy beside them (on a GPU)
    if not ON_GPU:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white", layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes, table.data.groupby(level=[0, 1], observed=True)):
        n = part.index.get_level_values("N")
        for provider, style in (("Pallas (ours)", "-o"), ("XLA (jnp, jit)", "--o")):
            ax.plot(n, 100 * part[provider] / part["speed of light"], style, markersize=3, label=provider)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.set_xticks(SWEEP_N, SWEEP_N), ax.minorticks_off(), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.legend(loc="best", fontsize=7)
    fig.suptitle(f"RMSNorm's backward in JAX, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def reading(table):  # the sentences under "Reading the numbers", from this run's table
    inside = [n in RANGE[d, t] for d, t, n in table.index]
    light, xla, past = table["ours, % of light"], table["ours / XLA"], table[[not i for i in inside]]
    xla_light = 100 * table["XLA (jnp, jit)"] / table["speed of light"]
    text = [f"Inside its range (N up to {WHOLE_ROW_N}) ours ran at {light[inside].min():.3g}-"
            f"{light[inside].max():.3g}% of the copy and {xla[inside].min():.2f}x to {xla[inside].max():.2f}x XLA's "
            f"fusion of the gradient, which ran at {xla_light[inside].min():.3g}-{xla_light[inside].max():.3g}% of "
            "the copy."]
    peers, ours = table[inside].filter(items=["XLA (jnp, jit)"]), table["Pallas (ours)"]
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {ours[i]:,.0f})" for i in peers.index if ours[i] < peers.loc[i].max()]
    if lost:
        text.append(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    if len(past):
        text.append(f"Past it, {past['ours / XLA'].min():.2f}x to {past['ours / XLA'].max():.2f}x XLA's: rows past "
                    f"{WHOLE_ROW_N} are XLA's formulas inside our op.")
    if light.max() > 100:
        text.append(f"Ours ran above the copy at {light.idxmax()}: {light.max():.1f}%. A copy reads one byte for each "
                    "it writes, the backward two (x and dy) for each byte of dx, and memory serves reads faster than "
                    "a mix that turns the bus from reading to writing.")
    return "\n".join(text)

def check_step(ours, reference):
    """Two jitted gradient steps, fn(h, w) -> (dh, dw), on the same random rows and weight: the same gradients."""
    h, w = jax.random.normal(jax.random.key(1), (32, 1000)), 1 + 0.1 * jax.random.normal(jax.random.key(2), (1000,))
    for got, want in zip(ours(h, w), reference(h, w)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=1e-6)
    return "jax.jit(jax.grad(...)) through rms_norm: the formula's gradients"

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

def closing_card():  # the card; the site is built in one process, so this page's GPU memory is freed for the next
    card = environment_card()
    for array in jax.live_arrays():
        array.delete()
    jax.clear_caches()
    return card

# %%
# Correctness
# -----------
# ``rms_norm``'s :math:`y, dx, dw` against ``jax.vjp`` of the formula in float64, beside XLA's: ``check`` stops the
# page on a relative error past both a few roundings of its dtype and twice XLA's.

check(CHECK_SHAPES)

# %%
# **In a training step**: ``jax.jit(jax.grad(...))`` through ``rms_norm``, against the formula's (``check_step``).

step = lambda norm: jax.jit(jax.grad(lambda h, w: jnp.mean(norm(h, w) ** 2), argnums=(0, 1)))  # noqa: E731
check_step(step(rms_norm), step(rms_norm_reference))

# %%
# Benchmark
# ---------
# :math:`2^{27}` elements as rows of N = 1 K to 32 K, GB/s (higher is better), then in % of the copy:

table = summary(sweep())  # and the landing page's CSV
table if ON_GPU else print(NO_SPEED)

# %%

plot(table)

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

print(reading(table.data) if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# Rows past ``WHOLE_ROW_N``, on Hopper:
# :ref:`sphx_glr_tutorials_deep_dives_52_rms_norm_mosaic_gpu_backward.py`. Over several GPUs, one ``psum`` of
# :math:`dw`: :ref:`sphx_glr_tutorials_05_jax_rms_norm_sharded.py`. **Exercises**: sum :math:`dw` with
# ``jnp.sum(dw_partial, axis=0)``: the same bits on every run? Load each block in its own ``step``, not one ahead:
# what do the GB/s say?
#
# Where this page was made
# ------------------------

closing_card()
