"""Where a drop-in's host time goes: cProfile of 200 eager calls on small tensors (the GPU idle), forward and forward +
backward, top entries by own time. From the repository root: python3 probe/hostprof.py"""
import cProfile, io, pstats, sys, time, torch
sys.path.insert(0, "tests")
from test_host_overhead import CALLS, host_us_a_call  # noqa: E402
from conftest import load_tutorial  # noqa: E402

for name, (page, call, n) in CALLS.items():
    f = load_tutorial(page)
    x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    extra = [torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16),
             torch.randint(0, n, (8,), device="cuda")]
    out = call(f, x, extra)
    dy = torch.randn_like(out)
    both = lambda: torch.autograd.grad(call(f, x, extra), x, dy)
    with torch.no_grad():
        fwd_us = host_us_a_call(lambda: call(f, x, extra))
    print(f"=== {name}: forward {fwd_us:.0f} us, both {host_us_a_call(both):.0f} us", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(100):
        both()
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    print("\n".join(line[:160] for line in s.getvalue().splitlines()[6:24]), flush=True)
# torch's own, for scale
x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
for what, fn in {"torch softmax": lambda: torch.softmax(x, -1), "torch layer_norm": lambda: torch.nn.functional.layer_norm(x, (4096,), w, w),
                 "torch rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w)}.items():
    dy = torch.randn_like(fn())
    with torch.no_grad():
        a = host_us_a_call(fn)
    print(f"=== {what}: forward {a:.0f} us, both {host_us_a_call(lambda: torch.autograd.grad(fn(), x, dy)):.0f} us")
