"""Dev only: re-time the softmax page's forward (through softmax(), on requires-grad inputs, graph
replays, as the page's sweep does) at fp32 N = 65536/131072/262144 and bf16 32768, five times each,
with and without the lookahead, interleaved; % of an eager copy.

PYTHONUNBUFFERED=1 python3 dev/softmax_recheck_gpu.py
"""
import torch
import triton
from gpu_common import load, bench

torch.cuda.set_stream(torch.cuda.Stream())
sm = load("tutorials/01_fused_softmax.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
page_split = dict(sm["SPLIT"])
no_look = {k: dict(v, LOOKAHEAD=False) for k, v in page_split.items()}
for dtype, n in ((torch.float32, 65536), (torch.float32, 131072), (torch.float32, 262144), (torch.bfloat16, 32768)):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    nb = x.numel() * x.element_size()
    out = torch.empty_like(x)
    xg = x.requires_grad_(True)
    ref = torch.softmax(x.detach().double(), 1)
    line = []
    for rep in range(5):
        copy = 2 * nb / bench(lambda: out.copy_(x), graph=False) * 1e-6
        for label, split in (("look", page_split), ("old", no_look)):
            sm["SPLIT"].clear()
            sm["SPLIT"].update(split)
            y = sm["softmax"](xg)
            err = ((y.double() - ref).abs().max()).item()
            t = bench(lambda: sm["softmax"](xg))
            line.append(f"{label} {100 * 2 * nb / t * 1e-6 / copy:.1f}")
    sm["SPLIT"].clear()
    sm["SPLIT"].update(page_split)
    print(str(dtype)[6:], n, "err", f"{err:.1e}", " | ".join(line), flush=True)
    del x, xg, out, ref
    torch.cuda.empty_cache()
