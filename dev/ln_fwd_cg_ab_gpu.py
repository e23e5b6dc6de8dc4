"""Dev only: A/B of the layer-norm fused forward with x loaded past L1 (.cg, the page) and without
(plain), through the page's launcher, interleaved five times; kernel-only, graph-timed, % of an eager
copy. The "plain" page is the tutorial's text with the cache modifier removed, written to /tmp.

PYTHONUNBUFFERED=1 python3 dev/ln_fwd_cg_ab_gpu.py
"""
import torch
import triton
from gpu_common import load, bench

torch.cuda.set_stream(torch.cuda.Stream())
src = open("tutorials/02_layer_norm.py").read()
marker = 'other=0.0, cache_modifier=".cg").to(tl.float32)\n        mean = tl.sum(x, axis=1) / n_cols'
assert src.count(marker) == 1
with open("/tmp/ln02_plain.py", "w") as f:
    f.write(src.replace(marker, 'other=0.0).to(tl.float32)\n        mean = tl.sum(x, axis=1) / n_cols'))
pages = {"cg": load("tutorials/02_layer_norm.py"), "plain": load("/tmp/ln02_plain.py")}
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
for dtype, n in ((torch.bfloat16, 4096), (torch.bfloat16, 8192), (torch.bfloat16, 16384), (torch.bfloat16, 32768),
                 (torch.float32, 16384), (torch.float32, 32768)):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
    y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    nb = x.numel() * x.element_size()
    out = torch.empty_like(x)
    res = {"cg": [], "plain": []}
    for rep in range(5):
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        for name, page in pages.items():
            t = bench(lambda: page["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
            res[name].append(100 * 2 * nb / t * 1e-6 / copy)
    print(str(dtype)[6:], n, " | ".join(f"{k} " + " ".join(f"{v:.1f}" for v in vals) for k, vals in res.items()),
          flush=True)
    del x, y, out
    torch.cuda.empty_cache()
