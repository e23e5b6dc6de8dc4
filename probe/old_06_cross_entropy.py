"""
Cross-entropy over a large vocabulary
=====================================

A language model ends in logits, :math:`M` tokens by a vocabulary of :math:`V` = 32 K to 256 K: the largest
memory-bound tensor of training. You write a kernel that computes each row's loss **and its gradient in one launch**,
and measure the loss against PyTorch, ``torch.compile``, Liger-Kernel and quack. **What you will learn**: the bytes a
loss and its gradient must move; what to do when a row outgrows one program's registers; keeping the rows being read
in L2. Its Triton is introduced on :ref:`sphx_glr_tutorials_01_fused_softmax.py`. The next page,
:ref:`sphx_glr_tutorials_06_cross_entropy_backward.py`, makes the kernel a drop-in for
:func:`torch.nn.functional.cross_entropy`, with autograd.
"""

import contextlib, datetime, os, shutil, subprocess, timeit, torch, torch.nn.functional as F
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
# The loss, its gradient and their bytes
# --------------------------------------
# For a row :math:`x` of :math:`V` logits and its target class :math:`t`, with :math:`\ell = \log \sum_j e^{x_j}`
# (the log-sum-exp) and :math:`p = \mathrm{softmax}(x) = e^{x - \ell}`,
#
# .. math::
#
#    \mathrm{loss} = \ell - x_t, \qquad \frac{\partial\, \mathrm{loss}}{\partial x} = p - \mathrm{onehot}(t) .
#
# ``reduction='mean'`` divides both by the rows not ignored (``ignore_index``). PyTorch's eager loss moves **12 bytes a
# logit** in bf16: *x* read, ``log_softmax(x)`` written, then read again; a gradient of it written, read; *dx* written.
# The least is **4**: read each logit once, write its gradient once. Predicted: about 3 times eager's speed, a copy's.
# The loss alone (evaluation) needs only the read, 2 bytes a logit, where eager's forward moves 4.
#
# Step 0: the whole row in registers
# ----------------------------------
# One program per row loads it whole; all else follows from registers: 4 bytes a logit. The launch ``[(M,)]`` runs
# :math:`M` programs, ``num_warps`` warps each; ``tl.program_id(0)`` is the row, ``tl.arange(0, BLOCK_V)`` its columns,
# ``BLOCK_V`` a ``tl.constexpr`` (a compile-time power of 2), masked (``mask=cols < n_cols``) to the :math:`V` that
# exist, the padding read as :math:`-\infty`. Step 0 is the plain case: every row counted (``scale``: the mean's
# :math:`1/M`), no options.

@triton.jit
def ce_row_kernel(x_ptr, target_ptr, loss_ptr, dx_ptr,
                  n_cols, x_row_stride, dx_row_stride, scale,
                  BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: M * V passes 2**31
    cols = tl.arange(0, BLOCK_V)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    is_target = cols == tl.load(target_ptr + row)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    total = tl.sum(e, axis=0)
    tl.store(loss_ptr + row, m - tl.sum(tl.where(is_target, x, 0.0), axis=0) + tl.log(total))  # not (m + log s) - x_t
    dx = scale * (e / total - tl.where(is_target, 1.0, 0.0))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols)

