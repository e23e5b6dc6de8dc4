"""
Cross-entropy over a large vocabulary
=====================================

A language model ends in logits, :math:`M` tokens by a vocabulary of :math:`V` = 32 K to 256 K: the largest
memory-bound tensor of training. You write a kernel that computes each row's loss **reading each logit once**, and
measure it against PyTorch, ``torch.compile``, Liger-Kernel, quack and Helion. **What you will learn**: the bytes a
loss must move; a row longer than a program's registers; a grid that keeps every SM busy. Its Triton is introduced on
:ref:`sphx_glr_tutorials_01_fused_softmax.py`. The next page,
:ref:`sphx_glr_tutorials_06_cross_entropy_and_gradient.py`, writes the gradient in the same launch; the one after
makes it a drop-in for :func:`torch.nn.functional.cross_entropy`.
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

# %%
# The loss and its bytes
# ----------------------
# For a row :math:`x` of :math:`V` logits and its target class :math:`t`, with the log-sum-exp
# :math:`\ell = \log \sum_j e^{x_j}`,
#
# .. math::
#
#    \mathrm{loss} = \ell - x_t ,
#
# and ``reduction='mean'`` averages the rows. The loss alone needs each logit read once: **2 bytes** a bf16 logit.
# PyTorch's eager forward moves 4 (*x* read, ``log_softmax(x)`` written). Predicted: twice eager's speed, that of a
# read-only pass.
#
# Step 0: the whole row in registers
# ----------------------------------
# One program a row (``[(M,)]``, as on page 01) loads it whole: ``tl.arange(0, BLOCK_V)``, a power of 2, masked to the
# :math:`V` columns that exist, the padding read as :math:`-\infty`.

@triton.jit
def ce_row_kernel(x_ptr, target_ptr, loss_ptr, n_cols, x_row_stride, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: M * V passes 2**31
    cols = tl.arange(0, BLOCK_V)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    x_t = tl.load(x_ptr + row * x_row_stride + tl.load(target_ptr + row)).to(tl.float32)
    m = tl.max(x, axis=0)
    tl.store(loss_ptr + row, m - x_t + tl.log(tl.sum(tl.exp(x - m), axis=0)))  # not (m + log s) - x_t: exact at 1e20

def step0_loss(x2d, target):  # step 0: each row's loss
    loss, block = torch.empty(len(x2d), device=x2d.device), triton.next_power_of_2(x2d.shape[1])
    ce_row_kernel[(len(x2d),)](x2d, target, loss, x2d.shape[1], x2d.stride(0), BLOCK_V=block,
                               num_warps=min(32, max(4, block // 512)))  # 16 logits a thread to 16 K
    return loss

# %%
# Step 1: the row in chunks, an online log-sum-exp
# ------------------------------------------------
# From 128 K logits step 0's registers spill. Step 1 walks the row in chunks of ``CHUNK`` with an *online* softmax
# (deep dive 11): a running maximum :math:`m` and running sums :math:`s` of :math:`e^{x - m}` (one a column of the
# chunk), rescaled by :math:`e^{m - m'}` when a chunk raises it to :math:`m'`, summed after the loop. ``tl.range`` is
# ``range`` with options (``num_stages``: the next chunks loaded early). Whole chunks load without a mask (at bf16 this
# loop nearly fills an SM's issue slots; a mask adds instructions), the rest with one. A ``@triton.jit`` function is
# inlined where called. Program ``p`` of ``P = tl.num_programs(0)`` takes rows ``p, p + P, ...``: step 1 launches
# :math:`P = M`.

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

@triton.jit
def loss_kernel(x_ptr, target_ptr, loss_ptr, n_rows, n_cols, x_row_stride, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):  # rows p, p + P, ...
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride  # M * V passes 2**31
        x_t = tl.load(x_row + tl.load(target_ptr + row)).to(tl.float32)
        m, log_s = log_sum_exp(x_row, n_cols, CHUNK, STAGES, "evict_last")  # an L2 hint, measured faster (no reread)
        tl.store(loss_ptr + row, m - x_t + log_s)

# %%
# Step 2: a grid that keeps every SM busy
# ---------------------------------------
# An SM hides memory's latency with bytes in flight (Little's law: bandwidth x latency, shared by the SMs). Step 2
# launches one wave, as many programs an SM as its registers hold, each walking many rows with its next chunks in
# flight: what its share of the SM's shared memory holds, plus one, 3 at most.

props = torch.cuda.get_device_properties(DEVICE) if ON_GPU else None  # on the CPU, below: an H100 SM's sizes, 4 SMs
NUM_SMS, SMEM_PER_SM = (props.multi_processor_count, props.shared_memory_per_multiprocessor) if ON_GPU else (4, 233472)
WARPS_PER_SM = props.max_threads_per_multi_processor // 32 if ON_GPU else 64
FORWARD_CHUNK_N = 1024  # bf16 logits a chunk of the loss alone (fp32: twice), 16 a thread
STAGES = 3  # chunks in flight (two staged in shared memory, where it holds them)

def loss_config(n_rows, n_cols, element_size, step=2):  # (meta-parameters, grid) of the loss alone
    chunk = max(16, min(FORWARD_CHUNK_N * element_size // 2, triton.next_power_of_2(n_cols)))
    meta = dict(CHUNK=chunk, num_warps=max(2, chunk * element_size // 2048))
    if step == 1:  # a program per row, no pipelining
        return meta | dict(STAGES=1), n_rows
    per_sm = WARPS_PER_SM // 2 // meta["num_warps"]  # half its warp slots: what registers hold at 64 a thread
    sm_stages = 1 + SMEM_PER_SM // (per_sm * chunk * element_size)  # every program's stages, on one SM
    return meta | dict(STAGES=min(STAGES, sm_stages)), min(n_rows, per_sm * NUM_SMS)

# %%
# ``loss_rows`` launches step 1 or 2; ``RANGE``: the :math:`V` the site recommends step 2 at (all).

RANGE = {("forward", t): range(1, 2**31) for t in ("bfloat16", "float32")}  # (direction, dtype) -> the V it is for

def loss_rows(x2d, target, step=2):  # no class weights, no ignored rows (-100 reads out of bounds): the drop-in's
    losses = torch.empty(len(x2d), device=x2d.device, dtype=torch.float32)
    meta, grid = loss_config(*x2d.shape, x2d.element_size(), step)
    loss_kernel[(grid,)](x2d, target, losses, *x2d.shape, x2d.stride(0), **meta)
    return losses

# %%
# Appendix: how this page measures
# --------------------------------
# :math:`2^{30}` logits in bf16, :math:`2^{29}` in fp32 (2 GiB, far past L2), ``'mean'``; every provider on the same
# tensors, timed by :func:`triton.testing.do_bench` (median, L2 flushed), CUDA graphs replayed. GB/s counts the bytes a
# perfect kernel moves: the logits, read once. The *speed of light*, timed beside them, is a pass that only reads the
# logits (tutorial 03's). Liger (given a copy: it overwrites its input) syncs with the host: no graph. Helion, where
# installed, is a peer of its own kind: a kernel written in PyTorch ops on a tile of rows, which Helion compiles to
# Triton, its launch chosen by Helion's autotuner (per GPU and point: ``helion_tuned``); it writes each row's loss, and
# torch takes their mean, as for ours. The functions below are the page's machinery (the check, the timer, the ladder,
# the peers, the sweep, tables, plot, the sentences that read the numbers); the cells after the appendix call them.

# %%
import importlib.metadata, importlib.util, json

NO_GPU = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
SWEEP_V = [32000, 50304, 128256, 151936, 262144] if ON_GPU else [300, 1000]
SWEEP_DTYPES = (torch.bfloat16, torch.float32)
CHECK_SHAPES = [(4096, 32000), (64, 128256), (16, 262144), (300, 50304)] if ON_GPU else [(33, 1000), (3, 20000)]
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # a few roundings, or twice PyTorch's error
LADDER_V = [SWEEP_V[0], SWEEP_V[len(SWEEP_V) // 2]]  # the shortest and the middle V
STEPS = {0: "the whole row in registers", 1: "chunks, a program a row", 2: "a grid sized to the GPU, chunks staged"}

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

def check_row(shape, dtype):
    """Each step's relative error against float64, and torch's in the same dtype: each row's loss (step 0 where its
    row fits registers)."""
    torch.manual_seed(shape[1])
    x, target = (3 * torch.randn(shape, device=DEVICE)).to(dtype), torch.randint(0, shape[1], shape[:1], device=DEVICE)
    loss64 = F.cross_entropy(x.double(), target, reduction="none")
    err = lambda out: ((out.double() - loss64).norm() / loss64.norm()).item()
    row = {"shape": f"{shape[0]} x {shape[1]}", "dtype": str(dtype)[6:], "step 0": float("nan")}
    if shape[1] <= 2**15:
        row["step 0"] = err(step0_loss(x, target))
    for step in (1, 2):
        row[f"step {step}"] = err(loss_rows(x, target, step=step))
    return row | {"torch": err(F.cross_entropy(x, target, reduction="none"))}

def check(shapes):
    """The errors' table of every shape in fp32, fp16 and bf16; it stops the page unless each of ours is a few
    roundings of its dtype, or at most twice torch's."""
    errors = pd.DataFrame([check_row(s, d) for d in (torch.float32, torch.float16, torch.bfloat16) for s in shapes])
    ours = errors[["step 0", "step 1", "step 2"]].max(axis=1)
    assert (ours <= (2 * errors.torch).clip(lower=errors.dtype.map(TOLERANCE))).all(), errors
    return errors

