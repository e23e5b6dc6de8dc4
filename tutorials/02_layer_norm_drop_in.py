"""
Layer norm as a PyTorch operator
================================

:ref:`sphx_glr_tutorials_02_layer_norm.py` and :ref:`sphx_glr_tutorials_02_layer_norm_backward.py` built the forward
and the backward. This page makes them a drop-in for :func:`torch.nn.functional.layer_norm`: two PyTorch operators
with autograd, which a model compiled with ``torch.compile(fullgraph=True)`` keeps in its graph, timed in a training
step against PyTorch, ``torch.compile``, Liger-Kernel, quack and a copy. **What you will learn**:
``torch.library.custom_op``, ``register_fake`` and ``register_autograd``; a drop-in checked against float64, the same
bits on every run, and compiled whole. Prerequisite: the two pages before, whose kernels and launchers this page
carries in its appendix.
"""

import functools, importlib, importlib.util, math, os, time, typing
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
# A training step's bytes
# -----------------------
# The forward reads *x* and writes *y*; the backward reads *x* and *dy* and writes *dx*: :math:`5MN` elements for
# *M* rows of *N*, each row's mean and ``rstd`` (saved by the forward) and the weight gradients' lines small beside
# them. The drop-in moves those bytes and no more: the speed of a copy of :math:`2.5` times *x*'s bytes, at best.
#
# The operators
# -------------
# ``torch.library.custom_op`` makes a function of tensors a PyTorch operator: ``torch.compile`` keeps it in its graph as
# one call instead of tracing into it (the launcher's checks and fallbacks run untraced). Its type hints are its schema;
# it returns new tensors (``mutates_args=()``). ``register_fake`` gives the compiler the outputs' shapes and dtypes
# without running the kernels. The forward returns each row's mean and ``rstd`` beside *y*: the backward needs them.

