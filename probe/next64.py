"""Probe for the next GPU session: 01's launch model against deep dive 14's autotuner picks, forward and backward.

Launches: "page" (_fused_config: MIN_ELEMENTS 4096 elements, bytes_per_thread() from Little's law); "4KB/128B" (a
tile of 4 KB or more, 128 bytes a thread, 4 to 32 warps: 7 of 8 of the autotuner's H200 picks); "page/32B" (the
page's tile, 32 bytes a thread, as on an H100). Each timed by do_bench (median, L2 flushed) on 2**26 elements, beside
a copy, and checked against torch. Prints JSON lines. Run from the repository root: python3 probe/next64.py
"""
import json, sys, torch, triton
sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

fwd, bwd = load_tutorial("01_fused_softmax"), load_tutorial("01_softmax_backward")
page_config = fwd["_fused_config"]

def rule_4kb(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, 4096 // (block_n * element_size))
    return block_m, block_n, min(32, max(4, block_m * block_n * element_size // (32 * 128)))

def page_32b(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, fwd["MIN_ELEMENTS"] // block_n)
    return block_m, block_n, min(32, max(4, block_m * block_n * element_size // (32 * 32)))

CONFIGS = {"page": page_config, "4KB/128B": rule_4kb, "page/32B": page_32b}
ms = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
for dtype in (torch.float32, torch.bfloat16):
    for n in [256, 512, 1024, 2048, 4096, 8192, 16384]:
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        y, dy, out = torch.empty_like(x), torch.randn_like(x), torch.empty_like(x)
        gbs = lambda t, k=2: k * x.numel() * x.element_size() / t * 1e-6
        row = {"dtype": str(dtype)[6:], "N": n, "copy": round(gbs(ms(lambda: out.copy_(x))))}
        ref = torch.softmax(x.float(), -1)
        for name, config in CONFIGS.items():
            fwd["_fused_config"] = bwd["_fused_config"] = config
            fwd["softmax_rows_forward"](x, y)
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
            row[f"fwd {name}"] = round(gbs(ms(lambda: fwd["softmax_rows_forward"](x, y))))
            row[f"bwd {name}"] = round(gbs(ms(lambda: bwd["softmax_rows_backward"](y, dy, out)), 3))
            row[f"cfg {name}"] = "x".join(map(str, config(n, x.element_size())))
        print(json.dumps(row), flush=True)
fwd["_fused_config"] = bwd["_fused_config"] = page_config
