"""Tutorial 04's three core pages: tutorials/04_rms_norm.py (the forward's plain and fused kernels, their config),
tutorials/04_rms_norm_backward.py (the backward's kernel on three grids, its config) and
tutorials/04_rms_norm_operator.py (the drop-in, which computes rows past the kernels in torch, and the kernels it
carries). The kernels, and torch past them, against float64, poisoned outputs, bad inputs, determinism, the launch
parameters. Deep dive 41's kernels are tested in test_rms_norm_wide_backward.py."""

import copy
import importlib.util
import inspect
import math
import os
import re
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, load_tutorial

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# a few units of rounding of the output dtype (the interpreter truncates fp32 -> bf16: twice a GPU's error)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def tut():  # the drop-in's page
    return load_tutorial("04_rms_norm_operator")


@pytest.fixture(scope="module")
def bwd():  # the backward's page
    return load_tutorial("04_rms_norm_backward")


@pytest.fixture(scope="module")
def fwd():  # the forward's page
    return load_tutorial("04_rms_norm")


PAGES = ("04_rms_norm", "04_rms_norm_backward", "04_rms_norm_operator")


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def reference(x, normalized_shape, w, eps, dy):
    """float64 y, dx, dw (dw None without a weight)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = None if w is None else w.detach().double().requires_grad_(True)
    y64 = F.rms_norm(x64, normalized_shape, w64, eps)
    grads = torch.autograd.grad(y64, [x64] + ([] if w is None else [w64]), dy.double())
    return y64.detach(), grads[0], (grads[1] if w is not None else None)


def random_case(gen, dtype):
    """A random shape: 1 to 3 leading dims, a row of 1..5000 elements (odd, 1, non-powers of two)."""
    n = (
        int(torch.randint(1, 5000, (1,), generator=gen))
        if torch.rand(1, generator=gen) < 0.8
        else int(torch.tensor([1, 2, 3, 7, 31, 257, 1023, 2049])[torch.randint(0, 8, (1,), generator=gen)])
    )
    lead = [int(d) for d in torch.randint(1, 7, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen)]
    return lead, n


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", range(4))
def test_random_shapes_forward_backward(tut, dtype, seed):
    gen = torch.Generator().manual_seed(100 * seed + DTYPES.index(dtype))
    lead, n = random_case(gen, dtype)
    x = (3 * torch.randn(lead + [n], generator=gen)).to(DEVICE, dtype).requires_grad_(True)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype).requires_grad_(True)
    dy = torch.randn(lead + [n], generator=gen).to(DEVICE, dtype)
    eps = 1e-5
    y = tut["rms_norm"](x, (n,), w, eps)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    y64, dx64, dw64 = reference(x, (n,), w, eps, dy)
    assert y.dtype == dtype and dx.dtype == dtype and dw.dtype == dtype
    assert y.shape == x.shape and dx.shape == x.shape and dw.shape == w.shape
    # n == 1: dx is a difference of nearly equal numbers (see the page); compare to torch instead
    yt = F.rms_norm(x, (n,), w, eps)
    dxt, dwt = torch.autograd.grad(yt, (x, w), dy)
    for name, ours, theirs, ref in [("y", y, yt, y64), ("dx", dx, dxt, dx64), ("dw", dw, dwt, dw64)]:
        bound = max(TOL[dtype], 2 * rel(theirs, ref))
        assert rel(ours, ref) <= bound, f"{name}: shape {lead + [n]} {dtype}: error {rel(ours, ref):.2e} > {bound:.2e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_multidim_normalized_shape_noncontiguous_no_weight(tut, dtype):
    base = torch.randn(6, 5, 9, 4, device=DEVICE, dtype=torch.float32).to(dtype)
    x = base.permute(2, 0, 3, 1)[:, :, ::2, :]  # (9, 6, 2, 5), non-contiguous
    assert not x.is_contiguous()
    x = x.detach().requires_grad_(True)
    dy = torch.randn(x.shape, device=DEVICE).to(dtype)
    y = tut["rms_norm"](x, (2, 5))
    (dx,) = torch.autograd.grad(y, x, dy)
    y64, dx64, _ = reference(x, (2, 5), None, torch.finfo(torch.float32).eps, dy)
    assert y.shape == x.shape and dx.shape == x.shape
    assert rel(y, y64) <= TOL[dtype] and rel(dx, dx64) <= TOL[dtype]


def test_multidim_weight_gradient(tut):
    x = torch.randn(7, 3, 11, device=DEVICE, requires_grad=True)
    w = torch.randn(3, 11, device=DEVICE, requires_grad=True)
    dy = torch.randn(7, 3, 11, device=DEVICE)
    dx, dw = torch.autograd.grad(tut["rms_norm"](x, [3, 11], w, 1e-3), (x, w), dy)
    _, dx64, dw64 = reference(x, (3, 11), w, 1e-3, dy)
    assert dw.shape == (3, 11)
    assert rel(dx, dx64) <= 1e-5 and rel(dw, dw64) <= 1e-5


def test_default_eps_matches_torch(tut):
    # tiny values: the result depends visibly on eps, so a wrong default shows
    x = torch.full((4, 8), 3e-4, device=DEVICE, dtype=torch.bfloat16)
    torch.testing.assert_close(tut["rms_norm"](x, (8,)).float(), F.rms_norm(x, (8,)).float(), atol=0, rtol=1e-2)
    x32 = torch.full((4, 8), 1e-4, device=DEVICE)
    torch.testing.assert_close(tut["rms_norm"](x32, (8,)), F.rms_norm(x32, (8,)), atol=0, rtol=1e-5)


@pytest.mark.parametrize("weight", [True, False])
def test_rows_past_the_fused_kernels_stream_in_chunks(tut, weight):
    """Past the fused rows (a forward row over 64 KB, a backward row over 8 K values) each row streams in chunks with
    deep dive 41's kernels: y, dx and dw against float64, with and without a weight; no rows: dw is 0."""
    fused = tut["fused"]
    assert fused("forward", 16384, 4) and not fused("forward", 16385, 4) and fused("forward", 32768, 2)
    assert not fused("forward", 32769, 2) and fused("backward", 8192, 2) and not fused("backward", 8193, 4)
    for n in (8200, 16400):  # the backward in torch; then the forward too
        x = (3 * torch.randn(3, n, device=DEVICE)).requires_grad_(True)
        w = (torch.randn(n, device=DEVICE) + 1).requires_grad_(True) if weight else None
        dy = torch.randn(3, n, device=DEVICE)
        y = tut["rms_norm"](x, (n,), w, 1e-6)
        grads = torch.autograd.grad(y, [x] + ([w] if weight else []), dy)
        y64, dx64, dw64 = reference(x, (n,), w, 1e-6, dy)
        assert rel(y, y64) <= 1e-5 and rel(grads[0], dx64) <= 1e-5, f"N = {n}"
        assert not weight or rel(grads[1], dw64) <= 1e-5, f"N = {n}"
    x = torch.empty(0, 16400, device=DEVICE, requires_grad=True)
    w = torch.ones(16400, device=DEVICE, requires_grad=True)
    dx, dw = torch.autograd.grad(tut["rms_norm"](x, (16400,), w).sum(), [x, w])
    assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(w))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (37, 33), (9, 1000)])
