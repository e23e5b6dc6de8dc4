"""
Cross-entropy, long rows: one row split across programs
=======================================================

The core kernel (:ref:`sphx_glr_tutorials_06_cross_entropy_and_gradient.py`) reads each row twice, the second from L2
(its page measures the cost). Here programs share a row, each holding its *slice* in registers: the row is read once and
its gradient written from registers, at every :math:`V`. **What you will learn**: how the slices merge their maxima and
sums through words in global memory (the algebra of vocabulary-parallel tensor parallelism, on one GPU); why all
programs that share a row must be on the GPU at once; measured against the core kernel and the peers; and the core
pages' drop-in around it. :ref:`sphx_glr_tutorials_deep_dives_11_softmax_long_rows.py` does the same on softmax.
"""

import contextlib, ctypes, datetime, operator, os, shutil, subprocess, timeit, typing, torch, torch.nn.functional as F
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
# The core kernel we start from
# -----------------------------
# The core page's kernel with label smoothing :math:`\varepsilon` inside: rows ``p, p + P, ...`` a program; pass 1 a
# running maximum and sum, pass 2 the row reread backwards to write :math:`a\, p_c - b_c`, :math:`a = (1-\varepsilon)
# w_t + \varepsilon W / V`, :math:`b_c = (1-\varepsilon) w_t [c = t] + \varepsilon w_c / V`.

props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None  # on the CPU, below: an H100's
NUM_SMS, L2_BYTES = (props.multi_processor_count, props.L2_cache_size) if ON_GPU else (4, 50 * 2**20)
SMEM_PER_BLOCK, SMEM_PER_SM = (props.shared_memory_per_block_optin, props.shared_memory_per_multiprocessor) if ON_GPU \
    else (232448, 233472)
WARPS_PER_SM = props.max_threads_per_multi_processor // 32 if ON_GPU else 64
CHUNK_N = 8192  # logits of a row a step (16 KB bf16, 32 KB fp32): 64 bytes a thread, 8 or 16 warps
FORWARD_CHUNK_N = 1024  # bf16 logits a chunk of the forward alone (fp32: twice), 16 a thread
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)
L2_SHARE = 0.7  # the rows in flight stay under this share of L2, leaving room for what else passes through it
MAX_PROGRAMS_PER_SM = 4  # short rows: several programs an SM, so that loads also overlap across row boundaries

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

