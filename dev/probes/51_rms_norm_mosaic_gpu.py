"""
RMSNorm, wide rows through Mosaic GPU
=====================================

Tutorial 05's kernels hold a row in registers, which stops paying past 8 K columns. On a Hopper GPU, Pallas' other
backend, Mosaic GPU (``jax.experimental.pallas.mosaic_gpu``), gives a kernel the chip's **shared memory** (SMEM),
its **TMA** copy engine and **barriers**: here each row streams through a ring of SMEM slots, in chunks, while the
previous rows are computed and stored. **What you will learn**: a Mosaic GPU kernel (``plgpu.kernel``), a ring of
slots filled by TMA copies and guarded by barriers; a backward that keeps :math:`dw` in SMEM; both made one
differentiable function with ``jax.custom_vjp`` as in 05; measured against 05's kernels, XLA and JAX's copy.
Prerequisites: :ref:`sphx_glr_tutorials_05_jax_rms_norm.py`. Needs a Hopper GPU (H100, H200) or, on a CPU, Mosaic
GPU's interpreter (JAX 0.11.1 or newer, Python 3.12).
"""

import datetime, functools, importlib.metadata, itertools, os, platform, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: no GPU memory taken up front
import jax, jax.numpy as jnp, jaxlib, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
import matplotlib.pyplot as plt, pandas as pd

ON_GPU = jax.default_backend() == "gpu"
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = jax.devices()[0].device_kind if ON_GPU else "CPU only, Mosaic GPU's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · JAX {jax.__version__} · jaxlib {jaxlib.__version__} · {BUILT}")

# %%
# The bytes, and why shared memory
# --------------------------------
# The forward reads :math:`x` and writes :math:`y = x \cdot r \odot w`, :math:`r = 1/\sqrt{\overline{x^2} + \varepsilon}`:
# :math:`2MN` elements; the backward reads :math:`x, dy` and writes :math:`dx`: :math:`3MN` (05 derives both).
# :math:`r` needs the whole row before one :math:`y` can be written. A bf16 row of 32 K is 64 KB: a program's
# registers (05) hold it only with few programs an SM, too few loads in flight. An H100 SM has 227 KB of SMEM:
# several rows in flight, each kept there until its :math:`y` is out.
#
# A Mosaic GPU kernel
# -------------------
# ``plgpu.kernel(body, out_type, grid, scratch_types)`` runs ``body`` once a program (one warpgroup, 128 threads);
# the body gets *refs* to the inputs and outputs in GPU memory (GMEM) and to the scratch it asked for: SMEM arrays
# (``plgpu.SMEM``) and barriers (``plgpu.Barrier``). ``plgpu.copy_gmem_to_smem(src, dst, barrier)`` starts a TMA
# copy that arrives on ``barrier`` when done; ``plgpu.barrier_wait`` waits for it. ``plgpu.copy_smem_to_gmem``
# stores, after ``plgpu.commit_smem()`` has made the threads' SMEM writes visible to TMA; ``plgpu.wait_smem_to_gmem(n,
# wait_read_only=True)`` waits until at most ``n`` stores still read SMEM. Values read from a ref are arrays in
# registers, computed on with ``jax.numpy``. A TMA copy takes at most 256 elements along each dimension, so a chunk
# of ``CHUNK`` elements is a ``(CHUNK // 256, 256)`` tile; ``jnp.sum`` of a whole tile gives a scalar.

