"""
Cross-entropy over a large vocabulary
=====================================

A language model ends in logits, one score per token of the batch and word of the vocabulary: :math:`M \\times V`
with :math:`V` from 32 K to 256 K, the largest memory-bound tensor of a training step. You build a drop-in for
:func:`torch.nn.functional.cross_entropy` that computes the loss **and its gradient in one pass over the logits**, and
measure it against PyTorch, ``torch.compile``, Liger-Kernel and quack, with a copy of the logits as the speed of light.

**What you will learn** (about 15 minutes): the bytes a loss and its gradient must move; *online softmax* over a row
too long for one program's registers; writing the gradient during the forward, while the row is still in the GPU's L2
cache, so that the backward costs no further pass; launching so that the rows being read fit that cache. Prerequisites:
:ref:`sphx_glr_tutorials_01_fused_softmax.py` (online softmax).
"""

import contextlib, datetime, math, os, platform, subprocess, timeit
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
# With ``reduction='mean'`` both are divided by the number of rows not ignored (``ignore_index``); ``weight`` scales a
# row by :math:`w_t`, and ``label_smoothing`` :math:`\varepsilon` mixes in a uniform target (below). PyTorch's eager
# ``F.cross_entropy`` is ``log_softmax`` then ``nll_loss``: the forward reads the logits and writes an :math:`M \times V`
# tensor of log-probabilities; the backward writes the gradient of those, reads it and them, and writes the gradient of
# the logits. In bf16 that is **12 bytes a logit**. The least any kernel can move is **4**: read each logit once
# (2 bytes), write its gradient once (2 bytes). Predicted: about 3 times eager's speed, at the speed of a copy.
#
# One row is long: 128 K bf16 logits are 256 KB, more than a program's registers (at most 256 KB for a whole SM). So
# a program walks its row in chunks with an *online* softmax (tutorial 01): a running maximum :math:`m` and a running
# sum :math:`s` of :math:`e^{x - m}`, rescaled by :math:`e^{m - m'}` when a chunk raises the maximum to :math:`m'`.
#
# Step 0: the loss, then the gradient
# -----------------------------------
# The plain design: one program per row (``tl.program_id(0)``) computes the loss and :math:`\ell`; a second kernel,
# in the backward, reads the row again and writes the gradient. ``tl.arange(0, CHUNK)`` are a chunk's column
# offsets; ``mask`` keeps loads and stores inside the row (padding loads as :math:`-\infty`, whose exponential is 0);
# ``CHUNK`` is a ``tl.constexpr``, known when the kernel is compiled. Arithmetic is in fp32 whatever the logits' dtype.

@triton.jit
def ce_loss_kernel(x_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, x_row_stride, ignore_index, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: M * V passes 2**31
    x_row, cols = x_ptr + row * x_row_stride, tl.arange(0, CHUNK)
    m = tl.full([], -float("inf"), tl.float32)  # the row's running maximum
    s = tl.zeros([CHUNK], tl.float32)  # running sums of exp(x - m), one a lane, added up at the end
    for start in range(0, n_cols, CHUNK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)  # one exponential a logit, one a chunk
        m = m_new
    lse = m + tl.log(tl.sum(s, axis=0))
    target = tl.load(target_ptr + row)
    ignored = target == ignore_index
    x_target = tl.load(x_row + tl.where(ignored, 0, target)).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(ignored, 0.0, lse - x_target))
    tl.store(lse_ptr + row, lse)

