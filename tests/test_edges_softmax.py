"""No silent wrong answer from softmax (tutorial 01) and deep dive 12's softmax_forward: every view a tensor can be
(sliced, transposed, broadcast with stride 0, 0-d and 1-d, a non-zero storage offset) along every dim, empty and
size-1 dims, every dtype torch.softmax takes (ours, or a clear TypeError naming the argument), values at the edges
of each dtype (1e20, the largest finite value, -inf, inf, NaN, constant rows) through the fused kernels and past
them, gradients (incoming ones strided and broadcast too), the refused gradient of a gradient, and clear errors.
Each result is compared with torch.softmax in the same dtype and with float64.

Every input and incoming gradient lies inside a larger buffer of NaNs, so a kernel that read outside a tensor's
storage, or assumed unit strides, shows NaN or wrong values in the result."""

import pytest
import torch

from conftest import DEVICE, fenced, load_tutorial

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # the interpreter's numpy

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# ||ours - float64|| / ||float64||: a few roundings of the dtype (the interpreter truncates fp32 -> bf16)
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def softmax():
    return load_tutorial("01_softmax_backward")["softmax"]


@pytest.fixture(scope="module")
def softmax_forward():
    return load_tutorial("12_softmax_staged_gluon")["softmax_forward"]


# name -> (shape of the fenced base, the view of it that is passed)
VIEWS = {
    "contiguous 3-D": ((3, 4, 5), lambda t: t),
    "1-D, every other element": ((10,), lambda t: t[::2]),
    "1-D, offset and stride 3": ((31,), lambda t: t[2::3]),
    "a column": ((6, 5), lambda t: t[:, 1]),
    "an offset row": ((5, 40), lambda t: t[3]),
    "transposed": ((5, 7), lambda t: t.T),
    "sliced both ways": ((8, 12), lambda t: t[::2, 1:-2]),
    "0-d broadcast to 1000": ((), lambda t: t.expand(1000)),
    "a row broadcast down": ((1, 9), lambda t: t.expand(4, -1)),
    "a column broadcast across": ((5, 1), lambda t: t.expand(5, 11)),
    "3-D permuted": ((4, 5, 6), lambda t: t.permute(2, 0, 1)),
    "3-D with a broadcast middle dim": ((4, 1, 6), lambda t: t.expand(4, 5, 6)),
    "0-d": ((), lambda t: t),
    "size-1 dims": ((1, 3, 1), lambda t: t),
}
VIEW_DIMS = [
    (name, dim)
    for name, (shape, view) in VIEWS.items()
    for ndim in [max(view(torch.empty(shape)).dim(), 1)]
    for dim in range(-ndim, ndim)
]


