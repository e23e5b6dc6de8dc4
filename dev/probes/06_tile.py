"""
Cross-entropy over a large vocabulary
=====================================

A language model ends in logits, :math:`M` tokens by a vocabulary of :math:`V` = 32 K to 256 K: the largest
memory-bound tensor of training. You build a drop-in for :func:`torch.nn.functional.cross_entropy` that computes the
loss **and its gradient in one pass**, measured against PyTorch, ``torch.compile``, Liger-Kernel and quack, with a
copy of the logits (forward: a read pass) as the speed of light. **What you will learn**: the bytes a loss and its
gradient must move; what to do when a row outgrows one program's registers; reductions that stay inside a warp.
Its Triton is introduced on :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import contextlib, datetime, os, platform, shutil, subprocess, timeit
import torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The loss, its gradient and their bytes
# --------------------------------------
# For a row :math:`x` of :math:`V` logits and its target class :math:`t`, with :math:`\ell = \log \sum_j e^{x_j}`
# (the log-sum-exp) and :math:`p = \mathrm{softmax}(x) = e^{x - \ell}`,
#
# .. math::
#
#    \mathrm{loss} = \ell - x_t, \qquad \frac{\partial\, \mathrm{loss}}{\partial x} = p - \mathrm{onehot}(t) .
#
# ``reduction='mean'`` divides both by the rows not ignored (``ignore_index``). PyTorch's eager loss
# writes and rereads two more tensors: **12 bytes a logit** in bf16. The least is **4**: read each logit once,
# write its gradient once. Predicted: about 3 times eager's speed, a copy's.
#
# Step 0: the whole row in registers
# ----------------------------------
# One program per row loads it whole (padding as :math:`-\infty`, whose exponential is 0); the maximum, the sum,
# :math:`\ell`, the target's logit, the loss and the gradient all follow from registers: the model's 4 bytes a logit.

@triton.jit
def ce_row_kernel(x_ptr, target_ptr, scale_ptr, loss_ptr, dx_ptr, n_cols, x_row_stride, dx_row_stride, ignore_index,
                  BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: M * V passes 2**31
    cols = tl.arange(0, BLOCK_V)
    target = tl.load(target_ptr + row)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    total = tl.sum(e, axis=0)
    lse = m + tl.log(total)
    ignored = target == ignore_index
    x_target = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    tl.store(loss_ptr + row, tl.where(ignored, 0.0, lse - x_target))
    scale = tl.where(ignored, 0.0, tl.load(scale_ptr))  # 1 / rows counted ('mean')
    dx = scale * (e / total - tl.where(cols == target, 1.0, 0.0))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols)

def step0_loss_and_grad(x2d, target, dx):
    """Step 0 ('mean', no options): the loss; the gradient into dx."""
    (n_rows, n_cols), block = x2d.shape, triton.next_power_of_2(x2d.shape[1])
    loss, scale = torch.empty(n_rows, device=x2d.device), 1.0 / (target != -100).sum(dtype=torch.float32)
    ce_row_kernel[(n_rows,)](x2d, target, scale, loss, dx, n_cols, x2d.stride(0), dx.stride(0), -100, BLOCK_V=block,
                             num_warps=min(32, max(4, block // 512)))  # 16 logits a thread
    return loss.sum() * scale

# %%
# At most 1,024 threads a program: 32 K logits take 32 fp32 registers a thread, twice (:math:`x` and its
# exponentials); 128 K spill. Step 0 runs at 32 K only.
#
# Step 1: the row in chunks, read twice, the second time from L2
# --------------------------------------------------------------
# A long row is walked in chunks with an *online* softmax (tutorial 01): a running maximum :math:`m` and sum :math:`s`
# of :math:`e^{x - m}`, rescaled by :math:`e^{m - m'}` when a chunk raises the maximum. The gradient needs the final
# :math:`\ell`, so the program rereads its row at once, from L2 (50 MB on an H100; a 256 KB row per SM is 35 MB):
# memory still sees 4 bytes a logit. A *persistent* grid (rows ``p, p + P, ...``) keeps the rows in flight under
# ``L2_SHARE``, with hints: ``evict_last`` on the first read, ``evict_first`` on the second (backwards: the last
# chunks are likeliest still there). The target's own gradient is written last, after a barrier: no compare a logit.
# The backward scales it by the upstream :math:`g` **lazily**, skipping each row whose :math:`g` is exactly 1.
#
# The options, in the same pass: with weights :math:`w`, :math:`W = \sum_c w_c` and smoothing :math:`\varepsilon`,
# the loss of a row is :math:`(1 - \varepsilon) w_t (\ell - x_t) + \frac{\varepsilon}{V} (W \ell - \sum_c w_c
# x_c)`, so the gradient is :math:`a\, p_c - b_c` with :math:`a = (1-\varepsilon) w_t + \varepsilon W / V` and
# :math:`b_c = (1-\varepsilon) w_t [c = t] + \varepsilon w_c / V`. ``'mean'`` divides by :math:`\sum w_t` over the
# rows not ignored (``consts_ptr``). A target out of range: an error on the host; in a CUDA graph, clamped, loss NaN.
# ``num_stages=STAGES``: the next chunks' loads, and the next row's target, are issued early.

@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, consts_ptr, loss_ptr, dx_ptr, n_rows, n_cols, x_row_stride,
                         dx_row_stride, ignore_index, smoothing, HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr,
                         WRITE_GRAD: tl.constexpr, CHUNK: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
                         STREAM: tl.constexpr, STAGES: tl.constexpr, LINES: tl.constexpr):
    """Program p takes rows p, p + P, ...: each row's loss and, if WRITE_GRAD, its scaled gradient."""
    cols = tl.arange(0, LINES)[:, None] * (CHUNK // LINES) + tl.arange(0, CHUNK // LINES)[None, :]  # a chunk's lines
    n_chunks = tl.cdiv(n_cols, CHUNK)
    scale, weight_sum = tl.load(consts_ptr), tl.load(consts_ptr + 1)  # 1 / sum of w_t ('mean') or 1; W
    t_next = tl.load(target_ptr + tl.program_id(0), mask=tl.program_id(0) < n_rows, other=ignore_index)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dx_row = x_ptr + row64 * x_row_stride, dx_ptr + row64 * dx_row_stride
        target = t_next
        next_row = row + tl.num_programs(0)
        t_next = tl.load(target_ptr + next_row, mask=next_row < n_rows, other=ignore_index)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= n_cols)) & ~ignored
        target = tl.minimum(tl.maximum(target, 0), n_cols - 1).to(tl.int32)  # never read past the row
        w_target = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        x_target = tl.load(x_row + target).to(tl.float32)
        # Pass 1: m and s of each line; for smoothing, the sum of w x
        m = tl.full([LINES], -float("inf"), tl.float32)
        s, wx = tl.zeros([LINES, CHUNK // LINES], tl.float32), tl.zeros([LINES, CHUNK // LINES], tl.float32)
        for chunk in tl.range(0, n_chunks, num_stages=STAGES):
            offs = chunk * CHUNK + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))  # a line is one warp's: no barrier
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf) = NaN
            s = s * tl.exp(m - shift)[:, None] + tl.exp(x - shift[:, None])
            m = m_new
            if SMOOTH:
                w = tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                wx += tl.where(offs < n_cols, x, 0.0) * w
        m_row = tl.max(m, axis=0)
        lse = m_row + tl.log(tl.sum(tl.sum(s, axis=1) * tl.exp(m - tl.where(m_row == -float("inf"), 0.0, m_row)), axis=0))
        loss = (1.0 - smoothing) * w_target * (lse - x_target)
        if SMOOTH:
            loss += smoothing / n_cols * (weight_sum * lse - tl.sum(tl.sum(wx, axis=1), axis=0))
        tl.store(loss_ptr + row64, tl.where(ignored, 0.0, tl.where(bad, float("nan"), loss)))
        if WRITE_GRAD:  # Pass 2, backwards: dx = scale (a p - b), p = exp(x - lse); b's one-hot part last
            row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale))
            a, hit = (1.0 - smoothing) * w_target + smoothing * weight_sum / n_cols, (1.0 - smoothing) * w_target
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = (n_chunks - 1 - chunk) * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)
                dx = (row_scale * a) * tl.exp(x - lse)
                if SMOOTH:
                    dx -= row_scale * smoothing / n_cols * (tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0)
                                                            .to(tl.float32) if HAS_WEIGHT else 1.0)
                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)
            tl.debug_barrier()  # then the target's element: another thread may have written it
            if SMOOTH:
                hit += smoothing / n_cols * (tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0)
            tl.store(dx_row + target, (row_scale * (a * tl.exp(x_target - lse) - hit)).to(dx_ptr.dtype.element_ty))

