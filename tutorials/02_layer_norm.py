"""
Layer norm
==========

Layer norm brings each row to zero mean and unit variance, then scales and shifts it. You write its forward in
Triton, timed against PyTorch, ``torch.compile``, Liger-Kernel, quack, Helion and a copy (the *speed of light*).
**What you will learn**: a row a program, then blocks of rows, exact statistics; rows of up to 8 K (16-bit) or 16 K
(fp32).
Triton basics: :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import os, time, torch
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton
import triton, triton.language as tl
BUILT = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
WHERE = torch.cuda.get_device_name() if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The bytes model
# ---------------
# A row *x* becomes :math:`y = (x - \mu) \, r \odot w + b`, :math:`\mu` its mean, :math:`r` (``rstd``) its inverse
# standard deviation. Each PyTorch op goes through memory (comments: elements moved, *M* rows of *N*):

def naive_layer_norm(x, weight, bias, eps=1e-5):
    xc = x - x.mean(dim=-1, keepdim=True)  # mean reads x (MN), the subtraction reads x, writes xc: 3MN
    var = (xc * xc).mean(dim=-1, keepdim=True)  # xc read, its square written, then read: 3MN
    return xc * torch.rsqrt(var + eps) * weight + bias  # three ops, each reads MN and writes MN: 6MN

# %%
# *12MN* in all. Keeping each row on chip moves *2MN*, a copy's bytes: about **6 times faster**.
#
# Step 0: one row a program
# -------------------------
# Program ``tl.program_id(0)`` holds its row as ``BLOCK_N`` columns (``tl.constexpr``: fixed at compile time), on the
# default 4 warps; the mask ``ok`` keeps the padding out of loads, sums and store; ``tl.where`` is ``torch.where``.
# The variance is that of *x - mean* (no cancellation as in *E[x²] - mean²*), in fp32; ``tl.store`` converts to *y*'s
# dtype.

@triton.jit
def plain_layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    offs, ok = row.to(tl.int64) * n_cols + cols, cols < n_cols  # int64: M * N may pass 2**31
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    xc = tl.where(ok, x - tl.sum(x, axis=0) / n_cols, 0.0)  # the padding must not count in the variance
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    y = xc * rstd * tl.load(w_ptr + cols, mask=ok).to(tl.float32) + tl.load(b_ptr + cols, mask=ok).to(tl.float32)
    tl.store(y_ptr + offs, y, mask=ok)

# %%
# Step 1: blocks of rows
# ----------------------
# A row of 512 bf16 gives 4 warps 8 bytes a thread, too few in flight: a program takes ``BLOCK_M`` rows as a tile
# (``rows[:, None]``, ``cols[None, :]``: broadcast as in torch); ``tl.minimum`` clamps rows past the end to the last,
# their stores masked.
#
# - **Exact statistics**: centred on its first value, a constant row's x - mean is exactly 0 (step 0's is not, on
#   rows of 12345.678); scaled by ``k``, a power of two under 1/N, N squares stay finite.
# - **For the backward**: each row's mean and ``rstd``, stored as a tile masked to column 0 (``+ cols``): no
#   shuffle through shared memory.

@triton.jit
def layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                          EVEN: tl.constexpr, EVICT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < (BLOCK_N if EVEN else n_cols)  # EVEN (N is BLOCK_N): all true, the masks fold away
    k: tl.constexpr = 2.0**-16 / BLOCK_N
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # a program a block of rows
    row_ok, rows = rows < n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    x0 = tl.load(x_ptr + rows * x_row_stride).to(tl.float32) * k  # each row's first value (an L2 hit), times k
    md = tl.sum(tl.where(col_ok[None, :], x * k - x0[:, None], 0.0), axis=1) / n_cols
    xc = tl.where(col_ok[None, :], x * k - x0[:, None] - md[:, None], 0.0)
    q = tl.sum(xc * xc, axis=1) / n_cols  # the variance times k**2; past fp32's range, NaN (as torch's)
    rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))
    mean, rstd = (x0 + md) / k, tl.where(q == 0, 1.0 / tl.sqrt(eps), rstd)  # q == 0: a constant row, as torch
    # w and b loaded late: fewer registers held through the reductions
    y = xc * (1 / k) * rstd[:, None] * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y, mask=row_ok[:, None] & col_ok[None, :])
    tl.store(mean_ptr + rows[:, None] + cols[None, :], mean[:, None], mask=row_ok[:, None] & (cols == 0)[None, :])
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], rstd[:, None], mask=row_ok[:, None] & (cols == 0)[None, :])

# %%
# **Launch parameters.** To hide memory's latency an SM needs bandwidth x latency / SMs bytes in flight (Little's
# law; the ladder below prints this GPU's), shared by the 12-16 programs of 4 warps it holds: a tile holds its share or
# more, ``min_tile_bytes()`` (appendix), a thread at most 32 values, on 2 warps or more. ``EVICT="evict_last"``: L2
# evicts x's lines last (a few percent faster); ``""``, no hint, on rows of 64 KB or more; 64 KB rows hold 64 values
# a thread (both measured).

MAX_FUSED_N = 32768  # the longest row held in registers: 32 fp32 a thread of 32 warps
def _fwd_config(n_rows, n_cols, element_size):
    block_m = max(1, min_tile_bytes() // ((block_n := triton.next_power_of_2(n_cols)) * element_size))
    big = (row := block_n * element_size) >= 65536  # rows of 64 KB or more: no L2 hint; of 64 KB, 64 values a thread
    warps = min(32, max(2, block_m * block_n // (32 * (64 if row == 65536 else 32))))  # a thread 32 values in fp32
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN=n_cols == block_n, EVICT="" if big else "evict_last",
                num_warps=warps), triton.cdiv(n_rows, block_m)
def layer_norm_rows_forward(x2d, y2d, w, b, mean, rstd, eps):
    """y2d, mean, rstd of x2d's rows (unit column stride). Returns the kernel it launched."""
    if x2d.shape[1] > MAX_FUSED_N:
        return chunked_rows_forward(x2d, y2d, w, b, mean, rstd, eps)
    meta, grid = _fwd_config(*x2d.shape, x2d.element_size())
    layer_norm_fwd_kernel[(grid,)](x2d, y2d, x2d.new_ones(x2d.shape[1]) if w is None else w,
                                   x2d.new_zeros(x2d.shape[1]) if b is None else b, mean, rstd, *x2d.shape,
                                   x2d.stride(0), y2d.stride(0), eps, **meta)
    return layer_norm_fwd_kernel

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach: ``RANGE``, the N this kernel is for (the landing page reads it), the fused
# softmax page's ``min_tile_bytes`` (letter for letter; 4 KB with no device), deep dive 21's kernel past its widths,
# and the machinery.
# :func:`triton.testing.do_bench` (median, L2 flushed) times CUDA-graph replays; the light, a copy of *x*, without a
# graph. GB/s counts *x* read and *y* written.
# Helion, where installed, is a peer of its own kind: a kernel written in PyTorch ops on a tile of rows, which Helion
# compiles to Triton, its launch chosen by Helion's autotuner (per GPU and point: ``helion_tuned``). It computes what
# ours does: y, and each row's mean and ``rstd`` in fp32.

