"""
RMSNorm as a JAX custom op
==========================

Tutorial 04's RMSNorm for JAX: Pallas kernels (``jax.experimental.pallas``) made one differentiable function with
``jax.custom_vjp``, against the speed of light (a copy) and XLA's fusion of the formula. Sharded over several GPUs:
:ref:`sphx_glr_tutorials_05_jax_rms_norm_sharded.py`.

**Which Pallas backend.** JAX 0.11 deprecates Pallas' Triton backend, used here, in favour of Mosaic GPU
(``jax.experimental.pallas.mosaic_gpu``: shared memory, TMA, barriers, clusters), which needs a Hopper GPU or newer.
This page keeps the Triton backend because it runs on every NVIDIA GPU the site supports and its kernels read like
tutorial 04's; Mosaic GPU is the way past 8 K columns on Hopper.

**What you will learn**: a masked Pallas kernel, then one that prefetches; its gradient with ``jax.custom_vjp``,
:math:`dw` summed in fp32 in a fixed order (bitwise deterministic). Prerequisites: the algorithm, :ref:`sphx_glr_tutorials_04_rms_norm.py`.
"""

import contextlib, datetime, functools, importlib.metadata, importlib.util, itertools, os, platform, statistics, \
    subprocess, timeit
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
# XLA fuses it as it sees fit under ``jax.jit``; no kernel moves fewer than :math:`2MN` elements (:math:`x`
# in, :math:`y` out). With :math:`g = dy \odot w`, the gradient :math:`dx = r\,(g - \hat{x}\,\frac{1}{N}\sum_j
# g_j \hat{x}_j)` sums **along each row**, :math:`dw = \sum_{\text{rows}} dy \odot \hat{x}` **down each column**:
# a fusion of one loop order reads :math:`x, dy` twice: :math:`5MN` elements, where one kernel moves :math:`3MN`.
#
# The forward kernel, step 0: a block of whole rows a program
# ------------------------------------------------------------
# The Pallas a reader needs: a kernel gets *refs* (``x_ref``), views of arrays in GPU memory; ``ref.at[idx]``
# addresses a tile of one and ``plgpu.load``/``plgpu.store`` move it, masked. ``pl.program_id(0)`` is this program's
# index in the grid. ``pl.pallas_call(kernel, grid=(P,), out_shape=...)`` makes the kernel a function of arrays run by
# ``P`` programs, ``out_shape`` giving the outputs' shapes and dtypes; ``interpret=True`` runs it on the CPU.
# Each program takes ``BLOCK_M`` whole rows; a block is a power of two wide (Triton's tiles are), so columns past
# :math:`N` and rows past :math:`M` are masked: never read, never written. No loop: the block is in registers once.

def _tile(rows, cols, n_rows, n_cols):  # indices and in-bounds mask of the tile rows x cols
    return (rows[:, None], cols[None, :]), (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
def _load(ref, idx, ok, policy=None):  # masked elements read as 0; everything is computed in fp32
    return plgpu.load(ref.at[idx], mask=ok, other=0, eviction_policy=policy).astype(jnp.float32)

def fwd_plain_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, BLOCK_M, BLOCK_N):
    """Step 0: program p normalises rows p * BLOCK_M ... (p + 1) * BLOCK_M - 1, whole, in one go."""
    (n_rows, n_cols), cols = x_ref.shape, jnp.arange(BLOCK_N)
    rows = pl.program_id(0) * BLOCK_M + jnp.arange(BLOCK_M)
    idx, ok = _tile(rows, cols, n_rows, n_cols)
    x = _load(x_ref, idx, ok)
    rstd = jax.lax.rsqrt(jnp.sum(x * x, axis=1) / n_cols + eps)  # padding adds 0
    y = x * rstd[:, None] * _load(w_ref, cols, cols < n_cols)[None, :]
    plgpu.store(y_ref.at[idx], y.astype(y_ref.dtype), mask=ok)
    plgpu.store(rstd_ref.at[rows], rstd, mask=rows < n_rows)

