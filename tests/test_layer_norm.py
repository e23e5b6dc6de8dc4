"""Tutorial 02 (layer norm: 02_layer_norm, the forward; 02_layer_norm_backward, the backward; 02_layer_norm_drop_in,
the operators and the drop-in, both kernels carried): forward and backward against float64, poisoned outputs, bad
inputs, determinism of the persistent backward. Without a CUDA GPU the kernels run through Triton's interpreter, so the
sizes stay small."""

import copy
import inspect
import math
import os
import random
import re
import subprocess
import sys
import types

import pytest
import torch

from conftest import DEVICE, load_tutorial

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# A few units of rounding of the output dtype (the interpreter truncates fp32 -> bf16: twice a GPU's).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def ln():  # the drop-in's page
    return load_tutorial("02_layer_norm_drop_in")


@pytest.fixture(scope="module")
def bwd():  # the backward's page
    return load_tutorial("02_layer_norm_backward")


@pytest.fixture(scope="module")
def fwd():  # the forward's page
    return load_tutorial("02_layer_norm")


@pytest.mark.parametrize("carrier", ["02_layer_norm_backward", "02_layer_norm_drop_in"])
def test_the_later_pages_carry_the_forward_letter_for_letter(carrier, fwd):
    """The backward's and the drop-in's pages run the forward that 02_layer_norm teaches: the same kernel, config and
    launcher."""
    page = load_tutorial(carrier)
    for kernel in ("layer_norm_fwd_kernel", "layer_norm_fwd_chunked_kernel"):
        assert inspect.getsource(page[kernel].fn) == inspect.getsource(fwd[kernel].fn), kernel
    for name in ("_fwd_config", "layer_norm_rows_forward", "min_tile_bytes", "chunked_rows_forward"):
        assert inspect.getsource(page[name]) == inspect.getsource(fwd[name]), name
    for name in ("MAX_FUSED_N", "LATENCY"):
        assert page[name] == fwd[name], name


def test_the_forward_sizes_its_tiles_as_the_softmax_page_does(fwd):
    """02's min_tile_bytes is the fused softmax page's, letter for letter, with the same latency."""
    core = load_tutorial("01_fused_softmax")
    assert inspect.getsource(fwd["min_tile_bytes"]) == inspect.getsource(core["min_tile_bytes"])
    assert fwd["LATENCY"] == core["LATENCY"]


def test_the_drop_ins_page_carries_the_backward_and_the_backward_page_its_operators(ln, bwd):
    """02_layer_norm_drop_in runs the backward that 02_layer_norm_backward teaches (kernel, config, launcher); the
    backward page times the drop-in's operators, carried letter for letter (their names apart: one name an operator)."""
    assert inspect.getsource(ln["layer_norm_bwd_kernel"].fn) == inspect.getsource(bwd["layer_norm_bwd_kernel"].fn)
    for name in ("_bwd_config", "layer_norm_rows_backward", "torch_rows_backward", "_rows_and_cols", "_rows"):
        assert inspect.getsource(ln[name]) == inspect.getsource(bwd[name]), name
    for name in ("MAX_BWD_FUSED_N", "NUM_SMS", "SMEM_PER_BLOCK", "SMEM_PER_SM", "IN_FLIGHT"):
        assert ln[name] == bwd[name], name
    for name in ("layer_norm_fwd_fake", "layer_norm_bwd_fake", "_setup", "_backward", "layer_norm"):
        assert inspect.getsource(ln[name]) == inspect.getsource(bwd[name]), name
    for op in ("layer_norm_fwd_op", "layer_norm_bwd_op"):
        theirs = inspect.getsource(bwd[op]._init_fn).replace("_02", "_02_drop_in")
        assert inspect.getsource(ln[op]._init_fn) == theirs, op


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_forward_kernel(fwd, dtype):
    """The ladder's step 0 (the plain kernel, one row a program) against float64, rows of odd and even length: every
    element written."""
    for n in (1, 257, 1000, 1024):
        torch.manual_seed(n)
        x, w, b = (torch.randn(s, device=DEVICE, dtype=dtype) for s in ((5, n), n, n))
        y = torch.full_like(x, math.nan)
        fwd["plain_forward"](x, y, w, b)
        ref = ref_layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        assert not y.isnan().any() and rel_error(y, ref) < 2 * TOL[dtype]


def test_forward_page_checks_passed(fwd):
    """The forward page's tables: its check ran (it asserts), each provider's forward recorded, steps 0 and 1."""
    table = fwd["table"]  # a row a point (direction, dtype, N), a column a provider
    assert set(table.index.get_level_values("direction")) == {"forward"} and len(table) == 2 * len(fwd["SWEEP_N"])
    assert {"speed of light", "torch", "ours", "ours, % of light"} <= set(table.columns)
    assert sorted(set(fwd["ladder"]["step"])) == [0, 1]


def ref_layer_norm(x, normalized_shape, weight, bias, eps):
    """The textbook formula over the trailing dims (exact zeros where N = 1); float64 in, float64 out."""
    dims = tuple(range(-len(normalized_shape), 0))
    mean = x.mean(dims, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dims, keepdim=True)
    y = xc * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rel_error(out, ref):
    out, ref = out.double(), ref.double()
    norm = ref.norm()
    return ((out - ref).norm() / (norm if norm > 0 else 1.0)).item()


