"""
RMSNorm in JAX over several GPUs: rows split, one psum
======================================================

Tutorial 05's differentiable RMSNorm on every device at once: ``jax.shard_map`` gives each device its rows and a
copy of the weight, the Pallas kernels run unchanged on each, and one ``psum`` of the weight gradient is all that
crosses the links. Measured on each mesh of 1, 2, 4, ... devices and on all the GPUs the build has: GB/s a device
and in all, and what the all-reduce costs.

**What you will learn**: to shard a custom JAX op with ``jax.shard_map``; why :math:`y` and :math:`dx` need no
communication and :math:`dw` needs one all-reduce of :math:`N` values; to find that all-reduce in the jaxpr and in
the HLO that XLA compiled; to time a sharded op as a training step runs it, not as the host starts it; to read
*weak scaling* (the same rows a device, more devices) from a table. Prerequisites:
:ref:`sphx_glr_tutorials_05_jax_rms_norm.py`, whose kernels this page carries.
"""

import datetime, functools, importlib.metadata, importlib.util, itertools, os, platform, statistics, timeit
# Before JAX starts: no GPU memory taken up front (PyTorch pages share the build), and two CPU devices without a
# GPU, so that the sharding runs on a laptop too (the flag touches only JAX's CPU backend).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
import jax, jax.numpy as jnp, jaxlib, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import matplotlib.pyplot as plt, pandas as pd

ON_GPU = jax.default_backend() == "gpu"
INTERPRET = not ON_GPU  # without a GPU, Pallas interprets the kernels on the CPU
version = lambda name: importlib.metadata.version(name) if importlib.util.find_spec(name) else "-"
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = jax.devices()[0].device_kind if ON_GPU else "CPU only, Pallas' interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · JAX {jax.__version__} · jaxlib {jaxlib.__version__} · {jax.device_count()} device(s) · "
      f"torch {version('torch')} · Triton {version('triton')} · {BUILT}")

# %%
# Over devices: rows split, one psum
# ----------------------------------
# ``jax.shard_map`` runs a function on each device's block of rows (``P(AXIS)``: split along the first axis), the
# weight replicated (``P()``). :math:`y` and :math:`dx` of a row need only that row: nothing crosses the links. But
# :math:`dw = \sum_{\text{rows}} dy \odot \hat{x}` sums *all* rows: each device sums its own with 05's kernels (below),
# then ``jax.lax.psum`` adds the devices' fp32 vectors, an *all-reduce* of :math:`N` values (128 KB at N = 32768),
# whatever the number of rows. ``psum=False`` leaves each device's :math:`dw` apart, to time the kernels alone.

AXIS = "rows"
def sharded_parts(mesh, eps=1e-6, psum=True):
    """The forward and backward over mesh, rows split; psum=False leaves each device's dw apart (stacked)."""
    rows, whole = P(AXIS), P()
    # check_vma=False: Pallas' outputs carry no record of how they vary over devices; out_specs says it
    forward = jax.shard_map(lambda x, w: _forward(x, w, eps), mesh=mesh, in_specs=(rows, whole),
                            out_specs=(rows, rows), check_vma=False)
    def local_backward(x, w, rstd, dy):
        dx, dw = _backward(x, w, rstd, dy)
        return dx, jax.lax.psum(dw, AXIS) if psum else dw  # the one step across devices: N fp32 values
    backward = jax.shard_map(local_backward, mesh=mesh, in_specs=(rows, whole, rows, rows),
                             out_specs=(rows, whole if psum else rows), check_vma=False)
    return forward, backward

def gradients(fn, x, w, dy):
    y, pullback = jax.vjp(fn, x, w)
    return (y, *pullback(dy))


# %%
# Tutorial 05's kernels and drop-in, carried
# ------------------------------------------
# The forward kernel, the fused backward (``dx`` and this device's ``dw``, summed over its rows in fp32 in a fixed
# order), their launch parameters and ``differentiable`` (``jax.custom_vjp``), exactly as
# :ref:`sphx_glr_tutorials_05_jax_rms_norm.py` writes and explains them (a test keeps the two the same):

