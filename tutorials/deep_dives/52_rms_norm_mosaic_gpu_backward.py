"""
RMSNorm, wide rows in the backward through Mosaic GPU
=====================================================

The backward of RMSNorm reads :math:`x` and :math:`dy` twice around two row sums, and adds up :math:`dw` over the
rows. For rows of 8 K to 32 K columns on a Hopper GPU, this page streams both through the chip's **shared memory**
(SMEM), filled by its **TMA** copy engine and guarded by **barriers**, and keeps :math:`dw` in registers. **What you
will learn**: rings of SMEM slots that TMA fills ahead while a row waits; a row kept whole in SMEM, and the next
row's loads in flight; where one program cannot hold a row, a **cluster** of two programs that swap their sums
through each other's SMEM; the backward and :ref:`51's forward <sphx_glr_tutorials_deep_dives_51_rms_norm_mosaic_gpu.py>`
made one differentiable function with ``jax.custom_vjp``; measured against 05's backward, XLA and JAX's copy.
Prerequisites: :ref:`sphx_glr_tutorials_deep_dives_51_rms_norm_mosaic_gpu.py` (a Mosaic GPU kernel, its warpgroups
and their hand-over). Needs a Hopper GPU (H100, H200) or, on a CPU, Mosaic GPU's interpreter: JAX 0.11.1 or newer,
which needs Python 3.12 (a site built with an older JAX shows this page without running it).
"""

import datetime, functools, importlib.metadata, importlib.util, itertools, os, platform, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX starts: no GPU memory taken up front
import jax, jax.numpy as jnp, jaxlib, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu, triton as pltriton  # 05's backend, for the comparison
import matplotlib.pyplot as plt, pandas as pd

ON_GPU = jax.default_backend() == "gpu"
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = jax.devices()[0].device_kind if ON_GPU else "CPU only, Mosaic GPU's interpreter (timings are NOT GPU timings)"
version = lambda name: importlib.metadata.version(name) if importlib.util.find_spec(name) else "-"
print(f"Built on {WHERE} · JAX {jax.__version__} · jaxlib {jaxlib.__version__} · torch {version('torch')} · "
      f"Triton {version('triton')} · {BUILT}")  # torch and Triton: not used here, named as on every page

# %%
# The bytes, and where a row can wait
# -----------------------------------
# :math:`dx = r\,(dy \odot w) - x\,r^3\,\overline{dy \odot w \odot x}`, :math:`r = 1/\sqrt{\overline{x^2} + \varepsilon}`,
# reads :math:`x, dy` and writes :math:`dx`: :math:`3MN` elements (05 derives it); :math:`dw = \sum_{rows} dy \odot x\,r`
# adds up over the rows. Both sums need the whole row before the first :math:`dx`, and then :math:`x` and :math:`dy`
# again: twice the registers of 51's forward. Here the row waits in SMEM (227 KB an SM), :math:`dw` in registers.
#
# SMEM, TMA and barriers
# ----------------------
# As in 51, ``plgpu.kernel`` runs ``body`` once for each warpgroup of each program, with refs to GMEM, to SMEM
# (``plgpu.SMEM``) and to barriers (``plgpu.Barrier``). ``plgpu.copy_gmem_to_smem(src, dst, barrier)`` starts a TMA
# copy that arrives on ``barrier`` when done; ``plgpu.barrier_wait`` waits for it. ``plgpu.copy_smem_to_gmem`` stores,
# after ``plgpu.commit_smem()`` has made the threads' SMEM writes visible to TMA; ``plgpu.wait_smem_to_gmem(n,
# wait_read_only=True)`` waits until at most ``n`` of the warpgroup's stores still read SMEM. A TMA copy takes at most
# 256 elements along each dimension, so a chunk of ``chunk`` elements is a ``(chunk // 256, 256)`` tile.

LANES = 256  # a TMA copy's longest dimension

INTERPRET = not ON_GPU  # 05's kernels: Pallas' Triton interpreter; ours: Mosaic GPU's, which also finds races
MOSAIC_INTERPRET = plgpu.InterpretGPUParams(detect_races=True, uninitialized_memory="nan") if INTERPRET else None