@triton.jit
def ce_grad_kernel(x_ptr, target_ptr, lse_ptr, scale_ptr, dx_ptr, n_cols, x_row_stride, dx_row_stride, ignore_index,
                   CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, dx_row, cols = x_ptr + row * x_row_stride, dx_ptr + row * dx_row_stride, tl.arange(0, CHUNK)
    target, lse = tl.load(target_ptr + row), tl.load(lse_ptr + row)
    scale = tl.where(target == ignore_index, 0.0, tl.load(scale_ptr))  # upstream gradient / rows counted
    for start in range(0, n_cols, CHUNK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        dx = scale * (tl.exp(x - lse) - tl.where(offs == target, 1.0, 0.0))
        tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols)

def step0_loss_and_grad(x2d, target, dx):
    """Step 0 whole, for 'mean' without options: the loss kernel, then the gradient kernel (no autograd)."""
    (n_rows, n_cols), (meta, _) = x2d.shape, _config(*x2d.shape, x2d.element_size())
    loss, lse, meta = *torch.empty((2, n_rows), device=x2d.device), dict(CHUNK=meta["CHUNK"], num_warps=meta["num_warps"])
    ce_loss_kernel[(n_rows,)](x2d, target, loss, lse, n_cols, x2d.stride(0), -100, **meta)
    scale = 1.0 / (target != -100).sum(dtype=torch.float32)
    ce_grad_kernel[(n_rows,)](x2d, target, lse, scale, dx, n_cols, x2d.stride(0), dx.stride(0), -100, **meta)
    return loss.sum() * scale

# %%
# Step 0 reads the logits twice from memory: 6 bytes a logit, 2/3 of the speed of light at best.
#
# Step 1: the gradient written in the forward
# -------------------------------------------
# The gradient needs the row's final :math:`\ell`, known only at the end of the row: so the same program reads its
# row a second time, right away, and writes :math:`p - \mathrm{onehot}(t)`. That second read is of bytes read
# microseconds ago, likely still in L2 (50 MB on an H100; one row in flight per SM is 132 x 256 KB = 35 MB at 128 K
# bf16). The forward then moves the 4 bytes a logit of the model and saves the gradient; the backward of the usual
# scalar upstream gradient :math:`g` is a multiplication by :math:`g`, done **lazily**: ``scale_grad_kernel`` skips
# every row whose :math:`g` is exactly 1 (``loss.backward()``'s), moving no bytes, and scales the others (a loss
# scaled by 1/8, ``reduction='none'``) in place: right for any upstream gradient, free for the common one.
#
# The options, in the same pass. With weights :math:`w`, :math:`W = \sum_c w_c`, and smoothing :math:`\varepsilon`,
# PyTorch's loss of a row is :math:`(1 - \varepsilon) w_t (\ell - x_t) + \frac{\varepsilon}{V} (W \ell - \sum_c w_c
# x_c)`, so the gradient is :math:`a\, p_c - b_c` with :math:`a = (1-\varepsilon) w_t + \varepsilon W / V` and
# :math:`b_c = (1-\varepsilon) w_t [c = t] + \varepsilon w_c / V`; without weights, :math:`w = 1`. ``'mean'`` divides
# by :math:`\sum w_t` over the rows not ignored, computed on the GPU beforehand (``consts_ptr``): no wait for the host.
# An ignored row's loss and gradient are 0. A target out of range is caught on the host before the launch (below);
# under CUDA-graph capture, where the host cannot look, the kernel clamps it, never reads outside the row, and
# makes that row's loss and gradient NaN. The second pass walks the row backwards: its last chunks, read last, are
# the likeliest still in L2. In both passes ``tl.range(..., num_stages=STAGES)`` has Triton's pipeliner issue the
# next chunks' loads (into shared memory) before the current chunk is computed.

@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, consts_ptr, loss_ptr, dx_ptr, n_rows, n_cols, x_row_stride,
                         dx_row_stride, ignore_index, smoothing, HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr,
                         WRITE_GRAD: tl.constexpr, CHUNK: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
                         STREAM: tl.constexpr, STAGES: tl.constexpr):
    """Program p takes rows p, p + P, ...: per row, the loss (unscaled) and, if WRITE_GRAD, its scaled gradient."""
    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)
    scale, weight_sum = tl.load(consts_ptr), tl.load(consts_ptr + 1)  # 1 / sum of w_t ('mean') or 1; W
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dx_row = x_ptr + row64 * x_row_stride, dx_ptr + row64 * dx_row_stride
        target = tl.load(target_ptr + row64)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= n_cols)) & ~ignored  # flagged with NaN below
        target = tl.minimum(tl.maximum(target, 0), n_cols - 1).to(tl.int32)  # clamped: never read past the row
        # Pass 1: m, s and, for smoothing, sum of w x; Triton's pipeliner issues the next chunks' loads first.
        m = tl.full([], -float("inf"), tl.float32)
        s, wx = tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32)
        for chunk in tl.range(0, n_chunks, num_stages=STAGES):
            offs = chunk * CHUNK + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf) = NaN
            s = s * tl.exp(m - shift) + tl.exp(x - shift)
            m = m_new
            if SMOOTH:  # (the weights are small and read by every program: they stay in L2)
                w = tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                wx += tl.where(offs < n_cols, x, 0.0) * w
        lse = m + tl.log(tl.sum(s, axis=0))
        w_target = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        loss = (1.0 - smoothing) * w_target * (lse - tl.load(x_row + target).to(tl.float32))
        if SMOOTH:
            loss += smoothing / n_cols * (weight_sum * lse - tl.sum(wx, axis=0))
        tl.store(loss_ptr + row64, tl.where(ignored, 0.0, tl.where(bad, float("nan"), loss)))
        if WRITE_GRAD:  # Pass 2, backwards: dx = scale (a p - b), p = exp(x - lse)
            row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale))
            a, hit = (1.0 - smoothing) * w_target + smoothing * weight_sum / n_cols, (1.0 - smoothing) * w_target
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = (n_chunks - 1 - chunk) * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)  # last use
                b = tl.where(offs == target, hit, 0.0)
                if SMOOTH:
                    b += smoothing / n_cols * (tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
                                               if HAS_WEIGHT else 1.0)
                dx = row_scale * (a * tl.exp(x - lse) - b)
                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)