LANES = 256  # a TMA copy's longest dimension

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "lag", "interpret"))
def rms_norm_fwd(x, w, *, eps, programs, chunk, slots, lag, interpret=False):
    """y for x (M, N): program p takes rows p, p + programs, ...; each row's N // chunk chunks stream through a ring
    of `slots` SMEM slots (slot g % slots for the program's g-th chunk)."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    assert N % chunk == 0 and chunk % LANES == 0 and slots >= (lag + 1) * K, "a chunk must divide N; slots hold lag + 1 rows"
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars):
        p = jax.lax.axis_index("p")

        def fetch(g):  # the program's chunk g (row p + (g // K) * programs, chunk g % K) into slot g % slots
            row = p + (g // K) * programs
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row, g % K], ring.at[g % slots], bars.at[g % slots])

        plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar)  # w once a program
        for g in range(slots):  # the ring filled ahead
            fetch(g)
        plgpu.barrier_wait(w_bar)

        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                sum_sq = jnp.zeros((), jnp.float32)
                for c in range(K):  # the row's chunks, as they arrive
                    plgpu.barrier_wait(bars.at[(i * K + c) % slots])
                    x_c = ring[(i * K + c) % slots].astype(jnp.float32)
                    sum_sq += jnp.sum(x_c * x_c)
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                for c in range(K):  # y written over x in its slot, then stored from there
                    s = (i * K + c) % slots
                    ring[s] = (ring[s].astype(jnp.float32) * rstd * w_smem[c].astype(jnp.float32)).astype(ring.dtype)
                plgpu.commit_smem()
                for c in range(K):
                    plgpu.copy_smem_to_gmem(ring.at[(i * K + c) % slots], y_gmem.at[row, c])
                # refill the slots of the row `lag` steps back, once its stores have read them; this row's (and
                # the rows' since) stay in flight
                plgpu.wait_smem_to_gmem(K * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(K):
                        fetch((i - lag) * K + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((slots, T, LANES), x.dtype),
                                       plgpu.Barrier(), plgpu.Barrier(num_barriers=slots)],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

def _interpret(interpret):  # on a CPU: Mosaic GPU's interpreter, which also looks for races between threads and TMA
    return plgpu.InterpretGPUParams(detect_races=True, uninitialized_memory="nan") if interpret else None

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "interpret"))
def rms_norm_fwd_reread(x, w, *, eps, programs, chunk, slots, interpret=False):
    """y for rows whose w and one row do not fit SMEM together (fp32, 32 K): each row's chunks pass twice through the
    ring, the first time for the sum of squares (a slot refilled as soon as it is read), the second for y (refilled
    once its store has read it); the second reading comes from L2, where the first just brought the row."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    assert N % chunk == 0 and chunk % LANES == 0 and slots >= 1
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars):
        p = jax.lax.axis_index("p")

        def fetch(g):  # load g: row p + (g // 2K) * programs, chunk g % K (twice a row)
            row = p + (g // (2 * K)) * programs
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row, g % K], ring.at[g % slots], bars.at[g % slots])

        plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar)
        for g in range(slots):
            fetch(g)
        plgpu.barrier_wait(w_bar)

        def step(i, carry):
            row, base = p + i * programs, i * 2 * K
            @pl.when(row < M)
            def _():
                sum_sq = jnp.zeros((), jnp.float32)
                for c in range(K):  # first pass: read, then the slot is free
                    plgpu.barrier_wait(bars.at[(base + c) % slots])
                    x_c = ring[(base + c) % slots].astype(jnp.float32)
                    sum_sq += jnp.sum(x_c * x_c)
                    plgpu.commit_smem()  # every thread's reads of the slot done before TMA writes it again
                    fetch(base + c + slots)
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                for c in range(K):  # second pass: y over x, stored, the slot refilled once the store has read it
                    s = (base + K + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    ring[s] = (ring[s].astype(jnp.float32) * rstd * w_smem[c].astype(jnp.float32)).astype(ring.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(ring.at[s], y_gmem.at[row, c])
                    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                    fetch(base + K + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((slots, T, LANES), x.dtype),
                                       plgpu.Barrier(), plgpu.Barrier(num_barriers=slots)],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

# %%
# **Why the ring works.** A slot is refilled only after the stores that read it have read it (``wait_smem_to_gmem``)
# and read only after its copy arrived (its barrier): the interpreter's race detection checks both on the CPU. Each
# barrier completes once a lap of the ring; ``barrier_wait`` follows its phase. With ``lag = 1`` the program does not
# wait for the row it just stored, only for the one before: its stores overlap the next row's work.
#
# The backward: dw in shared memory
# ---------------------------------
# With :math:`g = dy \odot w`, :math:`dx = r\,g - x\, r^3 \overline{g\,x}` and :math:`dw = \sum_{\text{rows}} dy
# \odot x\, r` (05). Per row, pass 1 sums :math:`x^2` and :math:`g\,x` as the chunks of :math:`x` and :math:`dy`
# arrive through two rings; pass 2 writes :math:`dx` over :math:`dy` in its slot and adds :math:`dy\,x\,r` into the
# program's fp32 ``dw`` in SMEM, stored once at the end. XLA adds the programs' ``dw`` in program order: the same
# bits every run.
#
# **A row split over programs.** w and dw outgrow SMEM first (a bf16 row of 32 K: 64 KB of w, 128 KB of dw), so
# ``split`` programs (a *group*) share each row, each holding its columns' share. Each part stores its two sums to
# global memory by TMA, signals the group's others through global semaphores (``pl.get_global``; a semaphore's count
# goes back to zero by the end of the kernel), waits for theirs, loads the group's sums and adds them in part order.
# A waiting program holds its SM: every program must be on the GPU at once, one an SM.

@functools.partial(jax.jit, static_argnames=("eps", "groups", "split", "chunk", "slots", "lag", "interpret"))
def rms_norm_bwd(x, w, dy, *, eps, groups, split, chunk, slots, lag, interpret=False):
    """(dx, dw): program p is part p % split of group p // split; group g takes rows g, g + groups, ...; a part
    holds its columns' share of w and dw. With split > 1 every program must be on the GPU at once."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kq = K // split  # chunks of a part
    assert N % chunk == 0 and K % split == 0 and slots >= (lag + 1) * Kq, "chunks must divide a part; slots hold lag + 1 rows"
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, groups)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, sums_gmem, w_smem, dw_smem, xs, dys, w_bar, x_bars, dy_bars,
             *exchange_scratch):  # split > 1: this part's sums, the group's, their barrier
        pid = jax.lax.axis_index("p")
        g, q = pid // split, pid % split
        semaphores = pl.get_global(plgpu.SemaphoreType.REGULAR((groups * split,))) if split > 1 else None

        def fetch(k):  # the part's chunk k of the program's sequence
            row = g + (k // Kq) * groups
            @pl.when(row < M)
            def _():
                c = q * Kq + k % Kq
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[k % slots], x_bars.at[k % slots])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[k % slots], dy_bars.at[k % slots])

        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(q * Kq, Kq)], w_smem, w_bar)
        for k in range(slots):
            fetch(k)
        for c in range(Kq):
            dw_smem[c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar)

        def exchange(row, sum_sq, sum_gx):  # the group's sums, added in part order: the same in every part
            mine, group_sums, sums_bar = exchange_scratch
            mine[0], mine[1] = jnp.full((LANES,), sum_sq, jnp.float32), jnp.full((LANES,), sum_gx, jnp.float32)
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(mine, sums_gmem.at[row, q])
            plgpu.wait_smem_to_gmem(0)  # written, then the group's others are told
            for other in range(1, split):
                pl.semaphore_signal(semaphores.at[g * split + (q + other) % split], 1)
            pl.semaphore_wait(semaphores.at[pid], split - 1)
            plgpu.copy_gmem_to_smem(sums_gmem.at[row], group_sums, sums_bar)
            plgpu.barrier_wait(sums_bar)
            return (sum(jnp.sum(group_sums[part, 0]) for part in range(split)) / LANES,
                    sum(jnp.sum(group_sums[part, 1]) for part in range(split)) / LANES)

        def step(i, carry):
            row = g + i * groups
            @pl.when(row < M)
            def _():
                sum_sq, sum_gx = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)
                for c in range(Kq):
                    s = (i * Kq + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sum_sq += jnp.sum(x_c * x_c)
                    sum_gx += jnp.sum(dys[s].astype(jnp.float32) * w_smem[c].astype(jnp.float32) * x_c)
                if split > 1:
                    sum_sq, sum_gx = exchange(row, sum_sq, sum_gx)
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                k = rstd * rstd * rstd * sum_gx / N
                for c in range(Kq):
                    s = (i * Kq + c) % slots
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_smem[c] = dw_smem[c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * w_smem[c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(Kq):
                    plgpu.copy_smem_to_gmem(dys.at[(i * Kq + c) % slots], dx_gmem.at[row, q * Kq + c])
                plgpu.wait_smem_to_gmem(Kq * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(Kq):
                        fetch((i - lag) * Kq + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem, dw_gmem.at[g, pl.ds(q * Kq, Kq)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32),
                jax.ShapeDtypeStruct((M if split > 1 else 1, split, 2, LANES), jnp.float32))
    dx, dw_partial, _ = plgpu.kernel(
        body, out_type=out_type, grid=(groups * split,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((Kq, T, LANES), w.dtype), plgpu.SMEM((Kq, T, LANES), jnp.float32),
                       plgpu.SMEM((slots, T, LANES), x.dtype), plgpu.SMEM((slots, T, LANES), dy.dtype),
                       plgpu.Barrier(), plgpu.Barrier(num_barriers=slots), plgpu.Barrier(num_barriers=slots)]
                      + ([plgpu.SMEM((2, LANES), jnp.float32), plgpu.SMEM((split, 2, LANES), jnp.float32), plgpu.Barrier()]
                         if split > 1 else []),
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

# %%
# Launch parameters
# -----------------
# One place to change. One program an SM (a program's slots fill most of an SM's SMEM); chunks of 4 KB forward in
# 16-bit, 8-16 KB otherwise; as many rows of slots as fit next to w (and the backward's fp32 dw) in ``SMEM_BUDGET``,
# ``lag = 1`` where two fit; the backward splits a row over the fewest programs whose share fits.

NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4
SMEM_BUDGET = 224 * 1024  # of an H100 SM's 227 KB (Mosaic GPU's lowering checks the sum)
MIN_N = 2048
ROWS_IN_FLIGHT = {False: 4, True: 2}  # forward, backward: whole rows of slots, at most (DESIGN.md, session 30)
MAX_REREAD_SLOTS = 8  # a row read twice: chunks in flight

def _config(n_rows, n_cols, itemsize, backward=False):
    """Forward: (programs, chunk, slots, lag), lag None: the row read twice; backward: (groups, split, chunk, slots,
    lag); None where nothing fits."""
    chunk = next(c for c in (4096 if itemsize == 4 or backward else 2048, 2048, 1024, 512, 256) if n_cols % c == 0)
    for split in ((1, 2, 4) if backward else (1,)):  # the fewest parts a row whose share fits SMEM
        share = n_cols // split
        if n_cols % (split * chunk) or (split > 1 and not ON_GPU):  # the interpreter has no global semaphores
            continue
        fixed = share * itemsize + (share * 4 if backward else 0) + (split + 1) * 2 * LANES * 4 * (split > 1)  # w's
        # share (and dw's, in fp32), and the exchange's buffers
        rows = min((SMEM_BUDGET - fixed) // (share * itemsize * (2 if backward else 1)), ROWS_IN_FLIGHT[backward])
        if rows >= 1:
            k, lag = share // chunk, min(rows - 1, 1)
            if not backward:
                return min(n_rows, NUM_SMS), chunk, rows * k, lag
            return min(n_rows, NUM_SMS // split), split, chunk, rows * k, lag
    slots = (SMEM_BUDGET - n_cols * itemsize) // (chunk * itemsize)  # the forward, a row read twice: w and a few chunks
    return (min(n_rows, NUM_SMS), chunk, min(slots, MAX_REREAD_SLOTS), None) if not backward and slots >= 2 else None

# %%
# The drop-in function
# --------------------
# As in 05: ``jax.custom_vjp`` pairs the two kernels; the forward saves :math:`x` and :math:`w` (the backward
# recomputes :math:`r` in its first pass, which reads :math:`x` anyway).

def _check(x, weight, eps, backward=False):
    if jnp.dtype(x.dtype) not in (jnp.float32, jnp.bfloat16, jnp.float16) or weight.dtype != x.dtype:
        raise TypeError(f"rms_norm: x and weight must share a dtype of float32, bfloat16 or float16; got {x.dtype}, "
                        f"{weight.dtype}")
    n_cols = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or tuple(weight.shape) != (n_cols,):
        raise ValueError(f"rms_norm: x {tuple(x.shape)} and weight {tuple(weight.shape)}: weight must be (N,) for x (..., N)")
    if n_cols < MIN_N or n_cols % LANES:
        raise ValueError(f"rms_norm: rows of {n_cols} elements; this page's kernels take multiples of {LANES} from "
                         f"{MIN_N} (tutorial 05 takes any row up to 32 K)")
    if _config(1, n_cols, jnp.dtype(x.dtype).itemsize, backward) is None:
        raise ValueError(f"rms_norm: the {'backward' if backward else 'forward'} of {n_cols} {jnp.dtype(x.dtype).name} "
                         f"columns does not fit SMEM_BUDGET here, even split over 4 programs")

@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm_rows(x2d, w, eps):
    programs, chunk, slots, lag = _config(*x2d.shape, x2d.dtype.itemsize)
    if lag is None:
        return rms_norm_fwd_reread(x2d, w, eps=eps, programs=programs, chunk=chunk, slots=slots, interpret=not ON_GPU)
    return rms_norm_fwd(x2d, w, eps=eps, programs=programs, chunk=chunk, slots=slots, lag=lag, interpret=not ON_GPU)

def _fwd(x2d, w, eps):
    return _rms_norm_rows(x2d, w, eps), (x2d, w)

def _bwd(eps, saved, dy):
    x2d, w = saved
    _check(x2d, w, eps, backward=True)
    groups, split, chunk, slots, lag = _config(*x2d.shape, x2d.dtype.itemsize, backward=True)
    dx, dw = rms_norm_bwd(x2d, w, dy, eps=eps, groups=groups, split=split, chunk=chunk, slots=slots, lag=lag,
                          interpret=not ON_GPU)
    return dx, dw.astype(w.dtype)

_rms_norm_rows.defvjp(_fwd, _bwd)

def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x (..., N), weight (N,): differentiable, jit-able."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check(x, weight, eps)
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 0:
        return x
    return _rms_norm_rows(rows, weight, float(eps)).reshape(x.shape)

# %%
# Correctness
# -----------
# :math:`y, dx, dw` against ``jax.vjp`` of the formula in float64, relative errors, beside XLA's own in the dtype.

def reference(x, w, eps=1e-6):
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps) * w.astype(x32.dtype)).astype(x.dtype)

CHECK_SHAPES = [(300, 8192), (64, 16384), (33, 32768), (5, 12288)] if ON_GPU else [(5, 2048), (3, 4096)]

def float64_vjp(x, w, dy, eps=1e-6):  # y, dx, dw of the formula in float64 (NumPy)
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    r = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    g = dy * w
    return x * r * w, r * g - x * r**3 * np.mean(g * x, -1, keepdims=True), np.sum(dy * x * r, 0)

def check_row(shape, dtype):
    kx, kw, kd = jax.random.split(jax.random.key(shape[1]), 3)
    x, dy = (jax.random.normal(k, shape, jnp.float32).astype(dtype) for k in (kx, kd))
    w = (1 + 0.1 * jax.random.normal(kw, (shape[1],), jnp.float32)).astype(dtype)
    ref, row = float64_vjp(x, w, dy), {"shape": f"{shape[0]} x {shape[1]}", "dtype": jnp.dtype(dtype).name}
    for name, fn in (("ours", rms_norm), ("XLA", reference)):
        y, pullback = jax.vjp(fn, x, w)
        grads = pullback(dy) if name == "XLA" or _config(*shape, jnp.dtype(dtype).itemsize, True) else (None, None)
        for what, o, r in zip(("y", "dx", "dw"), (y, *grads), ref):
            row[f"{name} {what}"] = np.nan if o is None else np.linalg.norm(np.asarray(o, np.float64) - r) / np.linalg.norm(r)
    return row

errors = pd.DataFrame([check_row(s, d) for d in (jnp.float32, jnp.bfloat16) for s in CHECK_SHAPES])
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's
for q in ("y", "dx", "dw"):
    ok = errors[f"ours {q}"].isna() | (errors[f"ours {q}"] <= (2 * errors[f"XLA {q}"]).clip(lower=errors.dtype.map(TOLERANCE)))
    assert ok.all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}, na_rep="-").hide(axis="index")

# %%
# How this page measures
# ----------------------
# As 05: ``bench`` queues ``CALLS`` calls and waits for the last, median of ``REPEATS``; the light is
# ``jax.jit(jnp.copy)`` of :math:`x`; GB/s counts :math:`2MN` elements forward, :math:`3MN` backward.

TOTAL_ELEMENTS, (CALLS, REPEATS) = (2**27, (10, 7)) if ON_GPU else (2**13, (1, 1))
SWEEP_N = [8192, 16384, 32768] if ON_GPU else [2048, 4096]

def bench(fn, *args):
    def run():
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

# %%
# Benchmark
# ---------

copy, pull, records = jax.jit(jnp.copy), jax.jit(lambda pullback, dy: pullback(dy)), []
for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
    x, dy = (jax.random.normal(jax.random.key(k), (TOTAL_ELEMENTS // n_cols, n_cols), dtype) for k in (0, 1))
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
    light = 2 * x.nbytes / bench(copy, x) * 1e-6
    for provider, fn in (("XLA", jax.jit(reference)), ("Mosaic GPU (ours)", jax.jit(rms_norm))):
        records.append({"direction": "forward", "dtype": dtype, "N": n_cols, "provider": provider,
                        "GB/s": 2 * x.nbytes / bench(fn, x, w) * 1e-6, "light": light})
        if provider == "XLA" or _config(*x.shape, x.dtype.itemsize, True):
            records.append({"direction": "backward", "dtype": dtype, "N": n_cols, "provider": provider,
                            "GB/s": 3 * x.nbytes / bench(pull, jax.vjp(fn, x, w)[1], dy) * 1e-6, "light": light})
    del x, w, dy
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s")[["XLA", "Mosaic GPU (ours)"]].loc[["forward", "backward"]]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["ours, % of light"] = table["Mosaic GPU (ours)"] / table["speed of light"] * 100
table["ours / XLA"] = table["Mosaic GPU (ours)"] / table["XLA"]
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / XLA": "{:.2f}"}, na_rep="-")

# %%

fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, layout="constrained")
for ax, (direction, part) in zip(axes, results.groupby("direction", sort=False)):
    for (provider, dtype), line in part.groupby(["provider", "dtype"]):
        ax.semilogx(line.N, line["% of light"], "o-" if "ours" in provider else "o--", base=2, label=f"{provider}, {dtype}")
    ax.axhline(100, color="black", label="speed of light (copy)")
    ax.set(title=direction, xlabel="row length N", ylabel="% of the copy's GB/s")
    ax.legend(fontsize=7)
fig.suptitle(f"RMSNorm through Mosaic GPU, {TOTAL_ELEMENTS:,} elements, on {WHERE}")

# %%
# Reading the numbers
# -------------------

for (direction, dtype), part in table.groupby(level=["direction", "dtype"], sort=False):
    ours, xla = part["ours, % of light"].dropna(), part["ours / XLA"].dropna()
    if len(ours):
        print(f"{direction}, {dtype}: ours at {ours.min():.3g}-{ours.max():.3g}% of the copy, {xla.min():.2f}x to "
              f"{xla.max():.2f}x XLA's fusion.")
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Clusters**: a cluster's blocks could exchange the two sums through distributed SMEM instead of global memory.
# **fp32 rows of 32 K** forward: w and one row exceed SMEM; read the row twice (through L2) as tutorial 06 does.
# **Exercise**: set ``lag = 0`` and compare.

print(pd.Series({"device": WHERE, "JAX": jax.__version__, "jaxlib": jaxlib.__version__, "Python": platform.python_version(),
                 "plugins": ", ".join(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                                      if d.metadata["Name"].startswith("jax-cuda")) or "-", "built": BUILT}).to_string())
