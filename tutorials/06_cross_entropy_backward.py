"""
Cross-entropy backward and the drop-in
======================================

:ref:`sphx_glr_tutorials_06_cross_entropy_and_gradient.py` computes each row's loss and its gradient in one launch.
This page adds the backward, which only scales that gradient by the one autograd hands it (usually 1: nothing to
do), and makes the two a drop-in for :func:`torch.nn.functional.cross_entropy`: PyTorch operators with autograd, which
``torch.compile(fullgraph=True)`` keeps in its graph. It is measured as training runs it, the loss and its backward,
against PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion.

**What you will learn**: a backward that reads one number a row; an operator of your own that hands autograd a
gradient computed early; a drop-in's check against float64 with weights, ignored rows and smoothing. Prerequisite: the
two cross-entropy pages before, whose kernel, config and launcher this page carries. For training, the site's fastest
kernel is :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py`, with this page's drop-in around it.
"""

import contextlib, datetime, importlib.metadata, importlib.util, json, operator, os, shutil, subprocess, timeit, typing
import torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")
NO_GPU = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."

# %%
# The backward
# ------------
# Autograd calls a loss's backward with :math:`g`, the gradient of what follows with respect to the loss: 1 for
# ``loss.backward()``, one value a row for ``reduction='none'``. The forward wrote the logits' gradient already,
# :math:`w\,(p - \mathrm{onehot}(t))` times the mean's factor (1 / the rows' summed weights): the backward only
# multiplies it by :math:`g`. A usual backward would save :math:`x`, read it again and recompute the softmax: 2 more
# bytes a bf16 logit. Here each logit is read from memory once (a row's second read hits L2 where it fits) and its
# gradient written once: 4 bytes a bf16 logit, a copy's, the least. The backward scales it in place, **lazily**: a
# program reads its row's :math:`g` and, where it is exactly 1, touches no logit.
#
# Beyond the earlier pages' Triton: ``if g != 1.0`` branches on a value read at run time, each program on its own row;
# ``range(0, n_cols, CHUNK)`` in a kernel is a loop over a run-time bound (as ``tl.range``, which also takes
# ``num_stages``); ``dloss_stride`` 0 reads one :math:`g` for every row (a scalar loss). The grid: *P* programs,
# ``MAX_PROGRAMS_PER_SM`` an SM (the appendix), *p* walking rows ``p, p + P, ...``.

RANGE = {}  # forward+backward: the site recommends deep dive 61; the loss alone: the first cross-entropy page

@triton.jit
def scale_grad_kernel(dx_ptr, dloss_ptr, n_rows, n_cols, dx_row_stride, dloss_stride, CHUNK: tl.constexpr):
    cols = tl.arange(0, CHUNK)  # dx[row] *= dloss[row] (dloss_stride 0: one scalar), skipping rows whose dloss is 1
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        g = tl.load(dloss_ptr + row * dloss_stride).to(tl.float32)
        if g != 1.0:
            dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
            for start in range(0, n_cols, CHUNK):
                dx = tl.load(dx_row + start + cols, mask=start + cols < n_cols, other=0.0)
                tl.store(dx_row + start + cols, (dx.to(tl.float32) * g).to(dx.dtype), mask=start + cols < n_cols)

# %%
# The drop-in, as PyTorch operators
# ---------------------------------
# ``cross_entropy`` takes what :func:`torch.nn.functional.cross_entropy` takes for class-index targets; with
# ``label_smoothing`` it calls that function itself (deep dive 61's kernel smooths). The launches are operators
# (``torch.library.custom_op``), which ``torch.compile(fullgraph=True)`` keeps in its graph untraced: a check inside
# one that reads the targets' values (a wait for the GPU) runs, compiled or not. ``register_fake`` gives the compiler
# their outputs' shapes without running a kernel. The forward operator runs the previous page's launcher,
# ``cross_entropy_rows`` (in the appendix, with the checks), and returns the gradient as a second output;
# ``register_autograd`` saves it for the backward operator, which scales it in place, saying so (``mutates_args``).