def check_against_float64(fn, x, normalized_shape, weight, bias, eps, dtype, what=""):
    """Run fn forward and backward; compare y, dx, dw, db with the float64 reference."""
    leaves = [t for t in (x, weight, bias) if t is not None and t.requires_grad]
    y = fn(x, normalized_shape, weight, bias, eps)
    assert y.shape == x.shape and y.dtype == x.dtype, f"{what}: output {y.shape} {y.dtype}"
    dy = torch.randn(x.shape, device=DEVICE, dtype=dtype)
    grads = torch.autograd.grad(y, leaves, dy) if leaves else []
    ins64 = [None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in (x, weight, bias)]
    y64 = ref_layer_norm(ins64[0], normalized_shape, ins64[1], ins64[2], eps)
    leaves64 = [t for t in ins64 if t is not None and t.requires_grad]
    grads64 = torch.autograd.grad(y64, leaves64, dy.double()) if leaves64 else []
    err = rel_error(y, y64.detach())
    assert err <= TOL[dtype], f"{what}: forward error {err:.2e} > {TOL[dtype]:.0e}"
    # dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) cancels almost entirely for tiny rows (N = 2):
    # its error is measured against the size of the terms that cancel, rstd * g, not against dx itself.
    dims = tuple(range(-len(normalized_shape), 0))
    x64 = ins64[0].detach()
    rstd = torch.rsqrt(((x64 - x64.mean(dims, keepdim=True)) ** 2).mean(dims, keepdim=True) + eps)
    g_scaled = dy.double() * rstd * (1 if weight is None else ins64[1].detach())
    for g, g64, t in zip(grads, grads64, leaves):
        assert g.shape == t.shape and g.dtype == t.dtype, f"{what}: gradient {g.shape} {g.dtype} for {t.shape}"
        assert torch.isfinite(g).all(), f"{what}: non-finite gradient"
        if t is x:
            scale = max(g64.norm().item(), g_scaled.norm().item())
            err = (g.double() - g64).norm().item() / (scale if scale > 0 else 1.0)
        else:
            err = rel_error(g, g64)
        assert err <= TOL[dtype], f"{what}: gradient error {err:.2e} > {TOL[dtype]:.0e} (shape {tuple(t.shape)})"


def random_case(rng, dtype):
    """A random shape: 1-3 leading dims, 1-2 normalized dims, odd sizes, optional weight/bias."""
    k = rng.choice([1, 1, 2])
    norm = [rng.choice([1, 2, 3, 7, 31, 64, 100, 257, 640, 1000, 1500]) for _ in range(k)]
    if math.prod(norm) > 3000:
        norm = norm[:1]
    lead = [rng.choice([1, 2, 3, 5, 17]) for _ in range(rng.choice([0, 1, 2]))]
    x = (torch.randn(lead + norm, device=DEVICE) * rng.choice([1, 3]) + rng.choice([0, 5])).to(dtype)
    w = torch.randn(norm, device=DEVICE).to(dtype) if rng.random() < 0.8 else None
    b = torch.randn(norm, device=DEVICE).to(dtype) if rng.random() < 0.8 else None
    return x, tuple(norm), w, b


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_random_shapes_match_float64(ln, dtype):
    rng = random.Random(1234 + DTYPES.index(dtype))
    torch.manual_seed(5)
    for i in range(12):
        x, norm, w, b = random_case(rng, dtype)
        for t in (x, w, b):
            if t is not None:
                t.requires_grad_(True)
        check_against_float64(
            ln["layer_norm"],
            x,
            norm,
            w,
            b,
            1e-5,
            dtype,
            what=f"case {i}: x {tuple(x.shape)}, normalized {norm}, weight {w is not None}, bias {b is not None}",
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_non_contiguous_inputs_and_gradient(ln, dtype):
    torch.manual_seed(1)
    base = torch.randn(40, 2 * 96, device=DEVICE, dtype=dtype)
    x = base[::2, ::2].detach().requires_grad_(True)  # strided rows and columns
    assert not x.is_contiguous()
    w = torch.randn(96, device=DEVICE, dtype=dtype)[None].expand(3, 96)[1].requires_grad_(True)
    b = torch.randn(2 * 96, device=DEVICE, dtype=dtype)[::2].detach().requires_grad_(True)
    check_against_float64(ln["layer_norm"], x, (96,), w, b, 1e-5, dtype, what="strided x, w, b")
    xt = torch.randn(33, 20, device=DEVICE, dtype=dtype).t().detach().requires_grad_(True)  # transposed
    check_against_float64(ln["layer_norm"], xt, (33,), None, None, 1e-3, dtype, what="transposed x")
    # y.sum().backward() hands the backward an expanded dy (all strides 0)
    x2 = torch.randn(7, 50, device=DEVICE, dtype=dtype, requires_grad=True)
    w2 = torch.randn(50, device=DEVICE, dtype=dtype, requires_grad=True)
    ln["layer_norm"](x2, 50, w2).float().sum().backward()
    x64, w64 = x2.detach().double().requires_grad_(True), w2.detach().double().requires_grad_(True)
    ref_layer_norm(x64, (50,), w64, None, 1e-5).sum().backward()
    assert rel_error(x2.grad, x64.grad) <= TOL[dtype] * 10, "dx with an expanded gradient"
    assert rel_error(w2.grad, w64.grad) <= TOL[dtype], "dw with an expanded gradient"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_torch_path_past_the_kernels_matches_float64(ln, dtype):
    """Rows past MAX_FUSED_N (forward) and MAX_BWD_FUSED_N (backward) are computed with torch: every output
    written (poisoned beforehand), against float64, with a large mean."""
    torch.manual_seed(2)
    nan = float("nan")
    for n in (ln["MAX_BWD_FUSED_N"] + 123, ln["MAX_FUSED_N"] + 123):
        x = (torch.randn(3, n, device=DEVICE) * 2 + 50).to(dtype)
        w, b = torch.randn(n, device=DEVICE).to(dtype), torch.randn(n, device=DEVICE).to(dtype)
        dy = torch.randn(3, n, device=DEVICE, dtype=dtype)
        y, mean, rstd = (
            torch.full_like(x, nan),
            torch.full((3,), nan, device=DEVICE),
            torch.full((3,), nan, device=DEVICE),
        )
        used = ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        assert (used is ln["layer_norm_fwd_chunked_kernel"]) == (n > ln["MAX_FUSED_N"]), f"N = {n}: {used}"
        dx, dwdb = torch.full_like(x, nan), torch.full((2, n), nan, device=DEVICE)
        assert ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dwdb) == 0, "the backward's torch path"
        dw, db = dwdb
        ins = [t.double().requires_grad_(True) for t in (x, w, b)]
        y64 = ref_layer_norm(ins[0], (n,), ins[1], ins[2], 1e-5)
        g64 = torch.autograd.grad(y64, ins, dy.double())
        for name, out, ref in (("y", y, y64.detach()), ("dx", dx, g64[0]), ("dw", dw, g64[1]), ("db", db, g64[2])):
            assert torch.isfinite(out).all(), f"N = {n}, {name}: some elements were never written"
            assert rel_error(out, ref) <= TOL[dtype], f"N = {n}, {name}: error {rel_error(out, ref):.2e}"
        xf = x.double()
        assert torch.allclose(mean.double(), xf.mean(1), rtol=1e-5, atol=1e-4), f"N = {n}: mean"
        assert torch.allclose(rstd.double(), 1 / (xf.var(1, unbiased=False) + 1e-5).sqrt(), rtol=1e-4), f"N = {n}: rstd"


