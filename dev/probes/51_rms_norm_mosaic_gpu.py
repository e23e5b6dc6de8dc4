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
from jax.experimental.pallas import mosaic_gpu as plgpu, triton as pltriton  # 05's backend, for the comparison
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
                sq = 0.0
                for c in range(K):  # the row's chunks, as they arrive, squared and added elementwise
                    plgpu.barrier_wait(bars.at[(i * K + c) % slots])
                    x_c = ring[(i * K + c) % slots].astype(jnp.float32)
                    sq = sq + x_c * x_c
                rstd = jax.lax.rsqrt(jnp.sum(sq) / N + eps)  # one reduction over the threads a row
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
                sq = 0.0
                for c in range(K):  # first pass: read, then the slot is free
                    plgpu.barrier_wait(bars.at[(base + c) % slots])
                    x_c = ring[(base + c) % slots].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    plgpu.commit_smem()  # every thread's reads of the slot done before TMA writes it again
                    fetch(base + c + slots)
                rstd = jax.lax.rsqrt(jnp.sum(sq) / N + eps)
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
                sq, gx = 0.0, 0.0
                for c in range(Kq):
                    s = (i * Kq + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * w_smem[c].astype(jnp.float32) * x_c
                sum_sq, sum_gx = jnp.sum(sq), jnp.sum(gx)
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
# Tutorial 05's kernels, carried
# ------------------------------
# What this page is measured against: 05's Pallas kernels (its Triton backend, ``pltriton`` here) and its
# ``custom_vjp`` around them, as 05 has them, launch parameters included.

def _tile(rows, cols, n_rows, n_cols):  # indices and in-bounds mask of the tile rows x cols
    return (rows[:, None], cols[None, :]), (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
def _load(ref, idx, ok, policy=None):  # masked elements read as 0; everything is computed in fp32
    return pltriton.load(ref.at[idx], mask=ok, other=0, eviction_policy=policy).astype(jnp.float32)

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
            pltriton.store(y_ref.at[idx], y.astype(y_ref.dtype), mask=ok)
        pltriton.store(rstd_ref.at[rows], rstd, mask=rows < n_rows)
        return ahead
    n_mine = pl.cdiv(pl.cdiv(n_rows, BLOCK_M) - pid, n_programs)  # blocks pid, pid + P, ... before the end
    jax.lax.fori_loop(0, n_mine, step, tuple(load(pid, k) for k in range(AHEAD)))

def fwd_chunked_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, CHUNK_N, CHUNKS):
    """One row a program, read twice in CHUNKS chunks of CHUNK_N columns."""
    (n_rows, n_cols), row, ar = x_ref.shape, pl.program_id(0), jnp.arange(CHUNK_N)
    def chunk(k, policy):  # chunk k of the row, as stored (past either end of the row: loads nothing)
        col = k * CHUNK_N + ar
        return pltriton.load(x_ref.at[row, col], mask=(col >= 0) & (col < n_cols), other=0, eviction_policy=policy)
    def add(k, carry):
        sum_sq, x = carry
        x_next = chunk(k + 1, "evict_last")
        return sum_sq + jnp.square(x.astype(jnp.float32)), x_next
    init = jnp.zeros((CHUNK_N,), jnp.float32), chunk(0, "evict_last")
    rstd = jax.lax.rsqrt(jnp.sum(jax.lax.fori_loop(0, CHUNKS, add, init)[0]) / n_cols + eps)
    pltriton.store(rstd_ref.at[pl.ds(row, 1)], jnp.full((1,), rstd))
    def scale(i, x):
        k = CHUNKS - 1 - i  # backwards
        col, x_next = k * CHUNK_N + ar, chunk(k - 1, "evict_first")
        y = x.astype(jnp.float32) * rstd * _load(w_ref, col, col < n_cols)
        pltriton.store(y_ref.at[row, col], y.astype(y_ref.dtype), mask=col < n_cols, eviction_policy="evict_first")
        return x_next
    jax.lax.fori_loop(0, CHUNKS, scale, chunk(CHUNKS - 1, "evict_first"))

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
        rstd = pltriton.load(rstd_ref.at[rows], mask=rows < n_rows, other=0)[:, None]
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
            pltriton.store(dx_ref.at[idx], dx.astype(dx_ref.dtype), mask=ok)
            dw_partial[k] = dw_partial[k] + dy * x_hat  # the column reduction, in fp32
        return dw_partial, ahead

    first = pid * BLOCK_M + jnp.arange(BLOCK_M)
    init = [jnp.zeros((BLOCK_M, CHUNK_N), jnp.float32)] * CHUNKS, x_and_dy(first, cols[0]) if CHUNKS == 1 else None
    n_mine = pl.cdiv(pl.cdiv(n_rows, BLOCK_M) - pid, n_programs)  # blocks pid, pid + P, ... before the end
    dw_partial, _ = jax.lax.fori_loop(0, n_mine, step, init)
    for k, col in enumerate(cols):
        pltriton.store(dw_partial_ref.at[pid, col], jnp.sum(dw_partial[k], axis=0), mask=col < n_cols)

def dw_sum_kernel(dw_partial_ref, dw_ref, *, BLOCK_P, BLOCK_N):
    """dw[j] = sum over p of dw_partial[p, j] in a fixed order: bitwise the same on every run."""
    n_partials, n_cols = dw_partial_ref.shape
    cols = pl.program_id(0) * BLOCK_N + jnp.arange(BLOCK_N)
    add = lambda i, acc: acc + _load(dw_partial_ref, *_tile(i * BLOCK_P + jnp.arange(BLOCK_P), cols, n_partials, n_cols))
    acc = jax.lax.fori_loop(0, pl.cdiv(n_partials, BLOCK_P), add, jnp.zeros((BLOCK_P, BLOCK_N), jnp.float32))
    pltriton.store(dw_ref.at[cols], jnp.sum(acc, axis=0), mask=cols < n_cols)

MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
WHOLE_ROW_N = 8192  # the backward's longest row held whole (x, dy, the next block's, dw_partial in registers)
CHUNK_N = 4096  # the backward's columns per chunk of a longer row
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
MAX_N = 32768  # longest row: a backward program keeps a row of dw_partial in registers (32 fp32 a thread)
# warps such that each thread handles about bytes_per_thread bytes of a tile of n elements (4 to 32 warps);
# Triton's compiler parameters pick Pallas' Triton backend; one stage: our loops prefetch by hand
_warps = lambda n, itemsize, bytes_per_thread: min(32, max(4, n * itemsize // (32 * bytes_per_thread)))
_params = lambda warps, stages=1: pltriton.CompilerParams(num_warps=warps, num_stages=stages)

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

def _forward(x2d, w, eps):
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((0,), f32)
    kernel, meta, grid, params = _fwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((n_rows,), f32)
    return pl.pallas_call(functools.partial(kernel, eps=eps, **meta), out_shape=out_shape, grid=(grid,),
                          compiler_params=params, interpret=not ON_GPU)(x2d, w)

def _backward(x2d, w, rstd, dy2d):  # dx in x's dtype, dw in fp32 (the sum over this device's rows)
    (n_rows, n_cols), f32 = x2d.shape, jnp.float32
    if n_rows == 0:  # no rows: the sum over rows is empty
        return jnp.zeros(x2d.shape, x2d.dtype), jnp.zeros((n_cols,), f32)
    meta, grid, params = _bwd_config(n_rows, n_cols, x2d.dtype.itemsize)
    out_shape = jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((grid, n_cols), f32)
    dx, dw_partial = pl.pallas_call(functools.partial(bwd_kernel, **meta), out_shape=out_shape, grid=(grid,),
                                    compiler_params=params, interpret=not ON_GPU)(x2d, w, rstd, dy2d)
    meta, params = _sum_config(n_cols)
    dw = pl.pallas_call(functools.partial(dw_sum_kernel, **meta), out_shape=jax.ShapeDtypeStruct((n_cols,), f32),
                        grid=(pl.cdiv(n_cols, meta["BLOCK_N"]),), compiler_params=params, interpret=not ON_GPU)(dw_partial)
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

rms_norm_05 = lambda x, w, eps=1e-6: differentiable(functools.partial(_forward, eps=eps), _backward)(x, w)

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
    for provider, fn in (("XLA", jax.jit(reference)), ("05 (Pallas, Triton)", jax.jit(rms_norm_05)),
                         ("Mosaic GPU (ours)", jax.jit(rms_norm))):
        records.append({"direction": "forward", "dtype": dtype, "N": n_cols, "provider": provider,
                        "GB/s": 2 * x.nbytes / bench(fn, x, w) * 1e-6, "light": light})
        if provider != "Mosaic GPU (ours)" or _config(*x.shape, x.dtype.itemsize, True):
            records.append({"direction": "backward", "dtype": dtype, "N": n_cols, "provider": provider,
                            "GB/s": 3 * x.nbytes / bench(pull, jax.vjp(fn, x, w)[1], dy) * 1e-6, "light": light})
    del x, w, dy
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s")[["XLA", "05 (Pallas, Triton)", "Mosaic GPU (ours)"]]
table = table.loc[["forward", "backward"]]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["ours, % of light"] = table["Mosaic GPU (ours)"] / table["speed of light"] * 100
table["ours / XLA"] = table["Mosaic GPU (ours)"] / table["XLA"]
table["ours / 05"] = table["Mosaic GPU (ours)"] / table["05 (Pallas, Triton)"]
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / XLA": "{:.2f}",
                                                           "ours / 05": "{:.2f}"}, na_rep="-")

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
    ours, xla, t05 = part["ours, % of light"].dropna(), part["ours / XLA"].dropna(), part["ours / 05"].dropna()
    if len(ours):
        print(f"{direction}, {dtype}: ours at {ours.min():.3g}-{ours.max():.3g}% of the copy, {xla.min():.2f}x to "
              f"{xla.max():.2f}x XLA's fusion, {t05.min():.2f}x to {t05.max():.2f}x tutorial 05's kernels.")
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