def _tile(rows, cols, n_rows, n_cols):  # indices and in-bounds mask of the tile rows x cols
    return (rows[:, None], cols[None, :]), (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
def _load(ref, idx, ok, policy=None):  # masked elements read as 0; everything is computed in fp32
    return plgpu.load(ref.at[idx], mask=ok, other=0, eviction_policy=policy).astype(jnp.float32)

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

NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4  # a GPU's SMs; on the CPU, four stand-ins
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
WHOLE_ROW_N = 8192  # the backward's longest row held whole (x, dy, the next block's, dw_partial in registers)
CHUNK_N = 4096  # the backward's columns per chunk of a longer row
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
MAX_N = 32768  # longest row: a backward program keeps a row of dw_partial in registers (32 fp32 a thread)
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

# %%
# What crosses the links
# ----------------------
# ``differentiable(*sharded_parts(mesh))`` is the drop-in over a mesh of every device (each GPU, or two CPU devices),
# checked against the same function on one device: :math:`y` and :math:`dx` the same bits, :math:`dw` the same sums
# grouped differently. The jaxpr has the ``psum``; XLA's HLO, as this build compiled it, the all-reduce.

EPS = 1e-6
one_device = differentiable(functools.partial(_forward, eps=EPS), _backward)
MESH = Mesh(np.array(jax.devices()), (AXIS,))
x = jax.device_put(jax.random.normal(jax.random.key(7), (64 * MESH.size, 1000)), NamedSharding(MESH, P(AXIS)))
w, dy = 1 + 0.1 * jax.random.normal(jax.random.key(8), (1000,)), jax.random.normal(jax.random.key(9), x.shape)
sharded_step = jax.jit(lambda x, w, dy: gradients(differentiable(*sharded_parts(MESH, EPS)), x, w, dy))
(y_s, dx_s, dw_s), (y_1, dx_1, dw_1) = sharded_step(x, w, dy), jax.jit(lambda *a: gradients(one_device, *a))(x, w, dy)
assert (y_s == y_1).all() and (dx_s == dx_1).all() and jnp.allclose(dw_s, dw_1, rtol=1e-5, atol=1e-5)
print(f"{MESH.size} device(s): y and dx bit for bit the single-device ones, dx split as {dx_s.sharding.spec}; "
      f"dw within {float(jnp.max(jnp.abs(dw_s - dw_1)) / jnp.max(jnp.abs(dw_1))):.1e} of its largest value")
jaxpr, hlo = str(jax.make_jaxpr(sharded_step)(x, w, dy)), sharded_step.lower(x, w, dy).compile().as_text()
for line in [text for text in jaxpr.splitlines() if "psum" in text] + [text for text in hlo.splitlines() if " all-reduce(" in text]:
    print(line.strip().split(", metadata")[0][:150])
if " all-reduce(" not in hlo:
    print(f"No all-reduce in the compiled HLO: over {MESH.size} device the psum adds nothing, and XLA removed it.")

# %%
# Weak scaling, measured
# ----------------------
# :math:`2^{26}` elements *a device* (the same rows on each), bf16 and fp32, on meshes of 1, 2, 4, ... devices and of
# all there are; the weight is replicated on the mesh before the timing (left on one device, ``jit`` would copy it to
# the others at every call). GB/s a device counts its :math:`x, y` forward and :math:`x, dy, dx` backward; perfect
# weak scaling keeps it at the one-device figure as devices are added, and the total grows with them.
#
# **How to time it.** The host's start of a sharded program takes longer with each device, and the kernels over
# :math:`2^{26}` elements are short enough that, timed one op a program, more devices measure the host, not the
# kernels. In training the op is one of many in one jitted step, started once. So each
# timing runs a program of ``CHAIN`` steps, each on the last one's output (:math:`y` feeds the next forward,
# :math:`dx` the next backward as its :math:`dy`), ``CALLS`` such programs back to back, the median of ``REPEATS``
# runs. The column *one op a program* keeps the plain timing of one forward a call, to show what the host costs.
# *psum share*: the part of the backward's time that the all-reduce adds (from the chains with and without it).

TOTAL_ELEMENTS, CHAIN, (CALLS, REPEATS) = (2**26, 8, (10, 7)) if ON_GPU else (2**13, 2, (1, 1))
SWEEP_N = [1024, 4096, 32768] if ON_GPU else [1024]
MESHES = sorted({jax.device_count()} | {2**k for k in range(8) if 2**k < jax.device_count()})

def bench(fn, *args, calls=CALLS):  # median ms of one call
    def run():  # calls back to back (JAX queues them), then one wait for the last
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
    run()  # compile and warm up outside the timing
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / calls

def chained(forward, backward, steps=CHAIN):
    """Programs of steps forwards (y -> next x) and steps backwards (dx -> next dy, the dw summed)."""
    def forwards(x, w):
        for _ in range(steps):
            x = forward(x, w)[0]
        return x
    def backwards(x, w, rstd, dy):
        dw_total = 0
        for _ in range(steps):
            dy, dw = backward(x, w, rstd, dy)
            dw_total = dw_total + dw
        return dy, dw_total
    return jax.jit(forwards), jax.jit(backwards)

records = []
for dtype, n_cols, n_devices in itertools.product(["bfloat16", "float32"], SWEEP_N, MESHES):
    mesh = Mesh(np.array(jax.devices()[:n_devices]), (AXIS,))
    rows, whole, shape = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P()), (n_devices * TOTAL_ELEMENTS // n_cols, n_cols)
    x = jax.device_put(jax.random.normal(jax.random.key(0), shape, dtype), rows)
    dy = jax.device_put(jax.random.normal(jax.random.key(1), shape, dtype), rows)
    w = jax.device_put((1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype), whole)
    (forward, backward), (_, alone) = sharded_parts(mesh, EPS), sharded_parts(mesh, EPS, psum=False)
    (forwards, backwards), (_, backwards_alone) = chained(forward, backward), chained(forward, alone)
    rstd, nbytes = jax.jit(forward)(x, w)[1], x.nbytes // n_devices
    ms = {"forward": bench(forwards, x, w) / CHAIN, "backward": bench(backwards, x, w, rstd, dy) / CHAIN,
          "backward, no psum": bench(backwards_alone, x, w, rstd, dy) / CHAIN,
          "forward, one op a program": bench(jax.jit(forward), x, w, calls=10)}
    records.append({"dtype": dtype, "N": n_cols, "devices": n_devices}
                   | {f"{k}, GB/s a device": (3 if "backward" in k else 2) * nbytes / t * 1e-6 for k, t in ms.items()}
                   | {"psum share": 1 - ms["backward, no psum"] / ms["backward"]})
    del x, dy, rstd
scaling = pd.DataFrame(records).set_index(["dtype", "N", "devices"])
one = scaling.xs(1, level="devices")  # each (dtype, N) on one device: the weak-scaling baseline
for k in ("forward", "backward, no psum", "forward, one op a program"):
    scaling[f"{k}, x one device"] = scaling[f"{k}, GB/s a device"] / one[f"{k}, GB/s a device"].reindex(
        scaling.index.droplevel("devices")).to_numpy()
for k in ("forward", "backward"):
    scaling[f"{k}, GB/s in all"] = scaling[f"{k}, GB/s a device"] * scaling.index.get_level_values("devices")
scaling.style.format({c: "{:.1%}" if c == "psum share" else "{:.2f}" if "x one" in c else "{:,.0f}" for c in scaling.columns})

# %%
# The same numbers as a plot: GB/s a device against the number of devices, one line a row length:

fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, facecolor="white", layout="constrained")
for ax, direction in zip(axes, ("forward", "backward")):
    for (dtype, n_cols), part in scaling.groupby(level=["dtype", "N"], sort=False):
        ax.plot(part.index.get_level_values("devices"), part[f"{direction}, GB/s a device"], "-o", markersize=4,
                label=f"{dtype}, N = {n_cols}")
    ax.set(title=direction, xlabel="devices", ylabel="GB/s a device", xticks=MESHES), ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