@pytest.mark.parametrize("shape", [(37, 100), (5, 1), (3, 5000), (1, 3)])
def test_forward_writes_every_element(ln, shape):
    """Outputs poisoned with NaN beforehand; the forward kernel must overwrite all of them, on rows with a padded
    stride, with and without w and b."""
    torch.manual_seed(3)
    m, n = shape
    x = (torch.randn(m, n + 7, device=DEVICE) * 3 + 20)[:, :n]  # row stride n + 7
    w, b = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    for wb in ((w, b), (w, None), (None, None)):
        y = torch.full_like(x, float("nan"))
        mean = torch.full((m,), float("nan"), device=DEVICE)
        rstd = torch.full_like(mean, float("nan"))
        ln["layer_norm_rows_forward"](x, y, *wb, mean, rstd, 1e-5)
        what = f"{m} x {n}, w={wb[0] is not None}, b={wb[1] is not None}"
        assert torch.isfinite(y).all() and torch.isfinite(mean).all() and torch.isfinite(rstd).all(), (
            what + ": some outputs were never written"
        )
        ref = ref_layer_norm(x.double(), (n,), *(t if t is None else t.double() for t in wb), 1e-5)
        assert rel_error(y, ref) <= 1e-5, what
        xf = x.double()
        assert torch.allclose(mean.double(), xf.mean(1), rtol=1e-6, atol=1e-5), what + ": mean"
        assert torch.allclose(rstd.double(), 1 / (xf.var(1, unbiased=False) + 1e-5).sqrt(), rtol=1e-4), what + ": rstd"


