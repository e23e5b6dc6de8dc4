"""
RMSNorm backward
================

:ref:`sphx_glr_tutorials_04_rms_norm.py` built RMSNorm's forward. This page writes its backward, whose weight gradient
sums down every column, and measures it against PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion.

**What you will learn**: one backward kernel on two grids, from a row a program to a persistent grid that sums the
weight gradient in registers, in a fixed order. Prerequisite: the forward page. Rows of up to 8 K elements; the next
page makes it a PyTorch operator that ``torch.compile`` keeps in its graph.
"""

import datetime, math, os, torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")

# %%
# The backward and its bytes
# --------------------------
# The forward gives :math:`y = \hat{x} \odot w`, :math:`\hat{x} = r \, x`, each row's :math:`r` saved as ``rstd``.
# With the incoming gradient :math:`dy` and :math:`g = dy \odot w`,
#
# .. math::
#
#    dx = r \left(g - \hat{x} \frac{1}{N} \sum_j g_j \hat{x}_j\right), \qquad dw_j = \sum_{\text{rows}} dy_j \hat{x}_j .
#
# :math:`dx` sums along each row; :math:`dw` sums down each column, over all :math:`M` rows. At best the backward
# reads :math:`x` and :math:`dy` and writes :math:`dx`: :math:`3MN` elements, at a copy's speed.
#
# One kernel, two grids
# ---------------------
# A program takes blocks of ``BLOCK_M`` rows, a tile as in the forward page's step 1, and writes each block's
# :math:`dx`. :math:`dw` it adds up in ``dw_partial``, an fp32 tile of the same shape (``tl.zeros``): each thread sums
# its own elements in registers, block after block. Only at the end does the program sum the tile down its rows and
# write one row of partials. Torch's ``.sum(0)`` adds the programs' rows in a fixed order, so dw has the same bits on
# every run (atomic adds into one dw would not). The grid sets how many rows of partials there are:
#
# - **Step 0**, a row a program (``BLOCK_M = 1``, 4 warps, M programs, the loop run once): M rows of fp32 partials,
#   written then read by the sum: 8 bytes an element beside the 6 of :math:`x`, :math:`dy`, :math:`dx` in bf16, a
#   copy's speed times 6 / 14 at best.
# - **Step 1**, a persistent grid: P programs, each walking blocks ``pid``, ``pid + P``, ... with
#   ``tl.range(start, end, step)`` (``P = tl.num_programs(0)``, the grid's size; ``tl.cdiv`` divides rounding up),
#   adding their dw into the same registers: P rows of partials, a few an SM. Each pass issues the next block's loads
#   (``x_next``) before computing this one: a load stalls only where its value is used, so they arrive meanwhile.