title = fig.suptitle(f"RMSNorm in JAX, {TOTAL_ELEMENTS:,} elements a device, on {jax.device_count()} x {WHERE}")

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

many = scaling[scaling.index.get_level_values("devices") > 1]
at = lambda i: f"{i[0]}, N = {i[1]}, {i[2]} devices"  # a row of the table, in words
if len(many):
    for k in ("forward", "backward, no psum"):
        ratio = many[f"{k}, x one device"]
        print(f"{k}: on {', '.join(map(str, MESHES[1:]))} devices each runs at {ratio.min():.3g}x to {ratio.max():.3g}x "
              f"its one-device GB/s (worst: {at(ratio.idxmin())}); 1.0x is perfect weak scaling.")
    share, from_4k = many["psum share"], many[many.index.get_level_values("N") >= 4096]["psum share"]
    beyond = f"; from N = 4096 at most {from_4k.max():.1%}" if len(from_4k) else ""
    print(f"The psum adds {share.min():.1%} to {share.max():.1%} to the backward's time (the most: {at(share.idxmax())}"
          f"{beyond}), for N fp32 values a device, whatever the rows.")
    alone = many["forward, one op a program, x one device"]
    print(f"Timed one op a program, the forward runs at {alone.min():.3g}x to {alone.max():.3g}x its one-device speed "
          f"(worst: {at(alone.idxmin())}): there the host's start of each device's program is what is measured.")
else:
    print(f"This build had {jax.device_count()} device: the table is the one-device baseline; on a machine with "
          "several GPUs the same page measures their weak scaling.")
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# Weak scaling holds when each device's kernels run as fast as alone and the all-reduce is small next to them: the
# psum moves :math:`N` fp32 values however many rows a device has, and XLA's GPU backend runs collectives
# asynchronously, so one step's all-reduce can overlap the next step's kernels. What does not scale is the host's
# start of a program, longer with each device: a program must hold enough work to hide it. Rows are the easy axis; splitting the *columns*
# over devices (tensor parallelism) would need a psum of each row's sum of squares in the forward and of its dot
# product in the backward. **Exercise**: time ``sharded_parts(mesh, psum=False)`` with a ``jax.lax.psum`` of your own
# after it, outside ``shard_map``: what does XLA compile? References: JAX's guide to ``shard_map``; the Pallas
# documentation; tutorial 04 for the algorithm.
#
# Where this page was made
# ------------------------

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    device = f"{jax.device_count()} x {WHERE}, {NUM_SMS} SMs" if ON_GPU else \
        f"CPU only ({platform.machine()}, {os.cpu_count()} cores), {jax.device_count()} JAX CPU devices"
    plugins = ", ".join(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                        if d.metadata["Name"].startswith("jax-cuda"))  # JAX's CUDA build
    card = {"device": device, "driver / CUDA": plugins if ON_GPU else "none: Pallas' interpreter (interpret=True)",
            "JAX": jax.__version__, "jaxlib": jaxlib.__version__, "torch": version("torch"), "Triton": version("triton"),
            "Python": platform.python_version(), "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

card = environment_card()
for array in jax.live_arrays():  # free this page's GPU memory for the next page
    array.delete()
jax.clear_caches()
card