@triton.jit
def scale_grad_kernel(dx_ptr, dloss_ptr, n_rows, n_cols, dx_row_stride, dloss_stride, CHUNK: tl.constexpr):
    """dx[row] *= dloss[row] (dloss_stride 0: one scalar for all rows); a row whose dloss is exactly 1 is left alone."""
    cols = tl.arange(0, CHUNK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        g = tl.load(dloss_ptr + row * dloss_stride).to(tl.float32)
        if g != 1.0:
            dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
            for start in range(0, n_cols, CHUNK):
                dx = tl.load(dx_row + start + cols, mask=start + cols < n_cols, other=0.0)
                tl.store(dx_row + start + cols, (dx.to(tl.float32) * g).to(dx.dtype), mask=start + cols < n_cols)

# %%
# Step 2: the rows being read must fit L2
# ---------------------------------------
# Step 1 launched one program per row leaves residency to the hardware: as many programs per SM as registers allow,
# and as many rows in flight. If they outgrow L2, the second read goes to memory again. Step 2 launches a
# *persistent* grid walking rows ``p, p + P, ...``, sized so that the rows in flight (programs times a row's bytes)
# stay under ``L2_SHARE`` of the cache: one program an SM for long rows, up to four for short ones. It pipelines its
# loads (``num_stages``), and it tells the cache what comes next: the first pass loads with ``evict_last`` (read
# again), the second with ``evict_first`` (last use), and the gradient is stored with ``.cs`` (streaming: written
# once, never read here, so it should not push rows out of L2). The launch parameters sit in ``_config``:

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 50 * 2**20
CHUNK_BYTES = 16384  # of a row a step: 8 K bf16 logits; with 8 warps, 64 bytes a thread
STAGES = 3  # chunks a program has in flight: the pipeliner stages the next two in shared memory
L2_SHARE = 0.7  # the rows in flight (programs x a row's bytes) stay under this share of L2: the second read hits
MAX_PROGRAMS_PER_SM = 4  # short rows: several programs an SM, so the pipeline also runs across row boundaries
SCALE_PROGRAMS_PER_SM = 4  # the lazy backward: enough programs to stream the rows it scales
# The V this design is for: the site's landing page recommends it there. Its rows in flight fit 70% of 50 MB of L2
# at one program an SM (bf16 to 131,072, fp32 to 65,536); past that the second read partly misses.
RANGE = {(d, t): range(1, n + 1) for d in ("forward", "forward+backward") for t, n in (("bfloat16", 131072),
                                                                                    ("float32", 65536))}

def _config(n_rows, n_cols, element_size, step=2, chunk=None, stages=None, per_sm=None):
    """(meta-parameters, grid) of cross_entropy_kernel; step 1: a program per row, no cache hints, no pipelining."""
    chunk = chunk or max(16, min(CHUNK_BYTES // element_size, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4, min(16, chunk * element_size // 2048)))  # 64 bytes of a chunk a thread
    if step == 1:
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    per_sm = per_sm or max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
    return meta | dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages or STAGES), \
        min(n_rows, per_sm * NUM_SMS)

# %%
# The launcher and the drop-in function
# -------------------------------------
# ``cross_entropy`` takes what :func:`torch.nn.functional.cross_entropy` takes for class-index targets: logits of
# shape :math:`(C)`, :math:`(N, C)` or :math:`(N, C, d_1, \ldots)` (classes along dim 1, moved last by one copy),
# ``weight``, ``ignore_index``, ``reduction``, ``label_smoothing``. By default the gradient goes to a new tensor:
# the logits are left as they were. ``inplace_backward=True`` writes it over the logits (their rows must have unit
# stride, or it lands in a copy): one :math:`M \times V` tensor less, and the logits are gone after the loss.

def cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, mean, dx=None, step=2, chunk=None):
    """(per-row losses in fp32, 1 / the mean's denominator or 1); writes the gradient of the reduced loss into dx."""
    n_rows, n_cols = x2d.shape
    valid, ones = target != ignore_index, torch.ones((), device=x2d.device)
    counted = valid.sum() if weight is None else torch.where(valid, weight.float()[target.clamp(0, n_cols - 1)], 0).sum()
    scale = 1.0 / counted.float() if mean else ones  # every row ignored: inf, and a NaN 'mean' as PyTorch's
    consts = torch.stack([scale, ones * n_cols if weight is None else weight.float().sum()])
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows > 0:
        meta, grid = _config(n_rows, n_cols, x2d.element_size(), step, chunk)
        cross_entropy_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, losses,
                                      x2d if dx is None else dx, n_rows, n_cols, x2d.stride(0),
                                      x2d.stride(0) if dx is None else dx.stride(0), ignore_index, float(smoothing),
                                      HAS_WEIGHT=weight is not None, SMOOTH=smoothing > 0, WRITE_GRAD=dx is not None,
                                      **meta)
    return losses, scale

