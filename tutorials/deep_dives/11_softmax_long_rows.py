"""
Softmax, long rows: one row split across programs
=================================================

Past 32 K columns (16 K backward) a row no longer fits in the registers of one program of the core page
(:ref:`sphx_glr_tutorials_01_fused_softmax.py`). *Online softmax* streams it, reading it twice; here programs
then share the row and wait for each other: it is read once. **What you will learn**: how programs
exchange partial statistics through flag words without a fence; why a group's programs must all be on
the GPU at once (the grid sized from the compiled kernel's occupancy); how publishing one row ahead (a
*lookahead*) shortens the wait; where the launch parameters live (``_split_config``). Measured against
the core kernels and peers, N = 32 K to 256 K, both directions, fp32 and bf16.
"""

import ctypes, datetime, importlib.util, os, platform, timeit, warnings
import torch, torch.utils.collect_env as collect_env
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The kernels we start from
# -------------------------
# Carried from the core page: the fused forward (rows up to 32 K in registers). Past it, the online kernels,
# one row a program, keep a running maximum :math:`m` and sum :math:`s`, rescaled as the maximum grows
# (:math:`s' = s \, e^{m - m'} + \sum_{\text{chunk}} e^{x_i - m'}`), then reread the row from L2.

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

@triton.jit
def softmax_fwd_online_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                              BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)  # running max, per lane
        s = tl.zeros([BLOCK_N], tl.float32)  # running sum of exp(x - m), per lane
        for chunk in range(0, n_chunks):
            offs = chunk * BLOCK_N + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"),
                        eviction_policy="evict_last").to(tl.float32)  # keep it in L2 for pass 2
            m_new = tl.maximum(m, x)
            # A lane that has seen only -inf keeps m = -inf; shift by 0 there so that
            # exp(-inf - (-inf)) = NaN never appears. A real NaN or +inf in the row still gives NaN.
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.exp(x - shift)
            m = m_new
        row_max = tl.max(m, axis=0)
        shift = tl.where(row_max == -float("inf"), 0.0, row_max)
        inv_sum = 1.0 / tl.sum(s * tl.exp(m - shift), axis=0)
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * BLOCK_N + cols  # backwards: the last chunks are in L2
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"),
                        eviction_policy="evict_first").to(tl.float32)  # last use
            y = tl.exp(x - shift) * inv_sum
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n_cols,
                     cache_modifier=".cs")  # streaming store: do not push rows out of L2

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