import functools, importlib, importlib.metadata, importlib.util, json, math
import pandas as pd, torch.nn.functional as F, torch.utils.collect_env as collect_env
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
RANGE = {("forward", "float32"): range(1, 16384 + 1), ("forward", "bfloat16"): range(1, 8192 + 1)}  # this kernel's N
LATENCY = 1e-6  # seconds: a load from DRAM under load, about a microsecond

@functools.cache  # reads the device once: its memory clock costs the host more than a launch
def min_tile_bytes():
    props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return 4096
    in_flight = bandwidth * LATENCY / props.multi_processor_count  # bytes an SM keeps in flight
    programs = props.max_threads_per_multi_processor // (4 * 32)  # programs of 4 warps an SM holds
    return max(2048, triton.next_power_of_2(int(in_flight / programs)))  # 2 KB: a 16-byte load for each thread

# Rows past ``MAX_FUSED_N``: deep dive 21's chunked kernel, letter for letter, a program a row, streamed twice.
@triton.jit
def layer_norm_fwd_chunked_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_row_stride,
                                  y_row_stride, eps, HAS_W: tl.constexpr, HAS_B: tl.constexpr, CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    k: tl.constexpr = 2.0**-30  # as row_stats' k, for rows of up to 2**31
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row, y_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, y_ptr + tl.cast(row, tl.int64) * y_row_stride
        s1, s2 = tl.zeros([CHUNK_N], tl.float32), tl.zeros([CHUNK_N], tl.float32)
        # each pass issues the loads of its next chunk before it works on this one; the first asks L2
        # to keep the row, the second reads it backwards and lets it go
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        # sums shifted by the first chunk's mean, near the row's: a shift far from it would cancel the squares
        shift = tl.sum(x_next.to(tl.float32), axis=0) / tl.minimum(n_cols, CHUNK_N) * k
        for chunk in range(0, n_chunks):
            offs = chunk * CHUNK_N + cols
            x = x_next.to(tl.float32)
            x_next = tl.load(x_row + offs + CHUNK_N, mask=offs + CHUNK_N < n_cols, other=0.0,
                             eviction_policy="evict_last")
            d = tl.where(offs < n_cols, x * k - shift, 0.0)
            s1 += d
            s2 += d * d
        m1 = tl.sum(s1, axis=0) / n_cols
        var = tl.sum(s2, axis=0) / n_cols - m1 * m1  # times k**2
        var = tl.where(var < 0, 0.0, var)  # (NaN stays NaN: an inf in the row)
        mean = (shift + m1) / k
        rstd = tl.where(var < float("inf"), k / tl.sqrt(var + eps * k * k), float("nan"))
        rstd = tl.where(var == 0, 1.0 / tl.sqrt(eps), rstd)  # as row_stats
        last = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + last, mask=last < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * CHUNK_N + cols  # backwards: the last chunks are in L2
            ok = offs < n_cols
            x = x_next.to(tl.float32)
            x_next = tl.load(x_row + offs - CHUNK_N, mask=(offs >= CHUNK_N) & (offs - CHUNK_N < n_cols), other=0.0,
                             eviction_policy="evict_first")
            y = (x - mean) * rstd
            y = y * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32) if HAS_W else y
            y = y + tl.load(b_ptr + offs, mask=ok, other=0.0).to(tl.float32) if HAS_B else y
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
def chunked_rows_forward(x2d, y2d, weight, bias, mean, rstd, eps):  # past MAX_FUSED_N: deep dive 21's launch
    layer_norm_fwd_chunked_kernel[(len(x2d),)](
        x2d, y2d, *(x2d if t is None else t for t in (weight, bias)), mean, rstd, *x2d.shape, x2d.stride(0),
        y2d.stride(0), eps, HAS_W=weight is not None, HAS_B=bias is not None, CHUNK_N=16384, num_warps=32)
    return layer_norm_fwd_chunked_kernel

