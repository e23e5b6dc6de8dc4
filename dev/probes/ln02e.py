"""02 backward: the page (register prefetch) against a num_stages-pipelined kernel, over warps, stages, lines per SM."""
import sys, itertools, time, os
sys.path.insert(0, "tests"); sys.path.insert(0, "dev/probes")
import torch, triton
from stagedk import bwd_staged
NS = (512, 1024, 2048, 4096, 8192)
DT = (torch.bfloat16, torch.float32)
def configs(dtype, n):
    esz = torch.tensor([], dtype=dtype).element_size()
    bn = triton.next_power_of_2(n); bm = max(1, 8192 // esz // bn)
    for w, st in itertools.product((4, 8, 16, 32), (2, 3, 4)):
        if bm * bn // (32 * w) < 1: continue
        yield dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, STAGES=st)
def compile_one(job):
    dtype, n, meta = job
    x = torch.empty(4, n, device="cuda", dtype=dtype); w = torch.empty(n, device="cuda", dtype=dtype); s = torch.empty(4, device="cuda"); p = torch.empty(4, n, device="cuda")
    try:
        c = bwd_staged.warmup(x, x, x, w, s, s, p, p, 4 * n, n, n, n, n, HAS_W=True, COMPUTE_DWDB=True, grid=(1,), **meta); c._init_handles()
        return (str(dtype), n, tuple(sorted(meta.items())), c.n_regs, c.n_spills, c.metadata.shared)
    except Exception as e:
        return (str(dtype), n, tuple(sorted(meta.items())), -1, -1, str(e)[:60])
if __name__ == "__main__":
    import multiprocessing as mp
    jobs = [(d, n, m) for d in DT for n in NS for m in configs(d, n)]
    t0 = time.time()
    with mp.get_context("spawn").Pool(14) as pool:
        info = {r[:3]: r[3:] for r in pool.map(compile_one, jobs, chunksize=1)}
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f} s", flush=True)
    from conftest import untimed_source
    src = open("tutorials/02_layer_norm.py").read()
    g = {"__name__": "probe02", "__file__": "tutorials/02_layer_norm.py"}
    exec(compile(untimed_source(src), "tutorials/02_layer_norm.py", "exec"), g)
    torch.cuda.set_stream(torch.cuda.Stream())
    def bench(fn, graph=True):
        fn(); torch.cuda.synchronize()
        if graph:
            with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
                fn()
            fn = c.replay
        return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
    SUM = g["sum_partials_kernel"]; SM = dict(BLOCK_P=128, BLOCK_C=16, num_warps=8); g["SUM_META"] = SM
    NSM = g["NUM_SMS"]
    for dtype, n in itertools.product(DT, NS):
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype); w = torch.randn(n, device="cuda", dtype=dtype)
        dy = torch.randn_like(x); dx = torch.empty_like(x); mean = x.float().mean(1); rstd = 1 / x.float().std(1)
        dw = torch.empty(n, device="cuda", dtype=dtype); db = torch.empty_like(dw)
        nbytes = x.numel() * x.element_size()
        light = 2 * nbytes / bench(lambda: dx.copy_(x), graph=False) * 1e-6
        pct = lambda ms: 100 * 3 * nbytes / ms * 1e-6 / light
        page = pct(bench(lambda: g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)))
        _, lines = g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
        ref = dx.float().clone()
        res = []
        for meta in configs(dtype, n):
            regs, spills, smem = info[(str(dtype), n, tuple(sorted(meta.items())))]
            if regs < 0 or spills > 0: continue
            occ = min(2048 // (32 * meta["num_warps"]), 65536 // (regs * 32 * meta["num_warps"]), 232448 // max(smem, 1))
            for per_sm in (1, 2, 4):
                if per_sm > occ: continue
                L = min(per_sm * NSM, triton.cdiv(m, meta["BLOCK_M"]))
                dwp = torch.empty(L, n, device="cuda"); dbp = torch.empty_like(dwp)
                both = lambda: (bwd_staged[(L,)](x, dy, dx, w, mean, rstd, dwp, dbp, m, n, n, n, n, HAS_W=True, COMPUTE_DWDB=True, **meta),
                                SUM[(triton.cdiv(n, 16),)](dwp, dbp, dw, db, L, n, **SM))
                r = pct(bench(both))
                bad = (dx.float() - ref).abs().max().item() > 0.1
                res.append((r, f"w{meta['num_warps']}s{meta['STAGES']}x{per_sm}{'BAD' if bad else ''}"))
        res.sort(reverse=True)
        print(f"{str(dtype)[6:]:8s} {n:5d} page {page:5.1f} (lines {lines}) | " + " ".join(f"{name} {r:.1f}" for r, name in res[:8]), flush=True)
    print(f"total {time.time() - t0:.0f} s")
