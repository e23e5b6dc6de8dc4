"""Launch sweeps of a few kernels at the points where the front page misses (H200). Prints one line a config."""
import os, sys, time, pathlib, itertools, json
import torch, triton
from triton.testing import do_bench

ROOT = pathlib.Path(__file__).resolve().parents[1]
WHICH = sys.argv[1:] or ["sum", "rms_bwd", "ln_fwd", "sm_bwd", "ln_bwd"]
T0 = time.time()

def page(stem):
    path = next(ROOT.glob(f"tutorials/**/{stem}.py"))
    src = path.read_text()
    timer = src.find("\ndef bench(")
    if timer >= 0:
        src = src[: src.rindex("# %%\n", 0, timer)]
    ns = {"__name__": "page"}
    exec(compile(src, str(path), "exec"), ns)
    return ns

def t(fn):
    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3  # us

def copy_us(x):
    y = torch.empty_like(x)
    return t(lambda: y.copy_(x))

def line(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

PROPS = torch.cuda.get_device_properties()
SMS = PROPS.multi_processor_count
line(torch.cuda.get_device_name(), SMS, "SMs")

if "sum" in WHICH:
    ns = page("03_sum_of_all_elements")
    k, tickets = ns["sum_kernel"], torch.zeros(1, dtype=torch.int32, device="cuda")
    for n, dtype in itertools.product([2**20, 2**24], [torch.float32, torch.bfloat16]):
        x = torch.randn(n, device="cuda", dtype=dtype)
        out = torch.empty(1, device="cuda", dtype=dtype)
        ref = t(lambda: torch.sum(x))
        g0, m0 = ns["_vector_config"](n, x.element_size())
        part = torch.empty(4096, device="cuda")
        cur = t(lambda: ns["sum_vector"](x, out))
        line(f"sum n={n} {dtype}: torch {ref:.2f} us, ours (sum_vector) {cur:.2f} us, config grid={g0} {m0}")
        res = []
        for block, warps, per_sm in itertools.product([1024, 2048, 4096, 8192], [4, 8, 16], [0.5, 1, 2, 4]):
            if block // (32 * warps) < 4: continue
            grid = max(1, min(triton.cdiv(n, block), int(per_sm * SMS)))
            for evict in ["evict_first", ""]:
                fn = lambda: k[(grid,)](x, part, tickets, out, n, BLOCK=block, PARTIALS=triton.next_power_of_2(grid),
                                       EVICT=evict, num_warps=warps)
                fn(); torch.cuda.synchronize()
                assert torch.allclose(out.float(), x.float().sum(), rtol=1e-2, atol=1e-1), "wrong sum"
                res.append((t(fn), block, warps, per_sm, grid, evict))
        res.sort()
        for r in res[:6]:
            line(f"   {r[0]:.2f} us ({ref / r[0]:.3f}x torch) BLOCK={r[1]} warps={r[2]} per_sm={r[3]} grid={r[4]} {r[5]!r}")

if "rms_bwd" in WHICH:
    ns = page("04_rms_norm_backward")
    k = ns["rms_norm_bwd_kernel"]
    for n, dtype in itertools.product([512, 1024, 8192], [torch.bfloat16, torch.float32]):
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype); dy = torch.randn_like(x); dx = torch.empty_like(x)
        w = torch.randn(n, device="cuda", dtype=dtype); rstd = torch.rand(m, device="cuda") + 0.5
        light = copy_us(x)
        kern, meta, grid = ns["_bwd_config"](m, n, x.element_size())
        cur = t(lambda: ns["rms_norm_rows_backward"](x, w, rstd, dy, dx))
        line(f"rms_bwd n={n} {dtype}: copy {light:.1f} us; ours {cur:.1f} us = {1.5 * light / cur:.1%} of light; {meta} grid {grid}")
        res = []
        for bm, warps, per_sm in itertools.product([1, 2, 4, 8, 16, 32], [2, 4, 8, 16, 32], [1, 2, 3, 4, 6, 8]):
            tile = bm * triton.next_power_of_2(n)
            if tile < 1024 or tile > 32768 or tile // (32 * warps) > 64 or tile // (32 * warps) < 2 or warps * per_sm > 64:
                continue
            g = max(1, min(triton.cdiv(m, bm), per_sm * SMS))
            part = torch.empty((g, n), device="cuda")
            fn = lambda: (k[(g,)](x, w, rstd, dy, dx, part, m, n, BLOCK_M=bm, BLOCK_N=triton.next_power_of_2(n),
                                  num_warps=warps), part.sum(0))
            try:
                fn(); torch.cuda.synchronize()
            except Exception as e:
                line("   fail", bm, warps, per_sm, type(e).__name__); continue
            res.append((t(fn), bm, warps, per_sm))
        res.sort()
        for r in res[:6]:
            line(f"   {r[0]:.1f} us ({1.5 * light / r[0]:.1%}) BLOCK_M={r[1]} warps={r[2]} per_sm={r[3]}")

