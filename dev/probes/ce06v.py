# Session 27 probe (H100): run from the repository root. Kept in history only (DESIGN.md names the commit).
"""06's kernel with 61's lesson (session 27): the gradient's per-logit work cut. Variants, built from the page's own
source by text edits (so they follow the page): FIX = pass 2 writes row_scale * a * p everywhere and the target's
element after a barrier (no per-logit compare); EXP2 = both passes in base 2 with the log2(e) scale in one FMA.
Run from the repository root: python3 probe/ce06v/ce06v.py [cpu]"""
import os, sys, time, itertools
CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl, torch.nn.functional as F
path = "tutorials/06_cross_entropy.py"
SRC = untimed_source(open(path).read())

def variant(fix, exp2):
    src = SRC
    if fix:
        old = "                dx = row_scale * (a * tl.exp(x - lse) - b)\n"
        assert old in src
        src = src.replace("                b = tl.where(offs == target, hit, 0.0)\n", "                b = 0.0\n")
        src = src.replace(old, "                dx = (row_scale * a) * tl.exp(x - lse) - row_scale * b\n")
        old_end = "                tl.store(dx_row + offs, dx.to(dx_ptr.dtype.element_ty), mask=offs < n_cols, cache_modifier=STREAM)\n"
        assert old_end in src
        src = src.replace(old_end, old_end + """            tl.debug_barrier()  # the target's element, written over the loop's (another thread wrote it)
            b_t = hit + (smoothing / n_cols * (tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0) if SMOOTH else 0.0)
            tl.store(dx_row + target, (row_scale * (a * tl.exp(x_target - lse) - b_t)).to(dx_ptr.dtype.element_ty))
""")
    if exp2:
        src = src.replace("s = s * tl.exp(m - shift) + tl.exp(x - shift)", "s = s * tl.exp2((m - shift) * 1.4426950408889634) + tl.exp2(x * 1.4426950408889634 - shift * 1.4426950408889634)")
        src = src.replace("tl.exp(x - lse)", "tl.exp2(x * 1.4426950408889634 - lse * 1.4426950408889634)")
    g = {"__name__": f"v{fix}{exp2}", "__file__": path}
    exec(compile(src, f"<06 fix={fix} exp2={exp2}>", "exec"), g)
    return g

VARIANTS = {(f, e): variant(f, e) for f, e in itertools.product((0, 1), (0, 1))}
if CPU:
    for V, dtype, smooth, weighted in [(300, torch.bfloat16, 0.0, False), (1000, torch.float32, 0.1, True), (777, torch.bfloat16, 0.0, True)]:
        x = (3 * torch.randn(6, V)).to(dtype); t = torch.randint(0, V, (6,)); t[1] = -100
        w = torch.rand(V) + 0.5 if weighted else None
        x64 = x.double().requires_grad_(True)
        l = F.cross_entropy(x64, t, weight=None if w is None else w.double(), label_smoothing=smooth); l.backward()
        for key, g in VARIANTS.items():
            g["CHUNK_N"] = 64; g["FORWARD_CHUNK_N"] = 32
            dx = torch.empty_like(x)
            losses, scale = g["cross_entropy_rows"](x, t, w, -100, smooth, True, dx)
            print(V, str(dtype)[6:], smooth, weighted, key, abs((losses.double().sum() * scale).item() - l.item()),
                  (dx.double() - x64.grad).abs().max().item())
    sys.exit()

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
    line = f"{str(dtype)[6:]:8s} V {V:6d} copy {light:.0f}"
    ref = F.cross_entropy(x[:32].float(), t[:32], reduction="sum")
    for key, g in VARIANTS.items():
        f = lambda: g["cross_entropy_rows"](x, t, None, -100, 0.0, True, dx)
        losses, scale = f(); torch.cuda.synchronize()
        err = abs(losses[:32].sum().item() - ref.item()) / abs(ref.item())
        fwd = lambda: g["cross_entropy_rows"](x, t, None, -100, 0.0, True, None)
        line += (f" | fix{key[0]} exp2{key[1]} fwd+bwd {100 * 2 * nbytes / bench(f) * 1e-6 / light:.1f} fwd "
                 f"{100 * nbytes / bench(fwd) * 1e-6 / light:.1f}{' ERR %.1e' % err if err > 1e-3 else ''}")
    print(line, flush=True)
    del x, dx, out
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
