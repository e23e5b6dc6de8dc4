"""
Cross-entropy over a large vocabulary
=====================================

A language model ends in logits, :math:`M` tokens by a vocabulary of :math:`V` = 32 K to 256 K: the largest
memory-bound tensor of training. You build a drop-in for :func:`torch.nn.functional.cross_entropy` that computes the
loss **and its gradient in one pass**, against PyTorch, ``torch.compile``, Liger-Kernel and quack. **What you will learn**: the bytes a loss and its
gradient must move; what to do when a row outgrows one program's registers; keeping the rows being read in L2. Its
Triton is introduced on :ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import contextlib, datetime, operator, os, shutil, subprocess, timeit, typing, torch, torch.nn.functional as F
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
# One program per row loads it whole (padding: :math:`-\infty`); all else follows from registers: 4 bytes a logit.

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
    ignored = target == ignore_index
    x_target = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    tl.store(loss_ptr + row, tl.where(ignored, 0.0, m - x_target + tl.log(total)))  # not (m + log(total)) - x_t
    scale = tl.where(ignored, 0.0, tl.load(scale_ptr))  # 1 / rows counted ('mean')
    dx = scale * (e / total - tl.where(cols == target, 1.0, 0.0))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols)

def step0_loss_and_grad(x2d, target, dx):  # step 0 for 'mean' without options: the loss; the gradient into dx
    (n_rows, n_cols), block = x2d.shape, triton.next_power_of_2(x2d.shape[1])
    loss, scale = torch.empty(n_rows, device=x2d.device), 1.0 / (target != -100).sum(dtype=torch.float32)
    ce_row_kernel[(n_rows,)](x2d, target, scale, loss, dx, n_cols, x2d.stride(0), dx.stride(0), -100, BLOCK_V=block,
                             num_warps=min(32, max(4, block // 512)))  # 16 logits a thread
    return loss.sum() * scale

# %%
# At 32 K logits, step 0 takes 32 fp32 registers a thread twice over (:math:`x` and its exponentials); 128 K spill.
#
# Step 1: the row in chunks, read twice, the second time from L2
# --------------------------------------------------------------
# A long row is walked in chunks with an *online* softmax (tutorial 01): a running maximum :math:`m` and sum :math:`s`
# of :math:`e^{x - m}`, rescaled by :math:`e^{m - m'}` when a chunk raises the maximum. The gradient needs the final
# :math:`\ell`, so the program rereads its row at once, from L2 (50 MB on an H100; a 256 KB row per SM is 35 MB):
# memory still sees 4 bytes a logit. The gradient is written in the forward; the backward scales it by the upstream
# gradient :math:`g` **lazily**, skipping each row whose :math:`g` is 1 (``loss.backward()``'s).
#
# The options, in the same pass: with weights :math:`w`, :math:`W = \sum_c w_c` and smoothing :math:`\varepsilon`,
# the loss of a row is :math:`(1 - \varepsilon) w_t (\ell - x_t) + \frac{\varepsilon}{V} (W \ell - \sum_c w_c
# x_c)`, so the gradient is :math:`a\, p_c - b_c` with :math:`a = (1-\varepsilon) w_t + \varepsilon W / V` and
# :math:`b_c = (1-\varepsilon) w_t [c = t] + \varepsilon w_c / V`. ``'mean'`` divides by :math:`\sum w_t` over the
# rows not ignored. A target out of range: an error on the host; in a CUDA graph or a compiled model, a NaN loss.
# ``num_stages=STAGES`` has Triton load the next chunks early. bf16 counts instructions: ``exp2``, and the target's
# :math:`b_t` written after the loop, not compared at every logit. Each exponent subtracts :math:`m` first
# (:math:`x \log_2 e` overflows past 2.4e38); :math:`\ell` stays two terms, :math:`m` and :math:`\log s` (one float
# would round :math:`\log s` away at :math:`m = 10^{20}`); smoothing sums :math:`\frac{\varepsilon}{V} w_c (m - x_c)
# \ge 0`, moved with each new :math:`m` as :math:`s` is, not large :math:`w_c x_c` that cancel.

@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, consts_ptr, loss_ptr, dx_ptr, ticket_ptr, n_rows, n_cols,
                         x_row_stride, dx_row_stride, ignore_index, smoothing, HAS_WEIGHT: tl.constexpr,
                         SMOOTH: tl.constexpr, WRITE_GRAD: tl.constexpr, CHUNK: tl.constexpr, KEEP: tl.constexpr,
                         DROP: tl.constexpr, STREAM: tl.constexpr, STAGES: tl.constexpr, REDUCE: tl.constexpr = ""):
    """Program p takes rows p, p + P, ...: each row's loss and, if WRITE_GRAD, its scaled gradient; REDUCE ('sum',
    'mean'): the loss into dx_ptr."""
    LOG2E: tl.constexpr = 1.4426950408889634
    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)
    scale = tl.load(consts_ptr) if WRITE_GRAD else 1.0  # 1 / sum of w_t ('mean') or 1
    weight_sum = tl.load(consts_ptr + 1) if HAS_WEIGHT else n_cols * 1.0  # W
    loss_sum, weight_count = tl.zeros([], tl.float32), tl.zeros([], tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dx_row = x_ptr + row64 * x_row_stride, dx_ptr + row64 * dx_row_stride
        target = tl.load(target_ptr + row)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= n_cols)) & ~ignored
        target = tl.minimum(tl.maximum(target, 0), n_cols - 1).to(tl.int32)  # never read past the row
        w_target = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        x_target = tl.load(x_row + target).to(tl.float32)
        m, shift = tl.full([], -float("inf"), tl.float32), tl.zeros([], tl.float32)
        s, wx, w_seen = tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32)
        for chunk in tl.range(0, n_chunks, num_stages=STAGES):  # Pass 1: m, s and, for smoothing, wx
            offs = chunk * CHUNK + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            old, shift = shift, tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf)
            s = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E)  # x * LOG2E overflows at 2.4e38
            if SMOOTH:  # wx: eps / V times w (m - x), terms >= 0 (not large w x that cancel), moved as m rises
                w = tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                w = tl.where(offs < n_cols, w * (smoothing / n_cols), 0.0)
                wx, w_seen = wx + w_seen * (shift - old) + tl.where(offs < n_cols, w * (shift - x), 0.0), w_seen + w
            m = m_new
        log_s = tl.log(tl.sum(s, axis=0))  # lse = m + log_s, kept apart: at m = 1e20 the sum rounds log_s away
        loss = (1.0 - smoothing) * w_target * (m - x_target + log_s)
        if SMOOTH:
            loss += smoothing / n_cols * weight_sum * log_s + tl.sum(wx, axis=0)
        loss = tl.where(ignored, 0.0, tl.where(bad, float("nan"), loss))
        loss_sum, weight_count = loss_sum + loss, weight_count + tl.where(ignored, 0.0, w_target)
        if REDUCE == "":
            tl.store(loss_ptr + row64, loss)
        if WRITE_GRAD:  # Pass 2, backwards: dx = scale (a p - b), p = exp(x - m - log_s)
            row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale))
            a, hit = (1.0 - smoothing) * w_target + smoothing * weight_sum / n_cols, (1.0 - smoothing) * w_target
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = (n_chunks - 1 - chunk) * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)
                dx = (row_scale * a) * tl.exp2((x - m) * LOG2E - log_s * LOG2E)
                if SMOOTH:
                    w = tl.load(weight_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                    dx -= row_scale * smoothing / n_cols * w
                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)
            tl.debug_barrier()  # then the target's b, over another thread's store
            b = hit + (smoothing / n_cols * w_target if SMOOTH else 0.0)
            tl.store(dx_row + target, (row_scale * (a * tl.exp(x_target - m - log_s) - b)).to(dx_ptr.dtype.element_ty))
    if REDUCE != "":  # each program's sums; the last to take a ticket adds them all up, in order
        P = tl.num_programs(0)
        tl.store(loss_ptr + tl.program_id(0), loss_sum)
        tl.store(loss_ptr + P + tl.program_id(0), weight_count)
        tl.debug_barrier()
        if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == P - 1:
            p = tl.arange(0, 2048)  # the launcher's most programs
            loss = tl.sum(tl.load(loss_ptr + p, mask=p < P, other=0.0, volatile=True), axis=0)
            if REDUCE == "mean":
                loss /= tl.sum(tl.load(loss_ptr + P + p, mask=p < P, other=0.0, volatile=True), axis=0)
            tl.store(dx_ptr, loss.to(dx_ptr.dtype.element_ty))

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
# Step 2: the rows being read must fit L2
# ---------------------------------------
# Step 1 has a row in flight for each program the SMs hold; once they outgrow L2, the second read goes to memory.
# Step 2 launches a *persistent* grid (rows ``p, p + P, ...``) whose rows in flight stay under ``L2_SHARE`` of L2, with
# cache hints: ``evict_last`` on the first read, ``evict_first`` on the second (backwards: the last chunks are
# likeliest still there), ``.cs`` (streaming) on the gradient's store.

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 50 * 2**20  # on the CPU: an H100's
SMEM_PER_BLOCK = torch.cuda.get_device_properties(DEVICE).shared_memory_per_block_optin if ON_GPU else 232448  # H100's
CHUNK_N = 8192  # logits a step (16 KB bf16, 32 KB fp32): 64 bytes a thread
FORWARD_CHUNK_N = 4096  # bf16, no gradient: 4 warps a program, 8 programs an SM
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)
L2_SHARE = 0.7  # of L2 for the rows in flight
MAX_PROGRAMS_PER_SM = 4  # short rows: loads overlap across rows; the lazy backward's
RANGE = {("forward", t): range(1, 2**31) for t in ("bfloat16", "float32")}  # the front page's pick: the forward alone

def _config(n_rows, n_cols, element_size, step=2, chunk=None, stages=None, per_sm=None, grad=True, staged=0):
    """(meta-parameters, grid); step 1: a program per row, no cache hints, no pipelining."""
    half = element_size <= 2 and not grad
    chunk = chunk or max(16, min(FORWARD_CHUNK_N if half else CHUNK_N, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4, min(16, chunk * element_size // 2048)))
    if step == 1:
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    # rows in flight under L2_SHARE of L2 (no gradient: nothing to keep there)
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else 2 * MAX_PROGRAMS_PER_SM if half else MAX_PROGRAMS_PER_SM)
    # stages from the device's shared memory a program, so that no launch asks for more than it has: a loop (two
    # with the gradient) stages STAGES - 1 chunks of logits and of weights (``staged`` bytes each); 1 KB for reductions
    fit = 1 + (SMEM_PER_BLOCK - 1024) // ((1 + grad) * chunk * (element_size + staged))
    stages = min(stages or (STAGES if half or (grad and per_sm == 1) else 1), fit)
    return meta | dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages), min(n_rows, per_sm * NUM_SMS)

# %%
# The launcher and the drop-in, as PyTorch operators
# --------------------------------------------------
# ``cross_entropy`` takes what :func:`torch.nn.functional.cross_entropy` takes for class-index targets; targets (as
# int64) and weights are read at unit stride (copied where needed: a few bytes a row). A reduced forward alone is one
# launch (``REDUCE``): the same bits every run. The launches are operators (``torch.library.custom_op``), which a model
# compiled with ``torch.compile(fullgraph=True)`` keeps in its graph (a launch from Python would break it);
# ``register_fake`` tells the compiler their outputs' shapes without running a kernel. The forward returns the gradient
# too, which the backward scales in place (its operator declares it mutates ``dx``). ``inplace_backward=True`` writes
# it over the logits instead, one :math:`M \times V` tensor less (not where rows share memory): an operator may not
# write over a tensor autograd holds, so that path is an eager ``torch.autograd.Function`` (compiled: the operator).

def cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, mean, dx=None, step=2):
    """(per-row losses in fp32, 1 / the mean's denominator or 1); the reduced loss's gradient into dx."""
    (n_rows, n_cols), staged = x2d.shape, weight.element_size() if weight is not None and smoothing > 0 else 0
    valid, ones = target != ignore_index, torch.ones((), device=x2d.device)
    counted = valid.sum() if weight is None else torch.where(valid, weight.float()[target.clamp(0, n_cols - 1)], 0).sum()
    scale = 1.0 / counted.float() if mean else ones  # every row ignored: inf, and a NaN 'mean' as PyTorch's
    consts = scale.reshape(1) if weight is None else torch.stack([scale, weight.float().sum()])
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows > 0:
        meta, grid = _config(n_rows, n_cols, x2d.element_size(), step, grad=dx is not None, staged=staged)
        cross_entropy_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, losses,
                                      x2d if dx is None else dx, consts, n_rows, n_cols, x2d.stride(0),
                                      x2d.stride(0) if dx is None else dx.stride(0), ignore_index, float(smoothing),
                                      HAS_WEIGHT=weight is not None, SMOOTH=smoothing > 0, WRITE_GRAD=dx is not None,
                                      **meta)
    return losses, scale

@torch.library.custom_op("sol::cross_entropy_bwd_06", mutates_args=("dx",))
def ce_bwd_op(dx: torch.Tensor, dloss: torch.Tensor) -> None:
    (n_rows, n_cols), g = dx.shape, dloss.reshape(-1)
    if n_rows > 0:
        meta = {k: v for k, v in _config(n_rows, n_cols, dx.element_size())[0].items() if k in ("CHUNK", "num_warps")}
        scale_grad_kernel[(min(n_rows, MAX_PROGRAMS_PER_SM * NUM_SMS),)](
            dx, g, n_rows, n_cols, dx.stride(0), g.stride(0) if g.numel() > 1 else 0, **meta)

def _loss(x2d, target, weight, ignore_index, reduction, smoothing, dx):
    """The loss in x2d's dtype; the reduced loss's gradient into dx. The forward alone, reduced: in one launch."""
    (n_rows, n_cols), mean = x2d.shape, reduction == "mean"
    if dx is not None or reduction == "none" or n_rows == 0:
        losses, scale = cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, mean, dx)
        return (losses if reduction == "none" else losses.sum() * scale if mean else losses.sum()).to(x2d.dtype)
    staged = weight.element_size() if weight is not None and smoothing > 0 else 0  # weights loaded with the logits
    meta, grid = _config(n_rows, n_cols, x2d.element_size(), grad=False, staged=staged)
    grid, ticket = min(grid, 2048), torch.zeros(1, dtype=torch.int32, device=x2d.device)  # the kernel's most programs
    sums, loss = torch.empty(2 * grid, device=x2d.device), torch.empty((), device=x2d.device, dtype=x2d.dtype)
    consts = ticket if weight is None else weight.float().sum().repeat(2)  # W at consts[1]
    cross_entropy_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, sums, loss, ticket, n_rows,
                                  n_cols, x2d.stride(0), 0, ignore_index, float(smoothing), HAS_WEIGHT=weight is not None,
                                  SMOOTH=smoothing > 0, WRITE_GRAD=False, REDUCE="mean" if mean else "sum", **meta)
    return loss

@torch.library.custom_op("sol::cross_entropy_fwd_06", mutates_args=())
def ce_fwd_op(x2d: torch.Tensor, target: torch.Tensor, weight: typing.Optional[torch.Tensor], ignore_index: int,
              reduction: str, smoothing: float, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty_like(x2d if grad else x2d[:0])  # outputs are new tensors, never an input or a view of one
    return _loss(x2d, target, weight, ignore_index, reduction, smoothing, dx if grad else None), dx
ce_fwd_op.register_fake(lambda x2d, target, weight, ignore_index, reduction, smoothing, grad: (  # shapes, dtypes
    x2d.new_empty(x2d.shape[:1] if reduction == "none" else ()), torch.empty_like(x2d if grad else x2d[:0])))

def _backward(ctx, dloss, *_):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
        raise RuntimeError("cross_entropy: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's cross_entropy there")
    try:  # the gradient the forward wrote, scaled in place below: a second backward finds it changed
        (dx,) = ctx.saved_tensors
    except RuntimeError:
        raise RuntimeError("cross_entropy: this loss's backward already ran (its gradient is handed over): "
                           "compute the loss again, not retain_graph=True") from None
    ce_bwd_op(dx, dloss)
    return dx, None, None, None, None, None, None
ce_fwd_op.register_autograd(_backward, setup_context=lambda ctx, inputs, output: (  # dx: saved, not differentiable
    ctx.save_for_backward(output[1]), ctx.mark_non_differentiable(output[1])))

class InPlaceGradient(torch.autograd.Function):  # inplace_backward=True, run eagerly
    @staticmethod
    def forward(ctx, x2d, *args):
        ctx.save_for_backward(x2d)  # where the kernel writes the gradient
        return _loss(x2d, *args, x2d)
    backward = staticmethod(_backward)

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _check(logits, target, weight, ignore_index, reduction, label_smoothing):  # (n_classes, ignore_index)
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("cross_entropy: logits and target must be torch.Tensors")
    if logits.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"cross_entropy: logits have dtype {logits.dtype}; the kernels take {SUPPORTED_DTYPES}")
    if logits.device.type != DEVICE.type or target.device != logits.device:
        raise ValueError(f"cross_entropy: logits on {logits.device}, target on {target.device}; the kernels run on "
                         f"{DEVICE.type} here")
    if target.dtype not in (torch.int64, torch.uint8):  # PyTorch's class indices
        raise TypeError(f"cross_entropy: target has dtype {target.dtype}; pass class indices (torch.int64 or "
                        "torch.uint8): for class probabilities use torch.nn.functional.cross_entropy")
    if logits.dim() == 0 or logits.shape[logits.dim() > 1] == 0:
        raise ValueError(f"cross_entropy: logits of shape {list(logits.shape)} have no classes")
    n_classes, expected = logits.shape[logits.dim() > 1], logits.shape[:1] + logits.shape[2:] if logits.dim() > 1 else ()
    if tuple(target.shape) != tuple(expected):
        raise ValueError(f"cross_entropy: target has shape {list(target.shape)}, expected {list(expected)}")
    if weight is not None and not (isinstance(weight, torch.Tensor) and weight.is_floating_point()):
        raise TypeError(f"cross_entropy: weight must be a float tensor, got {getattr(weight, 'dtype', type(weight))}")
    if weight is not None and (weight.shape != (n_classes,) or weight.device != logits.device or weight.requires_grad):
        raise ValueError(f"cross_entropy: weight must be of shape [{n_classes}] on {logits.device} and must not "
                         f"require a gradient; got {list(weight.shape)} on {weight.device}, {weight.requires_grad=}")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"cross_entropy: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if not (isinstance(label_smoothing, (int, float)) or getattr(label_smoothing, "shape", None) == ()):
        raise TypeError(f"cross_entropy: label_smoothing must be a float, got {type(label_smoothing).__name__}")
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    with contextlib.suppress(TypeError):  # an int as PyTorch takes it (numpy's, a tensor's), not a bool or a float
        if not isinstance(ignore_index, bool) and -2**63 <= operator.index(ignore_index) < 2**63:
            return n_classes, operator.index(ignore_index)
    raise TypeError(f"cross_entropy: ignore_index must be an int64, got {ignore_index!r}")

def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  inplace_backward=False):
    n_classes, ignore_index = _check(logits, target, weight, ignore_index, reduction, label_smoothing)
    x2d = logits.reshape(1, -1) if logits.dim() == 1 else logits.movedim(1, -1).reshape(-1, n_classes)
    x2d = x2d if x2d.stride(-1) == 1 or n_classes == 1 else x2d.contiguous()
    target1d, weight = target.reshape(-1).long().contiguous(), None if weight is None else weight.contiguous()
    inplace = bool(inplace_backward) and (x2d.shape[0] < 2 or x2d.stride(0) >= n_classes)  # no rows sharing memory
    inplace, grad = inplace and not torch.compiler.is_compiling(), torch.is_grad_enabled() and x2d.requires_grad
    if not (torch.compiler.is_compiling() or ON_GPU and torch.cuda.is_current_stream_capturing()):  # in a graph: NaN
        bad = ((target1d < 0) | (target1d >= n_classes)) & (target1d != ignore_index)
        if bad.any():
            raise IndexError(f"cross_entropy: target {target1d[bad][0].item()} is out of bounds for {n_classes} "
                             f"classes (expected 0 to {n_classes - 1}, or ignore_index={ignore_index})")
    args = (x2d, target1d, weight, ignore_index, reduction, float(label_smoothing))
    loss = InPlaceGradient.apply(*args) if inplace and grad else ce_fwd_op(*args, grad)[0]
    return loss.view(target.shape) if reduction == "none" else loss

# %%
# Correctness
# -----------
# Errors relative to float64, beside PyTorch's: the loss (``'none'``) and gradient, rows ignored, weights, smoothing.

CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]

def check_row(shape, dtype):
    torch.manual_seed(shape[1])
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    target = torch.randint(0, shape[1], (shape[0],), device=DEVICE).masked_fill_(torch.rand(shape[0], device=DEVICE) < 0.1, -100)
    weight, dy, runs = torch.rand(shape[1], device=DEVICE) + 0.5, torch.randn(shape[0], device=DEVICE).to(dtype), {}
    x64 = x.detach().double().requires_grad_(True)
    for name, fn, xi in (("ours", cross_entropy, x), ("torch", F.cross_entropy, x), ("ref", F.cross_entropy, x64)):
        loss = fn(xi, target, weight=weight.to(xi.dtype), label_smoothing=0.1, reduction="none")
        runs[name] = (loss.double(), torch.autograd.grad(loss, xi, dy.to(xi.dtype))[0].double())
    return {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]} | {f"{name} {q}": ((o - r).norm() / r.norm()).item()
            for name in ("ours", "torch") for q, o, r in zip(("loss", "grad"), runs[name], runs["ref"])}

errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error
for q in ("loss", "grad"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; every provider on the same
# tensors, timed by :func:`triton.testing.do_bench` (median, L2 flushed), CUDA graphs replayed. GB/s counts the bytes a
# perfect kernel moves: the logits read (*forward*), plus the gradient written (*forward+backward*). The *speed of
# light*, timed beside them: a copy of the logits, and for the forward a pass that only reads them (tutorial 03's).
# Liger (given a copy: it overwrites its input) syncs with the host: no graph.

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]

def bench(fn, graph=True):  # median ms: CUDA-graph replays (GPU), or one call's wall clock (CPU)
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
    """GB/s of a copy of x or, read_only (GPU), of a pass xor-ing its 32-bit words: the faster of two."""
    if read_only and ON_GPU:
        words = x.view(-1).view(torch.int32)  # 32 KB a program: tutorial 03's fastest
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
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True).stdout.split("\n")[0] if shutil.which(smi[0]) else "?"
        card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__,
             "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
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
        fns["Liger"], no_graph = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0], {"Liger"}
try:  # quack's CuTe-DSL kernels, from compute capability 9.0
    if major >= 9:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
except Exception as err:  # not installed, or it does not load here
    not_measured("quack", "not installed" if isinstance(err, ImportError) else " ".join(str(err).split())[:100])
for peer in [p for p in ("torch.compile", "Liger") if p not in fns] + (["quack"] if major < 9 else []):
    not_measured(peer, "no GPU" if not ON_GPU else "not installed" if peer != "quack" else
                 f"needs compute capability 9.0 or newer; this GPU has {major}.{minor}")
fns["ours"] = cross_entropy

# %%
# The ladder
# ----------
# bf16, forward+backward, at the shortest and middle :math:`V`; step 0 where its row fits registers:

short, long = LADDER_V = [SWEEP_V[0], SWEEP_V[len(SWEEP_V) // 2]]
STEPS = {0: "the whole row in registers", 1: "chunks, the row reread from L2", 2: "rows in flight fit L2, cache hints"}
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
      f"{speed[2, short] / speed[0, short]:.2f}x; at V = {long}, step 2 runs at {speed[2, long] / speed[1, long]:.2f}x "
      "step 1." if ON_GPU else NO_GPU)
(ladder if ON_GPU else ladder[["step", "idea", "N"]]).style.format(  # on a CPU: the steps run, no speeds
    {"N": "{:,}", "GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

# %%
# Every provider
# --------------

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
                call = lambda: fn(xg, target) if direction == "forward" else torch.autograd.grad(fn(xg, target), xg)
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
    not_measured(name, f"{why}; at {', '.join(points)}")
# GB/s (higher is better); ours as % of light and against the fastest peer:
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of speed of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s").loc[["forward", "forward+backward"], list(fns)]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
save_results(table)
formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
table.style.format(formats, na_rep="-") if ON_GPU else print(NO_GPU)

# %%
# As a plot, as % of light:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, layout="constrained")
for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
    for name, line in part.groupby("provider", sort=False):
        ax.semilogx(line.N, line["% of speed of light"], "o-" if name == "ours" else "o--", base=2, label=name)
    ax.axhline(100, color="black", label="speed of light")
    ax.set(title=f"{direction}, {dtype}", ylabel="% of light", xlabel="vocabulary V")
    ax.legend(fontsize=7)
_ = fig.suptitle(f"Cross-entropy, {TOTAL[torch.bfloat16]:,} bf16 / {TOTAL[torch.float32]:,} fp32 logits, on {WHERE}")

# %%
# Reading the numbers
# -------------------
# Then memory: a forward+backward's peak beyond the logits (bf16, the ladder's longer V).

if ON_GPU:
    both = table.xs(("forward+backward", "bfloat16"), level=[0, 1])
    light, peer = both["ours, % of light"], both["ours / best peer"].dropna()
    alone = table.xs("forward", level=0)["ours, % of light"]
    print(f"Forward+backward in bf16: {light.min():.3g}-{light.max():.3g}% of a copy, {peer.min():.2f}x to "
          f"{peer.max():.2f}x the fastest peer: each row is read twice. The forward alone: {alone.min():.3g}-"
          f"{alone.max():.3g}% of a read pass.")
    x, memory = torch.randn((TOTAL[torch.bfloat16] // long, long), device=DEVICE, dtype=torch.bfloat16), {}
    target = torch.randint(0, long, (x.shape[0],), device=DEVICE)
    for name, fn in (fns | {"ours, inplace_backward=True": lambda x, t: cross_entropy(x, t, inplace_backward=True)}).items():
        xg = x.clone().requires_grad_(True)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        torch.autograd.grad(fn(xg, target), xg)
        memory[name] = f"{(torch.cuda.max_memory_allocated() - before) / 2**30:.2f}"
    print(f"logits: {x.numel() * 2 / 2**30:.2f} GiB; peaks:", memory)
    del x, xg, target
else:
    print(NO_GPU)

# %%
# Going further
# -------------
# **Where this design stops.** Reading each row twice costs, even from L2 (the table). The way past: programs that
# split a row, each slice in registers, and exchange their maxima and sums (as vocabulary-parallel training does):
# :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py`, the front page's pick for forward+backward.
# Further: never materialize the logits (*fused linear cross-entropy*, Wijmans et al. 2024).
# References: Milakov and Gimelshein (2018), online softmax; Liger-Kernel; quack.

environment_card()
