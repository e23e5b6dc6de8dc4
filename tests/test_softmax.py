"""The core softmax pages against float64, on random shapes and layouts: tutorials/01_fused_softmax.py (the plain
and fused forward kernels, their config) and tutorials/01_softmax_backward.py (the backward kernel, the drop-in, which
hands forward rows past the kernels' reach to PyTorch's own softmax and streams backward rows past them with deep dive
11's online kernel, and the forward it carries).

Without a GPU these run through Triton's interpreter on the CPU (exact, slow: sizes stay small).
"""

import inspect
import math
import sys
import types

import pytest
import torch

from conftest import DEVICE, LazyTutorial, load_tutorial

T = LazyTutorial("01_softmax_backward")  # the drop-in's page
F = LazyTutorial("01_fused_softmax")  # the forward's page


def softmax(*args, **kwargs):  # the page's drop-in
    return T["softmax"](*args, **kwargs)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Bounds on ||out - ref|| / ||ref||: a few roundings of the output dtype (the interpreter truncates
# fp32 -> bf16 rather than rounding, hence the bf16 margin).
TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp(min=1e-300)).item()


def reference(x, dim, dy):
    x64 = x.detach().double().requires_grad_(True)
    y64 = torch.softmax(x64, dim)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    return y64.detach(), dx64


def check(x, dim, dtype, tol=None):
    """The drop-in against float64 within tol (default: TOL of the dtype), forward and backward."""
    tol = TOL[dtype] if tol is None else tol
    x = x.requires_grad_(True)
    y = softmax(x, dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    dy = torch.randn_like(y)
    y64, dx64 = reference(x, dim, dy)
    (dx,) = torch.autograd.grad(y, x, dy)
    assert rel_err(y, y64) < tol, f"forward error {rel_err(y, y64):.2e} over {tol:.0e}"
    if dx64.norm() > 0:
        assert rel_err(dx, dx64) < 2 * tol, f"backward error {rel_err(dx, dx64):.2e}"
    else:  # N = 1: the gradient is exactly zero
        assert torch.count_nonzero(dx) == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 1), (3, 1000), (37, 129), (2, 4096), (2, 20_001), (1, 33_333)])
