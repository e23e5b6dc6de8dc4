"""
Layer norm, forward and backward
================================

Layer norm brings each row to zero mean and unit variance, then scales and shifts it. You build a drop-in for
:func:`torch.nn.functional.layer_norm`, timed against PyTorch, ``torch.compile``, Liger-Kernel, quack and a copy (the
*speed of light*). **What you will learn**: a ladder of two forward kernels; a backward without locks. Triton basics:
:ref:`sphx_glr_tutorials_01_fused_softmax.py`.
"""

import importlib, importlib.util, math, os, time, typing
import torch, torch.nn.functional as F, torch.utils.collect_env as collect_env
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton
import pandas as pd, triton, triton.language as tl
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The bytes model
# ---------------
# A row *x* becomes :math:`y = (x - \mu) \, r \odot w + b`, with mean :math:`\mu` and
# :math:`r = 1 / \sqrt{\sigma^2 + \epsilon}` (``rstd``). Below, PyTorch moves *12MN* elements; a kernel keeping each
# row on chip moves *2MN*: about **6 times faster**.

def naive_layer_norm(x, weight, bias, eps=1e-5):
    xc = x - x.mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt((xc * xc).mean(dim=-1, keepdim=True) + eps) * weight + bias

# %%
# Step 0: one row a program
# -------------------------
# Program ``row`` holds its row, padded to ``BLOCK_N``, in registers: the mean, then the variance of *x - mean* (no
# cancellation as in *E[x²] - mean²*), in fp32, on Triton's default 4 warps.

@triton.jit
def plain_layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    offs = row.to(tl.int64) * n_cols + cols  # int64: M * N may pass 2**31
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    xc = tl.where(ok, x - tl.sum(x, axis=0) / n_cols, 0.0)  # the padding must not count in the variance
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    y = xc * rstd * tl.load(w_ptr + cols, mask=ok).to(tl.float32) + tl.load(b_ptr + cols, mask=ok).to(tl.float32)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=ok)
def plain_forward(x, y, w, b, eps=1e-5):
    plain_layer_norm_fwd_kernel[(len(x),)](x, y, w, b, x.shape[1], eps, BLOCK_N=triton.next_power_of_2(x.shape[1]))

# %%
# Step 1: blocks of rows, warps sized to their bytes
# --------------------------------------------------
# A row of 512 bf16 is 1 KB: 8 bytes a thread of 4 warps, then a wait; an SM holds too few such programs to keep
# memory busy. The drop-in's forward gives a program ``BLOCK_M`` rows, ``MIN_ELEMENTS`` or more, and warps for about
# 64 bytes a thread; it also stores the backward's statistics. (Its loop runs once here; ``.cg`` loads skip L1.)
# ``row_stats`` centres each row on its first value, so a constant row is exactly 0 (a rounded mean is not quite its
# value: 0.3 for rows of 12345.678), and scales it by a power of two, k: squares of deviations up to ~1e24 stay finite.

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
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
        # x is read once: loaded past L1 (".cg", L2 only), it leaves L1 to w and b, read by every row
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :],
                    mask=col_ok[None, :], other=0.0, cache_modifier=".cg").to(tl.float32)
        x0 = tl.sum(tl.where(cols[None, :] == 0, x, 0.0), axis=1)  # each row's first value, in the tile's layout
        xc, mean, rstd = row_stats(x, x0, col_ok[None, :], n_cols, eps, BLOCK_N)
        y = xc * rstd[:, None]
        # w and b loaded where used: held across the row's reductions they would double a wide row's registers
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else y
        y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_B else y
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
        if BLOCK_N >= 512:  # a row over whole warps: its statistics stored plainly
            tl.store(mean_ptr + rows, mean, mask=row_ok)
            tl.store(rstd_ptr + rows, rstd, mask=row_ok)
        else:  # several rows a warp: column 0's thread stores; + cols keeps the tile's layout (no shared memory)
            first = row_ok[:, None] & (cols == 0)[None, :]
            tl.store(mean_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(mean[:, None], x.shape), mask=first)
            tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape), mask=first)