@triton.jit
def scale_grad_kernel(dx_ptr, dloss_ptr, n_rows, n_cols, dx_row_stride, dloss_stride, CHUNK: tl.constexpr):
    """dx[row] *= dloss[row] (dloss_stride 0: one scalar), skipping rows whose dloss is 1."""
    cols = tl.arange(0, CHUNK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        g = tl.load(dloss_ptr + row * dloss_stride).to(tl.float32)
        if g != 1.0:
            dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
            for start in range(0, n_cols, CHUNK):
                dx = tl.load(dx_row + start + cols, mask=start + cols < n_cols, other=0.0)
                tl.store(dx_row + start + cols, (dx.to(tl.float32) * g).to(dx.dtype), mask=start + cols < n_cols)

# %%
# Step 2: each warp its own lines
# -------------------------------
# Step 1 takes each chunk's maximum over the program (``LINES = 1``): a barrier a chunk, every warp waiting for the
# slowest. Step 2 cuts a chunk into ``LINES`` lines of 512 bytes, one warp's each, with its own :math:`m` and
# :math:`s` (the warp's shuffles, no barrier), combined once a row. The launch parameters:

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 50 * 2**20
CHUNK_N = 8192  # logits a step (16 KB bf16, 32 KB fp32): 64 bytes a thread
FORWARD_CHUNK_N = 4096  # bf16, no gradient: 4 warps
STAGES = 3  # chunks in flight (two staged in SMEM); with the gradient 1 where several programs an SM run
L2_SHARE = 0.7  # of L2 for the rows in flight, leaving room for other traffic
MAX_PROGRAMS_PER_SM = 4  # short rows: loads overlap across row boundaries
SCALE_PROGRAMS_PER_SM = 4  # the lazy backward's
RANGE = {("forward", t): range(1, 2**31) for t in ("bfloat16", "float32")}  # the front page's; forward+backward: 61

def _config(n_rows, n_cols, element_size, step=2, chunk=None, stages=None, per_sm=None, grad=True):
    """(meta-parameters, grid); step 1: a chunk is one line."""
    chunk = chunk or max(16, min(CHUNK_N if grad or element_size > 2 else FORWARD_CHUNK_N, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4, min(16, chunk * element_size // 2048)),  # 64 bytes of a chunk a thread
                LINES=1 if step == 1 else max(1, chunk * element_size // 512))  # 16 bytes a lane
    # rows in flight under L2_SHARE of L2; no gradient: one pass, nothing to keep in L2
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else MAX_PROGRAMS_PER_SM)
    return meta | dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages or (1 if grad and per_sm > 1 else STAGES)), \
        min(n_rows, per_sm * NUM_SMS)

# %%
# The launcher and the drop-in function
# -------------------------------------
# ``cross_entropy`` takes what :func:`torch.nn.functional.cross_entropy` takes for class-index targets. The gradient
# goes to a new tensor; ``inplace_backward=True`` writes it over the logits instead: one :math:`M \times V` tensor
# less, and the logits are gone after the loss.

def cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, mean, dx=None, step=2, chunk=None):
    """(per-row losses in fp32, 1 / the mean's denominator or 1); the reduced loss's gradient into dx."""
    n_rows, n_cols = x2d.shape
    valid, ones = target != ignore_index, torch.ones((), device=x2d.device)
    counted = valid.sum() if weight is None else torch.where(valid, weight.float()[target.clamp(0, n_cols - 1)], 0).sum()
    scale = 1.0 / counted.float() if mean else ones  # every row ignored: a NaN 'mean', as PyTorch's
    consts = torch.stack([scale, ones * n_cols if weight is None else weight.float().sum()])
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows > 0:
        meta, grid = _config(n_rows, n_cols, x2d.element_size(), step, chunk, grad=dx is not None)
        cross_entropy_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, losses,
                                      x2d if dx is None else dx, n_rows, n_cols, x2d.stride(0),
                                      x2d.stride(0) if dx is None else dx.stride(0), ignore_index, float(smoothing),
                                      HAS_WEIGHT=weight is not None, SMOOTH=smoothing > 0, WRITE_GRAD=dx is not None,
                                      **meta)
    return losses, scale

def scale_grad(dx, dloss):
    (n_rows, n_cols), g = dx.shape, dloss.reshape(-1)
    if n_rows > 0:
        meta, _ = _config(n_rows, n_cols, dx.element_size())
        scale_grad_kernel[(min(n_rows, SCALE_PROGRAMS_PER_SM * NUM_SMS),)](
            dx, g, n_rows, n_cols, dx.stride(0), g.stride(0) if g.numel() > 1 else 0, CHUNK=meta["CHUNK"],
            num_warps=meta["num_warps"])

class CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, target, weight, ignore_index, reduction, smoothing, inplace):
        ctx.dx = (x2d if inplace else torch.empty_like(x2d)) if ctx.needs_input_grad[0] else None
        losses, scale = cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, reduction == "mean", ctx.dx)
        if reduction == "none":
            return losses.to(x2d.dtype)
        return (losses.sum() * scale if reduction == "mean" else losses.sum()).to(x2d.dtype)

    @staticmethod
    def backward(ctx, dloss):
        if ctx.dx is None:
            raise RuntimeError("cross_entropy: this loss's backward already ran, and handed its gradient over; "
                               "compute the loss again instead of retaining its graph (retain_graph=True)")
        dx, ctx.dx = ctx.dx, None
        scale_grad(dx, dloss)
        return dx, None, None, None, None, None, None

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def _check(logits, target, weight, reduction, label_smoothing):
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("cross_entropy: logits and target must be torch.Tensors")
    if logits.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"cross_entropy: logits have dtype {logits.dtype}; the kernels take {SUPPORTED_DTYPES}")
    if logits.device.type != DEVICE.type or target.device != logits.device:
        raise ValueError(f"cross_entropy: logits are on {logits.device}, target is on {target.device}; the kernels run "
                         f"on {DEVICE.type} here ({'a CUDA GPU' if ON_GPU else 'no CUDA GPU: the CPU interprets them'})")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise TypeError(f"cross_entropy: target has dtype {target.dtype}; pass class indices: for class "
                        "probabilities use torch.nn.functional.cross_entropy")
    if logits.dim() == 0 or logits.shape[logits.dim() > 1] == 0:
        raise ValueError(f"cross_entropy: logits of shape {list(logits.shape)} have no classes")
    n_classes, expected = logits.shape[logits.dim() > 1], logits.shape[:1] + logits.shape[2:] if logits.dim() > 1 else ()
    if tuple(target.shape) != tuple(expected):
        raise ValueError(f"cross_entropy: target has shape {list(target.shape)}, expected {list(expected)}")
    if weight is not None and not (isinstance(weight, torch.Tensor) and weight.is_floating_point()
                                   and weight.shape == (n_classes,) and weight.device == logits.device):
        raise ValueError(f"cross_entropy: weight must be a float tensor of shape [{n_classes}] on {logits.device}")
    if weight is not None and weight.requires_grad:
        raise ValueError("cross_entropy: the loss is not differentiable with respect to weight")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"cross_entropy: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing <= 1:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")

