"""Probe: 03's row kernel (EVEN) with and without evict_first; 03's whole sum as the page has it and with evict_first."""
import json, torch, triton, triton.language as tl

@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr, EVICT: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    row_offs = rows.to(tl.int64) * stride_m
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        offs = row_offs[:, None] + cols.to(tl.int64)[None, :] * stride_n
        if EVEN:
            x = tl.load(x_ptr + offs, eviction_policy=EVICT)
        else:
            x = tl.load(x_ptr + offs, mask=row_ok[:, None] & (cols < n_cols)[None, :], other=0.0, eviction_policy=EVICT)
        acc += x.to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_ok)

torch.cuda.set_stream(torch.cuda.Stream())
torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024

def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median")

for dtype in (torch.bfloat16, torch.float32):
    for n in (16, 256, 1024, 4096, 16384):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        out = torch.empty(len(x), device="cuda", dtype=dtype)
        gb = lambda ms: x.numel() * x.element_size() / ms * 1e-6
        tc = torch.compile(lambda t: t.sum(1), dynamic=False)
        res = dict(dtype=str(dtype)[6:], n=n, torch_compile=round(gb(bench(lambda: tc(x)))))
        block_n = min(triton.next_power_of_2(n), 2048)
        block_m = max(1, min(4096 // block_n, len(x)))
        per_thread = max(16, 64 // x.element_size())
        for warps in sorted({min(16, max(4, block_m * block_n // (32 * per_thread))), 8, 16}):
            for evict in ("", "evict_first", "evict_last"):
                f = lambda: row_sum_kernel[(triton.cdiv(len(x), block_m),)](
                    x, out, len(x), n, *x.stride(), BLOCK_M=block_m, BLOCK_N=block_n, EVEN=True, EVICT=evict,
                    num_warps=warps)
                res[f"w{warps}_{evict or 'none'}"] = round(gb(bench(f)))
        print(json.dumps(res), flush=True)
