"""
Layer norm, wide rows in the forward: read x twice, or split the row
====================================================================

The core page (:ref:`sphx_glr_tutorials_02_layer_norm.py`) keeps each row in registers and reads :math:`x` once;
past 32 K columns it streams the row twice with this page's chunked kernel, which it carries. **What you will
learn**: why reading :math:`x` *twice* can beat reading it once, when the second read hits L2; how to split a row
over a group of programs that exchange partial statistics (Chan's formula), so a row too long for one program is
read once; and where each is chosen (``_twice_config``, ``_split_config``). Both are measured against the core
kernel and the peers where they run.
"""

import datetime, functools, importlib.util, os, platform, timeit
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
# The bytes, and the core kernel we start from
# --------------------------------------------
# A forward reads :math:`x` and writes :math:`y`, :math:`2MN` elements, a copy's bytes. Reading
# :math:`x` twice moves :math:`3MN`, but if L2 serves the second read, memory still sees :math:`2MN`.
# ``row_stats``, the core kernel's statistics as this page's kernels call them; the core page's fused forward (a
# program ``BLOCK_M`` whole rows, one read), its config and launch, letter for letter so this page runs alone; past
# ``MAX_FUSED_N`` columns the chunked kernel, which the core page launches there (the row streamed twice; the
# last chunks first the second time, ``eviction_policy`` asking L2 to keep or drop a load).

