"""
RMSNorm, wide rows: the forward streams a row, the backward splits it
=====================================================================

Tutorial 04 (:ref:`sphx_glr_tutorials_04_rms_norm.py`, :ref:`sphx_glr_tutorials_04_rms_norm_operator.py`) holds a row in
registers, to 64 KB forward (16 K fp32 values, 32 K bf16) and 8 K values backward; past those its drop-in streams rows
with this page's chunked kernels. **What you will learn**: a forward that streams a wide row in chunks, reading it
twice; a backward that *splits* a wide row over programs that exchange partial sums through global memory, in a fixed
order, a block ahead; 16-bit rows two to a register; the launch (``_fwd_config``, ``_split_config``).
"""

import datetime, importlib.util, math, os, platform, timeit, warnings
import torch, torch.nn.functional as F, torch.utils.collect_env as collect_env
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The forward: a row streamed in chunks
# -------------------------------------
# :math:`y = r \, x \odot w`, :math:`r = 1 / \sqrt{\frac{1}{N} \sum_j x_j^2 + \epsilon}`: a perfect kernel moves
# :math:`2MN` elements. A program takes a row at a time and reads it twice: a first pass adds :math:`x^2` chunk by chunk,
# the next chunk's load in flight, its loads asked to stay in L2 (``evict_last``); a second pass, backwards (the chunks
# read last come first), writes :math:`y`. Values past about 1e19 overflow the fp32 sum: such a row is summed again
# scaled by :math:`2^{-80}` (exact, a power of two), as in the core page's kernel.

@triton.jit
def rms_norm_fwd_chunked_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                                HAS_WEIGHT: tl.constexpr, CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        x_row, y_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, y_ptr + tl.cast(row, tl.int64) * y_row_stride
        sum_sq = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            offs = (chunk + 1) * CHUNK_N + cols  # the next chunk (past the end: loads nothing)
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            sum_sq += x * x
        sum_sq = tl.sum(sum_sq, axis=0)
        rstd = tl.rsqrt(sum_sq / n_cols + eps)
        if sum_sq == float("inf"):  # values past 1e19, as in the fused kernel: the row again, scaled by 2**-80
            sum_small = tl.zeros([CHUNK_N], tl.float32)
            for k in range(0, n_chunks):
                offs = k * CHUNK_N + cols
                x_small = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32) * 2.0**-80
                sum_small += x_small * x_small
            rstd = 2.0**-80 * tl.rsqrt(tl.sum(sum_small, axis=0) / n_cols)
        tl.store(rstd_ptr + row, rstd)
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x = x_next.to(tl.float32)
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols  # backwards: the last chunks are in L2
            offs = here - CHUNK_N
            x_next = tl.load(x_row + offs, mask=(offs >= 0) & (offs < n_cols), other=0.0, eviction_policy="evict_first")
            y = x * rstd
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            tl.store(y_row + here, y.to(y_ptr.dtype.element_ty), mask=here < n_cols, cache_modifier=".cs")

# warps such that each thread handles about bytes_per_thread bytes of an n-element tile (4 to 32 warps)
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))

# (meta, grid) of the chunked forward: a program a row. Its next chunk, 16 K values (32 a thread of 16 warps), is in
# flight: 32 KB (bf16) to 64 KB (fp32), about what an SM needs (Little's law: bandwidth x latency / SMs) to hide latency.
def _fwd_config(n_rows, element_size):
    return dict(CHUNK_N=16384, num_warps=_warps(16384, element_size, 32 * element_size)), n_rows

def rms_norm_forward(x2d, w, eps=1e-6):
    """(y, rstd) of RMSNorm over x2d's rows (columns of unit stride), rstd in fp32 as the backward takes it."""
    y2d, rstd = torch.empty_like(x2d), torch.empty(x2d.shape[0], device=x2d.device, dtype=torch.float32)
    meta, grid = _fwd_config(x2d.shape[0], x2d.element_size())
    rms_norm_fwd_chunked_kernel[(grid,)](x2d, x2d if w is None else w, y2d, rstd, *x2d.shape, x2d.stride(0),
                                         y2d.stride(0), eps, HAS_WEIGHT=w is not None, **meta)
    return y2d, rstd

# %%
# The backward, and the chunked kernel it replaces
# ------------------------------------------------
# With :math:`r` the reciprocal root mean square of a row, :math:`\hat{x} = r x` and :math:`g = dy \odot w`,
#
# .. math:: dx = r \left( g - \hat{x} \, \frac{1}{N} \sum_j g_j \hat{x}_j \right), \qquad
#    dw_j = \sum_{\text{rows}} dy_j \, \hat{x}_j .
#
# A perfect kernel moves :math:`3MN` elements (:math:`x`, :math:`dy` in, :math:`dx` out). A first answer past 8 K
# columns streams a row like the forward: a pass for the row's dot product, a second, backwards, writing :math:`dx` and
# adding into the program's fp32 ``dw_partial`` row; then a fixed-order sum of the partials.

