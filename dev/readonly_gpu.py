"""Dev only: one GPU call that tunes the read-only pass of tutorials/03_parallel_reduction.py (the page's speed
of light) and times the page's sums against it.

1. Candidates: the page's read_pass (its defaults: the first of its READ_CONFIGS), and a variant kernel (the
   page's read_kernel with options) over 32-bit or 64-bit words, block sizes and warps, one program per block
   or a persistent grid of P programs per SM, .cg loads, evict_first, unmasked loads, tl.range num_stages.
   Each is checked (the xor of its words equals the xor of all the tensor's words) and timed as the page
   times a provider (gpu_common.bench: a CUDA graph of one call replayed under do_bench, whose L2 flush
   zeroes 256 MB) on 256 MB, 384 MB, 512 MB and 1 GiB, two interleaved rounds, next to an eager
   device-to-device copy (GB/s = 2 * bytes / time).
2. The page's sums (sum_vector's three designs, sum_cols, sum_rows) and torch.sum at 256 MB and more, fp32 and
   bf16, each with the copy, the page's read pass and the fastest candidate measured on the same tensor.
   GB/s counts the bytes read once; % is of the read pass.

SET=evict: instead of the sweep of 1., the evict_first loads against plain ones (3 rounds, 256 MB to 1 GiB), and
the page's persistent vector sum with evict_first loads (sum_ef) beside the page's. SKIP_SUMS=1 skips 2.
SET=small: read candidates (one program per block, persistent grids) on 4 MB to 256 MB, next to torch.sum,
torch.compile's sum and the page's persistent sum on fp32 and bf16 tensors of the same bytes (2 rounds), then exit.

PAGE=1: run the whole page (runpy, as sphinx-gallery runs it) and print its benchmark tables and summary.
(.cg together with evict_first does not compile: ptxas rejects the modifier; such a candidate is reported as
CHECK FAILED and left out.)

PYTHONUNBUFFERED=1 python3 dev/readonly_gpu.py      (from the repository root)
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import bench, load  # noqa: E402

T0 = time.time()
if os.environ.get("PAGE"):  # run the whole page (as sphinx-gallery would) and print its tables
    import runpy

    import pandas as pd
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    page = runpy.run_path("tutorials/03_parallel_reduction.py", run_name="page")
    res = page["results"]
    print(res.pivot_table(index=["sweep", "dtype", "size"], columns="provider", values="GB/s").round(0).to_string())
    print(res.groupby(["sweep", "dtype", "size"])[["speed of light GB/s", "copy GB/s"]].first().round(0).to_string())
    print(res.pivot_table(index=["sweep", "dtype", "size"], columns="provider",
                          values="% of speed of light").round(1).to_string())
    print(page["layout"].round(1).to_string())
    print(page["determinism"].to_string())
    page["summary"]()
    print(f"page total {time.time() - T0:.1f}s")
    sys.exit(0)
SMOKE = not torch.cuda.is_available()  # a CPU smoke test of this script (TRITON_INTERPRET=1, tiny sizes)
P = load("tutorials/03_parallel_reduction.py")
if SMOKE:
    def bench(fn, graph=True):  # noqa: F811
        fn()
        t = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t)
    DEV, MB, SCALE = "cpu", 2**10, 2**-10
else:
    torch.cuda.set_stream(torch.cuda.Stream())  # a CUDA graph cannot be captured on the default stream
    DEV, MB, SCALE = "cuda", 2**20, 1
NUM_SMS = P["NUM_SMS"]


@triton.jit
def read_var(words_ptr, out_ptr, n_words, BLOCK: tl.constexpr, CM: tl.constexpr, EV: tl.constexpr,
             EVEN: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], words_ptr.dtype.element_ty)
    n_blocks = tl.cdiv(n_words, BLOCK)
    if STAGES == 0:
        for block in tl.range(pid, n_blocks, tl.num_programs(0)):
            offs = tl.cast(block, tl.int64) * BLOCK + lanes
            if EVEN:
                acc ^= tl.load(words_ptr + offs, cache_modifier=CM, eviction_policy=EV)
            else:
                acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, cache_modifier=CM,
                               eviction_policy=EV)
    else:
        for block in tl.range(pid, n_blocks, tl.num_programs(0), num_stages=STAGES):
            offs = tl.cast(block, tl.int64) * BLOCK + lanes
            if EVEN:
                acc ^= tl.load(words_ptr + offs, cache_modifier=CM, eviction_policy=EV)
            else:
                acc ^= tl.load(words_ptr + offs, mask=offs < n_words, other=0, cache_modifier=CM,
                               eviction_policy=EV)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))


def variant(word=torch.int32, block_bytes=16384, warps=8, pps=None, cm="", ev="", even=False, stages=0):
    size = torch.empty((), dtype=word).element_size()
    block = block_bytes // size

    def run(x):
        words = x.view(-1).view(word)
        n_blocks = triton.cdiv(words.numel(), block)
        assert not even or words.numel() % block == 0
        grid = min(n_blocks, pps * NUM_SMS) if pps else n_blocks
        out = torch.empty(grid, device=x.device, dtype=word)
        read_var[(grid,)](words, out, words.numel(), BLOCK=block, CM=cm, EV=ev, EVEN=even, STAGES=stages,
                          num_warps=warps)
        return out
    name = (f"{'i64' if size == 8 else 'i32'} {block_bytes // 1024}KB w{warps} "
            f"{'P' + str(pps) if pps else 'one/block'}{' cg' if cm else ''}"
            f"{' ' + ev.replace('evict_', 'e') if ev else ''}"
            f"{' even' if even else ''}{' st' + str(stages) if stages else ''}")
    return name, run


def xor_all(t):
    """xor of all elements of an integer tensor (a tree of bitwise_xor on the GPU)."""
    t = t.reshape(-1)
    while t.numel() > 1:
        if t.numel() % 2:
            t = torch.cat([t, torch.zeros(1, device=t.device, dtype=t.dtype)])
        t = t[0::2] ^ t[1::2]
    return t[0]


def check(run, x, word):
    return bool(xor_all(run(x)) == xor_all(x.view(-1).view(word)))


def copy_gbps(x):
    out = torch.empty_like(x)
    t = bench(lambda: out.copy_(x), graph=False)
    del out
    return 2 * x.numel() * x.element_size() / t * 1e-6


def read_gbps(run, x):
    return x.numel() * x.element_size() / bench(lambda: run(x)) * 1e-6


# --- 1. candidates ---
CANDS = [("page read_pass", P["read_pass"], torch.int32)]
specs = []
for block_bytes, warps in [(4096, 4), (8192, 4), (8192, 8), (16384, 4), (16384, 8), (16384, 16), (32768, 8),
                           (32768, 16), (65536, 16)]:
    specs.append(dict(block_bytes=block_bytes, warps=warps))
for block_bytes, warps in [(8192, 4), (16384, 8), (32768, 16)]:
    specs.append(dict(block_bytes=block_bytes, warps=warps, cm=".cg"))
specs += [dict(block_bytes=16384, warps=8, even=True), dict(block_bytes=8192, warps=4, even=True),
          dict(block_bytes=16384, warps=8, ev="evict_first"),
          dict(word=torch.int64, block_bytes=16384, warps=8), dict(word=torch.int64, block_bytes=8192, warps=4),
          dict(word=torch.int64, block_bytes=32768, warps=16)]
for block_bytes, warps, pps in [(16384, 8, 1), (16384, 8, 2), (16384, 8, 4), (16384, 8, 8), (16384, 16, 2),
                                (16384, 16, 4), (8192, 4, 8), (8192, 4, 16), (32768, 16, 2), (32768, 16, 4)]:
    specs.append(dict(block_bytes=block_bytes, warps=warps, pps=pps))
specs += [dict(block_bytes=16384, warps=8, pps=4, stages=2), dict(block_bytes=8192, warps=4, pps=8, stages=2),
          dict(block_bytes=16384, warps=16, pps=4, cm=".cg"), dict(block_bytes=16384, warps=8, pps=8, even=True),
          dict(block_bytes=16384, warps=16, pps=4, even=True)]
if os.environ.get("SET") == "evict":
    specs = [dict(block_bytes=32768, warps=16), dict(block_bytes=16384, warps=8),
             dict(block_bytes=32768, warps=16, ev="evict_first"), dict(block_bytes=16384, warps=8, ev="evict_first"),
             dict(block_bytes=8192, warps=4, ev="evict_first"), dict(block_bytes=65536, warps=16, ev="evict_first"),
             dict(block_bytes=32768, warps=16, ev="evict_first", cm=".cg"),
             dict(block_bytes=32768, warps=16, ev="evict_last"),
             dict(block_bytes=16384, warps=16, pps=4, ev="evict_first")]
for spec in specs:
    name, run = variant(**spec)
    CANDS.append((name, run, spec.get("word", torch.int32)))

SIZES = [256 * MB] if SMOKE else [256 * MB, 384 * MB, 512 * MB, 1024 * MB]
if os.environ.get("SET") == "small":
    specs = [dict(block_bytes=16384, warps=8), dict(block_bytes=8192, warps=4), dict(block_bytes=4096, warps=4),
             dict(block_bytes=16384, warps=16, pps=4), dict(block_bytes=16384, warps=8, pps=4),
             dict(block_bytes=32768, warps=16, pps=2), dict(block_bytes=16384, warps=8, pps=8),
             dict(block_bytes=8192, warps=4, pps=16), dict(block_bytes=16384, warps=8, pps=4, stages=2),
             dict(block_bytes=16384, warps=16, pps=2)]
    CANDS = [CANDS[0]] + [(n, r, torch.int32) for n, r in (variant(**sp) for sp in specs)]
    SIZES = [4 * MB, 16 * MB, 64 * MB, 128 * MB, 256 * MB]
    dyn = torch._dynamo.config
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dyn, knob):
            setattr(dyn, knob, 1024)
    tsum = torch.compile(lambda t: t.sum(), dynamic=False)
    o1 = torch.empty(1, device=DEV, dtype=torch.float32)
    table = {}
    for rnd in range(2):
        for nb in SIZES:
            x32 = torch.randn(nb // 4, device=DEV)
            x16 = torch.randn(nb // 2, device=DEV, dtype=torch.bfloat16)
            table.setdefault(("copy (2 x bytes)", nb), []).append(copy_gbps(x32))
            for name, run, word in CANDS:
                if rnd == 0:
                    assert check(run, x32, word), name
                table.setdefault((name, nb), []).append(read_gbps(run, x32))
            for label, x in (("fp32", x32), ("bf16", x16)):
                for pname, fn in (("torch.sum", torch.sum), ("torch.compile", tsum),
                                  ("persistent", lambda t: P["sum_vector"](t, o1, "persistent")),
                                  ("atomic", lambda t: P["sum_vector"](t, o1, "atomic"))):
                    if SMOKE and pname == "torch.compile":
                        continue
                    table.setdefault((f"{pname} {label}", nb), []).append(read_gbps(fn, x))
            del x32, x16
        print(f"round {rnd} done {time.time() - T0:.1f}s", flush=True)
    names = list(dict.fromkeys(k[0] for k in table))
    print(f"{'GB/s of bytes read (2 rounds, min-max)':38s}" + "".join(f"{nb // MB:>6d} MB     " for nb in SIZES))
    for name in names:
        print(f"{name:38s}" + "".join(f"{min(table[(name, nb)]):6.0f}-{max(table[(name, nb)]):<6.0f}"
                                      for nb in SIZES))
    sys.exit(0)
tensors = {nb: torch.randn(nb // 4, device=DEV) for nb in SIZES}
ok = {}
t = time.time()
for name, run, word in CANDS:
    try:
        ok[name] = check(run, tensors[SIZES[0]], word)
    except Exception as e:  # noqa: BLE001
        ok[name] = f"error {type(e).__name__}: {str(e)[:120]}"
    if ok[name] is not True:
        print(f"CHECK FAILED {name}: {ok[name]}")
print(f"checks + compiles {time.time() - t:.1f}s (total {time.time() - T0:.1f}s)", flush=True)

res = {}  # (name, nb) -> list of GB/s
copies = {nb: [] for nb in SIZES}
for rnd in range(1 if SMOKE else 3 if os.environ.get("SET") == "evict" else 2):
    for nb in SIZES:
        x = tensors[nb]
        copies[nb].append(copy_gbps(x))
        for name, run, word in CANDS:
            if ok[name] is True:
                res.setdefault((name, nb), []).append(read_gbps(run, x))
    print(f"round {rnd} done {time.time() - T0:.1f}s", flush=True)

print("\nread-only candidates, GB/s of bytes read (rounds, min-max); copy = 2*bytes/time")
hdr = f"{'candidate':38s}" + "".join(f"{nb // MB:>6d} MB     " for nb in SIZES)
print(hdr)
print(f"{'copy (eager)':38s}" + "".join(f"{min(copies[nb]):6.0f}-{max(copies[nb]):<6.0f}" for nb in SIZES))
ranked = []
for name, run, word in CANDS:
    if ok[name] is not True:
        continue
    vals = [res[(name, nb)] for nb in SIZES]
    ranked.append((sum(max(v) + min(v) for v in vals) / (2 * len(vals)), name))
    print(f"{name:38s}" + "".join(f"{min(v):6.0f}-{max(v):<6.0f}" for v in vals))
ranked.sort(reverse=True)
print("\nbest by mean over sizes:", [(n, round(g)) for g, n in ranked[:6]])
best_name = ranked[0][1]
best_run = next(r for n, r, w in CANDS if n == best_name)
page_run = P["read_pass"]
del tensors
if not SMOKE:
    torch.cuda.empty_cache()

# --- 2. the page's sums against the read pass ---
if os.environ.get("SKIP_SUMS"):
    sys.exit(0)


@triton.jit
def sum_ef_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """The page's sum_blocks_kernel (ATOMIC=False) with evict_first loads."""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        acc += x.to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def sum_ef(x, out):
    grid = min(triton.cdiv(x.numel(), P["VECTOR_BLOCK"]), P["PROGRAMS_PER_SM"] * NUM_SMS)
    partials = torch.empty(grid, device=x.device, dtype=torch.float32)
    sum_ef_kernel[(grid,)](x, partials, x.numel(), BLOCK=P["VECTOR_BLOCK"], num_warps=P["VECTOR_NUM_WARPS"])
    P["sum_blocks_kernel"][(1,)](partials, out, grid, BLOCK=P["FINAL_BLOCK"], ATOMIC=False, num_warps=4)