def rel_error(out, ref, scale=0.0):
    """||out - ref|| / max(||ref||, scale) over the entries where ref is not NaN (out must be NaN exactly there)."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.equal(out.isnan(), ref.isnan()), (
        f"NaN at {out.isnan().nonzero().tolist()}, expected at {ref.isnan().nonzero().tolist()}"
    )
    ok = ~ref.isnan()
    assert torch.equal(out[ok].isinf(), ref[ok].isinf()) and torch.equal(out[ok & ref.isinf()], ref[ok & ref.isinf()])
    finite = ok & ~ref.isinf()
    norm = max(ref[finite].norm().item(), scale)
    return (out[finite] - ref[finite]).norm().item() / (norm if norm > 0 else 1.0)


def check_against_torch(softmax, make_input, dim, dtype, dy=None, cast=None):
    """softmax(x, dim) against torch.softmax in the same dtype (shape, dtype, NaN) and in float64 (values); the
    gradient of the leaf too, against float64, measured against the size of the terms that make it up:
    dx = y * dy - y * sum(y * dy) cancels where one y is near 1, and a broadcast dim sums terms that may cancel."""
    leaf = make_input(dtype).requires_grad_(True)
    kwargs = {} if cast is None else {"dtype": cast}  # softmax's dtype argument
    out, expected = softmax(make_input.view(leaf), dim, **kwargs), torch.softmax(make_input.view(leaf), dim, **kwargs)
    assert out.shape == expected.shape and out.dtype == expected.dtype, (out.shape, out.dtype, expected.dtype)
    leaf64 = leaf.detach().to(cast or dtype).cpu().double().requires_grad_(True)  # as torch casts it; on the CPU
    out64 = torch.softmax(make_input.view(leaf64), dim)
    assert torch.equal(out.isnan(), expected.isnan()), "NaN where torch has none, or the reverse"
    assert rel_error(out, out64) <= TOL[out.dtype], f"forward error {rel_error(out, out64):.2e}"
    dy = fenced(out.shape, out.dtype, seed=3) if dy is None else dy
    (grad,) = torch.autograd.grad(out, leaf, dy)
    (grad_torch,) = torch.autograd.grad(expected, leaf, dy)
    (grad64,) = torch.autograd.grad(out64, leaf64, dy.cpu().double())
    assert grad.shape == leaf.shape and grad.dtype == grad_torch.dtype
    assert torch.equal(grad.isnan(), grad_torch.isnan()), "gradient: NaN where torch has none, or the reverse"
    y64, dy64 = out64.detach(), dy.cpu().double()
    terms = torch.stack([y64 * dy64, y64 * (y64 * dy64).sum(dim, keepdim=True)])
    err = rel_error(grad, grad64, scale=terms[~terms.isnan()].norm().item())
    tol = max(TOL.get(dtype, 0.0), TOL[out.dtype])  # as coarse as the coarser of the two (float64 input: dtype=)
    assert err <= tol, f"gradient error {err:.2e} > {tol:.0e}"


class Input:
    """A fenced leaf of `shape` and the view of it that is passed."""

    def __init__(self, shape, view, seed=1, values=None, scale=2.0):
        self.shape, self.view, self.seed, self.values, self.scale = shape, view, seed, values, scale

    def __call__(self, dtype):
        values = self.values
        if values is None:
            values = torch.randn(self.shape, generator=torch.Generator().manual_seed(self.seed)) * self.scale
        return fenced(self.shape, dtype, values=values)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view,dim", VIEW_DIMS, ids=[f"{v}-dim{d}" for v, d in VIEW_DIMS])
def test_every_view_along_every_dim(softmax, view, dim, dtype):
    check_against_torch(softmax, Input(*VIEWS[view]), dim, dtype)


# incoming gradients as autograd hands them over: broadcast (from .sum()), transposed, sliced, offset
INCOMING = {
    "broadcast 0-d": lambda shape, dtype: fenced((), dtype, seed=5).expand(shape),
    "a row broadcast down": lambda shape, dtype: fenced((1, shape[1]), dtype, seed=5).expand(shape),
    "transposed": lambda shape, dtype: fenced(shape[::-1], dtype, seed=5).T,
    "sliced": lambda shape, dtype: fenced((shape[0] * 2, shape[1] + 3), dtype, seed=5)[::2, 1:-2],
}


@pytest.mark.parametrize("incoming", list(INCOMING))
@pytest.mark.parametrize("dim", [0, 1])
def test_incoming_gradient_views(softmax, incoming, dim):
    dy = INCOMING[incoming]((6, 9), torch.float32)
    check_against_torch(softmax, Input((6, 9), lambda t: t), dim, torch.float32, dy=dy)


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((0,), 0),
        ((0,), -1),
        ((0, 5), 1),
        ((0, 5), 0),
        ((5, 0), 1),
        ((5, 0), 0),
        ((2, 0, 3), 2),
        ((2, 0, 3), 1),
        ((1,), 0),
        ((1, 1), 1),
        ((7, 1), 1),
        ((1, 7), 0),
        ((), 0),
        ((), -1),
    ],
)
def test_empty_and_size_one(softmax, shape, dim):
    check_against_torch(softmax, Input(shape, lambda t: t), dim, torch.float32)


def edge_rows(case, dtype, n):
    """Rows of length n (three of them) with the named extreme values."""
    gen = torch.Generator().manual_seed(n)
    big = torch.finfo(dtype).max
    x = torch.randn(3, n, generator=gen)
    if case == "1e20-scaled":
        return x * (1e20 if dtype != torch.float16 else 1e4)  # fp16's largest is 65504
    if case == "near the largest finite value":
        return torch.where(x > 0, 1.0, -1.0) * big * (1 - torch.rand(3, n, generator=gen) / 8)
    if case == "tiny":
        return x * (1e-30 if dtype != torch.float16 else 1e-6)
    if case == "-inf in places":
        return x.masked_fill(torch.rand(3, n, generator=gen) < 0.4, float("-inf"))
    if case == "a row of -inf":
        return torch.cat([torch.full((1, n), float("-inf")), x[1:]])
    if case == "-inf in the first half of each row":  # the online kernel's lanes that see only -inf for a while
        return x.index_fill(1, torch.arange(n // 2), float("-inf"))
    if case == "inf and NaN":
        x[0, 1], x[2, n - 1] = float("inf"), float("nan")
        return x
    if case == "constant rows":
        return torch.full((3, n), -3.5)
    raise ValueError(case)


EDGES = [
    "1e20-scaled",
    "near the largest finite value",
    "tiny",
    "-inf in places",
    "a row of -inf",
    "-inf in the first half of each row",
    "inf and NaN",
    "constant rows",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", EDGES)
def test_extreme_values_fused_kernels(softmax, case, dtype):
    x = edge_rows(case, dtype, 37)
    check_against_torch(softmax, Input(x.shape, lambda t: t, values=x), -1, dtype)


@pytest.mark.parametrize("case", ["1e20-scaled", "-inf in the first half of each row", "inf and NaN", "a row of -inf"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_extreme_values_online_kernels(softmax, case, dtype):
    """Rows past 32768 (forward) and 16384 (backward): the drop-in computes the forward with PyTorch's softmax, the
    backward with deep dive 11's online kernel."""
    x = edge_rows(case, dtype, 32768 + 40)[:2]
    check_against_torch(softmax, Input(x.shape, lambda t: t, values=x), -1, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64], ids=str)
