"""06's kernel, variants built from the page's own source by text edits (so they follow the page), each written to a
file of its own (a @triton.jit function needs its source file on a GPU):
  FIX  = pass 2 writes row_scale * a * p everywhere and the target's element after a barrier (61's lesson: no
         per-logit compare);
  EXP2 = both passes in base 2 with the log2(e) scale in one FMA;
  TILE = each chunk a [ROWS, SEG] tile, SEG = 32 lanes x 16 bytes: a warp owns whole tile rows, so pass 1 keeps a
         running maximum per tile row, reduced inside the warp (shuffles, no barrier a chunk); the row's maximum and
         sum are combined once, at the row's end.
Prints % of the copy and of a read pass, forward+backward and forward alone, bf16 and fp32 at the five V.
Run from the repository root: python3 probe28/ce06v.py [cpu]"""
import os, sys, time, itertools, importlib.util
CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl, torch.nn.functional as F
path = "tutorials/06_cross_entropy.py"
FULL = open(path).read()
SRC = untimed_source(FULL)

def edit(src, old, new):
    assert src.count(old) == 1, old[:80]
    return src.replace(old, new)

def variant(fix, exp2, tile):
    src = SRC
    if fix:
        src = edit(src, "                b = tl.where(offs == target, hit, 0.0)\n", "                b = 0.0\n")
        src = edit(src, "                dx = row_scale * (a * tl.exp(x - lse) - b)\n",
                   "                dx = (row_scale * a) * tl.exp(x - lse) - row_scale * b\n")
        old_end = "                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)\n"
        src = edit(src, old_end, old_end + """            tl.debug_barrier()  # the target's element, written over the loop's (another thread wrote it)
            b_t = hit + (smoothing / n_cols * (tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0) if SMOOTH else 0.0)
            tl.store(dx_row + target, (row_scale * (a * tl.exp(x_target - lse) - b_t)).to(dx_ptr.dtype.element_ty))
""")
    if tile:
        src = edit(src, "    cols, n_chunks = tl.arange(0, CHUNK), tl.cdiv(n_cols, CHUNK)\n",
                   "    ROWS: tl.constexpr = CHUNK * x_ptr.dtype.element_ty.primitive_bitwidth // 4096  # tile rows of 16 bytes a lane\n"
                   "    SEG: tl.constexpr = CHUNK // ROWS\n"
                   "    cols, n_chunks = tl.arange(0, ROWS)[:, None] * SEG + tl.arange(0, SEG)[None, :], tl.cdiv(n_cols, CHUNK)\n")
        src = edit(src, """        m = tl.full([], -float("inf"), tl.float32)
        s, wx = tl.zeros([CHUNK], tl.float32), tl.zeros([CHUNK], tl.float32)""",
                   """        m = tl.full([ROWS], -float("inf"), tl.float32)
        s, wx = tl.zeros([ROWS, SEG], tl.float32), tl.zeros([ROWS, SEG], tl.float32)""")
        src = edit(src, """            m_new = tl.maximum(m, tl.max(x, axis=0))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf) = NaN
            s = s * tl.exp(m - shift) + tl.exp(x - shift)""",
                   """            m_new = tl.maximum(m, tl.max(x, axis=1))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no -inf - (-inf) = NaN
            s = s * tl.exp(m - shift)[:, None] + tl.exp(x - shift[:, None])""")
        src = edit(src, """        lse = m + tl.log(tl.sum(s, axis=0))""",
                   """        m_row = tl.max(m, axis=0)
        shift = tl.where(m_row == -float("inf"), 0.0, m_row)
        lse = m_row + tl.log(tl.sum(tl.sum(s, axis=1) * tl.exp(m - shift), axis=0))""")
        src = edit(src, "weight_sum * lse - tl.sum(wx, axis=0))", "weight_sum * lse - tl.sum(tl.sum(wx, axis=1), axis=0))")
    if exp2:
        L = "1.4426950408889634"
        if tile:
            src = edit(src, "s = s * tl.exp(m - shift)[:, None] + tl.exp(x - shift[:, None])",
                       f"s = s * tl.exp2((m - shift) * {L})[:, None] + tl.exp2(x * {L} - (shift * {L})[:, None])")
            src = edit(src, "tl.exp(m - shift), axis=0))", f"tl.exp2((m - shift) * {L}), axis=0))")
        else:
            src = edit(src, "s = s * tl.exp(m - shift) + tl.exp(x - shift)",
                       f"s = s * tl.exp2((m - shift) * {L}) + tl.exp2(x * {L} - shift * {L})")
        src = src.replace("tl.exp(x - lse)", f"tl.exp2(x * {L} - lse * {L})")
    name = f"ce06v_f{fix}e{exp2}t{tile}"
    file = f"/tmp/{name}.py"
    with open(file, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.__dict__

KEYS = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1)]
VARIANTS = {k: variant(*k) for k in KEYS}
if os.path.exists("dev/probes/06_tile.py"):  # branch issue-32-tile's page: FIX and TILE as the page would have them
    open("/tmp/ce06v_branch.py", "w").write(untimed_source(open("dev/probes/06_tile.py").read()))
    spec = importlib.util.spec_from_file_location("ce06v_branch", "/tmp/ce06v_branch.py")
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    VARIANTS[("b", "r", "anch")] = module.__dict__
if CPU:
    worst = 0.0
    for V, dtype, smooth, weighted in [(300, torch.bfloat16, 0.0, False), (1000, torch.float32, 0.1, True),
                                       (777, torch.bfloat16, 0.0, True), (5000, torch.float32, 0.0, False)]:
        x = (3 * torch.randn(6, V)).to(dtype); t = torch.randint(0, V, (6,)); t[1] = -100
        if smooth == 0:
            x[2, :V // 2], t[2] = -float("inf"), V - 1  # a row whose first chunks are all -inf
        w = torch.rand(V) + 0.5 if weighted else None
        x64 = x.double().requires_grad_(True)
        l = F.cross_entropy(x64, t, weight=None if w is None else w.double(), label_smoothing=smooth); l.backward()
        for key, g in VARIANTS.items():
            g["CHUNK_N"] = 1024 if key[2] else 64; g["FORWARD_CHUNK_N"] = 512 if key[2] else 32  # TILE: >= 2 tile rows
            dx = torch.empty_like(x)
            losses, scale = g["cross_entropy_rows"](x, t, w, -100, smooth, True, dx)
            fwd, _ = g["cross_entropy_rows"](x, t, w, -100, smooth, True, None)
            errs = (abs((losses.double().sum() * scale).item() - l.item()), (dx.double() - x64.grad).abs().max().item(),
                    (fwd - losses).abs().max().item())
            worst = max(worst, errs[1] if dtype == torch.float32 else 0.0)
            print(V, str(dtype)[6:], smooth, weighted, "fix/exp2/tile", key, " ".join(f"{e:.1e}" for e in errs))
    print("worst fp32 gradient error", worst)
    sys.exit()

open("/tmp/read06.py", "w").write("import triton\nimport triton.language as tl\n" +
                                  FULL[FULL.index("@triton.jit\ndef read_kernel"):FULL.index("def light_gbs")])
spec = importlib.util.spec_from_file_location("read06", "/tmp/read06.py"); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn):
    fn(); torch.cuda.synchronize()
    with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(c.replay, warmup=5, rep=25, return_mode="median")
