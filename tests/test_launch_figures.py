"""The line each core page prints above its ladder: Little's law with the figures of the GPU it runs on (bandwidth
from the memory clock and bus width, SMs, programs of 4 warps an SM holds), the same figures the launch is derived
from, so that no page quotes another GPU's."""

import inspect
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
B200 = dict(
    name="NVIDIA B200",
    memory_clock_rate=3906_000,
    memory_bus_width=8192,
    multi_processor_count=148,
    max_threads_per_multi_processor=2048,
)
PAGES = ["01_fused_softmax", "02_layer_norm", "03_parallel_reduction", "04_rms_norm"]


def _said(page, monkeypatch, device, on_gpu=True):  # the page's line on a device of these properties
    figures = page["launch_figures"]
    scope = figures.__globals__
    cached = scope.get("min_tile_bytes")
    monkeypatch.setitem(scope, "ON_GPU", on_gpu)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *args: types.SimpleNamespace(**device))
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()  # it reads the device once
    try:
        return figures()
    finally:
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


@pytest.mark.parametrize("stem", PAGES)
@pytest.mark.parametrize(
    "device,said",
    [
        (H200, ["H200: 4.81 TB/s (peak) x 1 µs / 132 SMs = 36 KB in flight an SM", "16 programs", "tiles of 4 KB"]),
        (RTX_4090, ["4090: 1.01 TB/s (peak) x 1 µs / 128 SMs = 8 KB in flight an SM", "12 programs", "tiles of 2 KB"]),
        (B200, ["B200: 8.00 TB/s (peak) x 1 µs / 148 SMs = 53 KB in flight an SM", "16 programs", "tiles of 4 KB"]),
    ],
)
def test_a_page_prints_littles_law_with_its_own_gpus_figures(monkeypatch, stem, device, said):
    page = load_tutorial(stem)
    line = _said(page, monkeypatch, device)
    assert said[0] in line, line  # KB of 1024 bytes: the B200's 54,048 bytes are 53 KB, not 54
    if "min_tile_bytes" in page["launch_figures"].__globals__:  # its tile: its share over the programs an SM holds
        assert all(part in line for part in said[1:]), line
        assert f"tiles of {page['min_tile_bytes']() // 1024} KB" in line, "the tile the launch uses"
        assert _said(page, monkeypatch, device, on_gpu=False) == (
            "No GPU here to read: tiles of 4 KB, min_tile_bytes()'s default."
        )
    else:  # 03: a tile of 8192 elements, several an SM
        assert "8192 elements" in line, line
        assert _said(page, monkeypatch, device, on_gpu=False).startswith("No GPU here")
    line = _said(page, monkeypatch, dict(name="GPU X"))  # a device that does not say: said so, no crash
    assert line.startswith("This GPU X does not report its memory clock and width"), line


@pytest.mark.parametrize("stem", PAGES)
def test_the_line_is_printed_with_the_ladder(stem):
    """Each page's ladder (its measuring or its showing function) prints the line before the table."""
    page = load_tutorial(stem)
    shows = page["measure_ladder"] if stem == "01_fused_softmax" else page["show_ladder"]
    assert "print(launch_figures())" in inspect.getsource(shows)