def _config(n_rows, n_cols, element_size, step=2, chunk=None, stages=None, per_sm=None, grad=True, staged=0):
    """(meta-parameters, grid); step 1: a program per row, no cache hints, no pipelining."""
    forward_n = FORWARD_CHUNK_N * element_size // 2  # the forward alone: bf16 1024, fp32 2048
    chunk = chunk or max(16, min(CHUNK_N if grad else forward_n, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4 if grad else 2, min(16, chunk * element_size // 2048)))
    if step == 1:
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    # rows in flight under L2_SHARE of L2; no gradient: nothing to keep there, as many programs as registers hold
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else WARPS_PER_SM // 2 // meta["num_warps"])
    # stages within shared memory a program (loops stage STAGES - 1 chunks, ``staged`` weight bytes a logit) and an SM's
    fit = 1 + (SMEM_PER_BLOCK - 1024) // ((1 + grad) * chunk * (element_size + staged))
    sm_stages = 1 + SMEM_PER_SM // (per_sm * chunk * (element_size + staged))
    stages = min(stages or (STAGES if grad and per_sm == 1 else 1 if grad else min(STAGES, sm_stages)), fit)
    return meta | dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages), min(n_rows, per_sm * NUM_SMS)

def core_rows(x2d, target, weight, ignore_index, mean, dx, smoothing=0.0):
    """The core page's launch: per-row losses (fp32) and the mean's factor; the gradient into dx (None: none)."""
    (n_rows, n_cols), staged = x2d.shape, weight.element_size() if weight is not None and smoothing > 0 else 0
    scale, consts = loss_constants(target, weight, ignore_index, mean, n_cols)
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows == 0:
        return losses, scale
    meta, grid = _config(n_rows, n_cols, x2d.element_size(), grad=dx is not None, staged=staged)
    cross_entropy_kernel[(grid,)](x2d, target, x2d if weight is None else weight, consts, losses,
                                  x2d if dx is None else dx, consts, n_rows, n_cols, x2d.stride(0),
                                  x2d.stride(0) if dx is None else dx.stride(0), ignore_index, float(smoothing),
                                  HAS_WEIGHT=weight is not None, SMOOTH=smoothing > 0, WRITE_GRAD=dx is not None, **meta)
    return losses, scale

def loss_constants(target, weight, ignore_index, mean, n_cols, flags=None):
    """(1 / the mean's denominator or 1, the constants), one launch that also sets flags to all ones (06: torch ops)."""
    consts, n_flags = torch.empty(2, device=target.device), 0 if flags is None else flags.numel()
    constants_kernel[(max(1, triton.cdiv(n_flags, 8192)),)](  # program 0 counts 8192 targets a step
        target, target if weight is None else weight, consts, target if flags is None else flags, target.numel(), n_cols,
        n_flags, ignore_index, MEAN=mean, HAS_WEIGHT=weight is not None, BLOCK=8192, num_warps=8)
    return consts[0], consts
@triton.jit
def constants_kernel(target_ptr, weight_ptr, consts_ptr, flags_ptr, n_rows, n_cols, n_flags, ignore_index,
                     MEAN: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
    """Flag words to all ones, a block a program; program 0: [1 / (sum of w_t, rows not ignored) or 1, W = sum of w]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(flags_ptr + offs, tl.full([BLOCK], -1, tl.int64), mask=offs < n_flags)
    if tl.program_id(0) == 0:
        counted, weights = tl.zeros([BLOCK], tl.float32), tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_rows if MEAN else 0, BLOCK):
            t = tl.load(target_ptr + start + offs, mask=start + offs < n_rows, other=0)  # (uint8 cannot hold -100)
            w = tl.load(weight_ptr + tl.minimum(tl.maximum(t, 0), n_cols - 1)).to(tl.float32) if HAS_WEIGHT else 1.0
            counted += tl.where((t != ignore_index) & (start + offs < n_rows), w, 0.0)
        for start in range(0, n_cols if HAS_WEIGHT else 0, BLOCK):
            weights += tl.load(weight_ptr + start + offs, mask=start + offs < n_cols, other=0.0).to(tl.float32)
        tl.store(consts_ptr, 1.0 / tl.sum(counted, axis=0) if MEAN else 1.0)  # every row ignored: inf, a NaN mean
        tl.store(consts_ptr + 1, tl.sum(weights, axis=0))

# %%
# One row, several programs
# -------------------------
# ``SLICES`` programs (a *group*) share each row, each holding ``BLOCK_N`` of its logits in registers, loaded once.
# The loss and gradient need the row's :math:`\ell`, so every slice: slice :math:`k` computes its maximum :math:`m_k`
# and sum :math:`s_k = \sum e^{x - m_k}`, publishes both, awaits the rest, merges all as online softmax merges chunks:
#
# .. math::
#
#    m = \max_k m_k, \qquad s = \sum_k s_k \, e^{m_k - m}, \qquad \ell = m + \log s, \qquad
#    p = e^{x - m_k} \cdot e^{m_k - m} / s .
#
# Then each slice writes its part of the gradient, :math:`w_t\,(p_c - [c = t])` times the mean's factor, from the
# registers, and the slice that holds the target writes the row's loss :math:`w_t (\ell - x_t)`. Vocabulary-parallel
# training does the same across GPUs, with an all-reduce of the maxima and the sums. The split needs a gradient to pay:
# without one, the core kernel reads each row once too, and no slice waits (the forward alone stays the core's).
#
# **How a slice publishes.** Its :math:`(m_k, s_k)` are packed into one 64-bit *flag word* (the maximum's fp32 bits
# above, the sum's below), written with one atomic exchange into a buffer set to all ones before; the others re-read
# the row's words (``volatile``: past L1) until none is all ones, which a written word never is (its upper half would
# be a NaN; a NaN maximum is written as the canonical NaN). The value travels in the word that says it is there: no
# fence. While it waits, a program has its group's next row in flight, and all this row needs after the wait.
#
# **Why every program must be on the GPU at once.** A program waiting for a slice that is not running could hold the
# SM that slice needs, forever. So the grid fits every group at once, by the occupancy of the kernel Triton compiled,
# or the core kernel runs. Under Triton's interpreter, one program at a time, a row has one slice.

@triton.jit
def slice_word(x):
    """A slice's exponentials e = exp(x - m_k), its maximum m_k, and its flag word: m_k (a NaN as the one canonical
    NaN, never all ones) in the upper 32 bits, s_k = sum(e) in the lower."""
    m = tl.max(x, axis=0)
    e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))  # a slice of -inf only: no -inf - (-inf)
    m_bits = tl.where(m != m, 0x7FC00000, m.to(tl.int32, bitcast=True))
    word = (m_bits.to(tl.int64) << 32) | (tl.sum(e, axis=0).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    return m, e, word

@triton.jit
def row_statistics(words, m, x_t):
    """From the group's words, this slice's maximum m and the target's logit x_t: lse - x_t, as (max - x_t) + log(sum)
    (exact at a max of 1e20), and the factor from this slice's exp(x - m) to p. In slice order: same bits every run."""
    m_k = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    s_k = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    row_max = tl.max(m_k, axis=0)
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(s_k * tl.exp(m_k - shift), axis=0)  # a NaN or +inf logit anywhere: NaN, as in PyTorch
    return shift - x_t + tl.log(row_sum), tl.where(m == -float("inf"), 0.0, tl.exp(m - shift)) / row_sum

@triton.jit
def wait_for_words(flags_ptr, slots, in_group):
    """The group's words of a row, once every slice has written its own (a slot past the group: an empty slice)."""
    EMPTY: tl.constexpr = -36028797018963968  # the word of a slice of -inf only: max -inf (0xFF800000), sum 0
    words = tl.load(flags_ptr + slots, mask=in_group, other=EMPTY, volatile=True)
    while tl.max((words == -1).to(tl.int32), axis=0) > 0:  # some slice has not written yet
        words = tl.load(flags_ptr + slots, mask=in_group, other=EMPTY, volatile=True)
    # the test may have read another warp's copy of the words (a small tile is held once a warp): a stale one, again
    stale = words == -1
    return tl.where(stale, tl.load(flags_ptr + slots, mask=stale & in_group, other=EMPTY, volatile=True), words)

@triton.jit
def ce_split_kernel(x_ptr, target_ptr, weight_ptr, consts_ptr, flags_ptr, loss_ptr, dx_ptr, n_rows, n_cols,
                    x_row_stride, dx_row_stride, ignore_index, HAS_WEIGHT: tl.constexpr, SLICES: tl.constexpr,
                    SLOTS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program p is slice p % SLICES of group p // SLICES; group g takes rows g, g + G, ... (G groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    slots = tl.arange(0, SLOTS)  # a power of 2 >= SLICES; a slot past the group reads as an empty slice
    in_group = slots < SLICES
    scale = tl.load(consts_ptr)  # 1 / the mean's denominator, or 1
    x_next = tl.load(x_ptr + tl.cast(group, tl.int64) * x_row_stride + cols,
                     mask=cols < tl.where(group < n_rows, n_cols, 0), other=-float("inf"))
    t_next = tl.load(target_ptr + group, mask=group < n_rows, other=ignore_index)
    for row in tl.range(group, n_rows, n_groups):
        x, target = x_next.to(tl.float32), t_next
        next_row = row + n_groups  # its loads are in flight while this row waits: the logits and the target
        x_next = tl.load(x_ptr + tl.cast(next_row, tl.int64) * x_row_stride + cols,
                         mask=cols < tl.where(next_row < n_rows, n_cols, 0), other=-float("inf"))
        t_next = tl.load(target_ptr + next_row, mask=next_row < n_rows, other=ignore_index)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= n_cols)) & ~ignored  # out of range: NaN, never a read past the row
        target = tl.minimum(tl.maximum(target, 0), n_cols - 1)
        mine = (target >= part * BLOCK_N) & (target < part * BLOCK_N + BLOCK_N)  # this slice holds the target
        # read before the wait: the target's weight and logit (its slice only: from L2, where the slice just passed)
        w_target = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        x_t = tl.load(x_ptr + tl.cast(row, tl.int64) * x_row_stride + target, mask=mine, other=0.0).to(tl.float32)
        m, e, word = slice_word(x)
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        gap, to_p = row_statistics(wait_for_words(flags_ptr + row * SLICES, slots, in_group), m, x_t)  # lse - x_t
        row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale * w_target))
        # The gradient row_scale * p everywhere, one multiply a logit; then the target's own element, p_t - 1, is
        # written over it. The barrier orders the two stores (different threads write the same address).
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        tl.store(dx_row + cols, (e * (row_scale * to_p)).to(dx_ptr.dtype.element_ty), mask=cols < n_cols)
        tl.debug_barrier()
        tl.store(dx_row + target, (row_scale * (tl.exp(-gap) - 1.0)).to(dx_ptr.dtype.element_ty), mask=mine)
        # the row's loss w_t (lse - x_t), by the slice that holds the target: 0 if ignored, NaN if out of range
        tl.store(loss_ptr + row, tl.where(ignored, 0.0, tl.where(bad, float("nan"), w_target * gap)), mask=mine)

