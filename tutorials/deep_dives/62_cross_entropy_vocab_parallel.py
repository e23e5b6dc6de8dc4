"""
The cross-entropy loss with the vocabulary split over GPUs
==========================================================

A tensor-parallel language-model head (Megatron-LM, torchtitan) leaves each of :math:`R` GPUs the logits of its
:math:`V / R` columns of the vocabulary: no GPU holds a whole row. You build ``vocab_parallel_cross_entropy``, a
drop-in for :func:`torch.nn.functional.cross_entropy` on those slices: each GPU reads its slice once, the GPUs exchange
a few floats a row (never the logits), and each writes the gradient of its slice. **What you will learn**: which
statistics a slice must share and the log-sum-exp algebra that merges them (deep dive
:ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py` does it between programs; here between GPUs);
one collective a block of rows, overlapped with the next block's reading, and why blocks that stay in L2 lose; measured
against Megatron-style all-reduces and gathered logits. The kernel: :ref:`sphx_glr_tutorials_06_cross_entropy_and_gradient.py`.
"""

import datetime, hashlib, importlib, inspect, json, linecache, operator, os, pathlib, shutil, statistics, subprocess, sys
import tempfile, timeit, types, torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU (the ranks inherit it)
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name() if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")
NO_GPU = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
WORLDS = [r for r in (1, 2, 4) if r <= torch.cuda.device_count()] if ON_GPU else [2]  # ranks: a GPU each, or 2 on a CPU
RANGE = {}  # the landing page recommends 06 and 61 for one GPU; this page compares designs across GPUs

RANK_CODE = []  # what the ranks run: each rank is a fresh Python (spawn) that imports it (see "Launching the ranks")
for_ranks = lambda obj: RANK_CODE.append(obj) or obj  # a decorator: obj, kept in RANK_CODE

# %%
# What the slices must share
# --------------------------
# Rank :math:`r` holds columns :math:`[rV/R, (r+1)V/R)` of every row (a :math:`V` that :math:`R` does not divide is
# refused: pad it, the padded logits :math:`-\infty`, as Megatron-LM pads its vocabulary). Core page 06 writes a row's
# loss as :math:`(1-\varepsilon) w_t (\ell - x_t) + \frac{\varepsilon}{V}(W\ell - \sum_c w_c x_c)`, with
# :math:`\ell = m + \log s` and the gradient :math:`a\,p_c - b_c`. A slice gives its maximum :math:`m_r`, its sum
# :math:`s_r = \sum e^{x_c - m_r}`, its :math:`x_t` (0 where it lacks the target) and, with smoothing,
# :math:`d_r = \frac{\varepsilon}{V} \sum w_c (m_r - x_c) \ge 0`. They merge as deep dive 61's slices do:
#
# .. math::
#
#    m = \max_r m_r, \quad s = \sum_r s_r e^{m_r - m}, \quad x_t = \sum_r x_{t,r}, \quad
#    \tfrac{\varepsilon}{V} \sum_c w_c (m - x_c) = \sum_r \left(d_r + \tfrac{\varepsilon}{V} W_r (m - m_r)\right),
#
# :math:`W_r` the weights of slice :math:`r` (every rank has the whole weight): :math:`k` = 3 floats a row (4 with
# smoothing). **One collective**: an all-gather of every rank's statistics, which each rank merges in rank order, the
# same bits on every rank, in one round trip. An all-reduce MAX of the maxima, then an all-reduce SUM of the rescaled
# sums, takes two, the second waiting on the first; the gather's price, :math:`4kR` bytes a row, is small beside
# the row's :math:`2V/R` bytes of bf16 logits.
#
# **Bytes.** A rank reads its :math:`M \times V/R` logits and writes their gradient: 4 bytes a bf16 logit, as 06.
# Gathering the logits instead moves :math:`(R-1)/R` of them over NVLink and makes every GPU do all :math:`V`; the
# Megatron-style reference below, counted op by op, moves 52 bytes a logit (an fp32 copy, then fp32 passes).

# %%
# The kernel: 06's, split where the slices merge
# ----------------------------------------------
# Core page 06's kernel, carried: pass 1 (a running maximum and sum over chunks) and pass 2 (the gradient, rereading
# the row backwards). ``PASS=1`` writes a row's statistics of this slice; ``PASS=2`` merges every slice's, then writes
# the row's loss and this slice's gradient; ``PASS=3`` is 06's one-pass kernel on one slice, the one-GPU yardstick.
# ``col0`` places the slice in the vocabulary (the target and weights are the whole vocabulary's); 06's launch comes too.

@for_ranks
def device_facts(device):
    """(SMs, L2 bytes, shared memory a block); on the CPU 4 SMs, 227 KB and 16 KB of L2 (tiny rows in several blocks)."""
    props = torch.cuda.get_device_properties(device) if ON_GPU else None
    return (props.multi_processor_count, props.L2_cache_size, props.shared_memory_per_block_optin) if props else (4, 2**14, 232448)

