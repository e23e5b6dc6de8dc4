"""04's RMSNorm forward launch against 01's tile model, for the next GPU session (about 40 s on an H200). 04 gives a
tile 4096 elements or more at 64 bytes a thread; 01 now gives a tile min_tile_bytes() (4 KB at 4.8 TB/s) or more at
128 bytes a thread, 4 warps at least. Variants, each checked against torch in float64 terms: "page" (04's launch),
"01's model", "4 KB / 64 B", "01's model, 2 warps at least". do_bench median, L2 flushed, 2**26 elements, GB/s
(x read, y written) beside a copy. From the repository root: python3 probe/next67.py (no GPU: a small functional run)
"""
import json, os, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
page, core = load_tutorial("04_rms_norm"), load_tutorial("01_fused_softmax")
g = page["rms_norm_rows_forward"].__globals__
kernel, page_config = page["rms_norm_fwd_kernel"], g["_fwd_config"]


def tiles(tile_bytes, per_thread, least=4):
    def config(n_rows, n_cols, element_size):
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, tile_bytes() // (block_n * element_size))
        warps = min(32, max(least, block_m * block_n * element_size // (32 * per_thread)))
        return kernel, dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), triton.cdiv(n_rows, block_m)
    return config


VARIANTS = {"page": page_config, "01's model": tiles(core["min_tile_bytes"], 128),
            "4 KB / 64 B": tiles(lambda: 4096, 64), "01's model, 2 warps": tiles(core["min_tile_bytes"], 128, 2)}
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
for dtype in (torch.float32, torch.bfloat16):
    for n in [512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [512, 1000]:
        x = torch.randn((2**26 if ON_GPU else 2**12) // n, n, device=DEV, dtype=dtype)
        w = torch.rand(n, device=DEV, dtype=dtype) + 0.5
        y, rstd, out = torch.empty_like(x), torch.empty(len(x), device=DEV), torch.empty_like(x)
        ref = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), page["EPS"])
        gbs = lambda t: 2 * x.numel() * x.element_size() / t * 1e-6
        row = {"dtype": str(dtype)[6:], "N": n, "copy": round(gbs(ms(lambda: out.copy_(x)))) if ON_GPU else None}
        for name, config in VARIANTS.items():
            g["_fwd_config"] = config
            run = lambda: page["rms_norm_rows_forward"](x, w, y, rstd, page["EPS"])
            run()
            torch.testing.assert_close(y.double(), ref, atol=5e-2, rtol=2e-2)
            row[name] = round(gbs(ms(run))) if ON_GPU else "ok"
            meta = config(*x.shape, x.element_size())[1]
            row[f"cfg {name}"] = f"{meta['BLOCK_M']}x{meta['BLOCK_N']}x{meta['num_warps']}"
        g["_fwd_config"] = page_config
        print(json.dumps(row), flush=True)