if "ln_fwd" in WHICH:
    ns = page("02_layer_norm")
    k = ns["layer_norm_fwd_kernel"]
    for n, dtype in [(16384, torch.float32), (8192, torch.float32), (2048, torch.float32), (2048, torch.bfloat16)]:
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype); y = torch.empty_like(x)
        w = torch.randn(n, device="cuda", dtype=dtype); b = torch.randn_like(w)
        mean, rstd = torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
        light = copy_us(x)
        meta, grid = ns["_fwd_config"](m, n, x.element_size())
        cur = t(lambda: ns["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
        line(f"ln_fwd n={n} {dtype}: copy {light:.1f} us; ours {cur:.1f} us = {light / cur:.1%}; {meta}")
        res = []
        for bm, warps, evict in itertools.product([1, 2, 4, 8, 16], [2, 4, 8, 16, 32], ["evict_last", ""]):
            tile = bm * n
            if tile < 1024 or tile * x.element_size() > 65536 * 2 or tile // (32 * warps) > 64 or tile // (32 * warps) < 4:
                continue
            g = triton.cdiv(m, bm)
            fn = lambda: k[(g,)](x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5, BLOCK_M=bm, BLOCK_N=n,
                                 EVEN=True, EVICT=evict, num_warps=warps)
            res.append((t(fn), bm, warps, evict))
        res.sort()
        for r in res[:5]:
            line(f"   {r[0]:.1f} us ({light / r[0]:.1%}) BLOCK_M={r[1]} warps={r[2]} {r[3]!r}")

if "sm_bwd" in WHICH:
    ns = page("01_softmax_backward")
    k = ns["softmax_bwd_kernel"]
    comp = torch.compile(lambda y, dy: y * (dy - (y * dy).sum(-1, keepdim=True)))
    for n, dtype in [(16384, torch.bfloat16), (8192, torch.bfloat16), (16384, torch.float32)]:
        m = 2**26 // n
        y = torch.softmax(torch.randn(m, n, device="cuda"), -1).to(dtype); dy = torch.randn_like(y); dx = torch.empty_like(y)
        light = copy_us(y)
        cur = t(lambda: ns["softmax_rows_backward"](y, dy, dx))
        c = t(lambda: comp(y, dy))
        line(f"sm_bwd n={n} {dtype}: copy {light:.1f}; ours {cur:.1f} us = {1.5 * light / cur:.1%}; compiled {c:.1f}; {ns['_fused_config'](n, 4)}")
        res = []
        for bm, warps in itertools.product([1, 2, 4], [4, 8, 16, 32]):
            if bm * n // (32 * warps) > 128: continue
            fn = lambda: k[(triton.cdiv(m, bm),)](y, dy, dx, m, n, n, n, n, BLOCK_M=bm, BLOCK_N=n, num_warps=warps)
            res.append((t(fn), bm, warps))
        res.sort()
        for r in res[:4]:
            line(f"   {r[0]:.1f} us ({1.5 * light / r[0]:.1%}) BLOCK_M={r[1]} warps={r[2]}")

if "ln_bwd" in WHICH:
    ns = page("02_layer_norm_backward")
    for n, dtype in [(512, torch.bfloat16), (2048, torch.bfloat16), (8192, torch.bfloat16), (8192, torch.float32), (512, torch.float32)]:
        m = 2**26 // n
        x = torch.randn(m, n, device="cuda", dtype=dtype); dy = torch.randn_like(x); dx = torch.empty_like(x)
        w = torch.randn(n, device="cuda", dtype=dtype)
        mean, rstd = x.float().mean(1), torch.rsqrt(x.float().var(1) + 1e-5)
        dw, db = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
        light = copy_us(x)
        meta, lines = ns["_bwd_config"](m, n, x.element_size())
        cur = t(lambda: ns["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db))
        line(f"ln_bwd n={n} {dtype}: copy {light:.1f}; ours {cur:.1f} us = {1.5 * light / cur:.1%}; {meta} lines {lines}")
        res = []
        for per_sm, stages in itertools.product([1, 2, 3, 4], [1, 2, 3, 4, 6]):
            try:
                fn = lambda: ns["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, programs=per_sm * SMS, stages=stages)
                fn(); torch.cuda.synchronize()
            except Exception as e:
                line("   fail", per_sm, stages, type(e).__name__); continue
            res.append((t(fn), per_sm, stages))
        res.sort()
        for r in res[:5]:
            line(f"   {r[0]:.1f} us ({1.5 * light / r[0]:.1%}) programs/SM={r[1]} stages={r[2]}")
line("done")
