"""No silent wrong answer from rms_norm (tutorial 04's drop-in, tutorials/04_rms_norm_operator.py) and deep dive 42's
rms_norm_forward: every view an input or a weight can be (sliced, transposed, broadcast with stride 0, 0-d and 1-d, a
non-zero storage offset), normalized shapes of one and two dims, empty and size-1 dims, every dtype F.rms_norm takes
(ours, or a clear TypeError naming the argument) and mixes of input and weight dtypes, eps (None, 0, an int, large),
values at the edges of each dtype (rows past 1e19, whose sum of squares overflows fp32 and where torch returns 0; the
largest finite value; tiny, -inf, inf, NaN, constant and zero rows) through the fused kernels and the chunked ones past
them, gradients of the input and the weight (incoming ones strided and broadcast too), the refused gradient of a
gradient, and clear errors.
Each result is compared with F.rms_norm in the same dtypes and with float64.

Every input, weight and incoming gradient lies inside a larger buffer of NaNs, so a kernel that read outside a
tensor's storage, or assumed unit strides, shows NaN or wrong values in the result."""

import os
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, fenced, load_tutorial

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # the interpreter's numpy

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# ||ours - float64|| / ||float64||: a few roundings of the dtype (the interpreter truncates fp32 -> bf16)
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
TORCH_EPS = torch.finfo(torch.float32).eps  # eps=None: torch's, the epsilon of fp32, in which it computes


@pytest.fixture(scope="module")
def page():
    return load_tutorial("04_rms_norm_operator")


@pytest.fixture(scope="module")
def rms_norm(page):
    return page["rms_norm"]


@pytest.fixture(scope="module")
def rms_norm_forward():
    return load_tutorial("42_rms_norm_staged_gluon")["rms_norm_forward"]


class Input:
    """A fenced leaf of `shape` (values: given, or normal around `shift`) and the view of it that is passed."""

    def __init__(self, shape, view=lambda t: t, seed=1, values=None, shift=0.0):
        self.shape, self.view, self.seed, self.values, self.shift = shape, view, seed, values, shift

    def __call__(self, dtype):
        values = self.values
        if values is None:
            values = torch.randn(self.shape, generator=torch.Generator().manual_seed(self.seed)) * 2 + self.shift
        return fenced(self.shape, dtype, seed=self.seed, values=values)


