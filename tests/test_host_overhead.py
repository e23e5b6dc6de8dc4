"""What a drop-in costs the host per call. A page times its kernels as CUDA-graph replays, which hide the Python
around a launch; a model run eagerly pays it on every call. On small tensors the GPU finishes each kernel in a few
microseconds, so the CPU time of many back-to-back calls is the host's time per call.

The bounds are loose: a call through a torch.library operator and autograd costs the host tens to hundreds of
microseconds, several times one of torch's own operators. They catch gross slowness; the second test catches the
slow read a launch is most likely to make, the device's memory clock (more than half a millisecond a read).
"""

import contextlib
import ctypes
import time

import pytest
import torch

from conftest import DEVICE, load_tutorial

pytestmark = pytest.mark.skipif(DEVICE != "cuda", reason="the host's cost of a GPU launch needs a GPU")

FORWARD_US, BACKWARD_US = 1000, 2500  # the host's time a call, forward and forward + backward


def _calls():
    """name -> (page, function of (x, extra) giving the drop-in's output, row length)"""
    return {
        "softmax (01)": ("01_softmax_backward", lambda f, x, e: f["softmax"](x, dim=-1), 4096),
        "layer_norm (02)": ("02_layer_norm_drop_in", lambda f, x, e: f["layer_norm"](x, (4096,), e[0], e[1]), 4096),
        "reduce_sum (03)": ("03_sum_of_all_elements", lambda f, x, e: f["reduce_sum"](x, dim=-1), 4096),
        "rms_norm (04)": ("04_rms_norm_operator", lambda f, x, e: f["rms_norm"](x, (4096,), e[0], eps=1e-6), 4096),
        "cross_entropy (06)": ("06_cross_entropy_backward", lambda f, x, e: f["cross_entropy"](x, e[2]), 32000),
        "cross_entropy (61)": ("61_cross_entropy_split_rows", lambda f, x, e: f["cross_entropy"](x, e[2]), 32000),
    }


CALLS = _calls()


def arguments(n, dtype):
    """x (8 rows of n, requiring its gradient) and the extras the calls take: a weight, a bias, the targets."""
    x = torch.randn(8, n, device=DEVICE, dtype=dtype, requires_grad=True)
    extra = [torch.randn(n, device=DEVICE, dtype=dtype) for _ in range(2)] + [torch.randint(0, n, (8,), device=DEVICE)]
    return x, extra


CU_CTX_SCHED_MASK, CU_CTX_SCHED_BLOCKING_SYNC = 0x07, 0x04  # cuda.h


@contextlib.contextmanager
def waits_that_sleep():
    """A wait for the GPU (a synchronize, a tensor's value read on the host) that sleeps instead of spinning, so that
    it costs the process no CPU time; CUDA spins by default. A drop-in that reads a value (06's check of its targets)
    waits a call, and on a GPU shared with other test workers a spin can last longer than the call's own work. The
    scheduling flags of this thread's CUDA context are set through the driver (cuCtxSetFlags, CUDA 12.1 and up) and
    restored after; where the driver has no such call, waits spin as before."""
    torch.cuda.synchronize()  # the context exists and is this thread's
    cuda, flags = ctypes.CDLL("libcuda.so.1"), ctypes.c_uint()
    if not hasattr(cuda, "cuCtxSetFlags") or cuda.cuCtxGetFlags(ctypes.byref(flags)):
        yield
        return
    assert cuda.cuCtxSetFlags((flags.value & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC) == 0
    try:
        yield
    finally:
        torch.cuda.synchronize()
        cuda.cuCtxSetFlags(flags.value)


def host_us_a_call(fn, calls=200):
    """Microseconds of the calling thread's CPU time a call: the host's work, which other processes on the machine
    (the other test workers) do not stretch as they stretch the wall clock, its waits for the GPU sleeping. The
    thread's, not the process's: a sleeping wait is woken by the driver's threads, whose time is no call's work."""
    for _ in range(10):
        fn()
    with waits_that_sleep():
        start = time.thread_time()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.thread_time() - start) / calls * 1e6


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=str)
@pytest.mark.parametrize("name", list(CALLS))
def test_a_drop_in_costs_the_host_little_a_call(name, dtype):
    page, call, n = CALLS[name]
    f = load_tutorial(page)
    x, extra = arguments(n, dtype)
    with torch.no_grad():
        forward = host_us_a_call(lambda: call(f, x, extra))
    out = call(f, x, extra)
    dy = torch.randn_like(out)
    both = host_us_a_call(lambda: torch.autograd.grad(call(f, x, extra), x, dy))
    assert forward < FORWARD_US and both < BACKWARD_US, (
        f"{name} {dtype}: {forward:.0f} us a forward call, {both:.0f} us forward and backward, on the host"
    )


class _CountingProperties:
    """A device's properties that count the reads of its memory clock."""

    def __init__(self, props, reads):
        self._props, self._reads = props, reads

    def __getattr__(self, name):
        if name == "memory_clock_rate":
            self._reads.append(name)
        return getattr(self._props, name)


@pytest.mark.parametrize("name", list(CALLS))
def test_a_drop_in_reads_the_memory_clock_once_not_each_call(name, monkeypatch):
    page, call, n = CALLS[name]
    f = load_tutorial(page)
    x, extra = arguments(n, torch.float32)
    dy = torch.randn_like(call(f, x, extra))
    reads, real = [], torch.cuda.get_device_properties
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: _CountingProperties(real(*a, **k), reads))
    for _ in range(3):
        torch.autograd.grad(call(f, x, extra), x, dy)
    assert not reads, f"{name}: {len(reads)} reads of the memory clock in 3 calls, forward and backward"