def plain_forward(x, y, w, b, eps=1e-5):  # step 0: kernel[grid](arguments), a program a row
    plain_layer_norm_fwd_kernel[(len(x),)](x, y, w, b, x.shape[1], eps, BLOCK_N=triton.next_power_of_2(x.shape[1]))

TOTAL_ELEMENTS, SWEEP_N, LADDER_N = (2**26, [2**k for k in range(9, 17)], [512, 8192]) if ON_GPU else \
    (2**14, [256, 2048, 16384, 65536], [256, 2048])  # 2**26: past the L2 of today's GPUs
SWEEP_DTYPES = (torch.float32, torch.bfloat16)
# %%
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
def load_peer(peer, module, min_cc=(0, 0)):  # its module, or None (no column), saying why in one wording
    cc = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = ("not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else
           "" if cc >= min_cc else "needs compute capability {}.{} or newer; this GPU has {}.{}".format(*min_cc, *cc))
    if not why:
        try:
            return importlib.import_module(module)
        except Exception as err:  # installed, yet it does not load here
            why = " ".join(f"{type(err).__name__}: {err}".split())[:100]
    print(f"{peer}: not measured here ({why}).")
if helion := load_peer("Helion", "helion"):  # a tile of rows a program, as step 1; Helion picks the tile and warps
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
        y, mean = torch.empty_like(x), torch.empty(x.size(0), dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        for rows in hl.tile(x.size(0)):
            x_rows = x[rows, :].to(torch.float32)  # sums, divided by N: Helion masks the columns past N
            mean_rows = torch.sum(x_rows, dim=1) / x.size(1)
            xc_rows = x_rows - mean_rows[:, None]  # the variance of x - mean: no cancellation, a constant row's is 0
            rstd_rows = torch.rsqrt(torch.sum(xc_rows * xc_rows, dim=1) / x.size(1) + eps)
            y_rows = xc_rows * rstd_rows[:, None] * w[None, :].to(torch.float32)
            y[rows, :] = (y_rows + b[None, :].to(torch.float32)).to(y.dtype)
            mean[rows], rstd[rows] = mean_rows, rstd_rows
        return y, mean, rstd

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
if ON_GPU:  # graphs are not captured on the default stream
    torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn, graph=True):  # median ms of fn(); without a GPU, NaN: one call, timed not at all
    fn()  # warm-up (on the CPU: the run that checks it)
    if not ON_GPU:
        return math.nan
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")
def providers():  # name -> fn(x, w, b), ours last
    found = {"naive": naive_layer_norm, "torch": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)}
    if load_peer("torch.compile", "torch._inductor"):  # on a CPU, Inductor would time a C++ compiler
        torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
        found["torch.compile"] = torch.compile(found["torch"], dynamic=False)
    if liger := load_peer("Liger-Kernel", "liger_kernel.ops.layer_norm"):
        found["Liger"] = lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)
    if quack := load_peer("quack", "quack.rmsnorm", min_cc=(9, 0)):  # quack takes fp32 w and b
        found["quack"] = lambda x, w, b: quack.layernorm_fwd(x, w.float(), b.float(), 1e-5)
    if helion:
        helion_forward = helion_tuned(helion_layer_norm, "layer_norm forward",
                                      [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])
        found["Helion"] = lambda x, w, b: helion_forward(x, w, b, 1e-5)[0]
    return found | {"ours": ours}