t0 = time.time()
for dtype, V in itertools.product((torch.bfloat16, torch.float32), (32000, 50304, 128256, 151936, 262144)):
    x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // V, V, device="cuda", dtype=dtype)
    t = torch.randint(0, V, (x.shape[0],), device="cuda"); dx, out = torch.empty_like(x), torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    light = max(2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25) * 1e-6 for _ in range(2))
    words = x.view(-1).view(torch.int32); outw = torch.empty(triton.cdiv(words.numel(), 8192), device="cuda", dtype=torch.int32)
    read = max(nbytes / bench(lambda: m.read_kernel[(outw.numel(),)](words, outw, words.numel(), BLOCK=8192, num_warps=16)) * 1e-6
               for _ in range(2))
    line = f"{str(dtype)[6:]:8s} V {V:6d} copy {light:.0f} read {read:.0f} (fwd+bwd: % of copy; fwd: % of read)"
    ref = F.cross_entropy(x[:32].float(), t[:32], reduction="sum")
    for key, g in VARIANTS.items():
        try:
            f = lambda: g["cross_entropy_rows"](x, t, None, -100, 0.0, True, dx)
            losses, scale = f(); torch.cuda.synchronize()
            err = abs(losses[:32].sum().item() - ref.item()) / abs(ref.item())
            fwd = lambda: g["cross_entropy_rows"](x, t, None, -100, 0.0, True, None)
            line += (f" | f{key[0]}e{key[1]}t{key[2]} {100 * 2 * nbytes / bench(f) * 1e-6 / light:.1f} / "
                     f"{100 * nbytes / bench(fwd) * 1e-6 / read:.1f}{' ERR %.1e' % err if err > 1e-3 else ''}")
        except Exception as e:
            line += f" | f{key[0]}e{key[1]}t{key[2]} {type(e).__name__}: {str(e)[:80]}"
    print(line, flush=True)
    del x, dx, out, words
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
