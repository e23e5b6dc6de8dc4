import sys, pathlib, json, torch, triton
sys.path.insert(0, "tests")
import conftest
P = conftest.load_page(pathlib.Path("tutorials/06_cross_entropy.py"))
config = P["_config"]
def ms(f):
    f(); torch.cuda.synchronize()
    return triton.testing.do_bench(f, warmup=5, rep=25, return_mode="median")
for dtype in (torch.bfloat16, torch.float32):
    for v in (32000, 128256):
        x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // v, v, device="cuda", dtype=dtype)
        t = torch.randint(0, v, (len(x),), device="cuda")
        dx = torch.empty_like(x)
        nb = 2 * x.numel() * x.element_size()
        P.data["_config"] = config
        for step in (1, 2):
            g = nb / ms(lambda: P["cross_entropy_rows"](x, t, None, -100, True, dx, step=step)) * 1e-6
            print(json.dumps(dict(dtype=str(dtype)[6:], V=v, step=step, variant="page", gbs=round(g))), flush=True)
        for per_sm in (1, 2, 4, 8, 16):
            for stages in (1, 2, 3):
                for chunk in (4096, 8192):
                    P.data["CHUNK_N"] = chunk
                    P.data["_config"] = lambda *a, per_sm=per_sm, stages=stages, **k: config(*a, **k, per_sm=per_sm, stages=stages)
                    try:
                        g = nb / ms(lambda: P["cross_entropy_rows"](x, t, None, -100, True, dx, step=2)) * 1e-6
                    except Exception as e:
                        g = -1
                    print(json.dumps(dict(dtype=str(dtype)[6:], V=v, per_sm=per_sm, stages=stages, chunk=chunk, gbs=round(g))), flush=True)
        P.data["CHUNK_N"] = 8192
P.data["_config"] = config