# %%
# The backward, without locks
# ---------------------------
# With :math:`g = dy \odot w`, :math:`dx = r \, (g - \overline{g} - \hat{x} \, \overline{g \hat{x}})` (bars: row means);
# *dw*, *db* sum *dy x_hat*, *dy* over rows. A *persistent* grid, a program an SM, gives program *p* of *P* the blocks
# *p, p + P, ...* and its own line of a ``[P, N]`` buffer for its sums: no lock, no atomic. A second kernel adds the
# lines in a fixed order: the same bits every run. ``tl.range(..., num_stages=S)`` loads the next ``S - 1`` blocks into
# shared memory while one is computed. With spin locks: :ref:`sphx_glr_tutorials_deep_dives_24_layer_norm_backward_locks.py`.

@triton.jit
def layer_norm_bwd_kernel(
    x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
    HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
):
    """Persistent: program p takes the blocks of rows p, p + P, p + 2P, ... (P programs)."""
    pid, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:  # loaded once per program, reused for every row it visits
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc, db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32), tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok, rows = rows < n_rows, rows.to(tl.int64)
        ok = row_ok[:, None] & col_ok[None, :]  # rows past the end load as zeros: dy = 0 adds nothing to dw, db
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        mean, rstd = tl.load(mean_ptr + rows, mask=row_ok, other=0.0), tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :] if HAS_W else dy
        c1, c2 = tl.sum(x_hat * g, axis=1) / n_cols, tl.sum(g, axis=1) / n_cols
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)
        if COMPUTE_DWDB:
            dw_acc += dy * x_hat
            db_acc += dy
    if COMPUTE_DWDB:  # every program writes its whole line, zeros included: nothing needs clearing
        offs = tl.cast(pid, tl.int64) * n_cols + cols
        tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
        tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)
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

# %%
# Rows too long for registers
# ---------------------------
# Past ``MAX_FUSED_N`` (forward) or ``MAX_BWD_FUSED_N`` (backward) columns, a row is read twice in chunks, the last
# chunk first the second time (``eviction_policy`` asks L2 to keep or drop a load).

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

# %%
# Launch parameters and the drop-in
# ---------------------------------
# Measured fastest on an H100 (:ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`). In the configs: rows of
# 512 take 128 bytes a thread, others 64; chunks, 32 warps forward, 16 backward (16 values a thread); 2 to 4 stages,
# as ``BWD_STAGE_BYTES`` allows. As PyTorch operators (``torch.library.custom_op``), the kernels stay in the graph of
# a model compiled with ``fullgraph=True``; ``register_fake`` gives it their outputs' shapes without running them.

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # any will do on a CPU
SMEM_PER_BLOCK = torch.cuda.get_device_properties(DEVICE).shared_memory_per_block_optin if ON_GPU else 232448
MAX_FUSED_N = 32768  # forward: 32 fp32 a thread of 32 warps fill the registers
MAX_BWD_FUSED_N = {2: 8192, 4: 8192}  # backward: x, dy and 2 accumulators fill the registers
MIN_ELEMENTS = 4096  # forward: enough bytes in flight to hide latency
FWD_MIN_BYTES_PER_SM = 40960  # forward: less x in flight an SM: twice the rows
BWD_MIN_BYTES = 8192  # backward: a block's x fills a pipeline stage
BWD_PROGRAMS_PER_SM, BWD_VALUES_PER_THREAD = 1, 32  # backward: pipelined loads keep one busy; more would spill
BWD_STAGE_BYTES = 98304  # backward: under half an SM's shared memory, and within SMEM_PER_BLOCK, the device's
BWD_WARPS_PER_SM = 32  # chunked backward: half an SM's 64 warps was fastest
CHUNK_N = {"forward": 16384, "backward": 4096}  # a chunk: what the warps' registers hold
RANGE = {("forward", "float32"): range(1, 16384 + 1), ("forward", "bfloat16"): range(1, 8192 + 1),  # the N these
         ("backward", "float32"): range(1, 8192 + 1), ("backward", "bfloat16"): range(1, 8192 + 1)}  # kernels are for
