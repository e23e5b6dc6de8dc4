"""
Layer norm, wide rows in the backward: one row shared by several programs
=========================================================================

The core page's persistent backward (:ref:`sphx_glr_tutorials_02_layer_norm_backward.py`) keeps :math:`dw`,
:math:`db` in fp32 registers; past 8192 columns they do not fit and the core page computes with torch. Here a
chunked kernel streams such rows twice.
**What you will learn**: how to *split* a wide row over programs that exchange the
row sums of :math:`dx`, lock-free and deterministic, without waiting; where it is chosen (``_split_config``).
"""

import datetime, importlib.util, math, os, platform, timeit
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
# The backward, and the chunked kernel
# ------------------------------------
# With :math:`\hat{x} = (x - \mu) r` and :math:`g = dy \odot w`,
#
# .. math:: dx = r \left( g - \frac{1}{N}\sum_j g_j - \hat{x} \, \frac{1}{N}\sum_j g_j \hat{x}_j \right),
#    \qquad dw = \sum_{\text{rows}} dy \odot \hat{x}, \qquad db = \sum_{\text{rows}} dy .
#
# A perfect kernel moves :math:`3MN` elements (:math:`x`, :math:`dy` in, :math:`dx` out). Past the core
# page's ``MAX_BWD_FUSED_N`` columns, where it computes with torch, the chunked kernel runs the rows (a pass
# for the two row sums, a second writing :math:`dx` and adding into the program's fp32 partial line), and a
# kernel adds the partial lines in a fixed order.

@triton.jit
def layer_norm_bwd_chunked_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, rows_per_program,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, CHUNK_N: tl.constexpr,
):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    row_start, row_end = pid * rows_per_program, tl.minimum(pid * rows_per_program + rows_per_program, n_rows)
    dw_line, db_line = dw_partial_ptr + pid.to(tl.int64) * n_cols, db_partial_ptr + pid.to(tl.int64) * n_cols
    for row in tl.range(row_start, row_end):
        row64 = tl.cast(row, tl.int64)
        x_row, dy_row = x_ptr + row64 * x_row_stride, dy_ptr + row64 * dy_row_stride
        dx_row = dx_ptr + row64 * dx_row_stride
        mean, rstd = tl.load(mean_ptr + row), tl.load(rstd_ptr + row)
        acc1, acc2 = tl.zeros([CHUNK_N], tl.float32), tl.zeros([CHUNK_N], tl.float32)
        for chunk in range(0, n_chunks):
            offs = chunk * CHUNK_N + cols
            ok = offs < n_cols
            x = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
            g = tl.load(dy_row + offs, mask=ok, other=0.0).to(tl.float32)
            g = g * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32) if HAS_W else g
            acc1 += tl.where(ok, (x - mean) * rstd, 0.0) * g
            acc2 += g
        c1, c2 = tl.sum(acc1, axis=0) / n_cols, tl.sum(acc2, axis=0) / n_cols
        for chunk in range(0, n_chunks):
            offs = (n_chunks - 1 - chunk) * CHUNK_N + cols
            ok = offs < n_cols
            x = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + offs, mask=ok, other=0.0).to(tl.float32)
            x_hat = (x - mean) * rstd
            g = dy * tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32) if HAS_W else dy
            dx = (g - (x_hat * c1 + c2)) * rstd
            tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=ok)
            if COMPUTE_DWDB:  # the first row of a program starts its line from 0, whatever was there
                not_first = ok & (cols * 0 + row > row_start)  # (a tensor: the interpreter's row is an int)
                dw_old = tl.load(dw_line + offs, mask=not_first, other=0.0)
                db_old = tl.load(db_line + offs, mask=not_first, other=0.0)
                tl.store(dw_line + offs, dw_old + dy * x_hat, mask=ok)
                tl.store(db_line + offs, db_old + dy, mask=ok)

