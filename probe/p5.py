# Next GPU session: (1) 06's loss alone, the page's launch against the same with STAGES=1 and with 4 warps, 3 stages,
# 8 programs an SM (the p4 sweep's fp32 50304 best), every V of the page, bf16 and fp32; (2) 02 backward, fp32 and bf16
# 4096 / 8192: the page's config (64 KB tiles unstaged) against 2 and 3 stages and 16 warps.
# GPU: python3 probe/p5.py; CPU smoke test: TRITON_INTERPRET=1 python3 probe/p5.py --cpu
import pathlib, sys, time
CPU = "--cpu" in sys.argv
import torch, triton

ROOT, T0, DEV = pathlib.Path(__file__).resolve().parents[1], time.time(), "cpu" if "--cpu" in sys.argv else "cuda"

def page(stem):  # the page's cells up to its timer
    path = next(ROOT.glob(f"tutorials/**/{stem}.py"))
    src = path.read_text()
    timer = src.find("\ndef bench(")
    src = src[: src.rindex("# %%\n", 0, timer)] if timer >= 0 else src
    ns = {"__name__": "page"}
    exec(compile(src, str(path), "exec"), ns)
    return ns

def t(fn):  # us
    if CPU:
        fn()
        return 1.0
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3

def line(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

ns = page("06_cross_entropy")
k, sms = ns["loss_kernel"], ns["NUM_SMS"]
for dtype in (torch.float32, torch.bfloat16):
    for v in ([1000] if CPU else [32000, 50304, 128256, 151936, 262144]):
        m = 8 if CPU else (2**30 if dtype == torch.bfloat16 else 2**29) // v
        x = torch.randn(m, v, device=DEV, dtype=dtype); target = torch.randint(0, v, (m,), device=DEV)
        loss, ref = torch.empty(m, device=DEV), torch.nn.functional.cross_entropy(x.float(), target, reduction="none")
        meta, grid = ns["loss_config"](m, v, x.element_size())
        out = torch.empty_like(x); copy = t(lambda: out.copy_(x)); del out
        res = {}
        for name, mt, g in [("page", meta, grid), ("page, STAGES=1", meta | dict(STAGES=1), grid),
                            ("4 warps, 3 stages, 8 an SM", dict(CHUNK=1024, num_warps=4, STAGES=3), min(m, 8 * sms)),
                            ("2048, 4 warps, 3 stages, 4 an SM", dict(CHUNK=2048, num_warps=4, STAGES=3), min(m, 4 * sms))]:
            fn = lambda: k[(g,)](x, target, loss, m, v, x.stride(0), **mt)
            fn()
            assert torch.allclose(loss, ref, rtol=1e-3, atol=1e-3), name
            res[name] = t(fn)
        line(f"ce_fwd {str(dtype)[6:]} V={v}: copy {copy:.1f} us; page {meta} grid {grid}")
        for name, us in res.items():
            line(f"   {name:34s} {us:8.1f} us {x.numel() * x.element_size() / us * 1e-3:6.0f} GB/s "
                 f"{res['page'] / us:.3f}x the page; {100 * 0.5 * copy / us:.1f}% of half a copy")
        del x
ns = page("02_layer_norm_backward")
k = ns["layer_norm_bwd_kernel"]
for dtype in (torch.float32, torch.bfloat16):
    for n in ([256] if CPU else [4096, 8192]):
        m = 64 if CPU else 2**26 // n
        x = torch.randn(m, n, device=DEV, dtype=dtype); dy = torch.randn_like(x); dx = torch.empty_like(x)
        w = torch.randn(n, device=DEV, dtype=dtype)
        mean, rstd = x.float().mean(1), torch.rsqrt(x.float().var(1, unbiased=False) + 1e-5)
        out = torch.empty_like(x); copy = t(lambda: out.copy_(x)); del out
        meta, lines = ns["_bwd_config"](m, n, x.element_size())
        res = {}
        for name, mt in [("page", meta), ("STAGES=2", meta | dict(STAGES=2)), ("STAGES=3", meta | dict(STAGES=3)),
                         ("16 warps, STAGES=3", meta | dict(STAGES=3, num_warps=16))]:
            parts = torch.empty((2, lines, n), device=DEV)
            fn = lambda: k[(lines,)](x, dy, dx, w, mean, rstd, parts[0], parts[1], m, n, x.stride(0), dy.stride(0),
                                     dx.stride(0), **mt)
            try:
                fn()
                res[name] = t(fn)
            except Exception as e:
                line(f"   {name}: {type(e).__name__} {str(e)[:80]}")
        line(f"ln_bwd {str(dtype)[6:]} N={n}: copy {copy:.1f} us; page {meta}, {lines} lines")
        for name, us in res.items():
            line(f"   {name:22s} {us:8.1f} us {100 * 1.5 * copy / us:5.1f}% of light {res['page'] / us:.3f}x the page")
        del x, dy, dx
line("done")
