"""
Softmax backward and the drop-in
================================

:ref:`sphx_glr_tutorials_01_fused_softmax.py` built the forward at the speed of a copy. This page adds the
backward pass, one more kernel of the same shape, and makes the two a drop-in for :func:`torch.softmax`: a PyTorch
operator with autograd that ``torch.compile(fullgraph=True)`` keeps in its graph. The backward is measured as
training runs it, against PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion.

**What you will learn**: the softmax's backward from its Jacobian, and its bytes; a kernel of two inputs; an
operator of your own with ``torch.library.custom_op``, ``register_fake`` and ``register_autograd``; a drop-in's
check against float64. Prerequisite: the fused softmax page, whose forward this page carries in its appendix. The
backward kernel holds rows of up to 16 K elements; longer rows stream through a deep dive's kernel.
"""

import datetime, functools, math, os

import pandas as pd, torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU

import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The backward pass
# -----------------
# With :math:`y = \mathrm{softmax}(x)` and the incoming gradient :math:`dy`, the chain rule through the Jacobian
# :math:`\partial y_i / \partial x_j = y_i(\delta_{ij} - y_j)` gives
#
# .. math::
#
#    dx = y \odot \left(dy - \sum_j y_j \, dy_j\right) .
#
# A dot product a row and an elementwise step; saving :math:`y` (not :math:`x`) spares the exponentials. PyTorch's
# operations make three passes over memory or more (``y * dy``, its row sums, the last line); a fused kernel reads
# :math:`y` and :math:`dy` once and writes :math:`dx` once, :math:`3MN` elements: a copy's speed for those bytes.
#
# The kernel is the forward's step 1 with two inputs: a tile of ``BLOCK_M`` rows (rows past the end clamped onto the
# last), ``y`` and ``dy`` loaded as tiles with the forward's ``evict_last`` hint (masked lanes load 0, adding nothing to
# the dot product), one reduction along each row (``tl.sum(..., axis=1)``), one store. ``_backward_config`` takes the
# forward's tile for fp32, the dtype :math:`y` and :math:`dy` are held in, and its warps from each input's bytes at 256
# a thread (twice ``BYTES_PER_THREAD``). At bf16 16 K: 4 warps, 255 registers a thread (a little spilled), two programs
# an SM, one's loads overlapping the other's sums and stores; measured faster than 16 warps (fp32: 8, as fast as 16).
# Two fp32 rows of 16 K take most of an SM's registers; past ``MAX_FUSED_BWD_N`` they spill: ``RANGE`` stops there.

MAX_FUSED_BWD_N = 16384  # backward: it holds two rows (y and dy); past this an fp32 row spills (to local memory)
RANGE = {("backward", t): range(1, MAX_FUSED_BWD_N + 1) for t in ("float32", "bfloat16")}  # fp16: as bf16

@triton.jit
def softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok, other=0.0,
                 eviction_policy="evict_last").to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