def measure_ladder():
    """bf16, the loss alone, at the shortest and middle V; step 0 at the shortest, where its row fits."""
    ladder = []
    for n_cols in LADDER_V:
        x = torch.randn((TOTAL[torch.bfloat16] // n_cols, n_cols), device=DEVICE, dtype=torch.bfloat16)
        target, light = torch.randint(0, n_cols, (x.shape[0],), device=DEVICE), light_gbs(x, read_only=True)
        for step in [0, 1, 2] if n_cols == LADDER_V[0] else [1, 2]:
            fn = lambda: step0_loss(x, target) if step == 0 else loss_rows(x, target, step=step)
            gbs = x.numel() * x.element_size() / bench(fn) * 1e-6
            ladder.append({"step": step, "idea": STEPS[step], "N": n_cols, "GB/s": gbs,
                           "% of light": 100 * gbs / light})
        x = target = None
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
        text += " Step 1 loses where the whole row fits registers: step 0 has its whole row in flight at once."
    for n in [n for n in LADDER_V if two[n] < 1]:
        meta, grid = loss_config(2**20, n, 2)
        text += (f" At V = {n:,} step 2 loses ({two[n]:.2f}x step 1): its {grid // NUM_SMS} programs an SM, "
                 f"{meta['STAGES']} chunks in flight each, keep fewer bytes in flight than step 1's programs, which "
                 "the GPU starts as others finish.")
    return text

def show_ladder(ladder):
    print(ladder_sentence(ladder))
    return (ladder if ON_GPU else ladder[["step", "idea", "N"]]).style.format(  # on a CPU: the steps run, no speeds
        {"N": "{:,}", "GB/s": "{:.0f}", "% of light": "{:.1f}%"}).hide(axis="index")

def save_results(table):
    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's results for its landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index],
            **({"ours / Helion": table.ours / table.Helion} if "Helion" in table else {}),  # Helion's own target
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
helion = None
if importlib.util.find_spec("helion") is None or not ON_GPU:
    not_measured("Helion", "not installed" if importlib.util.find_spec("helion") is None else "no GPU")
else:
    try:
        import helion
    except Exception as err:  # installed, yet it does not load here
        not_measured("Helion", " ".join(f"{type(err).__name__}: {err}".split())[:100])
if helion:  # a tile of rows a program, each row whole, as step 0; Helion picks the tile, warps and reduction loops
    hl = helion.language

    @helion.kernel(static_shapes=True, autotune_effort="quick")
    def helion_cross_entropy(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss, x_flat = torch.empty(x.size(0), dtype=torch.float32, device=x.device), x.view(-1)
        for rows in hl.tile(x.size(0)):
            x_rows = x[rows, :].to(torch.float32)
            x_t = hl.load(x_flat, [rows.index * x.size(1) + target[rows]]).to(torch.float32)  # each row's x[target]
            x_max = torch.amax(x_rows, dim=1)
            loss[rows] = x_max - x_t + torch.log(torch.sum(torch.exp(x_rows - x_max[:, None]), dim=1))
        return loss

def helion_tuned(kernel, op, points):
    """kernel(*args), each point (dtype, N) at the config dev/helion_tune.py tuned on this GPU, read from the JSON
    file the build names in SOL_HELION_CONFIGS; a point with none autotunes at its first call (effort "quick"),
    kept for this run, or where SOL_HELION_AUTOTUNE=0 is not measured. One line says which."""
    path, entry = os.environ.get("SOL_HELION_CONFIGS", ""), {}
    if os.path.isfile(path):
        with open(path) as f:
            entry = json.load(f).get(WHERE, {})
    same = entry.get("helion") == importlib.metadata.version("helion")
    stored = entry.get("configs", {}).get(op, {}) if same else {}
    missing = [f"{t} N = {n}" for t, n in points if str(n) not in stored.get(t, {})]
    why = ("no file of tuned configs (SOL_HELION_CONFIGS)" if not os.path.isfile(path) else
           f"none tuned on {WHERE}" if not entry else "" if same else f"those stored are Helion {entry.get('helion')}'s")
    off = os.environ.get("SOL_HELION_AUTOTUNE") == "0"  # a build without autotuning: untuned points not measured
    how = "not measured here (SOL_HELION_AUTOTUNE=0)" if off else "autotuned here (effort quick)"
    print(f"Helion: every point at the config tuned on this GPU ({entry.get('tuned')}); none autotuned here."
          if not missing else f"Helion: {how} at each point: {why or 'none stored'}."
          if len(missing) == len(points) else f"Helion: tuned configs at {len(points) - len(missing)} of "
          f"{len(points)} points; {how}: {', '.join(missing)}.")
    configured = set()

    def run(*args):
        bound = kernel.bind(args)  # one per shape and dtype
        point = stored.get(str(args[0].dtype)[6:], {}).get(str(args[0].shape[-1]))
        if off and not point:
            raise RuntimeError(f"no config tuned on {WHERE} for this point, and SOL_HELION_AUTOTUNE=0")
        if point and id(bound) not in configured:
            bound.set_config(helion.Config(**point["config"]))
            configured.add(id(bound))
        return bound(*args)
    return run

if helion:
    helion_loss = helion_tuned(helion_cross_entropy, "cross_entropy forward",
                               [(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_V])
    fns["Helion"] = lambda x, target: helion_loss(x, target).mean().to(x.dtype)  # 'mean', as ours
fns["ours"] = lambda x, target: loss_rows(x, target).mean().to(x.dtype)  # step 2, 'mean'

def measure_providers():
    """Every provider's loss alone, bf16 and fp32, at each V of SWEEP_V, beside a read pass: one record a point."""
    records, missing = [], {}
    for dtype in SWEEP_DTYPES:
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

PEERS = ["torch", "torch.compile", "Liger", "quack", "Helion"]  # what "ours / best peer" and the reading compare with
def provider_table(results):
    """GB/s (higher is better); ours as % of light and against the fastest peer."""
    keys = ["direction", "dtype", "N"]
    table = results.pivot(index=keys, columns="provider", values="GB/s")[list(fns)]
    table.insert(0, "speed of light", results.groupby(keys).light.first())
    table["ours, % of light"] = table["ours"] / table["speed of light"] * 100
    peers = table.filter(items=PEERS)
    table["ours / best peer"] = table["ours"] / peers.max(axis=1)
    save_results(table)
    return table

def table_style(table):
    formats = {c: "{:.0f}" for c in table.columns} | {"ours, % of light": "{:.1f}%", "ours / best peer": "{:.2f}x"}
    return table.style.format(formats, na_rep="-") if ON_GPU else print(NO_GPU)

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
    text = (f"The loss alone runs at {light.min():.3g}-{light.max():.3g}% of a read pass (median "
            f"{light.median():.3g}%), {peer.min():.2f}x to {peer.max():.2f}x the fastest peer and {eager.min():.2f}x "
            f"to {eager.max():.2f}x eager PyTorch, whose forward also writes log_softmax (the bytes model: 2x). Its "
            f"slowest point is {dtype} at V = {n:,}; in the ladder, bf16, step 2 runs at {last.min():.3g}-"
            f"{last.max():.3g}% of light.")
    if "Helion" in table and table.Helion.notna().any():  # else no point of Helion's ran
        helion_pct, ratio = table.Helion / table["speed of light"] * 100, table.ours / table.Helion
        text += (f" Helion's kernel (PyTorch ops on a tile of rows, its launch autotuned) ran at "
                 f"{helion_pct.min():.3g}-{helion_pct.max():.3g}% of a read pass; ours ran {ratio.min():.2f}x to "
                 f"{ratio.max():.2f}x its speed.")
    peers = table.filter(items=PEERS)
    lost = [f"{peers.loc[i].idxmax()} at {i[1]} V = {i[2]:,} ({peers.loc[i].max():,.0f} GB/s, "
            f"ours {table.ours[i]:,.0f})" for i in peers.index if table.ours[i] < peers.loc[i].max()]
    return text + (f" A peer was faster at {len(lost)} of {len(peers)} points: " + "; ".join(lost) + "."
                   if lost else "")

# %%
# Correctness
# -----------
# Relative errors against float64, beside PyTorch's; the page stops unless ours are within a few roundings of the
# dtype or twice PyTorch's.

errors = check(CHECK_SHAPES)
errors.style.format({c: "{:.1e}" for c in errors.columns[2:]}, na_rep="-").hide(axis="index")

# %%
# The ladder
# ----------
# bf16, against a read pass; step 0 where its row fits registers:

ladder = measure_ladder()
show_ladder(ladder)

# %%
# Against every provider
# ----------------------
# ``'mean'``; GB/s (higher is better) against a read pass; "-": a point a peer cannot run.

results, table = measure_providers()
plot(results)
table_style(table)

# %%
# Reading the numbers
# -------------------

print(reading(table, ladder))

# %%
# Going further
# -------------
# With the gradient (the next page) a row is read twice;
# :ref:`sphx_glr_tutorials_deep_dives_61_cross_entropy_split_rows.py` splits it across programs and reads it once,
# :ref:`sphx_glr_tutorials_deep_dives_62_cross_entropy_vocab_parallel.py` across GPUs. References: Milakov and
# Gimelshein (2018), online softmax; Liger-Kernel; quack.
#
# **Exercise.** Set ``STAGES = 1`` and rerun the ladder: what does staging buy?

environment_card()