# %%
# Launch parameters, and a grid that fits at once
# -----------------------------------------------
# ``_split_config`` is the one place to change. Small programs: while one waits for its group, others on its SM load
# and store (deep dive 11's sweep on softmax, with the same registers). The grid: as many whole groups as fit on the
# GPU at once, by CUDA's occupancy calculator on the kernel compiled for these very tensors, no more than rows need.

def _split_config(element_size):
    """Rows of MIN_N logits and more are split in slices of about SLICE_N, num_warps warps a slice."""
    if element_size <= 2:  # bf16, fp16: 64 logits a thread, 2-3 programs an SM
        return dict(MIN_N=32000, SLICE_N=8192, num_warps=4)  # from the shortest vocabulary measured, Llama 2's
    return dict(MIN_N=32000, SLICE_N=4096, num_warps=4)  # fp32: 32 logits a thread, the same bytes
RANGE = {("forward+backward", t): range(32000, 2**31) for t in ("bfloat16", "float32")}  # the V the front page gives here
_fits = {}
def programs_per_sm(kernel, args, meta):
    """How many programs of the version Triton compiles for these arguments (one per dtype, and per integer that is 1
    or a multiple of 16) fit one SM at once (1: interpreter)."""
    key = (tuple(a.dtype if isinstance(a, torch.Tensor) else (a == 1, a % 16 == 0) for a in args), tuple(sorted(meta.items())))
    if key not in _fits and ON_GPU:
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        count = ctypes.c_int()
        error = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(count), ctypes.c_void_p(compiled.function), ctypes.c_int(32 * meta["num_warps"]),
            ctypes.c_size_t(compiled.metadata.shared))
        assert error == 0, f"cuOccupancyMaxActiveBlocksPerMultiprocessor: CUDA error {error}"
        _fits[key] = count.value
    return _fits.get(key, 1)

