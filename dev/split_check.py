"""Dev only: the split RMSNorm backward on the GPU: bitwise determinism over ten runs, and small calls
for compute-sanitizer. python3 dev/split_check.py [small]"""
import importlib.util
import sys

import torch

src = open("tutorials/04_rms_norm.py").read()
with open("/tmp/rms04_head.py", "w") as f:  # Triton's JIT wants its kernels in a real file
    f.write(src.split("# %%\n# Correctness\n")[0])
spec = importlib.util.spec_from_file_location("rms04_head", "/tmp/rms04_head.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
g = mod.__dict__
small = "small" in sys.argv
cases = [(torch.bfloat16, 9, 20000), (torch.float32, 5, 16384)] if small else \
    [(torch.bfloat16, 4096, 16384), (torch.bfloat16, 2048, 32768), (torch.float32, 4096, 16384),
     (torch.float32, 2048, 32768), (torch.bfloat16, 1001, 65536 + 17)]
for dtype, m, n in cases:
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    kernel, grid, meta = g["backward_launch"](m, n, x.element_size(), True, True, dtype=dtype)
    runs = [torch.autograd.grad(g["rms_norm"](x, (n,), w), (x, w), dy) for _ in range(2 if small else 10)]
    same = all(torch.equal(a, runs[0][0]) and torch.equal(b, runs[0][1]) for a, b in runs[1:])
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    ref = torch.autograd.grad(torch.nn.functional.rms_norm(x64, (n,), w64, torch.finfo(torch.float32).eps),
                              (x64, w64), dy.double())
    errs = [((a.double() - r).norm() / r.norm()).item() for a, r in zip(runs[0], ref)]
    print(f"{str(dtype)[6:]} {m}x{n}: {kernel.__name__} grid {grid} {meta}: bitwise identical over "
          f"{len(runs)} runs: {same}; rel err dx {errs[0]:.1e} dw {errs[1]:.1e}", flush=True)
torch.cuda.synchronize()
print("split check done")
