"""
RMSNorm in JAX over several GPUs: rows split, one psum
======================================================

Tutorial 05's differentiable RMSNorm on every device at once: ``jax.shard_map`` gives each device its rows and a
copy of the weight, the Pallas kernels run unchanged on each, and one ``psum`` of the weight gradient is all that
crosses the links. Measured on meshes of 1, 2, 4, ... devices and on all GPUs the build has: GB/s a device and
in all, and what the all-reduce costs. Like 05, it needs GPUs of compute capability 8.0 or newer (Pallas' Triton
backend) and stops with a message elsewhere; without a GPU it runs on two CPU devices through Pallas' interpreter.

**What you will learn**: to shard a custom JAX op with ``jax.shard_map``; why :math:`y` and :math:`dx` need no
communication and :math:`dw` needs one all-reduce of :math:`N` values; to find that all-reduce in the jaxpr and in
the HLO that XLA compiled; to time a sharded op as a training step runs it, not as the host starts it; to read
*weak scaling* (the same rows a device, more devices) from a table. Prerequisites:
:ref:`sphx_glr_tutorials_05_jax_rms_norm.py` and :ref:`sphx_glr_tutorials_05_jax_rms_norm_backward.py`, whose kernels
the appendix carries.
"""

import datetime, functools, importlib.metadata, importlib.util, itertools, os, statistics, timeit
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
if ON_GPU and tuple(map(int, (capability := jax.devices()[0].compute_capability).split("."))) < (8, 0):
    raise RuntimeError(f"This page needs compute capability 8.0 or newer for Pallas' Triton backend; {WHERE} has "
                       f"{capability}. Run it on Ampere GPUs or newer, or without a GPU (Pallas' interpreter).")

# %%
# Over devices: rows split, one psum
# ----------------------------------
# ``jax.shard_map`` runs a function on each device's block of rows (``P(AXIS)``: split along the first axis), the
# weight replicated (``P()``). :math:`y` and :math:`dx` of a row need only that row: nothing crosses the links. But
# :math:`dw = \sum_{\text{rows}} dy \odot \hat{x}` sums *all* rows: each device sums its own with 05's kernels (in
# the appendix), then ``jax.lax.psum`` adds the devices' fp32 vectors, an *all-reduce* of :math:`N` values
# (:math:`4N` bytes), whatever the number of rows. ``psum=False`` leaves each device's :math:`dw` apart, to time the
# kernels alone.

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
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach. First, what it measures: tutorial 05's kernels, launch parameters and
# drop-in (``_forward``, ``_backward``, ``differentiable``), letter for letter as 05's two pages write and explain
# them (a test keeps them the same). Then the timer ``bench`` (``calls`` programs back to back, JAX queueing them,
# one wait for the last, the median of ``REPEATS`` runs), the chained programs ``chained``, the weak-scaling sweep,
# its plot and sentences, and the environment card.

import platform  # the environment card's

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
NUM_SMS = getattr(jax.devices()[0], "core_count", None) or 4  # a GPU's SMs; on the CPU, four stand-ins
MIN_ELEMENTS = 4096  # fewest elements a program moves per step: enough bytes in flight to hide latency
FWD_WHOLE_ROW_N = 16384  # the forward kernel's longest row: 32 fp32 a thread at 16 warps; longer rows go to XLA
WHOLE_ROW_N = 8192  # the backward's longest row: x, dy, the next block's and dw_partial in registers; longer: XLA
WARPS_PER_SM = 16  # the backward's persistent grid: as many programs an SM as fit in 16 warps
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

EPS, TOTAL_ELEMENTS, CHAIN, (CALLS, REPEATS) = 1e-6, *((2**26, 8, (10, 7)) if ON_GPU else (2**13, 2, (1, 1)))
SWEEP_N = [1024, 4096, 8192] if ON_GPU else [1024]  # the N 05's kernels are for
MESHES = sorted({jax.device_count()} | {2**k for k in range(8) if 2**k < jax.device_count()})
NO_SPEED = ("No GPU here: this run checks the sharded values on CPU devices through Pallas' interpreter "
            "(interpret=True); it measures no speed.")

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