@triton.jit
def rms_norm_bwd_chunked_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols, x_row_stride,
                                dy_row_stride, dx_row_stride, HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr,
                                CHUNK_N: tl.constexpr):
    pid, cols, n_chunks = tl.program_id(0), tl.arange(0, CHUNK_N), tl.cdiv(n_cols, CHUNK_N)
    dw_row = dw_partial_ptr + tl.cast(pid, tl.int64) * n_cols  # this program's partial
    for row in tl.range(pid, n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row, dy_row, dx_row = x_ptr + row64 * x_row_stride, dy_ptr + row64 * dy_row_stride, dx_ptr + row64 * dx_row_stride
        rstd = tl.load(rstd_ptr + row)
        # Pass 1: the dot product of g = dy * w and x, two chunks in flight.
        acc = tl.zeros([CHUNK_N], tl.float32)
        x_next = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        dy_next = tl.load(dy_row + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last")
        for chunk in range(0, n_chunks):
            x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
            here = chunk * CHUNK_N + cols
            offs = here + CHUNK_N
            x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last")
            if HAS_WEIGHT:
                dy = dy * tl.load(w_ptr + here, mask=here < n_cols, other=0.0).to(tl.float32)
            acc += dy * (x * rstd)  # x_hat first: dy * x may overflow where x is huge
        c = tl.sum(acc, axis=0) / n_cols  # (1/N) sum g * x_hat
        # Pass 2, backwards: dx, and dw_partial += dy * x_hat.
        offs = (n_chunks - 1) * CHUNK_N + cols
        x_next = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_first")
        for chunk in range(0, n_chunks):
            x, dy = x_next.to(tl.float32), dy_next.to(tl.float32)
            here = (n_chunks - 1 - chunk) * CHUNK_N + cols
            offs = here - CHUNK_N
            in_row = (offs >= 0) & (offs < n_cols)
            x_next = tl.load(x_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first")
            ok, x_hat, g = here < n_cols, x * rstd, dy
            if HAS_WEIGHT:
                g = dy * tl.load(w_ptr + here, mask=ok, other=0.0).to(tl.float32)
            if COMPUTE_DW:  # the program's first row starts its partial: no buffer needs clearing
                dw = tl.load(dw_row + here, mask=ok & (here * 0 + row > pid), other=0.0)
                tl.store(dw_row + here, dw + dy * x_hat, mask=ok)
            tl.store(dx_row + here, ((g - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")

@triton.jit
def dw_reduce_kernel(dw_partial_ptr, dw_ptr, n_partials, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """dw[j] = sum_p dw_partial[p, j]: a fixed order of additions, hence bitwise deterministic."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_N], tl.float32)
    for start in range(0, n_partials, BLOCK_P):
        p = (start + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(dw_partial_ptr + p[:, None] * n_cols + cols[None, :],
                       mask=(p < n_partials)[:, None] & col_ok[None, :], other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_ok)

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4

def _chunked_config(n_rows, n_cols, element_size):  # (meta, grid) of the chunked backward: a program an SM, 32 B a thread
    return dict(CHUNK_N=8192, num_warps=_warps(8192, element_size, 32)), max(1, min(n_rows, NUM_SMS))

# %%
# Wide rows: one row shared by several programs
# ---------------------------------------------
# Split the row instead. ``SLICES`` programs (a *group*) share each row, each owning a slice of ``BLOCK_N`` columns: it
# loads its slice of :math:`x` and :math:`dy` once and keeps :math:`dw` for those columns in fp32 registers, as the
# core's fused kernel does. A slice cannot compute :math:`c = \frac{1}{N}\sum_j g_j \hat{x}_j` alone, a sum over the
# whole row: each program publishes its share of it in global memory, waits until the other slices of the row have
# published theirs, and adds the ``SLICES`` shares in a fixed order (the same bits in every program and on every run);
# then it writes its slice of :math:`dx`.
#
# Waiting for another program is safe only if that program is running: the grid must fit on the GPU at once, or a
# waiting program could hold the SM that the program it waits for needs. The launcher sizes the grid from the compiled
# kernel's occupancy (``programs_per_sm``), and falls back to the chunked kernel when a group cannot fit. Another kernel
# that holds SMs forever while this one runs (on another stream) could still stall it; the kernels on this site never do.
#
# **Hiding the wait.** A share goes to L2 and back to another SM, a round trip of about a microsecond, as long as an SM
# takes to stream a few tens of KB. Waiting for a block's shares right after publishing one's own stalls a round trip a
# block. So the exchange runs one block ahead (software pipelining): a program keeps **two blocks of loads in flight**,
# and before it waits for this block's shares it **publishes its share of the next block**. The other slices did the
# same a step earlier: the shares it asks for are usually there, the wait is one read, and the memory works meanwhile.
#
# **Registers.** Three blocks are alive at once. A 16-bit element loaded into registers takes a whole 32-bit register:
# a bf16 block costs the registers of an fp32 block for half the bytes in flight. With ``PACK`` the kernel loads 16-bit
# rows as 32-bit words of two elements, keeps them packed while they wait and unpacks them only to compute (for bf16, a
# shift: its bits are the top half of an fp32); :math:`dx` is packed again to be stored. That needs rows of an even
# length, even strides and 4-byte aligned tensors, else ``PACK`` is off. The launcher also caps each thread's registers
# (``maxnreg``) at the share that lets ``WARPS_PER_SM`` warps live on an SM: two bf16 programs of 8 warps an SM, not one.
#
# **Two ways to wait**, both measured on Hopper. **Flag words** (``FLAG_WORDS=True``): a share is a 64-bit word, a
# "written" bit above the value's fp32 bits, in a buffer cleared before the launch; a program reads its rows' words until
# every bit is set, one round trip once the others are done: faster up to 16 warps a program, as every split
# configuration here has. **A counter** per block of rows: plain stores, a barrier (every thread's store issued before
# the counter moves), an atomic add with *release* semantics; one thread polls the counter with *acquire* semantics and
# the shares are read past L1 (``.cg``): three round trips, but one thread polls, faster with 32 warps (kept for them).
# The buffers are cleared by a ``torch.zeros`` a call (8 bytes a row and slice). Triton's interpreter runs programs one
# after another (one waiting for the next would wait forever): there a row has one slice, whose only shares are its own.

@triton.jit
def load_tile(ptr, rows, row_stride, units, unit_ok, n_rows, PACK: tl.constexpr):
    """A slice's rows (zeros past n_rows): [BLOCK_M, BLOCK_N] elements, or with PACK [BLOCK_M, BLOCK_N // 2] words."""
    ok = (rows < n_rows)[:, None] & unit_ok[None, :]
    rows = rows.to(tl.int64)
    if PACK:
        words = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        tile = tl.load(words + rows[:, None] * (row_stride // 2) + units[None, :], mask=ok, other=0)
    else:
        tile = tl.load(ptr + rows[:, None] * row_stride + units[None, :], mask=ok, other=0.0)
    return tile

@triton.jit
def tile_to_f32(tile, dtype: tl.constexpr, PACK: tl.constexpr):
    """A loaded tile as [BLOCK_M, BLOCK_N] fp32 values, in column order."""
    if PACK:  # the low half of a word is the even column (little-endian)
        if dtype == tl.bfloat16:  # bf16 is the top half of an fp32
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
def publish_share(shares_ptr, counter_ptr, block, n_blocks, rows, row_ok, part, share,
                  SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """This slice's share of each row's sum, for the other slices of the group."""
    if FLAG_WORDS:  # bit 32 says "written", the low 32 bits hold the fp32 value
        word = (share.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | 0x100000000
        tl.atomic_xchg(shares_ptr + rows * SLICES + part, word, mask=row_ok, sem="relaxed")
    else:
        tl.store(shares_ptr + rows * SLICES + part, share, mask=row_ok)
        tl.debug_barrier()  # every thread's store is issued before the counter moves
        tl.atomic_add(counter_ptr + block, 1, mask=block < n_blocks, sem="release")

@triton.jit
def wait_for_shares(shares_ptr, counter_ptr, block, rows, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr):
    """[BLOCK_M, SLICES] shares of the rows of ``block``, once every slice has published them."""
    slots = shares_ptr + rows[:, None] * SLICES + tl.arange(0, SLICES)[None, :]
    if FLAG_WORDS:
        words = tl.load(slots, volatile=True)
        while tl.min(words >> 32) == 0:  # some slice has not written yet
            words = tl.load(slots, volatile=True)
        # A tile smaller than the program is held in copies, one per group of warps; the test above may be decided on
        # another warp's copy: a copy still unwritten here (loaded before that slice wrote) is read again, once.
        stale = (words >> 32) == 0
        words = tl.where(stale, tl.load(slots, mask=stale, other=0, volatile=True), words)
        shares = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    else:
        arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        while arrived < SLICES:
            arrived = tl.atomic_add(counter_ptr + block, 0, sem="acquire")
        shares = tl.load(slots, cache_modifier=".cg")
    return shares

@triton.jit
def rms_norm_bwd_split_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, shares_ptr, counter_ptr, n_rows, n_cols,
    x_row_stride, dy_row_stride, dx_row_stride,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, SLICES: tl.constexpr, FLAG_WORDS: tl.constexpr,
    PACK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program p is slice p % SLICES of group p // SLICES; group q does blocks q, q + Q, ... (Q groups)."""
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    n_blocks = tl.cdiv(n_rows, BLOCK_M)
    dtype = x_ptr.dtype.element_ty
    UNITS: tl.constexpr = BLOCK_N // 2 if PACK else BLOCK_N  # what a tile's row holds: words or elements
    units = part * UNITS + tl.arange(0, UNITS)
    unit_ok = units < (n_cols // 2 if PACK else n_cols)
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    # The loads of this program's first two blocks, and its share of the first one. (Names used in the
    # loop are not reused here: Triton would carry them around the loop.)
    first = group * BLOCK_M + tl.arange(0, BLOCK_M)
    x_this = load_tile(x_ptr, first, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_this = load_tile(dy_ptr, first, dy_row_stride, units, unit_ok, n_rows, PACK)
    second = first + n_groups * BLOCK_M
    x_next = load_tile(x_ptr, second, x_row_stride, units, unit_ok, n_rows, PACK)
    dy_next = load_tile(dy_ptr, second, dy_row_stride, units, unit_ok, n_rows, PACK)
    first_ok = first < n_rows
    first = tl.minimum(first, n_rows - 1).to(tl.int64)
    first_g = tile_to_f32(dy_this, dtype, PACK)
    if HAS_WEIGHT:
        first_g = first_g * w[None, :]
    first_x_hat = tile_to_f32(x_this, dtype, PACK) * tl.load(rstd_ptr + first)[:, None]
    first_share = tl.sum(first_g * first_x_hat, axis=1)
    publish_share(shares_ptr, counter_ptr, group, n_blocks, first, first_ok, part, first_share, SLICES, FLAG_WORDS)
    for block in tl.range(group, n_blocks, n_groups):
        # the block after next: two blocks of loads in flight while this one is worked on
        after_rows = (block + 2 * n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_after = load_tile(x_ptr, after_rows, x_row_stride, units, unit_ok, n_rows, PACK)
        dy_after = load_tile(dy_ptr, after_rows, dy_row_stride, units, unit_ok, n_rows, PACK)
        # this block's values (its rstd loaded first: a load issued late stalls the program)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
        rstd = tl.load(rstd_ptr + rows)
        x_hat = tile_to_f32(x_this, dtype, PACK) * rstd[:, None]
        dy = tile_to_f32(dy_this, dtype, PACK)
        g = dy * w[None, :] if HAS_WEIGHT else dy
        # the next block's share, published before waiting for this block's shares (rows past the end
        # publish nothing)
        next_rows = (block + n_groups) * BLOCK_M + tl.arange(0, BLOCK_M)
        next_ok = next_rows < n_rows
        next_rows = tl.minimum(next_rows, n_rows - 1).to(tl.int64)
        next_x_hat = tile_to_f32(x_next, dtype, PACK) * tl.load(rstd_ptr + next_rows)[:, None]
        next_g = tile_to_f32(dy_next, dtype, PACK)
        if HAS_WEIGHT:
            next_g = next_g * w[None, :]
        publish_share(shares_ptr, counter_ptr, block + n_groups, n_blocks, next_rows, next_ok, part,
                      tl.sum(next_g * next_x_hat, axis=1), SLICES, FLAG_WORDS)
        # this block: dw, then dx once the group's shares are in
        if COMPUTE_DW:
            dw_acc += dy * x_hat
        shares = wait_for_shares(shares_ptr, counter_ptr, block, rows, SLICES, FLAG_WORDS)
        c = tl.sum(shares, axis=1) / n_cols
        dx = (g - x_hat * c[:, None]) * rstd[:, None]
        store_tile(dx_ptr, rows, dx_row_stride, units, row_ok[:, None] & unit_ok[None, :], dx, PACK)
        x_this, dy_this, x_next, dy_next = x_next, dy_next, x_after, dy_after
    if COMPUTE_DW:  # one partial row per group; each slice writes its columns of it
        tl.store(dw_partial_ptr + tl.cast(group, tl.int64) * n_cols + cols, tl.sum(dw_acc, axis=0), mask=col_ok)

# Launch parameters: ``_split_config`` chooses the slices, the block and the warps; the grid is whole groups, all on the
# GPU at once, from the compiled kernel's occupancy.
MAX_FUSED_N, MAX_SPLIT_N = 8192, 131072  # split past the core's fused kernel, up to 32 slices of SLICE_N
SLICE_N = 4096  # columns per slice at most: one row of 4096 per block, measured fastest on Hopper
WARPS_PER_SM = 16  # two bf16 programs (8 warps) or one fp32 program (16) per SM, each with its maxnreg share
SPLIT = dict(TILE=4096, BYTES_PER_THREAD=32)  # elements per block, bytes of each tile per thread (any dtype)
RANGE = {("backward", t): range(MAX_FUSED_N + 1, 2**31) for t in ("float32", "bfloat16")}  # the N the site
RANGE |= {("forward", "float32"): range(16385, 65537), ("forward", "bfloat16"): range(32769, 65537)}  # recommends

def _split_config(n_cols, dtype, has_weight, compute_dw, tensors=(), split=None):
    """The split backward's meta-parameters; tensors (x2d, dy2d, dx2d): can 16-bit rows load as words. split: SPLIT."""
    element_size, split = torch.empty((), dtype=dtype).element_size(), split or SPLIT
    # one slice under the interpreter: it runs one program at a time, and a program must never wait for another
    slices = min(MAX_SPLIT_N // SLICE_N, triton.next_power_of_2(triton.cdiv(n_cols, SLICE_N))) if ON_GPU else 1
    block_n = triton.next_power_of_2(triton.cdiv(n_cols, slices))
    block_m = max(1, split["TILE"] // block_n)
    num_warps = _warps(block_m * block_n, element_size, split["BYTES_PER_THREAD"])
    # two 16-bit elements per 32-bit word: even rows, even strides, 4-byte aligned tensors
    pack = element_size == 2 and n_cols % 2 == 0 and all(t.stride(0) % 2 == 0 and t.data_ptr() % 4 == 0 for t in tensors)
    meta = dict(HAS_WEIGHT=has_weight, COMPUTE_DW=compute_dw, SLICES=slices, FLAG_WORDS=num_warps <= 16,
                PACK=pack, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    # Each thread's share of the registers when WARPS_PER_SM warps live on an SM. Unpacked 16-bit rows
    # need more than that: they run with fewer programs per SM rather than spill their loads.
    if ON_GPU and (pack or element_size == 4):
        regs = getattr(torch.cuda.get_device_properties(DEVICE), "regs_per_multiprocessor", 65536)
        meta["maxnreg"] = min(255, regs // (32 * max(WARPS_PER_SM, num_warps)) // 8 * 8)
    return meta

_occupancy = {}  # (kernel, argument types, meta) -> (programs per SM, what limits it, registers)
def programs_per_sm(kernel, args, meta):
    """How many programs of this compiled kernel fit on one SM at once, what limits it, and its registers."""
    # Triton compiles a version per argument dtype, integer equal to 1 or a multiple of 16 (and 16-byte aligned pointer)
    key = (kernel, tuple(a.dtype if isinstance(a, torch.Tensor) else (a == 1, a % 16 == 0) for a in args),
           tuple(sorted(meta.items())))
    if not ON_GPU:  # nothing is compiled under the interpreter
        return (1, "interpreter", 0)
    if key not in _occupancy:
        props, threads = torch.cuda.get_device_properties(DEVICE), 32 * meta["num_warps"]
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()
        n_regs, smem = max(compiled.n_regs, 1), compiled.metadata.shared
        limits = {"threads": props.max_threads_per_multi_processor // threads,
                  "registers": getattr(props, "regs_per_multiprocessor", 65536) // (n_regs * threads),
                  "shared memory": (getattr(props, "shared_memory_per_multiprocessor", 233472) // smem) if smem else 32}
        limit = min(limits, key=limits.get)
        _occupancy[key] = (max(1, limits[limit]), limit, n_regs)
    return _occupancy[key]

def split_args(x2d, w, rstd, dy2d, dx2d, dw_partial, meta, clear=True):
    """The split kernel's arguments: tensors, the shares' slots (cleared as flag words), the counters (cleared), sizes
    and strides. ``clear=False``: one-element buffers of the same types, enough to compile it (nothing reads them)."""
    (n_rows, n_cols), flags, dev = x2d.shape, meta["FLAG_WORDS"], x2d.device
    if not clear:
        shares, counter = (torch.empty(1, device=dev, dtype=torch.int64 if flags else t) for t in (torch.float32, torch.int32))
    else:
        shares = torch.zeros((n_rows, meta["SLICES"]), device=dev, dtype=torch.int64) if flags else \
            torch.empty((n_rows, meta["SLICES"]), device=dev, dtype=torch.float32)
        counter = shares if flags else torch.zeros(triton.cdiv(n_rows, meta["BLOCK_M"]), device=dev, dtype=torch.int32)
    return (x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, shares, counter, n_rows, n_cols,
            x2d.stride(0), dy2d.stride(0), dx2d.stride(0))

def backward_plan(x2d, w, rstd, dy2d, dx2d, compute_dw, split_from=MAX_FUSED_N, split=None):
    """(kernel, meta, grid, (programs per SM, limit, registers)) of the backward for these very tensors: split from
    ``split_from`` to MAX_SPLIT_N columns when a group fits on the GPU, else the chunked kernel."""
    n_rows, n_cols = x2d.shape
    if split_from < n_cols <= MAX_SPLIT_N:
        meta = _split_config(n_cols, x2d.dtype, w is not None, compute_dw, (x2d, dy2d, dx2d), split)
        fit = programs_per_sm(rms_norm_bwd_split_kernel, split_args(x2d, w, rstd, dy2d, dx2d, rstd, meta, clear=False), meta)
        per_sm = min(fit[0], max(1, WARPS_PER_SM // meta["num_warps"]))
        groups = min(triton.cdiv(n_rows, meta["BLOCK_M"]), per_sm * NUM_SMS // meta["SLICES"])
        if groups > 0:  # its programs wait for each other: all of them must fit
            return rms_norm_bwd_split_kernel, meta, groups * meta["SLICES"], fit
    meta, grid = _chunked_config(n_rows, n_cols, x2d.element_size())
    return rms_norm_bwd_chunked_kernel, dict(meta, HAS_WEIGHT=w is not None, COMPUTE_DW=compute_dw), grid, None

def rms_norm_wide_backward(x2d, w, rstd, dy2d, dx2d, dw, split_from=MAX_FUSED_N, split=None):
    """dx2d and (when dw is not None) dw from x2d, w, rstd and dy2d, rows of unit stride. Returns the plan."""
    (n_rows, n_cols), compute_dw = x2d.shape, w is not None and dw is not None
    kernel, meta, grid, fit = backward_plan(x2d, w, rstd, dy2d, dx2d, compute_dw, split_from, split)
    n_partials = grid // meta.get("SLICES", 1)  # a partial row per group, all written: no buffer needs clearing
    dw_partial = torch.empty((n_partials, n_cols), dtype=torch.float32, device=x2d.device) if compute_dw else rstd
    args = split_args(x2d, w, rstd, dy2d, dx2d, dw_partial, meta) if kernel is rms_norm_bwd_split_kernel else \
        (x2d, x2d if w is None else w, rstd, dy2d, dx2d, dw_partial, n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0))
    kernel[(grid,)](*args, **meta)
    if compute_dw:  # narrow strips of columns, each summing all partials in order
        block_n = 16 if n_cols <= 4096 else 32
        dw_reduce_kernel[(triton.cdiv(n_cols, block_n),)](dw_partial, dw, n_partials, n_cols, BLOCK_P=64, BLOCK_N=block_n, num_warps=4)
    return kernel, meta, grid, fit

def rms_norm_backward(x2d, w, rstd, dy2d, split_from=MAX_FUSED_N):  # (dx, dw); split_from=math.inf: the chunked kernel
    dx2d, dw = torch.empty_like(x2d), torch.empty(x2d.shape[1], device=x2d.device, dtype=w.dtype)
    rms_norm_wide_backward(x2d, w, rstd, dy2d, dx2d, dw, split_from)
    return dx2d, dw

def rstd_of(x2d, eps=1e-6):  # 1 / rms of each row in fp32, as a forward saves it for its backward
    return torch.rsqrt(x2d.float().pow(2).mean(dim=1) + eps)

# %%
# Correctness
# -----------
# :math:`y`, :math:`dx`, :math:`dw` against float64 on the same rounded inputs, beside PyTorch's error in the same dtype:
# ours no worse, the same bits on a second run. The forward's first row is scaled by the root of the dtype's largest
# value: in fp32 and bf16 its sum of squares passes fp32.

CHECK_SHAPES = [(63, 16384), (64, 30000), (16, 100_003), (8, 131072)] if ON_GPU else [(3, 9000), (2, 20_001)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few units of rounding
rel = lambda out, ref: ((out.double() - ref).norm() / ref.norm()).item()
warnings.filterwarnings("ignore", "overflow", RuntimeWarning)  # the interpreter's numpy, where that row overflows

def check(shape, dtype):
    torch.manual_seed(shape[1])
    x, dy = (3 * torch.randn(shape, device=DEVICE)).to(dtype), torch.randn(shape, device=DEVICE, dtype=dtype)
    w, x_big = (1 + 0.5 * torch.randn(shape[1], device=DEVICE)).to(dtype), x.clone()
    x_big[0] *= torch.finfo(dtype).max ** 0.5
    def torch_values(d):  # y of x_big, dx and dw of x: torch's, in dtype d
        xd, wd = (t.to(d).clone().requires_grad_(True) for t in (x, w))
        dx_dw = torch.autograd.grad(F.rms_norm(xd, shape[1:], wd, 1e-6), (xd, wd), dy.to(d))
        return F.rms_norm(x_big.to(d), shape[1:], wd, 1e-6), *dx_dw
    run = lambda: (rms_norm_forward(x_big, w)[0], *rms_norm_backward(x, w, rstd_of(x), dy))  # y, dx, dw
    ours, refs = run(), torch_values(torch.float64)
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "same bits": all(map(torch.equal, ours, run())),
           "backward": backward_plan(x, w, rstd_of(x), dy, x, True)[0].__name__[13:-7]}
    return row | {f"{name} {q}": rel(v, ref) for name, values in (("ours", ours), ("torch", torch_values(dtype)))
                  for q, v, ref in zip(("y", "dx", "dw"), values, refs)}

errors = pd.DataFrame([check(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in CHECK_SHAPES])
for q in ("y", "dx", "dw"):
    assert (errors[f"ours {q}"] <= (2 * errors[f"torch {q}"]).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors.to_string()
assert errors["same bits"].all(), errors.to_string()
errors.style.format({c: "{:.1e}" for c in errors.columns if c.startswith(("ours", "torch"))}).hide(axis="index")

# %%
# Benchmark
# ---------
# Where ``RANGE`` claims each direction, :math:`MN = 2^{26}` elements on a GPU. A peer's forward is its function of
# :math:`x, w`, its backward ``autograd.grad`` of both after its forward; ours, the launchers with their allocations (the
# backward on the :math:`r` a forward saved); *chunked*, the chunked backward. Each is a CUDA graph timed by
# :func:`triton.testing.do_bench` (median, L2 flushed), beside a copy of :math:`x` (the speed of light). GB/s counts
# :math:`x, y` or :math:`x, dy, dx`. The peers: PyTorch, ``torch.compile``, Liger-Kernel, quack (CuTe-DSL, compute
# capability 9.0 and newer); "-": a peer's limit. Then the backward's plan: what the launcher chose.

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**14
SWEEP_N = [16384, 32768, 65536] if ON_GPU else [33_000]

def bench(fn, graph=True):  # median ms of fn(): CUDA-graph replays timed by do_bench on a GPU, a wall clock on a CPU
    if not ON_GPU:  # one call on a wall clock: the interpreter compiles nothing, and its times mean nothing
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up outside the timing (torch.cuda.graph synchronizes before it captures)
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
fns = {"torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}  # a peer's forward f(x, w)
if peer_module("torch.compile", "torch"):  # on a GPU: on the CPU, Inductor would time a C++ compiler, not a GPU
    torch.cuda.set_stream(torch.cuda.Stream())  # graphs are not captured on the default stream (nor autograd's)
    for knob in {"cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"} & set(dir(torch._dynamo.config)):
        setattr(torch._dynamo.config, knob, 1024)  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(fns["torch"], dynamic=False)
liger, quack = peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"), peer_module("quack", "quack", min_major=9)  # quack: Dao-AILab's CuTe-DSL kernels
fns |= {"Liger": lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)} if liger else {}
fns |= {"quack": lambda x, w: quack.rmsnorm(x, w, eps=EPS)} if quack else {}  # with autograd
def measure(direction, x, w, dy):  # {provider: ms}: nan where a peer fails, saying why
    xg, wg, rstd, times = x.clone().requires_grad_(True), w.clone().requires_grad_(True), rstd_of(x, EPS), {}
    ours = {"this page": lambda: rms_norm_forward(x, w, EPS)} if direction == "forward" else {
        "chunked": lambda: rms_norm_backward(x, w, rstd, dy, split_from=math.inf), "this page": lambda: rms_norm_backward(x, w, rstd, dy)}
    grads = lambda y: lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)  # a peer's backward, after its forward
    for name, fn in (fns | ours).items():
        try:
            times[name] = bench(ours.get(name) or (grads(fn(xg, wg)) if direction == "backward" else lambda: fn(x, w)))
        except Exception as err:  # a peer's limit
            if name in ours:
                raise
            print(f"{name}: not measured at {direction} {str(x.dtype)[6:]} N = {x.shape[1]} ({type(err).__name__}: {' '.join(str(err).split())[:100]})")
            times[name] = float("nan")
    return times

records, plans = [], []
for dtype in (torch.float32, torch.bfloat16):
    for n_cols in SWEEP_N:
        x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
        w, dy, out = (1 + 0.1 * torch.randn(n_cols, device=DEVICE)).to(dtype), torch.randn_like(x), torch.empty_like(x)
        key, nbytes = {"dtype": str(dtype)[6:], "N": n_cols}, x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: out.copy_(x), graph=False) * 1e-6
        kernel, meta, grid, fit = backward_plan(x, w, rstd_of(x, EPS), dy, x, True)
        plans.append(key | {"direction": "backward", "slices": meta.get("SLICES", "-"), "warps": meta["num_warps"], "grid": grid,
                            "tile": f"{meta['BLOCK_M']} x {meta['BLOCK_N']}" if "BLOCK_M" in meta else f"chunks of {meta['CHUNK_N']}",
                            "wait": ("flag words" if meta["FLAG_WORDS"] else "counter") if "SLICES" in meta else "-", "PACK": meta.get("PACK", "-"),
                            **dict(zip(("programs / SM", "limited by", "registers"), fit if fit and ON_GPU else "---"))})
        for direction in [d for d in ("forward", "backward") if n_cols in RANGE[d, key["dtype"]]]:
            records += [key | {"direction": direction, "provider": name, "light": light,
                               "GB/s": (2 if direction == "forward" else 3) * nbytes / ms * 1e-6} for name, ms in measure(direction, x, w, dy).items()]
        del x, w, dy, out
        torch.cuda.empty_cache() if ON_GPU else None
results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
results["% of light"] = 100 * results["GB/s"] / results.light
table = results.pivot_table(index=keys, columns="provider", values="GB/s", dropna=False)[[*fns, "chunked", "this page"]]
table.insert(0, "speed of light", results.groupby(keys).light.first())
table["this page, % of light"] = 100 * table["this page"] / table["speed of light"]
table["this page / chunked"] = table["this page"] / table["chunked"]
table["this page / best peer"] = table["this page"] / table[list(fns)].max(axis=1)
if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
    table[["this page, % of light", "this page / best peer"]].set_axis(["ours, % of light", "ours / best peer"], axis=1).assign(
        recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]).to_csv(
        os.path.join(os.environ["SOL_RESULTS"], "41_rms_norm_wide_backward.csv"))
table = table.join(pd.DataFrame(plans, dtype=object).set_index(keys))
table.style.format({c: "{:.0f}" for c in ["speed of light", *fns, "chunked", "this page"]}
                   | {"this page, % of light": "{:.1f}%", "this page / chunked": "{:.2f}", "this page / best peer": "{:.2f}"}, na_rep="-") if ON_GPU \
    else print(NO_SPEED)  # the interpreter's times are no GPU's speeds

# %%
# Reading the numbers
# -------------------
# On a GPU, the table as a plot, each provider as a percentage of the copy measured beside it; then what this build's table says.

if ON_GPU:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey=True, facecolor="white", layout="constrained")
    styles = {"torch": "--", "torch.compile": "-.", "Liger": (0, (3, 1, 1, 1)), "quack": (0, (5, 1)), "chunked": ":", "this page": "-"}
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"])):
        for name, line in part.groupby("provider", sort=False):
            ax.plot(line.N, line["% of light"], linestyle=styles[name], marker="o", label=name, linewidth=2.5 if name == "this page" else 1.5)
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)")
        ax.set_xscale("log", base=2), ax.grid(True, alpha=0.3)
        ax.set(title=f"{direction}, {dtype}", xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
    axes[0, 0].legend(loc="lower left", fontsize=8), fig.suptitle(f"RMSNorm, wide rows, M x N = {TOTAL_ELEMENTS:,}, on {WHERE}")
    plt.show()
    for (direction, dtype), part in table.reset_index().set_index("N").groupby(["direction", "dtype"], sort=False):
        pct, vs_chunked, vs_peer = part["this page, % of light"], part["this page / chunked"], part["this page / best peer"]
        print(f"{direction} {dtype}: ours runs at {pct.min():.3g}% (N = {pct.idxmin()}) to {pct.max():.3g}% (N = {pct.idxmax()}) of the copy"
              + (f", {vs_chunked.min():.3g}x to {vs_chunked.max():.3g}x the chunked backward" if vs_chunked.notna().any() else "")
              + (f", {vs_peer.min():.3g}x to {vs_peer.max():.3g}x the best peer" if vs_peer.notna().any() else "")
              + (f"; slices per row: {part.slices.tolist()}, programs per SM: {part['programs / SM'].tolist()}" if direction == "backward" else "") + ".")
    short = table[(table["this page, % of light"] < 95) | (table["this page / best peer"] < 0.99)].index  # the site's bar: both
    print("Under 95% of the copy or 0.99x the best peer: " + ("; ".join(f"{d} {t} N = {n}" for d, t, n in short) or "none"))
else:
    print(NO_SPEED)

# %%
# Going further
# -------------
# The forward reads a row twice; :ref:`sphx_glr_tutorials_deep_dives_42_rms_norm_staged_gluon.py` stages 16-bit rows of
# up to 32 K in shared memory and reads them once. The backward's exchange goes through L2; quack spreads a row over a
# *cluster* of thread blocks that read each other's shared memory (Hopper's), a shorter trip, which Triton 3.6 cannot
# compile (Gluon in Triton 3.9 can). **Gaps** (this build's are named above): 16-bit slices run at most 4 programs an SM;
# unpacked rows, tiles of 2 x 2048, 1 x 8192 or 1 x 2048, and no lookahead measured slower on Hopper. A row just past a
# power of two of ``SLICE_N`` leaves its last slices nearly empty. **Exercise**: 64 bytes a thread in ``SPLIT``: what spills?
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