SUM_META = dict(BLOCK_P=128, BLOCK_C=16 if ON_GPU else 4096, num_warps=8)  # dw, db: narrow strips, many programs
SUPPORTED_DTYPES, _occupancy = (torch.float32, torch.float16, torch.bfloat16), {}  # _occupancy: programs_per_sm's
def _warps(n_elements, element_size, bytes_per_thread, least=4):  # about bytes_per_thread bytes a thread, 32 at most
    return min(32, max(least, n_elements * element_size // (32 * bytes_per_thread)))
def programs_per_sm(kernel, args, meta):
    """Programs of this compiled kernel an SM holds at once, by threads, registers and shared memory."""
    key = (kernel, tuple((a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                         else (a == 1, a % 16 == 0) if isinstance(a, int) else type(a) for a in args),
           tuple(sorted(meta.items())))
    if key not in _occupancy and not ON_GPU:  # the interpreter runs programs one by one
        _occupancy[key] = 1
    elif key not in _occupancy:
        props, threads = torch.cuda.get_device_properties(DEVICE), 32 * meta["num_warps"]
        compiled = kernel.warmup(*args, grid=(1,), **meta)
        compiled._init_handles()  # loads it: n_regs is known after
        smem = compiled.metadata.shared
        _occupancy[key] = max(1, min(props.max_threads_per_multi_processor // threads,
                                     getattr(props, "regs_per_multiprocessor", 65536) // (max(compiled.n_regs, 1) * threads),
                                     getattr(props, "shared_memory_per_multiprocessor", 233472) // smem if smem else 32))
    return _occupancy[key]
def _fwd_config(n_rows, n_cols, element_size, occupancy, chunk_n=None):
    """(kernel, meta, grid): a program per block of rows; occupancy(kernel, meta) is the programs an SM holds."""
    if chunk_n is None and n_cols <= MAX_FUSED_N:
        block_m = max(1, MIN_ELEMENTS // (block_n := triton.next_power_of_2(n_cols)))  # several short rows a program
        bytes_per_thread, least = (128, 2) if block_n == 512 else (64, 4)  # of x; rows of 512: faster on an H100
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=_warps(block_m * block_n, element_size, bytes_per_thread, least))
        if ON_GPU and n_rows > block_m and (  # a wide row's registers leave room for few programs: few bytes in flight
                occupancy(layer_norm_fwd_kernel, meta) * block_m * block_n * element_size < FWD_MIN_BYTES_PER_SM):
            meta["BLOCK_M"] = 2 * block_m
        return layer_norm_fwd_kernel, meta, triton.cdiv(n_rows, meta["BLOCK_M"])
    return layer_norm_fwd_chunked_kernel, dict(CHUNK_N=chunk_n or CHUNK_N["forward"], num_warps=32), n_rows
def _bwd_config(n_rows, n_cols, element_size, occupancy, programs=None, chunk_n=None):
    """(kernel, meta, lines, rows per program): one partial line a program, at most ``programs`` lines."""
    if chunk_n is None and n_cols <= MAX_BWD_FUSED_N[min(element_size, 4)]:
        block_m = max(1, BWD_MIN_BYTES // element_size // (block_n := triton.next_power_of_2(n_cols)))
        tile = 2 * block_m * block_n  # x and dy a stage; narrow tiles stage 4 bytes a value, and 16 KB stay spare
        kernel, stages = layer_norm_bwd_kernel, min(BWD_STAGE_BYTES // (tile * element_size),
                                                    (SMEM_PER_BLOCK - 16384) // (tile * max(element_size, 4)))
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=_warps(block_m * block_n, 4, 4 * BWD_VALUES_PER_THREAD),
                    STAGES=max(2, min(4, stages)))  # 4 stages of 8 KB blocks, 3 of 16 KB, 2 of 32 KB
        per_sm = BWD_PROGRAMS_PER_SM
    else:
        block_m, kernel = 1, layer_norm_bwd_chunked_kernel
        meta = dict(CHUNK_N=chunk_n or CHUNK_N["backward"], num_warps=16)
        per_sm = min(occupancy(kernel, meta), max(1, BWD_WARPS_PER_SM // meta["num_warps"]))
    lines = max(1, min(per_sm * NUM_SMS if programs is None else programs, n_blocks := triton.cdiv(n_rows, block_m)))
    rows_per_program = triton.cdiv(n_blocks, lines) * block_m  # strided blocks; a run of rows if chunked
    return kernel, meta, triton.cdiv(n_rows, rows_per_program), rows_per_program
def layer_norm_rows_forward(x2d, y2d, weight, bias, mean, rstd, eps, chunk_n=None):
    """y2d, mean, rstd of x2d's rows; chunk_n forces chunks. Returns the kernel."""
    (n_rows, n_cols), flags = x2d.shape, dict(HAS_W=weight is not None, HAS_B=bias is not None)
    args = (x2d, y2d, x2d if weight is None else weight, x2d if bias is None else bias, mean, rstd,
            n_rows, n_cols, x2d.stride(0), y2d.stride(0), eps)
    kernel, meta, grid = _fwd_config(n_rows, n_cols, x2d.element_size(),
                                     lambda k, m: programs_per_sm(k, args, m | flags), chunk_n)
    kernel[(grid,)](*args, **meta, **flags)
    return kernel
def layer_norm_rows_backward(x2d, dy2d, dx2d, weight, mean, rstd, dw=None, db=None, programs=None, chunk_n=None):
    """dx2d, dw, db; programs caps the lines, chunk_n forces chunks. Returns (kernel, lines)."""
    (n_rows, n_cols), flags = x2d.shape, dict(HAS_W=weight is not None, COMPUTE_DWDB=dw is not None)
    stand_in = torch.empty(1, device=x2d.device, dtype=torch.float32)
    def args(kernel, dw_partial=stand_in, db_partial=stand_in, rows_per_program=1):
        chunked = (rows_per_program,) if kernel is layer_norm_bwd_chunked_kernel else ()
        return (x2d, dy2d, dx2d, x2d if weight is None else weight, mean, rstd, dw_partial, db_partial,
                n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0), *chunked)
    kernel, meta, lines, rows_per_program = _bwd_config(
        n_rows, n_cols, x2d.element_size(), lambda k, m: programs_per_sm(k, args(k), m | flags), programs, chunk_n)
    shape = (lines, n_cols) if dw is not None else (1,)  # a line per program, all written: nothing needs clearing
    dw_partial, db_partial = (torch.empty(shape, device=x2d.device, dtype=torch.float32) for _ in range(2))
    kernel[(lines,)](*args(kernel, dw_partial, db_partial, rows_per_program), **meta, **flags)
    if dw is not None:  # the lines' sums, in a fixed order
        grid = (triton.cdiv(n_cols, SUM_META["BLOCK_C"]),)
        sum_partials_kernel[grid](dw_partial, db_partial, dw, db, lines, n_cols, **SUM_META)
    return kernel, lines
def _rows(t, n_rows, n_cols):  # unit-stride rows, copied only if needed
    return t2d if (t2d := t.reshape(n_rows, n_cols)).stride(1) == 1 or n_cols <= 1 else t2d.contiguous()
@torch.library.custom_op("sol::layer_norm_fwd_02", mutates_args=())
def layer_norm_fwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], b: typing.Optional[torch.Tensor],
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y, and each row's mean and rstd (fp32, for the backward), of rows x of any strides, in new tensors."""
    (y2d, mean, rstd), wb = layer_norm_fwd_fake(x, w, b, eps), (t if t is None else t.contiguous() for t in (w, b))
    if y2d.numel() > 0:
        layer_norm_rows_forward(_rows(x, *x.shape), y2d, *wb, mean, rstd, eps)
    return y2d, mean, rstd
@layer_norm_fwd_op.register_fake
def layer_norm_fwd_fake(x, w, b, eps):  # shapes and dtypes only
    return x.new_empty(x.shape), *(x.new_empty(x.shape[0], dtype=torch.float32) for _ in range(2))
@torch.library.custom_op("sol::layer_norm_bwd_02", mutates_args=())
def layer_norm_bwd_op(x: torch.Tensor, dy: torch.Tensor, w: typing.Optional[torch.Tensor], mean: torch.Tensor,
                      rstd: torch.Tensor, compute_dwdb: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, and dw, db (fp32 sums, 0 over no rows; empty unless compute_dwdb), in new tensors; rows of any strides."""
    dx2d, dw, db = layer_norm_bwd_fake(x, dy, w, mean, rstd, compute_dwdb)
    if dx2d.numel() > 0:
        layer_norm_rows_backward(_rows(x, *x.shape), _rows(dy, *x.shape), dx2d, w if w is None else w.contiguous(),
                                 mean.contiguous(), rstd.contiguous(), *((dw, db) if compute_dwdb else ()))
    return dx2d.zero_() if x.shape[1] == 1 else dx2d, dw, db  # N = 1, y = b: dx is 0, not a GPU's rounding
@layer_norm_bwd_op.register_fake
def layer_norm_bwd_fake(x, dy, w, mean, rstd, compute_dwdb):
    return x.new_empty(x.shape), *(mean.new_zeros(x.shape[1] if compute_dwdb else 0) for _ in range(2))  # fp32
def _setup(ctx, inputs, output):  # keeps x, w, and the rows' statistics for the backward
    ctx.save_for_backward(*inputs[:3], *output[1:]), ctx.mark_non_differentiable(*output[1:])
def _backward(ctx, dy2d, _mean, _rstd):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
        raise RuntimeError("layer_norm: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's layer_norm there")
    (x2d, w, b, mean, rstd), need = ctx.saved_tensors, ctx.needs_input_grad[1:3]
    dx2d, dw, db = layer_norm_bwd_op(x2d, dy2d, w, mean, rstd, any(need))
    return dx2d, dw.to(w.dtype) if need[0] else None, db.to(b.dtype) if need[1] else None, None
layer_norm_fwd_op.register_autograd(_backward, setup_context=_setup)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Drop-in for torch.nn.functional.layer_norm on float32, float16 and bfloat16, with autograd."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else (normalized_shape,)
    if not hasattr(eps, "__float__"):  # None, a str: torch's TypeError, named
        raise TypeError(f"layer_norm: eps must be a float (torch's default: 1e-5), got {type(eps).__name__}")
    for t, name in zip((input, weight, bias), ("input", "weight", "bias")):
        if t is None and name != "input":
            continue
        if not isinstance(t, torch.Tensor) or t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"layer_norm: {name} is {getattr(t, 'dtype', type(t))}, not a torch.Tensor of dtype float32, "
                            "float16 and bfloat16")
        if t.device.type != DEVICE.type or t.device != input.device or t is not input and t.shape != shape:
            raise ValueError(f"layer_norm: {name} has shape {list(t.shape)} and is on {t.device}; expected "
                             f"normalized_shape {list(shape)} (weight, bias) on input's {DEVICE.type} device")
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise TypeError(f"layer_norm: normalized_shape must be ints, got {normalized_shape!r}")
    if not shape or input.shape[input.dim() - len(shape):] != shape or math.prod(shape) >= 2**31:
        raise ValueError(f"layer_norm: normalized_shape {list(shape)} must be input's last dims, {list(input.shape)}, "
                         "and hold under 2**31 elements")
    x2d = _rows(input, math.prod(input.shape[: input.dim() - len(shape)]), n_cols := math.prod(shape))
    w, b = (None if t is None else t.reshape(n_cols).contiguous() for t in (weight, bias))
    return layer_norm_fwd_op(x2d, w, b, float(eps))[0].view(input.shape)

# %%
# Correctness
# -----------
# Errors against float64, rows of mean far from 0: a few roundings; three runs, the same bits.

CHECK_SHAPES = [(17, 1), (1000, 257), (3, 40_000)]
TOLERANCE, OURS = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}, ["y", "dx", "dw", "db"]
def check_row(shape, dtype):
    x, w, b = ((torch.randn(s, device=DEVICE) * 3 + 10).to(dtype).requires_grad_() for s in (shape, shape[1:], shape[1:]))
    dy, ins64 = torch.randn_like(x), [t.detach().double().requires_grad_() for t in (x, w, b)]
    refs = ((y64 := naive_layer_norm(*ins64)).detach(), *torch.autograd.grad(y64, ins64, dy.double()))
    first, *again = [(y := layer_norm(x, shape[1:], w, b), *torch.autograd.grad(y, (x, w, b), dy)) for _ in range(3)]
    row = {q: ((o.double() - r).norm() / (r.norm() if r.norm() > 0 else 1)).item() for q, o, r in zip(OURS, first, refs)}
    return {"shape": shape, "dtype": str(dtype)[6:]} | row | {"same bits": all(
        torch.equal(t.view(torch.uint8), t0.view(torch.uint8)) for run in again for t, t0 in zip(run, first))}
torch.manual_seed(0)
errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in CHECK_SHAPES])
assert (errors[OURS].max(axis=1) <= errors.dtype.map(TOLERANCE)).all() and errors["same bits"].all(), errors
errors.style.format({c: "{:.1e}" for c in OURS}).hide(axis="index")

# %%
# Appendix: how this page measures
# --------------------------------
# :func:`triton.testing.do_bench` (median, L2 flushed) times CUDA-graph replays; the light, a copy of *x*, without a
# graph. GB/s counts *x, y* forward, *x, dy, dx* backward.

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
def load_peer(peer, module, min_cc=(0, 0)):  # its module, or None (no column), saying why in one wording
    cc = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = ("not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else
           "" if cc >= min_cc else "needs compute capability {}.{} or newer; this GPU has {}.{}".format(*min_cc, *cc))
    if not why:
        try:
            return importlib.import_module(module)
        except Exception as err:  # installed, yet it does not load here
            why = " ".join(f"{type(err).__name__}: {err}".split())[:100]
    print(f"{peer}: not measured here ({why}).")
if ON_GPU:  # graphs are not captured on the default stream
    torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn, graph=True):  # median ms of fn(); without a GPU, NaN: one call, timed not at all
    fn()  # warm-up (on the CPU: the run that checks it)
    if not ON_GPU:
        return math.nan
    if graph:
        with torch.cuda.graph(captured := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=5, rep=15, return_mode="median")
def providers():  # name -> fn(x, w, b), ours last
    found = {"naive": naive_layer_norm, "torch": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)}
    if load_peer("torch.compile", "torch._inductor"):  # on a CPU, Inductor would time a C++ compiler
        torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
        found["torch.compile"] = torch.compile(found["torch"], dynamic=False)
    if liger := load_peer("Liger-Kernel", "liger_kernel.ops.layer_norm"):
        found["Liger"] = lambda x, w, b: liger.LigerLayerNormFunction.apply(x, w, b, 1e-5)
    if quack := load_peer("quack", "quack.rmsnorm", min_cc=(9, 0)):  # quack takes fp32 w and b (w32, b32)
        class QuackLayerNorm(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, b):
                y, *saved = quack.layernorm_fwd(x, w32, b32, 1e-5, return_rstd=True, return_mean=True)
                ctx.save_for_backward(x, *saved)
                return y
            @staticmethod
            def backward(ctx, dy):
                dx, dw, db = quack.layernorm_bwd(ctx.saved_tensors[0], w32, dy.contiguous(), *ctx.saved_tensors[1:], True)
                return dx, dw.to(dy.dtype), db.to(dy.dtype)
        found["quack"] = QuackLayerNorm.apply
    return found | {"ours": lambda x, w, b: layer_norm(x, x.shape[-1:], w, b)}
def measure(fns):  # (every provider's GB/s each way, step 0's ladder rows), each checked before it is timed
    global w32, b32
    records, steps = [], []
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in SWEEP_N:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            w, b = (torch.randn(n_cols, device=DEVICE, dtype=dtype) for _ in range(2))
            dy, out, w32, b32, point = torch.randn_like(x), torch.empty_like(x), w.float(), b.float(), (str(dtype)[6:], n_cols)
            gbs = lambda times, ms: times * x.numel() * x.element_size() / ms * 1e-6
            light, reference = gbs(2, bench(lambda: out.copy_(x), graph=False)), F.layer_norm(x.float(), (n_cols,), w32, b32)
            if dtype == torch.bfloat16 and n_cols in LADDER_N:  # step 0
                steps.append((0, "one row a program, 4 warps", n_cols, gbs(2, bench(lambda: plain_forward(x, out, w, b))), light))
                torch.testing.assert_close(out.float(), reference, atol=5e-2, rtol=2e-2)  # bench ran it
            inputs = [t.requires_grad_() for t in (x, w, b)]
            for name, fn in fns.items():
                ms = (math.nan, math.nan)  # "-" in the table
                try:
                    torch.testing.assert_close((y := fn(*inputs)).float(), reference, atol=5e-2, rtol=2e-2)
                    ms = (bench(lambda: fn(*inputs)), bench(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)))
                except Exception as err:
                    if name == "ours":
                        raise
                    print(name, point, "not measured:", " ".join(str(err).split())[:100])
                records += [("forward", *point, name, gbs(2, ms[0]), light), ("backward", *point, name, gbs(3, ms[1]), light)]
    return pd.DataFrame(records, columns=["direction", "dtype", "N", "provider", "GB/s", "speed of light"]), steps
def write_results(table):  # the summary the site's front page reads
    if os.environ.get("SOL_RESULTS"):
        table[["ours, % of light", "ours / best peer"]].assign(recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]) \
            .to_csv(os.path.join(os.environ["SOL_RESULTS"], "02_layer_norm.csv"))
def environment_card():  # everything needed to judge this page's numbers, collapsed
    card = {"device": WHERE, "driver / CUDA": f"{collect_env.get_nvidia_driver_version(collect_env.run)} / "
            f"{torch.version.cuda}" if ON_GPU else "none", "torch": torch.__version__, "Triton": triton.__version__,
            "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card).to_frame('').to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

# %%
# The ladder, measured
# --------------------
# Steps 0 and 1 on bf16 rows short (few bytes a row) and wide (many values a thread), among all providers:

TOTAL_ELEMENTS, SWEEP_N, LADDER_N = (2**26, [2**k for k in range(9, 17)], [512, 8192]) if ON_GPU else \
    (2**14, [256, 2048, 16384, 65536], [256, 2048])  # 2**26: far past the 50 MB L2
results, steps = measure(fns := providers())
table = results.pivot(index=["direction", "dtype", "N", "speed of light"], columns="provider", values="GB/s")
table = table.reset_index("speed of light").loc[["forward", "backward"], ["speed of light", *fns]]
steps += [(1, "a block of rows a program, warps sized to its bytes", n, *table.loc["forward", "bfloat16", n][["ours", "speed of light"]])
          for n in LADDER_N]
ladder = pd.DataFrame(steps, columns=["step", "idea", "N", "GB/s", "light"])
ladder["% of light"] = 100 * ladder["GB/s"] / ladder.pop("light")
shown = ladder if ON_GPU else ladder[["step", "idea", "N"]]  # the interpreter's times are no GPU's speeds
shown.style.format({"N": "{:,}", "GB/s": "{:,.0f}", "% of light": "{:.3g}%"}).hide(axis="index")

# %%
# Benchmark
# ---------
table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
table["ours / best peer"] = table["ours"] / table.filter(items=["torch", "torch.compile", "Liger", "quack"]).max(axis=1)
if ON_GPU:
    table["ours, % of light"].unstack([0, 1]).plot(logx=True, marker="o", grid=True, ylabel="ours, % of the copy's GB/s",
                                                   title=f"Layer norm, {TOTAL_ELEMENTS:,} elements, on {WHERE}")
write_results(table)
table.style.format({c: "{:.0f}" for c in table} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"},
                   na_rep="-") if ON_GPU else print(NO_SPEED)

# %%
# Reading the numbers
# -------------------
inside = pd.Series([n in RANGE[d, t] for d, t, n in table.index], index=table.index)
mine, past, fwd = table.loc[inside, "ours, % of light"], table.loc[~inside, "ours, % of light"], table.loc["forward"]
speed = ladder.set_index(["step", "N"])["GB/s"]
print("".join(f"At N = {n:,} step 1 ran {speed[1, n] / speed[0, n]:.3g}x as fast as step 0. " for n in LADDER_N) +
      f"Inside RANGE ours ran at {mine.min():.3g}-{mine.max():.3g}% of the copy, at least "
      f"{table['ours / best peer'][inside].min():.2g}x the fastest peer; forward, {(fwd.ours / fwd.naive).median():.2g}x "
      f"the naive (median; bytes predict 6x). Past RANGE it fell to {past.min():.3g}%: a wide row leaves room for few "
      "programs an SM, chunks read x twice; deep dives 21 and 23 take over. Fused, layer norm is bound by its bytes."
      if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# **Past RANGE**: :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py` (*x* read twice, or a row split),
# :ref:`sphx_glr_tutorials_deep_dives_22_layer_norm_staged_gluon.py` (16-bit rows in shared memory),
# :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py` (a backward row split over programs).
# **Exercise**: ``STAGES = 1`` in ``_bwd_config``: which widths fall, and why? Reference: Ba et al. (2016).

environment_card()
