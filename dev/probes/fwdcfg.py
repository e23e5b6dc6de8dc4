"""06's kernel (exp2 + target last, as on main now): forward-alone launch configurations, % of the READ PASS; fwd+bwd
of 06 (default) and 61's drop-in with exp or exp2 in its slices, % of the copy. python3 probe29/fwdcfg.py"""
import os, sys, time, itertools, importlib.util
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, torch.nn.functional as F

def load(path, name, edits=()):
    src = untimed_source(open(path).read())
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    file = f"/tmp/{name}.py"
    open(file, "w").write(src)
    spec = importlib.util.spec_from_file_location(name, file)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

g = load("tutorials/06_cross_entropy.py", "p06")
s61 = load("tutorials/deep_dives/61_cross_entropy_split_rows.py", "p61")
e61 = load("tutorials/deep_dives/61_cross_entropy_split_rows.py", "p61e2", [(
    "    e = tl.exp(x - tl.where(m == -float(\"inf\"), 0.0, m))",
    "    e = tl.exp2(x * 1.4426950408889634 - tl.where(m == -float(\"inf\"), 0.0, m) * 1.4426950408889634)")])
FULL = open("tutorials/06_cross_entropy.py").read()
open("/tmp/read06.py", "w").write("import triton\nimport triton.language as tl\n" +
                                  FULL[FULL.index("@triton.jit\ndef read_kernel"):FULL.index("def light_gbs")])
spec = importlib.util.spec_from_file_location("read06", "/tmp/read06.py"); rm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rm)
torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn):
    fn(); torch.cuda.synchronize()
    with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(c.replay, warmup=5, rep=25, return_mode="median")
CFG = {torch.bfloat16: [(4096, 4, 3), (2048, 16, 3), (2048, 16, 1), (2048, 8, 3), (4096, 8, 3), (1024, 16, 3), (2048, 12, 3)],
       torch.float32: [(8192, 4, 3), (2048, 16, 1), (2048, 16, 3), (4096, 8, 3), (4096, 8, 1), (8192, 4, 1), (4096, 4, 3)]}
t0 = time.time()
for dtype, V in itertools.product((torch.bfloat16, torch.float32), (32000, 50304, 128256, 151936, 262144)):
    x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // V, V, device="cuda", dtype=dtype)
    t = torch.randint(0, V, (x.shape[0],), device="cuda"); out = torch.empty_like(x); dx = torch.empty_like(x)
    losses = torch.empty(x.shape[0], device="cuda")
    nbytes = x.numel() * x.element_size()
    light = max(2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25) * 1e-6 for _ in range(2))
    words = x.view(-1).view(torch.int32); outw = torch.empty(triton.cdiv(words.numel(), 8192), device="cuda", dtype=torch.int32)
    read = max(nbytes / bench(lambda: rm.read_kernel[(outw.numel(),)](words, outw, words.numel(), BLOCK=8192, num_warps=16)) * 1e-6
               for _ in range(2))
    ref = F.cross_entropy(x[:64].float(), t[:64], reduction="none")
    line = f"{str(dtype)[6:]:8s} V {V:6d} copy {light:.0f} read {read:.0f} ({100 * read / light:.1f}%) | fwd % of read:"
    consts = torch.tensor([1.0, float(V)], device="cuda")
    for chunk, per_sm, stages in CFG[dtype]:
        meta, grid = g._config(x.shape[0], V, x.element_size(), 2, chunk, stages, per_sm, grad=False)
        f = lambda: g.cross_entropy_kernel[(grid,)](x, t, x, consts, losses, x, x.shape[0], V, x.stride(0), x.stride(0),
                                                   -100, 0.0, HAS_WEIGHT=False, SMOOTH=False, WRITE_GRAD=False, **meta)
        try:
            f(); torch.cuda.synchronize()
            err = (losses[:64] - ref).abs().max().item()
            line += f" c{chunk}x{per_sm}s{stages}w{meta['num_warps']} {100 * nbytes / bench(f) * 1e-6 / read:.1f}{' ERR' if err > 2e-2 else ''}"
        except Exception as e:
            line += f" c{chunk}x{per_sm}s{stages} {type(e).__name__}"
    fb = lambda: g.cross_entropy_rows(x, t, None, -100, 0.0, True, dx)
    line += f" | fwd+bwd % of copy: 06 {100 * 2 * nbytes / bench(fb) * 1e-6 / light:.1f}"
    for name, mod in (("61", s61), ("61exp2", e61)):
        fb = lambda: mod.ce_split_rows(x, t, None, -100, True, dx)
        fb(); torch.cuda.synchronize()
        line += f" {name} {100 * 2 * nbytes / bench(fb) * 1e-6 / light:.1f}"
        fw = lambda: mod.ce_split_rows(x, t, None, -100, True, None)
        line += f" (fwd {100 * nbytes / bench(fw) * 1e-6 / read:.1f} of read)"
    print(line, flush=True)
    del x, dx, out, words
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