def measure_scaling():  # the weak-scaling table: a row a (dtype, N, devices)
    records = []
    for dtype, n_cols, n_devices in itertools.product(["bfloat16", "float32"], SWEEP_N, MESHES):
        mesh = Mesh(np.array(jax.devices()[:n_devices]), (AXIS,))
        rows, whole = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
        shape = n_devices * TOTAL_ELEMENTS // n_cols, n_cols
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
                       | {f"{k}, GB/s a device": (3 if "backward" in k else 2) * nbytes / t * 1e-6
                          for k, t in ms.items()}
                       | {"psum share": 1 - ms["backward, no psum"] / ms["backward"]})
        del x, dy, rstd
    scaling = pd.DataFrame(records).set_index(["dtype", "N", "devices"])
    one = scaling.xs(1, level="devices")  # each (dtype, N) on one device: the weak-scaling baseline
    for k in ("forward", "backward, no psum", "forward, one op a program"):
        scaling[f"{k}, x one device"] = scaling[f"{k}, GB/s a device"] / one[f"{k}, GB/s a device"].reindex(
            scaling.index.droplevel("devices")).to_numpy()
    for k in ("forward", "backward"):
        scaling[f"{k}, GB/s in all"] = scaling[f"{k}, GB/s a device"] * scaling.index.get_level_values("devices")
    return scaling

def show(scaling):  # the table in HTML
    return scaling.style.format({c: "{:.1%}" if c == "psum share" else "{:.2f}" if "x one" in c else "{:,.0f}"
                                 for c in scaling.columns})

def plot(scaling):  # GB/s a device against the number of devices, one line a row length
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True, facecolor="white", layout="constrained")
    for ax, direction in zip(axes, ("forward", "backward")):
        for (dtype, n_cols), part in scaling.groupby(level=["dtype", "N"], sort=False):
            ax.plot(part.index.get_level_values("devices"), part[f"{direction}, GB/s a device"], "-o", markersize=4,
                    label=f"{dtype}, N = {n_cols}")
        ax.set(title=direction, xlabel="devices", ylabel="GB/s a device", xticks=MESHES), ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"RMSNorm in JAX, {TOTAL_ELEMENTS:,} elements a device, on {jax.device_count()} x {WHERE}")
    plt.show()