@torch.library.custom_op("sol::layer_norm_fwd_02_drop_in", mutates_args=())
def layer_norm_fwd_op(x: torch.Tensor, w: typing.Optional[torch.Tensor], b: typing.Optional[torch.Tensor],
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y, and each row's mean and rstd (fp32, for the backward), of rows x, in new tensors."""
    y2d, mean, rstd = layer_norm_fwd_fake(x, w, b, eps)
    if y2d.numel() > 0:
        wb = (t if t is None else t.contiguous() for t in (w, b))
        layer_norm_rows_forward(_rows(x, *x.shape), y2d, *wb, mean, rstd, eps)
    return y2d, mean, rstd
@layer_norm_fwd_op.register_fake
def layer_norm_fwd_fake(x, w, b, eps):  # shapes and dtypes only
    return x.new_empty(x.shape), *(x.new_empty(x.shape[0], dtype=torch.float32) for _ in range(2))
@torch.library.custom_op("sol::layer_norm_bwd_02_drop_in", mutates_args=())
def layer_norm_bwd_op(x: torch.Tensor, dy: torch.Tensor, w: typing.Optional[torch.Tensor], mean: torch.Tensor,
                      rstd: torch.Tensor, compute_dwdb: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """dx, and dw, db as the rows of one tensor (fp32 sums, 0 over no rows; [2, 0] unless compute_dwdb), all new."""
    dx2d, dwdb = layer_norm_bwd_fake(x, dy, w, mean, rstd, compute_dwdb)
    if dx2d.numel() == 0:  # no rows (dw, db: 0) or no columns
        return dx2d, dwdb.zero_()
    rows = _rows(x, *x.shape), _rows(dy, *x.shape)
    rest = w if w is None else w.contiguous(), mean.contiguous(), rstd.contiguous(), dwdb if compute_dwdb else None
    if x.shape[1] > MAX_BWD_FUSED_N:  # torch's backward: its dx handed over as it is (a copy: a pass more)
        dx2d = torch_rows_backward(*rows, None, *rest)
    else:
        layer_norm_rows_backward(*rows, dx2d, *rest)
    return dx2d.zero_() if x.shape[1] == 1 else dx2d, dwdb  # N = 1, y = b: dx is 0, not a GPU's rounding
@layer_norm_bwd_op.register_fake
def layer_norm_bwd_fake(x, dy, w, mean, rstd, compute_dwdb):
    return x.new_empty(x.shape), mean.new_empty((2, x.shape[1] if compute_dwdb else 0))  # dw, db: fp32

# %%
# ``register_autograd`` gives the forward operator its backward: ``_setup`` keeps what the backward needs (*x*, *w*,
# *b* and the rows' statistics), ``_backward`` calls the backward operator and returns one gradient an input. *dw*
# and *db* come back as the two rows of one tensor: one small launch adds up their lines, one casts both to the
# weight's dtype (none in fp32), where two each would add their starts to every training step.

def _setup(ctx, inputs, output):  # keeps x, w, b and the rows' statistics for the backward
    ctx.save_for_backward(*inputs[:3], *output[1:]), ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)  # no zero-filled "gradients" of mean and rstd: no launch for them
def _backward(ctx, dy2d, _mean, _rstd):
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph=True
        raise RuntimeError("layer_norm: a gradient of this gradient (create_graph=True) is not supported: the "
                           "backward is a Triton kernel, not differentiable; use torch's layer_norm there")
    (x2d, w, b, mean, rstd), need = ctx.saved_tensors, ctx.needs_input_grad[1:3]
    dx2d, dwdb = layer_norm_bwd_op(x2d, dy2d, w, mean, rstd, any(need))
    dtypes = {t.dtype for t, needed in zip((w, b), need) if needed}
    dw, db = dwdb.to(*dtypes) if len(dtypes) == 1 else dwdb  # one launch casts both (none where they are fp32)
    return dx2d, dw.to(w.dtype) if need[0] else None, db.to(b.dtype) if need[1] else None, None
layer_norm_fwd_op.register_autograd(_backward, setup_context=_setup)

# %%
# The drop-in
# -----------
# ``layer_norm`` takes what :func:`torch.nn.functional.layer_norm` takes, checks it (errors name the argument and the
# kernels' limits: float32, float16, bfloat16 on the GPU; ``_rows_and_cols``, in the appendix) and flattens the
# normalized dims into rows (``_rows`` copies the input only where a row's elements are not adjacent). In a model, call
# it where ``F.layer_norm`` was (or in an ``nn.LayerNorm``'s ``forward``), then ``torch.compile(model, fullgraph=True)``
# as before. Inductor fuses nothing into it: a residual add before it stays a pass of its own. ``torch.autocast`` leaves
# it alone: it runs in its input's dtype (sums in fp32), where autocast would run PyTorch's layer norm in fp32.
#
# To take it into your code, copy the page above its appendix and the appendix's carried kernels, launchers and checks;
# leave the machinery after them, which moves the page to a CUDA stream of its own and raises ``torch.compile``'s
# recompile limit.

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Drop-in for torch.nn.functional.layer_norm on float32, float16 and bfloat16, with autograd."""
    x2d = _rows(input, *_rows_and_cols(input, normalized_shape, weight, bias, eps))  # torch's checks, clear errors
    w, b = (None if t is None else t.reshape(x2d.shape[1]).contiguous() for t in (weight, bias))
    return layer_norm_fwd_op(x2d, w, b, float(eps))[0].view(input.shape)

# %%
# Appendix: how this page measures
# --------------------------------
# The forward and the backward, letter for letter as their pages write and explain them (a test keeps them the same):
# kernels, configs, launchers, the tile size, what runs past the kernels' widths; then torch's checks of the
# arguments and the machinery. :func:`triton.testing.do_bench` (median, L2 flushed) times CUDA-graph replays of a
# forward and its backward; the light, a copy of *x*, without a graph. GB/s counts *x, y, x, dy, dx*.

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
def layer_norm_rows_forward(x2d, y2d, w, b, mean, rstd, eps):
    """y2d, mean, rstd of x2d's rows (unit column stride). Returns the kernel it launched."""
    if x2d.shape[1] > MAX_FUSED_N:
        return chunked_rows_forward(x2d, y2d, w, b, mean, rstd, eps)
    meta, grid = _fwd_config(*x2d.shape, x2d.element_size())
    layer_norm_fwd_kernel[(grid,)](x2d, y2d, x2d.new_ones(x2d.shape[1]) if w is None else w,
                                   x2d.new_zeros(x2d.shape[1]) if b is None else b, mean, rstd, *x2d.shape,
                                   x2d.stride(0), y2d.stride(0), eps, **meta)
    return layer_norm_fwd_kernel
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

# Rows past ``MAX_FUSED_N``: deep dive 21's chunked kernel, letter for letter, a program a row, streamed twice.
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
def chunked_rows_forward(x2d, y2d, weight, bias, mean, rstd, eps):  # past MAX_FUSED_N: deep dive 21's launch
    layer_norm_fwd_chunked_kernel[(len(x2d),)](
        x2d, y2d, *(x2d if t is None else t for t in (weight, bias)), mean, rstd, *x2d.shape, x2d.stride(0),
        y2d.stride(0), eps, HAS_W=weight is not None, HAS_B=bias is not None, CHUNK_N=16384, num_warps=32)
    return layer_norm_fwd_chunked_kernel
def naive_layer_norm(x, weight, bias, eps=1e-5):
    xc = x - x.mean(dim=-1, keepdim=True)  # mean reads x (MN), the subtraction reads x, writes xc: 3MN
    var = (xc * xc).mean(dim=-1, keepdim=True)  # xc read, its square written, then read: 3MN
    return xc * torch.rsqrt(var + eps) * weight + bias  # three ops, each reads MN and writes MN: 6MN
def torch_rows_backward(x2d, dy2d, dx2d, weight, mean, rstd, dwdb=None):  # past MAX_BWD_FUSED_N: torch's own
    w = x2d.new_ones(x2d.shape[1]) if weight is None else weight  # backward (deep dive 23's, which splits rows, is faster)
    if x2d.is_cuda and w.dtype == x2d.dtype:  # torch's fused kernels: mean and rstd in fp32 on a GPU (x's dtype on a CPU)
        grads = torch.ops.aten.native_layer_norm_backward(dy2d.contiguous(), x2d, x2d.shape[1:], mean[:, None], rstd[:, None], w, w, [True, dwdb is not None, dwdb is not None])
    else:  # fp32, as the kernel (and where the weight is not of x's dtype)
        x_hat, dy = (x2d.float() - mean[:, None]) * rstd[:, None], dy2d.float()
        g = dy * w.float()
        grads = ((g - (x_hat * (x_hat * g).mean(1, keepdim=True) + g.mean(1, keepdim=True))) * rstd[:, None], (dy * x_hat).sum(0), dy.sum(0))
    [out.copy_(grad) for out, grad in zip((dx2d, *(() if dwdb is None else dwdb)), grads) if out is not None]
    return grads[0].to(x2d.dtype) if dx2d is None else 0  # no dx2d: torch's dx in x's dtype, not copied
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
def _rows_and_cols(input, normalized_shape, weight, bias, eps):
    """(rows, columns) of input as layer_norm sees them, once its arguments pass torch's checks (clear errors)."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else (normalized_shape,)
    if not isinstance(eps, (int, float)) and not hasattr(eps, "__float__"):  # None, a str: torch's TypeError, named
        raise TypeError(f"layer_norm: eps must be a float (torch's default: 1e-5), got {type(eps).__name__}")
    for t, name in zip((input, weight, bias), ("input", "weight", "bias")):
        if t is None and name != "input":
            continue
        if not isinstance(t, torch.Tensor) or t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"layer_norm: {name} is {getattr(t, 'dtype', type(t))}, not a torch.Tensor of dtype float32, "
                            "float16 and bfloat16")
        if t.device.type != DEVICE.type or t.device != input.device or t is not input and t.shape != shape:
            raise ValueError(f"layer_norm: {name} has shape {list(t.shape)} and is on {t.device}; expected "
                             f"{DEVICE.type} tensors on one device, weight and bias of normalized_shape {list(shape)}")
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise TypeError(f"layer_norm: normalized_shape must be ints, got {normalized_shape!r}")
    if not shape or input.shape[input.dim() - len(shape):] != shape or math.prod(shape) >= 2**31:
        raise ValueError(f"layer_norm: normalized_shape {list(shape)} must be input's last dims, {list(input.shape)}, "
                         "and hold under 2**31 elements")
    return math.prod(input.shape[: input.dim() - len(shape)]), math.prod(shape)
def _rows(t, n_rows, n_cols):  # unit-stride rows, copied only if needed
    return t2d if (t2d := t.reshape(n_rows, n_cols)).stride(1) == 1 or n_cols <= 1 else t2d.contiguous()
@triton.jit
def layer_norm_bwd_kernel(x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
                          n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, STAGES: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid, cols = tl.program_id(0), tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)  # loaded once, for every row the program takes
    dw_acc, db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32), tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0), num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok, rows = rows < n_rows, rows.to(tl.int64)
        ok = row_ok[:, None] & col_ok[None, :]  # rows past the end load as zeros: dy = 0 adds nothing to dw, db
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        mean, rstd = tl.load(mean_ptr + rows, mask=row_ok, other=0.0), tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        c1, c2 = tl.sum(x_hat * g, axis=1) / n_cols, tl.sum(g, axis=1) / n_cols
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx, mask=ok)
        dw_acc += dy * x_hat
        db_acc += dy
    offs = pid.to(tl.int64) * n_cols + cols  # every program writes its whole line, zeros included: no clearing
    tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
    tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)

PROPS = torch.cuda.get_device_properties() if ON_GPU else None
NUM_SMS = PROPS.multi_processor_count if ON_GPU else 4  # any will do on a CPU
SMEM_PER_BLOCK = PROPS.shared_memory_per_block_optin if ON_GPU else 232448
SMEM_PER_SM = PROPS.shared_memory_per_multiprocessor if ON_GPU else 233472
# Little's law: the bytes an SM keeps in flight, bandwidth (2 x memory clock x bus width) x 1 us / SMs (0: unknown)
IN_FLIGHT = 2 * getattr(PROPS, "memory_clock_rate", 0) * 1e3 * getattr(PROPS, "memory_bus_width", 0) / 8e6 / NUM_SMS
MAX_BWD_FUSED_N = 8192  # x, dy and two accumulators held in registers
def _bwd_config(n_rows, n_cols, element_size, programs=None, stages=None):
    """(meta, lines): a line of partials a program, ``programs`` lines at most; ``stages`` replaces STAGES."""
    # blocks of 8 KB of x (a row, where one is longer), 32 fp32 values a thread (more would spill); a stage holds a
    # block of x and of dy, within SMEM_PER_BLOCK (16-bit tiles count 4 bytes a value; 16 KB spare): up to 4 under
    # 96 KB, else 3 where they fit, else 1 (2 stages ran slower than 1 at every N measured)
    block_m = max(1, 8192 // element_size // (block_n := triton.next_power_of_2(n_cols)))
    tile = 2 * block_m * block_n
    fit = min(98304 // (tile * element_size), room := (SMEM_PER_BLOCK - 16384) // (tile * max(element_size, 4)))
    # where one program's 4 stages hold less than 2 latencies' bytes, two programs of 3 stages share the SM: one
    # loads while the other reduces and stores
    two = fit >= 6 and 4 * tile * element_size < 2 * IN_FLIGHT and 6 * tile * max(element_size, 4) + 32768 < SMEM_PER_SM
    meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=min(32, max(4, block_m * block_n // 1024)),
                STAGES=stages or (3 if two else min(4, fit) if fit >= 3 else 3 if room >= 3 else 1))  # 4 of 16 KB tiles
    n_blocks = triton.cdiv(n_rows, block_m)
    lines = max(1, min(NUM_SMS * (1 + two) if programs is None else programs, n_blocks))
    return meta, triton.cdiv(n_blocks, triton.cdiv(n_blocks, lines))  # blocks spread evenly: no line left idle
def layer_norm_rows_backward(x2d, dy2d, dx2d, w, mean, rstd, dwdb=None, programs=None, stages=None):
    """dx2d; dw, db into dwdb ([2, N], fp32) if given; programs caps the lines. Returns the lines (0: torch's path)."""
    if x2d.shape[1] > MAX_BWD_FUSED_N:
        return torch_rows_backward(x2d, dy2d, dx2d, w, mean, rstd, dwdb)
    n_rows, n_cols = x2d.shape
    meta, lines = _bwd_config(n_rows, n_cols, x2d.element_size(), programs, stages)
    partials = torch.empty((2, lines, n_cols), device=dx2d.device)  # a line of dw and one of db a program
    layer_norm_bwd_kernel[(lines,)](x2d, dy2d, dx2d, x2d.new_ones(n_cols) if w is None else w, mean, rstd, *partials,
                                    n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx2d.stride(0), **meta)
    if dwdb is not None:  # the lines' sums, dw's and db's in one launch, in a fixed order: the same bits every run
        torch.sum(partials, 1, out=dwdb)
    return lines


# %%
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
    return triton.testing.do_bench(captured.replay if graph else fn, warmup=1, rep=5, return_mode="median")
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
def measure(fns):  # every provider's training-step GB/s, each checked before it is timed
    global w32, b32
    records = []
    for dtype in (torch.float32, torch.bfloat16):
        for n_cols in SWEEP_N:
            x = torch.randn((max(1, TOTAL_ELEMENTS // n_cols), n_cols), device=DEVICE, dtype=dtype)
            w, b = (torch.randn(n_cols, device=DEVICE, dtype=dtype) for _ in range(2))
            dy, out, w32, b32, point = torch.randn_like(x), torch.empty_like(x), w.float(), b.float(), (str(dtype)[6:], n_cols)
            gbs = lambda times, ms: times * x.numel() * x.element_size() / ms * 1e-6
            light, reference = gbs(2, bench(lambda: out.copy_(x), graph=False)), F.layer_norm(x.float(), (n_cols,), w32, b32)
            inputs = [t.requires_grad_() for t in (x, w, b)]
            for name, fn in fns.items():
                ms = math.nan  # "-" in the table
                try:
                    torch.testing.assert_close(fn(*inputs).float(), reference, atol=5e-2, rtol=2e-2)
                    ms = bench(lambda: torch.autograd.grad(fn(*inputs), inputs, dy))
                except Exception as err:
                    if name == "ours":
                        raise
                    print(name, point, "not measured:", " ".join(str(err).split())[:100])
                records.append(("training step", *point, name, gbs(5, ms), light))
    return pd.DataFrame(records, columns=["direction", "dtype", "N", "provider", "GB/s", "speed of light"])
TOLERANCE, OURS = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}, ["y", "dx", "dw", "db"]
def check_row(shape, dtype):  # relative errors of y, dx, dw, db against float64; the same bits in three runs?
    x, w, b = ((torch.randn(s, device=DEVICE) * 3 + 10).to(dtype).requires_grad_() for s in (shape, shape[1:], shape[1:]))
    dy, ins64 = torch.randn_like(x), [t.detach().double().requires_grad_() for t in (x, w, b)]
    refs = ((y64 := naive_layer_norm(*ins64)).detach(), *torch.autograd.grad(y64, ins64, dy.double()))
    first, *again = [(y := layer_norm(x, shape[1:], w, b), *torch.autograd.grad(y, (x, w, b), dy)) for _ in range(3)]
    row = {q: ((o.double() - r).norm() / (r.norm() if r.norm() > 0 else 1)).item() for q, o, r in zip(OURS, first, refs)}
    return {"shape": shape, "dtype": str(dtype)[6:]} | row | {"same bits": all(
        torch.equal(t.view(torch.uint8), t0.view(torch.uint8)) for run in again for t, t0 in zip(run, first))}
def check(shapes):  # the errors' table, asserted within a few roundings of each dtype and the same bits every run
    torch.manual_seed(0)
    errors = pd.DataFrame([check_row(s, d) for d in SUPPORTED_DTYPES for s in shapes])
    assert (errors[OURS].max(axis=1) <= errors.dtype.map(TOLERANCE)).all() and errors["same bits"].all(), errors
    return errors
def check_compiled(loss, *params):
    """loss() compiled whole: fullgraph=True raises at a graph break (without a GPU the aot_eager backend, as Inductor's
    CPU code would need a C++ compiler); the compiled step's gradients must be eager's."""
    compiled = torch.compile(loss, fullgraph=True, backend="inductor" if ON_GPU else "aot_eager")
    torch.testing.assert_close(*[torch.autograd.grad(fn(), params) for fn in (compiled, loss)])
    return "compiled with fullgraph=True: one graph, forward and backward; its gradients are eager's"

PEERS = ["torch", "torch.compile", "Liger", "quack"]  # what "ours / best peer" and the reading compare with
def table_of(results, fns):  # the benchmark's table: GB/s a provider, ours as % of the light and against the best peer
    table = results.pivot(index=["direction", "dtype", "N", "speed of light"], columns="provider", values="GB/s")
    table = table.reset_index("speed of light")[["speed of light", *fns]]
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    table["ours / best peer"] = table["ours"] / table.filter(items=PEERS).max(axis=1)
    return table
def show_benchmark(table):  # the plot and the table
    if not ON_GPU:
        return print(NO_SPEED)
    ax = table["ours, % of light"].unstack([0, 1]).plot(logx=True, marker="o", grid=True, ylabel="ours, % of the copy's GB/s")
    ax.set_title(f"Layer norm, forward and backward, {TOTAL_ELEMENTS:,} elements, on {WHERE}")
    return table.style.format({c: "{:.0f}" for c in table} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"},
                              na_rep="-")
def reading(table):  # the sentences that read this run's numbers
    inside = table.index.get_level_values("N") <= MAX_BWD_FUSED_N
    mine, ratio = table.loc[inside, "ours, % of light"], table.loc[inside, "ours / best peer"]
    peers = table[inside].filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} N = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    won = f". A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) if lost else ""
    return (f"Where both kernels run (N up to {MAX_BWD_FUSED_N:,}), the drop-in's training step ran at "
            f"{mine.min():.3g}-{mine.max():.3g}% of the copy, {ratio.min():.2g}-{ratio.max():.2g}x the fastest peer, "
            f"{(table.ours / table.torch)[inside].median():.2g}x torch (median){won}. Past that width the backward "
            "computes with torch, and the wide deep dives take over.")
def environment_card():  # everything needed to judge this page's numbers, collapsed
    card = {"device": WHERE, "driver / CUDA": f"{collect_env.get_nvidia_driver_version(collect_env.run)} / "
            f"{torch.version.cuda}" if ON_GPU else "none", "torch": torch.__version__, "Triton": triton.__version__,
            "built": BUILT, "packages": os.getenv("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card).to_frame('').to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()


# %%
# Correctness
# -----------
# The drop-in's *y*, *dx*, *dw*, *db* against float64 (``check_row``), rows of mean far from 0: a few roundings; three
# runs, the same bits. Rows of 40,000 take the chunked forward and torch's backward.

errors = check([(17, 1), (1000, 257), (3, 40_000)])
errors.style.format({c: "{:.1e}" for c in OURS}).hide(axis="index")

# %%
# In a compiled model
# -------------------
# A layer and the drop-in, compiled whole with ``torch.compile(fullgraph=True)``, forward and backward;
# ``check_compiled`` fails at a graph break and compares the gradients with eager's.

layer, h = torch.nn.Linear(64, 1000, device=DEVICE), torch.randn(32, 64, device=DEVICE)
w, b = (torch.nn.Parameter(torch.randn(1000, device=DEVICE)) for _ in range(2))  # the norm's: their gradients too
check_compiled(lambda: layer_norm(layer(h), (1000,), w, b).square().mean(), layer.weight, w, b)

# %%
# Benchmark
# ---------
# A forward and its backward, as a training step runs them, dw and db included:

TOTAL_ELEMENTS, SWEEP_N = (2**26, [2**k for k in range(9, 17)]) if ON_GPU else (2**14, [256, 2048, 16384, 65536])
results = measure(fns := providers())
table = table_of(results, fns)
show_benchmark(table)

# %%
# Reading the numbers
# -------------------
print(reading(table) if ON_GPU else NO_SPEED)

# %%
# Going further
# -------------
# **Past the kernels' widths**: :ref:`sphx_glr_tutorials_deep_dives_21_layer_norm_wide_forward.py` and
# :ref:`sphx_glr_tutorials_deep_dives_23_layer_norm_wide_backward.py`. **Exercise**: register the drop-in in a model
# of your own (an ``nn.LayerNorm`` whose ``forward`` calls ``layer_norm``), compile it with ``fullgraph=True``, find
# the forward operator in ``torch._dynamo.explain``'s graph and the backward's in ``TORCH_LOGS=aot_graphs``' output.

environment_card()
