"""
Cross-entropy and its gradient in one launch
============================================

You extend :ref:`sphx_glr_tutorials_06_cross_entropy.py`'s kernel so that one launch writes each row's loss **and its
gradient**, with class weights and ignored rows, measured against a copy of the logits. **What you will learn**: why
the gradient is written in the forward; rereading a row from L2; a grid whose rows in flight fit L2, and cache hints.
The next page, :ref:`sphx_glr_tutorials_06_cross_entropy_backward.py`, makes it a drop-in for
:func:`torch.nn.functional.cross_entropy`, with autograd.
"""

import datetime, os, shutil, subprocess, timeit, torch, torch.nn.functional as F
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before importing triton: kernels run on the CPU
import matplotlib.pyplot as plt, pandas as pd, triton, triton.language as tl

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
BUILT = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
WHERE = torch.cuda.get_device_name(DEVICE) if ON_GPU else "CPU only, Triton's interpreter (timings are NOT GPU timings)"
print(f"Built on {WHERE} · torch {torch.__version__} · Triton {triton.__version__} · {BUILT}")

# %%
# The gradient and its bytes
# --------------------------
# With :math:`\ell` the row's log-sum-exp and :math:`p = \mathrm{softmax}(x) = e^{x - \ell}`,
#
# .. math::
#
#    \frac{\partial\, \mathrm{loss}}{\partial x} = p - \mathrm{onehot}(t) .
#
# It needs only :math:`x` and :math:`\ell`: the forward writes it; the backward (next page) scales it. PyTorch's
# eager loss and backward move **12 bytes** a bf16 logit: *x* read, ``log_softmax(x)`` written, then read again; a
# gradient of it written, read; *dx* written. The least is **4**: each logit read once, its gradient written once.
# Predicted: 3 times eager's speed, a copy's.
#
# Step 1: the row read twice, the second time from L2
# ---------------------------------------------------
# Pass 1 is the first page's ``log_sum_exp``. Pass 2 rereads the row at once, the last chunk first (the likeliest still
# in L2), and writes :math:`w p`; then the target's :math:`w (p_t - 1)` over it, once ``tl.debug_barrier()`` has every
# thread's stores done (another thread wrote that address): no compare at every logit. ``WRITE_GRAD``, a
# ``tl.constexpr``, is settled when the kernel compiles: without it, pass 2 is not in the kernel.
#
# Each row has a weight :math:`w`: its target's class weight (1 without ``weight``), 0 if ignored, NaN if the target is
# out of range (the host raises where it can look). A row's loss is :math:`w (\ell - x_t)`; ``'mean'`` divides by
# :math:`\sum w` (``scale_ptr``). The target is clamped (``tl.minimum``, ``tl.maximum``): reads stay in its row.

@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, scale_ptr, loss_ptr, dx_ptr,
                         n_rows, n_cols, x_row_stride, dx_row_stride, ignore_index,
                         CHUNK: tl.constexpr, STAGES: tl.constexpr, WRITE_GRAD: tl.constexpr,
                         KEEP: tl.constexpr, DROP: tl.constexpr, STREAM: tl.constexpr):  # cache hints: step 2's
    LOG2E: tl.constexpr = 1.4426950408889634
    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):  # rows p, p + P, ... (step 1: P = M)
        x_row, dx_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride, dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        t = tl.load(target_ptr + row)
        target = tl.minimum(tl.maximum(t, 0), n_cols - 1)  # out of range: read inside the row, the loss NaN
        w_t = tl.load(weight_ptr + target).to(tl.float32)  # the target's class weight (all 1 without weights)
        w = tl.where(t == ignore_index, 0.0, tl.where(t == target, w_t, float("nan")))
        x_t = tl.load(x_row + target).to(tl.float32)
        m, log_s = log_sum_exp(x_row, n_cols, CHUNK, STAGES, KEEP)  # pass 1: l = m + log_s
        tl.store(loss_ptr + row, tl.where(w == 0.0, 0.0, w * (m - x_t + log_s)))
        if WRITE_GRAD:  # pass 2, the last chunk first
            row_scale = tl.where(w == 0.0, 0.0, w * tl.load(scale_ptr))
            for chunk in tl.range(0, n_chunks, num_stages=STAGES):
                offs = (n_chunks - 1 - chunk) * CHUNK + cols
                x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=DROP).to(tl.float32)
                dx = row_scale * tl.exp2((x - m) * LOG2E - log_s * LOG2E)
                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)
            tl.debug_barrier()
            tl.store(dx_row + target, (row_scale * (tl.exp(x_t - m - log_s) - 1.0)).to(dx_ptr.dtype.element_ty))