@triton.jit
def row_stats(x, x0, ok, n_cols, eps, BLOCK_N: tl.constexpr):
    """(x - mean, mean, rstd) of the rows of an fp32 tile (``ok``: real columns; x0: their first values). Times k,
    squares of deviations up to ~1e24 stay finite, rows of 1e-30 exact; past fp32's range, NaN (as torch's)."""
    k: tl.constexpr = 2.0**-16 / BLOCK_N
    x0 = x0.to(tl.float32) * k
    t = tl.where(ok, x * k - x0[:, None], 0.0)
    md = tl.sum(t, axis=1) / n_cols
    xc = tl.where(ok, t - md[:, None], 0.0)
    q = tl.sum(xc * xc, axis=1) / n_cols  # the variance times k**2
    rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))
    return xc * (1 / k), (x0 + md) / k, tl.where(q == 0, 1.0 / tl.sqrt(eps), rstd)  # q == 0: constant, as torch
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
MAX_FUSED_N = 32768  # the longest row held in registers: 32 fp32 a thread of 32 warps
def _fwd_config(n_rows, n_cols, element_size):
    block_m = max(1, min_tile_bytes() // ((block_n := triton.next_power_of_2(n_cols)) * element_size))
    big = (row := block_n * element_size) >= 65536  # rows of 64 KB or more: no L2 hint; of 64 KB, 64 values a thread
    warps = min(32, max(2, block_m * block_n // (32 * (64 if row == 65536 else 32))))  # a thread 32 values in fp32
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN=n_cols == block_n, EVICT="" if big else "evict_last",
                num_warps=warps), triton.cdiv(n_rows, block_m)
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

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4
_occupancy = {}

def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once (1 under the interpreter)."""
    # one compiled version per dtype, 16-byte alignment of pointers, integers equal to 1 or multiples of 16
    key = (kernel, tuple((a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                         else (a == 1, a % 16 == 0) if isinstance(a, int) else type(a) for a in args),
           tuple(sorted(meta.items())))
    if key not in _occupancy and not ON_GPU:
        _occupancy[key] = 1  # the interpreter runs programs one after another: any small grid will do
    if key not in _occupancy:
        props, threads = torch.cuda.get_device_properties(DEVICE), 32 * meta["num_warps"]
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        smem = compiled.metadata.shared
        _occupancy[key] = max(1, min(props.max_threads_per_multi_processor // threads,  # threads, registers, smem
                                     getattr(props, "regs_per_multiprocessor", 65536) // (max(compiled.n_regs, 1) * threads),
                                     getattr(props, "shared_memory_per_multiprocessor", 233472) // smem if smem else 32))
    return _occupancy[key]

def core_forward(x2d, y2d, weight, bias, mean, rstd, eps):
    """The core page's launch (its layer_norm_rows_forward) up to MAX_FUSED_N columns; the chunked kernel past."""
    if x2d.shape[1] > MAX_FUSED_N:  # one program per row, chunks of 16384 columns, 32 warps
        layer_norm_fwd_chunked_kernel[(len(x2d),)](
            x2d, y2d, *(x2d if t is None else t for t in (weight, bias)), mean, rstd, *x2d.shape, x2d.stride(0),
            y2d.stride(0), eps, HAS_W=weight is not None, HAS_B=bias is not None, CHUNK_N=16384, num_warps=32)
        return "chunked (core)", len(x2d)
    meta, grid = _fwd_config(*x2d.shape, x2d.element_size())
    layer_norm_fwd_kernel[(grid,)](x2d, y2d, x2d.new_ones(x2d.shape[1]) if weight is None else weight,
                                   x2d.new_zeros(x2d.shape[1]) if bias is None else bias, mean, rstd, *x2d.shape,
                                   x2d.stride(0), y2d.stride(0), eps, **meta)
    return "fused, one read (core)", grid

# %%
# Reading x twice
# ---------------
# A program holding a wide row across two reductions takes so many registers that few share an SM:
# while they reduce, little is on its way from memory. This kernel reads :math:`x` twice: first for
# the statistics, asking L2 to keep the row (``evict_last``), then for :math:`y`, letting it go
# (``evict_first``; :math:`y` goes out with ``.cs`` streaming stores). The second read costs L2
# bandwidth, not DRAM's, while the rows in flight fit in L2 (``torch.compile`` does the same). One row
# per program, no loop: a looping version measured far slower on Hopper, and so did :math:`w` and
# :math:`b` read with ``evict_last`` too (fp32 rows of 32 K). ``_twice_config`` says where.

@triton.jit
def layer_norm_fwd_twice_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)  # one row per program, no loop (see below)
    cols = tl.arange(0, BLOCK_N)[None, :]  # a tile of one row, as row_stats takes
    col_ok = cols < n_cols
    x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride  # one 64-bit base; 32-bit offsets from it
    y_row = y_ptr + tl.cast(row, tl.int64) * y_row_stride
    x = tl.load(x_row + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    _, mean, rstd = row_stats(x, tl.load(x_row + tl.zeros([1], tl.int32)), col_ok, n_cols, eps, BLOCK_N)
    # the row again, from L2, which may now let it go
    x = tl.load(x_row + cols, mask=col_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    y = (x - mean[:, None]) * rstd[:, None]
    y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32) if HAS_W else y
    y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32) if HAS_B else y
    tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok, cache_modifier=".cs")
    tl.store(mean_ptr + row + tl.zeros([1], tl.int32), mean)
    tl.store(rstd_ptr + row + tl.zeros([1], tl.int32), rstd)