def ours(x, w, b):  # step 1 (deep dive 21's chunked kernel past MAX_FUSED_N), its statistics in fp32 buffers
    y, mean, rstd = torch.empty_like(x), *(torch.empty(len(x), device=x.device) for _ in range(2))
    layer_norm_rows_forward(x, y, w, b, mean, rstd, 1e-5)
    return y
def measure(fns):  # (every provider's GB/s, step 0's ladder rows), each checked before it is timed
    records, steps = [], []
    for dtype in SWEEP_DTYPES:
        for n_cols in SWEEP_N:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            w, b = (torch.randn(n_cols, device=DEVICE, dtype=dtype) for _ in range(2))
            out, point = torch.empty_like(x), (str(dtype)[6:], n_cols)
            gbs = lambda ms: 2 * x.numel() * x.element_size() / ms * 1e-6
            light, reference = gbs(bench(lambda: out.copy_(x), graph=False)), F.layer_norm(x.float(), (n_cols,), w.float(), b.float())
            if dtype == torch.bfloat16 and n_cols in LADDER_N:  # step 0; step 1 is ours, among the providers
                steps.append((0, "one row a program, 4 warps", n_cols, gbs(bench(lambda: plain_forward(x, out, w, b))), light))
                torch.testing.assert_close(out.float(), reference, atol=5e-2, rtol=2e-2)  # bench ran it
            for name, fn in fns.items():
                ms = math.nan  # "-" in the table
                try:
                    torch.testing.assert_close(fn(x, w, b).float(), reference, atol=5e-2, rtol=2e-2)
                    ms = bench(lambda: fn(x, w, b))
                except Exception as err:
                    if name == "ours":
                        raise
                    print(name, point, "not measured:", " ".join(str(err).split())[:100])
                records.append(("forward", *point, name, gbs(ms), light))
    return pd.DataFrame(records, columns=["direction", "dtype", "N", "provider", "GB/s", "speed of light"]), steps