def test_backward_writes_every_element(ln, monkeypatch):
    """dx, dw, db and every scratch buffer torch.empty makes are poisoned with NaN before the backward."""
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    torch.manual_seed(4)
    for m, n, programs in [(37, 100, None), (37, 100, 5), (10, 3, 3), (9, 700, 4), (64, 1, None), (3, 8200, None)]:
        x = torch.randn(m, n, device=DEVICE)
        w = torch.randn(n, device=DEVICE)
        dy = torch.randn(m, n, device=DEVICE)
        y, mean, rstd = torch.empty_like(x), real_empty(m, device=DEVICE), real_empty(m, device=DEVICE)
        ln["layer_norm_rows_forward"](x, y, w, None, mean, rstd, 1e-5)
        monkeypatch.setattr(torch, "empty", poisoned_empty)
        dx, dwdb = torch.empty_like(x).fill_(float("nan")).to(DEVICE), torch.empty(2, n).to(DEVICE)
        ln["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dwdb, programs=programs)
        dw, db = dwdb
        monkeypatch.setattr(torch, "empty", real_empty)
        for name, t in (("dx", dx), ("dw", dw), ("db", db)):
            assert torch.isfinite(t).all(), f"{m} x {n}, programs={programs}: {name} not all written"
        ins = [t.double().requires_grad_(True) for t in (x, w)]
        g64 = torch.autograd.grad(ref_layer_norm(ins[0], (n,), ins[1], None, 1e-5), ins, dy.double())
        # dx's error against the size of its terms, rstd * dy * w: with one column the exact dx is 0 and a
        # GPU's fused multiply-add leaves the rounding error of dy * w (times rstd = 1 / sqrt(eps)) there
        terms = (dy.double() * w.double() * rstd.double()[:, None]).norm()
        assert (dx.double() - g64[0]).norm() <= 1e-5 * max(g64[0].norm(), terms), f"{m} x {n}: dx"
        assert rel_error(dw, g64[1]) <= 1e-5 and rel_error(db, dy.double().sum(0)) <= 1e-5


@pytest.mark.parametrize("n", [300, 20_000])
def test_persistent_backward_is_bitwise_deterministic(ln, n):
    """Same inputs, ten runs, identical bytes (rows the kernel takes, and rows past it, which torch computes)."""
    torch.manual_seed(6)
    m = 64 if n < 1000 else 3
    x = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)
    y = ln["layer_norm"](x, n, w, b)
    runs = [torch.autograd.grad(y, (x, w, b), dy, retain_graph=True) for _ in range(10)]
    for i, grads in enumerate(runs[1:], start=2):
        for name, g, g0 in zip(("dx", "dw", "db"), grads, runs[0]):
            assert torch.equal(g.view(torch.int16), g0.view(torch.int16)), f"run {i}: {name} differs from run 1"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_weight_bias_and_grad_combinations(ln, dtype):
    torch.manual_seed(8)
    for has_w, has_b, x_grad, w_grad, b_grad in [
        (False, False, True, False, False),
        (True, False, True, True, False),
        (False, True, True, False, True),
        (True, True, False, True, True),
        (True, True, True, False, True),
        (True, True, False, False, False),
    ]:
        x = torch.randn(6, 4, 30, device=DEVICE, dtype=dtype).requires_grad_(x_grad)
        w = torch.randn(4, 30, device=DEVICE, dtype=dtype).requires_grad_(w_grad) if has_w else None
        b = torch.randn(4, 30, device=DEVICE, dtype=dtype).requires_grad_(b_grad) if has_b else None
        check_against_float64(
            ln["layer_norm"], x, (4, 30), w, b, 1e-6, dtype, what=f"w {has_w} b {has_b} grads {x_grad, w_grad, b_grad}"
        )


def test_matches_torch_signature_and_values(ln):
    torch.manual_seed(9)
    x = torch.randn(3, 5, 64, device=DEVICE)
    w, b = torch.randn(64, device=DEVICE), torch.randn(64, device=DEVICE)
    ours = ln["layer_norm"](x, [64], weight=w, bias=b, eps=1e-3)
    theirs = torch.nn.functional.layer_norm(x, [64], weight=w, bias=b, eps=1e-3)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_empty_tensors(ln):
    for shape, norm in [((0, 8), (8,)), ((2, 0, 5), (5,)), ((3, 0), (0,))]:
        x = torch.randn(shape, device=DEVICE, requires_grad=True)
        w = torch.randn(norm, device=DEVICE, requires_grad=True)
        b = torch.randn(norm, device=DEVICE, requires_grad=True)
        y = ln["layer_norm"](x, norm, w, b)
        ref = torch.nn.functional.layer_norm(x, norm, w, b)
        assert y.shape == ref.shape == x.shape
        dx, dw, db = torch.autograd.grad(y, (x, w, b), torch.ones_like(y))
        assert dx.shape == x.shape and dw.shape == w.shape and db.shape == b.shape
        assert not dw.any() and not db.any(), "the sum over zero rows is zero"


def test_bad_inputs_raise_clear_errors(ln):
    layer_norm = ln["layer_norm"]
    x = torch.randn(4, 16, device=DEVICE)
    with pytest.raises(TypeError, match="dtype"):
        layer_norm(torch.ones(4, 16, device=DEVICE, dtype=torch.int32), (16,))
    with pytest.raises(TypeError, match="dtype"):
        layer_norm(x, (16,), torch.ones(16, device=DEVICE, dtype=torch.int64))
    with pytest.raises(TypeError, match="float64"):
        layer_norm(x.double(), (16,))
    with pytest.raises(ValueError, match="normalized_shape"):
        layer_norm(x, (8,))
    with pytest.raises(ValueError, match="normalized_shape"):
        layer_norm(x, (2, 4, 16))
    with pytest.raises(ValueError, match="weight has shape"):
        layer_norm(x, (16,), torch.ones(15, device=DEVICE))
    with pytest.raises(ValueError, match="bias has shape"):
        layer_norm(x, (16,), None, torch.ones(4, 16, device=DEVICE))
    with pytest.raises(TypeError, match="normalized_shape"):
        layer_norm(x, "16")
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer_norm([[1.0, 2.0]], (2,))
    other = torch.randn(4, 16, device="meta") if DEVICE == "cpu" else torch.randn(4, 16)  # wrong device
    with pytest.raises(ValueError, match="is on"):
        layer_norm(other, (16,))


