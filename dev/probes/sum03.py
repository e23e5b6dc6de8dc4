"""03 vector sum at 2^20..2^28: page persistent vs first pass alone vs a one-launch ticket design vs torch.compile, % of the read pass."""
import sys, time
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl
src = open("tutorials/03_parallel_reduction.py").read()
g = {"__name__": "probe03", "__file__": "tutorials/03_parallel_reduction.py"}
exec(compile(untimed_source(src), "tutorials/03_parallel_reduction.py", "exec"), g)
torch.cuda.set_stream(torch.cuda.Stream())

@triton.jit
def sum_ticket_kernel(x_ptr, partial_ptr, count_ptr, out_ptr, n, BLOCK: tl.constexpr, FINAL: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))
    ticket = tl.atomic_add(count_ptr, 1, sem="acq_rel")
    if ticket == n_programs - 1:
        idx = tl.arange(0, FINAL)
        total = tl.zeros([FINAL], tl.float32)
        for first in range(0, n_programs, FINAL):
            total += tl.load(partial_ptr + first + idx, mask=first + idx < n_programs, other=0.0, cache_modifier=".cg")
        tl.store(out_ptr, tl.sum(total, axis=0).to(out_ptr.dtype.element_ty))
        tl.store(count_ptr, 0)

def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
            fn()
        fn = c.replay
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
count = torch.zeros(1, device="cuda", dtype=torch.int32)
cs = torch.compile(lambda t: t.sum(), dynamic=False)
t0 = time.time()
for dtype in (torch.float32, torch.bfloat16):
    for n in (2**20, 2**22, 2**24, 2**26, 2**28):
        x = torch.randn(n, device="cuda", dtype=dtype); out = torch.empty(1, device="cuda", dtype=dtype)
        nbytes = x.numel() * x.element_size()
        gbs = lambda ms: nbytes / ms * 1e-6
        light = max(gbs(bench(lambda c=c: g["read_pass"](x, **c))) for c in g["READ_CONFIGS"])
        row = [f"{str(dtype)[6:]:8s} 2^{n.bit_length() - 1}"]
        row.append(f"page {100 * gbs(bench(lambda: g['sum_vector'](x, out))) / light:5.1f}")
        row.append(f"compile {100 * gbs(bench(lambda: cs(x))) / light:5.1f}")
        ref = x.double().sum()
        for pps, block, warps in ((4, 4096, 16), (2, 8192, 16), (4, 8192, 16), (8, 4096, 8), (4, 2048, 8)):
            grid = min(triton.cdiv(n, block), pps * g["NUM_SMS"])
            partials = torch.empty(grid, device="cuda")
            first = lambda: g["sum_blocks_kernel"][(grid,)](x, partials, n, BLOCK=block, ATOMIC=False, num_warps=warps)
            one = lambda: sum_ticket_kernel[(grid,)](x, partials, count, out, n, BLOCK=block, FINAL=1024, num_warps=warps)
            one(); torch.cuda.synchronize()
            err = abs(out.double().item() - ref.item()) / max(1.0, abs(ref.item()))
            row.append(f"{pps}x{block}w{warps}: first {100 * gbs(bench(first)) / light:5.1f} one {100 * gbs(bench(one)) / light:5.1f} (err {err:.0e}, count {count.item()})")
        print(" | ".join(row), f"| light {light:.0f} GB/s", flush=True)
print(f"03 probe {time.time() - t0:.0f} s")