def test_input_dtypes_the_kernels_lack(softmax, dtype):
    x = torch.ones(3, 5, device=DEVICE).to(dtype)
    with pytest.raises(TypeError, match=f"softmax: input's dtype is {dtype}; these kernels support float32"):
        softmax(x, 1)


@pytest.mark.parametrize("x_dtype", [torch.float64, torch.int64, torch.bool, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_any_input_dtype_with_a_dtype_argument(softmax, x_dtype, dtype):
    """With dtype= torch casts first, whatever the input: so does ours."""
    x = (torch.randn(4, 7, generator=torch.Generator().manual_seed(2)) * 3).to(x_dtype).to(DEVICE)
    got, expected = softmax(x, 1, dtype=dtype), torch.softmax(x, 1, dtype=dtype)
    assert got.dtype == expected.dtype == dtype
    assert rel_error(got, torch.softmax(x.double(), 1)) <= TOL[dtype]
    if x_dtype.is_floating_point:
        check_against_torch(softmax, Input((4, 7), lambda t: t), 1, x_dtype, cast=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, "float32"], ids=str)
def test_dtype_arguments_the_kernels_lack(softmax, dtype):
    with pytest.raises(TypeError, match=f"softmax: dtype={dtype}; these kernels support float32"):
        softmax(torch.ones(3, 5, device=DEVICE), 1, dtype=dtype)


def test_clear_errors(softmax):
    x = torch.ones(3, 5, device=DEVICE)
    with pytest.raises(ValueError, match="softmax: input is on meta"):
        softmax(x.to("meta"), 1)
    with pytest.raises(IndexError, match=r"softmax: dim 2 is out of range for a 2-d tensor \(expected \[-2, 1\]\)"):
        softmax(x, 2)
    with pytest.raises(IndexError, match="dim -2 is out of range for a 0-d tensor"):
        softmax(x[0, 0], -2)
    for dim in (True, 1.0, None, "1"):  # torch refuses a bool too
        with pytest.raises(TypeError, match="softmax: input must be a torch.Tensor and dim must be an int"):
            softmax(x, dim)
    with pytest.raises(TypeError, match="got list"):
        softmax([1.0, 2.0], 0)
    with pytest.raises(ValueError, match=r"rows of 2147483648 elements exceed the kernels' limit of 2\*\*31 - 1"):
        softmax(torch.zeros((), device=DEVICE).expand(2**31), 0)  # stride 0: no memory


def test_gradient_of_the_gradient_is_refused(softmax):
    x = torch.randn(3, 6, device=DEVICE, requires_grad=True)
    dy = torch.randn(3, 6, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"softmax: a gradient of this gradient \(create_graph=True\)"):
        torch.autograd.grad(softmax(x, -1), x, dy, create_graph=True)
    y = softmax(x, -1)
    (first,) = torch.autograd.grad(y, x, dy, retain_graph=True)
    (again,) = torch.autograd.grad(y, x, dy)
    (expected,) = torch.autograd.grad(torch.softmax(x, -1), x, dy)
    torch.testing.assert_close(first, expected)
    assert torch.equal(first, again) and not first.requires_grad
    (softmax(x, 0) * dy).sum().backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(torch.softmax(x, 0), x, dy)[0])


