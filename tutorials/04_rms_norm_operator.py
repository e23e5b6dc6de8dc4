"""
RMSNorm as a PyTorch operator
=============================

:ref:`sphx_glr_tutorials_04_rms_norm.py` and :ref:`sphx_glr_tutorials_04_rms_norm_backward.py` built RMSNorm's
forward and backward kernels. Here they become a drop-in for :func:`torch.nn.functional.rms_norm`, with autograd, that
``torch.compile`` keeps in its graph, timed as training runs it against torch, ``torch.compile``, Liger and quack.

**What you will learn**: PyTorch operators of your own, with their shapes for the compiler and their gradient; a
drop-in right for every shape; a check in a compiled model. Prerequisite: the two pages before, whose kernels this
page carries. Rows of up to 8 K elements.
"""

import datetime, functools, math, os, typing, torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")

# %%
# The drop-in
# -----------
# The forward page's step 1 and the backward page's step 1 do the work; the appendix carries them, letter for letter.
# The launchers' checks and fallbacks need not be traced: ``torch.library.custom_op`` makes each launch a PyTorch
# operator that stays in a compiled graph, one forward and one backward; ``register_fake`` gives the compiler their
# outputs' shapes and dtypes without running them; ``register_autograd`` makes the backward operator the forward's
# gradient, ``_setup`` saving :math:`x`, :math:`w` and ``rstd`` for it. ``rms_norm`` takes what
# :func:`torch.nn.functional.rms_norm` takes (its checks are in the appendix). ``fused`` says which rows the kernels
# hold: forward up to ``MAX_ROW_BYTES``, backward up to 8 K values (:math:`x`, :math:`dy` and the dw tile at once).
# Past them each row streams in chunks, read twice, with the kernels (carried in the appendix) of deep dive
# :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py`, which also splits a backward row, faster.
#
# **Right for every input.** The forward kernel's branch on ``sum_sq == inf`` is for values past about 1e19, whose
# squares overflow fp32 (torch's own ``rms_norm`` returns 0 there): such a row sums :math:`(x / 2^{80})^2` instead,
# exact as a power of two, finite for :math:`2^{31}` values up to :math:`2^{48}`, with :math:`\varepsilon` negligible
# beside it. ``+ 0 * n_rows`` makes its indices int64 from :math:`2^{31}` rows on. Without a weight the forward
# compiles it out (``HAS_WEIGHT``) and the backward takes ones.

fused = lambda direction, n_cols, element_size: \
    n_cols * element_size <= MAX_ROW_BYTES if direction == "forward" else n_cols <= 8192
RANGE = {("forward+backward", dtype): range(1, 8193) for dtype in ("float32", "bfloat16")}  # the N it is for (fp16 too)

rms_norm_fwd_fake = lambda x, w, eps: (x.new_empty(x.shape), x.new_empty(x.shape[0], dtype=torch.float32))
@torch.library.custom_op("sol::rms_norm_fwd_04", mutates_args=())
def rms_norm_fwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], eps: float) \
        -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    if not fused("forward", x.shape[1], x.element_size()):  # a row in chunks: deep dive 41's kernel (the appendix)
        return chunked_forward(x, None if w is None else w.contiguous(), eps)
    y, rstd = rms_norm_fwd_fake(x, w, eps)  # empty: y, and rstd (fp32) for the backward
    if x.numel():  # the forward page's step 1
        rms_norm_rows_forward(x, None if w is None else w.contiguous(), y, rstd, eps)
    return y, rstd
rms_norm_fwd_op.register_fake(rms_norm_fwd_fake)

rms_norm_bwd_fake = lambda x, w, rstd, dy, compute_dw: \
    (x.new_empty(x.shape), w.new_empty(w.shape) if compute_dw and w is not None else x.new_empty(0))
@torch.library.custom_op("sol::rms_norm_bwd_04", mutates_args=())
def rms_norm_bwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], rstd: torch.Tensor, dy: torch.Tensor,
                    compute_dw: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = rms_norm_bwd_fake(x, w, rstd, dy, compute_dw)  # empty; dw empty unless asked for
    x, dy = x.contiguous(), dy.contiguous()
    w = torch.ones(x.shape[1], device=x.device, dtype=x.dtype) if w is None else w.contiguous()  # none: g = dy
    if not fused("backward", x.shape[1], x.element_size()):  # a row in chunks: deep dive 41's kernels (the appendix)
        dw_sum = chunked_backward(x, w, rstd.contiguous(), dy, dx, dw.numel() > 0) if x.numel() else x.new_zeros(())
    else:
        dw_sum = rms_norm_rows_backward(x, w, rstd.contiguous(), dy, dx) if x.numel() else x.new_zeros(())  # no rows: 0
    return dx, dw.copy_(dw_sum) if dw.numel() else dw
