"""No silent wrong answer from reduce_sum (tutorial 03) and deep dive 31's sum_dim: every view a tensor can be
(sliced, transposed, broadcast with stride 0, 0-d and 1-d, a non-zero storage offset), every dtype torch.sum takes
(ours or a clear TypeError), values at the edges of each dtype (overflow to inf, inf and nan), and gradients, the
gradient of the gradient included. Each result is compared with torch.sum and with the float64 sum of the same view.

A kernel that assumed unit strides would read the wrong elements of a strided view and past the storage of a
broadcast one; the storage sits inside a larger buffer of NaNs here, so a read outside it shows in the result."""

import math

import pytest
import torch

from conftest import DEVICE, fenced, load_tutorial

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Relative to the sum of |x|: a few roundings of the output dtype (the interpreter truncates to bf16).
TOLERANCE = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def reduce_sum():
    return load_tutorial("03_sum_of_all_elements")["reduce_sum"]


@pytest.fixture(scope="module")
def page31():
    return load_tutorial("31_reduction_rows_and_columns")


def _fenced(shape, dtype, seed):
    """conftest's fenced tensor of `shape`, normal values shifted a little off 0 (their sum is not all cancellation)."""
    return fenced(
        shape, dtype, values=torch.randn(math.prod(shape), generator=torch.Generator().manual_seed(seed)) + 0.05
    )


# name -> view of a fenced base: (shape of the base, the view)
VIEWS = {
    "1-D, every other element": ((10,), lambda t: t[::2]),
    "1-D, offset and stride 3": ((31,), lambda t: t[2::3]),
    "a column": ((3, 4), lambda t: t[:, 0]),
    "a column of a wide matrix": ((257, 65), lambda t: t[:, 5]),
    "transposed": ((33, 17), lambda t: t.T),
    "sliced both ways": ((20, 30), lambda t: t[1::2, 3:-4:3]),
    "0-d broadcast to 1-D": ((), lambda t: t.expand(1000)),
    "0-d broadcast to 2-D": ((), lambda t: t.expand(4, 8)),
    "[1, 1] broadcast": ((1, 1), lambda t: t.expand(4, 8)),
    "a row broadcast down": ((1, 9), lambda t: t.expand(6, 9)),
    "a column broadcast across": ((5, 1), lambda t: t.expand(5, 11)),
    "broadcast, then transposed": ((1, 7), lambda t: t.expand(3, 7).T),
    "3-D permuted": ((4, 5, 6), lambda t: t.permute(2, 0, 1)),
    "3-D with a broadcast middle dim": ((4, 1, 6), lambda t: t.expand(4, 5, 6)),
    "0-d": ((), lambda t: t),
    "offset row of a matrix": ((5, 40), lambda t: t[3]),
}
DIMS = (None, 0, -1, (0, -1))


def _check(out, view, dim, keepdim=False, dtype=None, what=""):
    x64 = view.double()
    ref = x64.sum() if dim is None else x64.sum(dim, keepdim=keepdim)
    size = x64.abs().sum() if dim is None else x64.abs().sum(dim, keepdim=keepdim)
    expected = (
        torch.sum(view, dim=dim, keepdim=keepdim, dtype=dtype) if dim is not None else torch.sum(view, dtype=dtype)
    )
    assert out.shape == expected.shape and out.dtype == expected.dtype, (
        f"{what}: got {tuple(out.shape)} {out.dtype}, torch.sum gives {tuple(expected.shape)} {expected.dtype}"
    )
    assert not out.isnan().any(), f"{what}: NaN in the sum: a read outside the view's elements"
    err = ((out.double() - ref).abs() / size.clamp_min(1e-30)).max().item() if out.numel() else 0.0
    assert err <= TOLERANCE[out.dtype], f"{what}: error {err:.2e} against float64 > {TOLERANCE[out.dtype]:.0e}"


@pytest.mark.parametrize("name", list(VIEWS))
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_view_sums_its_own_elements(reduce_sum, name, dim, dtype):
    shape, view_of = VIEWS[name]
    view = view_of(_fenced(shape, dtype, seed=len(name)))
    if dim is not None and view.dim() < (2 if isinstance(dim, tuple) else 1):
        pytest.skip("fewer dims than the sum names")
    _check(reduce_sum(view) if dim is None else reduce_sum(view, dim), view, dim, what=f"{name}, dim={dim}")


@pytest.mark.parametrize("name", ["1-D, every other element", "a column", "0-d broadcast to 2-D", "transposed"])
@pytest.mark.parametrize("keepdim", (False, True))
def test_keepdim_and_dtype_on_views(reduce_sum, name, keepdim):
    shape, view_of = VIEWS[name]
    view = view_of(_fenced(shape, torch.bfloat16, seed=3))
    for dim in (0, -1) if view.dim() else (0,):
        _check(
            reduce_sum(view, dim, keepdim=keepdim, dtype=torch.float32),
            view,
            dim,
            keepdim,
            torch.float32,
            what=f"{name}, dim={dim}, keepdim={keepdim}, dtype=float32",
        )


def test_a_long_broadcast_is_summed_without_reading_past_its_storage(reduce_sum):
    view = torch.tensor(2.0, device=DEVICE).expand(10**6)
    assert reduce_sum(view).item() == 2.0 * 10**6


