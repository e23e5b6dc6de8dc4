"""Next GPU probe (H200): 01B's backward past 16 K, deep dive 11's online kernel at chunks of 8 K and 16 K and 8-32
warps (sm_90: 16 K at 32 warps spills 144-176 B of stack, 8 K at 32 warps none), against torch.compile's backward."""
import itertools, pathlib, time
import torch, triton
from triton.testing import do_bench

ROOT, T0 = pathlib.Path(__file__).resolve().parents[1], time.time()
torch.cuda.set_stream(torch.cuda.Stream())

def page(stem):
    path = next(ROOT.glob(f"tutorials/**/{stem}.py"))
    src = path.read_text()
    cut = src.find("\ndef bench(")
    ns = {"__name__": "page"}
    exec(compile(src if cut < 0 else src[: src.rindex("# %%\n", 0, cut)], str(path), "exec"), ns)
    return ns

def graphed_us(fn):
    fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return do_bench(g.replay, warmup=5, rep=30, return_mode="median") * 1e3

ns = page("01_softmax_backward")
k = ns["softmax_bwd_online_kernel"]
comp = torch.compile(lambda y, dy: y * (dy - (y * dy).sum(-1, keepdim=True)))
for n, dtype in itertools.product([32768, 65536], [torch.bfloat16, torch.float32]):
    y = torch.softmax(torch.randn(2**26 // n, n, device="cuda"), -1).to(dtype)
    dy, dx, copy = torch.randn_like(y), torch.empty_like(y), torch.empty_like(y)
    c = do_bench(lambda: copy.copy_(y), return_mode="median") * 1e3
    ref = graphed_us(lambda: comp(y, dy))
    res = []
    for block, warps in itertools.product([4096, 8192, 16384], [8, 16, 32]):
        fn = lambda: k[(len(y),)](y, dy, dx, *y.shape, y.stride(0), dy.stride(0), dx.stride(0), BLOCK_N=block,
                                  num_warps=warps)
        res.append((graphed_us(fn), block, warps))
    for us, block, warps in sorted(res)[:4]:
        print(f"[{time.time() - T0:5.0f}s] {n} {dtype}: {us:.1f} us ({1.5 * c / us:.1%} of light, {ref / us:.3f}x "
              f"torch.compile {ref:.1f} us) BLOCK_N={block} warps={warps}", flush=True)