@for_ranks
def _config(n_rows, n_cols, element_size, device, grad=True, staged=0, chunk_n=8192, forward_chunk_n=4096,
            stages=3, l2_share=0.7, most_per_sm=4):
    """06's (meta-parameters, grid): 64 bytes a thread a chunk; rows in flight under l2_share of L2 (with a gradient)."""
    sms, l2_bytes, smem = device_facts(device)
    half = element_size <= 2 and not grad
    chunk = max(16, min(forward_chunk_n if half else chunk_n, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4, min(16, chunk * element_size // 2048)))
    per_sm = (max(1, min(most_per_sm, int(l2_share * l2_bytes) // (sms * n_cols * element_size))) if grad
              else 2 * most_per_sm if half else most_per_sm)
    fit = 1 + (smem - 1024) // ((1 + grad) * chunk * (element_size + staged))
    stages = min(stages if half or (grad and per_sm == 1) else 1, fit)
    return meta | dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages), min(n_rows, per_sm * sms)

@for_ranks
@triton.jit
def ce_slice_kernel(x_ptr, target_ptr, weight_ptr, consts_ptr, stats_ptr, loss_ptr, dx_ptr, n_rows, n_cols, col0, vocab,
                    x_row_stride, dx_row_stride, ignore_index, smoothing, PASS: tl.constexpr, RANKS: tl.constexpr,
                    SLOTS: tl.constexpr, K: tl.constexpr, HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr,
                    WRITE_GRAD: tl.constexpr, CHUNK: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
                    STREAM: tl.constexpr, STAGES: tl.constexpr):
    """Program p takes rows p, p + P, ... of a slice (columns col0 + [0, n_cols) of vocab). PASS 1: [m, s, x_t, d] into
    stats (K a row); 2: the RANKS slices' (RANKS x n_rows x K) merged, the loss, the gradient; 3: both, one slice."""
    LOG2E: tl.constexpr = 1.4426950408889634
    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)
    scale = tl.load(consts_ptr) if WRITE_GRAD else 1.0
    weight_sum = tl.load(consts_ptr + 1)  # W over the whole vocabulary (V without weights)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dx_row = x_ptr + row64 * x_row_stride, dx_ptr + row64 * dx_row_stride
        target = tl.load(target_ptr + row)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= vocab)) & ~ignored
        target = tl.minimum(tl.maximum(target, 0), vocab - 1)  # never read past the weights
        mine = (target >= col0) & (target < col0 + n_cols)  # this slice holds the target
        local = tl.minimum(tl.maximum(target - col0, 0), n_cols - 1).to(tl.int32)
        w_target = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        x_target = tl.load(x_row + local, mask=mine, other=0.0).to(tl.float32)
        if PASS != 2:  # Pass 1 (06's): m, s and, for smoothing, wx (terms >= 0, moved as m rises) over this slice
            m, shift = tl.full([], -float("inf"), tl.float32), tl.zeros([], tl.float32)
            s, wx, w_seen = tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32)
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = chunk * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=0))
                old, shift = shift, tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf)
                s = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E)
                if SMOOTH:
                    w = tl.load(weight_ptr + col0 + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                    w = tl.where(offs < n_cols, w * (smoothing / vocab), 0.0)
                    wx, w_seen = wx + w_seen * (shift - old) + tl.where(offs < n_cols, w * (shift - x), 0.0), w_seen + w
                m = m_new
            s, wx = tl.sum(s, axis=0), tl.sum(wx, axis=0)
        if PASS == 1:  # [m, s, x_t, d]: the first K
            k = tl.arange(0, 4)
            stats = tl.where(k == 0, m, tl.where(k == 1, s, tl.where(k == 2, x_target, wx)))
            tl.store(stats_ptr + row64 * K + k, stats, mask=k < K)
        else:
            if PASS == 2:  # the merge, in rank order (a slot past RANKS: an empty slice)
                slot = tl.arange(0, SLOTS)
                there, at = slot < RANKS, stats_ptr + (slot * n_rows + row64) * K
                m_r = tl.load(at, mask=there, other=-float("inf"))
                m = tl.max(m_r, axis=0)
                shift = tl.where(m == -float("inf"), 0.0, m)
                s = tl.sum(tl.load(at + 1, mask=there, other=0.0) * tl.exp(m_r - shift), axis=0)
                x_target = tl.sum(tl.load(at + 2, mask=there, other=0.0), axis=0)
                if SMOOTH:  # each d_r moved from its slice's maximum to the row's
                    w_r = tl.load(consts_ptr + 2 + slot, mask=there, other=0.0) * (smoothing / vocab)
                    moved = tl.where(there, w_r * (shift - tl.where(m_r == -float("inf"), 0.0, m_r)), 0.0)
                    wx = tl.sum(tl.load(at + 3, mask=there, other=0.0) + moved, axis=0)
            log_s = tl.log(s)  # lse = m + log_s, kept apart: at m = 1e20 the sum rounds log_s away
            loss = (1.0 - smoothing) * w_target * (m - x_target + log_s)
            if SMOOTH:
                loss += smoothing / vocab * weight_sum * log_s + wx
            tl.store(loss_ptr + row64, tl.where(ignored, 0.0, tl.where(bad, float("nan"), loss)))
            if WRITE_GRAD:  # Pass 2 (06's), backwards: dx = scale (a p - b), p = exp(x - m - log_s)
                row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale))
                a, hit = (1.0 - smoothing) * w_target + smoothing * weight_sum / vocab, (1.0 - smoothing) * w_target
                for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                    offs = (n_chunks - 1 - chunk) * CHUNK + cols
                    x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)
                    dx = (row_scale * a) * tl.exp2((x - m) * LOG2E - log_s * LOG2E)
                    if SMOOTH:
                        w = tl.load(weight_ptr + col0 + offs, mask=offs < n_cols, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
                        dx -= row_scale * smoothing / vocab * w
                    tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)
                tl.debug_barrier()  # then the target's b, over another thread's store
                b = hit + (smoothing / vocab * w_target if SMOOTH else 0.0)
                tl.store(dx_row + local, (row_scale * (a * tl.exp(x_target - m - log_s) - b)).to(dx_ptr.dtype.element_ty),
                         mask=mine)