def test_page_checks_passed(bwd):
    """The tables the page shows: errors within tolerance, the backward repeatable, sweep complete."""
    errors, tol = bwd["errors"], bwd["TOLERANCE"]
    assert (errors[bwd["OURS"]].max(axis=1) <= errors.dtype.map(tol)).all()
    assert len(errors) > 0 and errors["same bits"].all(), "the backward gave different bits between runs"
    table = bwd["table"]  # a row a point (direction, dtype, N), a column a provider
    assert len(table) == 2 * len(bwd["SWEEP_N"]) and set(table.index.get_level_values("direction")) == {"backward"}
    # a GPU's run times every point; the interpreter's run checks values and times none (NaN, shown as no speed)
    assert table["ours"].gt(0).all() if DEVICE == "cuda" else table["ours"].isna().all()


def test_drop_in_page_checks_passed(ln):
    """The drop-in page's tables: errors within tolerance, the same bits every run, each training step measured."""
    errors, tol = ln["errors"], ln["TOLERANCE"]
    assert (errors[ln["OURS"]].max(axis=1) <= errors.dtype.map(tol)).all() and errors["same bits"].all()
    results = ln["results"]
    ours = results[results.provider == "ours"]
    assert len(ours) == 2 * len(ln["SWEEP_N"]) and set(results.direction) == {"training step"}
    assert ours["GB/s"].gt(0).all() if DEVICE == "cuda" else ours["GB/s"].isna().all()


def test_configs_keep_todays_launch_parameters(ln, monkeypatch):
    """The launch parameters chosen by measurement (dev/DESIGN.md): forward tiles of min_tile_bytes() of x (4 KB with
    no device), 32 fp32 values a thread on 2 warps or more, evict_last on x; rows of 64 KB or more no hint, those of
    64 KB 64 values a thread. The backward's blocks of 8 KB in 1, 3 or 4 stages, a program an SM."""
    monkeypatch.setitem(ln.data, "min_tile_bytes", lambda: 4096)
    cfg, last = ln["_fwd_config"], "evict_last"
    assert cfg(1000, 512, 2) == (dict(BLOCK_M=4, BLOCK_N=512, EVEN=True, EVICT=last, num_warps=2), 250)
    assert cfg(1000, 512, 4)[0] == dict(BLOCK_M=2, BLOCK_N=512, EVEN=True, EVICT=last, num_warps=2)
    assert cfg(1000, 1024, 2)[0] == dict(BLOCK_M=2, BLOCK_N=1024, EVEN=True, EVICT=last, num_warps=2)
    assert cfg(1000, 300, 4)[0] == dict(BLOCK_M=2, BLOCK_N=512, EVEN=False, EVICT=last, num_warps=2)
    assert cfg(1000, 8192, 4)[0] == dict(BLOCK_M=1, BLOCK_N=8192, EVEN=True, EVICT=last, num_warps=8)
    assert cfg(1000, 16384, 2)[0] == dict(BLOCK_M=1, BLOCK_N=16384, EVEN=True, EVICT=last, num_warps=16)
    assert cfg(1000, 16384, 4)[0] == dict(BLOCK_M=1, BLOCK_N=16384, EVEN=True, EVICT="", num_warps=8)
    assert cfg(64, 32768, 2)[0] == dict(BLOCK_M=1, BLOCK_N=32768, EVEN=True, EVICT="", num_warps=16)
    assert cfg(64, 32768, 4)[0] == dict(BLOCK_M=1, BLOCK_N=32768, EVEN=True, EVICT="", num_warps=32)
    bwd, sms = ln["_bwd_config"], ln["NUM_SMS"]
    monkeypatch.setitem(ln.data, "IN_FLIGHT", 0)  # a bandwidth not known: one program an SM (the next test: both)
    assert bwd(32 * sms, 512, 2) == (dict(BLOCK_M=8, BLOCK_N=512, num_warps=4, STAGES=4), sms)
    assert bwd(10_000, 8192, 2)[0] == dict(BLOCK_M=1, BLOCK_N=8192, num_warps=8, STAGES=3)
    assert bwd(10_000, 8192, 4)[0] == dict(BLOCK_M=1, BLOCK_N=8192, num_warps=8, STAGES=3)  # 64 KB tiles: 3 fit
    assert bwd(10_000, 512, 2, stages=1)[0]["STAGES"] == 1
    monkeypatch.setitem(ln.data, "SMEM_PER_BLOCK", 101376)  # 99 KB a block (sm_86, sm_89): 32 KB tiles, 1 stage not 2
    assert bwd(10_000, 8192, 2)[0]["STAGES"] == 1 and bwd(10_000, 8192, 4)[0]["STAGES"] == 1
    assert bwd(10_000, 2048, 4)[0]["STAGES"] == 4
    assert bwd(10, 512, 2, programs=5)[1] == 2  # 2 blocks of 8 rows: 2 programs, one line each