def ce_split_rows(x2d, target, weight, ignore_index, mean, dx, slices=None, flags=None):
    """(per-row losses in fp32, the mean's factor), the gradient into dx: long rows split where a group fits the GPU at
    once, else (or without dx) the core kernel. Tests: ``slices`` forces it; ``flags`` (words written): many slices."""
    (n_rows, n_cols), cfg = x2d.shape, _split_config(x2d.element_size())
    if n_rows == 0 or dx is None or (slices is None and n_cols < cfg["MIN_N"]):
        return core_rows(x2d, target, weight, ignore_index, mean, dx)
    slices = slices or (triton.cdiv(n_cols, cfg["SLICE_N"]) if ON_GPU else 1)  # V = 151,936: 19 of 8192, not 32
    meta = dict(SLICES=slices, SLOTS=triton.next_power_of_2(slices), BLOCK_N=triton.next_power_of_2(triton.cdiv(n_cols, slices)),
                num_warps=cfg["num_warps"], HAS_WEIGHT=weight is not None)
    fresh, losses = flags is None, torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    flags = torch.empty(n_rows * slices, dtype=torch.int64, device=x2d.device) if fresh else flags  # tests: words written
    scale, consts = loss_constants(target, weight, ignore_index, mean, n_cols, flags if fresh else None)
    args = (x2d, target, x2d if weight is None else weight, consts, flags, losses, dx, n_rows, n_cols, x2d.stride(0),
            dx.stride(0), ignore_index)
    groups = programs_per_sm(ce_split_kernel, args, meta) * NUM_SMS // slices  # that fit at once
    if groups == 0:  # a group cannot be on the GPU at once: it could wait forever
        return core_rows(x2d, target, weight, ignore_index, mean, dx)
    groups = triton.cdiv(n_rows, triton.cdiv(n_rows, groups))  # as many as the fewest rows a group needs
    ce_split_kernel[(groups * slices,)](*args, **meta)
    return losses, scale