# %%
# Step 1, the production forward: the row in ``PARTS`` parts, the next block's first ``AHEAD`` parts loaded before
# this one is scaled and stored (a prefetch). An fp32 row of 32 K fills an SM's registers alone, so in step 0 nothing
# would be in flight while it is summed and stored; a program per SM loads early. Shorter rows: step 0's work.

def fwd_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, BLOCK_M, BLOCK_N, PARTS, AHEAD):
    """Blocks of BLOCK_M whole rows padded to BLOCK_N columns, in PARTS parts; program p takes blocks p, p + P,
    ... and loads the next block's first AHEAD parts before it scales and stores this one."""
    (n_rows, n_cols), pid, n_programs = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    cols = [k * (BLOCK_N // PARTS) + jnp.arange(BLOCK_N // PARTS) for k in range(PARTS)]
    load = lambda block, k: _load(x_ref, *_tile(block * BLOCK_M + jnp.arange(BLOCK_M), cols[k], n_rows, n_cols))
    def step(i, ahead):
        block = pid + i * n_programs
        rows, x = block * BLOCK_M + jnp.arange(BLOCK_M), list(ahead) + [load(block, k) for k in range(AHEAD, PARTS)]
        rstd = jax.lax.rsqrt(jnp.sum(sum(v * v for v in x), axis=1) / n_cols + eps)  # one reduction; padding adds 0
        ahead = tuple(load(block + n_programs, k) for k in range(AHEAD))  # past the last row: loads nothing
        for k, v in enumerate(x):
            idx, ok = _tile(rows, cols[k], n_rows, n_cols)
            y = v * rstd[:, None] * _load(w_ref, cols[k], cols[k] < n_cols)[None, :]
            plgpu.store(y_ref.at[idx], y.astype(y_ref.dtype), mask=ok)
        plgpu.store(rstd_ref.at[rows], rstd, mask=rows < n_rows)
        return ahead
    n_mine = pl.cdiv(pl.cdiv(n_rows, BLOCK_M) - pid, n_programs)  # blocks pid, pid + P, ... before the end
    jax.lax.fori_loop(0, n_mine, step, tuple(load(pid, k) for k in range(AHEAD)))

# %%
# The fallback for 16-bit rows past 16 K, as in tutorial 04: a row read twice in chunks, kept in L2 between.

def fwd_chunked_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, CHUNK_N, CHUNKS):
    """One row a program, read twice in CHUNKS chunks of CHUNK_N columns."""
    (_, n_cols), row, ar = x_ref.shape, pl.program_id(0), jnp.arange(CHUNK_N)
    def chunk(k, policy):  # chunk k of the row, as stored (past either end of the row: loads nothing)
        col = k * CHUNK_N + ar
        return plgpu.load(x_ref.at[row, col], mask=(col >= 0) & (col < n_cols), other=0, eviction_policy=policy)
    def add(k, carry):
        sum_sq, x = carry
        x_next = chunk(k + 1, "evict_last")
        return sum_sq + jnp.square(x.astype(jnp.float32)), x_next
    init = jnp.zeros((CHUNK_N,), jnp.float32), chunk(0, "evict_last")
    rstd = jax.lax.rsqrt(jnp.sum(jax.lax.fori_loop(0, CHUNKS, add, init)[0]) / n_cols + eps)
    plgpu.store(rstd_ref.at[pl.ds(row, 1)], jnp.full((1,), rstd))
    def scale(i, x):
        k = CHUNKS - 1 - i  # backwards
        col, x_next = k * CHUNK_N + ar, chunk(k - 1, "evict_first")
        y = x.astype(jnp.float32) * rstd * _load(w_ref, col, col < n_cols)
        plgpu.store(y_ref.at[row, col], y.astype(y_ref.dtype), mask=col < n_cols, eviction_policy="evict_first")
        return x_next
    jax.lax.fori_loop(0, CHUNKS, scale, chunk(CHUNKS - 1, "evict_first"))

# %%
# The backward: one kernel for both gradients
# -------------------------------------------
# As in tutorial 04: program :math:`p` of a persistent grid takes blocks :math:`p, p + P`, ... in a
# ``jax.lax.fori_loop``, writes :math:`dx`, adds :math:`dy \odot \hat{x}` into an fp32 ``dw_partial`` stored once,
# and loads the next block first. A row too long for registers is walked twice.

def bwd_kernel(x_ref, w_ref, rstd_ref, dy_ref, dx_ref, dw_partial_ref, *, BLOCK_M, CHUNK_N, CHUNKS):
    """Program p does blocks p, p + P, ... and stores its dw_partial row, zeros included."""
    (n_rows, n_cols), pid, n_programs = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    cols = [k * CHUNK_N + jnp.arange(CHUNK_N) for k in range(CHUNKS)]
    weight = lambda col: _load(w_ref, col, col < n_cols)[None, :]
    w_kept = weight(cols[0]) if CHUNKS == 1 else None  # a whole row: loaded once per program

    def x_and_dy(rows, col, policy=None):
        idx, ok = _tile(rows, col, n_rows, n_cols)
        return _load(x_ref, idx, ok, policy), _load(dy_ref, idx, ok, policy)

    def step(i, carry):
        dw_partial, ahead = carry
        rows = (pid + i * n_programs) * BLOCK_M + jnp.arange(BLOCK_M)
        rstd = plgpu.load(rstd_ref.at[rows], mask=rows < n_rows, other=0)[:, None]
        if CHUNKS == 1:  # the next block's loads go out first; past the end they load nothing
            (x, dy), ahead = ahead, x_and_dy(rows + n_programs * BLOCK_M, cols[0])
            dot = jnp.sum(dy * w_kept * x, axis=1, keepdims=True)
        else:  # a loop, not unrolled: one chunk's loads alive at a time, kept in L2 for the second walk
            def add(k, acc):
                col = k * CHUNK_N + jnp.arange(CHUNK_N)
                x, dy = x_and_dy(rows, col, "evict_last")
                return acc + dy * weight(col) * x
            dot = jnp.sum(jax.lax.fori_loop(0, CHUNKS, add, jnp.zeros((BLOCK_M, CHUNK_N), jnp.float32)), 1, keepdims=True)
        mean_gx_hat = dot * rstd / n_cols  # (1/N) sum_j g_j x_hat_j: the row reduction of dx
        dw_partial = list(dw_partial)
        for k, col in enumerate(cols):  # unrolled: each dw_partial[k] is a tile of registers
            if CHUNKS > 1:
                x, dy = x_and_dy(rows, col, "evict_first")
            x_hat, (idx, ok) = x * rstd, _tile(rows, col, n_rows, n_cols)
            dx = (dy * (w_kept if CHUNKS == 1 else weight(col)) - x_hat * mean_gx_hat) * rstd
            plgpu.store(dx_ref.at[idx], dx.astype(dx_ref.dtype), mask=ok)
            dw_partial[k] = dw_partial[k] + dy * x_hat  # the column reduction, in fp32
        return dw_partial, ahead

    first = pid * BLOCK_M + jnp.arange(BLOCK_M)
    init = [jnp.zeros((BLOCK_M, CHUNK_N), jnp.float32)] * CHUNKS, x_and_dy(first, cols[0]) if CHUNKS == 1 else None
    n_mine = pl.cdiv(pl.cdiv(n_rows, BLOCK_M) - pid, n_programs)  # blocks pid, pid + P, ... before the end
    dw_partial, _ = jax.lax.fori_loop(0, n_mine, step, init)
    for k, col in enumerate(cols):
        plgpu.store(dw_partial_ref.at[pid, col], jnp.sum(dw_partial[k], axis=0), mask=col < n_cols)

def dw_sum_kernel(dw_partial_ref, dw_ref, *, BLOCK_P, BLOCK_N):
    """dw[j] = sum over p of dw_partial[p, j] in a fixed order: bitwise the same on every run."""
    n_partials, n_cols = dw_partial_ref.shape
    cols = pl.program_id(0) * BLOCK_N + jnp.arange(BLOCK_N)
    add = lambda i, acc: acc + _load(dw_partial_ref, *_tile(i * BLOCK_P + jnp.arange(BLOCK_P), cols, n_partials, n_cols))
    acc = jax.lax.fori_loop(0, pl.cdiv(n_partials, BLOCK_P), add, jnp.zeros((BLOCK_P, BLOCK_N), jnp.float32))
    plgpu.store(dw_ref.at[cols], jnp.sum(acc, axis=0), mask=cols < n_cols)

# %%
# Launch parameters
# -----------------
# One config function a kernel; the backward's numbers are tutorial 04's. The forward picks
# kernels per N the other way round from tutorial 04 (there fp32 rows past 16 K are read in chunks, here 16-bit
# ones): JAX, not Triton's front end, builds these kernels' Triton IR, so the same design compiles differently, and
# on these kernels a whole fp32 row of 32 K with its next parts loaded early beat two passes, which won for 16 bits.

NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4  # a GPU's SMs; on the CPU, four stand-ins
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
WHOLE_ROW_N = 8192  # the backward's longest row held whole (x, dy, the next block's, dw_partial in registers)
CHUNK_N = 4096  # the backward's columns per chunk of a longer row
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
MAX_N = 32768  # longest row: a backward program keeps a row of dw_partial in registers (32 fp32 a thread)
# The N these kernels are for (the landing page recommends them there); past 8 K they run, slower ("Going further")
RANGE = {(d, t): range(1, 8192 + 1) for d in ("forward", "backward") for t in ("float32", "bfloat16")}
# warps such that each thread handles about bytes_per_thread bytes of a tile of n elements (4 to 32 warps);
# Triton's compiler parameters pick Pallas' Triton backend; one stage: our loops prefetch by hand
_warps = lambda n, itemsize, bytes_per_thread: min(32, max(4, n * itemsize // (32 * bytes_per_thread)))
_params = lambda warps, stages=1: plgpu.CompilerParams(num_warps=warps, num_stages=stages)

def _fwd_config(n_rows, n_cols, itemsize):
    """(kernel, meta, grid, compiler params): a program per block of whole rows, or per row read in chunks."""
    block_n = pl.next_power_of_2(n_cols)
    if itemsize < 4 and block_n > 16384:  # 16-bit rows past 16 K: two passes, 8 K columns a chunk, 8 values a thread
        return fwd_chunked_kernel, dict(CHUNK_N=8192, CHUNKS=pl.cdiv(n_cols, 8192)), n_rows, _params(32)
    block_m = max(1, MIN_ELEMENTS // block_n)  # several short rows a program
    warps = _warps(block_m * block_n, itemsize, 64)  # one tile alive: 64 bytes a thread
    if block_n > 16384:  # fp32 rows of 32 K: a program an SM (32 warps), 2 of 8 parts of the next row loaded early
        return fwd_kernel, dict(BLOCK_M=1, BLOCK_N=block_n, PARTS=8, AHEAD=2), min(n_rows, NUM_SMS), _params(32)
    # at most 16 warps (32 fp32 a thread at 16 K: two programs an SM) where that holds the row
    return fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, PARTS=1, AHEAD=0), pl.cdiv(n_rows, block_m), \
        _params(min(16, warps))

def _bwd_config(n_rows, n_cols, itemsize):
    """(meta, grid, compiler params): persistent; the grid depends on the shape only, so do dw's sums."""
    block_n = pl.next_power_of_2(n_cols)
    if block_n > WHOLE_ROW_N:  # a row at a time: dw_partial takes n_cols / (32 * warps) registers a thread
        meta, warps = dict(BLOCK_M=1, CHUNK_N=CHUNK_N, CHUNKS=pl.cdiv(n_cols, CHUNK_N)), 32
    else:  # x, dy, the next block's and dw_partial alive: 32 bytes a thread; 16 once a 16 KB row fills a program
        meta = dict(BLOCK_M=max(1, MIN_ELEMENTS // block_n), CHUNK_N=block_n, CHUNKS=1)
        warps = _warps(meta["BLOCK_M"] * block_n, itemsize, 16 if n_cols * itemsize >= 16384 else 32)
    grid = min(pl.cdiv(n_rows, meta["BLOCK_M"]), max(1, WARPS_PER_SM // warps) * NUM_SMS)
    return meta, max(1, grid), _params(warps)

def _sum_config(n_cols):
    """dw_sum_kernel: narrow strips of columns, many programs, each summing all partials in order."""
    return dict(BLOCK_P=64, BLOCK_N=16 if n_cols <= 4096 else 32), _params(4)

# %%
# The drop-in function
# --------------------
# ``jax.custom_vjp`` pairs forward and backward (the page's one idea); the forward saves :math:`x`, :math:`w`, ``rstd``.

def _forward(x2d, w, eps):
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((0,), f32)
    kernel, meta, grid, params = _fwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((n_rows,), f32)
    return pl.pallas_call(functools.partial(kernel, eps=eps, **meta), out_shape=out_shape, grid=(grid,),
                          compiler_params=params, interpret=INTERPRET)(x2d, w)

def _backward(x2d, w, rstd, dy2d):  # dx in x's dtype, dw in fp32 (the sum over this device's rows)
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:  # no rows: the sum over rows is empty
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((n_cols,), f32)
    meta, grid, params = _bwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((grid, n_cols), f32)
    dx, dw_partial = pl.pallas_call(functools.partial(bwd_kernel, **meta), out_shape=out_shape, grid=(grid,),
                                    compiler_params=params, interpret=INTERPRET)(x2d, w, rstd, dy2d)
    meta, params = _sum_config(n_cols)
    dw = pl.pallas_call(functools.partial(dw_sum_kernel, **meta), out_shape=jax.ShapeDtypeStruct((n_cols,), f32),
                        grid=(pl.cdiv(n_cols, meta["BLOCK_N"]),), compiler_params=params, interpret=INTERPRET)(dw_partial)
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
SUPPORTED_DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)
def _check(x, weight, eps):
    for name, t in (("x", x), ("weight", weight)):
        if jnp.dtype(t.dtype) not in SUPPORTED_DTYPES:
            raise TypeError(f"rms_norm: {name} has dtype {t.dtype}; these kernels support float32, float16 and "
                            "bfloat16 (cast it with .astype(jnp.float32))")
    if x.ndim == 0 or not 1 <= x.shape[-1] <= MAX_N:
        raise ValueError(f"rms_norm: x has shape {tuple(x.shape)}; rows (the last axis) of 1 to {MAX_N} elements "
                         "(MAX_N) are supported; tutorial 04's deep dive 41 splits longer rows over programs")
    if tuple(weight.shape) != x.shape[-1:]:
        raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, expected ({x.shape[-1]},): one "
                         f"value per element of x's last axis (x has shape {tuple(x.shape)})")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"rms_norm: eps must be a Python float (it is compiled in), got {type(eps).__name__}")

def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x (..., N), weight (N,): differentiable, jit-able; fp32, fp16, bf16."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check(x, weight, eps)
    return _rms_norm_rows(float(eps))(x.reshape(-1, x.shape[-1]), weight).reshape(x.shape)

# %%
# Correctness
# -----------
# Relative errors of :math:`y, dx, dw` against ``jax.grad`` of the formula in float64, beside XLA's (:math:`dx`
# relative to its terms' size, :math:`r g`).

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 32768)] \
    if ON_GPU else [(17, 1), (33, 257), (3, 20000)]

def gradients(fn, x, w, dy):
    y, pullback = jax.vjp(fn, x, w)
    return (y, *pullback(dy))
def check_row(shape, dtype, key):
    kx, kw, kd = jax.random.split(key, 3)
    x, dy = (3 * jax.random.normal(kx, shape)).astype(dtype), jax.random.normal(kd, shape).astype(dtype)
    w = (1 + 0.5 * jax.random.normal(kw, shape[-1:])).astype(dtype)
    with jax.enable_x64(True):
        x64, w64, dy64 = (jnp.asarray(t, jnp.float64) for t in (x, w, dy))
        refs = [np.asarray(r) for r in gradients(rms_norm_reference, x64, w64, dy64)]
        r_g = np.asarray(dy64 * w64 * jax.lax.rsqrt(jnp.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6))
    scales = [np.linalg.norm(refs[0]), np.linalg.norm(r_g), np.linalg.norm(refs[2])]
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": jnp.dtype(dtype).name}
    for name, fn in [("Pallas", rms_norm), ("XLA", rms_norm_reference)]:
        outs = gradients(jax.jit(fn), x, w, dy)
        row |= {f"{name} {q}": float(np.linalg.norm(np.asarray(out, np.float64) - ref) / scale)
                for q, out, ref, scale in zip(("y", "dx", "dw"), outs, refs, scales)}
    return row

errors = pd.DataFrame([check_row(s, d, jax.random.key(i)) for d in SUPPORTED_DTYPES for i, s in enumerate(CHECK_SHAPES)])
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's
for q in ("y", "dx", "dw"):
    assert (errors[f"Pallas {q}"] <= (2 * errors[f"XLA {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# The timer ``bench`` issues ``CALLS`` calls back to back (JAX queues them), waits for the last and takes the median
# of ``REPEATS`` runs; ``write_summary`` writes the front page's CSV; the environment card closes the page. The
# *speed of light* is a copy of :math:`x` in JAX; GB/s counts :math:`x, y` forward, :math:`x, dy, dx` backward.

if TORCH_PEER := ON_GPU and importlib.util.find_spec("torch") is not None:  # PyTorch's copy, beside JAX's
    import torch
    TORCH_PEER = torch.cuda.is_available()
# 2**27 elements: each call's kernels run well past the host's time to start a call (at 2**26 a bf16 copy does not)
EPS, TOTAL_ELEMENTS, (CALLS, REPEATS, ROUNDS) = 1e-6, 2**27 if ON_GPU else 2**13, (10, 7, 2) if ON_GPU else (1, 1, 1)
SWEEP_N = [2**k for k in range(10, 16)] if ON_GPU else [1024, 4096]  # on the CPU: XLA compiles each N, slowly

def bench(fn, *args, wait=jax.block_until_ready):  # median ms of one call
    def run():  # CALLS calls back to back (JAX queues them), then one wait for the last
        for _ in range(CALLS):
            out = fn(*args)
        wait(out)
    run()  # compile and warm up outside the timing
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

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

# %%
# The ladder, measured
# --------------------
# Step 0 against step 1 (the drop-in's forward), fp32, at a short N and (on a GPU) 32 K, where prefetch matters.

def plain_forward(x2d, w, eps=EPS):  # step 0 launched with the production block sizes
    n_rows, block_n = x2d.shape[0], pl.next_power_of_2(x2d.shape[1])
    block_m = max(1, MIN_ELEMENTS // block_n)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((n_rows,), jnp.float32)
    return pl.pallas_call(functools.partial(fwd_plain_kernel, eps=eps, BLOCK_M=block_m, BLOCK_N=block_n),
                          out_shape=out_shape, grid=(pl.cdiv(n_rows, block_m),), interpret=INTERPRET,
                          compiler_params=_params(_warps(block_m * block_n, x2d.dtype.itemsize, 64)))(x2d, w)

STEPS = [(0, "a block of whole rows a program", plain_forward),
         (1, "the row in PARTS, the next block's AHEAD parts loaded early", functools.partial(_forward, eps=EPS))]
ladder_rows = []
for n_cols in ([4096, 32768] if ON_GPU else [1024]):
    x = jax.random.normal(jax.random.key(0), (TOTAL_ELEMENTS // n_cols, n_cols), jnp.float32)
    w = jnp.ones((n_cols,), jnp.float32)
    light = 2 * x.nbytes / bench(jax.jit(jnp.copy), x) * 1e-6
    for step, idea, fn in STEPS:
        gbs = 2 * x.nbytes / bench(jax.jit(fn), x, w) * 1e-6
        ladder_rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": gbs, "% of light": 100 * gbs / light})
    del x, w
ladder = pd.DataFrame(ladder_rows)
ladder.style.format({"GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

# %%

for n_cols, part in ladder.groupby("N"):
    gain = part["GB/s"].iloc[1] / part["GB/s"].iloc[0]
    print(f"At N = {n_cols}, step 1 runs at {gain:.2f}x step 0's GB/s ({part['% of light'].iloc[0]:.3g}% -> "
          f"{part['% of light'].iloc[1]:.3g}% of the copy).")

# %%
# Benchmark
# ---------
# Every N, both directions, providers taking turns ``ROUNDS`` times (the fastest round kept); the peer is XLA's
# fusion of the formula, PyTorch's copy a cross-check of the light.

copy, pull, records = jax.jit(jnp.copy), jax.jit(lambda pullback, dy: pullback(dy)), []  # jit takes a pullback (pytree)
for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
    x, dy = (jax.random.normal(jax.random.key(k), (TOTAL_ELEMENTS // n_cols, n_cols), dtype) for k in (0, 1))
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
    runs = {("copy", "speed of light"): (copy, (x,), {})}  # (direction, provider): what bench() times
    for provider, fn in [("XLA (jnp, jit)", jax.jit(rms_norm_reference)), ("Pallas (ours)", jax.jit(rms_norm))]:
        runs |= {("forward", provider): (fn, (x, w), {}), ("backward", provider): (pull, (jax.vjp(fn, x, w)[1], dy), {})}
    if TORCH_PEER:  # the same values, copied: a view of JAX's buffers freed after JAX's client ends crashes the process
        xt, sync = torch.from_dlpack(x).clone(), dict(wait=lambda _: torch.cuda.synchronize())
        runs["forward", "PyTorch copy"] = functools.partial(torch.Tensor.copy_, torch.empty_like(xt), xt), (), sync
    rounds = [{key: bench(fn, *args, **kwargs) for key, (fn, args, kwargs) in runs.items()} for _ in range(ROUNDS)]  # turns
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
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / XLA": "{:.2f}"}, na_rep="-")

# %%
# Each provider as a percentage of the copy beside it:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
styles = {"Pallas (ours)": ("-o", "C0"), "XLA (jnp, jit)": ("--o", "C1"), "PyTorch copy": (":", "C7")}
for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], observed=True)):
    shares = part.pivot(index="N", columns="provider", values="% of speed of light")
    shares.plot(ax=ax, style={p: styles[p][0] for p in shares}, color={p: styles[p][1] for p in shares}, markersize=3,
                title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
    ax.set_xscale("log", base=2), ax.set_xticks(SWEEP_N, SWEEP_N), ax.minorticks_off()
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.grid(True, alpha=0.3), ax.legend(loc="best", fontsize=7)
title = fig.suptitle(f"RMSNorm in JAX, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")

# %%
# Reading the numbers
# -------------------
# Computed from the tables above:

for (direction, dtype), part in table.groupby(level=["direction", "dtype"], sort=False, observed=True):
    part = part.droplevel(["direction", "dtype"])
    light, xla = part["ours, % of light"], part["ours / XLA"]
    print(f"{direction}, {dtype}: ours runs at {light.min():.3g}-{light.max():.3g}% of the copy over N = "
          f"{part.index.min()}..{part.index.max()}, at {xla.min():.3g}x to {xla.max():.3g}x XLA's fusion.")
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")
write_summary(table)

# %%
# Going further
# -------------
# Rows stop at ``MAX_N`` (deep dive 41 of tutorial 04 splits longer rows over programs); past 8 K columns the way on
# is Mosaic GPU on Hopper: a row split over a program's warpgroups for the forward
# (:ref:`sphx_glr_tutorials_deep_dives_51_rms_norm_mosaic_gpu.py`), shared memory and clusters for the backward
# (:ref:`sphx_glr_tutorials_deep_dives_52_rms_norm_mosaic_gpu_backward.py`).
# **Exercises**: sum :math:`dw` with ``jnp.sum(dw_partial, axis=0)``:
# is it bitwise repeatable on your GPU? Try other ``PARTS`` and ``AHEAD`` for fp32 rows of 32 K. References: Zhang
# and Sennrich, *Root Mean Square Layer Normalization* (2019); the Pallas documentation.
#
# Where this page was made
# ------------------------

card = environment_card()
for array in jax.live_arrays():  # the site is built in one process: free this page's GPU memory for the next
    array.delete()
jax.clear_caches()
card