@torch.library.custom_op("sol::cross_entropy_bwd_06", mutates_args=("dx",))
def ce_bwd_op(dx: torch.Tensor, dloss: torch.Tensor) -> None:
    (n_rows, n_cols), g = dx.shape, dloss.reshape(-1)
    if n_rows > 0:
        meta = {k: v for k, v in _config(n_rows, n_cols, dx.element_size())[0].items() if k in ("CHUNK", "num_warps")}
        scale_grad_kernel[(min(n_rows, MAX_PROGRAMS_PER_SM * NUM_SMS),)](
            dx, g, n_rows, n_cols, dx.stride(0), g.stride(0) if g.numel() > 1 else 0, **meta)

@torch.library.custom_op("sol::cross_entropy_fwd_06", mutates_args=())
def ce_fwd_op(x2d: torch.Tensor, target: torch.Tensor, weight: typing.Optional[torch.Tensor], ignore_index: int,
              reduction: str, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_targets(target, x2d.shape[1], ignore_index)  # the appendix: in here, a compiled model checks too
    dx = torch.empty_like(x2d if grad else x2d[:0])  # outputs are new tensors, never an input or a view of one
    losses, scale = cross_entropy_rows(x2d, target, weight, ignore_index, reduction == "mean", dx if grad else None)
    return (losses if reduction == "none" else losses.sum() * scale).to(x2d.dtype), dx
ce_fwd_op.register_fake(lambda x2d, target, weight, ignore_index, reduction, grad: (  # shapes, dtypes
    x2d.new_empty(x2d.shape[:1] if reduction == "none" else ()), torch.empty_like(x2d if grad else x2d[:0])))

def _backward(ctx, dloss, *_):
    _need(not torch.is_grad_enabled() or torch.compiler.is_compiling(), RuntimeError, lambda: "a gradient of this "
          "gradient (create_graph=True) is not supported: the backward is a Triton kernel; use torch's cross_entropy")
    try:  # the forward's gradient, scaled in place below: gone (or changed, with retain_graph) after a backward
        (dx,) = ctx.saved_tensors
    except RuntimeError:
        raise RuntimeError("cross_entropy: this loss's backward already ran (its gradient is handed over): "
                           "compute the loss again, not retain_graph=True") from None
    ce_bwd_op(dx, dloss)
    return dx, None, None, None, None, None
def _setup(ctx, inputs, output):  # the forward's gradient, saved for the backward; not itself differentiable
    ctx.save_for_backward(output[1]), ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # else autograd hands _backward a zero-filled "gradient" of dx: a pass over dx
ce_fwd_op.register_autograd(_backward, setup_context=_setup)

def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    n_classes, ignore_index = _check(logits, target, weight, ignore_index, reduction, label_smoothing)
    x2d = logits.reshape(1, -1) if logits.dim() == 1 else logits.movedim(1, -1).reshape(-1, n_classes)
    x2d = x2d if x2d.stride(-1) == 1 or n_classes == 1 else x2d.contiguous()
    target1d, weight = target.reshape(-1).long().contiguous(), None if weight is None else weight.contiguous()
    if label_smoothing > 0:  # torch's own in fp32, and its autograd (deep dive 61: in the kernel)
        _check_targets(target1d, n_classes, ignore_index)
        loss = F.cross_entropy(logits.float(), target.long(), None if weight is None else weight.float(),
                               ignore_index=ignore_index, reduction=reduction, label_smoothing=float(label_smoothing))
        return loss.to(logits.dtype)
    grad = torch.is_grad_enabled() and x2d.requires_grad
    loss = ce_fwd_op(x2d, target1d, weight, ignore_index, reduction, grad)[0]
    return loss.view(target.shape) if reduction == "none" else loss

# %%
# **In your model.** The drop-in keeps the gradient from the forward to the backward, :math:`M \times V` in the
# logits' dtype, as PyTorch keeps its ``log_softmax``; the backward hands it over (uncopied, as the logits' gradient),
# so a second backward of the same loss (``retain_graph=True``), or a gradient of the gradient
# (``create_graph=True``), is refused. To take it, copy the page above its appendix and the appendix's carried code. A
# forward with gradients enabled writes the gradient whether a backward follows or not: evaluate under
# ``torch.no_grad()``. Unsmoothed, a class out of range raises ``IndexError``, compiled or not (a wait for the GPU a
# call); in a captured CUDA graph (``mode="reduce-overhead"``) it cannot look: its row's loss is NaN.

# %%
# Appendix: how this page measures
# --------------------------------
# First, the two pages before, letter for letter (a test keeps them so): the first's device figures, constants,
# ``add_chunk`` and ``log_sum_exp``; the second's kernel, constants, config, launcher. Then the drop-in's checks, each
# error naming the argument and the limit (``_need`` formats a message only on failure, so a compiled model
# formats none). Then the machinery (check, peers, timer, sweep, table, plot, sentences), which later cells call.

props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None  # on the CPU, below: an H100 SM's sizes, 4 SMs
NUM_SMS, SMEM_PER_SM = (props.multi_processor_count, props.shared_memory_per_multiprocessor) if ON_GPU else (4, 233472)
WARPS_PER_SM = props.max_threads_per_multi_processor // 32 if ON_GPU else 64
FORWARD_CHUNK_N = 1024  # bf16 logits a chunk of the loss alone (fp32: twice), 16 a thread
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)