@pytest.mark.skipif(
    DEVICE != "cuda" or torch.cuda.get_device_properties(0).total_memory < 40 * 2**30,
    reason="rows past 2**31 need a GPU with 40 GB",
)
def test_more_than_2_31_rows(softmax):
    x = torch.randn(2**31 + 100, 1, device=DEVICE, dtype=torch.float16)
    assert bool((softmax(x, -1) == 1).all())
    wide = x.view(-1)[: (2**31 // 64 + 1) * 64].view(-1, 64)
    y = softmax(wide, -1)
    for rows in (slice(0, 1000), slice(-1000, None)):
        torch.testing.assert_close(y[rows], torch.softmax(wide[rows], -1))


# deep dive 12's forward-only helper: the same views along the last dim, empty and 0-d tensors, refused dtypes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", list(VIEWS))
def test_deep_dive_12_every_view(softmax_forward, view, dtype):
    shape, make_view = VIEWS[view]
    x = make_view(Input(shape, lambda t: t)(dtype))
    got = softmax_forward(x)
    assert got.shape == x.shape and got.dtype == dtype
    assert rel_error(got, torch.softmax(x.double(), -1)) <= TOL[dtype]


@pytest.mark.parametrize("offset", [8, 7])
def test_deep_dive_12_rows_it_may_stage(softmax_forward, offset):
    """bf16 rows of 16400 with a row stride of 16416: 16-byte aligned where the storage starts 8 elements into its
    buffer (staged on a GPU), not where it starts 7 in (the core kernel)."""
    x = fenced((2, 16416), torch.bfloat16, seed=4, offset=offset)[:, :16400]
    assert rel_error(softmax_forward(x), torch.softmax(x.double(), -1)) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (2, 0, 3), (0,), ()])
def test_deep_dive_12_empty_and_0d(softmax_forward, shape):
    x = torch.randn(shape, device=DEVICE)
    got = softmax_forward(x)
    assert got.shape == x.shape
    torch.testing.assert_close(got, torch.softmax(x, -1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int16], ids=str)
def test_deep_dive_12_refused_dtypes(softmax_forward, dtype):
    with pytest.raises(TypeError, match=f"softmax_forward: x has dtype {dtype}; the kernels take float32"):
        softmax_forward(torch.ones(3, 5, device=DEVICE).to(dtype))
