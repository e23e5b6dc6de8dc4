"""Dev only: bf16 rows of 32768, why the page reads lower than the kernel alone. Times, interleaved in
rounds on the same tensors: the eager copy, the launcher on preallocated tensors, and the page's own
provider call (the drop-in function on an x that requires grad, as the sweep does), all graph-timed
like the pages; also after a warm-up burst of torch's softmax (the sweep runs peers first).

PYTHONUNBUFFERED=1 python3 dev/page_vs_kernel_gpu.py
"""
import torch
import triton
from gpu_common import load, bench

torch.cuda.set_stream(torch.cuda.Stream())
sm = load("tutorials/01_fused_softmax.py")
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
n = 32768
m = 2 ** 26 // n
for dtype in (torch.bfloat16, torch.float32):
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    xg = x.clone().requires_grad_(True)
    wg, bg = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    runs = {
        "sm launcher": lambda: sm["softmax_rows_forward"](x, y),
        "sm page call": lambda: sm["softmax"](xg),
        "sm page call, no grad": lambda: sm["softmax"](x),
        "ln launcher": lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5),
        "ln page call": lambda: ln["layer_norm"](xg, (n,), wg, bg),
        "torch softmax": lambda: torch.softmax(x, -1),
    }
    for rnd in range(3):
        copy_ms = bench(lambda: out.copy_(x), graph=False)
        line = [f"{dtype} round {rnd} copy {2 * x.numel() * x.element_size() / copy_ms * 1e-6:.0f} GB/s"]
        for name, fn in runs.items():
            line.append(f"{name} {copy_ms / bench(fn) * 100:.1f}")
        print(" | ".join(line), flush=True)
    # heat: 3 s of back-to-back torch softmax, then the same measurements
    t = torch.cuda.Event(enable_timing=True)
    for _ in range(3000):
        torch.softmax(x, -1)
    copy_ms = bench(lambda: out.copy_(x), graph=False)
    print("after a 3000-call burst:", " | ".join(f"{k} {copy_ms / bench(f) * 100:.1f}" for k, f in runs.items()),
          flush=True)
    del x, y, out, xg
    torch.cuda.empty_cache()
