# Session 27 probe (H100): run from the repository root. Kept in history only (DESIGN.md names the commit).
"""61's kernel in variants (bf16 is the gap: fp32 reads 91-93% of a copy, bf16 62-75%), beside deep dive 11's
softmax forward (the same split, 94% in its page) as the harness's control. python3 ce61v.py (from probe/wt06)"""
import sys, itertools, time
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl
import torch.nn.functional as F
path = "tutorials/deep_dives/61_cross_entropy_split_rows.py"
g = {"__name__": "probe61", "__file__": path}
exec(compile(untimed_source(open(path).read()), path, "exec"), g)
p11 = "tutorials/deep_dives/11_softmax_long_rows.py"
g11 = {"__name__": "probe11", "__file__": p11}
exec(compile(untimed_source(open(p11).read()), p11, "exec"), g11)
slice_word, row_statistics = g["slice_word"], g["row_statistics"]

@triton.jit
def kvar(x_ptr, target_ptr, consts_ptr, flags_ptr, loss_ptr, dx_ptr, n_rows, n_cols, x_row_stride, dx_row_stride,
         ignore_index, SLICES: tl.constexpr, SLOTS: tl.constexpr, BLOCK_N: tl.constexpr,
         XT: tl.constexpr, FIX: tl.constexpr, EXP2: tl.constexpr):
    pid = tl.program_id(0)
    group, part = pid // SLICES, pid % SLICES
    n_groups = tl.num_programs(0) // SLICES
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    slots = tl.arange(0, SLOTS)
    in_group = slots < SLICES
    EMPTY: tl.constexpr = -36028797018963968
    scale = tl.load(consts_ptr)
    x_next = tl.load(x_ptr + tl.cast(group, tl.int64) * x_row_stride + cols,
                     mask=cols < tl.where(group < n_rows, n_cols, 0), other=-float("inf"))
    t_next = tl.load(target_ptr + group, mask=group < n_rows, other=ignore_index)
    for row in tl.range(group, n_rows, n_groups):
        x, target = x_next.to(tl.float32), t_next
        next_row = row + n_groups
        x_next = tl.load(x_ptr + tl.cast(next_row, tl.int64) * x_row_stride + cols,
                         mask=cols < tl.where(next_row < n_rows, n_cols, 0), other=-float("inf"))
        t_next = tl.load(target_ptr + next_row, mask=next_row < n_rows, other=ignore_index)
        ignored = target == ignore_index
        bad = ((target < 0) | (target >= n_cols)) & ~ignored
        target = tl.minimum(tl.maximum(target, 0), n_cols - 1)
        mine = (target >= part * BLOCK_N) & (target < part * BLOCK_N + BLOCK_N)
        if XT:
            x_t = tl.load(x_ptr + tl.cast(row, tl.int64) * x_row_stride + target, mask=mine, other=0.0).to(tl.float32)
        if EXP2:
            m = tl.max(x, axis=0)
            ms = tl.where(m == -float("inf"), 0.0, m) * 1.4426950408889634
            e = tl.exp2(x * 1.4426950408889634 - ms)
            m_bits = tl.where(m != m, 0x7FC00000, m.to(tl.int32, bitcast=True))
            word = (m_bits.to(tl.int64) << 32) | (tl.sum(e, axis=0).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
        else:
            m, e, word = slice_word(x)
        if not XT:
            x_t = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
        tl.atomic_xchg(flags_ptr + row * SLICES + part, word, sem="relaxed")
        words = tl.load(flags_ptr + row * SLICES + slots, mask=in_group, other=EMPTY, volatile=True)
        while tl.max((words == -1).to(tl.int32), axis=0) > 0:
            words = tl.load(flags_ptr + row * SLICES + slots, mask=in_group, other=EMPTY, volatile=True)
        stale = words == -1
        words = tl.where(stale, tl.load(flags_ptr + row * SLICES + slots, mask=stale & in_group, other=EMPTY,
                                        volatile=True), words)
        lse, to_p = row_statistics(words, m)
        row_scale = tl.where(ignored, 0.0, tl.where(bad, float("nan"), scale))
        dx_row = dx_ptr + tl.cast(row, tl.int64) * dx_row_stride
        if FIX:
            tl.store(dx_row + cols, (e * (row_scale * to_p)).to(dx_ptr.dtype.element_ty), mask=cols < n_cols)
            tl.debug_barrier()
            tl.store(dx_row + target, (row_scale * (tl.exp(x_t - lse) - 1.0)).to(dx_ptr.dtype.element_ty), mask=mine)
        else:
            dx = row_scale * (e * to_p - tl.where(cols == target, 1.0, 0.0))
            tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols)
        loss = lse - x_t
        tl.store(loss_ptr + row, tl.where(ignored, 0.0, tl.where(bad, float("nan"), loss)), mask=mine)

torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn):
    fn(); torch.cuda.synchronize()
    with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(c.replay, warmup=5, rep=25, return_mode="median")
NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
def run_var(x, t, dx, losses, consts, flags_all, slice_n, warps, XT, FIX, EXP2):
    n_rows, V = x.shape
    slices = triton.cdiv(V, slice_n)
    meta = dict(SLICES=slices, SLOTS=triton.next_power_of_2(slices), BLOCK_N=triton.next_power_of_2(triton.cdiv(V, slices)),
                num_warps=warps, XT=XT, FIX=FIX, EXP2=EXP2)
    flags = flags_all[: n_rows * slices]
    args = (x, t, consts, flags, losses, dx, n_rows, V, V, V, -100)
    groups = g["programs_per_sm"](kvar, args, meta) * NUM_SMS // slices
    groups = triton.cdiv(n_rows, triton.cdiv(n_rows, groups))
    def f():
        flags.fill_(-1)
        kvar[(groups * slices,)](*args, **meta)
    return f
t0 = time.time()
VARS = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 0, 1)]
for dtype, V in [(torch.bfloat16, 32000), (torch.bfloat16, 128256), (torch.bfloat16, 262144), (torch.float32, 128256)]:
    total = 2**30 if dtype == torch.bfloat16 else 2**29
    x = torch.randn(total // V, V, device="cuda", dtype=dtype); t = torch.randint(0, V, (x.shape[0],), device="cuda")
    dx, out = torch.empty_like(x), torch.empty_like(x)
    losses = torch.empty(x.shape[0], device="cuda"); consts = torch.tensor([1.0 / x.shape[0], float(V)], device="cuda")
    flags_all = torch.full((x.shape[0] * 256,), -1, dtype=torch.int64, device="cuda")
    nbytes = x.numel() * x.element_size()
    light = 2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25, return_mode="median") * 1e-6
    pct = lambda f: 100 * 2 * nbytes / bench(f) * 1e-6 / light
    # control: deep dive 11's softmax forward at its own launch
    kern, grid, args, meta = g11["launch"]("forward", (x, out))
    def f11():
        if "SLICES" in meta:
            args[2].fill_(-1)
        kern[(grid,)](*args, **meta)
    line = f"{str(dtype)[6:]:8s} V {V:6d} copy {light:.0f} | 11fwd {pct(f11):.1f} {meta}"
    xr = x[:16].double().requires_grad_(); lr = F.cross_entropy(xr, t[:16], reduction="sum"); lr.backward()
    print(line, flush=True)
    for slice_n, warps in [(2048, 2), (4096, 4), (8192, 4), (4096, 2), (16384, 8)]:
        line = f"   s{slice_n // 1024}K w{warps}:"
        for v in VARS:
            try:
                f = run_var(x, t, dx, losses, consts, flags_all, slice_n, warps, *v)
                f(); torch.cuda.synchronize()
                errl = (losses[:16].double().sum() - lr.detach()).abs().item() / lr.abs().item()
                errd = (dx[:16].double() * x.shape[0] - xr.grad).abs().max().item()
                p = pct(f)
                line += f" {''.join(map(str, v))} {p:.1f}{' ERR %.1e/%.1e' % (errl, errd) if errl > 1e-3 or errd > 2e-2 else ''}"
            except Exception as e:
                line += f" {''.join(map(str, v))} {type(e).__name__}: {str(e)[:60]}"
        print(line, flush=True)
    del x, dx, out, flags_all
    torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