# %%
# The drop-in
# -----------
# ``cross_entropy`` is :ref:`sphx_glr_tutorials_06_cross_entropy_backward.py`'s drop-in (checks, ``*_61`` operators,
# lazy backward) with every option in the kernel. The forward alone, reduced, is one launch: each program stores its
# partial sums, then takes a *ticket*, an atomic add on one counter (``acq_rel``: its stores seen first); the one that
# draws the last ticket reads every partial (``volatile``: past L1) and adds them in program order, the same bits every
# run. Rows split where ``ce_split_rows`` splits them; smoothing (see the end) and no gradient take the core kernel.

def cross_entropy_rows(x2d, target, weight, ignore_index, smoothing, mean, dx=None):  # (losses, scale); gradient: dx
    return core_rows(x2d, target, weight, ignore_index, mean, dx, smoothing) if smoothing > 0 else \
        ce_split_rows(x2d, target, weight, ignore_index, mean, dx)

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
@torch.library.custom_op("sol::cross_entropy_bwd_61", mutates_args=("dx",))
def ce_bwd_op(dx: torch.Tensor, dloss: torch.Tensor) -> None:
    (n_rows, n_cols), g = dx.shape, dloss.reshape(-1)
    if n_rows > 0:
        meta = {k: v for k, v in _config(n_rows, n_cols, dx.element_size())[0].items() if k in ("CHUNK", "num_warps")}
        scale_grad_kernel[(min(n_rows, MAX_PROGRAMS_PER_SM * NUM_SMS),)](
            dx, g, n_rows, n_cols, dx.stride(0), g.stride(0) if g.numel() > 1 else 0, **meta)

def _loss(x2d, target, weight, ignore_index, reduction, smoothing, dx):  # the forward alone, reduced: one launch
    (n_rows, n_cols), mean = x2d.shape, reduction == "mean"
    # a class out of range: an IndexError, as torch's, checked here where a compiled model runs it too (a sync)
    if not (torch.compiler.is_compiling() or ON_GPU and torch.cuda.is_current_stream_capturing()):  # in a graph: NaN
        if (bad := ((target < 0) | (target >= n_cols)) & (target != ignore_index)).any():
            raise IndexError(f"cross_entropy: target {target[bad][0].item()} is out of bounds for {n_cols} "
                             f"classes (expected 0 to {n_cols - 1}, or ignore_index={ignore_index})")
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
@torch.library.custom_op("sol::cross_entropy_fwd_61", mutates_args=())
def ce_fwd_op(x2d: torch.Tensor, target: torch.Tensor, weight: typing.Optional[torch.Tensor], ignore_index: int,
              reduction: str, smoothing: float, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty_like(x2d if grad else x2d[:0])  # outputs are new tensors, never an input or a view of one
    return _loss(x2d, target, weight, ignore_index, reduction, smoothing, dx if grad else None), dx
ce_fwd_op.register_fake(lambda x2d, target, weight, ignore_index, reduction, smoothing, grad: (  # shapes, dtypes
    x2d.new_empty(x2d.shape[:1] if reduction == "none" else ()), torch.empty_like(x2d if grad else x2d[:0])))

def _need(ok, error, why):  # why: a function, called only on failure (a compiled model formats no message)
    if not ok:
        raise error(f"cross_entropy: {why()}")

def _backward(ctx, dloss, *_):
    _need(not torch.is_grad_enabled() or torch.compiler.is_compiling(), RuntimeError, lambda: "a gradient of this "
          "gradient (create_graph=True) is not supported: the backward is a Triton kernel; use torch's cross_entropy")
    try:  # the forward's gradient, scaled in place below: gone (or changed, with retain_graph) after a backward
        (dx,) = ctx.saved_tensors
    except RuntimeError:
        raise RuntimeError("cross_entropy: this loss's backward already ran (its gradient is handed over): "
                           "compute the loss again, not retain_graph=True") from None
    ce_bwd_op(dx, dloss)
    return dx, None, None, None, None, None, None
ce_fwd_op.register_autograd(_backward, setup_context=lambda ctx, inputs, output: (  # dx: saved, not differentiable
    ctx.save_for_backward(output[1]), ctx.mark_non_differentiable(output[1]), ctx.set_materialize_grads(False)))
class InPlaceGradient(torch.autograd.Function):  # inplace_backward=True, run eagerly
    @staticmethod
    def forward(ctx, x2d, *args):
        ctx.save_for_backward(x2d)  # where the kernel writes the gradient
        return _loss(x2d, *args, x2d)
    backward = staticmethod(_backward)
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

def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  inplace_backward=False):
    n_classes, ignore_index = _check(logits, target, weight, ignore_index, reduction, label_smoothing)
    x2d = logits.reshape(1, -1) if logits.dim() == 1 else logits.movedim(1, -1).reshape(-1, n_classes)
    x2d = x2d if x2d.stride(-1) == 1 or n_classes == 1 else x2d.contiguous()
    target1d, weight = target.reshape(-1).long().contiguous(), None if weight is None else weight.contiguous()
    inplace = bool(inplace_backward) and (x2d.shape[0] < 2 or x2d.stride(0) >= n_classes)  # no rows sharing memory
    inplace, grad = inplace and not torch.compiler.is_compiling(), torch.is_grad_enabled() and x2d.requires_grad
    args = (x2d, target1d, weight, ignore_index, reduction, float(label_smoothing))
    loss = InPlaceGradient.apply(*args) if inplace and grad else ce_fwd_op(*args, grad)[0]
    return loss.view(target.shape) if reduction == "none" else loss

