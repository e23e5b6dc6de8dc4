"""03 vector sum first pass at 2^20..2^28: persistent (page), with num_stages, with a register prefetch, non-persistent; whole sums."""
import sys, time
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl
src = open("tutorials/03_parallel_reduction.py").read()
g = {"__name__": "probe03", "__file__": "tutorials/03_parallel_reduction.py"}
exec(compile(untimed_source(src), "tutorials/03_parallel_reduction.py", "exec"), g)
torch.cuda.set_stream(torch.cuda.Stream())

@triton.jit
def staged_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0), num_stages=STAGES):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))

@triton.jit
def prefetch_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    offs = tl.cast(pid, tl.int64) * BLOCK + lanes
    nxt = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), step):
        cur = nxt
        offs = tl.cast(block + step, tl.int64) * BLOCK + lanes
        nxt = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc += cur.to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))

@triton.jit
def runs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    """each program: STEPS contiguous blocks (a run), unrolled"""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for s in tl.static_range(STEPS):
        offs = (tl.cast(pid, tl.int64) * STEPS + s) * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))

def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
            fn()
        fn = c.replay
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
SMS = g["NUM_SMS"]
t0 = time.time()
for dtype in (torch.float32, torch.bfloat16):
    for n in (2**22, 2**24, 2**26, 2**28):
        x = torch.randn(n, device="cuda", dtype=dtype); out = torch.empty(1, device="cuda", dtype=dtype)
        nbytes = x.numel() * x.element_size()
        gbs = lambda ms: nbytes / ms * 1e-6
        light = max(gbs(bench(lambda c=c: g["read_pass"](x, **c))) for c in g["READ_CONFIGS"])
        ref = x.double().sum().item()
        row = [f"{str(dtype)[6:]:8s} 2^{n.bit_length() - 1}", f"page {100 * gbs(bench(lambda: g['sum_vector'](x, out))) / light:5.1f}",
               f"two-pass {100 * gbs(bench(lambda: g['sum_vector'](x, out, 'two-pass'))) / light:5.1f}"]
        variants = []
        for pps, block, warps in ((4, 4096, 16), (4, 2048, 8), (8, 2048, 8), (2, 8192, 16)):
            grid = min(triton.cdiv(n, block), pps * SMS)
            for st in (2, 3, 4):
                variants.append((f"st{st} {pps}x{block}w{warps}", grid, lambda p, grid=grid, block=block, warps=warps, st=st: staged_kernel[(grid,)](x, p, n, BLOCK=block, STAGES=st, num_warps=warps)))
            variants.append((f"pf {pps}x{block}w{warps}", grid, lambda p, grid=grid, block=block, warps=warps: prefetch_kernel[(grid,)](x, p, n, BLOCK=block, num_warps=warps)))
        for block, steps, warps in ((4096, 4, 16), (4096, 8, 16), (2048, 8, 8), (8192, 2, 16)):
            grid = triton.cdiv(n, block * steps)
            variants.append((f"runs {block}x{steps}w{warps}", grid, lambda p, grid=grid, block=block, steps=steps, warps=warps: runs_kernel[(grid,)](x, p, n, BLOCK=block, STEPS=steps, num_warps=warps)))
        for name, grid, first in variants:
            partials = torch.empty(grid, device="cuda")
            whole = lambda: (first(partials), g["sum_blocks_kernel"][(1,)](partials, out, grid, BLOCK=1024, ATOMIC=False, num_warps=4))
            try:
                whole(); torch.cuda.synchronize()
                err = abs(out.double().item() - ref) / max(1.0, abs(ref))
                row.append(f"{name} {100 * gbs(bench(lambda: first(partials))) / light:5.1f}/{100 * gbs(bench(whole)) / light:5.1f}{' BAD' if err > 1e-2 else ''}")
            except Exception as e:
                row.append(f"{name} fail {type(e).__name__}")
        print(" | ".join(row), f"| light {light:.0f} GB/s", flush=True)
print(f"03 probe {time.time() - t0:.0f} s")
