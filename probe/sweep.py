"""Launch sweeps for two rows of the front page: 03's sum of all elements at 1-16 M, 04B's backward at 512-2048.
Each variant timed as the pages time (do_bench median of CUDA-graph replays, L2 flushed), beside the page's own
launch and the speed of light in the same run. Prints one line a variant."""
import os, sys, time, torch
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"
import triton

def untimed(path):
    src = open(path).read()
    cut = src.find("\ndef bench(")
    src = src if cut < 0 else src[:cut]
    scope = {"__name__": "probe"}
    exec(compile(src, path, "exec"), scope)
    return scope

def bench(fn):
    if not ON_GPU:
        fn(); return float("nan")
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=20, return_mode="median")

t0 = time.time()
dev = "cuda" if ON_GPU else "cpu"
stream = torch.cuda.Stream() if ON_GPU else None
ctx = torch.cuda.stream(stream) if ON_GPU else open(os.devnull)
with ctx:
    # ---- 03: sum of all elements ----
    p3 = untimed("tutorials/03_sum_of_all_elements.py")
    sms = p3["NUM_SMS"]
    tickets = torch.zeros(1, dtype=torch.int32, device=dev)
    out = torch.empty(1, device=dev)
    sizes = [2**20, 2**22] if ON_GPU else [2**12]
    for dtype in (torch.bfloat16, torch.float32):
        for n in sizes:
            x = torch.randn(n, device=dev, dtype=dtype)
            light = bench(lambda: p3["read_pass"](x)) if ON_GPU else float("nan")
            page = bench(lambda: p3["sum_vector"](x, out))
            eager = bench(lambda: torch.sum(x, dtype=torch.float32))
            print(f"03 {str(dtype)[6:]} n={n}: light {light*1e3:.2f} us, page {page*1e3:.2f} us "
                  f"(grid {p3['_vector_config'](n, x.element_size())[0]}), torch.sum {eager*1e3:.2f} us", flush=True)
            res = []
            for block in (1024, 2048, 4096, 8192):
                for warps in (4, 8, 16):
                    if block // (32 * warps) < 4:
                        continue
                    for per_sm in (1, 2, 4, 8):
                        grid = max(1, min(triton.cdiv(n, block), per_sm * sms))
                        partials = torch.empty(grid, device=dev)
                        evict = "evict_first" if n * x.element_size() <= 4 * p3["L2_BYTES"] else ""
                        fn = lambda: p3["sum_kernel"][(grid,)](x, partials, tickets, out, n, BLOCK=block,
                                                               PARTIALS=triton.next_power_of_2(grid), EVICT=evict,
                                                               num_warps=warps)
                        ms = bench(fn)
                        torch.testing.assert_close(out[0].double(), x.double().sum(), rtol=1e-3, atol=1e-2 * n**0.5)
                        res.append((ms, block, warps, per_sm, grid))
            res.sort()
            print("   best:", "; ".join(f"{m*1e3:.2f} us B{b} w{w} {p}/SM g{g}" for m, b, w, p, g in res[:6]), flush=True)
            print("   worst:", "; ".join(f"{m*1e3:.2f} us B{b} w{w} {p}/SM g{g}" for m, b, w, p, g in res[-3:]), flush=True)
    # fixed cost: one program, nothing to read
    x = torch.randn(1, device=dev)
    partials = torch.empty(1, device=dev)
    empty = bench(lambda: p3["sum_kernel"][(1,)](x, partials, tickets, out, 0, BLOCK=1024, PARTIALS=1, EVICT="",
                                                 num_warps=4))
    print(f"03 fixed cost: one program reading nothing {empty*1e3:.2f} us", flush=True)
    print(f"[03 done at {time.time()-t0:.0f} s]", flush=True)

    # ---- 04B: backward ----
    p4 = untimed("tutorials/04_rms_norm_backward.py")
    sms = p4["NUM_SMS"]
    total = 2**26 if ON_GPU else 2**12
    for dtype, ns in ((torch.bfloat16, (512, 1024)), (torch.float32, (512,))):
        for n in ns:
            m = total // n
            x, dy = torch.randn(m, n, device=dev, dtype=dtype), torch.randn(m, n, device=dev, dtype=dtype)
            w = torch.randn(n, device=dev, dtype=dtype)
            rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
            dx = torch.empty_like(x)
            light = bench(lambda: dx.copy_(x))  # a copy of x: 2 x's bytes
            light_gbs = 2 * x.numel() * x.element_size() / light * 1e-6
            kernel, meta, grid = p4["_bwd_config"](m, n, x.element_size())
            nbytes = 3 * x.numel() * x.element_size()
            def run(meta, grid):
                part = torch.empty((grid, n), device=dev)
                return lambda: (kernel[(grid,)](x, w, rstd, dy, dx, part, m, n, **meta), part.sum(0))
            page = bench(run(meta, grid))
            print(f"04B {str(dtype)[6:]} N={n}: light {light_gbs:.0f} GB/s, page {nbytes/page*1e-6:.0f} GB/s "
                  f"({100*nbytes/page*1e-6/light_gbs:.1f}%) meta {meta} grid {grid}", flush=True)
            res = []
            for block_m in (4, 8, 16, 32):
                for warps in (4, 8, 16):
                    if block_m * n // (32 * warps) < 4 or block_m * n * x.element_size() > 65536:
                        continue
                    for per_sm in (1, 2, 4):
                        if per_sm * warps > 64:
                            continue
                        g = max(1, min(triton.cdiv(m, block_m), per_sm * sms))
                        mt = dict(BLOCK_M=block_m, BLOCK_N=triton.next_power_of_2(n), num_warps=warps)
                        ms = bench(run(mt, g))
                        res.append((nbytes / ms * 1e-6, block_m, warps, per_sm))
            res.sort(reverse=True)
            print("   best:", "; ".join(f"{s:.0f} GB/s ({100*s/light_gbs:.1f}%) M{b} w{w} {p}/SM" for s, b, w, p in res[:6]),
                  flush=True)
print(f"[done at {time.time()-t0:.0f} s]")
