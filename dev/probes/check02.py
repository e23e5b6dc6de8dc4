import sys, pathlib, json, torch, triton
sys.path.insert(0, "tests")
import conftest
P = conftest.load_page(pathlib.Path("tutorials/02_layer_norm.py"))
for dtype, ns in ((torch.bfloat16, [512, 1024, 2048, 4096, 8192]), (torch.float32, [512, 2048, 8192, 16384])):
    for n in ns:
        x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device="cuda", dtype=dtype)
        y, w, b = torch.empty_like(x), torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        mean, rstd = torch.empty(len(x), device="cuda"), torch.empty(len(x), device="cuda")
        f = lambda: P["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        f(); torch.cuda.synchronize()
        t = triton.testing.do_bench(f, warmup=5, rep=25, return_mode="median")
        print(json.dumps(dict(dtype=str(dtype)[6:], N=n, gbs=round(2 * x.numel() * x.element_size() / t * 1e-6))))
