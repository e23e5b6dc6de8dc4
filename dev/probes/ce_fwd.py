"""06's forward alone (the loss, no gradient): chunk, warps, programs an SM and stages around the page's config."""
import json, os, pathlib, sys, time
import torch, triton
sys.path.insert(0, "tests")
import conftest  # noqa: E402
OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
csv = open(OUT / "ce_fwd.jsonl", "a")
def emit(**r):
    print(json.dumps(r), flush=True); csv.write(json.dumps(r) + "\n"); csv.flush()
def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
P = conftest.load_page(pathlib.Path("tutorials/06_cross_entropy.py"))
k, cfg, SMS, WPS = P["cross_entropy_kernel"], P["_config"], P["NUM_SMS"], P["WARPS_PER_SM"]
T0 = time.time()
for dtype, v in ((torch.bfloat16, 32000), (torch.bfloat16, 50304), (torch.float32, 151936), (torch.bfloat16, 128256),
                 (torch.float32, 32000), (torch.bfloat16, 262144), (torch.float32, 262144)):
    x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // v, v, device="cuda", dtype=dtype)
    t = torch.randint(0, v, (len(x),), device="cuda")
    w, losses = torch.ones(v, device="cuda"), torch.empty(len(x), device="cuda")
    scale = torch.ones((), device="cuda")
    nb = x.numel() * x.element_size()
    y = torch.empty(2**27, device="cuda", dtype=torch.uint8); z = torch.empty_like(y)
    def run(meta, grid):
        return ms(lambda: k[(grid,)](x, t, w, scale, losses, x, len(x), v, x.stride(0), x.stride(0), -100, WRITE_GRAD=False, **meta))
    meta, grid = cfg(len(x), v, x.element_size(), grad=False)
    emit(dtype=str(dtype)[6:], V=v, v="page", meta={a: b for a, b in meta.items() if a in ("CHUNK", "num_warps", "STAGES")}, grid=grid, gbs=nb / run(meta, grid) * 1e-6)
    for chunk in (() if os.environ.get("PAGE_ONLY") else (1024, 2048, 4096, 8192)):
        for nw in (2, 4, 8, 16):
            per_thread = chunk * x.element_size() // (32 * nw)
            if per_thread < 16 or per_thread > 128:
                continue
            for per_sm in sorted({WPS // nw, max(1, WPS // nw // 2)}):
                for stages in (1, 2, 3):
                    if per_sm * (stages - 1) * chunk * x.element_size() > 227 * 1024:
                        continue
                    m = dict(meta, CHUNK=chunk, num_warps=nw, STAGES=stages)
                    try:
                        emit(dtype=str(dtype)[6:], V=v, chunk=chunk, warps=nw, per_sm=per_sm, stages=stages,
                             gbs=nb / run(m, min(len(x), per_sm * SMS)) * 1e-6)
                    except Exception as e:
                        emit(dtype=str(dtype)[6:], V=v, chunk=chunk, warps=nw, per_sm=per_sm, stages=stages, error=str(e)[:150])
    emit(t=time.time() - T0)
    if time.time() - T0 > 200:
        break