# %%
# Correctness
# -----------
# The drop-in against ``F.cross_entropy`` in float64 (``reduction='none'``, a random upstream gradient, rows ignored,
# with and without weights): relative errors beside PyTorch's. A CPU's short rows take the core kernel (tests split).

CHECK_SHAPES = [(64, 131073), (16, 262144), (33, 200_003), (8, 65537)] if ON_GPU else [(5, 300), (3, 1000)]
def check_row(shape, dtype, weighted):
    torch.manual_seed(shape[1])
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype).requires_grad_(True)
    target = torch.randint(0, shape[1], (shape[0],), device=DEVICE).masked_fill_(torch.rand(shape[0], device=DEVICE) < 0.2, -100)
    weight, dy, runs = torch.rand(shape[1], device=DEVICE) + 0.5, torch.randn(shape[0], device=DEVICE).to(dtype), {}
    x64 = x.detach().double().requires_grad_(True)
    for name, fn, xi in (("ours", cross_entropy, x), ("torch", F.cross_entropy, x), ("ref", F.cross_entropy, x64)):
        loss = fn(xi, target, weight=weight.to(xi.dtype) if weighted else None, reduction="none")
        runs[name] = (loss.double(), torch.autograd.grad(loss, xi, dy.to(xi.dtype))[0].double())
    return {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "weights": weighted} | {
        f"{name} {q}": ((o - r).norm() / r.norm()).item() for name in ("ours", "torch") for q, o, r in zip(("loss", "grad"), runs[name], runs["ref"])}

errors = pd.DataFrame([check_row(s, d, w) for d in (torch.float32, torch.bfloat16) for s in CHECK_SHAPES for w in (False, True)])
TOLERANCE = {"float32": 1e-5, "bfloat16": 1.6e-2}  # a few roundings (bf16: the interpreter truncates, twice a GPU's)
for q in ("loss", "grad"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns[3:]}).hide(axis="index")

# %%
# How this page measures
# ----------------------
# As 06: :math:`2^{30}` bf16 or :math:`2^{29}` fp32 logits, ``'mean'``, CUDA graphs timed by ``do_bench``, beside a
# copy (a read pass for the forward). *ours*: the drop-in, called as the peers (``torch.autograd.grad``); *core*,
# *split*: the kernels through their launchers. Liger (on a copy: it writes over its input) syncs with the host.

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]

def bench(fn, graph=True):  # median ms: CUDA-graph replays timed by do_bench (GPU), or one call's wall clock (CPU)
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up before the capture
    torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=20, return_mode="median")

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
    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's results for its front page
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "61_cross_entropy_split_rows.csv"))

def environment_card():
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True).stdout.split("\n")[0] if shutil.which(smi[0]) else "?"
        card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__, "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

