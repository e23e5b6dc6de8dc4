# 06's loss and gradient at V <= 65536: the page's two-pass kernel (its _config) against a whole row in registers
# (one program a row, Helion's tuned shape at fp32 50304), bf16 and fp32, beside a copy. GB/s = (read x + write dx).
import math, re, pathlib, sys, torch, triton, triton.language as tl
PAGE = pathlib.Path("tutorials/06_cross_entropy_backward.py")
src = PAGE.read_text()
ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
start = src.index("props = torch.cuda.get_device_properties")
body = "\n" * src.count("\n", 0, start) + src[start:src.index("def cross_entropy_rows")]  # the page's line numbers:
exec(compile(body, str(PAGE), "exec"))  # Triton reads a kernel's source from its file
if not ON_GPU:  # python3 probe/p3.py on a CPU (TRITON_INTERPRET=1): the page's config and kernel load; nothing timed
    print(_config(64, 50304, 4), cross_entropy_kernel.fn.__name__); sys.exit()
LOG2E = 1.4426950408889634

@triton.jit
def whole_row_kernel(x_ptr, target_ptr, scale_ptr, loss_ptr, dx_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    LOG2E: tl.constexpr = 1.4426950408889634
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
        m = tl.max(x, axis=0)
        e = tl.exp2((x - m) * LOG2E)
        s = tl.sum(e, axis=0)
        t = tl.load(target_ptr + row)
        x_t = tl.load(x_row + t).to(tl.float32)
        tl.store(loss_ptr + row, m + tl.log(s) - x_t)
        scale = tl.load(scale_ptr)
        dx = tl.where(cols == t, e * (scale / s) - scale, e * (scale / s))
        tl.store(dx_ptr + tl.cast(row, tl.int64) * stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols,
                 cache_modifier=".cs")

def bench(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")

TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29}
for dtype in (torch.float32, torch.bfloat16):
    for V in (32000, 50304):
        x = torch.randn((TOTAL[dtype] // V, V), device=DEVICE, dtype=dtype)
        M = x.shape[0]
        target = torch.randint(0, V, (M,), device=DEVICE)
        w = torch.ones(V, device=DEVICE); scale = torch.full((), 1.0 / M, device=DEVICE)
        loss, dx, out = torch.empty(M, device=DEVICE), torch.empty_like(x), torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        copy = max(nbytes / bench(lambda: out.copy_(x)) * 1e-6 for _ in range(2))
        res = {}
        meta, grid = _config(M, V, x.element_size())
        res["page"] = bench(lambda: cross_entropy_kernel[(grid,)](x, target, w, scale, loss, dx, M, V, x.stride(0),
                                   dx.stride(0), -100, WRITE_GRAD=True, **meta))
        ref_dx = dx.float().clone()
        B = triton.next_power_of_2(V)
        for warps in (16, 32):
            for per_sm in (0, 1, 2):
                g = M if per_sm == 0 else per_sm * NUM_SMS
                name = f"row w{warps} " + ("grid M" if per_sm == 0 else f"{per_sm}/SM")
                try:
                    k = lambda: whole_row_kernel[(g,)](x, target, scale, loss, dx, M, V, x.stride(0), BLOCK=B,
                                                       num_warps=warps)
                    res[name] = bench(k)
                    err = (dx.float() - ref_dx).abs().max().item()
                    c = whole_row_kernel.warmup(x, target, scale, loss, dx, M, V, x.stride(0), BLOCK=B,
                                                num_warps=warps, grid=(g,))
                    name_extra = f" regs {c.n_regs} spills {c.n_spills} err {err:.1e}"
                except Exception as e:
                    res[name] = float("nan"); name_extra = f" {type(e).__name__}: {str(e)[:80]}"
                print(f"  {name}{name_extra}", flush=True)
        print(f"{str(dtype)[6:]} V={V} M={M} copy {copy:.0f} GB/s; page meta {meta} grid {grid}")
        for k, ms in res.items():
            print(f"  {k:22s} {nbytes / ms * 1e-6:7.0f} GB/s  {100 * nbytes / ms * 1e-6 / copy:5.1f}% of copy")
        del x, dx, out
