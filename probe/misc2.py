"""Probe: softmax (01) launches at its weakest points, with and without masks; the whole sum with evict_first."""
import json, torch, triton, triton.language as tl

@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr, EXP2: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    if EVEN:
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :]).to(tl.float32)
    else:
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok, other=-float("inf")).to(tl.float32)
    if EXP2:
        numerator = tl.exp2((x - tl.max(x, axis=1)[:, None]) * 1.4426950408889634)
    else:
        numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator * (1.0 / tl.sum(numerator, axis=1))[:, None]
    if EVEN:
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok)

@triton.jit
def softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    if EVEN:
        y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :]).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :]).to(tl.float32)
    else:
        y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

@triton.jit
def sum_kernel(x_ptr, partials_ptr, ticket_ptr, out_ptr, n, BLOCK: tl.constexpr, PARTIALS: tl.constexpr,
               STAGES: tl.constexpr, EVICT: tl.constexpr):
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs, num_stages=STAGES):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy=EVICT)
        acc += x.to(tl.float32)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_programs - 1:
        p = tl.arange(0, PARTIALS)
        total = tl.sum(tl.load(partials_ptr + p, mask=p < n_programs, other=0.0, volatile=True), axis=0)
        tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(ticket_ptr, 0)

torch.cuda.set_stream(torch.cuda.Stream())
SMS = torch.cuda.get_device_properties(0).multi_processor_count
torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024

def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if not graph:
        return triton.testing.do_bench(fn, warmup=5, rep=15, return_mode="median")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median")

def softmax_probe():
    for dtype, n in ((torch.bfloat16, 16384), (torch.bfloat16, 1024), (torch.float32, 512), (torch.bfloat16, 8192)):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        gb = lambda ms: 2 * x.numel() * x.element_size() / ms * 1e-6
        ref = torch.softmax(x.float(), -1)
        tc = torch.compile(lambda t: torch.softmax(t, -1), dynamic=False)
        res = dict(kind="softmax fwd", dtype=str(dtype)[6:], n=n, copy=round(gb(bench(lambda: y.copy_(x), False))),
                   torch_compile=round(gb(bench(lambda: tc(x)))))
        for block_m in sorted({max(1, 4096 // n), max(1, 8192 // n)}):
            for warps in (4, 8, 16, 32):
                if block_m * n // (32 * warps) < 4 or block_m * n // (32 * warps) > 64:
                    continue
                for even in (False, True):
                    for exp2 in (False, True):
                        f = lambda: softmax_fwd_kernel[(triton.cdiv(len(x), block_m),)](
                            x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_M=block_m, BLOCK_N=n, EVEN=even, EXP2=exp2,
                            num_warps=warps)
                        ms = bench(f)
                        torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
                        res[f"m{block_m}_w{warps}_e{int(even)}_x{int(exp2)}"] = round(gb(ms))
        res["best"] = sorted(((v, k) for k, v in res.items() if k[:1] == "m"), reverse=True)[:6]
        print(json.dumps(res), flush=True)
    for dtype, n in ((torch.bfloat16, 16384), (torch.bfloat16, 2048), (torch.bfloat16, 4096)):
        yv = torch.softmax(torch.randn(2**26 // n, n, device="cuda"), -1).to(dtype)
        dy = torch.randn_like(yv)
        dx = torch.empty_like(yv)
        gb = lambda ms: 3 * yv.numel() * yv.element_size() / ms * 1e-6
        tc = torch.compile(lambda a, b: torch._softmax_backward_data(b, a, -1, a.dtype), dynamic=False)
        res = dict(kind="softmax bwd", dtype=str(dtype)[6:], n=n, torch_compile=round(gb(bench(lambda: tc(yv, dy)))))
        for block_m in sorted({max(1, 4096 // n), max(1, 8192 // n)}):
            for warps in (8, 16, 32):
                if block_m * n // (32 * warps) < 4:
                    continue
                for even in (False, True):
                    f = lambda: softmax_bwd_kernel[(triton.cdiv(len(yv), block_m),)](
                        yv, dy, dx, *yv.shape, yv.stride(0), dy.stride(0), dx.stride(0), BLOCK_M=block_m, BLOCK_N=n,
                        EVEN=even, num_warps=warps)
                    res[f"m{block_m}_w{warps}_e{int(even)}"] = round(gb(bench(f)))
        res["best"] = sorted(((v, k) for k, v in res.items() if k[:1] == "m"), reverse=True)[:6]
        print(json.dumps(res), flush=True)

def sum_probe():
    for dtype in (torch.bfloat16, torch.float32):
        for n in (2**20, 2**24, 2**26):
            x = torch.randn(n, device="cuda", dtype=dtype)
            out = torch.empty(1, device="cuda", dtype=dtype)
            ticket = torch.zeros(1, device="cuda", dtype=torch.int32)
            gb = lambda ms: x.numel() * x.element_size() / ms * 1e-6
            tc = torch.compile(lambda t: t.sum(), dynamic=False)
            res = dict(kind="all", dtype=str(dtype)[6:], n=n, torch_compile=round(gb(bench(lambda: tc(x)))))
            for block, warps in ((4096, 16), (4096, 8), (4096, 4), (8192, 8)):
                for per_sm in (2, 4):
                    for stages in (1, 3):
                        for evict in ("", "evict_first"):
                            grid = min(triton.cdiv(n, block), per_sm * SMS)
                            partials = torch.empty(grid, device="cuda", dtype=torch.float32)
                            f = lambda: sum_kernel[(grid,)](x, partials, ticket, out, n, BLOCK=block,
                                                            PARTIALS=triton.next_power_of_2(grid), STAGES=stages,
                                                            EVICT=evict, num_warps=warps)
                            res[f"b{block}_w{warps}_p{per_sm}_s{stages}_{evict[:3]}"] = round(gb(bench(f)))
            res["best"] = sorted(((v, k) for k, v in res.items() if k[:1] == "b"), reverse=True)[:6]
            print(json.dumps(res), flush=True)

if __name__ == "__main__":
    softmax_probe()
    sum_probe()