# %%
# 51's hand-over, two sums at a time
# ----------------------------------
# As in 51: ``jnp.sum`` across threads goes through one SMEM scratch buffer a kernel, so the warpgroups hand their
# elementwise sums to warpgroup 0 through SMEM, it alone reduces, and all read the totals back (``part_bar``: the sums
# are in; ``done_bar``: the totals are). Here two sums a row, and a hook for two programs a row (below).

def _hand_over(h, wgs, sums, red, tot, part_bar, done_bar, exchange=None):
    """The row's totals of the (T, 256) partial `sums` of every warpgroup (h is this one), as scalars; `exchange`,
    if given, turns warpgroup 0's totals of this program's columns into the row's (two programs a row, below)."""
    @pl.when(h > 0)
    def _():
        for j, v in enumerate(sums):
            red[j, h - 1] = v
    plgpu.barrier_arrive(part_bar)  # every warpgroup's sums are in SMEM ...
    plgpu.barrier_wait(part_bar)
    @pl.when(h == 0)
    def _():
        totals = [jnp.sum(sum((red[j, o] for o in range(wgs - 1)), v)) for j, v in enumerate(sums)]
        for j, v in enumerate(exchange(totals) if exchange else totals):
            tot[j] = v
        plgpu.barrier_arrive(done_bar)  # ... and the totals are
    @pl.when(h > 0)
    def _():
        plgpu.barrier_wait(done_bar)
    return [tot[j] for j in range(len(sums))]

def _hand_over_scratch(n_sums, wgs, T):  # red, tot, part_bar, done_bar
    return [plgpu.SMEM((n_sums, wgs - 1, T, LANES), jnp.float32), plgpu.SMEM((n_sums,), jnp.float32),
            plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()]

# %%
# The backward: dw in registers
# -----------------------------
# Program ``p`` takes rows ``p, p + programs, ...``, one program an SM, each warpgroup through its own **ring** of
# ``slots`` SMEM slots for x and for dy: ``fetch(k)`` starts the TMA copy of the warpgroup's k-th chunk into slot
# ``k % slots``, which arrives on that slot's barrier; the slots start full. Where the row fits SMEM (x, dy and w, up
# to 16 K columns) it stays in its slots until its :math:`dx`, computed over :math:`dy`, is stored from there; a
# slot is refilled once that store has read it, and with ``lag = 1`` the next row's loads go out first. Each thread
# keeps the running :math:`dw` of its columns in registers, carried by the loop over rows: 32 fp32 a thread at 16 K
# (64, at 32 K, spill). At the end each program stores its :math:`dw` row through the hand-over buffer, free by then;
# the partial rows are summed outside. ``parts = 2``: the next section.