def test_rows(shape, dtype):
    torch.manual_seed(hash(shape) % 1000)
    check(torch.randn(shape, device=DEVICE, dtype=dtype) * 3, -1, dtype)


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_every_dim(seed):
    gen = torch.Generator().manual_seed(seed)
    ndim = int(torch.randint(1, 4, (1,), generator=gen))
    shape = tuple(int(s) for s in torch.randint(1, 40, (ndim,), generator=gen))
    dtype = DTYPES[seed % 3]
    x = torch.randn(shape, generator=gen).to(DEVICE, dtype) * 2
    for dim in range(-ndim, ndim):
        check(x.detach().clone(), dim, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_inputs_and_gradients(dtype):
    base = torch.randn(24, 70, device=DEVICE, dtype=dtype)
    check(base[:, ::2].detach(), -1, dtype)  # every other column: copied to unit stride
    check(base[:, :35].detach(), -1, dtype)  # rows 70 apart: used in place through the row stride
    check(base.t().detach(), 1, dtype)  # transposed
    check(base[3:19, 5:66].detach(), 0, dtype)  # a slice, softmax down the columns
    x = base[::3].detach().requires_grad_(True)
    y = softmax(x, -1)
    dy = torch.randn(70, 8, device=DEVICE, dtype=dtype).t()  # a non-contiguous incoming gradient
    (dx,) = torch.autograd.grad(y, x, dy)
    _, dx64 = reference(x, -1, dy)
    assert rel_err(dx, dx64) < 2 * TOL[dtype]


def test_rows_past_the_fused_kernels_match_float64():
    """Rows longer than the fused limits (PyTorch's softmax forward, the online kernel backward) within the page's own
    bounds (a few roundings; PyTorch's CPU softmax sums a long fp32 row less exactly than the kernels' tree)."""
    n = T["MAX_FUSED_N"] + 4099
    assert n > T["MAX_FUSED_BWD_N"]
    for dtype in DTYPES:
        check(torch.randn(2, n, device=DEVICE, dtype=dtype) * 5, -1, dtype, tol=max(TOL[dtype], 1e-5))


def force_past(monkeypatch):
    """The paths past the fused kernels on short rows, PyTorch's forward and the online backward (the page's own
    globals, which its functions read)."""
    page = T["softmax_rows_forward"].__globals__
    monkeypatch.setitem(page, "MAX_FUSED_N", 64)
    monkeypatch.setitem(page, "MAX_FUSED_BWD_N", 64)


def test_every_element_written():
    """Outputs start as NaN: any element a launcher skips would stay NaN."""
    x = torch.randn(13, 1000, device=DEVICE)
    y = torch.full_like(x, math.nan)
    T["softmax_rows_forward"](x, y)
    assert not y.isnan().any()
    torch.testing.assert_close(y, torch.softmax(x, -1))
    dy = torch.randn_like(x)
    dx = torch.full_like(x, math.nan)
    T["softmax_rows_backward"](y, dy, dx)
    assert not dx.isnan().any()
    torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_path_forced_on_odd_rows(dtype, monkeypatch):
    """The drop-in past the fused limits (forced on short rows), in every dtype, against float64."""
    force_past(monkeypatch)
    for shape in [(5, 1), (3, 300)]:
        check(torch.randn(shape, device=DEVICE, dtype=dtype) * 4, -1, dtype)


def test_operators_pick_by_row_length(monkeypatch):
    """The kernels up to MAX_FUSED_N (forward) and MAX_FUSED_BWD_N (backward); past them PyTorch's own softmax
    forward (its bits) and the online kernel backward, every element written."""
    page, ran = T["softmax_rows_forward"].__globals__, []
    for name in ("softmax_rows_forward", "softmax_rows_backward", "softmax_rows_backward_online"):
        monkeypatch.setitem(page, name, lambda *rows, name=name, launch=page[name]: (ran.append(name), launch(*rows)))
    fwd, bwd = T["softmax_fwd_op"], T["softmax_bwd_op"]
    for n, fused in [
        (T["MAX_FUSED_BWD_N"], ["softmax_rows_forward", "softmax_rows_backward"]),
        (T["MAX_FUSED_BWD_N"] + 1, ["softmax_rows_forward", "softmax_rows_backward_online"]),
        (T["MAX_FUSED_N"], ["softmax_rows_forward", "softmax_rows_backward_online"]),
        (T["MAX_FUSED_N"] + 1, ["softmax_rows_backward_online"]),
    ]:
        ran.clear()
        x = torch.randn(1, n, device=DEVICE)
        y, dy = fwd(x), torch.randn_like(x)
        dx = bwd(y, dy)
        assert ran == fused, f"N = {n}: {ran}"
        if "softmax_rows_forward" not in ran:
            assert torch.equal(y, torch.softmax(x, 1))
        torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-5)


@pytest.mark.skipif(DEVICE != "cpu", reason="the launch a device that names no bandwidth gets")
def test_fused_config_is_todays():
    """Where the device gives no bandwidth (here: no GPU), tiles of 4 KB or more at 128 bytes a thread, 4 to 32 warps
    (BLOCK_M, BLOCK_N, num_warps); a GPU's launches are pinned in tests/test_launch_resources.py."""
    cfg = F["_fused_config"]
    assert cfg(256, 4) == (4, 256, 4) and cfg(256, 2) == (8, 256, 4) and cfg(1, 4) == (1024, 1, 4)
    assert cfg(1000, 4) == (1, 1024, 4) and cfg(4096, 2) == (1, 4096, 4) and cfg(8192, 4) == (1, 8192, 8)
    assert cfg(32768, 4) == (1, 32768, 32) and cfg(32768, 2) == (1, 32768, 16) and cfg(16384, 4) == (1, 16384, 16)
    assert (F["MAX_FUSED_N"], T["MAX_FUSED_BWD_N"], F["BYTES_PER_THREAD"], F["min_tile_bytes"]()) == (
        32768,
        16384,
        128,
        4096,
    )