def test_sum_vector_refuses_a_strided_vector(reduce_sum):
    sum_vector = load_tutorial("03_sum_of_all_elements")["sum_vector"]
    out = torch.empty(1, device=DEVICE)
    for bad in (torch.arange(10.0, device=DEVICE)[::2], torch.tensor(2.0, device=DEVICE).expand(100)):
        with pytest.raises(ValueError, match="unit stride"):
            sum_vector(bad, out)


@pytest.mark.parametrize(
    "dtype", (torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64), ids=str
)
def test_dtypes_torch_sums_but_the_kernels_do_not_raise_a_clear_type_error(reduce_sum, dtype):
    x = torch.ones(4, 3, device=DEVICE).to(dtype)
    with pytest.raises(TypeError, match=r"reduce_sum: x is .*float32, float16 and bfloat16"):
        reduce_sum(x)
    with pytest.raises(TypeError, match="reduce_sum"):
        reduce_sum(torch.ones(3, device=DEVICE), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["overflow", "inf", "-inf", "inf - inf", "nan", "largest finite"])
def test_values_at_the_edges_of_the_dtype_like_torch(reduce_sum, dtype, case):
    big = torch.finfo(dtype).max
    x = torch.ones(3, 50, dtype=torch.float32)
    if case == "overflow":
        x[1] = big / 4  # the row's sum passes the dtype's largest finite value: inf in that dtype
    elif case == "largest finite":
        x[1] = big / 64  # fifty of them: still finite
    elif case in ("inf", "-inf"):
        x[1, 7] = float(case)
    elif case == "inf - inf":
        x[1, 7], x[1, 9] = float("inf"), float("-inf")
    else:
        x[1, 7] = float("nan")
    x = x.to(dtype).to(DEVICE)
    for dim in (None, 1, 0):
        out = reduce_sum(x) if dim is None else reduce_sum(x, dim)
        expected = (x.double().sum() if dim is None else x.double().sum(dim)).to(dtype)  # float64, rounded once
        same = (
            (out == expected)
            | (out.isnan() & expected.isnan())
            | ((out - expected).abs() <= TOLERANCE[dtype] * expected.abs())
        )
        assert same.all(), (
            f"{case}, dim={dim}: {out.tolist()} where float64 rounded to {dtype} gives {expected.tolist()}"
        )


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4)], ids=str)
def test_empty_views_like_torch(reduce_sum, shape):
    x = torch.randn(shape, device=DEVICE)
    for dim in (None, 0, -1):
        view = x.transpose(0, -1) if x.dim() > 1 else x
        out = reduce_sum(view) if dim is None else reduce_sum(view, dim)
        expected = torch.sum(view) if dim is None else torch.sum(view, dim)
        torch.testing.assert_close(out, expected, msg=f"shape {shape} transposed, dim={dim}")


@pytest.mark.parametrize("name", ["a column", "0-d broadcast to 2-D", "sliced both ways", "3-D permuted"])
@pytest.mark.parametrize("dim", (None, 0, (0, -1)), ids=str)
def test_gradient_of_a_view_reaches_its_base(reduce_sum, name, dim):
    shape, view_of = VIEWS[name]
    if dim is not None and view_of(torch.empty(shape)).dim() < (2 if isinstance(dim, tuple) else 1):
        pytest.skip("fewer dims than the sum names")
    base = torch.randn(shape, device=DEVICE).requires_grad_()
    out = reduce_sum(view_of(base)) if dim is None else reduce_sum(view_of(base), dim)
    expected = torch.sum(view_of(base)) if dim is None else torch.sum(view_of(base), dim)
    dy = torch.randn(out.shape, device=DEVICE)
    (grad,) = torch.autograd.grad(out, base, dy)
    (grad_torch,) = torch.autograd.grad(expected, base, dy)
    torch.testing.assert_close(grad, grad_torch, msg=f"{name}, dim={dim}: the gradient differs from torch's")


def test_gradient_of_the_gradient_is_torchs(reduce_sum):
    """The backward broadcasts the upstream gradient with torch ops: with create_graph=True it keeps its graph.
    d/d(dy) of <v, d sum / dx . dy> is v summed over the reduced dim, as torch gives."""
    x = torch.randn(4, 6, device=DEVICE).requires_grad_()
    dy = torch.randn(4, device=DEVICE).requires_grad_()
    v = torch.randn(4, 6, device=DEVICE)
    (gx,) = torch.autograd.grad(reduce_sum(x, 1), x, dy, create_graph=True)
    assert gx.requires_grad, "the gradient lost its graph under create_graph=True"
    (second,) = torch.autograd.grad((gx * v).sum(), dy)
    (gx_torch,) = torch.autograd.grad(torch.sum(x, 1), x, dy, create_graph=True)
    (second_torch,) = torch.autograd.grad((gx_torch * v).sum(), dy)
    torch.testing.assert_close(second, second_torch)


@pytest.mark.parametrize(
    "name",
    [
        "transposed",
        "sliced both ways",
        "a row broadcast down",
        "a column broadcast across",
        "3-D with a broadcast middle dim",
        "3-D permuted",
        "broadcast, then transposed",
    ],
)
@pytest.mark.parametrize("dim", (0, 1, -1))
def test_deep_dive_sum_dim_on_views(page31, name, dim):
    shape, view_of = VIEWS[name]
    view = view_of(_fenced(shape, torch.float32, seed=11))
    _check(page31["sum_dim"](view, dim), view, dim, what=f"sum_dim, {name}, dim={dim}")