@triton.jit
def add_chunk(m, s, x):  # a chunk x (fp32) into running maximum m and sums s; e^a as 2^(a log2 e): 1 instruction, not 4
    m_new = tl.maximum(m, tl.max(x, axis=0))  # tl.max: the chunk's largest; tl.maximum: the larger of two, elementwise
    shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # every logit -inf so far: no -inf - (-inf)
    return m_new, s * tl.exp2((m - shift) * 1.4426950408889634) + tl.exp2((x - shift) * 1.4426950408889634)

@triton.jit
def log_sum_exp(x_row, n_cols, CHUNK: tl.constexpr, STAGES: tl.constexpr, KEEP: tl.constexpr):  # (m, log_s)
    cols, full = tl.arange(0, CHUNK), n_cols // CHUNK * CHUNK  # logits in whole chunks: loaded without a mask
    m, s = tl.full([], -float("inf"), tl.float32), tl.zeros([CHUNK], tl.float32)
    for start in tl.range(0, full, CHUNK, num_stages=STAGES):
        m, s = add_chunk(m, s, tl.load(x_row + start + cols, eviction_policy=KEEP).to(tl.float32))
    m, s = add_chunk(m, s, tl.load(x_row + full + cols, mask=cols < n_cols - full, other=-float("inf")).to(tl.float32))
    return m, tl.log(tl.sum(s, axis=0))  # l = m + log_s, kept apart: at m = 1e20 the sum rounds log_s away

@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, scale_ptr, loss_ptr, dx_ptr,
                         n_rows, n_cols, x_row_stride, dx_row_stride, ignore_index,
                         CHUNK: tl.constexpr, STAGES: tl.constexpr, WRITE_GRAD: tl.constexpr,
                         KEEP: tl.constexpr, DROP: tl.constexpr, STREAM: tl.constexpr):  # cache hints: step 2's
    LOG2E: tl.constexpr = 1.4426950408889634
    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):  # rows p, p + P, ... (step 1: P = M)
        x_row, dx_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        t = tl.load(target_ptr + row)
        target = tl.minimum(tl.maximum(t, 0), n_cols - 1)  # out of range: read inside the row, the loss NaN
        w_t = tl.load(weight_ptr + target).to(tl.float32)  # the target's class weight (all 1 without weights)
        w = tl.where(t == ignore_index, 0.0, tl.where(t == target, w_t, float("nan")))
        x_t = tl.load(x_row + target).to(tl.float32)
        m, log_s = log_sum_exp(x_row, n_cols, CHUNK, STAGES, KEEP)  # pass 1: l = m + log_s
        tl.store(loss_ptr + row, tl.where(w == 0.0, 0.0, w * (m - x_t + log_s)))
        if WRITE_GRAD:  # pass 2, the last chunk first
            row_scale = tl.where(w == 0.0, 0.0, w * tl.load(scale_ptr))
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = (n_chunks - 1 - chunk) * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)
                dx = row_scale * tl.exp2((x - m) * LOG2E - log_s * LOG2E)
                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)
            tl.debug_barrier()
            tl.store(dx_row + target, (row_scale * (tl.exp(x_t - m - log_s) - 1.0)).to(dx_ptr.dtype.element_ty))