# %%
# Step 2: the rows being read must fit L2
# ---------------------------------------
# Step 1 has a row in flight for each program the SMs hold; once they outgrow L2, the second read goes to memory. Step
# 2's grid is persistent, the rows in flight under ``L2_SHARE`` of L2: ``MAX_PROGRAMS_PER_SM`` an SM, fewer where their
# rows would outgrow L2. Cache hints: ``evict_last`` on the first read, ``evict_first`` on the second, ``.cs``
# (streaming) on the gradient's store. Stages only where one program an SM leaves nothing else to overlap. Without the
# gradient, ``_config`` gives the first page's launch.

L2_BYTES = torch.cuda.get_device_properties(DEVICE).L2_cache_size if ON_GPU else 50 * 2**20  # an H100's on the CPU
SMEM_PER_BLOCK = torch.cuda.get_device_properties(DEVICE).shared_memory_per_block_optin if ON_GPU else 232448
CHUNK_N = 8192  # logits a step with the gradient (16 KB bf16, 32 KB fp32): 64 bytes a thread
L2_SHARE = 0.7  # of L2 for the rows in flight
MAX_PROGRAMS_PER_SM = 4  # short rows: loads overlap across rows; the backward's grid too

def _config(n_rows, n_cols, element_size, step=2, stages=None, per_sm=None, grad=True):  # (meta-parameters, grid)
    chunk = max(16, min(CHUNK_N if grad else FORWARD_CHUNK_N * element_size // 2, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4 if grad else 2, min(16, chunk * element_size // 2048)))
    if step == 1:  # a program per row, no cache hints, no pipelining
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else WARPS_PER_SM // 2 // meta["num_warps"])
    # a loop (two with the gradient) stages STAGES - 1 chunks; 1 KB for the reductions
    fit = 1 + (SMEM_PER_BLOCK - 1024) // ((1 + grad) * chunk * element_size)
    sm_stages = 1 + SMEM_PER_SM // (per_sm * chunk * element_size)  # every program's stages, on one SM
    stages = min(stages or (STAGES if grad and per_sm == 1 else 1 if grad else min(STAGES, sm_stages)), fit)
    meta |= dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages)
    return meta, min(n_rows, per_sm * NUM_SMS)

# %%
# ``cross_entropy_rows`` launches steps 1 and 2, with the gradient (into ``dx``) or without it. The mean's factor
# :math:`1 / \sum w`: torch operations on the :math:`M` targets.

def cross_entropy_rows(x2d, target, weight, ignore_index, mean, dx=None, step=2):  # (losses, scale); gradient: dx
    (n_rows, n_cols), valid = x2d.shape, target != ignore_index
    counted = valid.sum() if weight is None else (valid * weight.float()[target.clamp(0, n_cols - 1)]).sum()
    scale = 1.0 / counted.float() if mean else torch.ones((), device=x2d.device)  # all rows ignored: inf, NaN 'mean'
    weight = torch.ones(n_cols, device=x2d.device) if weight is None else weight
    losses = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    if n_rows > 0:
        meta, grid = _config(n_rows, n_cols, x2d.element_size(), step, grad=dx is not None)
        out = x2d if dx is None else dx  # (dx_ptr is not written without WRITE_GRAD)
        cross_entropy_kernel[(grid,)](x2d, target, weight, scale, losses, out, n_rows, n_cols, x2d.stride(0),
                                      out.stride(0), ignore_index, WRITE_GRAD=dx is not None, **meta)
    return losses, scale

# %%
# Appendix: how this page measures
# --------------------------------
# What the page runs but does not teach. First, what it runs of the first page, letter for letter (a test keeps them
# the same): the device's figures and the constants of the loss alone, ``add_chunk`` and ``log_sum_exp``. Then the
# machinery: the check, the timer, the sweep, the table, plot and the sentences that read the numbers; the cells after
# the appendix call them.

props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None  # on the CPU, below: an H100 SM's sizes, 4 SMs
NUM_SMS, SMEM_PER_SM = (props.multi_processor_count, props.shared_memory_per_multiprocessor) if ON_GPU else (4, 233472)
WARPS_PER_SM = props.max_threads_per_multi_processor // 32 if ON_GPU else 64
FORWARD_CHUNK_N = 1024  # bf16 logits a chunk of the loss alone (fp32: twice), 16 a thread
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)

@triton.jit
def add_chunk(m, s, x):  # a chunk x (fp32) into running maximum m and sums s; e^a as 2^(a log2 e): 1 instruction, not 4
    m_new = tl.maximum(m, tl.max(x, axis=0))  # tl.max: the chunk's largest; tl.maximum: the larger of two, elementwise
    shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # every logit -inf so far: no -inf - (-inf)
    return m_new, s * tl.exp2((m - shift) * 1.4426950408889634) + tl.exp2((x - shift) * 1.4426950408889634)

