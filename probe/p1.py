# GPU probe: 03's one-launch sum at small n (launch bound), 01's backward bf16 warps at 8-16 K
import sys, torch, triton, triton.language as tl
torch.cuda.set_stream(torch.cuda.Stream())
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, SMS, flush=True)

def bench(fn):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=25, return_mode="median")

@triton.jit
def sum_kernel(x_ptr, partials_ptr, ticket_ptr, out_ptr, n, BLOCK: tl.constexpr, PARTIALS: tl.constexpr,
               SPLIT: tl.constexpr):
    pid, n_programs = tl.program_id(0), tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for block in tl.range(pid, tl.cdiv(n, BLOCK), n_programs):
        offs = tl.cast(block, tl.int64) * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        acc += x.to(tl.float32)
    tl.store(partials_ptr + pid, tl.sum(acc, axis=0))
    if SPLIT:
        last = tl.atomic_add(ticket_ptr, 1, sem="release") == n_programs - 1
    else:
        last = tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_programs - 1
    if last:
        if SPLIT:
            tl.atomic_add(ticket_ptr, 0, sem="acquire")
        p = tl.arange(0, PARTIALS)
        total = tl.sum(tl.load(partials_ptr + p, mask=p < n_programs, other=0.0, volatile=True), axis=0)
        tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(ticket_ptr, 0)

ticket = torch.zeros(1, dtype=torch.int32, device="cuda")
for dtype in (torch.bfloat16, torch.float32):
    for n in (2**20, 2**24):
        x = torch.randn(n, device="cuda", dtype=dtype)
        out = torch.empty(1, device="cuda")
        ref = x.double().sum().item()
        comp = torch.compile(lambda t: t.sum(), dynamic=False)
        t_c = bench(lambda: comp(x)); t_t = bench(lambda: torch.sum(x))
        res = []
        for block in (2048, 4096, 8192):
            for warps in (4, 8, 16):
                if block // (32 * warps) < 4 or block // (32 * warps) > 32:
                    continue
                for per_sm in (1, 2, 4):
                    for split in (0, 1):
                        grid = min(triton.cdiv(n, block), per_sm * SMS)
                        partials = torch.empty(grid, device="cuda")
                        f = lambda: sum_kernel[(grid,)](x, partials, ticket, out, n, BLOCK=block,
                                                        PARTIALS=triton.next_power_of_2(grid), SPLIT=split,
                                                        num_warps=warps)
                        f(); torch.cuda.synchronize()
                        assert abs(out.item() - ref) <= 1e-3 * abs(x.float()).sum().item() ** 0.5 + 1e-2, (out.item(), ref)
                        res.append((bench(f) * 1e3, block, warps, per_sm, split))
        res.sort()
        cur = [r for r in res if r[1:] == (4096, 16, 4, 0)][0][0]
        print(f"{str(dtype)[6:]} n={n}: compile {t_c*1e3:.2f} us torch {t_t*1e3:.2f} current {cur:.2f}; best: " +
              "; ".join(f"{t:.2f} B{b} w{w} p{p} s{s}" for t, b, w, p, s in res[:6]), flush=True)

@triton.jit
def softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=col_ok, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=col_ok, other=0.0,
                 eviction_policy="evict_last").to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok)

for dtype in (torch.bfloat16, torch.float32):
    for n_cols in (4096, 8192, 16384):
        m = 2**26 // n_cols
        y = torch.softmax(torch.randn(m, n_cols, device="cuda"), -1).to(dtype)
        dy = torch.randn(m, n_cols, device="cuda", dtype=dtype); dx = torch.empty_like(y)
        comp = torch.compile(lambda y, dy: torch._softmax_backward_data(dy, y, -1, y.dtype), dynamic=False)
        gb = 3 * y.numel() * y.element_size() * 1e-9
        line = [f"compile {gb / bench(lambda: comp(y, dy)) * 1e3:.0f}"]
        for warps in (4, 8, 16, 32):
            f = lambda: softmax_bwd_kernel[(m,)](y, dy, dx, m, n_cols, n_cols, n_cols, n_cols, BLOCK_M=1,
                                                 BLOCK_N=n_cols, num_warps=warps)
            line.append(f"w{warps} {gb / bench(f) * 1e3:.0f}")
        line.append(f"copy {2 * y.numel() * y.element_size() * 1e-9 / bench(lambda: dx.copy_(y)) * 1e3:.0f}")
        print(f"bwd {str(dtype)[6:]} N={n_cols} GB/s: " + "  ".join(line), flush=True)