def row(label, x, providers):
    nb = x.numel() * x.element_size()
    copy = copy_gbps(x)
    rp = read_gbps(page_run, x)
    rb = read_gbps(best_run, x)
    cells = [f"copy {copy:5.0f} ({100 * copy / rp:5.1f}%)", f"read(page) {rp:5.0f}", f"read(best) {rb:5.0f}"]
    for name, fn in providers.items():
        g = nb / bench(fn) * 1e-6
        cells.append(f"{name} {g:5.0f} {100 * g / rp:5.1f}%")
    print(f"{label:30s} " + " | ".join(cells), flush=True)


print(f"\npage sums, GB/s and % of the page's read pass (read(best) = {best_name}); copy: GB/s (% of read)")
out1 = torch.empty(1, device=DEV, dtype=torch.float32)
for dtype, n in [(torch.float32, 2**26), (torch.float32, 2**27), (torch.float32, 2**28), (torch.bfloat16, 2**27),
                 (torch.bfloat16, 2**28)]:
    n = int(n * SCALE)
    x = torch.randn(n, device=DEV, dtype=dtype)
    provs = {"torch": lambda: torch.sum(x)}
    for d in P["DESIGNS"]:
        provs[d] = lambda d=d: P["sum_vector"](x, out1, d)
    provs["sum_ef"] = lambda: sum_ef(x, out1)
    row(f"vector {str(dtype)[6:]} {n * x.element_size() // MB} MB", x, provs)
    sum_ef(x, out1)
    ref = x.double().sum()
    print(f"    sum_ef rel err {abs(out1.double().item() - ref.item()) / abs(ref.item()):.1e}")
    del x
if not SMOKE:
    torch.cuda.empty_cache()
for dtype, elements in [(torch.float32, 2**27), (torch.bfloat16, 2**27), (torch.bfloat16, 2**28)]:
    for n_cols in ([16, 256, 4096, 65536, 2**20] if elements == 2**27 else [4096]):
        if SMOKE:
            elements, n_cols = 2**17, min(n_cols, 4096)
        x = torch.randn((elements // n_cols, n_cols), device=DEV, dtype=dtype)
        oc = torch.empty(n_cols, device=DEV, dtype=dtype)
        orow = torch.empty(x.shape[0], device=DEV, dtype=dtype)
        provs = {"torch(0)": lambda: torch.sum(x, 0), "cols": lambda: P["sum_cols"](x, oc),
                 "torch(1)": lambda: torch.sum(x, 1), "rows": lambda: P["sum_rows"](x, orow)}
        row(f"{str(dtype)[6:]} {elements * x.element_size() // MB} MB N={n_cols}", x, provs)
        del x, oc, orow
    if not SMOKE:
        torch.cuda.empty_cache()
print(f"total {time.time() - T0:.1f}s")