def rel_error(out, ref, scale=0.0):
    """||out - ref|| / max(||ref||, scale) over the entries where ref is finite; out must be NaN, inf and -inf
    exactly where ref is."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.equal(out.isnan(), ref.isnan()), (
        f"NaN at {out.isnan().nonzero().tolist()[:8]}, expected at {ref.isnan().nonzero().tolist()[:8]}"
    )
    ok = ~ref.isnan()
    assert torch.equal(out[ok & ref.isinf()], ref[ok & ref.isinf()]) and torch.equal(out[ok].isinf(), ref[ok].isinf())
    finite = ok & ~ref.isinf()
    norm = max(ref[finite].norm().item(), scale)
    return (out[finite] - ref[finite]).norm().item() / (norm if norm > 0 else 1.0)


def check(
    rms_norm, x_in, normalized_shape, w_in=None, eps=None, x_dtype=torch.float32, w_dtype=None, dy=None, check_dx=True
):
    """rms_norm against F.rms_norm in the same dtypes (shape, dtype) and float64 (values, NaN), forward and the
    gradients of both leaves. dx is measured against the size of its terms, r * dy * w (at N = 1 they cancel), dw
    against that of its terms dy * x_hat. check_dx=False: dx is not compared (see INTERPRETED below)."""
    x_leaf = x_in(x_dtype).requires_grad_(True)
    w_leaf = None if w_in is None else w_in(w_dtype or x_dtype).requires_grad_(True)
    x, w = x_in.view(x_leaf), None if w_in is None else w_in.view(w_leaf)
    out, expected = rms_norm(x, normalized_shape, w, eps), F.rms_norm(x, normalized_shape, w, eps)
    assert out.shape == expected.shape and out.dtype == expected.dtype, (out.shape, out.dtype, expected.dtype)
    # float64 on the CPU: its answers follow IEEE arithmetic step by step (a row with an inf gives NaN where the inf
    # is and 0 elsewhere; torch's CUDA kernel makes the whole row NaN)
    leaves64 = [t.detach().cpu().double().requires_grad_(True) for t in (x_leaf, w_leaf) if t is not None]
    x64, w64 = x_in.view(leaves64[0]), None if w_in is None else w_in.view(leaves64[1])
    eps64 = TORCH_EPS if eps is None else eps
    out64 = F.rms_norm(x64, normalized_shape, w64, eps64)
    err = rel_error(out, out64)
    assert err <= TOL[x_dtype], f"forward error {err:.2e} > {TOL[x_dtype]:.0e}"
    dy = fenced(out.shape, out.dtype, seed=3) if dy is None else dy
    leaves = [t for t in (x_leaf, w_leaf) if t is not None]
    grads, grads_torch = torch.autograd.grad(out, leaves, dy), torch.autograd.grad(expected, leaves, dy)
    dy64 = dy.detach().cpu().double()
    grads64 = torch.autograd.grad(out64, leaves64, dy64)
    dims = tuple(range(-len(normalized_shape), 0))
    rstd64 = torch.rsqrt(x64.detach().square().mean(dims, keepdim=True) + eps64)
    dyw = dy64 * (1 if w64 is None else w64.detach())
    scales = [
        (rstd64 * dyw).nan_to_num(0, 0, 0).norm().item(),
        (dy64 * x64.detach() * rstd64).nan_to_num(0, 0, 0).norm().item(),
    ]
    for name, g, gt, g64, leaf, scale in zip(("dx", "dw"), grads, grads_torch, grads64, leaves, scales):
        if name == "dx" and not check_dx:
            continue
        assert g.shape == leaf.shape and g.dtype == gt.dtype == leaf.dtype, (name, g.shape, g.dtype, gt.dtype)
        err, tol = rel_error(g, g64, scale), max(TOL[x_dtype], TOL[leaf.dtype])
        assert err <= tol, f"{name}: error {err:.2e} > {tol:.0e}"


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
    "size-1 dims": ((1, 3, 1), lambda t: t),
}
# (view, number of normalized dims): the last dim, and the last two where there are two
VIEW_CASES = [(name, k) for name, (shape, view) in VIEWS.items() for k in (1, 2) if k <= view(torch.empty(shape)).dim()]


def normalized(view_name, k):
    shape, view = VIEWS[view_name]
    return tuple(view(torch.empty(shape)).shape[-k:])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view,k", VIEW_CASES, ids=[f"{v}-{k}d" for v, k in VIEW_CASES])
def test_every_input_view(rms_norm, view, k, dtype):
    ns = normalized(view, k)
    check(rms_norm, Input(*VIEWS[view], shift=0.5), ns, Input(ns, seed=2, shift=1.0), x_dtype=dtype)
    check(rms_norm, Input(*VIEWS[view], shift=0.5), ns, None, eps=1e-3, x_dtype=dtype)


# weight views, for a normalized shape ns: (shape of the fenced base, the view of it)
WEIGHTS = {
    "every other element": lambda ns: ((ns[0] * 2, *ns[1:]), lambda t: t[::2]),
    "0-d broadcast": lambda ns: ((), lambda t: t.expand(ns)),
    "transposed": lambda ns: (ns[::-1], lambda t: t.permute(*range(len(ns) - 1, -1, -1))),
    "broadcast along its first dim": lambda ns: ((1, *ns[1:]), lambda t: t.expand(ns)),
    "sliced at an offset": lambda ns: ((*ns[:-1], ns[-1] + 5), lambda t: t[..., 3:-2]),
}


@pytest.mark.parametrize("ns", [(9,), (4, 9)], ids=str)
@pytest.mark.parametrize("weight", list(WEIGHTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_weight_view(rms_norm, ns, weight, dtype):
    check(
        rms_norm,
        Input((3, *ns), shift=0.5),
        ns,
        Input(*WEIGHTS[weight](ns), seed=2, values=None, shift=1.0),
        x_dtype=dtype,
    )


# incoming gradients as autograd hands them over: broadcast (from .sum()), transposed, sliced, offset
INCOMING = {
    "broadcast 0-d": lambda shape, dtype: fenced((), dtype, seed=5).expand(shape),
    "a row broadcast down": lambda shape, dtype: fenced((1, shape[1]), dtype, seed=5).expand(shape),
    "transposed": lambda shape, dtype: fenced(shape[::-1], dtype, seed=5).T,
    "sliced": lambda shape, dtype: fenced((shape[0] * 2, shape[1] + 3), dtype, seed=5)[::2, 1:-2],
}


@pytest.mark.parametrize("incoming", list(INCOMING))
@pytest.mark.parametrize("n", [9, 8200], ids=lambda n: f"N={n}")  # 8200: the backward in torch
def test_incoming_gradient_views(rms_norm, incoming, n):
    dy = INCOMING[incoming]((3, n), torch.float32)
    check(rms_norm, Input((3, n)), (n,), Input((n,), seed=2, shift=1.0), dy=dy)


@pytest.mark.parametrize(
    "shape,ns",
    [
        ((0, 9), (9,)),
        ((2, 0, 9), (9,)),
        ((3, 0), (0,)),
        ((0, 4, 9), (4, 9)),
        ((2, 3, 0), (3, 0)),
        ((5, 1), (1,)),
        ((1,), (1,)),
        ((1, 1), (1, 1)),
        ((4, 1, 7), (1, 7)),
    ],
    ids=str,
)
@pytest.mark.parametrize("affine", [False, True])
def test_empty_and_size_one(rms_norm, shape, ns, affine):
    check(rms_norm, Input(shape), ns, Input(ns, seed=2, shift=1.0) if affine else None)


def edge_rows(case, dtype, n):
    """Four rows of length n with the named extreme values."""
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(4, n, generator=gen)
    if case == "1e20-scaled":  # sum of squares past fp32's largest; fp16 holds 65504 at most
        return x * (1e20 if dtype != torch.float16 else 1e4)
    if case == "near the largest finite value":
        return torch.where(x > 0, 1.0, -1.0) * torch.finfo(dtype).max * (1 - torch.rand(4, n, generator=gen) / 8)
    if case == "an overflowing row among ordinary ones, and a NaN row":  # one block of rows, mixed
        return x * torch.tensor([[1.0], [1e20 if dtype != torch.float16 else 1e4], [1.0], [1.0]]) + torch.tensor(
            [[0.0], [0.0], [float("nan")], [0.0]]
        )
    if case == "tiny":
        return x * (1e-30 if dtype != torch.float16 else 1e-6)
    if case == "-inf in places":
        return x.masked_fill(torch.rand(4, n, generator=gen) < 0.2, float("-inf"))
    if case == "inf and NaN":
        x[0, 1], x[2, n - 1] = float("inf"), float("nan")
        return x
    if case == "constant rows":
        return torch.full((4, n), -3.5)
    if case == "zero rows":
        return torch.zeros(4, n)
    raise ValueError(case)


EDGES = [
    "1e20-scaled",
    "near the largest finite value",
    "an overflowing row among ordinary ones, and a NaN row",
    "tiny",
    "-inf in places",
    "inf and NaN",
    "constant rows",
    "zero rows",
]


# Near the largest finite value dx is about 1 / that value, subnormal. Triton's interpreter converts a subnormal
# fp32 to bf16 wrongly (a GPU rounds it right), so there, and only there, bf16's dx is not compared.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def dx_comparable(case, dtype):
    return not (INTERPRETED and dtype == torch.bfloat16 and case == "near the largest finite value")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", EDGES)
def test_extreme_values_fused_kernels(rms_norm, case, dtype):
    x = edge_rows(case, dtype, 37)
    check(
        rms_norm,
        Input(x.shape, values=x),
        (37,),
        Input((37,), seed=2, shift=1.0),
        x_dtype=dtype,
        check_dx=dx_comparable(case, dtype),
    )


@pytest.mark.parametrize(
    "case",
    [
        "1e20-scaled",
        "near the largest finite value",
        "inf and NaN",
        "an overflowing row among ordinary ones, and a NaN row",
        "zero rows",
    ],
)
def test_extreme_values_past_the_kernels_of_the_drop_in(rms_norm, page, case):
    """fp32 rows of 16400: past 64 KB the forward, past 8 K values the backward, stream each row in chunks (deep dive
    41's kernels)."""
    assert not page["fused"]("forward", 16400, 4) and not page["fused"]("backward", 16400, 4)
    x = edge_rows(case, torch.float32, 16400)
    check(rms_norm, Input(x.shape, values=x), (16400,), Input((16400,), seed=2, shift=1.0))


@pytest.mark.parametrize("eps", [None, 0.0, 1, 1e-3, 1e4], ids=repr)
def test_eps(rms_norm, eps):
    """eps=0 with a row of zeros: 0 / 0, NaN, as torch and float64."""
    x = torch.cat([torch.randn(3, 9, generator=torch.Generator().manual_seed(4)), torch.zeros(1, 9)])
    check(rms_norm, Input(x.shape, values=x), (9,), Input((9,), seed=2, shift=1.0), eps=eps)


@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float16, torch.bfloat16),
        (torch.bfloat16, torch.float16),
    ],
    ids=str,
)
def test_input_and_weight_in_different_dtypes(rms_norm, x_dtype, w_dtype):
    check(
        rms_norm,
        Input((3, 4, 9), shift=0.5),
        (4, 9),
        Input((4, 9), seed=2, shift=1.0),
        x_dtype=x_dtype,
        w_dtype=w_dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool, torch.complex64], ids=str)