TOLERANCE, OURS = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}, ["y", "mean", "rstd"]
def check_row(shape, dtype):  # relative errors of y, mean, rstd against float64, rows of mean far from 0
    x, w, b = ((torch.randn(s, device=DEVICE) * 3 + 10).to(dtype) for s in (shape, shape[1:], shape[1:]))
    y, mean, rstd = torch.full_like(x, math.nan), *(torch.full((shape[0],), math.nan, device=DEVICE) for _ in range(2))
    layer_norm_rows_forward(x, y, w, b, mean, rstd, 1e-5)
    var64, mean64 = torch.var_mean(x.double(), dim=1, correction=0)
    refs = (naive_layer_norm(x.double(), w.double(), b.double()), mean64, (var64 + 1e-5).rsqrt())
    row = {q: ((o.double() - r).norm() / (r.norm() if r.norm() > 0 else 1)).item() for q, o, r in zip(OURS, (y, mean, rstd), refs)}
    return {"shape": shape, "dtype": str(dtype)[6:]} | row
def check(shapes):  # the errors' table, asserted within a few roundings of each dtype
    torch.manual_seed(0)
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    assert (errors[OURS].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors.style.format({c: "{:.1e}" for c in OURS}).hide(axis="index")
PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def tables(results, steps, fns):  # (the benchmark's table, the ladder's)
    table = results.pivot(index=["direction", "dtype", "N", "speed of light"], columns="provider", values="GB/s")
    table = table.reset_index("speed of light")[["speed of light", *fns]]
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table.filter(items=PEERS).max(axis=1)
    steps = steps + [(1, "a block of rows a program, warps sized to its bytes", n,
                      *table.loc["forward", "bfloat16", n][["ours", "speed of light"]]) for n in LADDER_N]
    ladder = pd.DataFrame(steps, columns=["step", "idea", "N", "GB/s", "light"]).sort_values(["step", "N"], ignore_index=True)
    ladder["% of light"] = 100 * ladder["GB/s"] / ladder.pop("light")
    return table, ladder
def launch_figures():  # Little's law with this GPU's figures, as min_tile_bytes reads them: printed above the ladder
    if not ON_GPU:
        return f"No GPU here to read: tiles of {min_tile_bytes() // 1024} KB, min_tile_bytes()'s default."
    props = torch.cuda.get_device_properties(DEVICE)
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return (f"This {props.name} does not report its memory clock and width: "
                f"tiles of {min_tile_bytes() // 1024} KB or more.")
    sms, programs = props.multi_processor_count, props.max_threads_per_multi_processor // (4 * 32)
    return (f"On this {props.name}: {bandwidth / 1e12:.2f} TB/s (peak) x {LATENCY * 1e6:g} µs / {sms} SMs = "
            f"{bandwidth * LATENCY / sms / 1024:.0f} KB in flight an SM; shared by its {programs} programs of 4 warps: "
            f"tiles of {min_tile_bytes() // 1024} KB or more.")
def show_ladder(ladder):  # the interpreter's times are no GPU's speeds: step | idea | N only
    print(launch_figures())
    shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]
    return shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide(axis="index")