def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  inplace_backward=False):
    _check(logits, target, weight, reduction, label_smoothing)
    n_classes = logits.shape[logits.dim() > 1]
    x2d = logits.reshape(1, -1) if logits.dim() == 1 else logits.movedim(1, -1).reshape(-1, n_classes)
    x2d = x2d if x2d.stride(-1) == 1 or n_classes == 1 else x2d.contiguous()
    target1d = target.reshape(-1)
    if not (ON_GPU and torch.cuda.is_current_stream_capturing()):  # a look on the host (a sync); in a graph: NaN
        bad = ((target1d < 0) | (target1d >= n_classes)) & (target1d != ignore_index)
        if bad.any():
            raise IndexError(f"cross_entropy: target {target1d[bad][0].item()} is out of bounds for {n_classes} "
                             f"classes (expected 0 to {n_classes - 1}, or ignore_index={ignore_index})")
    loss = CrossEntropyFunction.apply(x2d, target1d, weight, int(ignore_index), reduction, float(label_smoothing),
                                      bool(inplace_backward))
    return loss.view(target.shape) if reduction == "none" else loss

# %%
# Correctness
# -----------
# Relative errors against float64 of the loss (``'none'``) and its gradient (a random upstream gradient), beside
# PyTorch's; rows ignored, weights, label smoothing.

CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    target = torch.randint(0, shape[1], (shape[0],), device=DEVICE).masked_fill_(torch.rand(shape[0], device=DEVICE) < 0.1, -100)
    weight, dy = torch.rand(shape[1], device=DEVICE) + 0.5, torch.randn(shape[0], device=DEVICE).to(dtype)
    options = dict(weight=weight, label_smoothing=0.1, reduction="none")
    loss64 = F.cross_entropy(x64 := x.detach().double().requires_grad_(True), target, **options | dict(weight=weight.double()))
    refs = (loss64.detach(), torch.autograd.grad(loss64, x64, dy.double())[0])
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    for name, fn, w in (("ours", cross_entropy, weight), ("torch", F.cross_entropy, weight.to(dtype))):
        out = (loss := fn(x, target, **options | dict(weight=w)), torch.autograd.grad(loss, x, dy)[0])
        row |= {f"{name} {q}": ((o.double() - r).norm() / r.norm()).item() for q, o, r in zip(("loss", "grad"), out, refs)}
    return row

errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
# A few roundings (the interpreter truncates to bf16), or twice PyTorch's error.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
for q in ("loss", "grad"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# How this page measures
# ----------------------
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; every provider on the same
# tensors, timed by :func:`triton.testing.do_bench` (median, L2 flushed) on CUDA-graph replays. GB/s counts the bytes a
# perfect kernel moves: the logits read (*forward*), plus the gradient written (*forward+backward*). The *speed of
# light*, timed beside them: a copy of the logits, and for the forward a pass that only reads them (tutorial 03's).
# Liger overwrites its input (it gets a copy) and syncs with the host: no graph. quack needs compute capability 9.0+.

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, one call's wall clock."""
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up before the capture
    torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")

@triton.jit
def read_kernel(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.xor_sum(tl.load(words_ptr + offs, mask=offs < n_words, other=0), axis=0))

def light_gbs(x, read_only=False):
    """GB/s of a copy of x or, read_only (GPU), of a read pass (its 32-bit words xor-ed): the faster of two."""
    if read_only and ON_GPU:
        words = x.view(-1).view(torch.int32)  # 32 KB a program: tutorial 03's fastest here
        out = torch.empty(triton.cdiv(words.numel(), 8192), device=DEVICE, dtype=torch.int32)
        run = lambda: read_kernel[(out.numel(),)](words, out, words.numel(), BLOCK=8192, num_warps=16)
        return max(x.numel() * x.element_size() / bench(run) * 1e-6 for _ in range(2))
    out = torch.empty_like(x)
    return max(2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6 for _ in range(2))

def save_results(table):
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "06_cross_entropy.csv"))