L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 50 * 2**20  # an H100's on the CPU
SMEM_PER_BLOCK = torch.cuda.get_device_properties(DEVICE).shared_memory_per_block_optin if ON_GPU else 232448
CHUNK_N = 8192  # logits a step with the gradient (16 KB bf16, 32 KB fp32): 64 bytes a thread
L2_SHARE = 0.7  # of L2 for the rows in flight
MAX_PROGRAMS_PER_SM = 4  # short rows: loads overlap across rows; the backward's grid too

def _config(n_rows, n_cols, element_size, step=2, stages=None, per_sm=None, grad=True):  # (meta-parameters, grid)
    chunk = max(16, min(CHUNK_N if grad else FORWARD_CHUNK_N * element_size // 2, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4 if grad else 2, min(16, chunk * element_size // 2048)))
    if step == 1:  # a program per row, no cache hints, no pipelining
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else WARPS_PER_SM // 2 // meta["num_warps"])
    # a loop (two with the gradient) stages STAGES - 1 chunks; 1 KB for the reductions
    fit = 1 + (SMEM_PER_BLOCK - 1024) // ((1 + grad) * chunk * element_size)
    sm_stages = 1 + SMEM_PER_SM // (per_sm * chunk * element_size)  # every program's stages, on one SM
    stages = min(stages or (STAGES if grad and per_sm == 1 else 1 if grad else min(STAGES, sm_stages)), fit)
    meta |= dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages)
    return meta, min(n_rows, per_sm * NUM_SMS)

def cross_entropy_rows(x2d, target, weight, ignore_index, mean, dx=None, step=2):  # (losses, scale); gradient: dx
    (n_rows, n_cols), valid = x2d.shape, target != ignore_index
    counted = valid.sum() if weight is None else (valid * weight.float()[target.clamp(0, n_cols - 1)]).sum()
    scale = 1.0 / counted.float() if mean else torch.ones((), device=x2d.device)  # all rows ignored: inf, NaN 'mean'
    weight = torch.ones(n_cols, device=x2d.device) if weight is None else weight
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows > 0:
        meta, grid = _config(n_rows, n_cols, x2d.element_size(), step, grad=dx is not None)
        out = x2d if dx is None else dx  # (dx_ptr is not written without WRITE_GRAD)
        cross_entropy_kernel[(grid,)](x2d, target, weight, scale, losses, out, n_rows, n_cols, x2d.stride(0),
                                      out.stride(0), ignore_index, WRITE_GRAD=dx is not None, **meta)
    return losses, scale

def _need(ok, error, why):  # why: a function, called only on failure (a compiled model formats no message)
    if not ok:
        raise error(f"cross_entropy: {why()}")

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _check(logits, target, weight, ignore_index, reduction, label_smoothing):  # (n_classes, ignore_index), or why not
    _need(all(isinstance(t, torch.Tensor) for t in (logits, target)), TypeError,
          lambda: "logits and target must be torch.Tensors")
    _need(logits.dtype in SUPPORTED_DTYPES, TypeError,
          lambda: f"logits have dtype {logits.dtype}; the kernels take {SUPPORTED_DTYPES}")
    _need(logits.device.type == DEVICE.type and target.device == logits.device, ValueError,
          lambda: f"logits on {logits.device}, target on {target.device}; the kernels run on {DEVICE.type} here")
    _need(target.dtype in (torch.int64, torch.uint8), TypeError, lambda: f"target has dtype {target.dtype}; pass class "
          "indices (torch.int64 or torch.uint8): for class probabilities use torch.nn.functional.cross_entropy")
    n_classes, expected = logits.shape[logits.dim() > 1] if logits.dim() else 0, logits.shape[:1] + logits.shape[2:]
    _need(n_classes > 0, ValueError, lambda: f"logits of shape {list(logits.shape)} have no classes")
    expected = expected if logits.dim() > 1 else ()
    _need(target.shape == expected, ValueError,
          lambda: f"target has shape {list(target.shape)}, expected {list(expected)}")
    _need(weight is None or isinstance(weight, torch.Tensor) and weight.is_floating_point(), TypeError,
          lambda: f"weight must be a float tensor, got {getattr(weight, 'dtype', type(weight))}")
    _need(weight is None or (weight.shape, weight.device) == ((n_classes,), logits.device) and not weight.requires_grad,
          ValueError, lambda: f"weight must be of shape [{n_classes}] on {logits.device}, must not require a gradient")
    _need(reduction in ("none", "mean", "sum"), ValueError,
          lambda: f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    _need(isinstance(label_smoothing, (int, float)) or getattr(label_smoothing, "shape", None) == (), TypeError,
          lambda: f"label_smoothing must be a float, got {type(label_smoothing).__name__}")
    _need(0 <= label_smoothing <= 1, ValueError, lambda: f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    with contextlib.suppress(TypeError):  # an int as PyTorch takes it (numpy's, a tensor's), not a bool or a float
        if not isinstance(ignore_index, bool) and -2**63 <= operator.index(ignore_index) < 2**63:
            return n_classes, operator.index(ignore_index)
    raise TypeError(f"cross_entropy: ignore_index must be an int64, got {ignore_index!r}")

def _check_targets(target1d, n_classes, ignore_index):  # an IndexError, as torch's, where the host may look (a sync)
    if not (torch.compiler.is_compiling() or ON_GPU and torch.cuda.is_current_stream_capturing()):  # in a graph: NaN
        bad = ((target1d < 0) | (target1d >= n_classes)) & (target1d != ignore_index)
        if bad.any():
            raise IndexError(f"cross_entropy: target {target1d[bad][0].item()} is out of bounds for {n_classes} "
                             f"classes (expected 0 to {n_classes - 1}, or ignore_index={ignore_index})")

# %%
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; every provider on the same
# tensors, the loss and its gradient through ``torch.autograd.grad``, timed by :func:`triton.testing.do_bench`
# (median, L2 flushed), CUDA graphs replayed. The copy (the speed of light) is timed beside them. Liger (given a copy:
# it overwrites its input) syncs with the host: no graph. Helion, where installed, is a peer of its own kind: one
# kernel in PyTorch ops on a tile of rows that writes each row's loss and the gradient, as ours, which Helion compiles
# to Triton, its launch chosen by Helion's autotuner (per GPU and point: ``helion_tuned``); its backward hands the
# gradient over where :math:`g` is 1, which the host reads: no graph either.

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]
SWEEP_DTYPES = (torch.bfloat16, torch.float32)
CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error

def bench(fn, graph=True):  # median ms: CUDA-graph replays (GPU), or one call's wall clock (CPU)
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up before the capture
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=20, return_mode="median")

def copy_gbs(x):  # GB/s of a copy of x: the faster of two
    out = torch.empty_like(x)
    return max(2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6 for _ in range(2))

def check_row(shape, dtype):
    """Ours' and torch's relative errors against float64, the loss ('none') and its gradient for a random upstream
    one, rows ignored, class weights; without and with label smoothing (torch's own there)."""
    torch.manual_seed(shape[1])
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    target = torch.randint(0, shape[1], (shape[0],), device=DEVICE)
    target.masked_fill_(torch.rand(shape[0], device=DEVICE) < 0.1, -100)
    weight, dy, runs = torch.rand(shape[1], device=DEVICE) + 0.5, torch.randn(shape[0], device=DEVICE).to(dtype), {}
    x64 = x.detach().double().requires_grad_(True)
    for name, fn, xi in (("ours", cross_entropy, x), ("torch", F.cross_entropy, x), ("ref", F.cross_entropy, x64)):
        for smoothing in (0.0, 0.1):  # the kernel, and torch ops
            loss = fn(xi, target, weight=weight.to(xi.dtype), label_smoothing=smoothing, reduction="none")
            runs[name, smoothing] = (loss.double(), torch.autograd.grad(loss, xi, dy.to(xi.dtype))[0].double())
    return [{"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "label_smoothing": s} |
            {f"{name} {q}": ((o - r).norm() / r.norm()).item() for name in ("ours", "torch")
             for q, o, r in zip(("loss", "grad"), runs[name, s], runs["ref", s])} for s in (0.0, 0.1)]

def check_errors():
    """The errors' table; it stops the page unless each of ours is a few roundings of its dtype, or twice torch's."""
    errors = pd.DataFrame([r for d in SUPPORTED_DTYPES for s in CHECK_SHAPES for r in check_row(s, d)])
    for q in ("loss", "grad"):
        most = (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))
        assert (errors[f"ours {q}"] <= most).all(), errors
    return errors

def save_results(table):
    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's results for its landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "06_cross_entropy_backward.csv"))

def check_compiled(loss, *params):
    """loss() compiled whole (fullgraph=True: a graph break raises; no GPU: aot_eager); its gradients are eager's."""
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    torch.testing.assert_close(*[torch.autograd.grad(fn(), params) for fn in (compiled, loss)])
    return "compiled with fullgraph=True: one graph, forward and backward; its gradients are eager's"

def environment_card():
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        smi = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                                              "--format=csv,noheader"], capture_output=True, text=True)
        card = {"device": f"{WHERE}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {(smi.stdout.split() or ['?'])[0] if smi else '?'}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__, "built": BUILT,
             "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

not_measured = lambda peer, why: print(f"{peer}: not measured here ({why}).")  # a peer this run cannot time
fns, no_graph = {"torch": F.cross_entropy}, set()
major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
if ON_GPU:  # on a CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # no graph capture on the default stream
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024  # one a shape, dtype
    fns["torch.compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    with contextlib.suppress(ImportError):
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        fns["Liger"] = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0]
        no_graph = {"Liger"}
try:  # quack's CuTe-DSL kernels, from compute capability 9.0
    if major >= 9:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
except Exception as err:  # not installed, or it does not load here
    not_measured("quack", "not installed" if isinstance(err, ImportError) else " ".join(str(err).split())[:100])
for peer in [p for p in ("torch.compile", "Liger") if p not in fns] + (["quack"] if major < 9 else []):
    not_measured(peer, "no GPU" if not ON_GPU else "not installed" if peer != "quack" else
                 f"needs compute capability 9.0 or newer; this GPU has {major}.{minor}")
try:  # Helion, where installed (on a GPU)
    helion = importlib.import_module("helion") if ON_GPU and importlib.util.find_spec("helion") else not_measured(
        "Helion", "no GPU" if importlib.util.find_spec("helion") else "not installed")
except Exception as err:  # installed, yet it does not load here
    helion = not_measured("Helion", " ".join(f"{type(err).__name__}: {err}".split())[:100])
if helion:  # the loss and its gradient in one kernel, as ours: a tile of rows a program, two passes over each row
    hl = helion.language
    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_cross_entropy_grad(x: torch.Tensor, target: torch.Tensor, scale: float) -> tuple[torch.Tensor, ...]:
        (m, n), x_flat = x.size(), x.view(-1)
        dx, loss = torch.empty_like(x), torch.empty(m, dtype=torch.float32, device=x.device)
        for rows in hl.tile(m):
            x_max, total = hl.full([rows], float("-inf"), torch.float32), hl.zeros([rows], torch.float32)
            for cols in hl.tile(n):  # pass 1: the row's max and its sum of exponentials, online
                x_cols = x[rows, cols].to(torch.float32)
                new_max = torch.maximum(x_max, torch.amax(x_cols, dim=1))
                total = total * torch.exp(x_max - new_max) + torch.sum(torch.exp(x_cols - new_max[:, None]), dim=1)
                x_max = new_max
            lse = x_max + torch.log(total)
            loss[rows] = lse - hl.load(x_flat, [rows.index * n + target[rows]]).to(torch.float32)
            for cols in hl.tile(n):  # pass 2: the gradient, (softmax - onehot) * scale
                hit = (cols.index[None, :] == target[rows][:, None]).to(torch.float32)
                dx[rows, cols] = ((torch.exp(x[rows, cols].to(torch.float32) - lse[:, None]) - hit) * scale).to(x.dtype)
        return dx, loss

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
    helion_grad = helion_tuned(helion_cross_entropy_grad, "cross_entropy forward+backward",
                               [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_V])

    class HelionLoss(torch.autograd.Function):  # 'mean'; the forward writes the gradient, the backward hands it over
        @staticmethod
        def forward(ctx, x, target):
            ctx.dx, loss = helion_grad(x, target, 1.0 / x.shape[0])
            return loss.mean().to(x.dtype)
        # g: 1 in training; the host reads it (a sync, as Liger's: no graph)
        backward = staticmethod(lambda ctx, g: (ctx.dx if g.item() == 1 else ctx.dx * g, None))
    fns["Helion"], no_graph = HelionLoss.apply, no_graph | {"Helion"}
fns["ours"] = cross_entropy

def measure_providers():
    """Every provider's loss and gradient (torch.autograd.grad), bf16 and fp32, at each V of SWEEP_V, beside a copy."""
    records, missing = [], {}
    for dtype in SWEEP_DTYPES:
        for n_cols in SWEEP_V:
            x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
            target = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE)
            nbytes, reference, light = x.numel() * x.element_size(), F.cross_entropy(x.float(), target), copy_gbs(x)
            for name, fn in fns.items():
                xg = (x.clone() if name == "Liger" else x).requires_grad_(True)  # Liger writes over its input
                try:
                    torch.testing.assert_close(fn(xg, target).float(), reference, atol=1e-2, rtol=1e-2)
                    ms = bench(lambda: torch.autograd.grad(fn(xg, target), xg), graph=name not in no_graph)
                except Exception as err:  # a peer's limit: the point is missing (why: printed below)
                    if name == "ours":
                        raise
                    why, ms = " ".join(f"{type(err).__name__}: {err}".split())[:120], float("nan")
                    missing.setdefault((name, why), []).append(f"{str(dtype)[6:]} V = {n_cols}")
                records.append({"direction": "forward+backward", "dtype": str(dtype)[6:], "N": n_cols,
                                "provider": name, "GB/s": 2 * nbytes / ms * 1e-6, "light": light})
                x.requires_grad_(False)
                xg = None
            del x, target, reference
            torch.cuda.empty_cache() if ON_GPU else None
    for (name, why), points in missing.items():
        not_measured(name, f"{why}; at {', '.join(points)}")
    results = pd.DataFrame(records)
    results["% of speed of light"] = 100 * results["GB/s"] / results.light
    return results, provider_table(results)

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def provider_table(results):
    """GB/s (higher is better); ours as % of light and against the fastest peer."""
    keys = ["direction", "dtype", "N"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys).light.first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=PEERS)
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    save_results(table)
    return table