@pytest.mark.parametrize("gbps, two", [(3350, False), (4800, True)])
def test_backward_shares_an_sm_where_one_programs_stages_hold_too_few_bytes(ln, gbps, two, monkeypatch):
    """Two programs an SM, 3 stages each, where one program's 4 stages of 16 KB hold less than twice the SM's bytes
    in flight (Little's law: 25 KB at 3.35 TB/s on 132 SMs, 36 KB at 4.8 TB/s); wider tiles stay one an SM."""
    device = dict(IN_FLIGHT=gbps * 1e9 * 1e-6 / 132, NUM_SMS=132, SMEM_PER_SM=233472, SMEM_PER_BLOCK=232448)
    for name, value in device.items():
        monkeypatch.setitem(ln.data, name, value)
    bwd = ln["_bwd_config"]
    for n, element_size in ((512, 2), (2048, 2), (4096, 2), (512, 4)):
        meta, lines = bwd(264 * 64, n, element_size)  # as many blocks for each program
        assert (meta["STAGES"], lines) == ((3, 264) if two else (4, 132)), (n, element_size)
    assert bwd(264 * 64, 8192, 2) == (dict(BLOCK_M=1, BLOCK_N=8192, num_warps=8, STAGES=3), 132)
    assert bwd(264 * 64, 8192, 4) == (dict(BLOCK_M=1, BLOCK_N=8192, num_warps=8, STAGES=3), 132)  # 3 of 64 KB fit
    monkeypatch.setitem(ln.data, "SMEM_PER_SM", 102400)  # an SM of 100 KB of shared memory holds one program's stages
    assert bwd(264 * 64, 512, 2)[1] == 132


@pytest.mark.parametrize("smem_per_block", [101376, 166912, 232448])  # sm_86/sm_89, sm_80, sm_90
def test_backward_stages_are_never_two_and_fit_the_block(ln, smem_per_block, monkeypatch):
    """Two stages ran slower than one at every N measured: the config picks 1, 3 or 4, and the stages' tiles (x and
    dy, 16-bit values counted at 4 bytes) stay within the block's shared memory less 16 KB."""
    monkeypatch.setitem(ln.data, "SMEM_PER_BLOCK", smem_per_block)
    for n in (16, 100, 512, 1000, 2048, 4096, 5000, 8192):
        for element_size in (2, 4):
            meta, _ = ln["_bwd_config"](10_000, n, element_size)
            tile = 2 * meta["BLOCK_M"] * meta["BLOCK_N"] * max(element_size, 4)
            assert meta["STAGES"] in (1, 3, 4), (smem_per_block, n, element_size, meta)
            assert meta["STAGES"] == 1 or meta["STAGES"] * tile <= smem_per_block - 16384, (smem_per_block, n, meta)


def _fwd_samples():
    """(x, w, b, eps) for the forward operator: weight and bias each present or absent, with and without
    requires_grad, rows with a row stride, transposed rows, a single column, no rows."""
    x, padded = torch.randn(5, 7, device=DEVICE), torch.randn(5, 10, device=DEVICE)[:, :7]
    w, b = torch.randn(7, device=DEVICE) + 1, torch.randn(7, device=DEVICE)
    grad = lambda t: t.clone().requires_grad_()  # noqa: E731
    return [
        (x, w, b, 1e-5),
        (x, None, None, 1e-5),
        (x, w, None, 1e-5),
        (x, None, b, 1e-3),
        (grad(x), grad(w), grad(b), 1e-5),
        (grad(x), None, grad(b), 1e-5),
        (grad(x), grad(w), None, 0.1),
        (padded.requires_grad_(), w, b, 1e-5),
        (torch.randn(7, 5, device=DEVICE).T, grad(w), grad(b), 1e-5),
        (torch.randn(4, 1, device=DEVICE, requires_grad=True), grad(w[:1]), grad(b[:1]), 1e-5),
        (torch.randn(0, 7, device=DEVICE, requires_grad=True), grad(w), grad(b), 1e-5),
    ]


def test_forward_operator_passes_opcheck(ln):
    """Schema, fake (shapes without running the kernels), autograd registration, and a compiled graph's run."""
    for args in _fwd_samples():
        torch.library.opcheck(ln["layer_norm_fwd_op"], args)