def _backward_config(n_cols, element_size):  # (BLOCK_M, BLOCK_N, num_warps) of softmax_bwd_kernel
    block_m, block_n, _ = _fused_config(n_cols, 4)  # y and dy held as fp32
    return block_m, block_n, min(32, max(4, block_m * block_n * element_size // (32 * 2 * BYTES_PER_THREAD)))

def softmax_rows_backward(y, dy, dx):
    """dx = y * (dy - rowsum(y * dy)), rows of at most MAX_FUSED_BWD_N. All 2-D, unit stride along the row."""
    block_m, block_n, num_warps = _backward_config(y.shape[1], y.element_size())
    softmax_bwd_kernel[(triton.cdiv(len(y), block_m),)](y, dy, dx, *y.shape, y.stride(0), dy.stride(0), dx.stride(0),
                                                       BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)

# %%
# The drop-in
# -----------
# ``torch.library.custom_op`` makes each launch an operator (its arguments typed, as the decorator requires):
# ``torch.compile`` keeps it as one node of its graph and does not trace the Python that launches the kernel;
# ``register_fake`` gives the compiler its output's shape without running it, ``register_autograd`` its backward. Past
# ``MAX_FUSED_N`` (the forward's 32 K) the forward calls PyTorch's own softmax; past ``MAX_FUSED_BWD_N`` the backward
# reads each row twice, 16 K at a time, with the online kernel of
# :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` (carried in the appendix). ``softmax`` takes what
# :func:`torch.softmax` takes, checks it as torch does (``_checked``, in the appendix) and moves ``dim`` last.

def _rows_op(launch, *rows):  # launch(*rows, out) on 2-D rows; out is new: an output may not alias an input
    out = rows[0].new_empty(rows[0].shape)
    if out.numel() > 0:  # rows not of unit stride along the row (a dy from .sum() is broadcast: stride 0) are copied
        launch(*[t if t.stride(1) == 1 else t.contiguous() for t in rows], out)
    return out

@torch.library.custom_op("sol::softmax_fwd_01", mutates_args=())
def softmax_fwd_op(x2d: torch.Tensor) -> torch.Tensor:
    if x2d.shape[1] > MAX_FUSED_N:
        return torch.softmax(x2d, dim=1).contiguous()
    return _rows_op(softmax_rows_forward, x2d)
softmax_fwd_op.register_fake(lambda x2d: x2d.new_empty(x2d.shape))

@torch.library.custom_op("sol::softmax_bwd_01", mutates_args=())
def softmax_bwd_op(y2d: torch.Tensor, dy2d: torch.Tensor) -> torch.Tensor:
    fused = y2d.shape[1] <= MAX_FUSED_BWD_N  # else streamed; both kernels read dy in any float dtype
    return _rows_op(softmax_rows_backward if fused else softmax_rows_backward_online, y2d, dy2d)
softmax_bwd_op.register_fake(lambda y2d, dy2d: y2d.new_empty(y2d.shape))

# eager: grad enabled inside this backward means create_graph=True, refused (torch.compile's tracing cannot tell)
def _backward(ctx, dy2d):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        raise RuntimeError("softmax: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's softmax there")
    return softmax_bwd_op(ctx.saved_tensors[0], dy2d)
softmax_fwd_op.register_autograd(_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))

def softmax(input, dim=-1, dtype=None):
    """Drop-in for ``torch.softmax(input, dim, dtype=None)`` on float32, float16 and bfloat16, with autograd."""
    x = _checked(input, dim, dtype)  # cast to dtype where given, as torch does
    rows = x.movedim(dim, -1) if x.dim() else x.reshape(1)  # 0-d: a row of one. reshape copies only where it must
    y = softmax_fwd_op(rows.reshape(math.prod(rows.shape[:-1]), rows.shape[-1])).view(rows.shape).movedim(-1, dim)
    return y.reshape(x.shape).contiguous() if x.is_contiguous() else y

# %%
# **In your model.** ``softmax`` is a PyTorch operator: ``torch.compile(fullgraph=True)`` keeps it as one node of the
# graph, with no graph break. Inductor fuses nothing into it: a scale or a mask beside it costs a pass over memory of
# its own. Its kernels hold rows of up to 32 K forward (PyTorch's softmax past that) and 16 K backward (past that one
# program streams each row; :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` splits them over programs);
# 16-bit forward rows of 16 K to 32 K run faster staged in shared memory
# (:ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`), which this drop-in does not carry.
#
# To take it into your code, copy the page above its appendix and the appendix's carried kernels, launchers and checks;
# leave the machinery after them, which moves the page to a CUDA stream of its own and raises ``torch.compile``'s
# recompile limit.

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach: the fused softmax page's step 1, its config function and constants, and deep
# dive 11's online backward kernel with its launch, letter for letter (a test keeps them the same), and the drop-in's
# argument checks; then the machinery: the peers, the timer, the sweep, tables, plot, the sentences that read the
# numbers; the cells after the appendix call them. :func:`triton.testing.do_bench` (median, L2 flushed) times replays of
# a CUDA graph of each call: the GPU's cost, not Python's. The *speed of light* is a copy of the same tensor, timed
# beside it without a graph (CUDA may make a captured copy a slower copy-engine transfer). GB/s counts the bytes a
# perfect kernel moves: :math:`y, dy, dx`, the backward timed as in training. Helion, where installed, is a peer of its
# own kind: a backward kernel in PyTorch ops on a tile of rows, compiled by Helion to Triton, its launch chosen by its
# autotuner (per GPU and point: ``helion_tuned``). It is no autograd function: it is timed as one call on :math:`y`
# (torch's softmax of :math:`x`) and :math:`dy`, the call autograd makes to the others' backward; a graph's replay runs
# only the kernels of either, and GB/s counts the same bytes.

@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: M * N may pass 2**31
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok, other=-float("inf"),
                eviction_policy="evict_last").to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator * (1.0 / tl.sum(numerator, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

MAX_FUSED_N = 32768  # forward: longest row held whole in registers (1024 threads, 32 fp32 values each)
BYTES_PER_THREAD = 128  # most of a tile one thread loads: 32 fp32 values, 64 of 16 bits
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

# (BLOCK_M, BLOCK_N, num_warps) for rows of n_cols elements of element_size bytes (backward: 4, y and dy in fp32)
def _fused_config(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return block_m, block_n, num_warps

def softmax_rows_forward(x2d, y2d):
    """y2d = softmax(x2d) along dim 1, rows of at most MAX_FUSED_N. Both 2-D, unit stride along the row."""
    block_m, block_n, num_warps = _fused_config(x2d.shape[1], x2d.element_size())
    softmax_fwd_kernel[(triton.cdiv(x2d.shape[0], block_m),)](x2d, y2d, *x2d.shape, x2d.stride(0), y2d.stride(0),
                                                              BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
@triton.jit
def softmax_bwd_online_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                              BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        dy_row = dy_ptr + tl.cast(row, tl.int64) * dy_row_stride
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        # Pass 1: dot = sum(y * dy). Each iteration issues the loads of the next chunk before it
        # works on this one, so two chunks are in flight (the last, fully masked load reads nothing).
        acc = tl.zeros([BLOCK_N], tl.float32)
        y_next = tl.load(y_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_next = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            y, dy = y_next, dy_next
            offs = (chunk + 1) * BLOCK_N + cols
            y_next = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            acc += y.to(tl.float32) * dy.to(tl.float32)
        dot = tl.sum(acc, axis=0)
        # Pass 2, backwards and prefetching the same way: dx = y * (dy - dot).
        offs = (n_chunks - 1) * BLOCK_N + cols
        y_next = tl.load(y_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            y, dy = y_next, dy_next
            offs_here = (n_chunks - 1 - chunk) * BLOCK_N + cols
            offs = offs_here - BLOCK_N
            in_row = (offs >= 0) & (offs < n_cols)
            y_next = tl.load(y_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dx = y.to(tl.float32) * (dy.to(tl.float32) - dot)
            tl.store(dx_row + offs_here, dx.to(dx_ptr.dtype.element_ty), mask=offs_here < n_cols,
                     cache_modifier=".cs")
def softmax_rows_backward_online(y, dy, dx):  # deep dive 11's launch of it: a program a row, 16 K values a step
    softmax_bwd_online_kernel[(len(y),)](y, dy, dx, *y.shape, y.stride(0), dy.stride(0), dx.stride(0), BLOCK_N=16384,
                                         num_warps=32)

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def _checked(input, dim, dtype):
    """softmax's arguments, checked as torch.softmax checks them (each error names the limit and the way around it);
    returns the input, cast to dtype where one is given (any input then, as in torch)."""
    if not isinstance(input, torch.Tensor) or not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"softmax: input must be a torch.Tensor and dim must be an int, got {type(input).__name__}, "
                        f"{type(dim).__name__}")
    for name, t in (("input's dtype is ", input.dtype if dtype is None else None), ("dtype=", dtype)):
        if t is not None and t not in SUPPORTED_DTYPES:
            raise TypeError(f"softmax: {name}{t}; these kernels support float32, float16 and bfloat16 "
                            "(else use torch.softmax)")
    if input.device.type != DEVICE.type:
        raise ValueError(f"softmax: input is on {input.device}; the kernels run on {DEVICE}: use .to('{DEVICE}')")
    x, nd = input if dtype is None else input.to(dtype), max(input.dim(), 1)  # 0-d: dim 0 or -1, as in torch
    if not -nd <= dim < nd:
        raise IndexError(f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor (expected [{-nd}, {nd - 1}])")
    if (x.shape[dim] if x.dim() else 1) >= 2**31:
        raise ValueError(f"softmax: rows of {x.shape[dim]} elements exceed the kernels' limit of 2**31 - 1")
    return x

# %%
import importlib.metadata, importlib.util, json, subprocess, warnings
import matplotlib.pyplot as plt

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
TOTAL_ELEMENTS, SWEEP_N = (2**26, [2**k for k in range(8, 16)]) if ON_GPU else (2**15, [256, 1024, 4096, 16384, 32768])
SWEEP_DTYPES = (torch.float32, torch.bfloat16)

def load_peer(peer, module, min_cc=(0, 0)):
    """A peer's module, or None where it cannot run here (no column), saying why in the page's one wording."""
    cc = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = ("not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else
           "" if cc >= min_cc else "needs compute capability {}.{} or newer; this GPU has {}.{}".format(*min_cc, *cc))
    if not why:
        try:
            return importlib.import_module(module)
        except Exception as err:  # installed, yet it does not load here
            why = " ".join(f"{type(err).__name__}: {err}".split())[:100]
    print(f"{peer}: not measured here ({why}).")

liger, quack = load_peer("Liger-Kernel", "liger_kernel.ops.softmax"), load_peer("quack", "quack", min_cc=(9, 0))
inductor = load_peer("torch.compile", "torch._inductor")  # Inductor's CPU code would time a C++ compiler, not a GPU
helion = load_peer("Helion", "helion")
if helion:  # the backward alone, a tile of rows a program; Helion picks the tile, warps and loads
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        dx = torch.empty_like(y)
        for rows in hl.tile(y.size(0)):
            y_rows, dy_rows = y[rows, :].to(torch.float32), dy[rows, :].to(torch.float32)
            dx[rows, :] = (y_rows * (dy_rows - torch.sum(y_rows * dy_rows, dim=1, keepdim=True))).to(dx.dtype)
        return dx

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

if ON_GPU:  # a CUDA graph cannot be captured on the default stream: this page runs on its own
    torch.cuda.set_stream(torch.cuda.Stream())

def bench(fn, graph=True):
    """Median ms of one fn(), CUDA-graph replays timed by do_bench; without a GPU, NaN: one call, timed not at all."""
    fn()  # compile and warm up outside the timing (on the CPU: the run that checks it)
    if not ON_GPU:
        return math.nan
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")

def naive_softmax(x):  # rows of a 2-D tensor, one PyTorch operation a step: autograd differentiates each
    numerator = torch.exp(x - x.max(dim=1, keepdim=True).values)
    return numerator / numerator.sum(dim=1, keepdim=True)

def providers():  # name -> softmax along the last dim
    found = {"naive": naive_softmax, "torch": lambda t: torch.softmax(t, dim=-1)}
    if inductor:
        warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
        torch._functorch.config.donated_buffer = False  # its backward is timed again and again (retain_graph=True)
        found["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
    peers = {"Liger": liger and liger.LigerSoftmaxFunction.apply, "quack": quack and quack.softmax,
             "Helion": helion and helion_tuned(helion_softmax_backward, "softmax backward",  # (y, dy) -> dx
                                               [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])}
    return found | {name: fn for name, fn in peers.items() if fn} | {"ours": softmax}

def sweep(fns):
    """GB/s of each provider's backward (timed as in training), fp32 and bf16, at each N of SWEEP_N, next to a copy."""
    records, missing = [], {}
    for dtype, n_cols in [(dtype, n) for dtype in SWEEP_DTYPES for n in SWEEP_N]:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference, xg = torch.softmax(x.float(), dim=-1), x.requires_grad_(True)
        for name, fn in fns.items():
            try:
                if name == "Helion":  # a kernel, not autograd's: called on y and dy, as autograd calls ours on them
                    y = torch.softmax(x.detach(), dim=-1)
                    got, want = fn(y, dy), reference * (dy.float() - (reference * dy.float()).sum(-1, keepdim=True))
                    run = lambda: fn(y, dy)
                else:  # one forward: the backward differentiates it
                    y = fn(xg)
                    got, want, run = y, reference, lambda: torch.autograd.grad(y, xg, dy, retain_graph=True)
                torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=1e-2)
                gbs = 3 * nbytes / bench(run) * 1e-6
            except Exception as err:  # a peer's limit: its point shows "-", and why is printed below
                if name == "ours":
                    raise
                why = f"{name}: {type(err).__name__}: {' '.join(str(err).split())[:100]}"
                missing.setdefault(why, []).append(n_cols)
                gbs = float("nan")
            records.append({"direction": "backward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                            "GB/s": gbs, "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
    for why, points in missing.items():
        print(f"Not measured at N = {points}: {why}")
    return pd.DataFrame(records)

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def summary(results):
    """GB/s by direction, dtype and N, ours in % of light and against the best peer (and the landing page's CSV)."""
    fns, index = list(results.provider.unique()), ["direction", "dtype", "N"]
    peers = [p for p in PEERS if p in fns]
    table = results.pivot_table(index=index, columns="provider", values="GB/s", dropna=False)[fns]
    table.insert(0, "speed of light", results.groupby(index)["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table[peers].max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # the summary the site's landing page reads
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_softmax_backward.csv"))
    if not ON_GPU:
        return print(NO_SPEED)
    fmt = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(fmt, na_rep="-")  # the Styler: its .data is the table

def plot(table):
    """Each provider in % of the copy measured beside it, one panel per direction and dtype (on a GPU)."""
    if not ON_GPU:
        return
    table = table.data  # the summary's Styler holds the table
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True, sharey=True, facecolor="white")
    for ax, ((direction, dtype), part) in zip(axes.flat, table.groupby(level=[0, 1], sort=False)):
        for name in part.columns[1:-2]:  # the providers: after the speed of light, before ours in % and vs peers
            ax.plot(part.index.get_level_values("N"), 100 * part[name] / part["speed of light"], marker="o",
                    markersize=3, label=name, linewidth=2.5 if name == "ours" else 1.2)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.label_outer()
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Softmax backward, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()
    plt.show()

def reading(table):
    """The sentences that read this run's tables."""
    inside = table[[n in RANGE.get((d, t), ()) for d, t, n in table.index]]
    pct, vs_peer = inside["ours, % of light"], inside["ours / best peer"]
    past = table.drop(inside.index)["ours, % of light"]
    (_, t, n), n_mid = pct.idxmin(), SWEEP_N[len(SWEEP_N) // 2]
    text = [f"Inside its range ours runs at {pct.min():.3g}-{pct.max():.3g}% of the copy (median {pct.median():.3g}%), "
            f"{vs_peer.min():.3g}-{vs_peer.max():.3g}x the best peer; its slowest point is {t} at N = {n}."]
    peers = inside.filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {inside.ours[i]:,.0f})" for i in peers.index if inside.ours[i] < peers.loc[i].max()]
    if lost:
        text.append(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    points = lambda column: ", ".join(f"{t} N = {n}: {v:.4g}%" for (_, t, n), v in column.items())  # noqa: E731
    over = table["ours, % of light"][table["ours, % of light"] > 100]
    if len(over):  # more than a copy's GB/s: the copy reads one byte for each it writes, the backward two
        text.append(f"The backward ran above 100% of the copy ({points(over)}): a copy reads a byte for each byte it "
                    "writes, the backward two (y and dy) for each byte of dx, and memory serves reads faster than a mix "
                    "of reads and writes; the copy is also timed without a CUDA graph.")
    if "Helion" in table and inside.Helion.notna().any():  # else no point of Helion's ran
        helion_pct, ratio = inside.Helion / inside["speed of light"] * 100, inside.ours / inside.Helion
        text.append(f"Helion's backward kernel (PyTorch ops on a tile of rows, its launch autotuned, called on y and "
                    f"dy without autograd) ran inside the range at {helion_pct.min():.3g}-{helion_pct.max():.3g}% of "
                    f"the copy; ours, through autograd, ran {ratio.min():.3g}-{ratio.max():.3g}x its speed.")
    if len(past):
        text.append(f"Past its range ({points(past)}) the drop-in streams each row with deep dive 11's online kernel, "
                    "one program a row, reading it twice; deep dive 11 splits such rows over programs.")
    fp32 = table.loc["backward"].loc["float32"]
    text.append(f"At N = {n_mid} in fp32 ours ran {fp32.ours[n_mid] / fp32.naive[n_mid]:.3g}x as fast as autograd "
                "through the naive softmax's operations.")
    return "\n".join(text)

CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (64, 30000), (16, 100_003)] if ON_GPU else \
    [(17, 1), (33, 257), (8, 1000), (3, 20_000), (2, 40_000)]

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4).requires_grad_(True)
    dy, x64 = torch.randn(shape, device=DEVICE, dtype=dtype), x.detach().double().requires_grad_(True)
    y64 = torch.softmax(x64, dim=-1)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    # relative error (ref = 0, dx at N = 1: absolute)
    err = lambda out, ref: ((out.double() - ref).norm() / (ref.norm() if ref.norm() > 0 else 1)).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn in [("ours", softmax), ("torch", torch.softmax)]:
        y = fn(x, dim=-1)
        row[f"{name} fwd"], row[f"{name} bwd"] = err(y, y64.detach()), err(torch.autograd.grad(y, x, dy)[0], dx64)
    return row

TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings (the interpreter's bf16 truncates)

def check(shapes):
    """The errors' table of every shape in each supported dtype, asserted within TOLERANCE."""
    errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in shapes])
    assert (errors[["ours fwd", "ours bwd"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors.style.format({c: "{:.1e}" for c in errors.columns if c.endswith(("fwd", "bwd"))}).hide(axis="index")

def check_compiled(loss, *params):
    """loss() compiled whole: fullgraph=True raises at a graph break (without a GPU the aot_eager backend, as Inductor's
    CPU code would need a C++ compiler); the compiled step's gradients must be eager's."""
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    torch.testing.assert_close(*[torch.autograd.grad(fn(), params) for fn in (compiled, loss)])
    return "compiled with fullgraph=True: one graph, forward and backward; its gradients are eager's"

def environment_card():
    """The full environment card, shown collapsed."""
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter", "torch": torch.__version__,
            "Triton": triton.__version__, "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    if ON_GPU:
        props = torch.cuda.get_device_properties(DEVICE)
        smi = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
        card["device"] = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        try:
            driver = subprocess.run(smi.split(), capture_output=True, text=True, timeout=10, check=True).stdout
            driver = driver.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            driver = "unknown"
        card["driver / CUDA"] = f"driver {driver}, CUDA {torch.version.cuda}"
    table = pd.DataFrame({"": list(card.values())}, index=list(card.keys())).to_html()
    html = f"<details><summary>Full environment card</summary>{table}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()  # shown as its HTML, collapsed

# %%
# Correctness
# -----------
# Relative errors against float64, forward and backward, ours and PyTorch's side by side (``check``, in the appendix,
# fails past a few roundings). The shapes include rows past 16 K, which the backward streams, and past 32 K, where the
# forward is PyTorch's.

check(CHECK_SHAPES)

# %%
# **In a compiled model.** A layer and the drop-in, compiled whole with ``torch.compile(fullgraph=True)``, forward and
# backward; ``check_compiled`` (in the appendix) fails at a graph break and compares the gradients with eager's.

layer, h = torch.nn.Linear(64, 1000, device=DEVICE), torch.randn(32, 64, device=DEVICE)
check_compiled(lambda: softmax(layer(h), dim=-1).square().sum(), layer.weight)

# %%
# Benchmark
# ---------
# :math:`M \times N = 2^{26}` elements on a GPU, N from 256 to 32 K; "-" marks a point a peer cannot run.
# The backward as training runs it (``torch.autograd.grad`` of each provider's output), GB/s (higher is better):

table = summary(sweep(providers()))
table

# %%
# As a plot, each provider in % of the copy measured beside it (on a GPU):

plot(table)

# %%
# Reading the numbers
# -------------------
# From the tables above, as this build measured them:

print(reading(table.data) if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# **Exercise.** The backward saves :math:`y`. Save :math:`x` instead and recompute :math:`y` in the backward kernel: how
# many bytes does the backward move then, and what does the benchmark say? ``softmax(x, dim=0)`` copies ``x``: write the
# kernels that reduce down columns (:ref:`sphx_glr_tutorials_03_parallel_reduction.py` shows the pattern).

environment_card()