def table_style(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-")

def plot(results):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.semilogx(line.N, line["% of speed of light"], "o-" if name == "ours" else "o--", base=2, label=name)
        ax.axhline(100, color="black", label="speed of light (a copy)")
        ax.set(title=f"{direction}, {dtype}", ylabel="% of light", xlabel="vocabulary V")
        ax.legend(fontsize=7)
    fig.suptitle(f"Cross-entropy, {TOTAL[torch.bfloat16]:,} bf16 / {TOTAL[torch.float32]:,} fp32 logits, on {WHERE}")
    plt.show()

def reading(table):
    """Where ours stands, from the table; then memory: each provider's peak beyond the logits (bf16, the middle V)."""
    if not ON_GPU:
        return print(NO_GPU)
    light, peer, eager = table["ours, % of light"], table["ours / best peer"].dropna(), table["ours"] / table["torch"]
    (_, dtype, n), middle = light.idxmin(), SWEEP_V[len(SWEEP_V) // 2]
    print(f"The loss and its gradient run at {light.min():.3g}-{light.max():.3g}% of a copy, {peer.min():.2f}x to "
          f"{peer.max():.2f}x the fastest peer and {eager.min():.2f}x to {eager.max():.2f}x eager PyTorch (the bytes "
          f"model: 3x). The slowest point is {dtype} at V = {n:,}: each row is read twice, the second time from L2 at "
          "best.")
    peers = table.filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} V = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    if lost:
        print(f"A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + ".")
    x, memory = torch.randn((TOTAL[torch.bfloat16] // middle, middle), device=DEVICE, dtype=torch.bfloat16), {}
    target = torch.randint(0, middle, (x.shape[0],), device=DEVICE)
    for name, fn in fns.items():
        xg = x.clone().requires_grad_(True)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        torch.autograd.grad(fn(xg, target), xg)
        memory[name] = f"{(torch.cuda.max_memory_allocated() - before) / 2**30:.2f}"
    print(f"logits: {x.numel() * 2 / 2**30:.2f} GiB; peaks (GiB):", memory)

# %%
# Correctness
# -----------
# Errors relative to float64, beside PyTorch's: the loss (``'none'``) and its gradient for a random upstream one, rows
# ignored, class weights, without and with label smoothing (torch's own there, in fp32: PyTorch's fp16 loss overflows
# to inf). ``check_errors`` stops the page unless each of ours is a few roundings of its dtype or at most twice torch's.

errors = check_errors()
errors.style.format({c: "{:.1e}" for c in errors.columns[3:]}).hide(axis="index")

# %%
# **In a compiled model.** A layer and the drop-in, compiled whole with ``torch.compile(fullgraph=True)``, forward and
# backward; ``check_compiled`` (in the appendix) fails at a graph break and compares the gradients with eager's.

layer, h = torch.nn.Linear(64, 1000, device=DEVICE), torch.randn(32, 64, device=DEVICE)
target, class_weight = torch.arange(32, device=DEVICE) * 31, torch.rand(1000, device=DEVICE) + 0.5
target[::5] = -100  # rows ignored, and class weights: the drop-in's options compiled too
check_compiled(lambda: cross_entropy(layer(h), target, weight=class_weight), layer.weight)

# %%
# Benchmark
# ---------
# The loss and its gradient as training asks for them (``torch.autograd.grad`` of each provider's loss), in GB/s: the
# bytes a perfect kernel moves (the logits read, their gradient written) over the time, higher is better; the speed of
# light is a copy of the logits. "-": a point a peer cannot run.

results, table = measure_providers()
table_style(table) if ON_GPU else print(NO_GPU)

# %%
# As a plot, as % of light:

plot(results)

# %%
# Reading the numbers
# -------------------
# Where ours stands, then memory: each provider's peak beyond the logits (bf16, the middle :math:`V`).

reading(table)

# %%
# Going further
# -------------
# **Where this design stops.** The forward reads each row twice, the second time from L2 at best (the previous page's
# ladder). :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py` splits a row across programs, each
# slice in registers, and reads it once: the site's pick for forward+backward, with label smoothing in its kernel and
# ``inplace_backward=True`` (the gradient written over the logits: no second :math:`M \times V` tensor).
#
# **Exercise.** The backward skips rows whose :math:`g` is 1. Time ``torch.autograd.grad(loss, x)`` against
# ``torch.autograd.grad(2 * loss, x)``: how many bytes does each backward move, and what does it cost?

environment_card()
