"""Dev only: one launch each of the pages' forwards at bf16 N = 32768 (layer norm fused, softmax split) and
of layer norm at bf16 16384 (two reads), for Nsight Compute:

ncu --section SpeedOfLight --section WarpStateStats --section Occupancy -k regex:"layer_norm_fwd|softmax_fwd" \
    python3 dev/ncu_wide_gpu.py
"""
import torch
from gpu_common import load

ln = load("tutorials/02_layer_norm.py")
sm = load("tutorials/01_fused_softmax.py")
for dtype, n in [(torch.bfloat16, 32768), (torch.bfloat16, 16384)]:
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
    if n == 32768:
        sm["softmax_rows_forward"](x, y)
    torch.cuda.synchronize()
print("done")