def scale_grad(dx, dloss):
    """dx *= dloss, row by row (dloss: one value, or one a row), in place; rows where dloss == 1 move nothing."""
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
        raise TypeError(f"cross_entropy: logits have dtype {logits.dtype}; these kernels take float32, float16 and "
                        "bfloat16 (use torch.nn.functional.cross_entropy for others)")
    if logits.device.type != DEVICE.type:
        raise ValueError(f"cross_entropy: logits are on {logits.device}, but the kernels run on {DEVICE.type} here "
                         f"({'a CUDA GPU' if ON_GPU else 'no CUDA GPU: Triton interprets them on the CPU'})")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise TypeError(f"cross_entropy: target has dtype {target.dtype}; pass class indices (int64): class "
                        "probabilities (a floating-point target) are for torch.nn.functional.cross_entropy")
    if logits.dim() == 0 or logits.shape[logits.dim() > 1] == 0:
        raise ValueError(f"cross_entropy: logits of shape {list(logits.shape)} have no classes")
    expected = logits.shape[:1] + logits.shape[2:] if logits.dim() > 1 else ()
    if tuple(target.shape) != tuple(expected):
        raise ValueError(f"cross_entropy: target has shape {list(target.shape)}, expected {list(expected)} for logits "
                         f"of shape {list(logits.shape)} (classes along dim {int(logits.dim() > 1)})")
    if target.device != logits.device:
        raise ValueError(f"cross_entropy: target is on {target.device} but logits are on {logits.device}")
    n_classes = logits.shape[logits.dim() > 1]
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or tuple(weight.shape) != (n_classes,) \
                or weight.device != logits.device:
            raise ValueError(f"cross_entropy: weight must be a floating-point tensor of shape [{n_classes}] on {logits.device}")
        if weight.requires_grad:
            raise ValueError("cross_entropy: the loss is not differentiable with respect to weight (as in PyTorch)")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"cross_entropy: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    if n_classes >= 2**31:
        raise ValueError(f"cross_entropy: {n_classes} classes exceed the kernels' limit of 2**31 - 1")