@pytest.mark.parametrize(
    "clock_khz,bus_bits,sms,threads,expected",
    [
        (2619_000, 5120, 132, 2048, 2048),
        (3201_000, 6016, 132, 2048, 4096),
        (1593_000, 5120, 108, 2048, 2048),
        (10501_000, 384, 128, 1536, 2048),
        (3906_000, 8192, 148, 2048, 4096),
    ],
)
def test_tiles_follow_littles_law(monkeypatch, clock_khz, bus_bits, sms, threads, expected):
    """An SM's share of bandwidth x LATENCY over its programs of 4 warps, rounded up to a power of two, 2 KB at least:
    an H100 SXM (3.35 TB/s) 2 KB, an H200 (4.8 TB/s) 4 KB, an A100 (2.04 TB/s, 108 SMs) 2 KB, an RTX 4090 (1 TB/s,
    1536 threads an SM) 2 KB, a B200 (8 TB/s, 148 SMs) 4 KB."""
    props = types.SimpleNamespace(
        memory_clock_rate=clock_khz,
        memory_bus_width=bus_bits,
        multi_processor_count=sms,
        max_threads_per_multi_processor=threads,
    )
    page = F["min_tile_bytes"].__wrapped__.__globals__
    monkeypatch.setitem(page, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *args: props)
    F["min_tile_bytes"].cache_clear()  # it reads the device once
    try:
        assert F["min_tile_bytes"]() == expected
        props.memory_bus_width = 0  # a device that does not say
        assert F["min_tile_bytes"]() == expected, "read again"
        F["min_tile_bytes"].cache_clear()
        assert F["min_tile_bytes"]() == 4096
    finally:
        F["min_tile_bytes"].cache_clear()


def test_the_drop_ins_page_carries_deep_dive_11s_online_backward_letter_for_letter(monkeypatch):
    """Past MAX_FUSED_BWD_N the drop-in's backward is deep dive 11's online kernel, launched as 11 launches it."""
    long_rows = load_tutorial("11_softmax_long_rows")
    kernel = long_rows["softmax_bwd_online_kernel"]
    assert inspect.getsource(T["softmax_bwd_online_kernel"].fn) == inspect.getsource(kernel.fn)
    y = torch.empty(3, T["MAX_FUSED_BWD_N"] + 1)
    assert long_rows["core_launch"]("backward", (y, y, y), *y.shape, 4) == (
        kernel,
        3,
        dict(BLOCK_N=16384, num_warps=32),
    )
    launches = []
    recorder = type(
        "Recorder", (), {"__getitem__": lambda self, grid: lambda *a, **meta: launches.append((grid, meta))}
    )()
    monkeypatch.setitem(T["softmax_rows_backward_online"].__globals__, "softmax_bwd_online_kernel", recorder)
    T["softmax_rows_backward_online"](y, y, y)
    assert launches == [((3,), dict(BLOCK_N=16384, num_warps=32))]


def test_the_drop_ins_page_carries_the_forward_letter_for_letter():
    """01_softmax_backward runs the forward that 01_fused_softmax teaches: the same kernel, config and constants."""
    assert inspect.getsource(T["softmax_fwd_kernel"].fn) == inspect.getsource(F["softmax_fwd_kernel"].fn)
    for name in ("min_tile_bytes", "_fused_config", "softmax_rows_forward"):
        assert inspect.getsource(T[name]) == inspect.getsource(F[name]), name
    for name in ("MAX_FUSED_N", "BYTES_PER_THREAD", "LATENCY"):
        assert T[name] == F[name], name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_kernel(dtype):
    """The ladder's step 0 (one row a program) against float64, on rows of odd length and row strides past the
    row: every element of each row written (outputs start as NaN), nothing written between rows."""
    for n in (1, 257, 4096):
        torch.manual_seed(n)
        x = (torch.randn(5, n + 3, device=DEVICE, dtype=dtype) * 4)[:, :n]
        out = torch.full((5, n + 8), math.nan, device=DEVICE, dtype=dtype)
        F["plain_softmax_rows"](x, out[:, :n])
        assert out[:, n:].isnan().all() and not out[:, :n].isnan().any()
        assert rel_err(out[:, :n], torch.softmax(x.double(), -1)) < TOL[dtype]


def test_writes_stay_inside_the_output():
    """A row stride wider than the row: the gap between rows must not be touched."""
    x = torch.randn(9, 300, device=DEVICE)
    out = torch.full((9, 512), 7.0, device=DEVICE)
    T["softmax_rows_forward"](x, out[:, :300])
    assert (out[:, 300:] == 7.0).all()
    torch.testing.assert_close(out[:, :300], torch.softmax(x, -1))