def _dw_out(h, p, Kh, dw, red, dw_gmem, first):  # dw's chunks from registers through SMEM to row p of dw_gmem
    stage = red.at[h % 2, h // 2]
    for c in range(Kh):
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        stage[...] = dw[c]
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(stage, dw_gmem.at[p, first + c])
    plgpu.wait_smem_to_gmem(0)

def _x_dy_scratch(K, T, wgs, slots, x, w):  # w, the x and dy rings, w's and the rings' barriers
    return [plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
            plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.Barrier(num_barriers=wgs),
            plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots)]

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "parts"))
def rms_norm_bwd(x, w, dy, *, eps, programs, wgs, chunk, slots, lag, parts=1):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh, groups = K // (parts * wgs), programs // parts  # a warpgroup's chunks of a row; groups of `parts` programs
    assert N % (parts * wgs * chunk) == 0 and chunk % LANES == 0 and slots >= (lag + 1) * Kh and wgs >= 2
    assert parts in (1, 2) and programs % parts == 0
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars, *hand_over):
        g, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")  # rows g, g + groups, ...
        q = jax.lax.axis_index("c") if parts == 2 else 0  # the q-th 1 / parts of their columns
        first = (q * wgs + h) * Kh  # the warpgroup's first chunk of a row
        def fetch(k):
            row = g + (k // Kh) * groups
            @pl.when(row < M)
            def _():
                c, s = first + k % Kh, h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(first, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        if parts == 2:
            *hand_over, sq_out, gx_out, swap = hand_over
            def exchange(i, totals):  # warpgroup 0: this half's totals out in SMEM, the other half's read from its SMEM
                @pl.when(i > 0)
                def _():
                    plgpu.barrier_wait(swap.at[1])  # the other program has read the last row's
                for out, v in zip((sq_out, gx_out), totals):
                    out[...] = jnp.full((LANES,), v, jnp.float32)
                plgpu.commit_smem()  # every thread has written (a warpgroup barrier) ...
                plgpu.barrier_arrive(swap.at[0])  # ... then both programs hear of it
                plgpu.barrier_wait(swap.at[0])
                theirs = [jnp.sum(plgpu.cluster_ref(out, {"c": 1 - q})[...]) for out in (sq_out, gx_out)]
                plgpu.barrier_arrive(swap.at[1])
                # a + b is b + a, bit for bit: both programs get the same totals
                return [(jnp.sum(out[...]) + t) / LANES for out, t in zip((sq_out, gx_out), theirs)]
        def step(i, dw):
            row, slot = g + i * groups, [h * slots + (i * Kh + c) % slots for c in range(Kh)]
            sq, gx = 0.0, 0.0
            for c, s in enumerate(slot):
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
            sum_sq, sum_gx = _hand_over(h, wgs, (sq, gx), *hand_over,
                                        exchange=functools.partial(exchange, i) if parts == 2 else None)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            k = rstd * rstd * rstd * sum_gx / N
            dw = list(dw)
            for c, s in enumerate(slot):  # dx over dy in its slot, then stored from there
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
            plgpu.commit_smem()
            for c, s in enumerate(slot):
                plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, first + c])
            # refill the slots of the row `lag` steps back, once its stores have read them
            plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
            @pl.when(i >= lag)
            def _():
                for c in range(Kh):
                    fetch((i - lag) * Kh + c + slots)
            return tuple(dw)
        zeros, rows = tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)), (M - g + groups - 1) // groups
        dw = jax.lax.fori_loop(0, rows, step, zeros)
        if parts == 2:
            @pl.when((h == 0) & (rows > 0))
            def _():
                plgpu.barrier_wait(swap.at[1])  # the other program's last read of this SMEM is done
        _dw_out(h, g, Kh, dw, hand_over[0], dw_gmem, first)
    scratch, grid = _x_dy_scratch(K // parts, T, wgs, slots, x, w) + _hand_over_scratch(2, wgs, T), dict(grid=(groups,))
    if parts == 2:  # a cluster of two a row: this half's two totals in SMEM, and the barriers "written" and "read"
        scratch += [plgpu.SMEM((LANES,), jnp.float32), plgpu.SMEM((LANES,), jnp.float32),
                    plgpu.ClusterBarrier(collective_axes=("c",), num_barriers=2)]
        grid |= dict(cluster=(2,), cluster_names=("c",))
    dx, dw_partial = plgpu.kernel(body, out_type=(jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct(
        (groups, K, T, LANES), jnp.float32)), grid_names=("p",), num_threads=wgs, thread_name="wg", scratch_types=scratch,
        interpret=MOSAIC_INTERPRET, **grid)(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

# %%
# Rows that one program cannot hold
# ---------------------------------
# At 32 K, x and dy no longer fit SMEM beside w, nor :math:`dw` a thread's registers. So two programs share each
# row, each with half its columns, and both need the row's two sums. Two ways:
#
# * **Swap them** (``rms_norm_bwd`` with ``parts = 2``, above): each program keeps its half in SMEM, and the two form a
#   **cluster** (``cluster=(2,)``), which the GPU schedules together: neither ever waits for an SM the other holds.
#   Warpgroup 0 writes its half's sums to SMEM; a ``plgpu.ClusterBarrier`` says "written" to both; each reads the
#   other's through ``plgpu.cluster_ref`` (distributed SMEM, within the GPC) and says "read", which the next row's
#   write awaits. Both add the two halves' sums: the same bits in both programs, since a + b is b + a. The round trip
#   takes far less than a row. The interpreter has no cluster refs: a GPU runs this one only.
# * **Read the row twice** (``rms_norm_bwd_parts``): both programs read the whole row for the sums (the second read
#   comes from L2), then each its own half again for :math:`dx` and its half of :math:`dw`. Nothing waits for the
#   other program, so it runs in the interpreter; on a GPU it takes rows past 32 K (four programs a row).

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "parts", "chunk", "slots"))
def rms_norm_bwd_parts(x, w, dy, *, eps, programs, wgs, parts, chunk, slots):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    K1, K2 = K // wgs, K // (parts * wgs)  # a warpgroup's chunks of a row: first pass, second pass
    L, groups = K1 + K2, programs // parts
    assert N % (parts * wgs * chunk) == 0 and chunk % LANES == 0 and slots >= 2 and programs % parts == 0
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars, *hand_over):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        g, q = p // parts, p % parts  # rows g, g + groups, ...; columns [q N / parts, (q + 1) N / parts)
        mine = q * (K // parts) + h * K2  # the warpgroup's first chunk in the second pass
        def fetch(i, j):  # the warpgroup's load j (static, may run into later rows) counted from row i's first
            i, j = i + j // L, j % L
            row, c, s = g + i * groups, h * K1 + j if j < K1 else mine + j - K1, h * slots + (i * L + j) % slots
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * K1, K1)], w_smem.at[pl.ds(h * K1, K1)], w_bar.at[h])
        for j in range(slots):
            fetch(0, j)
        for o in range(wgs):  # the second pass uses other warpgroups' columns of w
            plgpu.barrier_wait(w_bar.at[o])
        def step(i, dw):
            row, sq, gx = g + i * groups, 0.0, 0.0
            for c in range(K1):  # first pass: the sums over the warpgroup's quarter of the whole row
                s = h * slots + (i * L + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * K1 + c].astype(jnp.float32) * x_c
                plgpu.commit_smem()
                fetch(i, c + slots)
            sum_sq, sum_gx = _hand_over(h, wgs, (sq, gx), *hand_over)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            k = rstd * rstd * rstd * sum_gx / N
            dw = list(dw)
            for c in range(K2):  # second pass: dx and dw of the program's own columns
                s = h * slots + (i * L + K1 + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[mine + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, mine + c])
                if c > 0:  # the previous slot's store has read it: refill it
                    plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                    fetch(i, K1 + c - 1 + slots)
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            fetch(i, L - 1 + slots)
            return tuple(dw)
        zeros = tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(K2))
        dw = jax.lax.fori_loop(0, (M - g + groups - 1) // groups, step, zeros)
        _dw_out(h, g, K2, dw, hand_over[0], dw_gmem, mine)
    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=_x_dy_scratch(K, T, wgs, slots, x, w) + _hand_over_scratch(2, wgs, T), interpret=MOSAIC_INTERPRET)(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

# %%
# Launch parameters
# -----------------
# One place to change, measured on an H100 (it counts registers and shared memory, alike on every Hopper SM): one
# program an SM of four warpgroups, the largest chunk whose slots fit ``SMEM_BUDGET`` beside w and the hand-over buffer;
# the whole row in SMEM with ``lag = 1`` where two rows fit, else ``lag = 0``; past 16 K columns (:math:`dw` beyond 32
# registers a thread) a cluster of two a row on a GPU with as many slots as fit (two rows of a half at bf16 32 K, one at
# fp32), else the row read twice through a ring of 3-4 slots of up to 2048 (larger chunks beat a deeper ring there).

NUM_SMS, MIN_N = getattr(jax.devices()[0], "core_count", None) or 4, 2048  # rows: multiples of 4 chunks of 512
SMEM_BUDGET = 224 * 1024  # of a Hopper SM's 227 KB a block (Mosaic GPU's lowering checks the total)
# 512 threads: one warpgroup alone was bound by issuing instructions, not bytes; the interpreter (JAX 0.11.2)
# sometimes hangs with four, never with two
WARPGROUPS = 4 if ON_GPU else 2
MAX_BARRIERS = 32  # in one plgpu.Barrier array
DW_COLUMNS = 32 * 128  # a warpgroup's dw in registers: 32 fp32 a thread; 64 spill to memory, a third of the speed
# recommended past 8 K, where 05's range ends
RANGE = {("backward", t): range(8192 + 1, 32768 + 1) for t in ("float32", "bfloat16")}

def _config(n_rows, n_cols, itemsize):
    """(programs, parts, chunk, slots, lag), lag None for the kernel that reads the row twice; None: nothing fits."""
    wgs = WARPGROUPS
    hand_over = lambda chunk: 2 * (wgs - 1) * chunk * 4
    room = lambda chunk, w_cols, extra=0: min(  # x and dy slots a warpgroup beside w_cols of w, the hand-over, extra
        (SMEM_BUDGET - w_cols * itemsize - hand_over(chunk) - extra) // (2 * wgs * chunk * itemsize), MAX_BARRIERS // wgs)
    for parts in (1, 2, 4):  # the fewest programs a row whose share of dw fits registers
        for chunk in ((1024, 512) if parts == 1 else (2048, 1024, 512)):
            if n_cols > parts * wgs * DW_COLUMNS or n_cols % (parts * wgs * chunk):
                continue
            k = n_cols // (wgs * chunk)  # a warpgroup's chunks of a whole row
            if parts == 1 and room(chunk, n_cols) >= k:  # the row stays in SMEM: lag + 1 rows of slots
                lag = 1 if room(chunk, n_cols) >= 2 * k else 0
                return min(n_rows, NUM_SMS), 1, chunk, (lag + 1) * k, lag
            # a cluster of two a row, each keeping its half (and w's) in SMEM, swapping sums through SMEM (2 x 256 fp32):
            # on a GPU (the interpreter has no cluster refs), with as many slots as fit: the next row's loads in flight
            if parts == 2 and MOSAIC_INTERPRET is None and room(chunk, n_cols // 2, 2 * LANES * 4) >= k // 2:
                return 2 * min(n_rows, NUM_SMS // 2), 2, chunk, room(chunk, n_cols // 2, 2 * LANES * 4), 0
            if parts > 1 and room(chunk, n_cols) >= 3:
                return max(1, min(n_rows, NUM_SMS // parts)) * parts, parts, chunk, min(room(chunk, n_cols), 4), None
    return None

# %%
# The drop-in function
# --------------------
# As 05: ``jax.custom_vjp`` pairs the kernels; the forward saves :math:`x` and :math:`w` (the backward recomputes
# :math:`r` in its first pass, which reads :math:`x` anyway). The forward is 51's, carried with its launch rule.

@functools.partial(jax.jit, static_argnames=("eps", "wgs", "chunk"))
def rms_norm_fwd(x, w, *, eps, wgs, chunk):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs  # a warpgroup's chunks
    assert N % (wgs * chunk) == 0 and chunk % LANES == 0 and wgs >= 2, "the chunks must split a row over the warpgroups"
    def body(x_gmem, w_gmem, y_gmem, *hand_over):
        row, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        xs = [x_gmem[row, h * Kh + c] for c in range(Kh)]  # in x's dtype: half the registers for 16-bit x
        (sum_sq,) = _hand_over(h, wgs, (sum(jnp.square(v.astype(jnp.float32)) for v in xs),), *hand_over)
        rstd = jax.lax.rsqrt(sum_sq / N + eps)
        for c, v in enumerate(xs):
            y = v.astype(jnp.float32) * rstd * w_gmem[h * Kh + c].astype(jnp.float32)
            y_gmem[row, h * Kh + c] = y.astype(y_gmem.dtype)
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((M, K, T, LANES), x.dtype), grid=(M,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg", scratch_types=_hand_over_scratch(1, wgs, T),
                        interpret=MOSAIC_INTERPRET)(x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)).reshape(M, N)

def _forward_config(n_cols, itemsize):
    """rms_norm_fwd's launch for rows of n_cols: a warpgroup for each 16 KB of row (64 values a thread at 16 bits,
    32 at fp32), at least two at 16 bits and four at fp32, at most eight: the fewest from there that split the row
    into chunks of 512."""
    least = max(2 if itemsize == 2 else 4, -(-n_cols * itemsize // 16384))
    wgs = next((g for g in range(min(least, 8), 9) if n_cols % (g * 512) == 0), 4)  # 4: any MIN_N multiple
    wgs = wgs if MOSAIC_INTERPRET is None else WARPGROUPS
    chunks = [c for c in (2048, 1024, 512) if n_cols % (wgs * c) == 0]  # 512 fits: wgs was picked so
    return dict(wgs=wgs, chunk=next((c for c in chunks if n_cols >= 2 * wgs * c), chunks[-1]))

def _check(x, weight):
    if jnp.dtype(x.dtype) not in (jnp.float32, jnp.bfloat16, jnp.float16) or weight.dtype != x.dtype:
        raise TypeError(f"rms_norm: x and weight must share a dtype of float32, bfloat16 or float16; got {x.dtype}, {weight.dtype}")
    n_cols = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or tuple(weight.shape) != (n_cols,):
        raise ValueError(f"rms_norm: x {tuple(x.shape)} and weight {tuple(weight.shape)}: weight must be (N,) for x (..., N)")
    if n_cols < MIN_N or n_cols % MIN_N:
        raise ValueError(f"rms_norm: rows of {n_cols} elements; this page's kernels take multiples of {MIN_N} from {MIN_N} "
                         f"(tutorial 05 takes any row)")
    if _config(1, n_cols, x.dtype.itemsize) is None:
        raise ValueError(f"rms_norm: no launch takes rows of {n_cols} {x.dtype} here: SMEM_BUDGET {SMEM_BUDGET} bytes, "
                         f"dw in registers up to {WARPGROUPS * DW_COLUMNS} columns a program, at most 4 programs a row")

@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm_rows(x2d, w, eps):
    return rms_norm_fwd(x2d, w, eps=eps, **_forward_config(x2d.shape[1], x2d.dtype.itemsize))

def _bwd(eps, saved, dy):
    x2d, w = saved
    programs, parts, chunk, slots, lag = _config(*x2d.shape, x2d.dtype.itemsize)
    launch = dict(eps=eps, programs=programs, wgs=WARPGROUPS, chunk=chunk, slots=slots)
    dx, dw = (rms_norm_bwd(x2d, w, dy, lag=lag, parts=parts, **launch) if lag is not None else
              rms_norm_bwd_parts(x2d, w, dy, parts=parts, **launch))
    return dx, dw.astype(w.dtype)

_rms_norm_rows.defvjp(lambda x2d, w, eps: (_rms_norm_rows(x2d, w, eps), (x2d, w)), _bwd)  # saves x, w

def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x (..., N), weight (N,): differentiable, jit-able."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check(x, weight)
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 0:
        return x
    return _rms_norm_rows(rows, weight, float(eps)).reshape(x.shape)

# %%
# Tutorial 05's backward, carried
# -------------------------------
# What this page is measured against: 05's backward design in Pallas' Triton backend (``pltriton`` here), carried past
# 05's range: rows past 8 K walked twice in chunks (05 itself hands them to XLA's formulas); 05's forward saves
# :math:`r` for it, which ``backward_05`` takes.

def _tile(rows, cols, n_rows, n_cols):  # indices and in-bounds mask of the tile rows x cols
    return (rows[:, None], cols[None, :]), (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
def _load(ref, idx, ok, policy=None):  # masked elements read as 0; everything is computed in fp32
    return pltriton.load(ref.at[idx], mask=ok, other=0, eviction_policy=policy).astype(jnp.float32)

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
    add = lambda i, a: a + _load(dw_partial_ref, *_tile(i * BLOCK_P + jnp.arange(BLOCK_P), cols, n_partials, n_cols))
    acc = jax.lax.fori_loop(0, pl.cdiv(n_partials, BLOCK_P), add, jnp.zeros((BLOCK_P, BLOCK_N), jnp.float32))
    pltriton.store(dw_ref.at[cols], jnp.sum(acc, axis=0), mask=cols < n_cols)

MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
WHOLE_ROW_N = 8192  # the backward's longest row held whole (x, dy, the next block's, dw_partial in registers)
CHUNK_N = 4096  # the backward's columns per chunk of a longer row
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
# warps such that each thread handles about bytes_per_thread bytes of a tile of n elements (4 to 32 warps);
# Triton's compiler parameters pick Pallas' Triton backend; one stage: our loops prefetch by hand
_warps = lambda n, itemsize, bytes_per_thread: min(32, max(4, n * itemsize // (32 * bytes_per_thread)))
_params = lambda warps, stages=1: pltriton.CompilerParams(num_warps=warps, num_stages=stages)
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
def backward_05(x, w, rstd, dy):  # as 05's custom_vjp returns it: dw in w's dtype
    dx, dw = _backward(x, w, rstd, dy)
    return dx, dw.astype(w.dtype)

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
    r, g = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps), dy * w
    return x * r * w, r * g - x * r**3 * np.mean(g * x, -1, keepdims=True), np.sum(dy * x * r, 0)

def check_row(shape, dtype):
    kx, kw, kd = jax.random.split(jax.random.key(shape[1]), 3)
    x, dy = (jax.random.normal(k, shape, jnp.float32).astype(dtype) for k in (kx, kd))
    w = (1 + 0.1 * jax.random.normal(kw, (shape[1],), jnp.float32)).astype(dtype)
    ref, row = float64_vjp(x, w, dy), {"shape": f"{shape[0]} x {shape[1]}", "dtype": jnp.dtype(dtype).name}
    for name, fn in (("ours", rms_norm), ("XLA", reference)):
        y, pullback = jax.vjp(fn, x, w)
        for what, o, r in zip(("y", "dx", "dw"), (y, *pullback(dy)), ref):
            row[f"{name} {what}"] = np.linalg.norm(np.asarray(o, np.float64) - r) / np.linalg.norm(r)
    return row

errors = pd.DataFrame([check_row(s, d) for d in (jnp.float32, jnp.bfloat16) for s in CHECK_SHAPES])
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # a few roundings, or at most twice XLA's
for q in ("y", "dx", "dw"):
    ok = errors[f"ours {q}"] <= (2 * errors[f"XLA {q}"]).clip(lower=errors.dtype.map(TOLERANCE))
    assert ok.all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# How this page measures, and the benchmark
# -----------------------------------------
# As 51: each provider in ``PAIRS`` pairs of runs with the copy of :math:`x`, counting :math:`3MN` elements; ours and
# XLA's run as ``jax.vjp``'s pullback, 05's with the :math:`r` its forward would have saved.

TOTAL_ELEMENTS, (CALLS, PAIRS) = (2**27, (20, 9)) if ON_GPU else (2**13, (1, 1))
SWEEP_N = [8192, 16384, 24576, 32768] if ON_GPU else [2048, 4096]
NO_SPEED = "No GPU here: this run checks the kernels' values through Mosaic GPU's interpreter; it measures no speed."

def bench(fn, *args):  # ms of one call, from one run of CALLS calls and a wait for the last
    def run():
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    return 1e3 * timeit.timeit(run, number=1) / CALLS

def beside_copy(fn, args, x):  # the copy's ms in PAIRS pairs of runs (copy, fn), and the median of fn's over it
    jax.block_until_ready((copy(x), fn(*args)))  # compiled (or loaded from JAX's cache) and warmed up, untimed
    pairs = [(bench(copy, x), bench(fn, *args)) for _ in range(PAIRS)]
    return [c for c, _ in pairs], statistics.median(t / c for c, t in pairs)

copy, pull, records = jax.jit(jnp.copy), jax.jit(lambda pullback, dy: pullback(dy)), []
providers = {"XLA": jax.jit(reference), "05 (Pallas, Triton)": jax.jit(backward_05), "Mosaic GPU (ours)": jax.jit(rms_norm)}
for dtype, n_cols in itertools.product(["float32", "bfloat16"], SWEEP_N):
    x, dy = (jax.random.normal(jax.random.key(k), (TOTAL_ELEMENTS // n_cols, n_cols), dtype) for k in (0, 1))
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1) + 1e-6)
    timed = {provider: beside_copy(fn, (x, w, rstd, dy), x) if "05" in provider else
             beside_copy(pull, (jax.vjp(fn, x, w)[1], dy), x) for provider, fn in providers.items()}
    light = 2 * x.nbytes / statistics.median(ms for copies, _ in timed.values() for ms in copies) * 1e-6
    records += [{"direction": "backward", "dtype": dtype, "N": n_cols, "provider": provider, "GB/s": 1.5 * light / ratio,
                 "light": light} for provider, (_, ratio) in timed.items()]
    del x, w, dy, rstd
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s")[list(providers)]
table.insert(0, "speed of light", results.groupby(keys).light.first())
ours = table["Mosaic GPU (ours)"]
table["ours, % of light"], table["ours / XLA"] = ours / table["speed of light"] * 100, ours / table["XLA"]
table["ours / 05"] = ours / table["05 (Pallas, Triton)"]
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["ours, % of light", "ours / XLA"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "52_rms_norm_mosaic_gpu_backward.csv"))
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / XLA": "{:.2f}",
                                                           "ours / 05": "{:.2f}"}) if ON_GPU else print(NO_SPEED)

# %%
if ON_GPU:  # no speed plot from the interpreter's times
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for (provider, dtype), line in results.groupby(["provider", "dtype"]):
        ax.semilogx(line.N, line["% of light"], "o-" if "ours" in provider else "o--", base=2, label=f"{provider}, {dtype}")
    ax.axhline(100, color="black", label="speed of light (copy)")
    ax.set(title=f"RMSNorm backward through Mosaic GPU, {TOTAL_ELEMENTS:,} elements, on {WHERE}", xlabel="row length N",
           ylabel="% of the copy's GB/s")
    ax.legend(fontsize=7)

# %%
# Reading the numbers
# -------------------
# This page's floor, from 16 K columns on: 85% of the copy; below, on a GPU, this build's figures, and each one under
# the floor beside the best of XLA and 05. At 32 K a row's two programs swap their sums once a row; at 8 K, 05's kernel
# (rows in registers) is the one to use, as the landing page says.

if ON_GPU:
    FLOOR = 85
    for dtype, part in table.groupby(level="dtype", sort=False):
        ours, xla, t05 = part["ours, % of light"], part["ours / XLA"], part["ours / 05"]
        print(f"backward, {dtype}: ours at {ours.min():.3g}-{ours.max():.3g}% of the copy, {xla.min():.2f}x to "
              f"{xla.max():.2f}x XLA's fusion, {t05.min():.2f}x to {t05.max():.2f}x tutorial 05's kernels.")
    for (_, dtype, n_cols), row in table.iterrows():
        pct, best = row["ours, % of light"], 100 * max(row["XLA"], row["05 (Pallas, Triton)"]) / row["speed of light"]
        if n_cols >= 16384 and round(pct, 1) < FLOOR:
            print(f"Under the floor: backward, {dtype}, N = {n_cols}: ours {pct:.1f}%, the best of XLA and 05 {best:.1f}%.")
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# **Clusters of four**: rows past 32 K take four programs a row, which read the row twice; a cluster of four, each
# adding the four parts' sums in one order, would read it once. (In JAX 0.11.2 a read of another program's SMEM lowers
# for a whole ref only, hence one ref a sum.) **Exercise**: set ``WARPGROUPS = 2``, ``lag = 0`` in ``_config``, or
# chunks of ``(1024, 512)`` where ``parts > 1`` (bf16 32 K's cluster then gets 8 slots of 1024), and compare.

plugins = ", ".join(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                    if d.metadata["Name"].startswith("jax-cuda"))  # JAX's CUDA build
card = {"device": f"{WHERE}, {NUM_SMS} SMs" if ON_GPU else WHERE, "driver / CUDA": plugins or "none: the interpreter",
        "JAX": jax.__version__, "jaxlib": jaxlib.__version__, "torch": version("torch"), "Triton": version("triton"),
        "Python": platform.python_version(), "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
card_html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
type("Collapsed", (), {"_repr_html_": lambda self: card_html})()