def test_dtypes_the_kernels_lack(rms_norm, dtype):
    x = torch.ones(3, 5, device=DEVICE)
    with pytest.raises(TypeError, match=f"rms_norm: input is {dtype}; the kernels take torch.Tensors of dtype"):
        rms_norm(x.to(dtype), (5,))
    with pytest.raises(TypeError, match=f"rms_norm: weight is {dtype}; the kernels take torch.Tensors of dtype"):
        rms_norm(x, (5,), torch.ones(5, device=DEVICE).to(dtype))


def test_clear_errors(rms_norm):
    x = torch.randn(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="rms_norm: input is on meta"):
        rms_norm(x.to("meta"), (8,))
    with pytest.raises(ValueError, match="rms_norm: weight is on meta"):
        rms_norm(x, (8,), torch.ones(8, device="meta"))
    for ns in [(4,), (2, 4, 8), (), (-8,), (0,)]:
        with pytest.raises(ValueError, match=re.escape(f"rms_norm: normalized_shape {ns} must be at least one of")):
            rms_norm(x, ns)
    with pytest.raises(ValueError, match="normalized_shape"):
        rms_norm(x[0, 0], ())  # 0-d: torch refuses it too
    for w in (torch.ones(7, device=DEVICE), torch.ones(1, 8, device=DEVICE), torch.ones((), device=DEVICE)):
        with pytest.raises(ValueError, match=r"rms_norm: weight has shape torch.Size\(\[.*\]\) on .*, not \(8,\)"):
            rms_norm(x, (8,), w)
    for eps in (True, "0.1", torch.tensor(0.1)):
        with pytest.raises(TypeError, match="rms_norm: normalized_shape must be a tuple of ints, eps a float or None"):
            rms_norm(x, (8,), None, eps)
    with pytest.raises(TypeError, match="tuple of ints"):
        rms_norm(x, (8.0,))
    with pytest.raises(TypeError, match="rms_norm: input is list"):
        rms_norm([[1.0, 2.0]], (2,))


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("n", [9, 8200], ids=lambda n: f"N={n}")
def test_gradient_of_the_gradient_is_refused(rms_norm, affine, n):
    x = torch.randn(3, n, device=DEVICE, requires_grad=True)
    w = torch.randn(n, device=DEVICE, requires_grad=True) if affine else None
    leaves, dy = [t for t in (x, w) if t is not None], torch.randn(3, n, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"rms_norm: a gradient of this gradient \(create_graph=True\)"):
        torch.autograd.grad(rms_norm(x, (n,), w), leaves, dy, create_graph=True)
    if affine:  # only the weight's gradient asked for: refused too
        with pytest.raises(RuntimeError, match="rms_norm: a gradient of this gradient"):
            torch.autograd.grad(rms_norm(x.detach(), (n,), w), w, dy, create_graph=True)
    y = rms_norm(x, (n,), w)
    first = torch.autograd.grad(y, leaves, dy, retain_graph=True)
    again = torch.autograd.grad(y, leaves, dy)
    expected = torch.autograd.grad(F.rms_norm(x, (n,), w), leaves, dy)
    for g, g2, e in zip(first, again, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
        assert torch.equal(g, g2) and not g.requires_grad
    (rms_norm(x, (n,), w) * dy).sum().backward()
    torch.testing.assert_close(x.grad, expected[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    DEVICE != "cuda" or torch.cuda.get_device_properties(0).total_memory < 40 * 2**30,
    reason="rows past 2**31 need a GPU with 40 GB",
)
def test_more_than_2_31_rows(rms_norm):
    """A program's first row, program_id * BLOCK_M, passes 2**31 there: it must be computed in int64."""
    x = torch.randn(2**31 + 100, 1, device=DEVICE, dtype=torch.bfloat16)
    y = rms_norm(x, (1,))
    for rows in (slice(0, 1000), slice(-1000, None)):
        torch.testing.assert_close(y[rows], F.rms_norm(x[rows], (1,)))


# deep dive 42's forward-only helper: the same views along the last dim, with weights; empty and refused inputs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("view", [v for v, k in VIEW_CASES if k == 1])
def test_deep_dive_42_every_view(rms_norm_forward, view, dtype):
    shape, make_view = VIEWS[view]
    x = make_view(Input(shape, shift=0.5)(dtype))
    n = x.shape[-1]
    for w in (
        None,
        Input(*WEIGHTS["every other element"]((n,)), seed=2, shift=1.0),
        Input(*WEIGHTS["0-d broadcast"]((n,)), seed=2, shift=1.0),
    ):
        weight = None if w is None else w.view(w(torch.float32))
        got = rms_norm_forward(x, weight, 1e-6)
        assert got.shape == x.shape and got.dtype == dtype
        ref = F.rms_norm(x.cpu().double(), (n,), None if weight is None else weight.cpu().double(), 1e-6)
        assert rel_error(got, ref) <= TOL[dtype]


@pytest.mark.parametrize("case", ["1e20-scaled", "inf and NaN", "zero rows"])
@pytest.mark.parametrize("offset", [8, 7])
def test_deep_dive_42_rows_it_may_stage(rms_norm_forward, offset, case):
    """bf16 rows of 16400 with a row stride of 16416: 16-byte aligned where the storage starts 8 elements into its
    buffer (staged on a GPU), not where it starts 7 in (the core kernel)."""
    x = fenced(
        (4, 16416),
        torch.bfloat16,
        offset=offset,
        values=torch.cat([edge_rows(case, torch.bfloat16, 16400), torch.zeros(4, 16)], 1),
    )[:, :16400]
    assert rel_error(rms_norm_forward(x, None, 1e-6), F.rms_norm(x.cpu().double(), (16400,), None, 1e-6)) <= 2e-2


@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (2, 0, 3)], ids=str)
def test_deep_dive_42_empty(rms_norm_forward, shape):
    x = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    assert rms_norm_forward(x).shape == x.shape


def test_deep_dive_42_refuses_what_it_cannot_read(rms_norm_forward):
    x = torch.randn(3, 8, device=DEVICE, dtype=torch.bfloat16)
    for bad in (x.float(), x.to(torch.int16), x[0, 0]):  # int16: 16-bit, but not floating
        with pytest.raises(ValueError, match=r"rms_norm_forward: 16-bit rows of up to 32768 elements \(got"):
            rms_norm_forward(bad)
    for w in (
        torch.ones(7, device=DEVICE),
        torch.ones(9, device=DEVICE),
        torch.ones(1, 8, device=DEVICE),
        torch.ones(8, dtype=torch.int32, device=DEVICE),
    ):
        with pytest.raises(ValueError, match=r"rms_norm_forward: weight has shape .* expected \(8,\)"):
            rms_norm_forward(x, w)
