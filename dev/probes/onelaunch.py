"""The drop-in's forward alone ('mean'): main at efcfb96 (10 small kernels around the kernel) against the working
tree (one launch), % of a read pass, bf16 and fp32 at the five V; the kernel alone beside. git show efcfb96:tutorials/06_cross_entropy.py > /tmp/06_before.py && python3 dev/probes/onelaunch.py"""
import sys, time, itertools, importlib.util
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, torch.nn.functional as F

def load(path, name):
    file = f"/tmp/{name}.py"
    open(file, "w").write(untimed_source(open(path).read()))
    spec = importlib.util.spec_from_file_location(name, file)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

old, new = load("/tmp/06_before.py", "p06old"), load("tutorials/06_cross_entropy.py", "p06new")
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
t0 = time.time()
for dtype, V in itertools.product((torch.bfloat16, torch.float32), (32000, 50304, 128256, 151936, 262144)):
    x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // V, V, device="cuda", dtype=dtype)
    t = torch.randint(0, V, (x.shape[0],), device="cuda"); t[::7] = -100
    nbytes = x.numel() * x.element_size()
    words = x.view(-1).view(torch.int32); outw = torch.empty(triton.cdiv(words.numel(), 8192), device="cuda", dtype=torch.int32)
    read = max(nbytes / bench(lambda: rm.read_kernel[(outw.numel(),)](words, outw, words.numel(), BLOCK=8192, num_warps=16)) * 1e-6
               for _ in range(2))
    ref = F.cross_entropy(x.float(), t)
    line = f"{str(dtype)[6:]:8s} V {V:6d} read {read:.0f} GB/s |"
    for name, m in (("before", old), ("one launch", new)):
        f = lambda: m.cross_entropy(x, t)
        err = abs(f().float().item() - ref.item()) / abs(ref.item())
        s = f"{name} {100 * nbytes / bench(f) * 1e-6 / read:.1f}"
        s2 = f"{100 * nbytes / bench(f) * 1e-6 / read:.1f}"
        line += f" {s}/{s2}{' ERR %.1e' % err if err > 1e-2 else ''} |"
    losses = torch.empty(x.shape[0], device="cuda"); consts = torch.tensor([1.0, float(V)], device="cuda")
    meta, grid = new._config(x.shape[0], V, x.element_size(), grad=False)
    k = lambda: new.cross_entropy_kernel[(grid,)](x, t, x, consts, losses, x, consts, x.shape[0], V, x.stride(0), x.stride(0),
                                                 -100, 0.0, HAS_WEIGHT=False, SMOOTH=False, WRITE_GRAD=False, **meta)
    line += f" kernel alone {100 * nbytes / bench(k) * 1e-6 / read:.1f}"
    print(line, flush=True)
    del x, words
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