def _twice_config(n_cols, element_size, force=False):
    """(BLOCK_N, num_warps) of the twice-reading kernel, or None where it does not pay (``force``: any row): on Hopper
    it beat one read for fp32 rows of 8192 to 32768 columns and 16-bit rows of 8192 and 16384 (16-bit rows of 32768
    measured slower). Change the ranges here. Warps: 64 bytes of x a thread, blocks of >= 4096 elements, 4 to 32."""
    low, high = {2: (8192, 16384), 4: (8192, 32768)}.get(min(element_size, 4), (0, -1))
    if not (force or low <= n_cols <= high):
        return None
    block_m = max(1, 4096 // (block_n := triton.next_power_of_2(n_cols)))
    return block_n, min(32, max(4, block_m * block_n * element_size // (32 * 64)))

# %%
# The same split for the forward
# ------------------------------
# Past ``MAX_FUSED_N`` the chunked kernel reads each row twice; split, it is read once.
# ``SLICES`` programs, a *group*, share each block of rows, each owning ``BLOCK_N`` columns and its
# slice of :math:`w` and :math:`b` in registers; an SM holds several, one loading while another stores.
# No slice can compute the row's mean and variance alone: each publishes its mean :math:`m_k` and standard
# deviation :math:`s_k` over its :math:`n_k` columns (``row_stats``'; a sum of squares could overflow fp32),
# and each program of the group combines them in slice order, scaled by a power of two (Chan's formula):
#
# .. math::
#
#    \mu = m_0 + \frac{1}{N} \sum_k n_k (m_k - m_0), \qquad
#    \sigma^2 = \frac{1}{N} \sum_k n_k \left( s_k^2 + (m_k - \mu)^2 \right).
#
# A share is one 64-bit *flag word* (:math:`m_k`'s bits above :math:`s_k`'s) exchanged into a buffer of
# ones; a program reads its rows' words until none is all ones. It publishes the *next* block's
# statistics before it waits for this block's, two blocks of loads in flight, so it rarely waits.
# Waiting is only safe if the whole group runs at once: the grid is sized from the compiled kernel's
# occupancy, and under the interpreter (one program at a time) a row has a single slice.

@triton.jit
def load_tile(ptr, rows, row_stride, units, unit_ok, n_rows, PACK: tl.constexpr):
    """Rows ``rows`` of a slice (zeros past n_rows): [BLOCK_M, BLOCK_N] elements, or with PACK the
    [BLOCK_M, BLOCK_N // 2] 32-bit words that hold them two by two (``units`` count words then)."""
    ok = (rows < n_rows)[:, None] & unit_ok[None, :]
    rows = rows.to(tl.int64)
    if PACK:
        words = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        tile = tl.load(words + rows[:, None] * (row_stride // 2) + units[None, :], mask=ok, other=0)
    else:
        tile = tl.load(ptr + rows[:, None] * row_stride + units[None, :], mask=ok, other=0.0)
    return tile

@triton.jit
def unpack(tile, dtype: tl.constexpr, PACK: tl.constexpr):
    """A loaded tile as [BLOCK_M, BLOCK_N] fp32 values, in column order."""
    if PACK:  # the low half of a word is the even column (little-endian)
        if dtype == tl.bfloat16:  # a bf16 is the top half of an fp32
            lo = (tile << 16).to(tl.float32, bitcast=True)
            hi = (tile & -65536).to(tl.float32, bitcast=True)
        else:
            lo = tile.to(tl.int16).to(dtype, bitcast=True).to(tl.float32)
            hi = (tile >> 16).to(tl.int16).to(dtype, bitcast=True).to(tl.float32)
        values = tl.reshape(tl.join(lo, hi), [tile.shape[0], 2 * tile.shape[1]])
    else:
        values = tile.to(tl.float32)
    return values

@triton.jit
def store_tile(ptr, rows, row_stride, units, ok, values, PACK: tl.constexpr):
    """Stores [BLOCK_M, BLOCK_N] values in the dtype of ``ptr``, two by two in 32-bit words with PACK."""
    values = values.to(ptr.dtype.element_ty)
    if PACK:
        lo, hi = tl.split(tl.reshape(values, [values.shape[0], values.shape[1] // 2, 2]))
        word = (lo.to(tl.int16, bitcast=True).to(tl.int32) & 65535) | (hi.to(tl.int16, bitcast=True).to(tl.int32) << 16)
        words = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        tl.store(words + rows[:, None] * (row_stride // 2) + units[None, :], word, mask=ok)
    else:
        tl.store(ptr + rows[:, None] * row_stride + units[None, :], values, mask=ok)

@triton.jit
def publish_shares(shares_ptr, counter_ptr, block, n_blocks, n_rows, rows, row_ok, part, s1, s2,
                   SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """This slice's two shares of each row in one flag word (FLAG_WORDS is always True here)."""
    hi = s1.to(tl.int32, bitcast=True)
    hi = tl.where(hi == -1, 0x7FC00000, hi)  # the one NaN whose bits are all ones -> the quiet NaN
    word = (hi.to(tl.int64) << 32) | (s2.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")

@triton.jit
def wait_for_slices(shares_ptr, counter_ptr, block, n_rows, rows, SLICES: tl.constexpr, SLOTS: tl.constexpr,
                    FLAG_WORDS: tl.constexpr):
    """Every slice's two shares of the rows of ``block``, as two [BLOCK_M, SLOTS] tiles, once all are in."""
    slot = tl.arange(0, SLOTS)
    slots = shares_ptr + rows[:, None] * SLICES + slot[None, :]
    mine = (slot < SLICES)[None, :]
    words = tl.load(slots, mask=mine, other=0, volatile=True)
    while tl.max((words == -1).to(tl.int32)) > 0:  # some slice has not written yet
        words = tl.load(slots, mask=mine, other=0, volatile=True)
    # A tile smaller than the program is held in several copies, one per group of warps, and the test
    # above may be decided on another warp's copy: a copy still unwritten here is read again, once.
    stale = mine & (words == -1)
    words = tl.where(stale, tl.load(slots, mask=stale, other=0, volatile=True), words)
    t1 = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    t2 = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    return t1, t2

@triton.jit
def pow2_scale(m):  # for the split's shares: past 2**40, 2**(147 - e) for m < 2**(e - 126) and its inverse, exact
    e = m.to(tl.int32, bitcast=True) >> 23
    return (tl.where(m > 2.0**40, ((274 - e) << 23).to(tl.float32, bitcast=True), 1.0),
            tl.where(m > 2.0**40, ((e - 20) << 23).to(tl.float32, bitcast=True), 1.0))
@triton.jit
def publish_stats(shares_ptr, x_ptr, x_row_stride, rows, n_rows, part, tile, count, col_ok, SLICES: tl.constexpr,
                  PACK: tl.constexpr, BLOCK_N: tl.constexpr):
    """This slice's mean and standard deviation of each row of ``rows``, over its ``count`` columns,
    published in its flag word (rows past the end publish nothing; an empty slice: 0, 0)."""
    row_ok, rows = rows < n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64)
    x0 = tl.load(x_ptr + rows * x_row_stride + part * BLOCK_N, mask=rows * 0 + count > 0, other=0.0)  # first values
    _, m, r = row_stats(unpack(tile, x_ptr.dtype.element_ty, PACK), x0, col_ok[None, :], tl.maximum(count, 1.0), 0.0,
                        BLOCK_N)
    publish_shares(shares_ptr, shares_ptr, 0, 0, n_rows, rows, row_ok, part, m, 1.0 / r, SLICES, True)  # r: 1 / s_k

@triton.jit
def layer_norm_fwd_split_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, shares_ptr,
    n_rows, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr, PACK: tl.constexpr,
    EVEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups)."""
    pid, n_blocks = tl.program_id(0), tl.cdiv(n_rows, BLOCK_M)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.full([BLOCK_N], 1.0, tl.float32)
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.zeros([BLOCK_N], tl.float32)
    if HAS_B:
        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    count = tl.minimum(tl.maximum(n_cols - part * BLOCK_N, 0), BLOCK_N).to(tl.float32)  # this slice's columns
    slot = tl.arange(0, SLOTS)
    counts = tl.minimum(tl.maximum(n_cols - slot * BLOCK_N, 0), BLOCK_N).to(tl.float32)  # every slice's
    first = group * BLOCK_M + tl.arange(0, BLOCK_M)
    x_this = load_tile(x_ptr, first, x_row_stride, units, unit_ok, n_rows, PACK)
    x_next = load_tile(x_ptr, first + n_groups * BLOCK_M, x_row_stride, units, unit_ok, n_rows, PACK)
    publish_stats(shares_ptr, x_ptr, x_row_stride, first, n_rows, part, x_this, count, col_ok, SLICES, PACK, BLOCK_N)
    for block in tl.range(group, n_blocks, n_groups):
        after = (block + 2 * n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_after = load_tile(x_ptr, after, x_row_stride, units, unit_ok, n_rows, PACK)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        publish_stats(shares_ptr, x_ptr, x_row_stride, next_rows, n_rows, part, x_next, count, col_ok, SLICES, PACK,
                      BLOCK_N)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok, rows = rows < n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64)
        m_k, s_k = wait_for_slices(shares_ptr, shares_ptr, block, n_rows, rows, SLICES, SLOTS, True)
        sc, inv = pow2_scale(tl.max(tl.maximum(tl.abs(m_k), s_k), axis=1))  # the shares' size: squares stay finite
        m_k, s_k = m_k * sc[:, None], s_k * sc[:, None]
        m_0 = tl.sum(tl.where(slot[None, :] == 0, m_k, 0.0), axis=1)  # relative to m_0, a constant row stays exact
        mean = m_0 + tl.sum(counts[None, :] * (m_k - m_0[:, None]), axis=1) / n_cols
        d = m_k - mean[:, None]
        var = tl.sum(counts[None, :] * (s_k * s_k + d * d), axis=1) / n_cols
        rstd = tl.where(var == 0, 1.0 / tl.sqrt(eps), sc / tl.sqrt(var + eps * sc * sc))
        mean = mean * inv
        y = (unpack(x_this, dtype, PACK) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        store_tile(y_ptr, rows, y_row_stride, units, row_ok[:, None] & unit_ok[None, :], y, PACK)
        if part == 0:
            tl.store(mean_ptr + rows, mean, mask=row_ok)
            tl.store(rstd_ptr + rows, rstd, mask=row_ok)
        x_this, x_next = x_next, x_after

def _split_config(n_cols, element_size, split=None):
    """Meta-parameters of the split forward, or None: fp32 rows past MAX_FUSED_N up to 131072 columns
    (16-bit rows measured no faster split than chunked on Hopper); ``split`` replaces the table.
    Slices of <= SLICE_N columns (>= MIN_SLICES), blocks of ~TILE elements, BYTES_PER_THREAD of x per
    thread, flag words read as a tile of >= MIN_SLOTS."""
    cfg = ({4: dict(MIN_N=MAX_FUSED_N + 1, SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=64,
                    MIN_SLOTS=32)} if split is None else split).get(min(element_size, 4))
    if cfg is None or not cfg["MIN_N"] <= n_cols <= 131072:
        return None
    slices = max(cfg["MIN_SLICES"], triton.cdiv(n_cols, cfg["SLICE_N"])) if ON_GPU else 1  # interpreter: 1
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    block_m = max(1, cfg["TILE"] // block_n)
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * cfg["BYTES_PER_THREAD"])))
    meta = dict(SLICES=slices, SLOTS=max(cfg["MIN_SLOTS"], triton.next_power_of_2(slices)),
                EVEN=n_cols == slices * block_n, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
                WARPS_PER_SM=16)
    if ON_GPU and element_size == 4:  # each thread's share of the registers when 16 warps share an SM
        regs = getattr(torch.cuda.get_device_properties(DEVICE), "regs_per_multiprocessor", 65536)
        meta["maxnreg"] = min(255, regs // (32 * max(16, num_warps)) // 8 * 8)
    return meta

# The N this launcher is for, where the site's landing page recommends it: rows longer than the core page's kernel
# holds, split (fp32) or chunked (16-bit) as the config functions above say; 2**31: no last
RANGE = {("forward", t): range(MAX_FUSED_N + 1, 2**31) for t in ("float32", "bfloat16")}

# %%
# The launcher
# ------------
# This page's kernels where their config functions take the row, the core page's elsewhere; ``layer_norm_forward``:
# ``F.layer_norm`` over the last dimension, forward only (the drop-in with autograd is the core page's ``layer_norm``).

def layer_norm_wide_forward(x2d, y2d, weight, bias, mean, rstd, eps, reload=None, split=None):
    """y2d = layer_norm(x2d) along dim 1 (unit stride along rows), mean and rstd too; returns (kernel,
    grid). ``reload`` True / False forces the twice-reading kernel on / off where the fused kernel runs;
    ``split`` replaces ``_split_config``'s table."""
    (n_rows, n_cols), flags = x2d.shape, dict(HAS_W=weight is not None, HAS_B=bias is not None)
    args = (x2d, y2d, x2d if weight is None else weight, x2d if bias is None else bias, mean, rstd,
            n_rows, n_cols, x2d.stride(0), y2d.stride(0), eps)
    meta = _split_config(n_cols, x2d.element_size(), split)
    if meta is not None:
        meta = dict(flags, PACK=x2d.element_size() == 2 and n_cols % 2 == 0 and all(
            t.stride(0) % 2 == 0 and t.data_ptr() % 4 == 0 for t in (x2d, y2d)), **meta)  # 2 per word
        per_sm_cap = max(1, meta.pop("WARPS_PER_SM") // meta["num_warps"])
        stand_in = torch.empty(1, device=x2d.device, dtype=torch.int64)  # compiles as the real one
        per_sm = min(programs_per_sm(layer_norm_fwd_split_kernel, (*args[:6], stand_in, *args[6:]), meta), per_sm_cap)
        groups = min(per_sm * NUM_SMS // meta["SLICES"], triton.cdiv(n_rows, meta["BLOCK_M"]))
        if groups > 0:  # a whole group must be on the GPU at once, or it would wait forever
            shares = torch.full((n_rows * meta["SLICES"],), -1, device=x2d.device, dtype=torch.int64)
            layer_norm_fwd_split_kernel[(groups * meta["SLICES"],)](*args[:6], shares, *args[6:], **meta)
            return "split", groups * meta["SLICES"]
    twice = _twice_config(n_cols, x2d.element_size(), force=reload) if reload is not False else None
    if n_cols <= MAX_FUSED_N and twice is not None:
        block_n, num_warps = twice
        layer_norm_fwd_twice_kernel[(n_rows,)](*args, **flags, BLOCK_N=block_n, num_warps=num_warps)
        return "x read twice", n_rows
    return core_forward(x2d, y2d, weight, bias, mean, rstd, eps)

def layer_norm_forward(x, weight=None, bias=None, eps=1e-5, launch=layer_norm_wide_forward):
    """F.layer_norm(x, x.shape[-1:], weight, bias, eps), forward only, float32 / float16 / bfloat16."""
    x2d = x2d.contiguous() if (x2d := x.reshape(-1, x.shape[-1])).shape[1] > 1 and x2d.stride(1) != 1 else x2d
    y2d = torch.empty(x2d.shape, device=x.device, dtype=x.dtype)
    mean, rstd = (torch.empty(x2d.shape[0], device=x.device, dtype=torch.float32) for _ in range(2))
    if y2d.numel():
        launch(x2d, y2d, *(None if t is None else t.contiguous() for t in (weight, bias)), mean, rstd, eps)
    return y2d.view(x.shape)

# %%
# Correctness
# -----------
# :math:`\lVert y - y_{64} \rVert / \lVert y_{64} \rVert` against float64 on the same rounded inputs
# (rows with a mean far from zero), at widths where each kernel runs, next to PyTorch's error.

torch.manual_seed(0)
CHECK_SHAPES = [(3, 8192), (2, 12_345), (2, 40_000)] if not ON_GPU else \
    [(64, 8192), (33, 12_345), (16, 32_768), (8, 40_000), (4, 131_072)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding

def check(shape, dtype):
    x = (torch.randn(shape, device=DEVICE) * 3 + 10).to(dtype)
    w, b = (torch.randn(shape[1], device=DEVICE).to(dtype) for _ in range(2))
    y64 = torch.nn.functional.layer_norm(x.double(), shape[1:], w.double(), b.double())
    kernel, _ = layer_norm_wide_forward(x, y := torch.empty_like(x), w, b, *torch.empty(2, len(x), device=DEVICE), 1e-5)
    err = lambda t: ((t.double() - y64).norm() / y64.norm()).item()
    return {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "kernel": kernel, "ours y": err(y),
            "torch y": err(torch.nn.functional.layer_norm(x, shape[1:], w, b))}

errors = pd.DataFrame([check(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in CHECK_SHAPES])
assert (errors["ours y"] <= errors.dtype.map(TOLERANCE)).all(), "errors above tolerance:\n" + errors.to_string()
errors.style.format({"ours y": "{:.1e}", "torch y": "{:.1e}"}).hide(axis="index")

# %%
# Benchmark
# ---------
# :math:`M N = 2^{26}` elements on a GPU (far past the 50 MB L2), where the launcher picks these
# kernels; each provider timed by :func:`triton.testing.do_bench` (median, L2 flushed) on replays of a
# CUDA graph of the call, next to a copy of the same tensor (the speed of light, timed without a graph).
# GB/s counts :math:`x` read and :math:`y` written; *core* is ``core_forward`` (the core page's fused kernel, chunked past ``MAX_FUSED_N``); "-": no point.
# The peers: PyTorch, ``torch.compile``, Liger-Kernel and quack (CuTe-DSL kernels, compute capability
# 9.0 and newer), whose ``layernorm_fwd`` takes the weight and bias in fp32: copies made once per point.

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**14  # the interpreter: small tensors, two widths of fp32
SWEEP = {"float32": [8192, 16384, 32768, 65536, 131072], "bfloat16": [8192, 16384, 65536]} if ON_GPU else \
    {"float32": [8192, 65536], "bfloat16": [8192]}

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
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."

def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here (quack's CUDA DSL, say)
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")
fns = {"torch": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)}  # name -> fn(x, w, b)
inductor = peer_module("torch.compile", "torch")  # on the CPU, Inductor would time a C++ compiler here, not a GPU
liger = peer_module("Liger-Kernel", "liger_kernel.ops.layer_norm")
quack = peer_module("quack", "quack.rmsnorm", min_major=9)  # Dao-AILab's CuTe-DSL kernels: layernorm_fwd, given w32, b32
torch.cuda.set_stream(torch.cuda.Stream()) if ON_GPU else None  # a CUDA graph cannot be captured on the default stream
if inductor:
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):  # one compilation per shape and dtype
            setattr(torch._dynamo.config, knob, 1024)
    fns["torch.compile"] = torch.compile(fns["torch"], dynamic=False)
fns |= {"Liger": lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)} if liger else {}
fns |= {"quack": lambda x, w, b: quack.layernorm_fwd(x, w32, b32, 1e-5, return_rstd=True, return_mean=True)[0]} if quack else {}
fns["core"] = lambda x, w, b: layer_norm_forward(x, w, b, launch=core_forward)
fns["this page"] = lambda x, w, b: layer_norm_forward(x, w, b)

records, missing = [], {}
for name_dtype, widths in SWEEP.items():
    dtype = getattr(torch, name_dtype)
    for n_cols in widths:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        w, b = torch.randn(n_cols, device=DEVICE, dtype=dtype), torch.randn(n_cols, device=DEVICE, dtype=dtype)
        w32, b32 = w.float(), b.float()  # for quack, outside the timing
        moved, out = 2 * x.numel() * x.element_size(), torch.empty_like(x)
        light = moved / bench(lambda: out.copy_(x), graph=False) * 1e-6
        kernel = layer_norm_wide_forward(x, out, w, b, *torch.empty(2, x.shape[0], device=DEVICE), 1e-5)[0]
        for name, fn in fns.items():
            try:
                gbs = moved / bench(lambda: fn(x, w, b)) * 1e-6
            except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
                if name in ("core", "this page"):
                    raise
                why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
                missing.setdefault((name, why), []).append(f"{name_dtype} N = {n_cols}")
                gbs = float("nan")
            records.append({"dtype": name_dtype, "N": n_cols, "kernel": kernel, "provider": name,
                            "GB/s": gbs, "speed of light GB/s": light, "% of light": 100 * gbs / light})
        del x, out
for (name, why), points in missing.items():  # once per peer and reason
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)
table = results.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False).dropna(how="all")
table = table[[p for p in fns if p in table.columns]]
table.insert(0, "speed of light", results.groupby(["dtype", "N"])["speed of light GB/s"].first())
table.insert(0, "this page runs", results.groupby(["dtype", "N"])["kernel"].first())
table["this page, % of light"] = 100 * table["this page"] / table["speed of light"]
table["this page / core"] = table["this page"] / table["core"]
table["this page / best peer"] = table["this page"] / table[[p for p in ("torch", "torch.compile", "Liger", "quack") if p in table]].max(axis=1)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["this page, % of light", "this page / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="forward", recommended=[int(n in RANGE.get(("forward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "21_layer_norm_wide_forward.csv"))
table.style.format({c: "{:.0f}" for c in table.columns[1:]} | {"this page, % of light": "{:.1f}%",
                   "this page / core": "{:.2f}", "this page / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(1, len(SWEEP), figsize=(11, 4), sharey=True, facecolor="white", squeeze=False)
    styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "core": ":", "this page": "-"}
    for ax, (name_dtype, part) in zip(axes[0], results.groupby("dtype", sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of light"], linestyle=styles[name], marker="o", label=name, linewidth=2.5 if name == "this page" else 1.5)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2)
        ax.set(title=f"forward, {name_dtype}", xlabel="row length N (elements)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("% of the copy's GB/s")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Layer norm forward, wide rows, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}")
    fig.tight_layout()

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:

if ON_GPU:
    for (name_dtype, kernel), part in table.reset_index().groupby(["dtype", "this page runs"], sort=False):
        pct, part = part.set_index("N")["this page, % of light"], part.set_index("N")
        print(f"{name_dtype}, {kernel}: {pct.min():.3g}% to {pct.max():.3g}% of the copy over N = "
              f"{', '.join(map(str, pct.index))}; {part['this page / core'].min():.3g}x to "
              f"{part['this page / core'].max():.3g}x the core launcher's speed; against the best peer: "
              + ", ".join(f"{r:.3g}x" for r in part["this page / best peer"]) + ".")
    short = table[(table["this page, % of light"] < 95) | (table["this page / best peer"] < 0.99)].index  # the site's bar: both
    print("Under 95% of the copy or 0.99x the best peer: " + ("; ".join(f"{t} N = {n}" for t, n in short) or "none"))
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# The twice-reading kernel holds a whole row per program; past 32 K columns the split takes over. The
# split pays an exchange per block whatever its bytes, so a 16-bit slice (half an fp32 one's bytes) ran
# slower than the chunked kernel on Hopper. 16-bit rows of 16 K to 32 K are staged in shared memory
# instead (:ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py`); the backward splits wide
# rows too (:ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py`).
# **Gaps, and what was tried** (this build's are named above): 16-bit rows of 64 K take the chunked
# kernel, x read twice. Tried on Hopper (``dev/DESIGN.md``), none faster: chunks of 4-16 K columns at 8-32
# warps, persistent grids, per-chunk scalar sums (fewer registers), hints on w and b. quack's design, a row
# in the shared memory of a cluster of SMs, does not compile with Triton 3.6 (Gluon in Triton 3.9 compiles it).
# Exercise: widen ``_twice_config``'s 16-bit range to 32768, and rerun the benchmark.
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