@triton.jit
def rms_norm_bwd_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid, n_programs, cols = tl.program_id(0), tl.num_programs(0), tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    dw_partial = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)  # the first block's loads, before the loop
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_programs):
        x, dy, this_offs, this_mask = x_next.to(tl.float32), dy_next.to(tl.float32), offs, mask
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        rstd = tl.load(rstd_ptr + rows, mask=rows < n_rows, other=0.0)
        next_rows = rows + n_programs * BLOCK_M  # the next block's loads leave before this block is computed
        mask = (next_rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        offs = next_rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x_hat, g = x * rstd[:, None], dy * w[None, :]
        dw_partial += dy * x_hat  # rows past the end add 0
        c = tl.sum(g * x_hat, axis=1) / n_cols
        tl.store(dx_ptr + this_offs, ((g - x_hat * c[:, None]) * rstd[:, None]).to(dx_ptr.dtype.element_ty),
                 mask=this_mask)
    tl.store(dw_partial_ptr + pid.to(tl.int64) * n_cols + cols, tl.sum(dw_partial, axis=0), mask=cols < n_cols)

# %%
# **Launch parameters**: tiles of ``MIN_ELEMENTS`` (4096) values or a whole row, twice that in fp32 (short 16-bit rows:
# below); ``_warps`` gives a thread 32 bytes of a 16-bit tile, 16 on rows of 16 KB or more (more loads in flight), 64 of
# an fp32 tile of rows, 32 of one row (both in the appendix). Step 1's grid: ``16 // num_warps`` programs an SM (16
# warps leave a thread 128 of an SM's 65,536 registers), times the SMs. 16-bit rows of 2 KB or less take tiles of 2 KB
# on 4 warps, 8 programs an SM (32 warps, 64 registers a thread, more than such a tile needs): the same bytes in flight,
# in more programs, so that one program's loads go on while another sums its rows (measured faster on Hopper at N = 512
# and 1,024).

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4 on the CPU

def _bwd_config(n_rows, n_cols, element_size):  # (kernel, meta, grid); grid: the persistent one of step 1
    block_n = triton.next_power_of_2(n_cols)
    # fp32: blocks of 2 x MIN_ELEMENTS (32 KB of x, of dy), 64 bytes a thread: 16 warps, one program an SM (a single
    # row: 32 warps). Measured on Hopper: 2-25% faster than the 16-bit rule below would be on fp32
    block_m, warps_per_sm = max(1, (2 * MIN_ELEMENTS if element_size == 4 else MIN_ELEMENTS) // block_n), 16
    if element_size == 4:
        bytes_per_thread = 64 if block_m > 1 else 32
    elif block_n <= 1024:  # 16-bit rows to 2 KB: tiles of 2 KB, 16 bytes a thread, 32 warps an SM (64 registers each)
        block_m, bytes_per_thread, warps_per_sm = max(1, MIN_ELEMENTS // 4 // block_n), 16, 32
    else:  # rows of 16 KB or more: more threads, more loads in flight
        bytes_per_thread = 16 if n_cols * element_size >= 16384 else 32
    num_warps = _warps(block_m * block_n, element_size, bytes_per_thread)
    return rms_norm_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
        max(1, min(triton.cdiv(n_rows, block_m), max(1, warps_per_sm // num_warps) * NUM_SMS))

RANGE = {("backward", dtype): range(1, 8193) for dtype in ("float32", "bfloat16")}  # the N step 1 is for (fp16 too)

# The two steps' launches; the drop-in's backward (the next page) is step 1:

def rms_norm_rows_backward(x, w, rstd, dy, dx, step=1):  # contiguous rows; returns dw in fp32
    kernel, meta, grid = _bwd_config(*x.shape, x.element_size())
    if step == 0:  # a program a row, on 4 warps
        meta, grid = dict(meta, BLOCK_M=1, num_warps=4), len(x)
    dw_partial = torch.empty((grid, x.shape[1]), device=x.device)
    kernel[(grid,)](x, w, rstd, dy, dx, dw_partial, *x.shape, **meta)
    return dw_partial.sum(0)

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach. First the constants ``_bwd_config`` uses (the operator page carries them, a
# test keeps the two the same); then the machinery. :math:`MN = 2^{26}` elements on a GPU;
# :func:`triton.testing.do_bench` (median, L2 flushed) of CUDA-graph replays; the *speed of light*: a copy of x,
# without a graph. GB/s counts :math:`x, dy, dx`. The peers' backward is timed as training runs it, through autograd
# after their forward; ours is step 1's launch as the drop-in's backward makes it (the kernel, the partials' sum, dw's
# cast to the weight's dtype), on ``rstd`` computed beforehand. Errors are relative to float64 (dx's against its
# terms' size, ``r * g``: they cancel at N = 1), within a few roundings of the dtype (the interpreter truncates to
# bf16: twice a GPU's error). Helion, where installed, is a peer of its own kind: a kernel written in PyTorch ops on
# tiles of rows, which Helion compiles to Triton, its launch chosen by Helion's autotuner (per GPU and point:
# ``helion_tuned``). It computes the whole backward as ours does, dx and a dw partial a program (the partials summed
# by torch, dw cast to the weight's dtype), and, as ours, it is no autograd function: it is timed as ours is, one call
# on the same ``rstd``.

MIN_ELEMENTS = 4096  # fewest elements in a tile
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))

import importlib.metadata, importlib.util, json, shutil, subprocess, timeit
import matplotlib.pyplot as plt

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
SWEEP_N = [2**k for k in range(9, 14)] if ON_GPU else [256, 1024, 4096]
SWEEP_DTYPES = (torch.float32, torch.bfloat16)
CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 8192)] if ON_GPU else \
    [(17, 1), (33, 257), (8, 1000), (3, 8192)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
if ON_GPU:  # graph capture needs a side stream
    torch.cuda.set_stream(torch.cuda.Stream())

def check_row(shape, dtype):
    """Each step's and torch's relative errors against float64, of dx or of dw where that is larger."""
    x, w, dy = (torch.randn(s, device=DEVICE, dtype=dtype) for s in (shape, shape[-1:], shape))
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    dx64, dw64 = torch.autograd.grad(F.rms_norm(x64, shape[-1:], w64, EPS), (x64, w64), dy.double())
    r64 = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS)
    scale = (dy * w * r64).norm()  # dx: against its terms' size
    err = lambda dx, dw: max(((dx - dx64).norm() / scale).item(), ((dw - dw64).norm() / dw64.norm()).item())
    row, rstd = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}, r64.float().squeeze(1)
    for step in LADDER:
        dx = torch.full_like(x, math.nan)  # NaN: unwritten
        row[f"step {step}"] = err(dx, rms_norm_rows_backward(x, w, rstd, dy, dx, step=step))
    xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
    return row | {"torch": err(*torch.autograd.grad(F.rms_norm(xt, shape[-1:], wt, EPS), (xt, wt), dy))}

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16, asserted within TOLERANCE."""
    torch.manual_seed(0)
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    steps = [f"step {step}" for step in LADDER]
    assert (errors[steps].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors

# %%

def bench(fn, graph=True):  # ms; on the CPU, one call's wall clock
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # a warm-up, outside the capture (torch.cuda.graph synchronizes before it captures)
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")

def tensors(n_cols, dtype):  # x, w, dy and a copy's GB/s
    x = torch.randn(TOTAL_ELEMENTS // n_cols, n_cols, device=DEVICE, dtype=dtype)
    w, dy, out = torch.rand(n_cols, device=DEVICE, dtype=dtype) + 0.5, torch.randn_like(x), torch.empty_like(x)
    return x, w, dy, 2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6

gbps = lambda x, ms: 3 * x.numel() * x.element_size() / ms * 1e-6  # x and dy read, dx written

def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")

def naive_rms_norm(x, weight, eps):  # the forward page's, one PyTorch operation a line: autograd differentiates each
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * weight

fns = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
if peer_module("torch.compile", "torch"):  # on the CPU, Inductor would time a C++ compiler
    torch._dynamo.config.recompile_limit = 1024  # one compilation per shape and dtype
    torch._functorch.config.donated_buffer = False  # its backward is timed again and again (retain_graph=True)
    fns["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
if liger := peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"):
    fns["Liger"] = lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)  # not in place
if quack := peer_module("quack", "quack", min_major=9):
    fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
if helion := peer_module("Helion", "helion"):  # block_m rows a program, a dw partial each; Helion picks the tiles
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_rms_norm_backward(x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
        block_m = hl.register_block_size(x.size(0))
        dx = torch.empty_like(x)
        dw_partial = torch.empty(helion.cdiv(x.size(0), block_m), x.size(1), dtype=torch.float32, device=x.device)
        for program_rows in hl.tile(x.size(0), block_size=block_m):
            dw_sum = torch.zeros(x.size(1), dtype=torch.float32, device=x.device)
            for rows in hl.tile(program_rows.begin, program_rows.end):
                x_hat, dy_rows = x[rows, :].to(torch.float32) * rstd[rows][:, None], dy[rows, :].to(torch.float32)
                g = dy_rows * w[None, :].to(torch.float32)
                # a sum over N, divided by N: Helion's torch.mean here divides by N padded to a power of 2
                c = torch.sum(g * x_hat, dim=1, keepdim=True) / x.size(1)
                dx[rows, :] = ((g - x_hat * c) * rstd[rows][:, None]).to(dx.dtype)
                dw_sum += torch.sum(dy_rows * x_hat, dim=0)
            dw_partial[program_rows.id, :] = dw_sum
        return dx, dw_partial

def helion_tuned(kernel, op, points):
    """kernel(*args), each point (dtype, N) at the config dev/helion_tune.py tuned on this GPU, read from the JSON
    file the build names in SOL_HELION_CONFIGS; a point with none autotunes at its first call (effort "quick"),
    kept for this run, or where SOL_HELION_AUTOTUNE=0 is not measured. One line says which."""
    path, entry = os.environ.get("SOL_HELION_CONFIGS", ""), {}
    if os.path.isfile(path):
        with open(path) as f:
            entry = json.load(f).get(WHERE, {})
    same = entry.get("helion") == importlib.metadata.version("helion")
    stored = entry.get("configs", {}).get(op, {}) if same else {}
    missing = [f"{t} N = {n}" for t, n in points if str(n) not in stored.get(t, {})]
    why = ("no file of tuned configs (SOL_HELION_CONFIGS)" if not os.path.isfile(path) else
           f"none tuned on {WHERE}" if not entry else "" if same else f"those stored are Helion {entry.get('helion')}'s")
    off = os.environ.get("SOL_HELION_AUTOTUNE") == "0"  # a build without autotuning: untuned points not measured
    how = "not measured here (SOL_HELION_AUTOTUNE=0)" if off else "autotuned here (effort quick)"
    print(f"Helion: every point at the config tuned on this GPU ({entry.get('tuned')}); none autotuned here."
          if not missing else f"Helion: {how} at each point: {why or 'none stored'}."
          if len(missing) == len(points) else f"Helion: tuned configs at {len(points) - len(missing)} of "
          f"{len(points)} points; {how}: {', '.join(missing)}.")
    configured = set()

    def run(*args):
        bound = kernel.bind(args)  # one per shape and dtype
        point = stored.get(str(args[0].dtype)[6:], {}).get(str(args[0].shape[-1]))
        if off and not point:
            raise RuntimeError(f"no config tuned on {WHERE} for this point, and SOL_HELION_AUTOTUNE=0")
        if point and id(bound) not in configured:
            bound.set_config(helion.Config(**point["config"]))
            configured.add(id(bound))
        return bound(*args)
    return run

if helion:
    helion_backward = helion_tuned(helion_rms_norm_backward, "rms_norm backward",
                                   [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])

    def helion_dx_dw(x, w, rstd, dy):  # the whole backward, as ours: the kernel, the partials' sum, dw in w's dtype
        dx, dw_partial = helion_backward(x, w, rstd, dy)
        return dx, dw_partial.sum(0).to(w.dtype)
    fns["Helion"] = helion_dx_dw
fns["ours"] = None  # step 1's launch, timed apart: benchmark()

LADDER = {0: "a row a program, 4 warps: a dw partial per row",
          1: "persistent, the next block's loads in flight: dw in registers across blocks"}

def measure_ladder():  # the backward with dw on bf16 rows of 256 (short) and 4096 (long)
    rows = []
    for n_cols in (256, 4096):
        x, w, dy, light = tensors(n_cols, torch.bfloat16)
        dx, rstd = torch.empty_like(x), torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
        for step, idea in LADDER.items():
            speed = gbps(x, bench(lambda: rms_norm_rows_backward(x, w, rstd, dy, dx, step=step).to(w.dtype)))
            rows.append({"step": step, "idea": idea, "N": n_cols, "GB/s": speed, "% of light": 100 * speed / light})
    return pd.DataFrame(rows).sort_values("step", kind="stable")

def show_ladder(ladder):  # the interpreter's times are no GPU's speeds
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide()

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def benchmark():  # step 1 against its peers' backward: (records, table)
    records = []
    for dtype, n_cols in [(dtype, n) for dtype in SWEEP_DTYPES for n in SWEEP_N]:
        x, w, dy, light = tensors(n_cols, dtype)
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        dx, rstd = torch.empty_like(x), torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
        for name, fn in fns.items():
            try:
                if name == "ours":  # step 1's launch, dw cast to the weight's dtype: the drop-in's backward
                    run = lambda: rms_norm_rows_backward(x, w, rstd, dy, dx).to(w.dtype)
                elif name == "Helion":  # its whole backward, dx and dw, on the same rstd: timed as ours
                    run = lambda: fn(x, w, rstd, dy)
                else:  # one forward; the backward differentiates it
                    y = fn(xg, wg)
                    run = lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
                speed = gbps(x, bench(run))
            except Exception as err:  # a peer's limit
                if name == "ours":
                    raise
                print(f"{name}: no backward {dtype} N = {n_cols}: {type(err).__name__}: {' '.join(str(err).split())[:100]}")
                speed = math.nan
            records.append({"direction": "backward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                            "GB/s": speed, "speed of light GB/s": light})
    results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
    results["% of speed of light"] = 100 * results["GB/s"] / results["speed of light GB/s"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=PEERS)
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # for the landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "04_rms_norm_backward.csv"))
    return results, table

def show(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-") if ON_GPU else print(NO_SPEED)  # one call: a second resets the rest

def plot(results):  # in % of the copy measured beside each point; none without a GPU
    if not ON_GPU:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white", layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        pct = part.pivot(index="N", columns="provider", values="% of speed of light")
        pct.plot(ax=ax, logx=True, style="o--", ms=3, grid=True, title=f"{direction}, {dtype}",
                 xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)"), ax.legend(fontsize=7)
    fig.suptitle(f"RMSNorm backward, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def reading(ladder, table):  # three to five sentences computed from this run's tables
    if not ON_GPU:
        return NO_SPEED
    speed, s = ladder.set_index(["step", "N"])["GB/s"], ladder[ladder.N == 256].set_index("step")["% of light"]
    text = (f"Step 1 ran {speed[1, 256] / speed[0, 256]:.2f}x as fast as step 0 at N = 256 and "
            f"{speed[1, 4096] / speed[0, 4096]:.2f}x at 4,096.")
    for n in (n for n in (256, 4096) if speed[1, n] < speed[0, n]):
        grid = _bwd_config(TOTAL_ELEMENTS // n, n, 2)[2]
        text += (f"\nStep 1 lost at N = {n:,} ({speed[1, n] / speed[0, n]:.2f}x): its {grid:,} programs "
                 f"({grid // NUM_SMS} an SM) have fewer loads in flight than step 0's program a row, and fewer "
                 "partials did not pay for it.")
    inside = [n in RANGE.get((d, t), ()) for d, t, n in table.index]
    light, peer = table["ours, % of light"][inside], table["ours / best peer"][inside]
    naive = (table.ours / table.naive)[inside]["backward", "float32"]
    peers = table[inside].filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    won = f" A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + "." if lost else ""
    text += (f"\nInside its range ours ran at {light.min():.3g}-{light.max():.3g}% of the copy, "
             f"{peer.min():.3g}-{peer.max():.3g}x the best peer, {naive.min():.3g}-{naive.max():.3g}x as fast as "
             f"autograd through the naive RMSNorm's operations in fp32.{won}")
    over = light[light > 100]
    if len(over):  # more than a copy's GB/s: the copy reads one byte for each it writes, the backward two
        where = ", ".join(f"{t} N = {n:,}: {v:.1f}%" for (_, t, n), v in over.items())
        text += (f" Where ours read above 100% of the copy ({where}), it moved its bytes faster than the copy: it reads "
                 "x and dy for each dx it writes, and reads stream faster than the copy's even mix of reads and writes.")
    if "Helion" in table and table.Helion[inside].notna().any():  # else no point of Helion's ran
        helion_pct, ratio = (table.Helion / table["speed of light"] * 100)[inside], (table.ours / table.Helion)[inside]
        text += (f"\nHelion's kernel (PyTorch ops on tiles of rows, dx and a dw partial a program, its launch "
                 f"autotuned) ran the whole backward inside the range at {helion_pct.min():.3g}-"
                 f"{helion_pct.max():.3g}% of the copy; ours ran {ratio.min():.3g}-{ratio.max():.3g}x its speed.")
    partials = _bwd_config(TOTAL_ELEMENTS // 256, 256, 2)[2]
    return text + (f"\nIn bytes: at N = 256 the same x, dy, dx moved at {s[0]:.3g}% of the copy with a row of "
                   f"partials for each row (step 0), {s[1]:.3g}% with {partials:,} rows of partials in all (step 1).")

def environment_card():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.split("\n")[0] if ON_GPU and shutil.which("nvidia-smi") else "?"
    card = {"device": WHERE, "driver / CUDA": f"driver {smi}, CUDA {torch.version.cuda}" if ON_GPU else
            "none: Triton's interpreter", "torch": torch.__version__, "Triton": triton.__version__, "built": BUILT,
            "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = pd.Series(card, name="").to_frame().to_html()
    summary = f"<details><summary>Full environment card</summary>{html}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: summary})()

# %%
# Correctness
# -----------
# Each step's error against float64 (dx's, or dw's if larger), beside torch's:

errors = check(CHECK_SHAPES)
errors.style.format("{:.1e}", subset=["step 0", "step 1", "torch"]).hide(axis="index")

# %%
# The ladder, measured
# --------------------
# The backward with dw on bf16 rows of 256 (short: 512 bytes of each input a row) and 4096 (long):

ladder = measure_ladder()
show_ladder(ladder)

# %%
# Benchmark
# ---------
# Step 1 against its peers' backward ("-": not measured there; the lines above the table say why), in GB/s, then as a
# plot:

results, table = benchmark()
show(table)

# %%

plot(results)

# %%
# Reading the numbers
# -------------------

print(reading(ladder, table))

# %%
# Going further
# -------------
# **Next**: the drop-in for :func:`torch.nn.functional.rms_norm`, :ref:`sphx_glr_tutorials_04_rms_norm_operator.py`.
# **What limits the kernel now**: a program has one block in flight besides the one it computes; more
# (``num_stages`` of ``tl.range``) may pay on a GPU with more bandwidth. **Exercise**: 64 bytes a thread in
# ``_bwd_config``: what spills? Reference: Zhang, Sennrich (2019).

environment_card()