not_measured = lambda peer, why: print(f"{peer}: not measured here ({why}).")  # a peer this run cannot time
peers, no_graph = {"torch": F.cross_entropy}, set()
major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
if ON_GPU:  # on the CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # graphs are not captured on the default stream
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024  # one a shape, dtype
    peers["torch.compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    with contextlib.suppress(ImportError):
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        peers["Liger"], no_graph = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0], {"Liger"}
try:  # quack (Dao-AILab's CuTe-DSL kernels), from compute capability 9.0
    if major >= 9:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        peers["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
except Exception as err:  # not installed, or it does not load here
    not_measured("quack", "not installed" if isinstance(err, ImportError) else " ".join(str(err).split())[:100])
for peer in [p for p in ("torch.compile", "Liger") if p not in peers] + (["quack"] if major < 9 else []):
    not_measured(peer, "no GPU" if not ON_GPU else "not installed" if peer != "quack" else
                 f"needs compute capability 9.0 or newer; this GPU has {major}.{minor}")

# %%
# Does the split pay?
# -------------------
# Per dtype and :math:`V`: the light, kernels, drop-in and peers on the same tensors, forward and forward+backward.

records, missing = [], {}
for dtype in (torch.bfloat16, torch.float32):
    for n_cols in SWEEP_V:
        x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
        target, dx, nbytes = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE), torch.empty_like(x), x.numel() * x.element_size()
        light = {"forward": light_gbs(x, read_only=True), "forward+backward": light_gbs(x)}
        for direction, grad in (("forward", None), ("forward+backward", dx)):
            calls = {"core": lambda: core_rows(x, target, None, -100, True, grad)}  # the kernels through their launchers
            if grad is not None:  # the split writes gradients only
                calls["split"] = lambda: ce_split_rows(x, target, None, -100, True, grad)
            for name, fn in ({"ours": cross_entropy} | peers).items():  # the drop-in, called as the peers
                xg = (x.clone() if name == "Liger" else x).requires_grad_(grad is not None)  # Liger writes over its input
                calls[name] = lambda f=fn, v=xg: (torch.autograd.grad(f(v, target), v) if v.requires_grad
                                                  else f(v, target))
            for name, call in calls.items():
                try:
                    ms = bench(call, graph=name not in no_graph)
                except Exception as err:  # a peer's limit: the point is missing, and why is printed below
                    if name in ("core", "split", "ours"):
                        raise
                    why, ms = " ".join(f"{type(err).__name__}: {err}".split())[:120], float("nan")
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} V = {n_cols}")
                records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                                "GB/s": (2 if grad is not None else 1) * nbytes / ms * 1e-6, "light": light[direction]})
        x = target = dx = calls = xg = grad = None
        torch.cuda.empty_cache() if ON_GPU else None
for (name, why), points in missing.items():
    not_measured(name, f"{why}; at {', '.join(points)}")
# GB/s (higher is better); ours as % of light and against the fastest peer, the split kernel against the core:
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of speed of light"] = 100 * results["GB/s"] / results.light
table = results.pivot(index=keys, columns="provider", values="GB/s")[["core", "split", "ours", *peers]]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["split / core"] = table["split"] / table["core"]
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
save_results(table)
formats = {"ours, % of light": "{:.1f}%", "split / core": "{:.2f}x", "ours / best peer": "{:.2f}x"}
table.style.format({c: "{:.0f}" for c in table.columns} | formats, na_rep="-") if ON_GPU else print(NO_GPU)

# %%
# As a plot, each provider as % of light:

fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, layout="constrained")
for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
    for name, line in part.groupby("provider", sort=False):
        ax.semilogx(line.N, line["% of speed of light"], "o-" if name in ("core", "split", "ours") else "o--", base=2, label=name)
    ax.axhline(100, color="black", label="speed of light")
    ax.set(title=f"{direction}, {dtype}", ylabel="% of light", xlabel="vocabulary V")
    ax.legend(fontsize=7)
_ = fig.suptitle(f"Cross-entropy, rows split across programs, on {WHERE}")

# %%
# Reading the numbers
# -------------------
print(NO_GPU) if not ON_GPU else None
for (direction, dtype), part in table.groupby(level=["direction", "dtype"], sort=False) if ON_GPU else ():
    ours, peer, split, of = part["ours, % of light"], part["ours / best peer"].dropna(), part["split / core"].dropna(), \
        "a read pass" if direction == "forward" else "a copy"
    print(f"{direction}, {dtype}: the drop-in at {ours.min():.3g}-{ours.max():.3g}% of {of}, {peer.min():.2f}x to "
          f"{peer.max():.2f}x the fastest peer" + (f"; the split {split.min():.2f}x to {split.max():.2f}x the core" if len(split) else "") + ".")

# %%
# Going further
# -------------
# **Label smoothing** needs one more share a slice, :math:`\sum_c w_c (m_k - x_c)`: a second flag word. **Clusters**:
# quack exchanges the shares through a cluster's shared memory, not exposed by Triton. **Exercise**: ``SLICE_N`` 2048?

environment_card()