def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  inplace_backward=False):
    """Drop-in for ``F.cross_entropy`` with class-index targets, on float32, float16 and bfloat16, with autograd."""
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
# Against F.cross_entropy in float64, :math:`\lVert out - ref \rVert / \lVert ref \rVert` of the loss (``'none'``, every
# row) and of the gradient for a random upstream gradient, next to PyTorch's own error in the same dtype; each with
# some rows ignored, weights and label smoothing, on rows of one chunk and of several.

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
# Each error a few roundings of the dtype (the interpreter truncates to bf16: twice a GPU's error), or twice PyTorch's.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
for q in ("loss", "grad"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Benchmark
# ---------
# How this page measures: :math:`M \times V = 2^{30}` logits in bf16 and :math:`2^{29}` in fp32 on a GPU (2 GiB, far past
# L2), class-index targets, ``'mean'``; every provider on the same tensors, timed by :func:`triton.testing.do_bench`
# (median, L2 flushed) on CUDA-graph replays, the kernels' cost without Python's. The *speed of light* is a copy of the
# logits, timed without a graph. GB/s counts the bytes a perfect kernel moves: the logits read (*forward*, no gradient
# asked), and the logits read plus the gradient written (*forward+backward*, one training step's loss). Liger writes
# its gradient over its input (it gets a copy) and waits on the host (``.item()``): it cannot be captured in a graph,
# and is timed without one. quack (CuTe-DSL kernels, compute capability 9.0+) runs as ``quack.cross_entropy``.

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")

fns, no_graph = {"torch": F.cross_entropy}, set()
if ON_GPU:  # peers that cannot run here are left out: on the CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # graphs are not captured on the default stream (nor autograd's)
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    with contextlib.suppress(ImportError):  # Liger, when installed; it overwrites its input: a copy of it
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        fns["Liger"], no_graph = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0], {"Liger"}
if ON_GPU and torch.cuda.get_device_capability()[0] >= 9:  # quack (Dao-AILab's CuTe-DSL kernels), where it runs
    try:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
    except Exception as err:  # not installed, or its CUDA DSL fails to load here: no quack column
        print(f"No quack column: quack is not installed or does not load here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
else:
    print("No quack column: quack needs an NVIDIA GPU of compute capability 9.0 or newer" + ("." if ON_GPU else "; no GPU here."))
fns["ours"] = cross_entropy
records, missing, ladder = [], {}, []
for dtype in (torch.bfloat16, torch.float32):
    for n_cols in SWEEP_V:
        x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
        target = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE)
        out, nbytes = torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = F.cross_entropy(x.float(), target)
        point = lambda direction, name, ms: records.append({"direction": direction, "dtype": str(dtype)[6:],
            "N": n_cols, "provider": name, "GB/s": (gbs := (1 if direction == "forward" else 2) * nbytes / ms * 1e-6),
            "speed of light GB/s": light, "% of speed of light": 100 * gbs / light})
        for name, fn in fns.items():
            xg = x.clone() if name == "Liger" else x  # Liger writes its gradient over its input
            for direction in ("forward", "forward+backward"):
                xg.requires_grad_(direction != "forward")
                call = (lambda: fn(xg, target)) if direction == "forward" else \
                    lambda: torch.autograd.grad(fn(xg, target), xg)
                try:
                    if direction == "forward":
                        torch.testing.assert_close(fn(xg, target).float(), reference, atol=1e-2, rtol=1e-2)
                    point(direction, name, bench(call, graph=name not in no_graph))
                except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
                    if name == "ours":
                        raise
                    why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} V = {n_cols}")
                    point(direction, name, float("nan"))
            x.requires_grad_(False)
            del xg
        if dtype == torch.bfloat16 and n_cols == SWEEP_V[len(SWEEP_V) // 2]:  # the ladder, forward+backward
            dx, fused = torch.empty_like(x), lambda step: (lambda: cross_entropy_rows(x, target, None, -100, 0.0, True, dx, step))
            for step, idea, fn in ((0, "loss, then a gradient kernel: the logits read twice from memory",
                                    lambda: step0_loss_and_grad(x, target, dx)),
                                   (1, "fused: the gradient written in the forward, the row reread from L2", fused(1)),
                                   (2, "one row in flight per SM (it fits L2), cache hints", fused(2))):
                gbs = 2 * nbytes / bench(fn) * 1e-6
                ladder.append({"step": step, "idea": idea, "GB/s": gbs, "% of light": 100 * gbs / light})
            del dx
        del x, out, target, reference
        torch.cuda.empty_cache() if ON_GPU else None
for (name, why), points in missing.items():
    print(f"{name}: not measured at {', '.join(points)} ({why})")

# %%
# The ladder, at :math:`V` = the middle of the sweep, bf16, forward+backward; each step one idea, the drop-in is step 2:

ladder = pd.DataFrame(ladder)
ladder.style.format({"GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

# %%
# Every provider, GB/s (higher is better), with ours as a percentage of the copy and against the fastest peer:

results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
table = results.pivot(index=keys, columns="provider", values="GB/s").loc[["forward", "forward+backward"], list(fns)]
table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
table.style.format({c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}"},
                   na_rep="-")

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white", layout="constrained")
styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "ours": "-"}
for ax, (direction, dtype) in zip(axes.flat, [(d, t) for d in ("forward", "forward+backward") for t in ("bfloat16", "float32")]):
    part = results[(results.direction == direction) & (results.dtype == dtype)]
    for name, line in part.groupby("provider", sort=False):
        ax.semilogx(line.N, line["% of speed of light"], base=2, linestyle=styles[name], marker="o", markersize=3,
                    linewidth=2.5 if name == "ours" else 1.5, label=name)
    ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
    ax.grid(True, alpha=0.3)
    ax.set(title=f"{direction}, {dtype}", ylabel="% of the copy's GB/s" if dtype == "bfloat16" else None,
           xlabel="vocabulary V (logits a row)")
    ax.legend(loc="lower left", fontsize=7)
fig.suptitle(f"Cross-entropy, M x V = {TOTAL[torch.bfloat16]:,} (bf16), {TOTAL[torch.float32]:,} (fp32) logits, on {WHERE}")

# %%
# Memory: the peak a forward+backward allocates beyond the logits and targets, on a GPU (bf16, the ladder's V):

def peak_gib(fn, x, target):
    """GiB allocated at the peak of fn's forward+backward, beyond what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.autograd.grad(fn(x, target), x)
    return (torch.cuda.max_memory_allocated() - before) / 2**30

if ON_GPU:
    v = SWEEP_V[len(SWEEP_V) // 2]
    x = torch.randn((TOTAL[torch.bfloat16] // v, v), device=DEVICE, dtype=torch.bfloat16)
    target = torch.randint(0, v, (x.shape[0],), device=DEVICE)
    memory = {name: peak_gib(fn, x.clone().requires_grad_(True), target) for name, fn in
              (fns | {"ours, inplace_backward=True": lambda x, t: cross_entropy(x, t, inplace_backward=True)}).items()}
    print(f"logits: {x.numel() * 2 / 2**30:.2f} GiB; " + "; ".join(f"{k}: {g:.2f} GiB" for k, g in memory.items()))
    del x, target
else:
    print("No GPU here: peak memory is measured on a GPU only (torch.cuda.max_memory_allocated).")

# %%
# Reading the numbers
# -------------------
# Computed from the tables above, in this build:

for (direction, dtype), part in table.groupby(level=["direction", "dtype"], sort=False):
    part = part.droplevel(["direction", "dtype"])  # indexed by V
    light, ratio = part["ours, % of light"], part["ours / best peer"].dropna()
    inside = [v for v in part.index if v in RANGE[(direction, dtype)]]
    peers = f"from {ratio.min():.3g}x (V = {ratio.idxmin()}) to {ratio.max():.3g}x (V = {ratio.idxmax()})" if len(ratio) else "none ran"
    print(f"{direction}, {dtype}: ours runs at {light.min():.3g}-{light.max():.3g}% of the copy over V = "
          f"{part.index.min()}..{part.index.max()}, {light[inside].min() if inside else float('nan'):.3g}% at worst "
          f"inside RANGE (V <= {RANGE[(direction, dtype)].stop - 1}); against the best peer at each V, {peers}.")
eager = table.xs(("forward+backward", "bfloat16"), level=[0, 1])
print(f"Torch eager, forward+backward in bf16, ran at {(eager.torch / eager['speed of light']).mean() * 100:.3g}% of "
      f"the copy on average (the bytes model: 12 bytes a logit where 4 suffice, 33%).")
print(f"The ladder: step 0 at {ladder['% of light'][0]:.3g}% of the copy (its 6 bytes a logit: 67% at best), step 1 "
      f"at {ladder['% of light'][1]:.3g}%, step 2 at {ladder['% of light'][2]:.3g}%.")
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
        .to_csv(os.path.join(os.environ["SOL_RESULTS"], "06_cross_entropy.csv"))
if not ON_GPU:
    print("These are interpreter timings on a CPU, NOT GPU timings: they say nothing about GPU speed.")

# %%
# Going further
# -------------
# **Where this design stops.** The second read hits L2 only while the rows in flight fit it: one row an SM, so
# :math:`V` times the bytes of a logit times the SMs must stay under the cache (``RANGE``). At 256 K bf16 (512 KB a row,
# 66 MB on 132 SMs) part of the second read goes to memory. The way past it is to split a row across the SMs of a
# thread-block *cluster* and exchange the row's maximum and sum through distributed shared memory, each SM holding its
# slice on chip (quack does this); in Triton that needs Gluon. Further still: never materialize the logits, computing
# the loss chunk by chunk of the vocabulary from the last hidden state and the output weight (*fused linear
# cross-entropy*, Liger and Apple's *Cut Your Losses*, Wijmans et al. 2024).
# **Exercise**: set ``L2_SHARE = 1.5`` and rerun the ladder at 32 K and 128 K: where does the second read start to
# miss? References: Milakov and Gimelshein (2018), online softmax; Liger-Kernel; quack's cross-entropy.
#
# Where this page was made
# ------------------------

def environment_card():
    """Everything a reader needs to judge this page's numbers, shown collapsed."""
    device = f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU"
    runtime = "none: Triton's interpreter (TRITON_INTERPRET=1); the timings are NOT GPU timings"
    if ON_GPU:
        props, driver = torch.cuda.get_device_properties(DEVICE), "unknown (no nvidia-smi)"
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
        device = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        runtime = f"driver {driver}, CUDA {torch.version.cuda}"
    card = {"device": device, "driver / CUDA": runtime, "torch": torch.__version__,
            "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
            "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

environment_card()