@triton.jit
def log_sum_exp(x_row, n_cols, CHUNK: tl.constexpr, STAGES: tl.constexpr, KEEP: tl.constexpr):  # (m, log_s)
    cols, full = tl.arange(0, CHUNK), n_cols // CHUNK * CHUNK  # logits in whole chunks: loaded without a mask
    m, s = tl.full([], -float("inf"), tl.float32), tl.zeros([CHUNK], tl.float32)
    for start in tl.range(0, full, CHUNK, num_stages=STAGES):
        m, s = add_chunk(m, s, tl.load(x_row + start + cols, eviction_policy=KEEP).to(tl.float32))
    m, s = add_chunk(m, s, tl.load(x_row + full + cols, mask=cols < n_cols - full, other=-float("inf")).to(tl.float32))
    return m, tl.log(tl.sum(s, axis=0))  # l = m + log_s, kept apart: at m = 1e20 the sum rounds log_s away

# %%
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; each step on the same
# tensors, timed by :func:`triton.testing.do_bench` (median, L2 flushed), CUDA graphs replayed. GB/s counts the bytes a
# perfect kernel moves: the logits read, their gradient written. The *speed of light* is a copy of the logits, timed
# beside them. The check: steps 1 and 2 with class weights and rows ignored, the loss and its gradient, and the loss
# alone, against float64.

NO_GPU = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]
CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error
STEPS = {1: "the row reread, a program a row", 2: "rows in flight fit L2, cache hints"}

def bench(fn):  # median ms: CUDA-graph replays (GPU), or one call's wall clock (CPU)
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up before the capture
    torch.cuda.synchronize()
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(captured.replay, warmup=1, rep=20, return_mode="median")

def copy_gbs(x):
    """GB/s of a copy of x: the faster of two (no graph: CUDA may pick a slower copy engine there)."""
    out, nbytes = torch.empty_like(x), 2 * x.numel() * x.element_size()
    if not ON_GPU:
        return nbytes / bench(lambda: out.copy_(x)) * 1e-6
    return max(nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=1, rep=20, return_mode="median") * 1e-6
               for _ in range(2))

def reference(x, target, weight):
    """float64: each row's loss, and the gradient of their 'mean'."""
    x64, w64 = x.double().requires_grad_(True), weight.double()
    losses = F.cross_entropy(x64, target, weight=w64, reduction="none")
    return losses.detach(), torch.autograd.grad(F.cross_entropy(x64, target, weight=w64), x64)[0]

def check_row(shape, dtype):
    """Each step's relative error against float64 (the worse of the losses' and the gradient's), the loss alone's, and
    torch's; class weights, rows ignored."""
    torch.manual_seed(shape[1])
    x, target = (3 * torch.randn(shape, device=DEVICE)).to(dtype), torch.randint(0, shape[1], shape[:1], device=DEVICE)
    target.masked_fill_(torch.rand(shape[0], device=DEVICE) < 0.1, -100)
    weight, dx = torch.rand(shape[1], device=DEVICE) + 0.5, torch.empty_like(x)
    err = lambda out, ref: ((out.double() - ref).norm() / ref.norm()).item()
    row, (loss64, dx64) = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:]}, reference(x, target, weight)
    for step in (1, 2):
        losses, _ = cross_entropy_rows(x, target, weight, -100, True, dx.fill_(float("nan")), step=step)
        row[f"step {step}"] = max(err(losses, loss64), err(dx, dx64))
    row["loss alone"] = err(cross_entropy_rows(x, target, weight, -100, True)[0], loss64)
    xt, wt = x.detach().requires_grad_(True), weight.to(dtype)
    (dxt,) = torch.autograd.grad(F.cross_entropy(xt, target, weight=wt), xt)
    row["torch"] = max(err(F.cross_entropy(x, target, weight=wt, reduction="none"), loss64), err(dxt, dx64))
    return row

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16; it stops the page unless each of ours is a few
    roundings of its dtype, or at most twice torch's."""
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    ours = errors[["step 1", "step 2", "loss alone"]].max(axis=1)
    assert (ours <= (2 * errors.torch).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
    return errors

def measure_steps():
    """Steps 1 and 2, the loss and its gradient ('mean'), bf16 and fp32, at each V of SWEEP_V, beside a copy."""
    records = []
    for dtype in (torch.bfloat16, torch.float32):
        for n_cols in SWEEP_V:
            x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
            target, dx, light = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE), torch.empty_like(x), copy_gbs(x)
            for step in (1, 2):
                ms = bench(lambda: cross_entropy_rows(x, target, None, -100, True, dx, step=step))
                gbs = 2 * x.numel() * x.element_size() / ms * 1e-6
                records.append({"dtype": str(dtype)[6:], "N": n_cols, "step": step, "idea": STEPS[step],
                                "GB/s": gbs, "% of light": 100 * gbs / light})
            del x, target, dx
            torch.cuda.empty_cache() if ON_GPU else None
    return pd.DataFrame(records)

