"""Dev only: is bf16 N = 32768 (2048 rows, one row per SM at a time) losing to wave quantization?
Times the pages' forward launchers (layer norm, softmax) as % of an eager copy of the same tensor, for
row counts around 2048 = 15.5 x 132: whole waves (15 x SMs, 16 x SMs, ...) against the page's 2048.

PYTHONUNBUFFERED=1 python3 dev/waves_gpu.py
"""
import torch
import triton
from gpu_common import load, bench

torch.cuda.set_stream(torch.cuda.Stream())
sm = load("tutorials/01_fused_softmax.py")
ln = load("tutorials/02_layer_norm.py")
sms = torch.cuda.get_device_properties(0).multi_processor_count
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, "SMs", sms, flush=True)
for n, dtype, rows in [(32768, torch.bfloat16, [15 * sms, 2048, 16 * sms, 31 * sms, 4096, 32 * sms]),
                       (16384, torch.bfloat16, [4096]), (32768, torch.float32, [2048])]:
    for m in rows:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        out = torch.empty_like(x)
        mean = torch.empty(m, device="cuda")
        rstd = torch.empty(m, device="cuda")
        grid = ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        for rnd in range(2):
            copy_ms = bench(lambda: out.copy_(x), graph=False)
            lnp = copy_ms / bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)) * 100
            smp = copy_ms / bench(lambda: sm["softmax_rows_forward"](x, y)) * 100
            print(f"{str(dtype)[6:]} N {n} M {m} ({m / sms:.2f} rows/SM) copy "
                  f"{2 * x.numel() * x.element_size() / copy_ms * 1e-6:.0f} GB/s | LN {lnp:.1f} (grid {grid}) | "
                  f"softmax {smp:.1f}", flush=True)
        del x, y, out
        torch.cuda.empty_cache()
