"""Probe for the next GPU session: does evict_first cost 03's whole sum at 2^28 and 31's split row sums past 16 K?
Times each with and without the hint, beside torch.compile, on the lent GPU. Prints JSON lines.
Run from the repository root: python3 probe/next51.py"""
import json, torch, triton, triton.language as tl

@triton.jit
def sum_kernel(x_ptr, partials_ptr, ticket_ptr, out_ptr, n, BLOCK: tl.constexpr, PARTIALS: tl.constexpr,
               EVICT: tl.constexpr):
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy=EVICT).to(tl.float32)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_programs - 1:
        p = tl.arange(0, PARTIALS)
        total = tl.sum(tl.load(partials_ptr + p, mask=p < n_programs, other=0.0, volatile=True), axis=0)
        tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(ticket_ptr, 0)

@triton.jit
def split_row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, cols_per_split,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    pid_m, pid_s = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    row_offs = rows.to(tl.int64) * stride_m
    col_start = pid_s * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(col_start, col_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row_offs[:, None] + cols.to(tl.int64)[None, :] * stride_n,
                    mask=row_ok[:, None] & (cols < col_end)[None, :], other=0.0, eviction_policy=EVICT)
        acc += x.to(tl.float32)
    out = out_ptr + pid_s.to(tl.int64) * n_rows + rows
    tl.store(out, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_ok)

def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median")

def main():
    torch.cuda.set_stream(torch.cuda.Stream())
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for dtype in (torch.bfloat16, torch.float32):
        for n in (2**24, 2**26, 2**28):
            x = torch.randn(n, device="cuda", dtype=dtype)
            out, ticket = torch.empty(1, device="cuda", dtype=dtype), torch.zeros(1, device="cuda", dtype=torch.int32)
            gb = lambda ms: x.numel() * x.element_size() / ms * 1e-6
            tc = torch.compile(lambda t: t.sum(), dynamic=False)
            res = dict(kind="whole sum", dtype=str(dtype)[6:], n=n, torch_compile=round(gb(bench(lambda: tc(x)))))
            grid = min(triton.cdiv(n, 4096), 4 * sms)
            partials = torch.empty(grid, device="cuda", dtype=torch.float32)
            for evict in ("", "evict_first", "evict_last"):
                res[evict or "none"] = round(gb(bench(lambda: sum_kernel[(grid,)](
                    x, partials, ticket, out, n, BLOCK=4096, PARTIALS=triton.next_power_of_2(grid), EVICT=evict,
                    num_warps=16))))
            print(json.dumps(res), flush=True)
    for dtype in (torch.bfloat16, torch.float32):
        for n_cols in (65536, 2**20):
            x = torch.randn(2**26 // n_cols, n_cols, device="cuda", dtype=dtype)
            n_rows, block_n = x.shape[0], 2048
            block_m = max(1, min(4096 // block_n, triton.next_power_of_2(n_rows)))
            n_blocks = triton.cdiv(n_rows, block_m)
            split = max(1, min(n_cols // (block_n * 4), triton.cdiv(4 * sms, n_blocks)))
            per_split = n_cols // split // block_n * block_n if split > 1 else n_cols
            split = triton.cdiv(n_cols, per_split)
            target = torch.empty((split, n_rows), device="cuda", dtype=torch.float32)
            gb = lambda ms: x.numel() * x.element_size() / ms * 1e-6
            tc = torch.compile(lambda t: t.sum(1), dynamic=False)
            res = dict(kind="split rows", dtype=str(dtype)[6:], n=n_cols, split=split,
                       torch_compile=round(gb(bench(lambda: tc(x)))))
            for evict in ("", "evict_first"):
                res[evict or "none"] = round(gb(bench(lambda: split_row_sum_kernel[(n_blocks, split)](
                    x, target, n_rows, n_cols, *x.stride(), per_split, BLOCK_M=block_m, BLOCK_N=block_n, EVICT=evict,
                    num_warps=8))))
            print(json.dumps(res), flush=True)

if __name__ == "__main__":
    main()
