"""p9: the host's time a drop-in call costs, its waits spinning (CUDA's default) and sleeping (the test's
waits_that_sleep), while 4 other processes keep the GPU busy (as 8 test workers do)."""
import subprocess, sys, time

import torch

sys.path.insert(0, "tests")
import conftest  # noqa: E402
import test_host_overhead as t  # noqa: E402

LOAD = """
import time, torch
a, b = torch.empty(2**28, device="cuda"), torch.empty(2**28, device="cuda")
end = time.time() + 120
while time.time() < end:
    for _ in range(20):
        a.copy_(b)
    torch.cuda.synchronize()
"""


def sleeping_process(fn, calls=200):  # waits sleep, the process's CPU time
    for _ in range(10):
        fn()
    with t.waits_that_sleep():
        start = time.process_time()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.process_time() - start) / calls * 1e6


def spinning(fn, calls=200):  # the measurement as it was: waits spin
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.process_time()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.process_time() - start) / calls * 1e6


print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for loaded in (False, True):
    load = [subprocess.Popen([sys.executable, "-c", LOAD]) for _ in range(4 if loaded else 0)]
    time.sleep(8 if loaded else 0)
    for name in ("cross_entropy (06)", "softmax (01)", "cross_entropy (61)"):
        page, call, n = t.CALLS[name]
        f = conftest.load_tutorial(page)
        for dtype in (torch.bfloat16, torch.float32):
            x, extra = t.arguments(n, dtype)
            with torch.no_grad():
                fn = lambda: call(f, x, extra)  # noqa: E731
                a, b, c = spinning(fn), sleeping_process(fn), t.host_us_a_call(fn)
            print(f"load={loaded} {name} {dtype}: spinning {a:.0f} us, sleeping {b:.0f} us (process), "
                  f"{c:.0f} us (its thread)", flush=True)
    for p in load:
        p.kill()
