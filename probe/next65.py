"""01's launch: the page's model (MIN_ELEMENTS 4096, bytes_per_thread() from LATENCY 1 us), the same model refit
(MIN_ELEMENTS 2048, LATENCY 2 us: 128 bytes a thread on an H200), and the byte rule (4 KB tiles, 128 bytes a thread),
forward and backward, do_bench (median, L2 flushed) on 2**26 elements beside a copy. Also what reading the device's
properties costs the host. Prints JSON lines. From the repository root: python3 probe/next65.py"""
import json, sys, time, torch, triton
sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

fwd, bwd = load_tutorial("01_fused_softmax"), load_tutorial("01_softmax_backward")
page_config, uncached = fwd["_fused_config"], fwd["bytes_per_thread"].__wrapped__

def us(fn, k=2000):
    fn(); t = time.perf_counter()
    for _ in range(k):
        fn()
    return round((time.perf_counter() - t) / k * 1e6, 2)

props = torch.cuda.get_device_properties(0)
print(json.dumps({"get_device_properties us": us(lambda: torch.cuda.get_device_properties(fwd["DEVICE"])),
                  "memory_clock_rate us": us(lambda: props.memory_clock_rate),
                  "memory_bus_width us": us(lambda: props.memory_bus_width),
                  "bytes_per_thread uncached us": us(uncached, 200), "cached us": us(fwd["bytes_per_thread"]),
                  "bytes_per_thread": fwd["bytes_per_thread"](), "props": str(props)}), flush=True)

def refit(n_cols, element_size):  # the model at MIN_ELEMENTS 2048 and 128 bytes a thread (LATENCY 2 us on an H200)
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, 2048 // block_n)
    return block_m, block_n, min(32, max(4, block_m * block_n * element_size // (32 * 128)))

def rule_4kb(n_cols, element_size):
    block_n = triton.next_power_of_2(n_cols)
    block_m = max(1, 4096 // (block_n * element_size))
    return block_m, block_n, min(32, max(4, block_m * block_n * element_size // (32 * 128)))

CONFIGS = {"page": page_config, "2048/128B": refit, "4KB/128B": rule_4kb}
ms = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")
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
            row[f"cfg {name}"] = "x".join(map(str, config(n, x.element_size()))) + "/" + "x".join(
                map(str, config(n, 4)))
        print(json.dumps(row), flush=True)
fwd["_fused_config"] = bwd["_fused_config"] = page_config