def show_steps(steps):
    plot(steps)
    columns = ["dtype", "N", "step", "idea"] + (["GB/s", "% of light"] if ON_GPU else [])  # on a CPU: no speeds
    return steps[columns].style.format({"N": "{:,}", "GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

def plot(steps):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, layout="constrained")
    for ax, (dtype, part) in zip(axes, steps.groupby("dtype", sort=False)):
        for step, line in part.groupby("step"):
            ax.semilogx(line.N, line["% of light"], "o-", base=2, label=f"step {step}: {STEPS[step]}")
        ax.axhline(100, color="black", label="speed of light (a copy)")
        ax.set(title=f"the loss and its gradient, {dtype}", ylabel="% of light", xlabel="vocabulary V")
        ax.legend(fontsize=7)
    fig.suptitle(f"Cross-entropy, {TOTAL[torch.bfloat16]:,} bf16 / {TOTAL[torch.float32]:,} fp32 logits, on {WHERE}")
    plt.show()

def reading(steps):
    """Where step 2 stands, from the table: against a copy, against step 1, and why it falls off where it does."""
    if not ON_GPU:
        return NO_GPU
    speed = steps.pivot(index=["dtype", "N"], columns="step", values="% of light")
    gain, (dtype, n) = speed[2] / speed[1], speed[2].idxmin()
    text = (f"With the gradient, step 2 runs at {speed[2].min():.3g}-{speed[2].max():.3g}% of a copy (median "
            f"{speed[2].median():.3g}%), {gain.min():.2f}x to {gain.max():.2f}x step 1; its slowest point is {dtype} "
            f"at V = {n:,}. Each row is read twice, the second time from L2 at best: the bytes model's 4 bytes a bf16 "
            "logit are the least, not what this kernel moves where a reread misses.")
    lost = gain[gain < 1]
    if len(lost):
        per_sm = _config(2**20, lost.index[0][1], 2)[1] // NUM_SMS
        text += (f" Step 2 loses at {len(lost)} of {len(gain)} points (first at {lost.index[0][0]} V = "
                 f"{lost.index[0][1]:,}): its {per_sm} program(s) an SM keep fewer loads in flight than step 1's full "
                 "grid, which pays only where step 1's second read misses L2.")
    return text

def environment_card():
    card = {"device": WHERE, "driver / CUDA": "none: Triton's interpreter"}
    if ON_GPU:
        props, smi = torch.cuda.get_device_properties(DEVICE), ["nvidia-smi", "--query-gpu=driver_version"]
        found = shutil.which(smi[0]) and subprocess.run(smi + ["--format=csv,noheader"], capture_output=True, text=True)
        driver = found.stdout.split("\n")[0] if found else "?"
        card = {"device": f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB",
                "driver / CUDA": f"driver {driver}, CUDA {torch.version.cuda}"}
    card |= {"torch": torch.__version__, "Triton": triton.__version__,
             "built": BUILT, "packages": os.environ.get("SOL_LOCK", "not pinned")}
    html = f"<details><summary>Full environment card</summary>{pd.Series(card, name='').to_frame().to_html()}</details>"
    return type("Collapsed", (), {"_repr_html_": lambda self: html})()

if ON_GPU:
    torch.cuda.set_stream(torch.cuda.Stream())  # no graph capture on the default stream

# %%
# Correctness
# -----------
# Relative errors against float64 (the worse of the loss's and the gradient's; class weights, rows ignored), beside
# PyTorch's; the page stops unless each of ours is a few roundings of its dtype, or at most twice PyTorch's.

errors = check(CHECK_SHAPES)
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}).hide(axis="index")

# %%
# The ladder, at every vocabulary
# -------------------------------
# The loss and its gradient, against a copy:

steps = measure_steps()
show_steps(steps)

# %%
# Reading the numbers
# -------------------

print(reading(steps))

# %%
# Going further
# -------------
# **The drop-in**, with autograd, is the next page: :ref:`sphx_glr_tutorials_06_cross_entropy_backward.py`. **Where
# this design stops**: a row read twice costs, even from L2;
# :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py` splits a row across programs and reads it once.
#
# **Exercise.** Set ``L2_SHARE`` to 2 (rows in flight past L2) and rerun the ladder: what does step 2 lose, and why?

environment_card()
