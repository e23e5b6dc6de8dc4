"""Next GPU probes (H200): 03's sum at 1 M / 16 M timed over CUDA graphs (the page's way), its launch swept; 01B's
drop-in backward past 16 K (deep dive 11's online kernel) against torch's backward and torch.compile's."""
import itertools, pathlib, sys, time
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

def line(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

if "sum" in sys.argv[1:] or len(sys.argv) == 1:
    ns, sms = page("03_sum_of_all_elements"), torch.cuda.get_device_properties().multi_processor_count
    k, tickets = ns["sum_kernel"], torch.zeros(1, dtype=torch.int32, device="cuda")
    for n, dtype in itertools.product([2**20, 2**24], [torch.float32, torch.bfloat16]):
        x, out = torch.randn(n, device="cuda", dtype=dtype), torch.empty(1, device="cuda", dtype=dtype)
        part, ref = torch.empty(4096, device="cuda"), graphed_us(lambda: torch.sum(x))
        line(f"sum {n} {dtype}: torch {ref:.2f} us, ours {graphed_us(lambda: ns['sum_vector'](x, out)):.2f} us")
        res = []
        for block, warps, per_sm in itertools.product([1024, 2048, 4096, 8192], [4, 8, 16], [0.25, 0.5, 1, 2, 4]):
            grid = max(1, min(triton.cdiv(n, block), int(per_sm * sms)))
            if block // (32 * warps) < 4:
                continue
            fn = lambda: k[(grid,)](x, part, tickets, out, n, BLOCK=block, PARTIALS=triton.next_power_of_2(grid),
                                   EVICT="evict_first", num_warps=warps)
            res.append((graphed_us(fn), block, warps, grid))
        for r in sorted(res)[:5]:
            line(f"   {r[0]:.2f} us ({ref / r[0]:.3f}x torch) BLOCK={r[1]} warps={r[2]} grid={r[3]}")

if "softmax" in sys.argv[1:] or len(sys.argv) == 1:
    ns = page("01_softmax_backward")
    comp = torch.compile(lambda y, dy: y * (dy - (y * dy).sum(-1, keepdim=True)))
    for n, dtype in itertools.product([32768, 65536, 131072], [torch.bfloat16, torch.float32]):
        y = torch.softmax(torch.randn(2**26 // n, n, device="cuda"), -1).to(dtype)
        dy = torch.randn_like(y)
        copy, c = torch.empty_like(y), {}
        c["copy"] = do_bench(lambda: copy.copy_(y), return_mode="median") * 1e3
        c["ours"] = graphed_us(lambda: ns["softmax_bwd_op"](y, dy))
        c["torch"] = graphed_us(lambda: torch._softmax_backward_data(dy, y, 1, y.dtype))
        c["torch.compile"] = graphed_us(lambda: comp(y, dy))
        line(f"softmax bwd {n} {dtype}: " + ", ".join(f"{k} {v:.1f} us" for k, v in c.items()) +
             f"; ours {1.5 * c['copy'] / c['ours']:.1%} of light")
line("done")
