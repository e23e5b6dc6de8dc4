"""06 (working tree) with and without the next row's target loaded early: the drop-in's forward alone (% of a read
pass) and forward+backward through cross_entropy_rows (% of a copy). python3 dev/probes/tnext.py"""
import sys, time, itertools, importlib.util
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton

def load(name, edits=()):
    src = untimed_source(open("tutorials/06_cross_entropy.py").read())
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    open(f"/tmp/{name}.py", "w").write(src)
    spec = importlib.util.spec_from_file_location(name, f"/tmp/{name}.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

base = load("t06base")
plain = load("t06plain", [
    ("    t_next = tl.load(target_ptr + tl.program_id(0), mask=tl.program_id(0) < n_rows, other=ignore_index)\n", ""),
    ("""        target = t_next
        next_row = row + tl.num_programs(0)
        t_next = tl.load(target_ptr + next_row, mask=next_row < n_rows, other=ignore_index)
""", "        target = tl.load(target_ptr + row)\n")])
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
for dtype, V in itertools.product((torch.bfloat16, torch.float32), (32000, 50304, 128256, 151936, 262144)):
    x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // V, V, device="cuda", dtype=dtype)
    t = torch.randint(0, V, (x.shape[0],), device="cuda"); dx = torch.empty_like(x); out = torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    words = x.view(-1).view(torch.int32); outw = torch.empty(triton.cdiv(words.numel(), 8192), device="cuda", dtype=torch.int32)
    read = max(nbytes / bench(lambda: rm.read_kernel[(outw.numel(),)](words, outw, words.numel(), BLOCK=8192, num_warps=16)) * 1e-6 for _ in range(2))
    copy = max(2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25) * 1e-6 for _ in range(2))
    line = f"{str(dtype)[6:]:8s} V {V:6d} |"
    for name, m in (("t_next", base), ("plain", plain)):
        fwd = 100 * nbytes / bench(lambda: m.cross_entropy(x, t)) * 1e-6 / read
        fb = 100 * 2 * nbytes / bench(lambda: m.cross_entropy_rows(x, t, None, -100, 0.0, True, dx)) * 1e-6 / copy
        line += f" {name} fwd {fwd:.1f} fwd+bwd {fb:.1f} |"
    print(line, flush=True)
    del x, dx, out, words
    torch.cuda.empty_cache()