def step0_loss_and_grad(x2d, target, dx):  # step 0, the 'mean' of every row: the loss; its gradient into dx
    loss, block = torch.empty(len(x2d), device=x2d.device), triton.next_power_of_2(x2d.shape[1])
    ce_row_kernel[(len(x2d),)](x2d, target, loss, dx, x2d.shape[1], x2d.stride(0), dx.stride(0), 1 / len(x2d),
                               BLOCK_V=block, num_warps=min(32, max(4, block // 512)))  # 16 logits a thread
    return loss.mean()

# %%
# At 32 K logits, step 0 takes 32 fp32 registers a thread twice over (:math:`x` and its exponentials); 128 K spill.
#
# Step 1: the row in chunks, read twice, the second time from L2
# --------------------------------------------------------------
# A long row is walked in chunks of ``CHUNK`` logits with an *online* softmax (deep dive 11 derives it): the row's
# running maximum :math:`m`, and for each lane of the chunk a running sum :math:`s` of :math:`e^{x - m}` (a vector of
# ``CHUNK``, added up once after the loop), rescaled by :math:`e^{m - m'}` when a chunk raises the maximum. ``tl.range``
# is a loop compiled as one (``num_stages``: the next chunks loaded early). Pass 2 needs the final :math:`\ell`: it
# rereads the row at once, from L2 if it is still there, and writes :math:`w p`, then the target's :math:`w (p_t - 1)`
# over it once ``tl.debug_barrier()`` has every thread's stores done (another thread wrote that address): no compare at
# every logit. ``exp2`` is one instruction. ``if WRITE_GRAD:`` tests a ``tl.constexpr``, settled when the kernel
# compiles: without it, pass 2 is not in the kernel, which computes the loss alone from one read of the row.
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
        row64 = tl.cast(row, tl.int64)  # M * V passes 2**31
        x_row, dx_row = x_ptr + row64 * x_row_stride, dx_ptr + row64 * dx_row_stride
        t = tl.load(target_ptr + row)
        target = tl.minimum(tl.maximum(t, 0), n_cols - 1)  # out of range: read inside the row, the loss NaN
        w_t = tl.load(weight_ptr + target).to(tl.float32)  # the target's class weight (all 1 without weights)
        w = tl.where(t == ignore_index, 0.0, tl.where(t == target, w_t, float("nan")))
        x_t = tl.load(x_row + target).to(tl.float32)
        m, s = tl.full([], -float("inf"), tl.float32), tl.zeros([CHUNK], tl.float32)
        for chunk in tl.range(0, n_chunks, num_stages=STAGES):  # pass 1: m and s
            offs = chunk * CHUNK + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # every logit -inf so far: no -inf - (-inf)
            s, m = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E), m_new
        log_s = tl.log(tl.sum(s, axis=0))  # l = m + log_s, kept apart: at m = 1e20 the sum rounds log_s away
        tl.store(loss_ptr + row, tl.where(w == 0.0, 0.0, w * (m - x_t + log_s)))
        if WRITE_GRAD:  # pass 2, the last chunk first (the likeliest still in L2)
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
# 2's grid is *persistent*: a few programs an SM, each walking rows ``p, p + P, ...``, the rows in flight under
# ``L2_SHARE`` of L2; cache hints ``evict_last`` on the first read, ``evict_first`` on the second, ``.cs`` (streaming)
# on the gradient's store. An SM needs enough bytes in flight to hide memory's latency (Little's law: bandwidth x
# latency / SMs). With the gradient, ``MAX_PROGRAMS_PER_SM`` rows of a short vocabulary, fewer where they would outgrow
# L2; stages (chunks loaded ahead into shared memory) only where one program an SM leaves nothing else to overlap. The
# forward alone rereads nothing: small chunks of ``FORWARD_CHUNK_N`` on 2 warps, enough programs to fill the SM's warp
# slots (the device's threads an SM / 64), each staging as many chunks ahead as all of theirs fit its shared memory.

props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None  # on the CPU, below: an H100's, 4 SMs
NUM_SMS, L2_BYTES = (props.multi_processor_count, props.L2_cache_size) if ON_GPU else (4, 50 * 2**20)
SMEM_PER_BLOCK, SMEM_PER_SM = (props.shared_memory_per_block_optin, props.shared_memory_per_multiprocessor) if ON_GPU \
    else (232448, 233472)
WARPS_PER_SM = props.max_threads_per_multi_processor // 32 if ON_GPU else 64
CHUNK_N = 8192  # logits a step with the gradient (16 KB bf16, 32 KB fp32): 64 bytes a thread
FORWARD_CHUNK_N = 1024  # the forward alone: 2 warps a program (16 logits, 32 or 64 bytes a thread), 32 an SM
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)
L2_SHARE = 0.7  # of L2 for the rows in flight
MAX_PROGRAMS_PER_SM = 4  # short rows: loads overlap across rows; the backward's grid too

def _config(n_rows, n_cols, element_size, step=2, stages=None, per_sm=None, grad=True):  # (meta-parameters, grid)
    chunk = max(16, min(CHUNK_N if grad else FORWARD_CHUNK_N, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(4 if grad else 2, min(16, chunk * element_size // 2048)))
    if step == 1:  # a program per row, no cache hints, no pipelining
        return meta | dict(KEEP="", DROP="", STREAM="", STAGES=1), n_rows
    per_sm = per_sm or (max(1, min(MAX_PROGRAMS_PER_SM, int(L2_SHARE * L2_BYTES) // (NUM_SMS * n_cols * element_size)))
                        if grad else WARPS_PER_SM // meta["num_warps"])
    # a loop (two with the gradient) stages STAGES - 1 chunks; 1 KB for the reductions
    fit = 1 + (SMEM_PER_BLOCK - 1024) // ((1 + grad) * chunk * element_size)
    sm_stages = 1 + SMEM_PER_SM // (per_sm * chunk * element_size)  # every program's stages, on one SM
    stages = min(stages or (STAGES if grad and per_sm == 1 else 1 if grad else min(STAGES, sm_stages)), fit)
    meta |= dict(KEEP="evict_last", DROP="evict_first", STREAM=".cs", STAGES=stages)
    return meta, min(n_rows, per_sm * NUM_SMS)

# %%
# The launcher and the range
# --------------------------
# ``cross_entropy_rows`` launches steps 1 and 2, with the gradient (into ``dx``) or without it: the loss alone. The
# mean's factor :math:`1 / \sum w` comes from torch operations on the :math:`M` targets, not on the logits; without
# ``weight`` every class weighs 1. ``RANGE`` holds what the site recommends this page for: the loss alone, at every
# :math:`V`. With the gradient each row is read twice (the ladder shows the cost); deep dive 61 reads it once.

RANGE = {("forward", t): range(1, 2**31) for t in ("bfloat16", "float32")}  # (direction, dtype) -> the V it is for

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
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; every provider on the same
# tensors, timed by :func:`triton.testing.do_bench` (median, L2 flushed), CUDA graphs replayed. GB/s counts the bytes a
# perfect kernel moves: the logits read (the loss alone), plus the gradient written (the ladder). The *speed of light*,
# timed beside them: a pass that only reads the logits (tutorial 03's), and for the ladder a copy. Liger (given a copy:
# it overwrites its input) syncs with the host: no graph. The functions below are the page's machinery (the check, the
# timer, the ladder, the peers, the sweep, tables, plot, the sentences that read the numbers); the cells after the
# appendix call them.

# %%
TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]
CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error
LADDER_V = [SWEEP_V[0], SWEEP_V[len(SWEEP_V) // 2]]  # the shortest and the middle V
STEPS = {0: "the whole row in registers", 1: "chunks, the row reread from L2", 2: "rows in flight fit L2, cache hints"}

def bench(fn, graph=True):  # median ms: CUDA-graph replays (GPU), or one call's wall clock (CPU)
    if not ON_GPU:
        return 1e3 * timeit.timeit(fn, number=1)
    fn()  # compile and warm up before the capture
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            fn()
        fn = captured.replay
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")

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

def reference(x, target, weight=None):
    """float64: each row's loss, and the gradient of their 'mean'."""
    x64, w64 = x.double().requires_grad_(True), None if weight is None else weight.double()
    losses = F.cross_entropy(x64, target, weight=w64, reduction="none")
    return losses.detach(), torch.autograd.grad(F.cross_entropy(x64, target, weight=w64), x64)[0]

def check_row(shape, dtype):
    """Each step's relative error against float64 (the worse of the losses' and the gradient's), the loss alone's, and
    torch's; step 0 (where its row fits registers) with every row counted, the others with weights and rows ignored."""
    torch.manual_seed(shape[1])
    x, target = (3 * torch.randn(shape, device=DEVICE)).to(dtype), torch.randint(0, shape[1], shape[:1], device=DEVICE)
    ignored = target.masked_fill(torch.rand(shape[0], device=DEVICE) < 0.1, -100)
    weight, dx = torch.rand(shape[1], device=DEVICE) + 0.5, torch.empty_like(x)
    err = lambda out, ref: ((out.double() - ref).norm() / ref.norm()).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "step 0": float("nan")}
    if shape[1] <= 2**15:
        loss64, dx64 = reference(x, target)
        row["step 0"] = max(err(step0_loss_and_grad(x, target, dx), loss64.mean()), err(dx, dx64))
    loss64, dx64 = reference(x, ignored, weight)
    for step in (1, 2):
        losses, _ = cross_entropy_rows(x, ignored, weight, -100, True, dx.fill_(float("nan")), step=step)
        row[f"step {step}"] = max(err(losses, loss64), err(dx, dx64))
    row["loss alone"] = err(cross_entropy_rows(x, ignored, weight, -100, True)[0], loss64)
    xt, wt = x.detach().requires_grad_(True), weight.to(dtype)
    (dxt,) = torch.autograd.grad(F.cross_entropy(xt, ignored, weight=wt), xt)
    row["torch"] = max(err(F.cross_entropy(x, ignored, weight=wt, reduction="none"), loss64), err(dxt, dx64))
    return row

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16; it stops the page unless each of ours is a few
    roundings of its dtype, or at most twice torch's."""
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    ours = errors[["step 0", "step 1", "step 2", "loss alone"]].max(axis=1)
    assert (ours <= (2 * errors.torch).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
    return errors

def measure_ladder():
    """bf16, the loss and its gradient, at the shortest and middle V; step 0 at the shortest, where its row fits."""
    ladder = []
    for n_cols in LADDER_V:
        x = torch.randn((TOTAL[torch.bfloat16] // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
        target, dx, light = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE), torch.empty_like(x), light_gbs(x)
        for step in [0, 1, 2] if n_cols == LADDER_V[0] else [1, 2]:
            fn = lambda: step0_loss_and_grad(x, target, dx) if step == 0 else \
                cross_entropy_rows(x, target, None, -100, True, dx, step=step)
            gbs = 2 * x.numel() * x.element_size() / bench(fn) * 1e-6
            ladder.append({"step": step, "idea": STEPS[step], "N": n_cols, "GB/s": gbs,
                           "% of light": 100 * gbs / light})
        x = target = dx = None
    return pd.DataFrame(ladder).sort_values(["step", "N"], kind="stable")

def ladder_sentence(ladder):
    """Each step against the one before it, from the table: where a step loses, it says so and why."""
    if not ON_GPU:
        return NO_GPU
    speed, (short, long) = ladder.set_index(["step", "N"])["GB/s"], LADDER_V
    one, two = speed[1, short] / speed[0, short], {n: speed[2, n] / speed[1, n] for n in LADDER_V}
    text = f"At V = {short:,}, step 1 runs at {one:.2f}x step 0; step 2 at {two[short]:.2f}x step 1 there and " \
           f"{two[long]:.2f}x at V = {long:,}."
    if one < 1:
        text += " Step 1 loses where the whole row fits registers: it reads the row twice, the second time from L2."
    for n in [n for n in LADDER_V if two[n] < 1]:
        per_sm = _config(2**20, n, 2)[1] // NUM_SMS
        text += (f" At V = {n:,} step 2 loses ({two[n]:.2f}x step 1): its {per_sm} program(s) an SM keep "
                 f"{per_sm * NUM_SMS * n * 2 / 2**20:.0f} MiB of rows in flight (L2: {L2_BYTES / 2**20:.0f} MiB), but "
                 "step 2 only pays where step 1's second read misses L2, likely not the case at this V, and its "
                 "fewer programs keep fewer loads in flight than step 1's full grid.")
    return text

def ladder_style(ladder):
    return (ladder if ON_GPU else ladder[["step", "idea", "N"]]).style.format(  # on a CPU: the steps run, no speeds
        {"N": "{:,}", "GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

def save_results(table):
    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's results for its landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "06_cross_entropy.csv"))

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

not_measured = lambda peer, why: print(f"{peer}: not measured here ({why}).")  # a peer this run cannot time
fns, no_graph = {"torch": F.cross_entropy}, set()
major, minor = torch.cuda.get_device_capability() if ON_GPU else (0, 0)
if ON_GPU:  # on a CPU, Inductor would time a C++ compiler
    torch.cuda.set_stream(torch.cuda.Stream())  # no graph capture on the default stream
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024  # one a shape, dtype
    fns["torch.compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
    with contextlib.suppress(ImportError):
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        fns["Liger"] = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0]
        no_graph = {"Liger"}
try:  # quack's CuTe-DSL kernels, from compute capability 9.0
    if major >= 9:
        from quack.cross_entropy import cross_entropy as quack_cross_entropy
        fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
except Exception as err:  # not installed, or it does not load here
    not_measured("quack", "not installed" if isinstance(err, ImportError) else " ".join(str(err).split())[:100])
for peer in [p for p in ("torch.compile", "Liger") if p not in fns] + (["quack"] if major < 9 else []):
    not_measured(peer, "no GPU" if not ON_GPU else "not installed" if peer != "quack" else
                 f"needs compute capability 9.0 or newer; this GPU has {major}.{minor}")

def ours(x, target):  # the loss alone ('mean'): steps 1 and 2's kernel without the gradient, through its launcher
    losses, scale = cross_entropy_rows(x, target, None, -100, True)
    return (losses.sum() * scale).to(x.dtype)
fns["ours"] = ours

def measure_providers():
    """Every provider's loss alone, bf16 and fp32, at each V of SWEEP_V, beside a read pass: one record a point."""
    records, missing = [], {}
    for dtype in (torch.bfloat16, torch.float32):
        for n_cols in SWEEP_V:
            x = torch.randn((TOTAL[dtype] // n_cols, n_cols), device=DEVICE, dtype=dtype)
            target = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE)
            nbytes, reference = x.numel() * x.element_size(), F.cross_entropy(x.float(), target)
            light = light_gbs(x, read_only=True)
            for name, fn in fns.items():
                xg = x.clone() if name == "Liger" else x  # Liger writes over its input
                try:
                    torch.testing.assert_close(fn(xg, target).float(), reference, atol=1e-2, rtol=1e-2)
                    ms = bench(lambda: fn(xg, target), graph=name not in no_graph)
                except Exception as err:  # a peer's limit: the point is missing (why: printed below)
                    if name == "ours":
                        raise
                    why, ms = " ".join(f"{type(err).__name__}: {err}".split())[:120], float("nan")
                    missing.setdefault((name, why), []).append(f"{str(dtype)[6:]} V = {n_cols}")
                records.append({"direction": "forward", "dtype": str(dtype)[6:], "N": n_cols, "provider": name,
                                "GB/s": nbytes / ms * 1e-6, "light": light})
                xg = None
            del x, target, reference
            torch.cuda.empty_cache() if ON_GPU else None
    for (name, why), points in missing.items():
        not_measured(name, f"{why}; at {', '.join(points)}")
    results = pd.DataFrame(records)
    results["% of speed of light"] = 100 * results["GB/s"] / results.light
    return results, provider_table(results)

def provider_table(results):
    """GB/s (higher is better); ours as % of light and against the fastest peer."""
    keys = ["direction", "dtype", "N"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys).light.first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=["torch", "torch.compile", "Liger", "quack"])
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    save_results(table)
    return table

def table_style(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-")

def plot(results):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, layout="constrained")
    for ax, ((direction, dtype), part) in zip(axes.flat, results.groupby(["direction", "dtype"], sort=False)):
        for name, line in part.groupby("provider", sort=False):
            ax.semilogx(line.N, line["% of speed of light"], "o-" if name == "ours" else "o--", base=2, label=name)
        ax.axhline(100, color="black", label="speed of light (a read pass)")
        ax.set(title=f"the loss alone, {dtype}", ylabel="% of light", xlabel="vocabulary V")
        ax.legend(fontsize=7)
    fig.suptitle(f"Cross-entropy, {TOTAL[torch.bfloat16]:,} bf16 / {TOTAL[torch.float32]:,} fp32 logits, on {WHERE}")
    plt.show()

def reading(table, ladder):
    """Where ours stands, from the tables: against light, the peers, eager PyTorch (the bytes model: 2x); the ladder."""
    if not ON_GPU:
        return NO_GPU
    light, peer, eager = table["ours, % of light"], table["ours / best peer"].dropna(), table["ours"] / table["torch"]
    (_, dtype, n), last = light.idxmin(), ladder[ladder.step == 2].set_index("N")["% of light"]
    return (f"The loss alone runs at {light.min():.3g}-{light.max():.3g}% of a read pass (median "
            f"{light.median():.3g}%), {peer.min():.2f}x to {peer.max():.2f}x the fastest peer and {eager.min():.2f}x "
            f"to {eager.max():.2f}x eager PyTorch, whose forward also writes log_softmax (the bytes model: 2x). Its "
            f"slowest point is {dtype} at V = {n:,}. With the gradient, step 2 runs at {last.min():.3g}-"
            f"{last.max():.3g}% of a copy in the ladder: each row is read twice, the second time from L2 at best.")

# %%
# Correctness
# -----------
# Each step's relative error against float64, the worse of its losses' and its gradient's (step 0: every row counted,
# no weights; steps 1 and 2: class weights, rows ignored), the loss alone's, and PyTorch's in the same dtype beside
# them. ``check`` stops the page unless each of ours is a few roundings of its dtype, or at most twice PyTorch's.

errors = check(CHECK_SHAPES)
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}, na_rep="-").hide(axis="index")

# %%
# The ladder
# ----------
# bf16, the loss and its gradient in one launch, at the shortest and middle :math:`V`, against a copy; step 0 where
# its row fits registers:

ladder = measure_ladder()
print(ladder_sentence(ladder))
ladder_style(ladder)

# %%
# The loss alone, against every provider
# --------------------------------------
# ``'mean'``, no gradient asked; GB/s (higher is better) against a pass that only reads the logits. "-": a point a peer
# cannot run.

results, table = measure_providers()
table_style(table) if ON_GPU else print(NO_GPU)

# %%
# As a plot, as % of light:

plot(results)

# %%
# Reading the numbers
# -------------------

print(reading(table, ladder))

# %%
# Going further
# -------------
# **The backward and the drop-in** are the next page, :ref:`sphx_glr_tutorials_06_cross_entropy_backward.py`: the
# kernel with the gradient, as PyTorch operators with autograd, against the peers as training runs them.
#
# **Where this design stops.** Reading each row twice costs, even from L2 (the ladder). The way past: programs that
# split a row, each slice in registers, exchanging their maxima and sums (as vocabulary-parallel training does):
# :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py`, the front page's pick for forward+backward, with
# every option in its kernel. With the vocabulary split over GPUs (a tensor-parallel head), the slices' statistics
# travel between ranks instead: :ref:`sphx_glr_tutorials_deep_dives_62_cross_entropy_vocab_parallel.py`. Further:
# never materialize the logits (*fused linear cross-entropy*, Wijmans et al. 2024). References: Milakov and Gimelshein
# (2018), online softmax; Liger-Kernel; quack.
#
# **Exercise.** Set ``L2_SHARE`` to 2 (rows in flight past L2) and rerun the ladder: what does step 2 lose, and why?

environment_card()