@pytest.mark.parametrize("weight", [True, False])
def test_poisoned_outputs_fully_written(bwd, fwd, shape, weight):
    """Outputs filled with NaN first: every element must be written, and nothing past the outputs."""
    m, n = shape
    x = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(n, device=DEVICE, dtype=torch.bfloat16) if weight else None
    dy = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    # the forward's output with a padded row stride, the padding as guard: it must stay untouched
    y_store = torch.full((m, n + 3), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    y = y_store[:, :n]
    rstd = torch.full((m,), float("nan"), device=DEVICE)
    kernel, meta, grid = fwd["_fwd_config"](m, n, 2)
    kernel[(grid,)](x, x if w is None else w, y, rstd, m, n, x.stride(0), y.stride(0), 1e-6, HAS_WEIGHT=weight, **meta)
    assert not y.isnan().any() and not rstd.isnan().any()
    assert y_store[:, n:].isnan().all(), "the forward wrote past the end of a row"
    # the backward's rows are contiguous: the buffer past dx as guard
    dx_store = torch.full((m * n + 64,), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    dx = dx_store[: m * n].view(m, n)
    ones = torch.ones(n, device=DEVICE, dtype=torch.bfloat16)
    for step in (0, 1):
        dw = bwd["rms_norm_rows_backward"](x, ones if w is None else w, rstd, dy, dx, step=step)
        assert not dx.isnan().any() and not dw.isnan().any()
        assert dx_store[m * n :].isnan().all(), "the backward wrote past the end of dx"
    y64, dx64, dw64 = reference(x, (n,), w, 1e-6, dy)
    assert rel(y, y64) <= TOL[torch.bfloat16]
    if n > 1:
        assert rel(dx, dx64) <= TOL[torch.bfloat16]
    if weight:
        assert rel(dw, dw64) <= TOL[torch.bfloat16]


def test_dw_bitwise_deterministic(tut):
    x = torch.randn(300, 384, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(384, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(300, 384, device=DEVICE, dtype=torch.bfloat16)
    runs = [torch.autograd.grad(tut["rms_norm"](x, (384,), w), (x, w), dy) for _ in range(3)]
    for dx, dw in runs[1:]:
        assert torch.equal(dx, runs[0][0]) and torch.equal(dw, runs[0][1])


def test_steps_agree(bwd):
    """Step 0 (a row a program) and step 1 (the persistent grid, several blocks a program): dx within a rounding of
    each other, dw from different partials, each against float64."""
    x = torch.randn(700, 40, device=DEVICE)
    w = torch.randn(40, device=DEVICE)
    dy = torch.randn(700, 40, device=DEVICE)
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    _, dx64, dw64 = reference(x, (40,), w, 1e-6, dy)
    meta, grid = bwd["_bwd_config"](700, 40, 4)[1:]
    assert grid < math.ceil(700 / meta["BLOCK_M"]) or DEVICE == "cuda"  # several blocks a program on the CPU
    dxs = []
    for step in (0, 1):
        dx = torch.full_like(x, float("nan"))
        dw = bwd["rms_norm_rows_backward"](x, w, rstd, dy, dx, step=step)
        assert rel(dw, dw64) <= 1e-5 and rel(dx, dx64) <= 1e-5, f"step {step}"
        dxs.append(dx)
    assert torch.allclose(dxs[0], dxs[1], rtol=1e-6, atol=1e-6)


def test_configs_keep_todays_launch_parameters(bwd, fwd):
    """The launch parameters the config functions choose: the forward's tiles of min_tile_bytes() (4 KB with no device
    to read) at 128 bytes a thread; the backward's 16-bit as tuned on an H100, but for rows of 2 KB or less: tiles of
    2 KB on 4 warps, 8 programs an SM (measured faster on an H200); its fp32 blocks of 8192 values, 16 warps, one
    program an SM, as measured fastest on an H200."""
    tile_bytes = fwd["min_tile_bytes"]()
    fwd, bwd, sms = fwd["_fwd_config"], bwd["_bwd_config"], bwd["NUM_SMS"]
    rows = tile_bytes // (512 * 2)
    assert fwd(1000, 512, 2)[1:] == (dict(BLOCK_M=rows, BLOCK_N=512, num_warps=4), -(-1000 // rows))
    assert fwd(64, 16384, 4)[1] == dict(BLOCK_M=1, BLOCK_N=16384, num_warps=16)
    assert fwd(64, 32768, 2)[1] == dict(BLOCK_M=1, BLOCK_N=32768, num_warps=16)
    assert bwd(2**17, 512, 2)[1:] == (dict(BLOCK_M=2, BLOCK_N=512, num_warps=4), 8 * sms)
    assert bwd(2**16, 1024, 2)[1:] == (dict(BLOCK_M=1, BLOCK_N=1024, num_warps=4), 8 * sms)
    assert bwd(2**15, 2048, 2)[1:] == (dict(BLOCK_M=2, BLOCK_N=2048, num_warps=8), 2 * sms)
    assert bwd(2**17, 512, 4)[1:] == (dict(BLOCK_M=16, BLOCK_N=512, num_warps=16), sms)
    assert bwd(2**14, 4096, 4)[1:] == (dict(BLOCK_M=2, BLOCK_N=4096, num_warps=16), sms)
    assert bwd(2**13, 8192, 4)[1:] == (dict(BLOCK_M=1, BLOCK_N=8192, num_warps=32), sms)
    assert bwd(2**14, 4096, 2)[1:] == (dict(BLOCK_M=1, BLOCK_N=4096, num_warps=8), 2 * sms)
    assert bwd(2**13, 8192, 2)[1] == dict(BLOCK_M=1, BLOCK_N=8192, num_warps=32)


def test_empty_tensors(tut):
    x = torch.randn(0, 16, device=DEVICE, requires_grad=True)
    w = torch.randn(16, device=DEVICE, requires_grad=True)
    y = tut["rms_norm"](x, (16,), w)
    assert y.shape == (0, 16)
    dx, dw = torch.autograd.grad(y, (x, w), torch.empty(0, 16, device=DEVICE))
    assert dx.shape == (0, 16) and torch.equal(dw, torch.zeros(16, device=DEVICE))
    assert tut["rms_norm"](torch.randn(4, 0, device=DEVICE), (0,)).shape == (4, 0)


def test_gradient_through_sum_and_weight_only(tut):
    """dy from .sum() has stride 0; a weight-only gradient skips dx's consumer."""
    x = torch.randn(5, 24, device=DEVICE)
    w = torch.randn(24, device=DEVICE, requires_grad=True)
    tut["rms_norm"](x, (24,), w).sum().backward()
    w64 = w.detach().double().requires_grad_(True)
    F.rms_norm(x.double(), (24,), w64).sum().backward()
    assert rel(w.grad, w64.grad) <= 1e-5


def test_mixed_weight_dtype(tut):
    x = torch.randn(6, 40, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(40, device=DEVICE, dtype=torch.float32, requires_grad=True)
    y = tut["rms_norm"](x, (40,), w)
    assert y.dtype == torch.bfloat16
    dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
    assert dx.dtype == torch.bfloat16 and dw.dtype == torch.float32


def test_bad_inputs_raise(tut):
    rms_norm = tut["rms_norm"]
    x = torch.randn(4, 8, device=DEVICE)
    with pytest.raises(TypeError, match="dtype"):
        rms_norm(torch.ones(4, 8, dtype=torch.int32, device=DEVICE), (8,))
    with pytest.raises(TypeError, match="dtype"):
        rms_norm(x.double(), (8,))
    with pytest.raises(ValueError, match="normalized_shape"):
        rms_norm(x, (4,))
    with pytest.raises(ValueError, match="normalized_shape"):
        rms_norm(x, (2, 4, 8))
    with pytest.raises(ValueError, match="at least one"):
        rms_norm(x, ())
    with pytest.raises(ValueError, match="weight has shape"):
        rms_norm(x, (8,), torch.ones(7, device=DEVICE))
    with pytest.raises(TypeError, match="weight"):
        rms_norm(x, (8,), torch.ones(8, dtype=torch.int64, device=DEVICE))
    with pytest.raises(TypeError, match="tuple of ints"):
        rms_norm(x, (8.0,))
    with pytest.raises(TypeError, match="eps"):
        rms_norm(x, (8,), None, "0.1")
    with pytest.raises(TypeError, match="torch.Tensor"):
        rms_norm([[1.0, 2.0]], (2,))
    if DEVICE == "cuda":
        with pytest.raises(ValueError, match="cuda"):
            rms_norm(torch.randn(4, 8), (8,))
    else:
        meta = torch.randn(4, 8, device="meta")
        with pytest.raises(ValueError, match="CPU"):
            rms_norm(meta, (8,))


def test_the_forward_launches_by_the_fused_softmax_pages_model(fwd):
    """04 sizes its tiles as 01 does: 01's min_tile_bytes letter for letter, its constants."""
    core = load_tutorial("01_fused_softmax")
    assert inspect.getsource(fwd["min_tile_bytes"]) == inspect.getsource(core["min_tile_bytes"])
    for name in ("BYTES_PER_THREAD", "LATENCY"):
        assert fwd[name] == core[name], name


def test_the_drop_ins_page_carries_the_kernels_letter_for_letter(tut, fwd, bwd):
    """04_rms_norm_operator runs the forward that 04_rms_norm teaches and the backward that 04_rms_norm_backward
    teaches: the same kernels, configs, launchers and constants; the backward page's constants are the forward's."""
    for name, page in (("rms_norm_fwd_kernel", fwd), ("rms_norm_bwd_kernel", bwd)):
        assert inspect.getsource(tut[name].fn) == inspect.getsource(page[name].fn), name
    for name, page in [(n, fwd) for n in ("min_tile_bytes", "_fwd_config", "rms_norm_rows_forward")] + [
        (n, bwd) for n in ("_warps", "_bwd_config", "rms_norm_rows_backward")
    ]:
        assert inspect.getsource(tut[name]) == inspect.getsource(page[name]), name
    for name in ("BYTES_PER_THREAD", "LATENCY", "MAX_ROW_BYTES"):
        assert tut[name] == fwd[name], name
    assert tut["MIN_ELEMENTS"] == bwd["MIN_ELEMENTS"] and tut["NUM_SMS"] == bwd["NUM_SMS"]
    for n, size in ((16384, 4), (16385, 4), (32768, 2), (32769, 2)):  # the drop-in's forward: the rows step 1 holds
        assert tut["fused"]("forward", n, size) == (n * size <= fwd["MAX_ROW_BYTES"]), (n, size)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_steps_match_float64(fwd, dtype):
    """The forward page's step 0 (a row a program, contiguous rows) and step 1 (a tile of rows, here read with a row
    stride past the row and written with another, with and without a weight) against float64: every element of y and
    rstd written (outputs start as NaN), nothing written between rows."""
    for n in (1, 7, 257, 4096):
        gen = torch.Generator().manual_seed(n)
        x = (3 * torch.randn(37, n + 5, generator=gen)).to(DEVICE, dtype)[:, :n]
        w = (1 + 0.5 * torch.randn(n, generator=gen)).to(DEVICE, dtype)
        for step, launch, weight in (
            (0, "plain_forward", w),
            (1, "rms_norm_rows_forward", w),
            (1, "rms_norm_rows_forward", None),
        ):
            rows = x.contiguous() if step == 0 else x  # step 0 takes contiguous rows
            out = torch.full((37, n + 8), math.nan, device=DEVICE, dtype=dtype)
            y = out[:, :n] if step else torch.full_like(rows, math.nan)
            rstd = torch.full((37,), math.nan, device=DEVICE)
            fwd[launch](rows, weight, y, rstd, 1e-6)
            where = f"step {step}, N = {n}, weight {weight is not None}"
            assert step == 0 or out[:, n:].isnan().all(), f"{where}: written between rows"
            assert not y.isnan().any() and not rstd.isnan().any(), f"{where}: an element left unwritten"
            y64 = F.rms_norm(x.double(), (n,), None if weight is None else weight.double(), 1e-6)
            r64 = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
            assert rel(y, y64) <= TOL[dtype], f"{where}: y's error {rel(y, y64):.2e}"
            assert rel(rstd, r64) <= 1e-6, f"{where}: rstd's error {rel(rstd, r64):.2e}"


def test_forward_page_measures_past_its_rows_as_the_drop_in_computes(fwd, tut):
    """The forward page's "ours" in its benchmark: step 1 on the rows it holds whole, past MAX_ROW_BYTES deep dive 41's
    chunked forward, the drop-in's own there: the same bits."""
    for n in (300, fwd["MAX_ROW_BYTES"] // 4 + 16):
        x = 3 * torch.randn(3, n, device=DEVICE)
        w = torch.rand(n, device=DEVICE) + 0.5
        y64 = F.rms_norm(x.double(), (n,), w.double(), fwd["EPS"])
        y = fwd["ours"](x, w)
        assert rel(y, y64) <= 1e-6, f"N = {n}"
        if n * 4 > fwd["MAX_ROW_BYTES"]:
            assert torch.equal(y, tut["rms_norm"](x, (n,), w, fwd["EPS"])), f"N = {n}: not the drop-in's bits"


def test_the_pages_carry_deep_dive_41s_chunked_kernels_letter_for_letter(fwd, tut):
    """Rows past MAX_ROW_BYTES: the forward page and the drop-in run deep dive 41's forward at its launch; past 8 K
    values the drop-in's backward runs 41's chunked backward and its sum of the dw partials."""
    import inspect

    dive = load_tutorial("41_rms_norm_wide_backward")
    kernel = inspect.getsource(dive["rms_norm_fwd_chunked_kernel"].fn)
    config = inspect.getsource(dive["_fwd_config"]).split("\n", 1)[1]  # its body: the pages name it _fwd_config_chunked
    for page in (fwd, tut):
        assert inspect.getsource(page["rms_norm_fwd_chunked_kernel"].fn) == kernel
        assert inspect.getsource(page["_fwd_config_chunked"]).split("\n", 1)[1] == config
        assert inspect.getsource(page["_warps"]) == inspect.getsource(dive["_warps"])
    assert inspect.getsource(fwd["chunked_forward"]) == inspect.getsource(tut["chunked_forward"])
    for name in ("rms_norm_bwd_chunked_kernel", "dw_reduce_kernel"):  # the drop-in's backward past 8 K values
        assert inspect.getsource(tut[name].fn) == inspect.getsource(dive[name].fn), name
    assert inspect.getsource(tut["_chunked_config"]) == inspect.getsource(dive["_chunked_config"])


@pytest.mark.parametrize("n", [1, 7, 256, 300, 4096])
def test_ladder_step_0_matches_float64(bwd, n):
    """The ladder's step 0 (a program a row on 4 warps, M dw partials summed in order) against float64, outputs
    poisoned first: it is timed against the drop-in's launch, so it must compute the same dx and dw."""
    x = torch.randn(37, n, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(n, device=DEVICE, dtype=torch.bfloat16)
    dy = torch.randn(37, n, device=DEVICE, dtype=torch.bfloat16)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    dx = torch.full_like(x, float("nan"))
    dw = bwd["rms_norm_rows_backward"](x, w, rstd, dy, dx, step=0)
    _, dx64, dw64 = reference(x, (n,), w, 1e-6, dy)
    assert rel(dw, dw64) <= TOL[torch.bfloat16], f"N = {n}: dw error {rel(dw, dw64):.2e}"
    if n > 1:  # at N = 1 dx is a difference of nearly equal numbers
        assert rel(dx, dx64) <= TOL[torch.bfloat16], f"N = {n}: dx error {rel(dx, dx64):.2e}"


# each page: the direction it benchmarks, its ladder's steps, the columns of its errors' table
MEASURED = {
    "04_rms_norm": ("forward", {0, 1}, ["step 0", "step 1", "torch"]),
    "04_rms_norm_backward": ("backward", {0, 1}, ["step 0", "step 1", "torch"]),
    "04_rms_norm_operator": ("forward+backward", None, ["y", "dx", "dw"]),  # no ladder: the drop-in
}


@pytest.mark.parametrize("stem", PAGES)
def test_tutorial_checked_and_measured(stem):
    page = load_tutorial(stem)
    direction, steps, columns = MEASURED[stem]
    errors, results = page["errors"], page["results"]
    assert len(errors) == len(page["CHECK_SHAPES"]) * 3 and list(errors.columns) == ["shape", "dtype", *columns]
    ours = results[results.provider == "ours"]
    assert len(ours) == 2 * len(page["SWEEP_N"]) and set(results.direction) == {direction}
    assert (ours["GB/s"] > 0).all() and ours["% of speed of light"].notna().all()
    if steps is not None:
        ladder = page["ladder"]
        assert list(ladder.columns) == ["step", "idea", "N", "GB/s", "% of light"] and set(ladder.step) == steps
        assert (ladder["GB/s"] > 0).all() and list(ladder.step) == sorted(ladder.step)
    else:
        assert "ladder" not in page.data
    assert math.isclose(page["TOTAL_ELEMENTS"], 2**26) or DEVICE == "cpu"
    assert set(page["RANGE"]) == {(direction, "float32"), (direction, "bfloat16")}, "a page claims what it measures"


def _fwd_samples():
    """(x, w, eps) for the forward operator: with and without a weight and requires_grad, rows with a row stride,
    transposed rows, no rows."""
    x = torch.randn(5, 7, device=DEVICE)
    padded = torch.randn(5, 10, device=DEVICE)[:, :7]
    w = torch.randn(7, device=DEVICE) + 1
    return [
        (x, w, 1e-6),
        (x, None, 1e-6),
        (x.clone().requires_grad_(), w.clone().requires_grad_(), 1e-3),
        (x.clone().requires_grad_(), None, 0.0),
        (padded.requires_grad_(), w, 1e-6),
        (torch.randn(7, 5, device=DEVICE).T, w.clone().requires_grad_(), 1e-6),
        (torch.randn(0, 7, device=DEVICE, requires_grad=True), w, 1e-6),
    ]


def test_forward_operator_passes_opcheck(tut):
    """Schema, fake (shapes without running the kernels), autograd registration, and a compiled graph's run."""
    for args in _fwd_samples():
        torch.library.opcheck(tut["rms_norm_fwd_op"], args)


def test_backward_operator_passes_opcheck(tut):
    x, w = torch.randn(5, 7, device=DEVICE), torch.randn(7, device=DEVICE) + 1
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    dys = [
        torch.randn(5, 7, device=DEVICE),
        torch.tensor(1.0, device=DEVICE).expand(5, 7),  # stride 0: from .sum()
        torch.randn(7, 5, device=DEVICE).T,
    ]
    op = tut["rms_norm_bwd_op"]
    for dy in dys:
        for weight, compute_dw in [(w, True), (w, False), (None, False), (None, True)]:
            torch.library.opcheck(op, (x, weight, rstd, dy, compute_dw))
    empty = torch.empty(0, 7, device=DEVICE)
    torch.library.opcheck(op, (empty, w, torch.empty(0, device=DEVICE), empty, True))
    dx, dw = op(empty, w, torch.empty(0, device=DEVICE), empty, True)
    assert dx.shape == (0, 7) and torch.equal(dw, torch.zeros_like(w)), "no rows: dw is a sum over none"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("normalized_shape,affine", [((16,), True), ((16,), False), ((2, 8), True)], ids=str)
def test_compiled_block_keeps_the_drop_in(tut, monkeypatch, dtype, normalized_shape, affine):
    """A linear layer, rms_norm and a loss compiled with fullgraph=True (no graph break) against the same block run
    eagerly, in the loss and in the gradients of the input, the layer's weight and the norm's weight."""
    # Dynamo reads the page's globals through its module name; a page run by the tests is not a module
    module = types.ModuleType(tut.data["__name__"])
    module.__dict__.update(tut.data)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 3, 12, generator=gen).to(DEVICE, dtype)
    linear = torch.nn.Linear(12, 16, device=DEVICE, dtype=dtype)
    w = (torch.rand(normalized_shape, generator=gen) + 0.5).to(DEVICE, dtype) if affine else None
    c = torch.randn(6, 3, *normalized_shape, generator=gen).to(DEVICE)  # a loss that rms_norm does not flatten
    rms_norm = tut["rms_norm"]

    def block(x, w):
        return (rms_norm(linear(x).reshape(c.shape), normalized_shape, w, 1e-5).float() * c).sum()

    def run(fn):
        leaves = [x.clone().requires_grad_()] + ([] if w is None else [w.clone().requires_grad_()])
        linear.zero_grad(set_to_none=True)
        loss = fn(leaves[0], leaves[1] if affine else None)
        loss.backward()
        return [loss.detach(), linear.weight.grad] + [t.grad for t in leaves]

    torch._dynamo.reset()
    eager, compiled = run(block), run(torch.compile(block, fullgraph=True, backend="aot_eager"))
    torch._dynamo.reset()
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-3}
    for name, got, want in zip(
        ["loss", "linear weight's gradient", "input's gradient", "norm weight's gradient"], compiled, eager
    ):
        torch.testing.assert_close(got, want, **tol, msg=lambda m, name=name: f"{name}: {m}")
    # and the eager block against float64: the comparison above is not of two wrong answers
    linear64 = copy.deepcopy(linear).double()
    h64 = linear64(x.double()).reshape(c.shape)
    loss64 = (F.rms_norm(h64, normalized_shape, None if w is None else w.double(), 1e-5) * c.double()).sum()
    assert rel(eager[1], torch.autograd.grad(loss64, linear64.weight)[0]) <= 2 * TOL[dtype], "eager against float64"


@pytest.mark.parametrize("stem", PAGES)
def test_missing_peers_are_named_with_their_reason(stem, monkeypatch, capsys):
    page = load_tutorial(stem)
    peer_module = page["peer_module"]  # the page's later cells may run now, printing their own lines
    capsys.readouterr()
    monkeypatch.setitem(page.data, "ON_GPU", False)
    assert peer_module("torch.compile", "torch") is None
    assert capsys.readouterr().out == "torch.compile: not measured here (no GPU).\n"
    assert peer_module("Liger-Kernel", "no_such_package_here.ops") is None
    assert capsys.readouterr().out == "Liger-Kernel: not measured here (not installed).\n"
    monkeypatch.setitem(page.data, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (8, 6))
    assert peer_module("quack", "torch", min_major=9) is None
    assert (
        capsys.readouterr().out
        == "quack: not measured here (needs compute capability 9.0 or newer; this GPU has 8.6).\n"
    )
    assert peer_module("Liger-Kernel", "torch.no_such_module") is None  # installed, yet it does not load
    assert (
        capsys.readouterr().out
        == "Liger-Kernel: not measured here (ModuleNotFoundError: No module named 'torch.no_such_module').\n"
    )
    assert peer_module("torch.compile", "torch.nn.functional") is F and capsys.readouterr().out == ""


@pytest.mark.skipif(DEVICE != "cpu", reason="the page's run without a GPU")
@pytest.mark.parametrize("stem", PAGES)
def test_cpu_run_measures_no_speed_and_says_so(stem, monkeypatch):
    """Run alone as the build runs it: it exits 0, shows the ladder's steps without their times, prints the one line
    in place of the benchmark's table and its reading, names each peer it leaves out and why, and prints no speed
    and no empty line."""
    env = {k: v for k, v in os.environ.items() if k not in ("SOL_RESULTS", "SOL_LOCK")} | {"MPLBACKEND": "Agg"}
    tut = load_tutorial(stem)
    proc = subprocess.run([sys.executable, str(tut.path)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines.count(tut["NO_SPEED"]) == 2 and all(lines), lines
    for peer, package in (("torch.compile", "torch"), ("Liger-Kernel", "liger_kernel"), ("quack", "quack")):
        why = "not installed" if importlib.util.find_spec(package) is None else "no GPU"
        assert f"{peer}: not measured here ({why})." in lines, lines
    assert not re.search(r"GB/s|% of the copy|as fast as|best peer", proc.stdout), proc.stdout
    if MEASURED[stem][1] is not None:
        shown = tut["show_ladder"](tut["ladder"]).data
        assert list(shown.columns) == ["step", "idea", "N"] and set(shown.step) == MEASURED[stem][1]
    monkeypatch.delenv("SOL_LOCK", raising=False)
    assert "<td>not pinned</td>" in tut["environment_card"]()._repr_html_()