def test_backward_operator_passes_opcheck(ln):
    x, w = torch.randn(5, 7, device=DEVICE), torch.randn(7, device=DEVICE) + 1
    mean, rstd = x.mean(-1), torch.rsqrt(x.var(-1, unbiased=False) + 1e-5)
    dys = [
        torch.randn(5, 7, device=DEVICE),
        torch.tensor(1.0, device=DEVICE).expand(5, 7),  # stride 0: from .sum()
        torch.randn(7, 5, device=DEVICE).T,
    ]
    op = ln["layer_norm_bwd_op"]
    for dy in dys:
        for weight, compute in [(w, True), (w, False), (None, False), (None, True)]:
            torch.library.opcheck(op, (x, dy, weight, mean, rstd, compute))
    empty = torch.empty(0, 7, device=DEVICE)
    torch.library.opcheck(op, (empty, empty, w, empty[:, 0], empty[:, 0], True))
    dx, (dw, db) = op(empty, empty, w, empty[:, 0], empty[:, 0], True)
    assert dx.shape == (0, 7) and not dw.any() and not db.any() and dw.shape == db.shape == (7,), "a sum over none"
    dx, (dw, db) = op(x, dys[0], w, mean, rstd, True)
    torch.testing.assert_close(db, dys[0].sum(0), rtol=1e-5, atol=1e-5)  # the operator computes, not just shapes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "normalized_shape,affine",
    [((16,), (True, True)), ((16,), (False, False)), ((16,), (False, True)), ((2, 8), (True, True))],
    ids=str,
)
def test_compiled_block_keeps_the_drop_in(ln, monkeypatch, dtype, normalized_shape, affine):
    """A linear layer, layer_norm and a loss compiled with fullgraph=True (no graph break) against the same block run
    eagerly, in the loss and in the gradients of the input, the layer's weight and the norm's weight and bias."""
    # Dynamo reads the page's globals through its module name; a page run by the tests is not a module
    module = types.ModuleType(ln.data["__name__"])
    module.__dict__.update(ln.data)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 3, 12, generator=gen).to(DEVICE, dtype)
    linear = torch.nn.Linear(12, 16, device=DEVICE, dtype=dtype)
    w = (torch.rand(normalized_shape, generator=gen) + 0.5).to(DEVICE, dtype) if affine[0] else None
    b = torch.randn(normalized_shape, generator=gen).to(DEVICE, dtype) if affine[1] else None
    c = torch.randn(6, 3, *normalized_shape, generator=gen).to(DEVICE)  # a loss that layer_norm does not flatten
    layer_norm = ln["layer_norm"]

    def block(x, w, b):
        return (layer_norm(linear(x).reshape(c.shape), normalized_shape, w, b, 1e-5).float() * c).sum()

    def run(fn):
        leaves = [None if t is None else t.clone().requires_grad_() for t in (x, w, b)]
        linear.zero_grad(set_to_none=True)
        loss = fn(*leaves)
        loss.backward()
        return [loss.detach(), linear.weight.grad] + [t.grad for t in leaves if t is not None]

    torch._dynamo.reset()
    eager, compiled = run(block), run(torch.compile(block, fullgraph=True, backend="aot_eager"))
    torch._dynamo.reset()
    assert len(compiled) == len(eager) == 3 + sum(affine)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    names = ["loss", "linear weight's gradient", "input's gradient"]
    names += [f"norm {t}'s gradient" for t, present in zip(("weight", "bias"), affine) if present]
    for name, got, want in zip(names, compiled, eager):
        torch.testing.assert_close(got, want, **tol, msg=lambda m, name=name: f"{name}: {m}")
    # and the eager block against float64: the comparison above is not of two wrong answers
    linear64 = copy.deepcopy(linear).double()
    h64 = linear64(x.double()).reshape(c.shape)
    w64, b64 = (None if t is None else t.double() for t in (w, b))
    loss64 = (ref_layer_norm(h64, normalized_shape, w64, b64, 1e-5) * c.double()).sum()
    assert rel_error(eager[1], torch.autograd.grad(loss64, linear64.weight)[0]) <= 2 * TOL[dtype], "against float64"


def test_missing_peers_are_named_with_their_reason(ln, monkeypatch, capsys):
    load_peer = ln["load_peer"]  # the appendix: the page's later cells may run now, printing their own lines
    capsys.readouterr()
    monkeypatch.setitem(ln.data, "ON_GPU", False)
    assert load_peer("torch.compile", "torch._inductor") is None
    assert capsys.readouterr().out == "torch.compile: not measured here (no GPU).\n"
    monkeypatch.setitem(ln.data, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (8, 6))
    assert load_peer("quack", "torch.nn.functional", min_cc=(9, 0)) is None
    assert (
        capsys.readouterr().out
        == "quack: not measured here (needs compute capability 9.0 or newer; this GPU has 8.6).\n"
    )
    assert load_peer("Liger-Kernel", "no_such_package_here.ops") is None
    assert capsys.readouterr().out == "Liger-Kernel: not measured here (not installed).\n"
    assert load_peer("torch.compile", "torch.nn.functional") is torch.nn.functional and capsys.readouterr().out == ""


