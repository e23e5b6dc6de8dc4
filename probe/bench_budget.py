"""do_bench's budget against its figures: warmup/rep (ms) of (5, 15), today's, against smaller ones, on what the pages
time (CUDA-graph replays of a memory-bound op over 2^26 elements, L2 flushed; an eager copy as the light).
Per budget: the wall time of one do_bench call and the spread of its median over repeats, interleaved.
Usage (GPU): python3 probe/bench_budget.py [repeats]"""
import statistics, sys, time

import torch, triton

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
BUDGETS = [(5, 15), (2, 10), (1, 8), (1, 5)]
torch.cuda.set_stream(torch.cuda.Stream())


def graphed(fn):
    fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return g.replay


cases = {}
for dtype in (torch.float32, torch.bfloat16):
    for n in (512, 4096, 32768):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        cases[f"softmax {str(dtype)[6:]} {n}"] = (graphed(lambda x=x: torch.softmax(x, -1)), 2 * x.nbytes)
    cases[f"copy {str(dtype)[6:]} (eager)"] = ((lambda x=x, y=y: y.copy_(x)), 2 * x.nbytes)
for name, (fn, nbytes) in cases.items():
    got = {b: [] for b in BUDGETS}
    wall = {b: [] for b in BUDGETS}
    for _ in range(REPEATS):
        for b in BUDGETS:  # interleaved: drift hits every budget alike
            start = time.perf_counter()
            ms = triton.testing.do_bench(fn, warmup=b[0], rep=b[1], return_mode="median")
            wall[b].append(time.perf_counter() - start)
            got[b].append(nbytes / ms * 1e-6)
    ref = statistics.median(got[BUDGETS[0]])
    print(name)
    for b in BUDGETS:
        g = got[b]
        print(f"  warmup {b[0]:>2} rep {b[1]:>2}: {statistics.median(wall[b]) * 1e3:5.1f} ms a call; GB/s median "
              f"{statistics.median(g):7.0f} ({statistics.median(g) / ref:.4f}x today's), spread "
              f"{(max(g) - min(g)) / statistics.median(g) * 100:.2f}% (min-max over {REPEATS})", flush=True)
