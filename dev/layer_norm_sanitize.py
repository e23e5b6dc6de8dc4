"""Scratch: small calls of both backward designs, for compute-sanitizer (not part of the site)."""
import torch

import importlib.util
src = open("tutorials/02_layer_norm.py").read()
with open("/tmp/ln02_head_san.py", "w") as f:  # Triton's JIT wants its kernels in a real file
    f.write(src.split("# %%\n# Correctness\n")[0])
spec = importlib.util.spec_from_file_location("ln02_head_san", "/tmp/ln02_head_san.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
g = mod.__dict__  # live globals: changing a knob here changes what the functions see
for n in (300, 20000):
    x = torch.randn(64, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for fn in (g["layer_norm"], g["layer_norm_classic"]):
        try:
            y = fn(x, (n,), w, b)
            torch.autograd.grad(y, (x, w, b), torch.randn_like(y))
        except ValueError as e:
            print("skipped:", e)
torch.cuda.synchronize()
print("sanitize script done")