@pytest.mark.parametrize("n", [5, 100_000])
def test_special_values_behave_like_torch(n):
    if n > T["MAX_FUSED_N"] and DEVICE == "cpu":
        n = T["MAX_FUSED_N"] + 1000
    x = torch.randn(6, n, device=DEVICE)
    x[0, 1] = math.nan  # a NaN row stays NaN
    x[1, 2] = math.inf  # +inf: NaN, as in torch
    x[2] = -math.inf  # all -inf: NaN, as in torch
    x[3, :3] = -math.inf  # some -inf: zeros there
    x[4, 0], x[4, 1] = math.inf, -math.inf
    expected = torch.softmax(x, -1)
    got = softmax(x, -1)
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_empty_and_zero_dim():
    for shape, dim in [((0, 5), -1), ((5, 0), -1), ((0,), 0), ((3, 0, 2), 0)]:
        x = torch.randn(shape, device=DEVICE, requires_grad=True)
        y = softmax(x, dim)
        assert y.shape == x.shape
        y.sum().backward()
        assert x.grad.shape == x.shape
    s = torch.tensor(3.0, device=DEVICE, requires_grad=True)
    y = softmax(s, 0)
    assert y.shape == () and y.item() == 1.0
    assert softmax(s, -1).item() == 1.0
    y.backward()
    assert s.grad.item() == 0.0


def test_deterministic():
    x = torch.randn(64, 3000, device=DEVICE, dtype=torch.bfloat16)
    first = softmax(x)
    for _ in range(3):
        assert torch.equal(softmax(x), first)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        softmax(torch.arange(10, device=DEVICE))
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        softmax(torch.randn(4, 4, dtype=torch.float64, device=DEVICE))
    with pytest.raises(IndexError, match="out of range"):
        softmax(torch.randn(4, 4, device=DEVICE), dim=2)
    with pytest.raises(IndexError, match="out of range"):
        softmax(torch.tensor(1.0, device=DEVICE), dim=1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="dim must be an int"):
        softmax(torch.randn(3, device=DEVICE), dim=None)
    other = "cpu" if DEVICE == "cuda" else "meta"
    with pytest.raises(ValueError, match="on (cpu|meta)"):
        softmax(torch.randn(4, 4, device=other))


# The kernels as PyTorch operators (sol::softmax_fwd_01, sol::softmax_bwd_01)


def operator_samples():
    """Rows as the drop-in hands them over: contiguous, a row stride past the row, a transposed view (no unit stride
    along the row: the operator copies), rows broadcast down (row stride 0), 16-bit, one row, empty."""
    base = torch.randn(7, 40, device=DEVICE)
    xs = [
        base,
        base[:, :33],
        base[:, :9].T,
        base[:1].expand(5, -1),
        base.bfloat16(),
        base[:1, :5].half(),
        base[:0],
        base[:, :0],
    ]
    return [x.detach() for x in xs]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no grad", "requires grad"])
def test_operators_pass_opcheck(requires_grad):
    """torch.library.opcheck: the schema, the fake (shape-only) implementation against the real one, the autograd
    registration, and a trace by AOT autograd with dynamic shapes, forward (and backward where grad is required)."""
    fwd, bwd = T["softmax_fwd_op"], T["softmax_bwd_op"]
    for x in operator_samples():
        torch.library.opcheck(fwd, (x.requires_grad_(requires_grad),))
        y = torch.softmax(x.detach().float(), -1).to(x.dtype)
        # dy as autograd hands it over: contiguous, broadcast from a 0-d (from .sum()), transposed
        for dy in (
            torch.randn_like(y),
            torch.randn((), device=DEVICE, dtype=y.dtype).expand(y.shape),
            torch.randn(y.shape[::-1], device=DEVICE, dtype=y.dtype).T,
        ):
            torch.library.opcheck(bwd, (y, dy))
    x = torch.randn(3, 11, device=DEVICE)
    assert torch.equal(fwd(x), T["softmax"](x, -1)), "the drop-in is the operator on the rows"
    torch.testing.assert_close(fwd(x[:, ::2]), torch.softmax(x[:, ::2], -1))


def test_backward_operator_is_not_differentiable():
    """Its gradient is the refused gradient of a gradient: differentiating it fails, never gives a silent zero."""
    y = torch.softmax(torch.randn(3, 11, device=DEVICE), -1).requires_grad_(True)
    dx = T["softmax_bwd_op"](y, torch.randn_like(y))
    with pytest.raises(RuntimeError, match="no autograd formula"):
        dx.sum().backward()


@pytest.fixture
def page_module(monkeypatch):
    """The page as the module its __name__ names: torch.compile looks the globals of a function it traces up there
    (a reader's notebook is __main__)."""
    page = load_tutorial("01_softmax_backward")
    module = types.ModuleType(page["__name__"])
    module.__dict__.update(page.data)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