@for_ranks
def launch_pass(PASS, x2d, target, weight, consts, stats, losses, dx, col0, vocab, ignore_index, smoothing, ranks=1):
    """One launch of ce_slice_kernel on the rows of x2d (a block: a view of the slice); dx None: no gradient."""
    (n_rows, n_cols), grad = x2d.shape, dx is not None and PASS != 1
    staged = weight.element_size() if weight is not None and smoothing > 0 else 0  # weights loaded with the logits
    meta, grid = _config(n_rows, n_cols, x2d.element_size(), x2d.device, grad, staged)
    ce_slice_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, stats, losses, dx if grad else x2d,
                             n_rows, n_cols, col0, vocab, x2d.stride(0), dx.stride(0) if grad else 0, ignore_index,
                             float(smoothing), PASS=PASS, RANKS=ranks, SLOTS=triton.next_power_of_2(ranks),
                             K=stats.shape[-1], HAS_WEIGHT=weight is not None, SMOOTH=smoothing > 0, WRITE_GRAD=grad, **meta)

# %%
# Blocks of rows, one all-gather a block
# --------------------------------------
# Blocks that pass 2 finds in L2 would move 06's bytes, but a row of a large vocabulary is hundreds of KB: two blocks in
# L2 (pass 1 reading one, pass 2 rereading the other) hold about a row an SM, read in microseconds, less than a block's
# two launches and its gather cost. So the rows go in four blocks (rows a multiple of the SMs, never fewer than an L2
# block's) and pass 2 rereads them from memory: 3 passes where a copy makes 2, at most 67% of light. Per block: pass 1,
# its all-gather started (``async_op=True``), then the *previous* block's gather awaited (NCCL's stream, gloo's thread)
# and its pass 2. The appendix also times the L2 blocks, ``overlap=False`` and ``exchange=False``.

