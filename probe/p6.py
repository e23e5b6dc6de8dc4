# Next GPU session: 03's sum of all elements where launches set the time (n = 1 M to 16 M): the page's launch
# (min(blocks, 4 an SM) programs of 4096 at 16 warps) against fewer programs, bigger blocks, fewer warps, beside torch
# and torch.compile, every call timed as the page times it (do_bench over CUDA-graph replays).
# GPU: python3 probe/p6.py; CPU smoke test: TRITON_INTERPRET=1 python3 probe/p6.py --cpu
import pathlib, sys, time
CPU = "--cpu" in sys.argv
import torch, triton

ROOT, T0, DEV = pathlib.Path(__file__).resolve().parents[1], time.time(), "cpu" if CPU else "cuda"

def page(stem):  # the page's cells up to its timer
    path = next(ROOT.glob(f"tutorials/**/{stem}.py"))
    src = path.read_text()
    timer = src.find("\ndef bench(")
    src = src[: src.rindex("# %%\n", 0, timer)] if timer >= 0 else src
    ns = {"__name__": "page"}
    exec(compile(src, str(path), "exec"), ns)
    return ns

if not CPU:
    torch.cuda.set_stream(torch.cuda.Stream())  # graphs are not captured on the default stream

def t(fn):  # us, of CUDA-graph replays
    fn()
    if CPU:
        return 1.0
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median") * 1e3

def line(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

ns = page("03_sum_of_all_elements")
k, sms = ns["sum_kernel"], ns["NUM_SMS"]
compiled = torch.compile(torch.sum, dynamic=False) if not CPU else None
for dtype in (torch.bfloat16, torch.float32):
    for n in ([5000] if CPU else [2**20, 2**22, 2**24]):
        x = torch.randn(n, device=DEV, dtype=dtype)
        out, ticket, ref = torch.empty(1, device=DEV), torch.zeros(1, dtype=torch.int32, device=DEV), x.double().sum()
        grid0, meta0 = ns["_vector_config"](n, x.element_size())
        res = {"torch": t(lambda: torch.sum(x))}
        if compiled:
            res["torch.compile"] = t(lambda: compiled(x))
        for per_sm in (4, 2, 1):
            for block in (4096, 8192, 16384):
                for warps in (4, 8, 16):
                    if block // (32 * warps) > 64 or block // (32 * warps) < 4:
                        continue
                    grid = min(triton.cdiv(n, block), per_sm * sms)
                    parts = torch.empty(grid, device=DEV)
                    fn = lambda: k[(grid,)](x, parts, ticket, out, n, BLOCK=block, EVICT=meta0["EVICT"],
                                            PARTIALS=triton.next_power_of_2(grid), num_warps=warps)
                    us = t(fn)
                    assert abs(out.item() - ref.item()) <= 1e-3 * ref.abs().item() + 1e-2, (per_sm, block, warps)
                    page_launch = (grid, block, warps) == (grid0, meta0["BLOCK"], meta0["num_warps"])
                    res[f"{per_sm} an SM, {block}, {warps} warps" + (" (the page)" if page_launch else "")] = us
        line(f"sum {str(dtype)[6:]} n={n}: page grid {grid0} {meta0}")
        best = min(res.values())
        for name, us in sorted(res.items(), key=lambda kv: kv[1])[:10]:
            line(f"   {name:34s} {us:7.2f} us {n * x.element_size() / us * 1e-3:6.0f} GB/s {best / us:.3f}x the best")
line("done")