def core_launch(direction, args, n_rows, n_cols, element_size):
    """(kernel, grid, meta) without a split: the core page's fused forward up to 32 K, else the online kernels."""
    if direction == "forward" and n_cols <= 32768:
        block_n = triton.next_power_of_2(n_cols)  # the core page's _fused_config
        block_m = max(1, 4096 // block_n)
        num_warps = min(32, max(4, block_m * block_n // (32 * (32 // element_size))))
        return softmax_fwd_kernel, triton.cdiv(n_rows, block_m), dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    online = softmax_fwd_online_kernel if direction == "forward" else softmax_bwd_online_kernel
    return online, n_rows, dict(BLOCK_N=16384, num_warps=32)  # _online_config (backward rows here: past the fused 16 K)

# %%
# Long rows read once: one row shared by several programs
# -------------------------------------------------------
# ``SLICES`` programs (a *group*) share each row, each holding a slice of ``BLOCK_N`` columns in
# registers, loaded once. Row statistics need every slice: each program publishes its share in global
# memory, waits for the others', and combines the ``SLICES`` shares itself. Forward, the slices' maxima
# :math:`m_k` and sums :math:`s_k = \sum e^{x - m_k}` combine as in the online softmax, across programs:
#
# .. math::
#
#    m = \max_k m_k, \qquad s = \sum_k s_k \, e^{m_k - m}, \qquad y = e^{x - m_k} \cdot e^{m_k - m} / s .
#
# Backward, one per slice: its share of :math:`\sum_j y_j \, dy_j`, combined in a fixed order (bitwise
# deterministic). Group ``g`` of ``G`` walks rows ``g``, ``g + G``, ..., loading the next row before it
# waits.
#
# **How a program waits.** A share is one 64-bit *flag word*, atomically exchanged into a buffer cleared
# before the launch; the waiting program re-reads the row's words (``volatile``: past L1 and its stale
# line) until all are written. Backward, a "written" bit sits above the share's fp32 bits. Forward,
# :math:`m_k` and :math:`s_k` fill the two halves; "not written" is all ones, which no written word is
# (its upper half would be a NaN, and a NaN maximum is written as ``0x7FC00000``). The value travels in
# the word saying it is there: no fence (a release/acquire counter per row measured slower at every
# width and warp count tried).
#
# **Why every program must be on the GPU at once.** A program waiting for one that is not running could
# hold the SM that one needs, forever. So the launcher sizes the grid from the occupancy of the version
# Triton compiles for the call's own tensors (another dtype or stride can take other registers), fits
# every group at once, and falls back to the core kernels when one group cannot. (quack, on Hopper, has
# hardware for it: a *cluster* of thread blocks sharing statistics through distributed shared memory.
# Triton exposes neither: here the barrier is a loop reading words another SM writes, a round trip
# through L2 per row.) Under the interpreter (one program at a time) a row has one slice.

@triton.jit
def slice_shares(x):
    """A slice's exponentials and its flag word: its maximum m_k (a NaN as the one canonical NaN, never
    all ones) in the upper half, its sum s_k of exp(x - m_k) in the lower half."""
    m = tl.max(x, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)  # a slice of -inf only: no exp(-inf - (-inf))
    e = tl.exp(x - shift)
    s = tl.sum(e, axis=0)
    m_bits = tl.where(m != m, 0x7FC00000, m.to(tl.int32, bitcast=True))
    word = (m_bits.to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    return m, e, word

@triton.jit
def load_slice(x_ptr, row, n_rows, x_row_stride, cols, n_cols):
    """This slice of a row, in its own dtype; past the last row nothing is loaded (cols < 0 masks all)."""
    return tl.load(x_ptr + tl.cast(row, tl.int64) * x_row_stride + cols,
                   mask=cols < tl.where(row < n_rows, n_cols, 0), other=-float("inf"))

@triton.jit
def slice_scale(words, m):
    """From the group's flag words and this slice's maximum m: the factor that turns the slice's
    exp(x - m) into y = exp(x - row_max) / row_sum, the slices combined in slice order."""
    m_k = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    s_k = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    row_max = tl.max(m_k, axis=0)
    row_shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(s_k * tl.exp(m_k - row_shift), axis=0)  # a NaN or +inf anywhere: NaN, as in torch
    # e * exp(m - row_max) <= 1: the exp(x - m) a slice holds, rescaled to the row's maximum
    return tl.where(m == -float("inf"), 0.0, tl.exp(m - row_shift)) / row_sum

@triton.jit
def softmax_fwd_split_kernel(x_ptr, y_ptr, flags_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                             SLICES: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program p is slice p % SLICES of group p // SLICES; group g does rows g, g + G, ... (G groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    x_next = load_slice(x_ptr, group, n_rows, x_row_stride, cols, n_cols)
    for row in tl.range(group, n_rows, n_groups):
        x = x_next.to(tl.float32)
        next_row = row + n_groups  # its loads are in flight while this row waits
        x_next = load_slice(x_ptr, next_row, n_rows, x_row_stride, cols, n_cols)
        m, e, word = slice_shares(x)  # this slice's shares: its maximum and its sum of exp(x - m)
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols,
                 (e * slice_scale(words, m)).to(y_ptr.dtype.element_ty), mask=col_ok)

@triton.jit
def softmax_bwd_split_kernel(y_ptr, dy_ptr, dx_ptr, flags_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                             SLICES: tl.constexpr, BLOCK_N: tl.constexpr):
    """The backward's groups walk the rows as the forward's do; one share per slice: sum(y * dy)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    first = cols < tl.where(group < n_rows, n_cols, 0)
    y_next = tl.load(y_ptr + tl.cast(group, tl.int64) * y_row_stride + cols, mask=first, other=0.0)
    dy_next = tl.load(dy_ptr + tl.cast(group, tl.int64) * dy_row_stride + cols, mask=first, other=0.0)
    for row in tl.range(group, n_rows, n_groups):
        y, dy = y_next.to(tl.float32), dy_next.to(tl.float32)
        next_row = row + n_groups
        in_range = cols < tl.where(next_row < n_rows, n_cols, 0)
        y_next = tl.load(y_ptr + tl.cast(next_row, tl.int64) * y_row_stride + cols, mask=in_range, other=0.0)
        dy_next = tl.load(dy_ptr + tl.cast(next_row, tl.int64) * dy_row_stride + cols, mask=in_range, other=0.0)
        mine = tl.sum(y * dy, axis=0)  # this slice's share of the row's dot product
        word = (mine.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | 0x100000000  # "written"
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.min(words >> 32, axis=0) == 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        dot = tl.sum((words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), axis=0)
        dx = y * (dy - dot)
        tl.store(dx_ptr + tl.cast(row, tl.int64) * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty),
                 mask=col_ok)

# %%
# Waiting less: a lookahead of one row
# ------------------------------------
# Above, a program publishes its share of a row and at once waits for *that row's* shares: a round trip
# through L2 per row, issuing nothing meanwhile. The lookahead first publishes its shares of the group's
# *next* row (loaded a row earlier), then waits for this row's, which the other slices published a row
# earlier: usually there already. Same combination order, same bits. The price is registers (two rows'
# exponentials in fp32, the loads of the row after next), so fewer programs per SM hide each wait:
# ``_split_config`` turns it on where it measured faster. The ``SLICES`` flag words, a tile smaller than
# the program, are held in one copy per group of threads; a copy still unwritten after the loop is read
# once more.

@triton.jit
def softmax_fwd_lookahead_kernel(x_ptr, y_ptr, flags_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                                 SLICES: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program p is slice p % SLICES of group p // SLICES; group g does rows g, g + G, ... (G groups).
    Each program publishes its shares of the group's *next* row before it waits for this row's."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    slots = tl.arange(0, SLICES)
    # The first row's shares, published before the loop; the second row's loads in flight. (Names used
    # in the loop are not reused here: Triton would carry them around the loop.)
    x_first = load_slice(x_ptr, group, n_rows, x_row_stride, cols, n_cols)
    m_first, e_first, word = slice_shares(x_first.to(tl.float32))
    x_next = load_slice(x_ptr, group + n_groups, n_rows, x_row_stride, cols, n_cols)
    tl.atomic_xchg(flags_ptr + group * SLICES + part, word, mask=group < n_rows, sem="relaxed")
    m, e = m_first, e_first
    for row in tl.range(group, n_rows, n_groups):
        # the row after next: its loads are in flight while this row waits and is written
        x_after = load_slice(x_ptr, row + 2 * n_groups, n_rows, x_row_stride, cols, n_cols)
        # the next row's shares, published before waiting for this row's (which the group's other
        # programs published one row earlier, so the wait is mostly over before it starts)
        next_row = row + n_groups
        m_next, e_next, word = slice_shares(x_next.to(tl.float32))
        tl.atomic_xchg(flags_ptr + next_row * SLICES + part, word, mask=next_row < n_rows, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:  # some slice has not written yet
            words = tl.load(flags_ptr + row * SLICES + slots, volatile=True)
        # The test above may have been decided on another warp's copy of the words (a tile smaller than
        # the program is held once per group of threads): a copy still unwritten is read again, once.
        stale = words == -1
        words = tl.where(stale, tl.load(flags_ptr + row * SLICES + slots, mask=stale, other=-1, volatile=True),
                         words)
        tl.store(y_ptr + tl.cast(row, tl.int64) * y_row_stride + cols,
                 (e * slice_scale(words, m)).to(y_ptr.dtype.element_ty), mask=col_ok)
        m, e, x_next = m_next, e_next, x_after

# %%
# Launch parameters, and a grid that fits at once
# -----------------------------------------------
# ``_split_config`` is the one place to change. Small programs won the sweep on Hopper (dev/DESIGN.md):
# 2 to 4 warps, 32 to 64 values of a row per thread, as many per SM as registers allow, so while one
# waits others load and store; for bf16 from 32 K on, where the core's one 32-warp program per SM cannot
# overlap its phases (at 32 K a staged kernel is faster where it runs:
# :ref:`sphx_glr_tutorials_deep_dives_12_softmax_staged_gluon.py`). The grid: as many whole groups as
# fit at once, no more than the fewest rows per group needs (1024 rows, room for 33: 32 groups of 32).

def _split_config(direction, element_size):
    """The split kernels' entry (2: fp16/bf16, 4: fp32), or None: rows of MIN_N columns or more in slices of
    about SLICE_N columns, num_warps warps each; at most PER_SM programs per SM where set; LOOKAHEAD (forward)."""
    return {("forward", 2): dict(MIN_N=32768, SLICE_N=8192, num_warps=4),
            ("forward", 4): dict(MIN_N=65536, SLICE_N=2048, num_warps=2, LOOKAHEAD=True),
            ("backward", 2): dict(MIN_N=65536, SLICE_N=4096, num_warps=4),
            ("backward", 4): dict(MIN_N=65536, SLICE_N=4096, num_warps=4)}.get((direction, min(element_size, 4)))

# The N this launcher is for, where the site's landing page recommends it: rows longer than the core page's range
# (forward 32 K, backward 16 K; split from MIN_N on, the online kernels below it); 2**31: no last
RANGE = {(d, t): range((32768 if d == "forward" else 16384) + 1, 2**31) for d in ("forward", "backward")
         for t in ("float32", "bfloat16")}

_occupancy = {}  # (kernel, argument types, meta) -> (programs per SM, what limits it, registers)
def driver_occupancy(compiled, threads, smem):
    """Programs of this compiled kernel per SM by CUDA's occupancy calculator; inf if it cannot say."""
    try:
        count = ctypes.c_int()
        error = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(count), ctypes.c_void_p(compiled.function), ctypes.c_int(threads), ctypes.c_size_t(smem))
        return count.value if error == 0 else float("inf")
    except (OSError, AttributeError, TypeError):
        return float("inf")

def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once, what limits it, its registers."""
    # Triton compiles one version per dtype of each argument and per integer that is 1 or a multiple of
    # 16 (and per pointer aligned to 16 bytes): the key tells those versions apart.
    key = (kernel, tuple(a.dtype if isinstance(a, torch.Tensor) else (a == 1, a % 16 == 0) for a in args),
           tuple(sorted(meta.items())))
    if key not in _occupancy and not ON_GPU:  # the interpreter runs programs one after another
        _occupancy[key] = (1, "interpreter", 0)
    if key not in _occupancy:
        props, threads = torch.cuda.get_device_properties(DEVICE), 32 * meta["num_warps"]
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        n_regs, smem = max(compiled.n_regs, 1), compiled.metadata.shared
        regs_per_warp = triton.cdiv(n_regs * 32, 256) * 256  # registers are handed out in blocks of 256 per warp
        limits = {"threads": props.max_threads_per_multi_processor // threads,
                  "registers": getattr(props, "regs_per_multiprocessor", 65536) // regs_per_warp // meta["num_warps"],
                  "shared memory": (getattr(props, "shared_memory_per_multiprocessor", 233472) // smem) if smem else 32,
                  "driver": driver_occupancy(compiled, threads, smem)}  # CUDA's own count; on a tie, the others
        limit = min(limits, key=limits.get)
        _occupancy[key] = (max(1, limits[limit]), limit, n_regs)
    return _occupancy[key]

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4

def split_plan(direction, n_cols, element_size, split=None):
    """(meta-parameters, programs per SM wanted, lookahead or not) of the split kernel, or None where
    it is not used. ``split`` replaces ``_split_config``: a table {(direction, size): entry}, {} for none."""
    cfg = _split_config(direction, element_size) if split is None else split.get((direction, min(element_size, 4)))
    if cfg is None or n_cols < cfg["MIN_N"]:
        return None
    # the interpreter runs one program at a time: a program must never wait for another
    slices = triton.next_power_of_2(triton.cdiv(n_cols, cfg["SLICE_N"])) if ON_GPU else 1
    meta = dict(SLICES=slices, BLOCK_N=triton.next_power_of_2(triton.cdiv(n_cols, slices)), num_warps=cfg["num_warps"])
    return meta, cfg.get("PER_SM"), cfg.get("LOOKAHEAD", False)

def split_flags(direction, n_rows, meta, device):
    """Flag words, one per slice of each row, cleared to "not written" (forward: all ones; backward: 0)."""
    return torch.full((n_rows * meta["SLICES"],), -1 if direction == "forward" else 0, dtype=torch.int64, device=device)

def split_grid(kernel, args, meta, per_sm, n_rows):
    """Programs of the split kernel: whole groups, all on the GPU at once (they wait for each other), from
    the occupancy of the version compiled for these very arguments, at most per_sm per SM if set; 0 if a
    group cannot fit."""
    fit = programs_per_sm(kernel, args, meta)[0]
    most = min(fit, per_sm or fit) * NUM_SMS // meta["SLICES"]
    # as many groups as the fewest rows per group needs: then every group walks as many rows
    return triton.cdiv(n_rows, triton.cdiv(n_rows, most)) * meta["SLICES"] if most > 0 else 0

def launch(direction, tensors, split=None, n_rows=None):
    """(kernel, grid, args, meta) of y = softmax(x) (tensors x, y) or of dx (y, dy, dx), 2-D, unit-stride
    rows: split where ``split_plan`` says and a group fits at once, else core_launch's kernels."""
    rows, n_cols = tensors[0].shape
    n_rows = rows if n_rows is None else n_rows
    sizes = (rows, n_cols, *(t.stride(0) for t in tensors))
    plan = split_plan(direction, n_cols, tensors[0].element_size(), split)
    if plan is not None:
        meta, per_sm, lookahead = plan
        kernel = {"forward": softmax_fwd_lookahead_kernel if lookahead else softmax_fwd_split_kernel,
                  "backward": softmax_bwd_split_kernel}[direction]
        stand_in = torch.empty(1, dtype=torch.int64, device=tensors[0].device)  # compiles as the real flags
        grid = split_grid(kernel, (*tensors, stand_in, *sizes), meta, per_sm, n_rows)
        if grid > 0:
            return kernel, grid, (*tensors, split_flags(direction, rows, meta, tensors[0].device), *sizes), meta
    kernel, grid, meta = core_launch(direction, (*tensors, *sizes), n_rows, n_cols, tensors[0].element_size())
    return kernel, grid, (*tensors, *sizes), meta

KERNEL_NAMES = {softmax_fwd_kernel: "fused (core)", softmax_fwd_online_kernel: "online (core)",
                softmax_bwd_online_kernel: "online (core)", softmax_fwd_split_kernel: "split",
                softmax_bwd_split_kernel: "split", softmax_fwd_lookahead_kernel: "split, lookahead"}

def softmax_rows(direction, tensors, split=None):
    """Forward, tensors (x, y): y = softmax(x) along dim 1; backward, (y, dy, dx): dx = y * (dy - rowsum(y * dy)).
    Returns the name of the kernel that ran."""
    kernel, grid, args, meta = launch(direction, tensors, split)
    kernel[(grid,)](*args, **meta)
    return KERNEL_NAMES[kernel]

def plan(direction, dtype, n_cols):
    """What the split launcher runs on rows of n_cols, and what the compiled kernel says (on a GPU)."""
    x = torch.empty((16, n_cols), device=DEVICE, dtype=getattr(torch, dtype))  # 16 rows compile as the real ones
    kernel, grid, args, meta = launch(direction, (x,) * (2 if direction == "forward" else 3), n_rows=2**26 // n_cols)
    per_sm, limit, n_regs = programs_per_sm(kernel, args, meta)
    return {"kernel": KERNEL_NAMES[kernel], "SLICES": meta.get("SLICES", 1), "num_warps": meta["num_warps"],
            "registers": n_regs if ON_GPU else "-", "programs / SM": per_sm if ON_GPU else "-", "limited by": limit}

# %%
# Correctness
# -----------
# Against float64: :math:`\lVert out - ref \rVert / \lVert ref \rVert` forward and backward, outputs
# poisoned with NaN first, run twice (the same bits every run), next to PyTorch's error in the same dtype.

CHECK = [(33, 32768), (16, 65536), (7, 100_003), (4, 262_144)] if ON_GPU else [(2, 32800), (2, 70_001)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings (bf16: the interpreter truncates)

def check(shape, dtype):
    torch.manual_seed(shape[1])
    x, dy = torch.randn(shape, device=DEVICE, dtype=dtype) * 4, torch.randn(shape, device=DEVICE, dtype=dtype)
    y64 = torch.softmax(x.double(), -1)
    dx64 = y64 * (dy.double() - (y64 * dy.double()).sum(-1, keepdim=True))
    y, dx, again = (torch.full_like(x, float("nan")) for _ in range(3))
    ran = softmax_rows("forward", (x, y)), softmax_rows("backward", (y, dy, dx)), softmax_rows("backward", (y, dy, again))
    err, ty = lambda out, ref: ((out.double() - ref).norm() / ref.norm()).item(), torch.softmax(x, -1)
    return {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "forward": ran[0], "backward": ran[1],
            "ours fwd": err(y, y64), "ours bwd": err(dx, dx64), "torch fwd": err(ty, y64),
            "torch bwd": err(torch._softmax_backward_data(dy, ty, -1, dtype), dx64), "repeatable": torch.equal(dx, again)}

errors = pd.DataFrame([check(s, d) for d in (torch.float32, torch.bfloat16, torch.float16) for s in CHECK])
assert (errors[["ours fwd", "ours bwd"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all() and errors.repeatable.all(), errors
errors.style.format({c: "{:.1e}" for c in errors.columns if c.endswith(("fwd", "bwd"))}).hide(axis="index")

# %%
# Does the split pay?
# -------------------
# :math:`M \times N = 2^{26}` elements on a GPU, where ``_split_config`` splits in either direction,
# timed as on the core page (CUDA-graph replays, L2 flushed, next to a copy of the same tensor; the
# peers through autograd, as in training). *core* is the launch without a split (online, or the core's
# fused forward up to 32 K), *split* the launcher above, *no lookahead* the same slices without it where it is on. The last
# columns: what the split launcher ran (the core's kernel where it does not split) and what the
# compiled kernel reports. The peers: PyTorch, ``torch.compile``, Liger-Kernel and quack (``quack.softmax``,
# CuTe-DSL kernels for compute capability 9.0 and newer, with clusters for long rows); "-": a peer's limit.

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**15
WIDTHS = {torch.float32: [32768, 65536, 131072, 262144], torch.bfloat16: [32768, 65536, 131072, 262144]} if ON_GPU \
    else {torch.float32: [65536], torch.bfloat16: [32768, 65536]}
NO_LOOKAHEAD = {(d, s): dict(_split_config(d, s), LOOKAHEAD=False) for d in ("forward", "backward") for s in (2, 4)}
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."

def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here (quack's CUDA DSL, say)
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
fns = {"torch": lambda t: torch.softmax(t, dim=-1)}  # name -> softmax along the last dim: the peers that run here
inductor = peer_module("torch.compile", "torch")  # on the CPU, Inductor would time a C++ compiler here, not a GPU
liger = peer_module("Liger-Kernel", "liger_kernel.ops.softmax")
quack = peer_module("quack", "quack", min_major=9)  # Dao-AILab's CuTe-DSL kernels
torch.cuda.set_stream(torch.cuda.Stream()) if ON_GPU else None  # a CUDA graph cannot be captured on the default stream
if inductor:
    warnings.filterwarnings("ignore", message="Online softmax is disabled")  # Inductor's note on long rows
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda t: torch.softmax(t, dim=-1), dynamic=False)
fns |= ({"Liger": liger.LigerSoftmaxFunction.apply} if liger else {}) | ({"quack": quack.softmax} if quack else {})

def bench(fn, graph=True):
    """Median ms of one fn(): on a GPU, CUDA-graph replays timed by do_bench; on the CPU, a wall clock."""
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")

OURS = {"core": {}, "split": None, "no lookahead": NO_LOOKAHEAD}  # the split table each launch is given

records, missing = [], {}
for dtype, widths in WIDTHS.items():
    for n_cols in widths:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        dy, out, nbytes = torch.randn_like(x), torch.empty_like(x), x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        reference = torch.softmax(x.float(), dim=-1)
        xg, y_ref = x.detach().requires_grad_(True), reference.to(dtype)  # peers: both directions as in training
        for name, fn in [*fns.items(), *dict.fromkeys(OURS).items()]:
            for direction, moved in (("forward", 2 * nbytes), ("backward", 3 * nbytes)):
                if name == "no lookahead" and not (split_plan(direction, n_cols, x.element_size()) or (0, 0, False))[2]:
                    continue  # the lookahead is off here: the same kernel as "split"
                try:
                    if name in OURS:  # the launcher itself, on the tensors an autograd wrapper would give it
                        tensors = (x, out) if direction == "forward" else (y_ref, dy, out)
                        call = lambda: softmax_rows(direction, tensors, OURS[name])
                    else:
                        y = fn(xg)
                        call = (lambda: fn(xg)) if direction == "forward" else \
                            (lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
                    gbs = moved / bench(call) * 1e-6
                    if direction == "forward":
                        torch.testing.assert_close((out if name in OURS else y).float(), reference, atol=1e-2, rtol=1e-2)
                except Exception as err:  # a peer's limit (Liger stops at 65536; quack has its own): the point is missing
                    if name in OURS or (name != "quack" and "exceeds" not in str(err)):
                        raise
                    why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                    missing.setdefault((name, why), []).append(f"{direction} {str(dtype)[6:]} N = {n_cols}")
                    gbs = float("nan")
                records.append({"direction": direction, "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                                "GB/s": gbs, "speed of light GB/s": light, "% of light": 100 * gbs / light})
                y = None
        del x, xg, dy, out, reference, y_ref
for (name, why), points in missing.items():  # once per peer and reason
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)
keys = ["direction", "dtype", "N"]
table = results.set_index(keys + ["provider"])["GB/s"].unstack("provider").reindex(["forward", "backward"], level=0)
table = table[[p for p in [*fns, *OURS] if p in table.columns]]
table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
table["split, % of light"] = 100 * table["split"] / table["speed of light"]
table["split / core"] = table["split"] / table["core"]
table["split / best peer"] = table["split"] / table[[p for p in ("torch", "torch.compile", "Liger", "quack") if p in table]].max(axis=1)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["split, % of light", "split / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "11_softmax_long_rows.csv"))
table = table.join(pd.DataFrame([plan(*key) for key in table.index], index=table.index))
table.style.format({c: "{:.0f}" for c in table.columns[:-6]} | {"split, % of light": "{:.1f}%",
                   "split / core": "{:.2f}", "split / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True, facecolor="white")
    styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "core": ":", "split": "-",
              "no lookahead": (0, (1, 1))}
    for (i, direction), (j, dtype) in [(d, t) for d in enumerate(["forward", "backward"]) for t in enumerate(["float32", "bfloat16"])]:
        ax, part = axes[i][j], results[(results.direction == direction) & (results.dtype == dtype)]
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of light"], linestyle=styles[name], marker="o", markersize=3,
                    linewidth=2.5 if name == "split" else 1.5, label=name)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", ylabel="% of the copy's GB/s" if j == 0 else None,
               xlabel="row length N (elements)" if i == 1 else None)
    axes[1][1].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Softmax, long rows, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

if ON_GPU:
    for (direction, dtype, n_cols), row in table.iterrows():
        text = (f"{direction}, {dtype}, N = {n_cols}: {row['kernel']} at {row['split, % of light']:.1f}% of the copy, "
                f"{row['split / core']:.2f}x the core kernel, {row['split / best peer']:.2f}x the best peer")
        print(text + (f"; {row['split'] / row['no lookahead']:.2f}x the same slices without the lookahead."
                      if pd.notna(row.get("no lookahead")) else "."))
    inside = table[[n in RANGE.get((d, t), ()) for d, t, n in table.index]]  # the N this page is recommended for
    short = inside[(inside["split, % of light"] < 95) | (inside["split / best peer"] < 0.99)]  # the site's bar: both
    print("Under 95% of the copy or 0.99x the best peer: " + ("; ".join(f"{d} {t} N = {n}" for d, t, n in short.index) or "no point"))
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# One wait per row remains; a cluster (quack, in CuTe-DSL) waits on a hardware barrier instead, and keeps
# the row in its blocks' shared memory. **Gaps, and what was tried** (this build's are the points named
# above). The bf16 forward's slices of 8192 columns, 4 warps, run 4 to an SM, capped by registers; tried on
# Hopper (``dev/DESIGN.md``): a lookahead, 16-bit values packed in words, streaming hints, 32 values a
# thread, a counter per row in place of flag words, 16-32-warp programs; none faster. Backward rows of
# 16 K-64 K take the online kernel, which beat the split up to 32 K; chunk sizes, warps and grids changed
# nothing at 64 K. Triton 3.6 cannot compile a reduction across a cluster's blocks (Gluon in Triton 3.9 can).
# **Exercise:** change ``_split_config`` and rerun the benchmark. Where the lookahead is off (bf16: two
# rows of fp32 exponentials cost programs per SM), can you hold the next row in 16 bits until its share
# is published? Programs per SM: :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.
#
# Where this page was made
# ------------------------

card = {"device": f"CPU only ({platform.machine()}, {os.cpu_count()} cores), no CUDA GPU",
        "driver / CUDA": "none: Triton's interpreter (TRITON_INTERPRET=1); the timings are NOT GPU timings"}
if ON_GPU:
    props, driver = torch.cuda.get_device_properties(DEVICE), collect_env.get_nvidia_driver_version(collect_env.run)
    card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
            "driver / CUDA": f"driver {driver or 'unknown (no nvidia-smi)'}, CUDA {torch.version.cuda}"}
card |= {"torch": torch.__version__, "Triton": triton.__version__, "Python": platform.python_version(), "built": BUILT,
         "packages": os.environ.get("SOL_LOCK", "not pinned")}
html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
type("Collapsed", (), {"_repr_html_": lambda self: html})()  # everything needed to judge this page's numbers, collapsed