@pytest.mark.skipif(DEVICE != "cpu", reason="the page's run without a GPU")
def test_cpu_run_measures_no_speed_and_says_so(bwd, monkeypatch):
    """Run alone as the build runs it: it exits 0, prints the one line where a GPU's run reads its speeds (the
    benchmark and its reading), names each peer it leaves out and why, shows the ladder as step | idea | N, and prints
    no speed."""
    env = {k: v for k, v in os.environ.items() if k not in ("SOL_RESULTS", "SOL_LOCK")} | {"MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(bwd.path)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines.count(bwd["NO_SPEED"]) == 2 and all(lines), lines
    assert "torch.compile: not measured here (no GPU)." in lines, lines
    for peer in ("Liger-Kernel", "quack"):
        assert any(re.fullmatch(rf"{peer}: not measured here \((no GPU|not installed)\)\.", line) for line in lines), (
            lines
        )
    assert not re.search(r"GB/s|% of the copy|as fast as|best peer|No quack", proc.stdout), proc.stdout
    assert list(bwd["ladder"].columns[:3]) == ["step", "idea", "N"] and bwd["ladder"]["GB/s"].isna().all()
    monkeypatch.delenv("SOL_LOCK", raising=False)
    assert "<td>not pinned</td>" in bwd["environment_card"]()._repr_html_()


def test_rows_past_the_fused_width_stream_with_deep_dive_21s_kernel(fwd):
    """Past MAX_FUSED_N the forward launches deep dive 21's chunked kernel, letter for letter, at 21's launch: the same
    bits as 21's core_forward, which launches it there."""
    dive = load_tutorial("21_layer_norm_wide_forward")
    src = inspect.getsource
    assert src(fwd["layer_norm_fwd_chunked_kernel"].fn) == src(dive["layer_norm_fwd_chunked_kernel"].fn)
    torch.manual_seed(5)
    n = fwd["MAX_FUSED_N"] + 77
    x = torch.randn(3, n, device=DEVICE) * 3 + 20
    w, b = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    outs = []
    for launch in (fwd["layer_norm_rows_forward"], dive["core_forward"]):
        y, mean, rstd = torch.full_like(x, float("nan")), *(torch.full((3,), float("nan"), device=DEVICE) for _ in "mr")
        launch(x, y, w, b, mean, rstd, 1e-5)
        outs.append((y, mean, rstd))
    for a, b_ in zip(*outs):
        assert torch.equal(a, b_)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda d: str(d).replace("torch.", ""))
def test_rows_past_the_backward_kernel_with_a_weight_of_another_dtype(ln, dtype):
    """Past MAX_BWD_FUSED_N the backward runs torch's fused kernels on a GPU where x and the weight share a dtype; a
    16-bit x with an fp32 weight and bias (as the drop-in accepts) takes the fp32 path: right values, no error."""
    torch.manual_seed(3)
    n = ln["MAX_BWD_FUSED_N"] + 123
    x = (torch.randn(4, n, device=DEVICE) * 2 + 50).to(dtype).requires_grad_(True)
    w, b = (torch.randn(n, device=DEVICE).requires_grad_(True) for _ in range(2))
    check_against_float64(ln["layer_norm"], x, (n,), w, b, 1e-5, dtype, what="16-bit x, fp32 weight, past 8 K")
    same = torch.randn(n, device=DEVICE).to(dtype).requires_grad_(True)
    check_against_float64(ln["layer_norm"], x, (n,), same, None, 1e-5, dtype, what="one dtype, past 8 K")


def test_past_the_kernels_widths_the_drop_in_hands_torchs_dx_over(ln, monkeypatch):
    """Past MAX_BWD_FUSED_N the backward operator returns the dx torch's backward made, not a copy of it (a copy
    would move dx's bytes twice more), and it is right against float64; within the widths the kernel writes it."""
    made = []
    torch_rows = ln["torch_rows_backward"]

    def recorded(*args):
        out = torch_rows(*args)
        made.append(out)
        return out

    monkeypatch.setitem(ln.data, "torch_rows_backward", recorded)
    for n in (ln["MAX_BWD_FUSED_N"], ln["MAX_BWD_FUSED_N"] + 1):
        x = torch.randn(2, n, device=DEVICE, requires_grad=True)
        w, b = (torch.randn(n, device=DEVICE, requires_grad=True) for _ in range(2))
        dy = torch.randn(2, n, device=DEVICE)
        dx, dw, db = torch.autograd.grad(ln["layer_norm"](x, (n,), w, b), (x, w, b), dy)
        wide = n > ln["MAX_BWD_FUSED_N"]
        assert len(made) == wide, f"N = {n}: torch's backward {'not ' if wide else ''}called"
        if wide:
            assert dx.data_ptr() == made[0].data_ptr(), "torch's dx copied"
        ins = [t.detach().double().requires_grad_(True) for t in (x, w, b)]
        refs = torch.autograd.grad(ref_layer_norm(ins[0], (n,), ins[1], ins[2], 1e-5), ins, dy.double())
        for name, out, ref in zip(("dx", "dw", "db"), (dx, dw, db), refs):
            assert rel_error(out, ref) <= TOL[torch.float32], f"N = {n}, {name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_backward_sums_dw_and_db_in_one_launch_and_fills_nothing(ln, dtype):
    """The drop-in's backward adds the lines of dw and of db with one torch.sum and casts both with one copy (none in
    fp32), and zero-fills nothing: each small launch beside the kernel adds its start to a training step."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 96, device=DEVICE, dtype=dtype, requires_grad=True)
    w, b = (torch.randn(96, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(2))
    y, dy = ln["layer_norm"](x, (96,), w, b), torch.randn(64, 96, device=DEVICE, dtype=dtype)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    ops = [e.name for e in prof.events()]
    counts = {op: ops.count(f"aten::{op}") for op in ("sum", "_to_copy", "zero_", "zeros", "new_zeros", "ones")}
    assert counts == dict(sum=1, _to_copy=int(dtype != torch.float32), zero_=0, zeros=0, new_zeros=0, ones=0), counts
    assert dw.dtype == db.dtype == dtype and rel_error(db, dy.double().sum(0)) <= TOL[dtype], "db"
