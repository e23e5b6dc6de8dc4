"""Probe: does a GPU left idle before a timer slow the timer's median (clocks ramping up)? A 256 MB copy timed as the
pages time (do_bench warmup=1, rep=5, over a CUDA graph's replays) after the GPU sat idle 0 s to 2 s."""

import time

import torch
import triton.testing as tt

x = torch.randn(2**27, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
y.copy_(x)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y.copy_(x)
gbs = lambda ms: 2 * x.numel() * 2 / ms / 1e6  # noqa: E731
for idle, warmup in [(0, 1), (0.02, 1), (0.1, 1), (0.5, 1), (2.0, 1), (2.0, 25)]:
    vals = []
    for _ in range(5):
        tt.do_bench(g.replay, warmup=1, rep=20)  # busy first
        torch.cuda.synchronize()
        time.sleep(idle)
        vals.append(tt.do_bench(g.replay, warmup=warmup, rep=5, return_mode="median"))
    print(f"idle {idle} s, warmup {warmup} ms: GB/s", [round(gbs(v)) for v in vals], flush=True)
