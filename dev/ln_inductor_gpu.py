"""Dev only: what torch.compile (Inductor) generates for F.layer_norm's forward at the widest fused
rows, the config its autotuner picks, and its time next to the page's forward (graph-timed, % of an
eager copy). Writes the generated kernels to $OUT/inductor_*.py.

PYTHONUNBUFFERED=1 python3 dev/ln_inductor_gpu.py
"""
import gc
import os

import torch
import torch.nn.functional as F
import triton
from gpu_common import load, bench

OUT = os.environ.get("OUT", "/tmp")
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
from torch._inductor.utils import run_and_get_code
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

for dtype, n in [(torch.float32, 32768), (torch.bfloat16, 32768), (torch.bfloat16, 16384), (torch.float32, 16384)]:
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    f = torch.compile(lambda x, w, b: F.layer_norm(x, (n,), w, b))
    _, codes = run_and_get_code(f, x, w, b)
    tag = f"{str(dtype)[6:]}_{n}"
    with open(f"{OUT}/inductor_{tag}.py", "w") as fh:
        fh.write("\n\n#######\n".join(codes))
    for obj in gc.get_objects():
        try:
            if type(obj) is CachingAutotuner or isinstance(obj, CachingAutotuner):
                print(tag, obj.fn.__name__, [str(l.config) for l in obj.launchers], flush=True)
        except Exception:
            pass
    out = torch.empty_like(x)
    copy = 2 * x.numel() * x.element_size() / bench(lambda: out.copy_(x), graph=False) * 1e-6
    mean = torch.empty(m, device="cuda", dtype=torch.float32)
    rstd = torch.empty_like(mean)
    y = torch.empty_like(x)
    res = {}
    for rep in range(3):
        res.setdefault("inductor", []).append(2 * x.numel() * x.element_size() / bench(lambda: f(x, w, b)) * 1e-6 / copy * 100)
        res.setdefault("page", []).append(2 * x.numel() * x.element_size() / bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)) * 1e-6 / copy * 100)
        res.setdefault("chunked", []).append(2 * x.numel() * x.element_size() / bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, max_fused_n=0, split={})) * 1e-6 / copy * 100)
    print(tag, f"copy {copy:.0f}", {k: " ".join(f"{v:.1f}" for v in vs) for k, vs in res.items()}, flush=True)
    del x, y, out, f
    gc.collect(); torch.cuda.empty_cache()