@for_ranks
def block_rows(n_rows, n_cols, element_size, device, fit_l2=False, l2_share=0.7, blocks=4):
    """Rows a block, a multiple of the SMs: a quarter of the rows, or (fit_l2) two blocks in l2_share of L2."""
    sms, l2_bytes, _ = device_facts(device)
    in_l2 = sms * max(1, int(l2_share * l2_bytes / 2) // (sms * n_cols * element_size))
    return in_l2 if fit_l2 else max(in_l2, sms * triton.cdiv(n_rows, blocks * sms))

@for_ranks
def all_gather(out, tensor, group):
    """Started, not awaited: out (ranks x tensor's rows, rank after rank) = every rank's tensor."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # the newer name, where it is
    return gather(out, tensor, group=group, async_op=True)

@for_ranks
def shard_losses(x2d, target, weight, ignore_index, mean, smoothing, group, dx, overlap=True, exchange=True, fit_l2=False):
    """(per-row fp32 losses, the same bits on every rank; the mean's factor); this slice's gradient into dx (None: none)."""
    (n_rows, width), ranks, rank = x2d.shape, dist.get_world_size(group), dist.get_rank(group)
    vocab, k, device = ranks * width, 3 + (smoothing > 0), x2d.device
    valid = target != ignore_index  # the mean's denominator: from the target and weight, which every rank has
    counted = valid.sum() if weight is None else torch.where(valid, weight.float()[target.clamp(0, vocab - 1)], 0).sum()
    scale = 1.0 / counted.float() if mean else torch.ones((), device=device)  # every row ignored: inf, a NaN mean
    w_slices = torch.full((ranks,), float(width), device=device) if weight is None else weight.float().view(ranks, width).sum(1)
    consts = torch.cat([scale.reshape(1), w_slices.sum().reshape(1), w_slices])  # the kernel's: [scale, W, W_0, W_1, ...]
    pending, rows, losses = [], block_rows(n_rows, width, x2d.element_size(), device, fit_l2), torch.empty(n_rows, device=device)
    for start in range(0, n_rows, rows):
        block = slice(start, min(n_rows, start + rows))
        stats = torch.empty(block.stop - start, k, device=device)
        launch_pass(1, x2d[block], target[block], weight, consts, stats, None, None, rank * width, vocab, ignore_index, smoothing)
        gathered = torch.empty(ranks * stats.shape[0], k, device=device)
        pending.append((block, stats, gathered, all_gather(gathered, stats, group) if exchange else None))
        while len(pending) > overlap or start + rows >= n_rows and pending:  # the previous block's, or all at the end
            block, _, gathered, work = pending.pop(0)
            work.wait() if work is not None else None
            launch_pass(2, x2d[block], target[block], weight, consts, gathered, losses[block],
                        None if dx is None else dx[block], rank * width, vocab, ignore_index, smoothing, ranks)
    return losses, scale

# %%
# The drop-in
# -----------
# ``vocab_parallel_cross_entropy`` takes :func:`~torch.nn.functional.cross_entropy`'s arguments and a process group:
# logits ``[..., V/R]`` with their classes on the last dimension (an LM head's layout, F.cross_entropy's for 2-D
# logits), the target ``[...]``. Every rank returns the whole loss. As in 06, the forward writes the gradient, and the
# backward only scales it by the upstream gradient (06's kernel, skipping rows whose factor is 1): no collective.
#
# **Checks that cannot hang.** A rank whose input is wrong must not leave the others waiting in a collective: each rank
# checks its own input, then one small all-gather compares every rank's rows, columns, options, verdict and a
# fingerprint of the target, and every rank raises the same error. The target and weight are then checked against V.

@for_ranks
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

@for_ranks
class VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, target, weight, ignore_index, reduction, smoothing, group):
        dx = torch.empty_like(x2d) if ctx.needs_input_grad[0] else None
        losses, scale = shard_losses(x2d, target, weight, ignore_index, reduction == "mean", smoothing, group, dx)
        ctx.save_for_backward(dx)
        return (losses if reduction == "none" else losses.sum() * scale if reduction == "mean" else losses.sum()).to(x2d.dtype)

    @staticmethod
    def backward(ctx, dloss):
        if getattr(ctx, "handed_over", False):  # the gradient was scaled in place and handed over
            raise RuntimeError("vocab_parallel_cross_entropy: this loss's backward already ran: compute it again")
        (dx,), ctx.handed_over, g = ctx.saved_tensors, True, dloss.reshape(-1)
        scale_grad_kernel[(min(dx.shape[0], 4 * device_facts(dx.device)[0]),)](  # no rows: no programs
            dx, g, dx.shape[0], dx.shape[1], dx.stride(0), g.stride(0) if g.numel() > 1 else 0,
            CHUNK=min(8192, triton.next_power_of_2(dx.shape[1])))
        return dx, None, None, None, None, None, None

@for_ranks
def own_refusal(logits, target, weight, ignore_index, reduction, label_smoothing):
    """What is wrong with this rank's input alone, or None."""
    floats, rows = (torch.float32, torch.float16, torch.bfloat16), list(logits.shape[:-1])
    if logits.dtype not in floats or logits.dim() == 0 or logits.shape[-1] == 0:
        return f"logits of dtype {logits.dtype}, shape {list(logits.shape)}: expected {floats}, V / R > 0 columns"
    if target.dtype not in (torch.int64, torch.uint8) or list(target.shape) != rows or target.device != logits.device:
        return f"target of dtype {target.dtype}, shape {list(target.shape)}: expected class indices (int64) of shape {rows}"
    if weight is not None and (not weight.is_floating_point() or weight.dim() != 1 or weight.device != logits.device
                               or weight.requires_grad):
        return f"weight must be a 1-D float tensor on {logits.device} that does not require a gradient"
    if reduction not in ("none", "mean", "sum") or not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing <= 1:
        return f"reduction ('none', 'mean', 'sum') and label_smoothing (in [0, 1]): got {reduction!r}, {label_smoothing!r}"
    if isinstance(ignore_index, bool) or not hasattr(ignore_index, "__index__"):
        return f"ignore_index must be an int, got {ignore_index!r}"

@for_ranks
def vocab_parallel_cross_entropy(logits_shard, target, weight=None, ignore_index=-100, reduction="mean",
                                 label_smoothing=0.0, group=None):
    """F.cross_entropy of logits whose last dimension is split over the ranks of group (default: all): rank r holds
    columns [r V/R, (r+1) V/R); every rank passes the whole target and weight, and gets the whole loss."""
    name = "vocab_parallel_cross_entropy"
    if not all(isinstance(t, torch.Tensor) for t in (logits_shard, target) + ((weight,) if weight is not None else ())):
        raise TypeError(f"{name}: logits_shard, target and weight must be torch.Tensors")
    refusal = own_refusal(logits_shard, target, weight, ignore_index, reduction, label_smoothing)
    ranks, width = dist.get_world_size(group), logits_shard.shape[-1] if logits_shard.dim() else 0
    smoothing = float(label_smoothing) if refusal is None else 0.0
    mine = torch.tensor([target.numel(), width, 3 + (smoothing > 0), weight is not None, refusal is None, 0], device=logits_shard.device)
    if refusal is None:  # and a fingerprint of the target, the same on every rank
        mine[5] = (target.reshape(-1).long() * (torch.arange(target.numel(), device=mine.device) % 1021 + 1)).sum()
    every = torch.empty(ranks * 6, dtype=mine.dtype, device=mine.device)
    all_gather(every, mine, group).wait()
    every = every.view(ranks, 6).tolist()
    if refusal is not None:
        raise ValueError(f"{name}: {refusal}")
    if not all(e[4] for e in every):
        raise ValueError(f"{name}: rank {[e[4] for e in every].index(0)} refused its input (its error says why)")
    if any(e != every[0] for e in every):
        raise ValueError(f"{name}: the ranks disagree on [rows, columns, statistics a row, weighted, ok, target]: {every}; "
                         "each must hold the same rows and target and V / R columns: for an uneven V, pad it to a "
                         "multiple of R with logits of -inf (exact without label smoothing)")
    if weight is not None and weight.shape != (ranks * width,):
        raise ValueError(f"{name}: weight has shape {list(weight.shape)}, expected [{ranks * width}] ({ranks} ranks of {width} columns)")
    ignore_index, target1d = operator.index(ignore_index), target.reshape(-1).long()
    bad = ((target1d < 0) | (target1d >= ranks * width)) & (target1d != ignore_index)
    if bad.any():
        raise IndexError(f"{name}: target {target1d[bad][0].item()} is out of bounds for {ranks * width} classes "
                         f"({ranks} ranks of {width}): expected 0 to {ranks * width - 1}, or ignore_index={ignore_index}")
    weight, x2d = None if weight is None else weight.contiguous(), logits_shard.reshape(-1, width).contiguous()
    loss = VocabParallelCrossEntropy.apply(x2d, target1d, weight, ignore_index, reduction, smoothing, group)
    return loss.view(target.shape) if reduction == "none" else loss

# %%
# The two references
# ------------------
# **Megatron-style**: an all-reduce MAX of the row maxima, then an all-reduce SUM of the target logit, then an
# all-reduce SUM of the sums of exponentials (three round trips), in PyTorch ops on an fp32 copy of the slice; the
# softmax kept in fp32 for the backward. **Gather, then F.cross_entropy**: every rank gathers the whole logits and runs
# PyTorch's loss and gradient on them, then keeps its slice of the gradient. Both take the plain ``'mean'``.

@for_ranks
class MegatronStyle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, target, group):
        x, width, ctx.dtype = shard.float(), shard.shape[-1], shard.dtype
        m = x.max(dim=-1).values
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        x -= m.unsqueeze(-1)
        local = target - dist.get_rank(group) * width
        mine, local = (local >= 0) & (local < width), local.clamp(0, width - 1)
        x_t = torch.where(mine, x.gather(-1, local.unsqueeze(-1)).squeeze(-1), 0.0)
        dist.all_reduce(x_t, group=group)
        s = (e := x.exp_()).sum(dim=-1)
        dist.all_reduce(s, group=group)
        ctx.save_for_backward(e.div_(s.unsqueeze(-1)), mine, local)
        return (s.log() - x_t).mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, mine, local = ctx.saved_tensors
        softmax.scatter_add_(-1, local.unsqueeze(-1), -mine.float().unsqueeze(-1))
        return softmax.mul_(grad / softmax.shape[0]).to(ctx.dtype), None, None

@for_ranks
def gather_logits(shard, group=None):
    """The whole rows [M, V] on every rank: each rank's [M, V/R], gathered, side by side."""
    ranks, rows = dist.get_world_size(group), shard.shape[0]
    out = torch.empty((ranks * rows, shard.shape[1]), device=shard.device, dtype=shard.dtype)
    all_gather(out, shard.contiguous(), group).wait()
    return out.view(ranks, rows, shard.shape[1]).permute(1, 0, 2).reshape(rows, ranks * shard.shape[1])

@for_ranks
def gathered_cross_entropy(shard, target, group=None):
    """(loss, this rank's slice of the gradient): the logits gathered, then F.cross_entropy and its gradient."""
    full = gather_logits(shard, group).requires_grad_(True)
    loss = F.cross_entropy(full, target)
    lo = dist.get_rank(group) * shard.shape[1]
    return loss, torch.autograd.grad(loss, full)[0][:, lo : lo + shard.shape[1]]

# %%
# Launching the ranks
# -------------------
# The page starts its own ranks with :func:`torch.multiprocessing.spawn`: fresh Python processes, which know only what
# they import, and a notebook's or sphinx-gallery's functions cannot be imported by name. So ``rank_module`` writes the
# code marked ``@for_ranks`` above, as written, to a file that the parent and every rank import. Rank :math:`r` takes
# GPU :math:`r` and joins the group through a file (NCCL, NVLink multicast off: ``NCCL_NVLS_ENABLE=0`` before the
# group starts; gloo on a CPU), runs a task of its module, and writes the task's answer to a file the parent reads.

RANK_IMPORTS = ("import json, operator, os, pathlib, statistics, sys, timeit, torch, torch.distributed as dist, triton\n"
                "import torch.nn.functional as F, triton.language as tl\nON_GPU = torch.cuda.is_available()\nfor_ranks = lambda obj: obj\n\n\n")

def source_of(obj):
    """An object's source as written on this page (a Triton kernel's: its function's). A class's is found from its
    first method's lines: Python before 3.13 looks a class up through its module's file, which a notebook lacks."""
    if not isinstance(obj, type):
        return inspect.getsource(getattr(obj, "fn", obj))
    code = next(v.__func__.__code__ for v in vars(obj).values() if isinstance(v, staticmethod))
    lines = linecache.getlines(code.co_filename)
    start = max(i for i in range(code.co_firstlineno) if lines[i].startswith(f"class {obj.__name__}"))
    return "".join(inspect.getblock(lines[start:]))

def rank_module():
    """The module of the ranks' code (what is marked @for_ranks so far), written to a file once and imported."""
    source = RANK_IMPORTS + "\n\n".join(source_of(obj) for obj in RANK_CODE)
    name = "vocab_parallel_ranks_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    if name not in sys.modules:
        folder = tempfile.mkdtemp(prefix="vocab_parallel_")
        pathlib.Path(folder, f"{name}.py").write_text(source, encoding="utf-8")
        sys.path.insert(0, folder)  # the ranks start with the parent's path
        importlib.import_module(name)
    return sys.modules[name]

@for_ranks
def rank_main(rank, world, folder, task, args):
    """Joins the group, runs task(*args) (a name here; a function: given this module first), writes its answer."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # read by NCCL when the group starts
    cuda = torch.cuda.is_available()
    torch.cuda.set_device(rank) if cuda else None
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{folder}/store", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank) if cuda else None)
    try:
        answer = globals()[task](*args) if isinstance(task, str) else task(sys.modules[__name__], *args)
    finally:
        dist.destroy_process_group()
    pathlib.Path(folder, f"rank{rank}.json").write_text(json.dumps(answer), encoding="utf-8")

def launch(world, task, *args):
    """Runs task(*args) on `world` spawned ranks; their answers, in rank order."""
    module, folder = rank_module(), tempfile.mkdtemp(prefix="vocab_parallel_run_")
    # spawn first reruns the parent's main script in each rank: a main without a file gives it nothing to rerun
    main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
    try:
        ranks = mp.spawn(module.rank_main, (world, folder, task, args), nprocs=world, join=False)
    finally:
        sys.modules["__main__"] = main
    while not ranks.join():
        pass
    answers = [json.loads(pathlib.Path(folder, f"rank{rank}.json").read_text(encoding="utf-8")) for rank in range(world)]
    shutil.rmtree(folder, ignore_errors=True)
    return answers

# %%
# Correctness
# -----------
# On every number of ranks here: the loss and the gradient against :func:`~torch.nn.functional.cross_entropy` in float64
# on the gathered logits (a random upstream gradient; rows ignored, weights, smoothing, each reduction), beside
# PyTorch's own error in the logits' dtype. The gradient's error is over all ranks' slices (their squared norms summed).

CASES = [dict(M=37, V=600, dtype=d, weight=w, smoothing=e, reduction=r) for d in ("float32", "bfloat16")
         for w, e, r in ((False, 0.0, "mean"), (True, 0.0, "none"), (True, 0.1, "sum"))]
if ON_GPU:
    CASES = [c | dict(M=64, V=128256) for c in CASES] + [c | dict(M=16, V=262144) for c in CASES[:3]]

@for_ranks
def check_task(cases):
    """Each case's errors against float64: the loss's and the whole gradient's (the same answer on every rank)."""
    rank, ranks, answers = dist.get_rank(), dist.get_world_size(), []
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    for i, case in enumerate(cases):
        gen, dtype, width = torch.Generator().manual_seed(i), getattr(torch, case["dtype"]), case["V"] // ranks
        target = torch.randint(0, case["V"], (case["M"],), generator=gen)
        target = target.masked_fill(torch.rand(case["M"], generator=gen) < 0.2, -100).to(device)
        weight = (torch.rand(case["V"], generator=gen) + 0.5).to(device, dtype) if case["weight"] else None
        dy = torch.randn(case["M"] if case["reduction"] == "none" else (), generator=gen).to(device)
        shard = (3 * torch.randn(case["M"], width, generator=torch.Generator().manual_seed(1000 * i + rank))).to(device, dtype)
        full, lo, runs = gather_logits(shard), rank * width, {}
        options = dict(reduction=case["reduction"], label_smoothing=case["smoothing"])
        for who, fn, x in (("ours", vocab_parallel_cross_entropy, shard), ("torch", F.cross_entropy, full),
                           ("ref", F.cross_entropy, full.double())):
            x = x.detach().requires_grad_(True)
            loss = fn(x, target, weight=None if weight is None else weight.to(x.dtype), **options)
            grad = torch.autograd.grad(loss, x, dy.to(loss.dtype))[0].double()
            runs[who] = (loss.detach().double(), grad if who == "ours" else grad[:, lo : lo + width])
        (loss64, grad64), answer = runs.pop("ref"), {}
        for who, (loss, grad) in runs.items():
            norms = torch.stack([(grad - grad64).square().sum(), grad64.square().sum()])
            dist.all_reduce(norms)  # the whole gradient's: every rank's slice
            answer |= {f"{who} loss": ((loss - loss64).norm() / loss64.norm()).item(), f"{who} grad": (norms[0] / norms[1]).sqrt().item()}
        answers.append(answer)
    return answers

print(f"Ranks: {', '.join(map(str, WORLDS))}, " + (f"a GPU each (NCCL; this machine has {torch.cuda.device_count()})"
      if ON_GPU else "on the CPU through gloo, with tiny shapes (no GPU here)") + ".")
errors = pd.DataFrame([{"ranks": world} | case | answer for world in WORLDS
                       for case, answer in zip(CASES, launch(world, "check_task", CASES)[0])])  # rank 0's answers
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error
for q in ("loss", "grad"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[7:]} | {"smoothing": "{:g}"}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# bf16 logits, ``'mean'``, forward and backward. A distributed step is timed on every rank with CUDA events around 3
# calls after a barrier; its time is the slowest rank's (an all-reduce MAX), the median of 5. *pipeline* is
# ``shard_losses`` alone (no checks, no autograd). One GPU's timings (06's one-pass kernel on a slice of the same size, a
# copy of the slice) are :func:`triton.testing.do_bench`'s medians, each rank on its GPU. GB/s counts the bytes a
# perfect kernel moves on a slice: its logits read and its gradient written.

SWEEP = [(m, v) for m in (8192, 16384) for v in (128256, 262144)]  # rows M, vocabulary V

@for_ranks
def bench(fn):  # median ms on one GPU (do_bench), or one call's wall clock (CPU)
    if not torch.cuda.is_available():
        return 1e3 * timeit.timeit(fn, number=1)
    return triton.testing.do_bench(fn, warmup=1, rep=20, return_mode="median")

@for_ranks
def step_ms(fn, trials=5, calls=3):
    """A distributed step's ms: the slowest rank's (CUDA events after a barrier), the median of `trials`."""
    fn()  # warm up (compiles the kernels)
    times, (start, end) = [], [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(trials):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        [fn() for _ in range(calls)]
        end.record()
        end.synchronize()
        ms = torch.tensor([start.elapsed_time(end) / calls], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        times.append(ms.item())
    return statistics.median(times)

@for_ranks
def bench_task(sweep):
    """Per (M, V): the steps' ms (the slowest rank's) and this GPU's one-pass kernel and copy on its slice."""
    ranks, answers, device = dist.get_world_size(), [], torch.device("cuda", dist.get_rank())
    for n_rows, vocab in sweep:
        width = vocab // ranks
        x = torch.randn((n_rows, width), device=device, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (n_rows,), device=device, generator=torch.Generator(device).manual_seed(0))
        xd, dx, losses = x.detach(), torch.empty_like(x), torch.empty(n_rows, device=device)
        pipeline = lambda **kw: shard_losses(xd, target, None, -100, True, 0.0, None, dx, **kw)
        steps = {"ours": lambda: torch.autograd.grad(vocab_parallel_cross_entropy(x, target), x),
                 "pipeline": pipeline, "pipeline, each gather awaited at once": lambda: pipeline(overlap=False),
                 "pipeline, blocks in L2": lambda: pipeline(fit_l2=True),
                 "pipeline, no gathers": lambda: pipeline(exchange=False),
                 "Megatron-style": lambda: torch.autograd.grad(MegatronStyle.apply(x, target, None), x),
                 "gather + F.cross_entropy": lambda: gathered_cross_entropy(xd, target)}
        answer = {"ranks": ranks, "M": n_rows, "V": vocab} | {name: step_ms(fn) for name, fn in steps.items()}
        consts = torch.tensor([1.0 / n_rows, width], device=device)
        answer["one GPU, one pass"] = bench(lambda: launch_pass(3, xd, target, None, consts, consts, losses, dx, 0, width, -100, 0.0))
        answer["copy"] = bench(lambda: dx.copy_(xd))
        answers.append(answer)
        x = xd = dx = steps = pipeline = None
        torch.cuda.empty_cache()
    return answers

def save_results(table):
    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's results for its front page
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "62_cross_entropy_vocab_parallel.csv"))

def environment_card():
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(0), ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True).stdout.split("\n")[0] if shutil.which(smi[0]) else "?"
        card = {"device": f"{torch.cuda.device_count()} x {props.name}, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__, "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

# %%
# Does the split pay?
# -------------------
# Per number of ranks, :math:`M` and :math:`V`: a GPU's GB/s on its slice in a training step (``ours``: the drop-in with
# its checks and autograd) against 06's one-pass kernel on a slice as large; % of light (a copy of the slice's time over
# ours: at most 67%); the gathers' cost; overlap; blocks in L2 and the references, their time over ours.

if ON_GPU:
    measured = pd.DataFrame([row for world in WORLDS for row in launch(world, "bench_task", SWEEP)[0]]).set_index(["ranks", "M", "V"])
    nbytes = 2 * 2 * measured.index.get_level_values("M") * measured.index.get_level_values("V") / measured.index.get_level_values("ranks")
    table = pd.DataFrame({"GB/s a GPU": nbytes / measured["ours"] * 1e-6,
                          "one GPU, one pass": nbytes / measured["one GPU, one pass"] * 1e-6}, index=measured.index)
    table["ours / one GPU"] = table["GB/s a GPU"] / table["one GPU, one pass"]
    table["ours, % of light"] = 100 * measured["copy"] / measured["ours"]
    table["gathers' share of the step"] = 100 * (1 - measured["pipeline, no gathers"] / measured["pipeline"])
    table["overlap: awaited at once / overlapped"] = measured["pipeline, each gather awaited at once"] / measured["pipeline"]
    table["blocks in L2 / ours"] = measured["pipeline, blocks in L2"] / measured["pipeline"]
    table["Megatron-style / ours"] = measured["Megatron-style"] / measured["ours"]
    table["gather + F.cross_entropy / ours"] = measured["gather + F.cross_entropy"] / measured["ours"]
    table["ours / best peer"] = table[["Megatron-style / ours", "gather + F.cross_entropy / ours"]].min(axis=1)
    top = table.xs((max(WORLDS), max(m for m, _ in SWEEP)), level=["ranks", "M"])
    save_results(top.assign(direction="forward+backward", dtype="bfloat16").reset_index().rename(columns={"V": "N"})
                 .set_index(["direction", "dtype", "N"]))
    shown = table.drop(columns=["ours / best peer"])
    formats = {c: "{:.2f}x" for c in shown.columns} | {"GB/s a GPU": "{:.0f}", "one GPU, one pass": "{:.0f}",
                                                       "ours, % of light": "{:.1f}%", "gathers' share of the step": "{:.1f}%"}
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")  # dashed: one GPU, 06's kernel, a slice as large
    for (m, v), part in table.reset_index("ranks").groupby(level=["M", "V"]):
        (line,) = ax.plot(part.ranks, part["GB/s a GPU"], "o-", label=f"ours, M = {m:,}, V = {v:,}")
        ax.plot(part.ranks, part["one GPU, one pass"], "o--", color=line.get_color())
    ax.set(xlabel="ranks (a GPU each)", ylabel="GB/s a GPU on its slice", xticks=WORLDS, title=f"Loss and gradient on {WHERE}")
    ax.legend(fontsize=7)
shown.style.format(formats) if ON_GPU else print(NO_GPU)

# %%
# Reading the numbers
# -------------------
print(NO_GPU) if not ON_GPU else None
for world, part in table.groupby(level="ranks") if ON_GPU else ():
    ratio, share, overlap = part["ours / one GPU"], part["gathers' share of the step"], part["overlap: awaited at once / overlapped"]
    mega, gather, in_l2 = part["Megatron-style / ours"], part["gather + F.cross_entropy / ours"], part["blocks in L2 / ours"]
    steps = world * part["GB/s a GPU"].droplevel("ranks") / table.xs(1, level="ranks")["GB/s a GPU"] if 1 in WORLDS else None
    pays = "pays" if overlap.min() > 1.02 else "does not pay here" if overlap.max() < 1.02 else "pays at some sizes only"
    print(f"{world} rank{'s' * (world > 1)}: a GPU at {ratio.min():.2f}x to {ratio.max():.2f}x one GPU's one-pass kernel "
          f"on a slice of the same size; the gathers add {share.min():.1f}% to {share.max():.1f}% to the step, and "
          f"overlapping them {pays} ({overlap.min():.2f}x to {overlap.max():.2f}x); blocks in L2 take "
          f"{in_l2.min():.2f}x to {in_l2.max():.2f}x our pipeline's time, Megatron-style {mega.min():.2f}x to "
          f"{mega.max():.2f}x our step's, gathering the logits {gather.min():.2f}x to {gather.max():.2f}x." + (f" The whole step ran {steps.min():.2f}x to {steps.max():.2f}x as fast as on one GPU." if world > 1 and steps is not None else ""))

# %%
# Going further
# -------------
# **Blocks in L2, graphed**: in a CUDA graph (NCCL's collectives can be captured) the L2 blocks lose their host time: do
# 06's 2 passes then win? **Fused linear cross-entropy** never writes the logits. **Exercise**: what does the mean's
# denominator from the whole target cost at :math:`M = 16{,}384`? See Megatron-LM and torchtitan's loss-parallel.

environment_card()