def environment_card():
    card = {"device": f"CPU only ({platform.machine()}), no CUDA GPU", "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True).stdout.split("\n")[0] if shutil.which(smi[0]) else "?"
        card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__,
             "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

fns, no_graph = {"torch": F.cross_entropy}, set()
if ON_GPU:  # on a CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # no graph capture on the default stream
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    with contextlib.suppress(ImportError):  # Liger
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        fns["Liger"], no_graph = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0], {"Liger"}
if ON_GPU and torch.cuda.get_device_capability()[0] >= 9:  # quack (CuTe-DSL kernels)
    try:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
    except Exception as err:  # not installed, or not loading
        print(f"No quack column: {type(err).__name__}: {' '.join(str(err).split())[:100]}")
else:
    print("No quack column: quack needs compute capability 9.0+.")
fns["ours"] = cross_entropy

# %%
# The ladder
# ----------
# bf16, forward+backward, at the shortest and middle :math:`V`; step 0 where its row fits registers:

short, long = LADDER_V = [SWEEP_V[0], SWEEP_V[len(SWEEP_V) // 2]]
STEPS = {0: "the whole row in registers", 1: "chunks, the row reread from L2", 2: "a warp's own lines: no barrier a chunk"}
ladder = []
for n_cols in LADDER_V:
    x = torch.randn((TOTAL[torch.bfloat16] // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
    target, dx, light = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE), torch.empty_like(x), light_gbs(x)
    for step in [0, 1, 2] if n_cols == short else [1, 2]:
        fn = lambda: step0_loss_and_grad(x, target, dx) if step == 0 else \
            cross_entropy_rows(x, target, None, -100, 0.0, True, dx, step=step)
        gbs = 2 * x.numel() * x.element_size() / bench(fn) * 1e-6
        ladder.append({"step": step, "idea": STEPS[step], "N": n_cols, "GB/s": gbs, "% of light": 100 * gbs / light})
    x = target = dx = None
ladder = pd.DataFrame(ladder).sort_values(["step", "N"], kind="stable")
speed = ladder.set_index(["step", "N"])["GB/s"]
print(f"At V = {short}, step 1 runs at {speed[1, short] / speed[0, short]:.2f}x step 0 and step 2 at "
      f"{speed[2, short] / speed[0, short]:.2f}x; at V = {long}, step 2 runs at {speed[2, long] / speed[1, long]:.2f}x step 1.")
ladder.style.format({"N": "{:,}", "GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

# %%
# Every provider
# --------------
# Each dtype and :math:`V`: the speeds of light, then every provider.

records, missing = [], {}
for dtype in (torch.bfloat16, torch.float32):
    for n_cols in SWEEP_V:
        x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
        target = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE)
        nbytes, reference = x.numel() * x.element_size(), F.cross_entropy(x.float(), target)
        light = {"forward": light_gbs(x, read_only=True), "forward+backward": light_gbs(x)}
        for name, fn in fns.items():
            xg = x.clone() if name == "Liger" else x  # Liger writes over its input
            for direction in ("forward", "forward+backward"):
                xg.requires_grad_(direction != "forward")
                call = (lambda: fn(xg, target)) if direction == "forward" else \
                    lambda: torch.autograd.grad(fn(xg, target), xg)
                try:
                    if direction == "forward":
                        torch.testing.assert_close(fn(xg, target).float(), reference, atol=1e-2, rtol=1e-2)
                    ms = bench(call, graph=name not in no_graph)
                except Exception as err:  # a peer's limit: the point is missing (why: printed below)
                    if name == "ours":
                        raise
                    why, ms = " ".join(f"{type(err).__name__}: {err}".split())[:120], float("nan")
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} V = {n_cols}")
                records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                                "GB/s": (1 if direction == "forward" else 2) * nbytes / ms * 1e-6, "light": light[direction]})
            x.requires_grad_(False)
            xg = None
        del x, target, reference
        torch.cuda.empty_cache() if ON_GPU else None
for (name, why), points in missing.items():
    print(f"{name}: not measured at {', '.join(points)} ({why})")

# %%
# GB/s (higher is better); ours as % of light and against the fastest peer:

results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of speed of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s").loc[["forward", "forward+backward"], list(fns)]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
save_results(table)
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"},
                   na_rep="-")