@triton.jit
def sum_partials_kernel(dw_partial_ptr, db_partial_ptr, dw_ptr, db_ptr, n_partials, n_cols,
                        BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < n_cols
    dw_acc, db_acc = tl.zeros([BLOCK_P, BLOCK_C], tl.float32), tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for first in range(0, n_partials, BLOCK_P):
        lines = first + tl.arange(0, BLOCK_P)
        ok = (lines < n_partials)[:, None] & col_ok[None, :]
        offs = lines.to(tl.int64)[:, None] * n_cols + cols[None, :]
        dw_acc += tl.load(dw_partial_ptr + offs, mask=ok, other=0.0)
        db_acc += tl.load(db_partial_ptr + offs, mask=ok, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw_acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)
    tl.store(db_ptr + cols, tl.sum(db_acc, axis=0).to(db_ptr.dtype.element_ty), mask=col_ok)

NUM_SMS, _occupancy = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4, {}

def programs_per_sm(kernel, args, meta):
    """(programs of this compiled kernel one SM holds, registers per thread); (1, 0) when interpreted."""
    # one compiled version per dtype, 16-byte alignment of pointers, integers equal to 1 or multiples of 16
    key = (kernel, tuple((a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                         else (a == 1, a % 16 == 0) if isinstance(a, int) else type(a) for a in args),
           tuple(sorted(meta.items())))
    if key not in _occupancy and not ON_GPU:
        _occupancy[key] = (1, 0)  # programs run one after another: any small grid will do
    if key not in _occupancy:
        props, threads = torch.cuda.get_device_properties(DEVICE), 32 * meta["num_warps"]
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        n_regs, smem = max(compiled.n_regs, 1), compiled.metadata.shared
        _occupancy[key] = (max(1, min(props.max_threads_per_multi_processor // threads,  # threads, registers, smem
                                      getattr(props, "regs_per_multiprocessor", 65536) // (n_regs * threads),
                                      getattr(props, "shared_memory_per_multiprocessor", 233472) // smem if smem else 32)),
                           n_regs)
    return _occupancy[key]

# %%
# Wide rows: one row shared by several programs
# ---------------------------------------------
# The chunked kernel reads each row twice, and its partial line at every row. Split the row instead:
# ``SLICES`` programs, a *group*, share each block of rows; each loads its ``BLOCK_N`` columns of
# :math:`x`, :math:`dy` once and keeps their :math:`dw`, :math:`db` in fp32 registers. Each publishes
# its shares of the two row sums in global memory, waits for every slice's, adds them in a fixed order
# (the same bits everywhere, every run) and writes its :math:`dx`. A wait is a round trip to L2, so the
# kernel rarely waits: it publishes the *next* block's shares before awaiting this one's, keeps two
# blocks of loads in flight, loads 16-bit rows as 32-bit words of two (``PACK``) and runs small
# programs, several per SM under a register cap (``maxnreg``): 16-bit rows go in 2048-column slices to
# 4-warp programs, four per SM, holding tiles *as loaded* and recomputing :math:`\hat{x}`, :math:`dy`
# where used (held in fp32 they spilled).
#
# Waiting is only safe if the whole grid runs at once: it is sized from the compiled kernel's occupancy
# (else the chunked kernel runs); under the interpreter a row has one slice. A share is **one 64-bit
# flag word** (up to 16 warps: both sums' bits exchanged into a buffer of ones, which no written word
# is), or goes with **a counter per block** (32 warps: stores, a barrier, a *release* add, one poller).

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
    """This slice's shares of each row's two sums, for the other slices of the group."""
    if FLAG_WORDS:  # one word: s1's bits above s2's; all ones means "not written"
        hi = s1.to(tl.int32, bitcast=True)
        hi = tl.where(hi == -1, 0x7FC00000, hi)  # the one NaN whose bits are all ones -> the quiet NaN
        word = (hi.to(tl.int64) << 32) | (s2.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
        tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")
    else:
        tl.store(shares_ptr + rows * SLICES + part, s1, mask=row_ok)
        tl.store(shares_ptr + (n_rows + rows) * SLICES + part, s2, mask=row_ok)
        tl.debug_barrier()  # every thread's stores are issued before the counter moves
        tl.atomic_add(counter_ptr + block, 1, mask=block < n_blocks, sem="release")

@triton.jit
def wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES: tl.constexpr, SLOTS: tl.constexpr,
                    FLAG_WORDS: tl.constexpr):
    """The two row sums of the rows of ``block``, once every slice has published its shares, added in
    slice order (SLOTS: SLICES rounded up to a power of two; the extra slots read as zeros)."""
    t1, t2 = wait_for_slices(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
    return tl.sum(t1, axis=1), tl.sum(t2, axis=1)

@triton.jit
def wait_for_slices(shares_ptr, counter_ptr, block, n_rows, rows, SLICES: tl.constexpr, SLOTS: tl.constexpr,
                    FLAG_WORDS: tl.constexpr):
    """Every slice's two shares of the rows of ``block``, as two [BLOCK_M, SLOTS] tiles, once all are in."""
    slot = tl.arange(0, SLOTS)
    slots = shares_ptr + rows[:, None] * SLICES + slot[None, :]
    mine = (slot < SLICES)[None, :]
    if FLAG_WORDS:
        words = tl.load(slots, mask=mine, other=0, volatile=True)
        while tl.max((words == -1).to(tl.int32)) > 0:  # some slice has not written yet
            words = tl.load(slots, mask=mine, other=0, volatile=True)
        # A tile smaller than the program is held in several copies, one per group of warps, and the
        # test above may be decided on another warp's copy: a copy still unwritten here (it was loaded
        # before that slice wrote) is read again, once. Measured: without this, dx had NaNs at 2 x 32 slots.
        stale = mine & (words == -1)
        words = tl.where(stale, tl.load(slots, mask=stale, other=0, volatile=True), words)
        t1 = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        t2 = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        while arrived < SLICES:
            arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        t1 = tl.load(slots, mask=mine, other=0.0, cache_modifier=".cg")
        t2 = tl.load(slots + n_rows * SLICES, mask=mine, other=0.0, cache_modifier=".cg")
    return t1, t2

@triton.jit
def load_block(x_ptr, dy_ptr, mean_ptr, rstd_ptr, block, n_rows, x_row_stride, dy_row_stride, units, unit_ok,
               PACK: tl.constexpr, BLOCK_M: tl.constexpr):
    """A block's tiles of x and dy (as loaded: packed or not) and its rows' mean and rstd."""
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    x = load_tile(x_ptr, rows, x_row_stride, units, unit_ok, n_rows, PACK)
    dy = load_tile(dy_ptr, rows, dy_row_stride, units, unit_ok, n_rows, PACK)
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return x, dy, tl.load(mean_ptr + rows), tl.load(rstd_ptr + rows)

@triton.jit
def x_hat_and_dy(x, dy, mean, rstd, col_ok, dtype: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr):
    """A block's x_hat = (x - mean) * rstd (zero in padding columns) and dy, in fp32."""
    x_hat = unpack(x, dtype, PACK) * rstd[:, None] - (mean * rstd)[:, None]
    if not EVEN:
        x_hat = tl.where(col_ok[None, :], x_hat, 0.0)
    return x_hat, unpack(dy, dtype, PACK)

@triton.jit
def publish_block(shares_ptr, counter_ptr, block, n_blocks, n_rows, part, x, dy, mean, rstd, w, col_ok,
                  dtype: tl.constexpr, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr, PACK: tl.constexpr,
                  EVEN: tl.constexpr, BLOCK_M: tl.constexpr):
    """This slice's shares of the rows of ``block``, sum(g * x_hat) and sum(g) with g = dy * w, from the
    block's tiles as loaded (rows past the end publish nothing)."""
    x_hat, g = x_hat_and_dy(x, dy, mean, rstd, col_ok, dtype, PACK, EVEN)
    g = g * w[None, :]
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    publish_shares(shares_ptr, counter_ptr, block, n_blocks, n_rows, tl.minimum(rows, n_rows - 1).to(tl.int64),
                   rows < n_rows, part, tl.sum(x_hat * g, axis=1), tl.sum(g, axis=1), SLICES, FLAG_WORDS)

@triton.jit
def layer_norm_bwd_split_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, shares_ptr,
    counter_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, SLICES: tl.constexpr, SLOTS: tl.constexpr,
    FLAG_WORDS: tl.constexpr, PACK: tl.constexpr, EVEN: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups).
    EVEN: the slices cover the row exactly (no padding columns to zero)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N  # a tile's row holds words, or elements
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.full([BLOCK_N], 1.0, tl.float32)
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # Only the tiles as loaded live from step to step, this block's and the next (x_hat and dy are
    # recomputed where used, not held in registers). First: both loaded, the first block's shares published.
    x_this, dy_this, mean_this, rstd_this = load_block(
        x_ptr, dy_ptr, mean_ptr, rstd_ptr, group, n_rows, x_row_stride, dy_row_stride, units, unit_ok,
        PACK, BLOCK_M)
    x_next, dy_next, mean_next, rstd_next = load_block(
        x_ptr, dy_ptr, mean_ptr, rstd_ptr, group + n_groups, n_rows, x_row_stride, dy_row_stride, units,
        unit_ok, PACK, BLOCK_M)
    publish_block(shares_ptr, counter_ptr, group, n_blocks, n_rows, part, x_this, dy_this, mean_this, rstd_this,
                  w, col_ok, dtype, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
    for block in tl.range(group, n_blocks, n_groups):
        # the block after next, in flight while this step works (a load needed in this step would stall)
        x_after, dy_after, mean_after, rstd_after = load_block(
            x_ptr, dy_ptr, mean_ptr, rstd_ptr, block + 2 * n_groups, n_rows, x_row_stride, dy_row_stride,
            units, unit_ok, PACK, BLOCK_M)
        # the next block's shares, published before this block's are awaited (rows past the end: none)
        publish_block(shares_ptr, counter_ptr, block + n_groups, n_blocks, n_rows, part, x_next, dy_next,
                      mean_next, rstd_next, w, col_ok, dtype, SLICES, FLAG_WORDS, PACK, EVEN, BLOCK_M)
        # this block: dw and db, then dx once the group's shares are in
        x_hat, dy = x_hat_and_dy(x_this, dy_this, mean_this, rstd_this, col_ok, dtype, PACK, EVEN)
        if COMPUTE_DWDB:
            dw_acc += dy * x_hat
            db_acc += dy
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # a padded row waits on the block's last row
        c1, c2 = wait_for_shares(shares_ptr, counter_ptr, block, n_rows, rows, SLICES, SLOTS, FLAG_WORDS)
        dx = (dy * w[None, :] - (x_hat * (c1 / n_cols)[:, None] + (c2 / n_cols)[:, None])) * rstd_this[:, None]
        store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
        x_this, dy_this, mean_this, rstd_this = x_next, dy_next, mean_next, rstd_next
        x_next, dy_next, mean_next, rstd_next = x_after, dy_after, mean_after, rstd_after
    if COMPUTE_DWDB:  # one partial line per group; each slice writes its columns of it
        offs = tl.cast(group, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)

def _split_config(n_cols, element_size, tensors=(), split=None):
    """Meta-parameters of the split backward, as measured fastest on Hopper (``split`` replaces the table):
    slices of <= SLICE_N columns (>= MIN_SLICES), blocks of ~TILE elements, BYTES_PER_THREAD of each tile
    per thread, flag words read as a tile of >= MIN_SLOTS (8 or 16 made the 4-warp program spill)."""
    cfg = (split or {2: dict(SLICE_N=2048, MIN_SLICES=2, TILE=2048, BYTES_PER_THREAD=32, MIN_SLOTS=32),
                     4: dict(SLICE_N=4096, MIN_SLICES=2, TILE=4096, BYTES_PER_THREAD=32, MIN_SLOTS=1)})[min(element_size, 4)]
    slices = max(cfg["MIN_SLICES"], triton.cdiv(n_cols, cfg["SLICE_N"])) if ON_GPU else 1  # interpreter: 1
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    block_m = max(1, cfg["TILE"] // block_n)
    num_warps = min(32, max(4, block_m * block_n * element_size // (32 * cfg["BYTES_PER_THREAD"])))
    pack = element_size == 2 and n_cols % 2 == 0 and all(  # 2 per 32-bit word: even lengths, strides, 4-byte aligned
        t.stride(0) % 2 == 0 and t.data_ptr() % 4 == 0 for t in tensors)
    meta = dict(SLICES=slices, SLOTS=max(cfg.get("MIN_SLOTS", 1), triton.next_power_of_2(slices)), PACK=pack,
                EVEN=n_cols == slices * block_n, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
                FLAG_WORDS=num_warps <= 16)  # flag words up to 16 warps, a counter for 32
    if ON_GPU and (pack or element_size == 4):  # unpacked 16-bit rows: fewer programs rather than spills
        regs = getattr(torch.cuda.get_device_properties(DEVICE), "regs_per_multiprocessor", 65536)
        meta["maxnreg"] = min(255, regs // (32 * max(SPLIT_WARPS_PER_SM, num_warps)) // 8 * 8)
    return meta

# %%
# The launcher
# ------------
# The split from ``SPLIT_FROM`` to ``MAX_SPLIT_N`` columns, the chunked kernel elsewhere; persistent
# grids, one partial line per program (per group), as many per SM as ``*_WARPS_PER_SM`` warps allow.

MAX_BWD_FUSED_N, SPLIT_FROM, MAX_SPLIT_N = {2: 8192, 4: 8192}, {2: 4096, 4: 8192}, 131072  # 02's fused limit; split range
SPLIT_WARPS_PER_SM, CHUNK_WARPS_PER_SM, CHUNK_N, CHUNK_WARPS = 16, 32, 4096, 16  # and its chunked kernel's
RANGE = {("backward", t): range(8192 + 1, 2**31) for t in ("float32", "bfloat16")}  # the N the site recommends it for: past 02's

def bwd_args(kernel, x2d, dy2d, dx2d, weight, mean, rstd, dw_partial, db_partial, meta, rows_per_program,
             launch=True):
    """The kernel's arguments, with the split kernel's shares and counters (stand-ins if not ``launch``)."""
    n_rows, n_cols = x2d.shape
    args = (x2d, dy2d, dx2d, x2d if weight is None else weight, mean, rstd, dw_partial, db_partial)
    if kernel is layer_norm_bwd_split_kernel:
        words, dev = meta["FLAG_WORDS"], x2d.device
        if not launch:  # stand-ins of the right types, uninitialized: nothing reads them, no kernel runs
            args += (torch.empty(1, device=dev, dtype=torch.int64 if words else torch.float32),
                     torch.empty(1, device=dev, dtype=torch.int64 if words else torch.int32))
        elif words:  # one buffer of ones ("not written"), read through both pointers
            args += (torch.full((n_rows * meta["SLICES"],), -1, device=dev, dtype=torch.int64),) * 2
        else:
            args += (torch.empty(2 * n_rows * meta["SLICES"], device=dev, dtype=torch.float32),
                     torch.zeros(triton.cdiv(n_rows, meta["BLOCK_M"]), device=dev, dtype=torch.int32))
    args += (n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    return args + ((rows_per_program,) if kernel is layer_norm_bwd_chunked_kernel else ())

def bwd_plan(x2d, has_w, compute_dwdb, tensors=None, programs=None, split=None, split_from=None, split_to=None):
    """Kernel, meta-parameters, persistent grid for rows like x2d's (compiled for ``tensors``, (dy2d, dx2d,
    weight, mean, rstd)); ``programs`` caps the lines, ``split_from`` / ``split_to`` / ``split`` override."""
    n_rows, n_cols = x2d.shape
    fp32 = torch.empty(1, device=x2d.device, dtype=torch.float32)
    dy2d, dx2d, weight, mean, rstd = tensors or (x2d, x2d, x2d if has_w else None, fp32, fp32)
    low = SPLIT_FROM[min(x2d.element_size(), 4)] if split_from is None else split_from
    if low < n_cols <= (MAX_SPLIT_N if split_to is None else split_to):
        kernel, warps_per_sm = layer_norm_bwd_split_kernel, SPLIT_WARPS_PER_SM
        meta = _split_config(n_cols, x2d.element_size(), (x2d, dy2d, dx2d), split)
        block_m, slices = meta["BLOCK_M"], meta["SLICES"]
    else:
        kernel, warps_per_sm, block_m, slices = layer_norm_bwd_chunked_kernel, CHUNK_WARPS_PER_SM, 1, 1
        meta = dict(CHUNK_N=CHUNK_N, num_warps=CHUNK_WARPS)
    meta.update(HAS_W=has_w, COMPUTE_DWDB=compute_dwdb)
    warm_args = bwd_args(kernel, x2d, dy2d, dx2d, weight, mean, rstd, fp32, fp32, meta, 1, launch=False)
    per_sm, n_regs = programs_per_sm(kernel, warm_args, meta)
    n_blocks = triton.cdiv(n_rows, block_m)
    lines = min(per_sm, max(1, warps_per_sm // meta["num_warps"])) * NUM_SMS // slices
    if kernel is layer_norm_bwd_split_kernel and lines == 0:  # a group cannot be on the GPU at once
        return bwd_plan(x2d, has_w, compute_dwdb, tensors, programs, split, split_from, 0)
    lines = max(1, min(lines if programs is None else programs, n_blocks))
    rows_per_program = triton.cdiv(n_blocks, lines) * block_m
    lines = triton.cdiv(n_rows, rows_per_program)  # every program gets at least one row
    return dict(kernel=kernel, meta=meta, programs=lines * slices, lines=lines, rows_per_program=rows_per_program,
                per_sm=per_sm, n_regs=n_regs, block_m=block_m)

def layer_norm_wide_backward(x2d, dy2d, dx2d, weight, mean, rstd, dw=None, db=None, **plan_options):
    """dx2d <- dx; with dw and db (N elements) the sums over rows too, in a fixed order. Returns the plan."""
    plan = bwd_plan(x2d, weight is not None, dw is not None, (dy2d, dx2d, weight, mean, rstd), **plan_options)
    shape = (plan["lines"], x2d.shape[1]) if dw is not None else (1,)  # a line per group: all written, no clearing
    dw_partial, db_partial = (torch.empty(shape, device=x2d.device, dtype=torch.float32) for _ in range(2))
    args = bwd_args(plan["kernel"], x2d, dy2d, dx2d, weight, mean, rstd, dw_partial, db_partial,
                    plan["meta"], plan["rows_per_program"])
    plan["kernel"][(plan["programs"],)](*args, **plan["meta"])
    if dw is not None:  # the second pass: columns summed top to bottom, 32 lines at a time
        block_c = 128 if ON_GPU else 4096  # the interpreter wants few programs
        sum_partials_kernel[(triton.cdiv(x2d.shape[1], block_c),)](
            dw_partial, db_partial, dw, db, plan["lines"], x2d.shape[1], BLOCK_P=32, BLOCK_C=block_c, num_warps=4)
    return plan

def row_statistics(x2d, eps=1e-5):
    """The mean and rstd of each row, in fp32, as a forward saves them for its backward."""
    var, mean = torch.var_mean(x2d.double(), dim=1, correction=0)  # float64: no fp32 overflow past |x| ~ 1e19
    return mean.float(), torch.rsqrt(var + eps).float()

def layer_norm_backward(x2d, weight, dy2d, mean, rstd, split_from=None):
    """(dx, dw, db) of F.layer_norm over x2d's rows; ``split_from=math.inf``: the chunked kernel."""
    dy2d, dx2d = dy2d.contiguous(), torch.empty_like(x2d)
    dw = torch.zeros(x2d.shape[1], device=x2d.device, dtype=x2d.dtype if weight is None else weight.dtype)
    db = torch.zeros(x2d.shape[1], device=x2d.device, dtype=x2d.dtype)
    if dx2d.numel():
        layer_norm_wide_backward(x2d, dy2d, dx2d, weight, mean, rstd, dw, db, split_from=split_from)
    return dx2d, None if weight is None else dw, db

# %%
# Correctness
# -----------
# :math:`dx`, :math:`dw`, :math:`db` against float64 autograd on the same rounded inputs (a mean far
# from zero), next to PyTorch's error; :math:`dx`'s against the size of its terms, :math:`|w \, dy| \, r`.

torch.manual_seed(0)
CHECK_SHAPES = [(64, 8192), (33, 12_345), (16, 40_000), (4, 131_072)] if ON_GPU else [(3, 8192), (2, 12_345)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding

def check(shape, dtype):
    x = (torch.randn(shape, device=DEVICE) * 3 + 10).to(dtype)
    w, b = (torch.randn(shape[1], device=DEVICE).to(dtype) for _ in range(2))
    dy = torch.randn(shape, device=DEVICE, dtype=dtype)
    ins64 = [t.double().requires_grad_(True) for t in (x, w, b)]
    grads64 = torch.autograd.grad(torch.nn.functional.layer_norm(ins64[0], shape[1:], *ins64[1:]), ins64, dy.double())
    scales = ((dy.double() * w.double() / (x.double().var(1, unbiased=False, keepdim=True) + 1e-5).sqrt()).norm(),
              grads64[1].norm(), grads64[2].norm())  # dx: against its terms' size
    kernel = "split" if bwd_plan(x, True, True)["kernel"] is layer_norm_bwd_split_kernel else "chunked"
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "kernel": kernel}
    for label, g, g64, scale in zip(("dx", "dw", "db"), layer_norm_backward(x, w, dy, *row_statistics(x)), grads64, scales):
        row[f"ours {label}"] = ((g.double() - g64).norm() / scale).item()
    return row

errors = pd.DataFrame([check(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in CHECK_SHAPES])
assert (errors[["ours dx", "ours dw", "ours db"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors.to_string()
errors.style.format({c: "{:.1e}" for c in errors.columns[3:]}).hide(axis="index")

# %%
# Benchmark
# ---------
# Where the launcher splits, :math:`MN` fixed, with its choices (slices, warps, grid; on a GPU the
# compiled kernel's registers and programs per SM; *partial %*: the partial lines' traffic against the
# :math:`3MN` elements, the lock-free reduction's price). A peer's backward is ``autograd.grad`` of
# :math:`x`, :math:`w`, :math:`b`; ours is the launcher with its allocations; each a CUDA graph timed by
# :func:`triton.testing.do_bench` (median, L2 flushed) beside a copy (the speed of light, no graph).
# Peers: PyTorch, ``torch.compile``, Liger-Kernel, quack (CuTe-DSL kernels, compute capability 9.0 and
# newer; its pair of functions takes fp32 weight and bias, copied once per point); "-": a peer's limit.

TOTAL_ELEMENTS = 2**26 if ON_GPU else 2**14
SWEEP = {"bfloat16": [8192, 16384, 32768, 65536, 131072], "float32": [16384, 32768, 65536, 131072]} if ON_GPU \
    else {"bfloat16": [8192], "float32": [16384]}

def bench(fn, graph=True):  # median ms of fn(): CUDA-graph replays timed by do_bench on a GPU, a wall clock on a CPU
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
quack = peer_module("quack", "quack.rmsnorm", min_major=9)  # Dao-AILab's CuTe-DSL kernels: layernorm_fwd, _bwd
torch.cuda.set_stream(torch.cuda.Stream()) if ON_GPU else None  # graphs are not captured on the default stream (nor autograd's)
if inductor:
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):  # one compilation per shape and dtype
            setattr(torch._dynamo.config, knob, 1024)
    torch._functorch.config.donated_buffer = False  # its backward is timed again and again (retain_graph=True)
    fns["torch.compile"] = torch.compile(fns["torch"], dynamic=False)
fns |= {"Liger": lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)} if liger else {}
if quack:  # its layer norm: a pair of functions taking fp32 w and b, joined here by an autograd function
    class QuackLayerNorm(torch.autograd.Function):  # w32, b32: fp32 copies made once a point, outside the timing
        @staticmethod
        def forward(ctx, x, w, b):
            y, rstd, mean = quack.layernorm_fwd(x, w32, b32, 1e-5, return_rstd=True, return_mean=True)
            ctx.save_for_backward(x, rstd, mean)
            return y
        @staticmethod
        def backward(ctx, dy):
            x, rstd, mean = ctx.saved_tensors
            dx, dw, db = quack.layernorm_bwd(x, w32, dy.contiguous(), rstd, mean, True)  # dw, db in fp32
            return dx, dw.to(dy.dtype), db.to(dy.dtype)  # w, b: in the dtype of x and dy here
    fns["quack"] = QuackLayerNorm.apply
fns["chunked"] = lambda x, w, dy, mean, rstd: layer_norm_backward(x, w, dy, mean, rstd, split_from=math.inf)
fns["this page"] = layer_norm_backward

records, plans, missing = [], [], {}
for name_dtype, n_cols in [(name_dtype, n) for name_dtype, widths in SWEEP.items() for n in widths]:
    x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=getattr(torch, name_dtype))
    w, b = torch.randn(n_cols, device=DEVICE, dtype=x.dtype), torch.randn(n_cols, device=DEVICE, dtype=x.dtype)
    w32, b32, nbytes = w.float(), b.float(), x.numel() * x.element_size()  # w32, b32: for quack, outside the timing
    dy, out, inputs = torch.randn_like(x), torch.empty_like(x), [t.requires_grad_(True) for t in (x, w, b)]
    light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
    stats, plan = row_statistics(x.detach()), bwd_plan(x.detach(), True, True)
    plans.append({"dtype": name_dtype, "N": n_cols, "M": x.shape[0], "slices": plan["meta"].get("SLICES", 1),
                  "warps": plan["meta"]["num_warps"], "grid": plan["programs"], "regs": plan["n_regs"] or "-",
                  "per SM": plan["per_sm"], "partial %": 100 * 16 * plan["lines"] / (3 * x.shape[0] * x.element_size())})
    for name, fn in fns.items():
        try:
            if name in ("chunked", "this page"):  # the launcher, on statistics saved beforehand
                ms = bench(lambda: fn(x.detach(), w.detach(), dy, *stats))
            else:  # autograd.grad of x, w and b: every kernel the peer launches for them
                y = fn(*inputs)
                ms = bench(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
            gbs = 3 * nbytes / ms * 1e-6
        except Exception as err:  # a peer's limit: the point is missing, and why is printed once below
            if name in ("chunked", "this page"):
                raise
            why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
            missing.setdefault((name, why), []).append(f"{name_dtype} N = {n_cols}")
            gbs = float("nan")
        y = None
        records.append({"dtype": name_dtype, "N": n_cols, "provider": name, "GB/s": gbs,
                        "speed of light GB/s": light, "% of light": 100 * gbs / light})
    del x, dy, out, inputs, w, b, w32, b32
for (name, why), points in missing.items():  # once per peer and reason
    print(f"{name}: not measured at {', '.join(points)} ({why})")
results = pd.DataFrame(records)
table = results.pivot_table(index=["dtype", "N"], columns="provider", values="GB/s", dropna=False)[list(fns)]
table.insert(0, "speed of light", results.groupby(["dtype", "N"])["speed of light GB/s"].first())
table["this page, % of light"] = 100 * table["this page"] / table["speed of light"]
table["this page / chunked"] = table["this page"] / table["chunked"]
table["this page / best peer"] = table["this page"] / table[[p for p in ("torch", "torch.compile", "Liger", "quack") if p in table]].max(axis=1)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["this page, % of light", "this page / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        direction="backward", recommended=[int(n in RANGE.get(("backward", t), ())) for t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "23_layer_norm_wide_backward.csv"))
table = pd.DataFrame(plans).set_index(["dtype", "N"]).join(table)
table.style.format({c: "{:.0f}" for c in table.columns[6:]} | {"partial %": "{:.1f}%", "this page, % of light": "{:.1f}%",
                   "this page / chunked": "{:.2f}", "this page / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# The same numbers as a plot, each provider as a percentage of the copy measured next to it (on a GPU):

if ON_GPU:
    fig, axes = plt.subplots(1, len(SWEEP), figsize=(11, 4), sharey=True, facecolor="white", layout="constrained")
    styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "chunked": ":", "this page": "-"}
    for ax, (name_dtype, part) in zip(axes, results.groupby("dtype", sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of light"], linestyle=styles[name], marker="o", label=name, linewidth=2.5 if name == "this page" else 1.5)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2)
        ax.set(title=f"backward, {name_dtype}", xlabel="row length N (elements)")
        ax.grid(True, alpha=0.3)
    axes[0].set(ylabel="% of the copy's GB/s"), axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"Layer norm backward, wide rows, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}")

# %%
# Reading the numbers
# -------------------
# Computed from the table above, in this build:
if ON_GPU:
    for name_dtype, part in table.reset_index().set_index("N").groupby("dtype", sort=False):
        pct, vs_chunked, vs_peer = part["this page, % of light"], part["this page / chunked"], part["this page / best peer"]
        print(f"{name_dtype}: the split backward runs at {pct.min():.3g}% (N = {pct.idxmin()}) to {pct.max():.3g}% "
              f"(N = {pct.idxmax()}) of the copy, {vs_chunked.min():.3g}x to {vs_chunked.max():.3g}x the chunked "
              f"kernel" + (f", {vs_peer.min():.3g}x to {vs_peer.max():.3g}x the best peer." if vs_peer.notna().any() else "."))
    short = table[(table["this page, % of light"] < 95) | (table["this page / best peer"] < 0.99)].index  # the site's bar: both
    print("Under 95% of the copy or 0.99x the best peer: " + ("; ".join(f"{t} N = {n}" for t, n in short) or "none"))
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# **Gaps, and what was tried** (this build's are named above). Wide bf16 rows are limited by the programs an SM holds
# without spilling (four of 4 warps, 128 registers). Tried on Hopper (``dev/DESIGN.md``), none faster: 8-warp programs,
# 4096- or 1024-column slices, more flag-word slots, a third block in flight, ``tl.range`` pipelining; quack's clusters
# do not compile with Triton 3.6. Exercise: change ``SLICE_N``. The forward: :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py`.
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
