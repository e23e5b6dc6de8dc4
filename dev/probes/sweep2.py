"""Second sweep: the pages' own configs after the changes, and 02's forward warps."""
import os, sys, time, json, pathlib
import torch, triton
sys.path.insert(0, "probe")
sys.argv = ["x"]
os.environ["PROBE_SECTIONS"] = "props"
exec(open("probe/sweep.py").read().split("SECTIONS = {")[0])
CSV = open(OUT / "sweep2.csv", "a")


def t61():
    P = page("61_cross")
    for dtype in (torch.bfloat16, torch.float32):
        for v in (32000, 128256):
            x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // v, v, device=DEV, dtype=dtype)
            target = torch.randint(0, v, (len(x),), device=DEV)
            dx = torch.empty_like(x)
            xg = x.clone().requires_grad_(True)
            for name, f in {"split": lambda: P["ce_split_rows"](x, target, None, -100, True, dx),
                            "ours": lambda: torch.autograd.grad(P["cross_entropy"](xg, target), xg),
                            "ours_fwd": lambda: P["cross_entropy"](x, target)}.items():
                nb = (1 if name == "ours_fwd" else 2) * x.numel() * x.element_size()
                emit(section="61", dtype=str(dtype)[6:], V=v, name=name, gbs=nb / ms(f) * 1e-6)


def t06():
    P = page("06_cross")
    for dtype in (torch.bfloat16, torch.float32):
        for v in (32000, 50304, 128256, 151936, 262144):
            x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // v, v, device=DEV, dtype=dtype)
            target = torch.randint(0, v, (len(x),), device=DEV)
            xg = x.clone().requires_grad_(True)
            emit(section="06", dtype=str(dtype)[6:], V=v, name="fwd", gbs=x.numel() * x.element_size() / ms(lambda: P["cross_entropy"](x, target)) * 1e-6)
            emit(section="06", dtype=str(dtype)[6:], V=v, name="fwdbwd", gbs=2 * x.numel() * x.element_size() / ms(lambda: torch.autograd.grad(P["cross_entropy"](xg, target), xg)) * 1e-6)


def t04():
    P = page("04_rms_norm")
    for dtype in (torch.bfloat16, torch.float32):
        for n in (512, 1024, 2048, 4096, 8192):
            x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
            w, dy, dx = torch.randn(n, device=DEV, dtype=dtype), torch.randn_like(x), torch.empty_like(x)
            rstd = torch.rand(len(x), device=DEV) + 0.5
            emit(section="04bwd", dtype=str(dtype)[6:], N=n, gbs=3 * x.numel() * x.element_size() / ms(lambda: P["rms_norm_rows_backward"](x, w, rstd, dy, dx)) * 1e-6)


def t02():
    P = page("02_layer_norm")
    k = P["layer_norm_fwd_kernel"]
    for dtype, ns in ((torch.bfloat16, [512, 1024, 2048, 4096, 8192]), (torch.float32, [512, 1024, 2048, 4096, 8192, 16384])):
        for n in ns:
            x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
            y, w, b = torch.empty_like(x), torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
            mean, rstd = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
            nb = 2 * x.numel() * x.element_size()
            emit(section="02", dtype=str(dtype)[6:], N=n, variant="config", gbs=nb / ms(lambda: P["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)) * 1e-6)
            block_n = triton.next_power_of_2(n)
            for block_m in (1, 2, 4, 8):
                if block_m * block_n > 32768 or block_m * block_n < 2048:
                    continue
                for nw in (1, 2, 4, 8, 16, 32):
                    per_thread = block_m * block_n // (32 * nw)
                    if per_thread > 128 or per_thread < 4:
                        continue
                    f = lambda: k[(triton.cdiv(len(x), block_m),)](x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0), 1e-5, HAS_W=True, HAS_B=True, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=nw)
                    emit(section="02", dtype=str(dtype)[6:], N=n, BLOCK_M=block_m, warps=nw, per_thread=per_thread, gbs=nb / ms(f) * 1e-6)


for f in (props, t61, t06, t04, t02):
    t = time.time()
    try:
        f()
    except Exception:
        import traceback
        emit(section=f.__name__, error=traceback.format_exc()[-1500:])
    emit(section=f.__name__, seconds=time.time() - t, total=time.time() - T0)
