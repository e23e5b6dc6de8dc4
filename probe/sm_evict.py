"""Probe: 01's softmax kernels at the page's launch, with and without evict_first on their loads, beside torch.compile."""
import json, torch, triton, triton.language as tl

@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :],
                mask=col_ok, other=-float("inf"), eviction_policy=EVICT).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator * (1.0 / tl.sum(numerator, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

@triton.jit
def softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok, other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok, other=0.0,
                 eviction_policy=EVICT).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

torch.cuda.set_stream(torch.cuda.Stream())
torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
P = torch.cuda.get_device_properties(0)
BPT = max(16, triton.next_power_of_2(int(2 * P.memory_clock_rate * 1e3 * P.memory_bus_width / 8 * 1e-6
                                         / P.multi_processor_count / (P.max_threads_per_multi_processor // 2))))

def config(n, size):
    block_n = triton.next_power_of_2(n)
    block_m = max(1, 4096 // block_n)
    return block_m, block_n, min(32, max(4, block_m * block_n * size // (32 * BPT)))

def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median")

print("bytes a thread", BPT)
for dtype in (torch.bfloat16, torch.float32):
    for n in (256, 1024, 4096, 8192, 16384):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        gb = lambda ms, k=2: k * x.numel() * x.element_size() / ms * 1e-6
        tc = torch.compile(lambda t: torch.softmax(t, -1), dynamic=False)
        bm, bn, w = config(n, x.element_size())
        res = dict(dtype=str(dtype)[6:], n=n, fwd_tc=round(gb(bench(lambda: tc(x)))))
        for ev in ("", "evict_first"):
            res[f"fwd_{ev or 'none'}"] = round(gb(bench(lambda: softmax_fwd_kernel[(triton.cdiv(len(x), bm),)](
                x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_N=bn, EVICT=ev, num_warps=w))))
        yv, dy, dx = torch.softmax(x.float(), -1).to(dtype), torch.randn_like(x), torch.empty_like(x)
        tcb = torch.compile(lambda a, b: torch._softmax_backward_data(b, a, -1, a.dtype), dynamic=False)
        res["bwd_tc"] = round(gb(bench(lambda: tcb(yv, dy)), 3))
        bm, bn, w = config(n, 4)
        for ev in ("", "evict_first"):
            res[f"bwd_{ev or 'none'}"] = round(gb(bench(lambda: softmax_bwd_kernel[(triton.cdiv(len(x), bm),)](
                yv, dy, dx, *x.shape, yv.stride(0), dy.stride(0), dx.stride(0), BLOCK_M=bm, BLOCK_N=bn, EVICT=ev,
                num_warps=w)), 3))
        print(json.dumps(res), flush=True)