def show_benchmark(table):  # the plot and the table, and the CSV for the landing page
    write_results(table)
    if not ON_GPU:
        return print(NO_SPEED)
    ax = table["ours, % of light"].unstack([0, 1]).plot(logx=True, marker="o", grid=True, ylabel="ours, % of the copy's GB/s")
    ax.set_title(f"Layer norm forward, {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    return table.style.format({c: "{:.0f}" for c in table} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"},
                              na_rep="-")
WHY_SLOWER = ("a row that long already gives step 0 enough bytes in flight, and step 1 pays for what exactness and the "
              "backward need beyond it: each row's first value loaded on its own (it keeps constant rows exact), the "
              "shift and scale around it, and the stores of mean and rstd")
def reading(table, ladder):  # the sentences that read this run's numbers
    inside = pd.Series([n in RANGE[d, t] for d, t, n in table.index], index=table.index)
    mine, past, fwd = table.loc[inside, "ours, % of light"], table.loc[~inside, "ours, % of light"], table.loc["forward"]
    speed = ladder.set_index(["step", "N"])["GB/s"]
    peers = table[inside].filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, ours {table.ours[i]:,.0f})"
            for i in peers.index if table.ours[i] < peers.loc[i].max()]
    won = f". A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) if lost else ""
    return "".join(f"At N = {n:,} step 1 ran {speed[1, n] / speed[0, n]:.3g}x as fast as step 0"
                   + (f": slower, as {WHY_SLOWER}. " if speed[1, n] < speed[0, n] else ". ") for n in LADDER_N) + (
        f"Inside RANGE ours ran at {mine.min():.3g}-{mine.max():.3g}% of the copy, at least "
        f"{table['ours / best peer'][inside].min():.2g}x the fastest peer, {(fwd.ours / fwd.naive).median():.2g}x "
        f"the naive (median; bytes predict 6x){won}. Past RANGE it fell to {past.min():.3g}%: a wide row leaves room for few "
        "programs an SM, and past the kernel's widths each row streams twice (deep dive 21's kernel); deep dives 21 and "
        "22 take over there." + (
        f" Where ours read above 100% ({', '.join(f'{t} N = {n:,}' for _, t, n in mine[mine > 100].index)}), the copy "
        "was timed without a CUDA graph and ours from one: the same bytes, timed two ways." if (mine > 100).any() else ""))
def write_results(table):  # the summary the site's front page reads
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {})).to_csv(os.path.join(os.environ["SOL_RESULTS"], "02_layer_norm.csv"))
def environment_card():  # everything needed to judge this page's numbers, collapsed
    card = {"device": WHERE, "driver / CUDA": f"{collect_env.get_nvidia_driver_version(collect_env.run)} / "
            f"{torch.version.cuda}" if ON_GPU else "none", "torch": torch.__version__, "Triton": triton.__version__,
            "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card).to_frame('').to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()



# %%
# Correctness
# -----------
# *y*, mean and ``rstd`` against float64, rows of mean far from 0: a few roundings (rows of 40,000: in chunks).

check([(17, 1), (1000, 257), (3, 40_000)])

# %%
# The ladder, measured
# --------------------
# Both steps, on short and wide bf16 rows:

table, ladder = tables(*measure(fns := providers()), fns)
show_ladder(ladder)

# %%
# Benchmark
# ---------
show_benchmark(table)

# %%
# Reading the numbers
# -------------------
print(reading(table, ladder) if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# **Next**: :ref:`sphx_glr_tutorials_02_layer_norm_backward.py`, then
# :ref:`sphx_glr_tutorials_02_layer_norm_drop_in.py`. **Wider rows**:
# :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py` (*x* read twice, or a row split),
# :ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py` (16-bit rows in shared memory), backward
# :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py`. Spin locks:
# :ref:`sphx_glr_tutorials_deep_dives_24_layer_norm_backward_locks.py`. **Exercise**: time 16 K fp32 with
# ``EVICT="evict_last"`` and 32 values a thread: why slower? Reference: Ba et al. (2016).

environment_card()