rms_norm_bwd_op.register_fake(rms_norm_bwd_fake)

def _setup(ctx, inputs, output):  # keeps x, w and rstd for the backward
    ctx.save_for_backward(inputs[0], inputs[1], output[1])
    ctx.mark_non_differentiable(output[1]), ctx.set_materialize_grads(False)  # rstd's grad: None, not zeros
def _backward(ctx, dy, _):
    # grad mode on here means create_graph=True; eager only: torch.compile traces the backward with grad mode on
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        raise RuntimeError("rms_norm: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's rms_norm there")
    dx, dw = rms_norm_bwd_op(*ctx.saved_tensors, dy, ctx.needs_input_grad[1])
    return dx, dw if ctx.needs_input_grad[1] else None, None
rms_norm_fwd_op.register_autograd(_backward, setup_context=_setup)

def rms_norm(input, normalized_shape, weight=None, eps=None):  # the drop-in for F.rms_norm, with autograd
    shape, eps = checked_arguments(input, normalized_shape, weight, eps)  # errors name what the kernels lack
    w, n = None if weight is None else weight.reshape(-1), math.prod(shape)
    return rms_norm_fwd_op(input.reshape(input.numel() // n if n else 0, n), w, float(eps))[0].view(input.shape)

# %%
# In your model
# -------------
# ``torch.compile(fullgraph=True)`` keeps ``rms_norm`` as one node, with its backward (checked below). Use it at the
# N of the kernels' ``RANGE``. Inductor fuses nothing into it: a residual add before it stays a pass of its own.
# ``torch.autocast`` leaves it alone: it runs in its input's dtype, its sums in fp32.
#
# To take it into your code, copy the page above its appendix and the appendix's carried kernels, launchers and checks;
# leave the machinery after them, which moves the page to a CUDA stream of its own and raises ``torch.compile``'s
# recompile limit.

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach: the forward page's step 1 and the backward page's kernel, configs, launchers
# and constants, letter for letter (a test keeps them the same); the drop-in's argument checks; deep dive 41's
# chunked kernels for rows past ``MAX_ROW_BYTES`` (forward) and 8 K values (backward); the machinery.
# :math:`MN = 2^{26}` elements on a GPU; :func:`triton.testing.do_bench` (median, L2 flushed) of CUDA-graph replays of
# the forward and ``torch.autograd.grad`` through it, as training runs them; the *speed of light*: a copy of x, without
# a graph. GB/s counts :math:`x` read and :math:`y` written, then :math:`x, dy` read and :math:`dx` written:
# :math:`5MN` elements. Errors are relative to float64 (dx's against its terms' size, ``r * g``: they cancel at
# N = 1), within a few roundings of the dtype (the interpreter truncates to bf16: twice a GPU's error).

@triton.jit
def rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                        HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    # + 0 * n_rows: rows in n_rows' type (int32 below 2**31); offsets int64
    rows = (tl.program_id(0) + 0 * n_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # clamp: a duplicate row, never stored
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    sum_sq = tl.sum(x * x, axis=1)  # padding columns add 0
    rstd = tl.rsqrt(sum_sq / n_cols + eps)
    # run-time if: values past 1e19 overflow sum_sq; such rows sum (x / 2**80)**2
    if tl.sum((sum_sq == float("inf")).to(tl.int32), axis=0) > 0:
        x_small = x * 2.0**-80
        rstd = tl.where(sum_sq < float("inf"), rstd, 2.0**-80 * tl.rsqrt(tl.sum(x_small * x_small, axis=1) / n_cols))
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape),
             mask=row_ok[:, None] & (cols == 0)[None, :])

MIN_ELEMENTS = 4096  # fewest elements in a tile (the backward's)
BYTES_PER_THREAD = 128  # most of a tile one thread loads: 32 fp32 values, 64 of 16 bits
LATENCY = 1e-6  # seconds: a load from DRAM under load, about a microsecond
MAX_ROW_BYTES = 65536  # the longest row held whole in registers: 1024 threads, 16 or 32 fp32 values each
_warps = lambda n, element_size, bytes_per_thread: min(32, max(4, n * element_size // (32 * bytes_per_thread)))

@functools.cache  # reads the device once: its memory clock costs the host more than a launch
def min_tile_bytes():
    props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None
    bandwidth = 2 * getattr(props, "memory_clock_rate", 0) * 1e3 * getattr(props, "memory_bus_width", 0) / 8  # B/s
    if not bandwidth:
        return 4096
    in_flight = bandwidth * LATENCY / props.multi_processor_count  # bytes an SM keeps in flight
    programs = props.max_threads_per_multi_processor // (4 * 32)  # programs of 4 warps an SM holds
    return max(2048, triton.next_power_of_2(int(in_flight / programs)))  # 2 KB: a 16-byte load for each thread

def _fwd_config(n_rows, n_cols, element_size):  # (kernel, meta, grid)
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, min_tile_bytes() // (block_n * element_size))
    warps = min(32, max(4, block_m * block_n * element_size // (32 * BYTES_PER_THREAD)))
    return rms_norm_fwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), triton.cdiv(n_rows, block_m)

def rms_norm_rows_forward(x, w, y, rstd, eps):  # x, y: rows of unit stride along the row; w: None, or contiguous
    kernel, meta, grid = _fwd_config(*x.shape, x.element_size())
    kernel[(grid,)](x, x if w is None else w, y, rstd, *x.shape, x.stride(0), y.stride(0), eps,
                    HAS_WEIGHT=w is not None, **meta)

@triton.jit
def rms_norm_bwd_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid, n_programs, cols = tl.program_id(0), tl.num_programs(0), tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    dw_partial = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)  # the first block's loads, before the loop
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_programs):
        x, dy, this_offs, this_mask = x_next.to(tl.float32), dy_next.to(tl.float32), offs, mask
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        rstd = tl.load(rstd_ptr + rows, mask=rows < n_rows, other=0.0)
        next_rows = rows + n_programs * BLOCK_M  # the next block's loads leave before this block is computed
        mask = (next_rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        offs = next_rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x_hat, g = x * rstd[:, None], dy * w[None, :]
        dw_partial += dy * x_hat  # rows past the end add 0
        c = tl.sum(g * x_hat, axis=1) / n_cols
        tl.store(dx_ptr + this_offs, ((g - x_hat * c[:, None]) * rstd[:, None]).to(dx_ptr.dtype.element_ty),
                 mask=this_mask)
    tl.store(dw_partial_ptr + pid.to(tl.int64) * n_cols + cols, tl.sum(dw_partial, axis=0), mask=cols < n_cols)

NUM_SMS = torch.cuda.get_device_properties(DEVICE).multi_processor_count if ON_GPU else 4  # 4 on the CPU

def _bwd_config(n_rows, n_cols, element_size):  # (kernel, meta, grid); grid: the persistent one of step 1
    block_n = triton.next_power_of_2(n_cols)
    # fp32: blocks of 2 x MIN_ELEMENTS (32 KB of x, of dy), 64 bytes a thread: 16 warps, one program an SM (a single
    # row: 32 warps). Measured on Hopper: 2-25% faster than the 16-bit rule below would be on fp32
    block_m, warps_per_sm = max(1, (2 * MIN_ELEMENTS if element_size == 4 else MIN_ELEMENTS) // block_n), 16
    if element_size == 4:
        bytes_per_thread = 64 if block_m > 1 else 32
    elif block_n <= 1024:  # 16-bit rows to 2 KB: tiles of 2 KB, 16 bytes a thread, 32 warps an SM (64 registers each)
        block_m, bytes_per_thread, warps_per_sm = max(1, MIN_ELEMENTS // 4 // block_n), 16, 32
    else:  # rows of 16 KB or more: more threads, more loads in flight
        bytes_per_thread = 16 if n_cols * element_size >= 16384 else 32
    num_warps = _warps(block_m * block_n, element_size, bytes_per_thread)
    return rms_norm_bwd_kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps), \
        max(1, min(triton.cdiv(n_rows, block_m), max(1, warps_per_sm // num_warps) * NUM_SMS))

def rms_norm_rows_backward(x, w, rstd, dy, dx, step=1):  # contiguous rows; returns dw in fp32
    kernel, meta, grid = _bwd_config(*x.shape, x.element_size())
    if step == 0:  # a program a row, on 4 warps
        meta, grid = dict(meta, BLOCK_M=1, num_warps=4), len(x)
    dw_partial = torch.empty((grid, x.shape[1]), device=x.device)
    kernel[(grid,)](x, w, rstd, dy, dx, dw_partial, *x.shape, **meta)
    return dw_partial.sum(0)

def checked_arguments(input, normalized_shape, weight, eps):  # (shape, eps), or an error that names the limit
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    for name, t in {"input": input, "weight": input if weight is None else weight}.items():
        if not isinstance(t, torch.Tensor) or t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"rms_norm: {name} is {getattr(t, 'dtype', type(t).__name__)}; the kernels take "
                            "torch.Tensors of dtype float32, float16 and bfloat16 (else use F.rms_norm)")
        if t.device.type != DEVICE.type:
            raise ValueError(f"rms_norm: {name} is on {t.device}, the kernels on {'cuda' if ON_GPU else 'the CPU'}")
    if not all(isinstance(d, int) for d in shape) or not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError("rms_norm: normalized_shape must be a tuple of ints, eps a float or None")
    if not 0 < len(shape) <= input.dim() or input.shape[-len(shape):] != shape or math.prod(shape) >= 2**31:
        raise ValueError(f"rms_norm: normalized_shape {shape} must be at least one of the last dims of {input.shape}, "
                         "under 2**31 elements")
    if weight is not None and (weight.shape != shape or weight.device != input.device):
        raise ValueError(f"rms_norm: weight has shape {weight.shape} on {weight.device}, not {shape} on {input.device}")
    return shape, eps
# Rows past ``MAX_ROW_BYTES``: deep dive 41's forward, letter for letter, a program a row streaming it in chunks, twice.
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
def _fwd_config_chunked(n_rows, element_size):  # (meta, grid): a program a row, its next 16 K values in flight
    return dict(CHUNK_N=16384, num_warps=_warps(16384, element_size, 32 * element_size)), n_rows
def chunked_forward(x, w, eps):  # y, rstd of rows past MAX_ROW_BYTES (contiguous), by deep dive 41's launch
    y, rstd = torch.empty_like(x), torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    meta, grid = _fwd_config_chunked(x.shape[0], x.element_size())
    if grid:
        rms_norm_fwd_chunked_kernel[(grid,)](x, x if w is None else w, y, rstd, *x.shape, x.stride(0), y.stride(0), eps,
                                             HAS_WEIGHT=w is not None, **meta)
    return y, rstd
# Rows past 8 K values: deep dive 41's chunked backward and its fixed-order sum of the dw partials, letter for letter.
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
def _chunked_config(n_rows, n_cols, element_size):  # (meta, grid) of the chunked backward: a program an SM, 32 B a thread
    return dict(CHUNK_N=8192, num_warps=_warps(8192, element_size, 32)), max(1, min(n_rows, NUM_SMS))
def chunked_backward(x, w, rstd, dy, dx, compute_dw):  # writes dx, returns dw (fp32) or None: 41's launch
    meta, grid = _chunked_config(*x.shape, x.element_size())
    dw_partial = torch.empty((grid, x.shape[1]), dtype=torch.float32, device=x.device) if compute_dw else rstd
    rms_norm_bwd_chunked_kernel[(grid,)](x, w, rstd, dy, dx, dw_partial, *x.shape, x.stride(0), dy.stride(0), dx.stride(0),
                                         HAS_WEIGHT=True, COMPUTE_DW=compute_dw, **meta)
    dw = torch.empty(x.shape[1], device=x.device, dtype=torch.float32) if compute_dw else None
    if compute_dw:  # a row of partials a program, each written: summed in a fixed order
        dw_reduce_kernel[(triton.cdiv(x.shape[1], 32),)](dw_partial, dw, grid, x.shape[1], BLOCK_P=64, BLOCK_N=32, num_warps=4)
    return dw

# %%

import importlib.util, shutil, subprocess, timeit
import matplotlib.pyplot as plt

EPS, TOTAL_ELEMENTS = 1e-6, 2**26 if ON_GPU else 2**13
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
SWEEP_N = [2**k for k in range(9, 14)] if ON_GPU else [256, 1024, 4096]
CHECK_SHAPES = [(4096, 1), (3000, 257), (1024, 4096), (63, 16384), (64, 30000), (16, 100_003), (4, 200_001)] \
    if ON_GPU else [(17, 1), (33, 257), (8, 1000), (3, 40_000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
if ON_GPU:  # graph capture needs a side stream
    torch.cuda.set_stream(torch.cuda.Stream())

def check_row(shape, dtype):  # the drop-in's relative errors in y, dx and dw against float64
    x, w, dy = (torch.randn(s, device=DEVICE, dtype=dtype) for s in (shape, shape[-1:], shape))
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    refs = [y64 := F.rms_norm(x64, shape[-1:], w64, 1e-6), *torch.autograd.grad(y64, (x64, w64), dy.double())]
    r64 = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    scales = refs[0].norm(), (dy * w * r64).norm(), refs[2].norm()  # dx: against its terms' size
    outs = [y := rms_norm(x.requires_grad_(), shape[-1:], w.requires_grad_(), 1e-6),
            *torch.autograd.grad(y, (x, w), dy)]
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}
    return row | {q: ((out - ref).norm() / scale).item()
                  for q, out, ref, scale in zip(("y", "dx", "dw"), outs, refs, scales)}

def check_all():  # the errors' table, asserted within TOLERANCE
    torch.manual_seed(0)
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16)
                           for s in CHECK_SHAPES])
    assert (errors[["y", "dx", "dw"]].max(axis=1) <= errors.dtype.map(TOLERANCE)).all(), errors
    return errors

# %%

def bench(fn, graph=True):  # ms; on the CPU, one call's wall clock
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # a warm-up, outside the capture (torch.cuda.graph synchronizes before it captures)
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="median")

def tensors(n_cols, dtype):  # x, w, dy and a copy's GB/s
    x = torch.randn(TOTAL_ELEMENTS // n_cols, n_cols, device=DEVICE, dtype=dtype)
    w, dy, out = torch.rand(n_cols, device=DEVICE, dtype=dtype) + 0.5, torch.randn_like(x), torch.empty_like(x)
    return x, w, dy, 2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6

gbps = lambda x, ms: 5 * x.numel() * x.element_size() / ms * 1e-6  # x read, y written; x and dy read, dx written

def peer_module(peer, module, min_major=0):  # the peer's module, or None, saying why it is not measured here
    major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
    why = "not installed" if importlib.util.find_spec(module.split(".")[0]) is None else "no GPU" if not ON_GPU else \
        f"needs compute capability {min_major}.0 or newer; this GPU has {major}.{minor}" if major < min_major else ""
    try:
        return print(f"{peer}: not measured here ({why}).") if why else importlib.import_module(module)
    except Exception as err:  # installed, yet it does not load here
        print(f"{peer}: not measured here ({type(err).__name__}: {' '.join(str(err).split())[:100]}).")

def naive_rms_norm(x, weight, eps):  # the forward page's, one PyTorch operation a line: autograd differentiates each
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * weight

fns = {"naive": lambda x, w: naive_rms_norm(x, w, EPS), "torch": lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS)}
if peer_module("torch.compile", "torch"):  # on the CPU, Inductor would time a C++ compiler
    torch._dynamo.config.recompile_limit = 1024  # one compilation per shape and dtype
    fns["torch.compile"] = torch.compile(lambda x, w: F.rms_norm(x, x.shape[-1:], w, EPS), dynamic=False)
if liger := peer_module("Liger-Kernel", "liger_kernel.ops.rms_norm"):
    fns["Liger"] = lambda x, w: liger.LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)  # not in place
if quack := peer_module("quack", "quack", min_major=9):
    fns["quack"] = lambda x, w: quack.rmsnorm(x, w, eps=EPS)
fns["ours"] = lambda x, w: rms_norm(x, x.shape[-1:], w, EPS)

PEERS = ["torch", "torch.compile", "Liger", "quack"]  # what "ours / best peer" and the reading compare with
def benchmark():  # the drop-in's forward and backward against its peers': (records, table)
    records = []
    for dtype, n_cols in [(dtype, n) for dtype in (torch.float32, torch.bfloat16) for n in SWEEP_N]:
        x, w, dy, light = tensors(n_cols, dtype)
        xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        for name, fn in fns.items():
            try:
                speed = gbps(x, bench(lambda: torch.autograd.grad(fn(xg, wg), (xg, wg), dy)))
            except Exception as err:  # a peer's limit
                if name == "ours":
                    raise
                print(f"{name}: no forward+backward {dtype} N = {n_cols}: {type(err).__name__}")
                speed = math.nan
            records.append({"direction": "forward+backward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                            "GB/s": speed, "speed of light GB/s": light})
    results, keys = pd.DataFrame(records), ["direction", "dtype", "N"]
    results["% of speed of light"] = 100 * results["GB/s"] / results["speed of light GB/s"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys)["speed of light GB/s"].first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=PEERS)
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    if os.environ.get("SOL_RESULTS"):  # for the landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "04_rms_norm_operator.csv"))
    return results, table

def show(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-") if ON_GPU else print(NO_SPEED)  # one call: a second resets the rest

def plot(results):  # in % of the copy measured beside each point; none without a GPU
    if not ON_GPU:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, facecolor="white", layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        pct = part.pivot(index="N", columns="provider", values="% of speed of light")
        pct.plot(ax=ax, logx=True, style="o--", ms=3, grid=True, title=f"{direction}, {dtype}",
                 xlabel="row length N (elements)", ylabel="% of the copy's GB/s")
        ax.axhline(100, color="black", linewidth=1, label="speed of light (copy)"), ax.legend(fontsize=7)
    fig.suptitle(f"RMSNorm forward and backward, M x N = {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    plt.show()

def reading(table):  # three to five sentences computed from this run's table
    if not ON_GPU:
        return NO_SPEED
    inside = [n in RANGE.get((d, t), ()) for d, t, n in table.index]
    light, peer = table["ours, % of light"][inside], table["ours / best peer"][inside]
    naive = (table.ours / table.naive)[inside]["forward+backward", "float32"]
    peers = table[inside].filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    won = f" A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + "." if lost else ""
    text = (f"Forward and backward as training runs them, the drop-in ran at {light.min():.3g}-{light.max():.3g}% of "
            f"the copy inside its range, {peer.min():.3g}-{peer.max():.3g}x the best peer, "
            f"{naive.min():.3g}-{naive.max():.3g}x as fast as autograd through the naive RMSNorm's operations in fp32."
            f"{won}")
    if "torch.compile" in table:
        vs = (table.ours / table["torch.compile"])[inside]
        text += (f"\nAgainst Inductor's own kernels for F.rms_norm, what a compiled model runs without it, it ran "
                 f"{vs.min():.3g}-{vs.max():.3g}x as fast: dropping it in pays where that is over 1.")
    return text

def check_compiled(loss, *params):
    """loss() compiled whole: fullgraph=True raises at a graph break (without a GPU the aot_eager backend, as Inductor's
    CPU code would need a C++ compiler); the compiled step's gradients must be eager's."""
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    torch.testing.assert_close(*[torch.autograd.grad(fn(), params) for fn in (compiled, loss)])
    return "compiled with fullgraph=True: one graph, forward and backward; its gradients are eager's"

def environment_card():
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.split("\n")[0] if ON_GPU and shutil.which("nvidia-smi") else "?"
    card = {"device": WHERE, "driver / CUDA": f"driver {smi}, CUDA {torch.version.cuda}" if ON_GPU else
            "none: Triton's interpreter", "torch": torch.__version__, "Triton": triton.__version__, "built": BUILT,
            "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = pd.Series(card, name="").to_frame().to_html()
    summary = f"<details><summary>Full environment card</summary>{html}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: summary})()

# %%
# Correctness
# -----------
# The drop-in's relative errors in y, dx and dw against float64, on rows inside and past the kernels', each dtype:

(errors := check_all()).style.format("{:.1e}", subset=["y", "dx", "dw"]).hide(axis="index")

# %%
# **In a compiled model.** A layer and the drop-in, compiled whole with ``torch.compile(fullgraph=True)``, forward and
# backward; ``check_compiled`` (in the appendix) fails at a graph break and compares the gradients with eager's.

layer, h = torch.nn.Linear(64, 1000, device=DEVICE), torch.randn(32, 64, device=DEVICE)
w = torch.nn.Parameter(1 + 0.1 * torch.randn(1000, device=DEVICE))  # the norm's weight, its gradient compiled too
check_compiled(lambda: rms_norm(layer(h), (1000,), w).square().mean(), layer.weight, w)

# %%
# Benchmark
# ---------
# The drop-in's forward and backward against its peers', as training runs them ("-": a peer's limit), in GB/s, then as
# a plot:

results, table = benchmark()
show(table)

# %%

plot(results)

# %%
# Reading the numbers
# -------------------

print(reading(table))

# %%
# Going further
# -------------
# **Past the kernels' rows** the drop-in streams each row in chunks;
# :ref:`sphx_glr_tutorials_deep_dives_41_rms_norm_wide_backward.py` splits a backward row over programs and
# :ref:`sphx_glr_tutorials_deep_dives_42_rms_norm_staged_gluon.py` stages 16-bit forward rows past 16 K in shared
# memory. **Exercise**: compile a block with a residual add before ``rms_norm``, once with the drop-in and once with
# :func:`torch.nn.functional.rms_norm`: which moves fewer bytes, and why? Reference: Zhang, Sennrich (2019).

environment_card()
