import torch, triton, importlib.util
src = open("tutorials/deep_dives/61_cross_entropy_split_rows.py").read()
src = src[:src.index("# Correctness")]; src = src[:src.rindex("# %%")]
open("probe/_p61_src.py", "w").write(src)
spec = importlib.util.spec_from_file_location("p61src", "probe/_p61_src.py")
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=30, return_mode="median")
for n_rows in (4096, 16777, 33554, 131072):
    t = torch.randint(0, 32000, (n_rows,), device="cuda"); w = torch.rand(32000, device="cuda")
    fl = torch.empty(n_rows * 4, dtype=torch.int64, device="cuda"); consts = torch.empty(2, device="cuda")
    old = bench(lambda: (mod.loss_constants.__wrapped__ if hasattr(mod.loss_constants, "__wrapped__") else None, torch.stack([1.0 / (t != -100).sum().float(), torch.ones((), device="cuda")]), torch.full((n_rows * 4,), -1, dtype=torch.int64, device="cuda")))
    line = f"rows {n_rows:6d}: torch ops {old*1e3:5.1f} us |"
    for block, warps in ((1024, 4), (4096, 8), (8192, 8), (16384, 16)):
        for weighted in (False, True):
            us = 1e3 * bench(lambda: mod.constants_kernel[(max(1, triton.cdiv(fl.numel(), block)),)](t, w if weighted else t, consts, fl, n_rows, 32000, fl.numel(), -100, MEAN=True, HAS_WEIGHT=weighted, BLOCK=block, num_warps=warps))
            line += f" {block}/{warps}{'w' if weighted else ''} {us:5.1f}"
    print(line, flush=True)
