"""The line each core page prints above its ladder: Little's law with the figures of the GPU it runs on (bandwidth
from the memory clock and bus width, SMs, programs of 4 warps an SM holds), the same figures the launch is derived
from, so that no page quotes another GPU's."""

import types

import pytest
import torch

from conftest import load_tutorial

H200 = dict(
    name="NVIDIA H200",
    memory_clock_rate=3201_000,
    memory_bus_width=6016,
    multi_processor_count=132,
    max_threads_per_multi_processor=2048,
)
RTX_4090 = dict(
    name="NVIDIA GeForce RTX 4090",
    memory_clock_rate=10501_000,
    memory_bus_width=384,
    multi_processor_count=128,
    max_threads_per_multi_processor=1536,
)


@pytest.mark.parametrize("stem", ["01_fused_softmax", "02_layer_norm", "03_parallel_reduction", "04_rms_norm"])
@pytest.mark.parametrize(
    "device,said",
    [
        (H200, ["H200: 4.81 TB/s (peak) x 1 µs / 132 SMs = 36 KB in flight an SM", "16 programs", "tiles of 4 KB"]),
        (RTX_4090, ["4090: 1.01 TB/s (peak) x 1 µs / 128 SMs = 8 KB in flight an SM", "12 programs", "tiles of 2 KB"]),
    ],
)
def test_a_page_prints_littles_law_with_its_own_gpus_figures(monkeypatch, stem, device, said):
    page = load_tutorial(stem)
    figures = page["launch_figures"]
    scope = figures.__globals__
    cached = scope.get("min_tile_bytes")
    monkeypatch.setitem(scope, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *args: types.SimpleNamespace(**device))
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()  # it reads the device once
    try:
        line = figures()
    finally:
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    assert said[0] in line, line
    if cached is not None:  # the pages whose tile follows the law: its share over the programs an SM holds
        assert all(part in line for part in said[1:]), line
    else:  # 03: a tile of 8192 elements, several an SM
        assert "8192 elements" in line, line
    monkeypatch.setitem(scope, "ON_GPU", False)
    assert figures().startswith("No GPU here")
    monkeypatch.setitem(scope, "ON_GPU", True)  # a device that does not report its memory clock: said, no crash
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *args: types.SimpleNamespace(name="GPU X"))
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()
    try:
        assert figures().startswith("This GPU X does not report its memory clock")
    finally:
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
