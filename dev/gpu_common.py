"""Dev only: what the GPU sweep scripts share. Run them from the repository root
(``python3 dev/<script>.py``): this directory is then on sys.path."""
import os

import torch
import triton


def load(path):
    """The globals of a tutorial's code up to its correctness section (kernels and launchers)."""
    src = open(path).read()
    g = {"__name__": "dev_" + os.path.basename(path)[:2]}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), g)
    return g


def bench(fn, graph=True):
    """Median ms of fn() as the pages time it: replays of a CUDA graph of one call, L2 flushed by
    do_bench; graph=False times fn() itself (the copy that stands for the speed of light)."""
    fn()
    torch.cuda.synchronize()
    if not graph:
        return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=25, return_mode="median")


def rel(a, b):
    """Relative error of a against the float64 reference b."""
    return ((a.double() - b).norm() / b.norm()).item()