@pytest.mark.parametrize("dtype,dim", [(torch.float32, -1), (torch.bfloat16, 0)], ids=str)
def test_compiled_block_matches_eager(page_module, dtype, dim):
    """A linear layer, the drop-in, a loss, compiled in one graph (fullgraph=True: no graph break) with AOT autograd
    (aot_eager: the CPU runs it), against the same block run eagerly, in the loss and the gradients of the layer's
    input and weight; the graph holds the forward operator."""
    from torch._dynamo.testing import CompileCounterWithBackend

    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(12, 16, device=DEVICE, dtype=dtype, generator=gen)
    linear = torch.nn.Linear(16, 24, device=DEVICE, dtype=dtype)
    weight = torch.randn(24, device=DEVICE, dtype=dtype, generator=gen)

    def block(h):
        return (page_module.softmax(linear(h), dim=dim) * weight).sum()

    def run(fn):
        leaf = x.detach().clone().requires_grad_(True)
        linear.zero_grad(set_to_none=True)
        loss = fn(leaf)
        loss.backward()
        return loss.detach(), leaf.grad, linear.weight.grad

    torch._dynamo.reset()
    backend = CompileCounterWithBackend("aot_eager")
    eager, compiled = run(block), run(torch.compile(block, fullgraph=True, backend=backend))
    for what, got, want in zip(("loss", "input's gradient", "weight's gradient"), compiled, eager):
        torch.testing.assert_close(got, want, msg=lambda m, w=what: f"compiled block, {w}: {m}")
    ops = [node.target for graph in backend.graphs for node in graph.graph.nodes]
    assert backend.frame_count == 1 and torch.ops.sol.softmax_fwd_01.default in ops, ops


# Deep dive 13 (tutorials/deep_dives/13_launch_heuristics.py): the carried kernels under both grids.
H = LazyTutorial("13_launch_heuristics")


def test_launch_heuristics_page_carries_the_core_config():
    """Deep dive 13 explains and measures the core page's launch parameters: they must be the same."""
    assert inspect.getsource(H["min_tile_bytes"]) == inspect.getsource(F["min_tile_bytes"])
    assert (H["BYTES_PER_THREAD"], H["LATENCY"]) == (F["BYTES_PER_THREAD"], F["LATENCY"])
    for n in (1, 7, 256, 1000, 4096, 16384, 32768):
        for size in (2, 4):
            assert H["_fused_config"](n, size) == F["_fused_config"](n, size)
    assert (H["MAX_FUSED_N"], H["MAX_FUSED_BWD_N"]) == (F["MAX_FUSED_N"], T["MAX_FUSED_BWD_N"])


@pytest.mark.parametrize("persistent", [False, True], ids=["plain", "persistent"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_persistent_and_plain_grids_write_every_element(persistent, dtype, monkeypatch):
    """A persistent grid (fewer programs than blocks: each walks several) and the plain one give the
    same bits, fused forward and backward and the online forward (forced on short rows, several chunks)."""
    x = torch.randn(37, 1000, device=DEVICE, dtype=dtype) * 3
    for online in (False, True):
        if online:
            monkeypatch.setitem(H["launch"].__globals__, "MAX_FUSED_N", 64)
            monkeypatch.setitem(H["launch"].__globals__, "_online_config", lambda n: dict(BLOCK_N=128, num_warps=4))
        y = torch.full_like(x, math.nan)
        grid = H["run"]("forward", (x, y), persistent)
        blocks = triton_cdiv(37, 1 if online else H["_fused_config"](1000, x.element_size())[0])
        assert (grid < blocks) == persistent or grid == blocks
        assert not y.isnan().any()
        plain = torch.empty_like(x)
        H["run"]("forward", (x, plain), False)
        assert torch.equal(y, plain)
        y64 = torch.softmax(x.double(), -1)
        assert rel_err(y, y64) < TOL[dtype]
    dy, dx = torch.randn_like(x), torch.full_like(x, math.nan)
    H["run"]("backward", (y, dy, dx), persistent)
    y_, dy_ = y.double(), dy.double()
    assert rel_err(dx, y_ * (dy_ - (y_ * dy_).sum(-1, keepdim=True))) < 2 * TOL[dtype]


def triton_cdiv(a, b):
    return -(-a // b)