def read_scaling(scaling):  # the sentences under "Reading the numbers", from this run's table
    many = scaling[scaling.index.get_level_values("devices") > 1]
    at = lambda i: f"{i[0]}, N = {i[1]}, {i[2]} devices"  # a row of the table, in words
    if len(many):
        for k in ("forward", "backward, no psum"):
            ratio = many[f"{k}, x one device"]
            print(f"{k}: on {', '.join(map(str, MESHES[1:]))} devices each runs at {ratio.min():.3g}x to "
                  f"{ratio.max():.3g}x its one-device GB/s (worst: {at(ratio.idxmin())}); 1.0x is perfect weak "
                  "scaling.")
        share, from_4k = many["psum share"], many[many.index.get_level_values("N") >= 4096]["psum share"]
        beyond = f"; from N = 4096 at most {from_4k.max():.1%}" if len(from_4k) else ""
        print(f"The psum adds {share.min():.1%} to {share.max():.1%} to the backward's time (the most: "
              f"{at(share.idxmax())}{beyond}), for N fp32 values a device, whatever the rows.")
        alone = many["forward, one op a program, x one device"]
        print(f"Timed one op a program, the forward runs at {alone.min():.3g}x to {alone.max():.3g}x its one-device "
              f"speed (worst: {at(alone.idxmin())}): there the host's start of each device's program is what is "
              "measured.")
    else:
        print(f"This build had {jax.device_count()} device: the table is the one-device baseline; on a machine with "
              "several GPUs the same page measures their weak scaling.")

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    device = f"{jax.device_count()} x {WHERE}, {NUM_SMS} SMs" if ON_GPU else \
        f"CPU only ({platform.machine()}, {os.cpu_count()} cores), {jax.device_count()} JAX CPU devices"
    plugins = ", ".join(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                        if d.metadata["Name"].startswith("jax-cuda"))  # JAX's CUDA build
    card = {"device": device, "driver / CUDA": plugins if ON_GPU else "none: Pallas' interpreter (interpret=True)",
            "JAX": jax.__version__, "jaxlib": jaxlib.__version__, "torch": version("torch"),
            "Triton": version("triton"), "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

def closing_card():  # the card; this page's GPU memory is freed for the next page
    card = environment_card()
    for array in jax.live_arrays():
        array.delete()
    jax.clear_caches()
    return card

# %%
# What crosses the links
# ----------------------
# ``differentiable(*sharded_parts(mesh))`` is the drop-in over a mesh of every device (each GPU, or two CPU devices),
# checked against the same function on one device: :math:`y` and :math:`dx` the same bits, :math:`dw` the same sums
# grouped differently (the table). The jaxpr has the ``psum``; XLA's HLO, as this build compiled it, the all-reduce.

one_device = differentiable(functools.partial(_forward, eps=EPS), _backward)
MESH = Mesh(np.array(jax.devices()), (AXIS,))
x = jax.device_put(jax.random.normal(jax.random.key(7), (64 * MESH.size, 1000)), NamedSharding(MESH, P(AXIS)))
w, dy = 1 + 0.1 * jax.random.normal(jax.random.key(8), (1000,)), jax.random.normal(jax.random.key(9), x.shape)
sharded_step = jax.jit(lambda x, w, dy: gradients(differentiable(*sharded_parts(MESH, EPS)), x, w, dy))
(y_s, dx_s, dw_s), (y_1, dx_1, dw_1) = sharded_step(x, w, dy), jax.jit(lambda *a: gradients(one_device, *a))(x, w, dy)
assert (y_s == y_1).all() and (dx_s == dx_1).all() and jnp.allclose(dw_s, dw_1, rtol=1e-5, atol=1e-5)
jaxpr, hlo = str(jax.make_jaxpr(sharded_step)(x, w, dy)), sharded_step.lower(x, w, dy).compile().as_text()
shown = [text for text in jaxpr.splitlines() if "psum" in text] + [t for t in hlo.splitlines() if " all-reduce(" in t]
for line in shown:
    print(line.strip().split(", metadata")[0][:150])
if " all-reduce(" not in hlo:
    print(f"No all-reduce in the compiled HLO: over {MESH.size} device the psum adds nothing, and XLA removed it.")
pd.DataFrame([{"devices": MESH.size, "y, dx: bit for bit the one-device ones": True, "dx split as": dx_s.sharding.spec,
               "dw: largest difference / largest value": float(jnp.max(jnp.abs(dw_s - dw_1)) / jnp.max(jnp.abs(dw_1)))}]
             ).style.format({"dw: largest difference / largest value": "{:.1e}"}).hide()

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

scaling = measure_scaling()
show(scaling) if ON_GPU else print(NO_SPEED)

# %%

plot(scaling) if ON_GPU else None

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

read_scaling(scaling) if ON_GPU else print(NO_SPEED)

# %%
# Going further
# -------------
# Weak scaling holds when each device's kernels run as fast as alone and the all-reduce is small next to them: the
# psum moves :math:`N` fp32 values however many rows a device has, and XLA's GPU backend runs collectives
# asynchronously, so one step's all-reduce can overlap the next step's kernels. What does not scale is the host's
# start of a program, longer with each device: a program must hold enough work to hide it. Rows are the easy axis;
# splitting the *columns* over devices (tensor parallelism) would need a psum of each row's sum of squares in the
# forward and of its dot product in the backward. **Exercise**: time ``sharded_parts(mesh, psum=False)`` with a
# ``jax.lax.psum`` of your own after it, outside ``shard_map``: what does XLA compile? References: JAX's guide to
# ``shard_map``; the Pallas documentation; tutorial 04 for the algorithm.
#
# Where this page was made
# ------------------------

closing_card()