# %%
# As a plot, as % of light:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
    part.pivot(index="N", columns="provider", values="% of speed of light")[list(fns)].plot(
        ax=ax, logx=True, style=["--o"] * (len(fns) - 1) + ["-o"], markersize=3, grid=True, title=f"{direction}, {dtype}",
        xlabel="vocabulary V (logits a row)", ylabel="% of light").axhline(100, color="black", linewidth=1)
fig.suptitle(f"Cross-entropy, {TOTAL[torch.bfloat16]:,} bf16 / {TOTAL[torch.float32]:,} fp32 logits, on {WHERE}")

# %%
# Memory: a forward+backward's peak beyond the logits (bf16, the longer ladder V):

def peak_gib(fn, x, target):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.autograd.grad(fn(x, target), x)
    return (torch.cuda.max_memory_allocated() - before) / 2**30

if ON_GPU:
    x = torch.randn((TOTAL[torch.bfloat16] // long, long), device=DEVICE, dtype=torch.bfloat16)
    target = torch.randint(0, long, (x.shape[0],), device=DEVICE)
    memory = {name: peak_gib(fn, x.clone().requires_grad_(True), target) for name, fn in
              (fns | {"ours, inplace_backward=True": lambda x, t: cross_entropy(x, t, inplace_backward=True)}).items()}
    print(f"logits: {x.numel() * 2 / 2**30:.2f} GiB; " + "; ".join(f"{k}: {g:.2f}" for k, g in memory.items()))
    del x, target
else:
    print("No GPU here: peak memory is measured on a GPU only.")

# %%
# Reading the numbers
# -------------------
both = table.xs(("forward+backward", "bfloat16"), level=[0, 1])
light, peer = both["ours, % of light"], both["ours / best peer"].dropna()
print(f"Forward+backward in bf16, ours runs at {light.min():.3g}-{light.max():.3g}% of a copy (worst at V = "
      f"{light.idxmin():,}), " + (f"{peer.min():.2f}x to {peer.max():.2f}x the fastest peer." if len(peer) else "no peer ran."))
alone = table.xs("forward", level=0)["ours, % of light"]
print(f"The forward alone reads each logit once: {alone['bfloat16'].min():.3g}-{alone['bfloat16'].max():.3g}% of a read pass in bf16, "
      f"{alone['float32'].min():.3g}-{alone['float32'].max():.3g}% in fp32 (twice the logits a byte in bf16).")
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Where this design stops.** Reading each row twice costs, even from L2 (the table). The way past: programs that
# split a row, each slice in registers, and exchange their maxima and sums (as vocabulary-parallel training does).
# :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py` does it, around this page's drop-in: the front
# page recommends it for forward+backward. Further: never materialize the logits (*fused linear cross-entropy*: Liger;
# Wijmans et al. 2024, *Cut Your Losses*).
# References: Milakov and Gimelshein (2018), online softmax; Liger-Kernel; quack.

environment_card()
