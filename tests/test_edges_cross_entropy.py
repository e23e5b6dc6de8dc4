"""No silent wrong answer from the cross-entropy drop-ins: tutorial 06's ``cross_entropy`` (on its page
06_cross_entropy_backward) and deep dive 61's (its rows through the split kernel, several slices a row on a GPU, with
the constants kernel before it). Each is run on every view a tensor argument can be (sliced, transposed, broadcast with
stride 0, 0-d and 1-d, a non-zero storage offset), every shape torch takes (empty, size 1, N-D), every target dtype
F.cross_entropy takes (int64 and uint8; the others a clear TypeError), weights of every floating dtype, logits at the
edges of each dtype (its largest finite value, 1e20, constant rows, -inf, NaN) read in several chunks, every reduction
with and without a gradient (the forward alone is its own launch), and arguments of odd types; refused arguments raise
errors that name them, and so does a gradient of the gradient.

Losses and gradients are compared with F.cross_entropy in float64 on the same views, rounded once to the logits' dtype;
where that rounding is finite and ours is not, torch in the logits' dtype must give the same infinity (an fp32 sum of
two losses of 3e38 overflows in both). Each argument's storage sits inside a larger buffer, NaN (logits, weights) or an
out-of-range class (targets) all around: a read outside a view shows in the result, and the gradient of the fence must
be 0."""

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, load_tutorial

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Relative error (in norm) against float64: a few roundings of the dtype (the interpreter truncates to bf16).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
PAGES = ("06_cross_entropy_backward", "61_cross_entropy_split_rows")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy, at inf and NaN
V = 40  # classes: three chunks of 16 (the last ragged) where the pages' chunks are shrunk below


@pytest.fixture(params=PAGES, ids=("06", "61"))
def page(request, monkeypatch):
    """The page, its chunks shrunk to 16 logits (the online maximum and its rescaling at work in a row of 40); on 61,
    every row with a gradient and no smoothing through the split kernel, in slices of 16 on a GPU."""
    page = load_tutorial(request.param)
    monkeypatch.setitem(page.data, "CHUNK_N", 16)
    monkeypatch.setitem(page.data, "FORWARD_CHUNK_N", 16)
    if request.param.startswith("61"):
        monkeypatch.setitem(page.data, "_split_config", lambda size: dict(MIN_N=1, SLICE_N=16, num_warps=4))
    return page


def fenced(values, dtype, fill=float("nan"), grad=False):
    """(buffer, view of it): values stored 5 elements into a buffer of `fill` that runs on past their end."""
    n = values.numel()
    buffer = torch.full((n + 11,), fill, dtype=dtype)
    buffer[5 : 5 + n] = values.reshape(-1).to(dtype)
    buffer = buffer.to(DEVICE).requires_grad_(grad)
    return buffer, lambda b: b[5 : 5 + n].view(values.shape)


def assert_close(out, ref, tol, what, same_dtype=None, scale=0.0):
    """out against the float64 ref rounded to out's dtype: the same infinities and NaNs, the finite rest within tol
    (relative, in norm, or to scale where larger: terms that cancel to a small ref); where ref rounds to a finite value
    and out is not finite, torch in out's dtype (same_dtype) must give that same non-finite value."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)}, torch's {tuple(ref.shape)}"
    out, ref = out.detach().double().cpu(), ref.detach().to(out.dtype).double().cpu()
    finite = ref.isfinite() & out.isfinite()
    odd = ~finite & ~(out.isnan() & ref.isnan()) & (out != ref)
    if same_dtype is not None:
        same = same_dtype.detach().double().cpu()
        odd &= ~(ref.isfinite() & ((out == same) | (out.isnan() & same.isnan())))
    assert not odd.any(), f"{what}: {out[odd].tolist()[:4]} where float64 gives {ref[odd].tolist()[:4]}"
    err = (out[finite] - ref[finite]).norm() / max(ref[finite].norm().item(), scale, 1e-30)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


def compare(ce, leaf, view_of, target, weight=None, grad=True, what="", tol=None, **options):
    """ce(view_of(leaf), ...) against F.cross_entropy in float64 on the same view of a float64 copy of leaf: the loss
    and, with grad, the gradient of leaf (fence included: 0 there) for a random upstream gradient, measured against
    the size of the gradient of the view (summed over a broadcast, its terms cancel)."""
    x = view_of(leaf)
    tol, what = tol or TOL[x.dtype], f"{what} {options}"
    out = ce(x, target, weight=weight, **options)
    leaf64 = leaf.detach().double().requires_grad_(grad)
    w64 = None if weight is None else weight.double()
    view64 = view_of(leaf64)
    ref = F.cross_entropy(view64, target.long(), weight=w64, **options)
    same = F.cross_entropy(x, target.long(), weight=None if weight is None else weight.to(x.dtype), **options)
    assert out.dtype == x.dtype, f"{what}: dtype {out.dtype}"
    assert_close(out, ref, tol, f"{what}: loss", same)
    if grad:
        dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(out.numel())).to(DEVICE, x.dtype)
        (g,) = torch.autograd.grad(out, leaf, dy)
        g64, g_view = torch.autograd.grad(ref, [leaf64, view64], dy.double())
        (g_same,) = torch.autograd.grad(same, leaf, dy)
        scale = g_view[g_view.isfinite()].norm().item()
        assert_close(g, g64, tol, f"{what}: gradient", g_same, scale)
    return out


def randn(shape, seed, scale=3.0):
    return scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def classes(shape, seed, n=V, ignored=0.2):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, n, shape, generator=gen)
    return t.masked_fill(torch.rand(shape, generator=gen) < ignored, -100)


def runs(page, leaf, view_of, target, weight, what):
    """The three paths: the per-row kernel with the gradient (the split kernel on 61) with weights, 'none'; with
    smoothing, 'mean' (61's core kernel, torch's own in fp32 on 06); the forward alone, 'sum' (one launch on 61)."""
    ce = page["cross_entropy"]
    compare(ce, leaf, view_of, target, weight, what=what, reduction="none")
    compare(ce, leaf, view_of, target, weight, what=what, reduction="mean", label_smoothing=0.1)
    compare(ce, leaf.detach(), view_of, target, weight, grad=False, what=what, reduction="sum", label_smoothing=0.2)
    compare(ce, leaf.detach(), view_of, target, None, grad=False, what=what, reduction="mean")


# ---- 1. strides: every view of every tensor argument ----

# name -> (values of the base, the view of it the drop-in gets, the target's shape)
LOGIT_VIEWS = {
    "contiguous": ((5, V), lambda t: t, (5,)),
    "every other row": ((10, V), lambda t: t[::2], (5,)),
    "classes sliced (a row stride past V)": ((5, V + 3), lambda t: t[:, 1:-2], (5,)),
    "transposed (classes of stride 5)": ((V, 5), lambda t: t.T, (5,)),
    "a row broadcast down (row stride 0)": ((1, V), lambda t: t.expand(5, V), (5,)),
    "0-d broadcast to 2-D (constant rows)": ((), lambda t: t.expand(5, V), (5,)),
    "a column broadcast across (class stride 0)": ((5, 1), lambda t: t.expand(5, V), (5,)),
    "1-D, a row at an offset": ((3, V), lambda t: t[1], ()),
    "1-D, every other element": ((2 * V,), lambda t: t[::2], ()),
    "N-D, classes contiguous (permuted)": ((2, 3, V), lambda t: t.permute(0, 2, 1), (2, 3)),
    "N-D, classes of stride 3": ((2, V, 3), lambda t: t, (2, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(LOGIT_VIEWS))
def test_every_view_of_the_logits(page, name, dtype):
    base, view_of, target_shape = LOGIT_VIEWS[name]
    leaf, fence = fenced(randn(base, seed=len(name)), dtype, grad=True)
    target = classes(target_shape, seed=len(name), ignored=0.0 if target_shape == () else 0.2).to(DEVICE)
    weight = (torch.rand(V, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5).to(DEVICE)
    runs(page, leaf, lambda b: view_of(fence(b)), target, weight.float(), name)


# name -> (base of the targets, view) for logits of 5 rows
TARGET_VIEWS = {
    "every other": ((10,), lambda t: t[::2]),
    "at an offset": ((9,), lambda t: t[4:]),
    "0-d broadcast (stride 0)": ((), lambda t: t.expand(5)),
    "a column of a matrix": ((5, 3), lambda t: t[:, 1]),
}
WEIGHT_VIEWS = {
    "every other": ((2 * V,), lambda t: t[::2]),
    "at an offset": ((V + 5,), lambda t: t[5:]),
    "0-d broadcast (stride 0)": ((), lambda t: t.expand(V)),
    "a column of a matrix": ((V, 3), lambda t: t[:, 2]),
}


@pytest.mark.parametrize("target_dtype", [torch.int64, torch.uint8], ids=str)
@pytest.mark.parametrize("name", list(TARGET_VIEWS))
def test_every_view_of_the_target(page, name, target_dtype):
    """The fence around the targets holds a class out of range: a read of it would make its row NaN."""
    base, view_of = TARGET_VIEWS[name]
    values = classes(base, seed=len(name), ignored=0.0).to(target_dtype)
    buffer, fence = fenced(values, target_dtype, fill=250 if target_dtype == torch.uint8 else -7)
    target = view_of(fence(buffer))
    leaf, x_of = fenced(randn((5, V), seed=2), torch.float32, grad=True)
    weight = torch.arange(1.0, V + 1, device=DEVICE)
    runs(page, leaf, x_of, target, weight, name)


@pytest.mark.parametrize("name", list(WEIGHT_VIEWS))
def test_every_view_of_the_weight(page, name):
    base, view_of = WEIGHT_VIEWS[name]
    buffer, fence = fenced(torch.arange(1.0, math.prod(base) + 1, dtype=torch.float64), torch.float32)
    weight = view_of(fence(buffer).view(base))
    leaf, x_of = fenced(randn((5, V), seed=3), torch.float32, grad=True)
    runs(page, leaf, x_of, classes((5,), seed=4).to(DEVICE), weight, name)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_upstream_gradient_views(page, reduction):
    """The upstream gradient sliced, broadcast (a scalar's, stride 0), and loss.sum().backward()'s."""
    leaf, x_of = fenced(randn((6, V), seed=5), torch.float32, grad=True)
    target = classes((6,), seed=5).to(DEVICE)
    n = 1 if reduction != "none" else 6
    for dy in (
        torch.randn(2 * n, generator=torch.Generator().manual_seed(5))[::2].to(DEVICE),
        torch.tensor(2.0, device=DEVICE).expand(n),
    ):
        dy = dy.view(()) if reduction != "none" else dy
        (g,) = torch.autograd.grad(page["cross_entropy"](x_of(leaf), target, reduction=reduction), leaf, dy)
        leaf64 = leaf.detach().double().requires_grad_(True)
        (g64,) = torch.autograd.grad(F.cross_entropy(x_of(leaf64), target, reduction=reduction), leaf64, dy.double())
        assert_close(g, g64, TOL[torch.float32], f"{reduction}, dy of strides {dy.stride()}")
    page["cross_entropy"](x_of(leaf), target, reduction=reduction).sum().backward()
    leaf64 = leaf.detach().double().requires_grad_(True)
    F.cross_entropy(x_of(leaf64), target, reduction=reduction).sum().backward()
    assert_close(leaf.grad, leaf64.grad, TOL[torch.float32], f"{reduction}, backward()")


def test_the_gradient_in_place_never_over_rows_that_share_memory(page):
    """inplace_backward=True over broadcast logits (rows of stride 0) would write each row's gradient over the others':
    a new tensor takes it, and the logits stay as they were; over sliced logits it is written inside the view only."""
    ce = page["cross_entropy"]
    if "inplace_backward" not in inspect.signature(ce).parameters:
        pytest.skip("this page's drop-in has no inplace_backward (deep dive 61's has)")
    target = classes((5,), seed=6, ignored=0.0).to(DEVICE)
    for name, base, view_of in (
        ("broadcast", (1, V), lambda t: t.expand(5, V)),
        ("sliced", (10, V + 3), lambda t: t[::2, 1:-2]),
    ):
        buffer, fence = fenced(randn(base, seed=7), torch.float32, grad=True)
        before = buffer.detach().clone()
        leaf64 = before.double().requires_grad_(True)
        (expected,) = torch.autograd.grad(F.cross_entropy(view_of(fence(leaf64)), target, reduction="sum"), leaf64)
        (g,) = torch.autograd.grad(ce(view_of(fence(buffer)), target, reduction="sum", inplace_backward=True), buffer)
        assert_close(g, expected, TOL[torch.float32], f"in place over {name} logits")
        inside = torch.zeros(buffer.numel(), dtype=torch.bool, device=DEVICE)
        inside[view_of(fence(torch.arange(buffer.numel(), device=DEVICE))).reshape(-1)] = True
        after = buffer.detach()
        torch.testing.assert_close(after[~inside], before[~inside], rtol=0, atol=0, equal_nan=True)
        if name == "broadcast":  # the logits themselves unchanged
            torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True)
        else:
            assert torch.equal(after[inside], g[inside]), "the gradient is not written over the sliced logits"


# ---- 2. shapes ----


@pytest.mark.parametrize(
    "shape, target_shape",
    [
        ((0, V), (0,)),
        ((2, V, 0), (2, 0)),
        ((1, V), (1,)),
        ((5, 1), (5,)),
        ((1,), ()),
        ((V,), ()),
        ((3, V, 1, 2), (3, 1, 2)),
        ((0, 1), (0,)),
    ],
    ids=str,
)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_shapes_torch_takes(page, shape, target_shape, reduction):
    """Empty batches ('mean': NaN, as torch's 0 / 0), empty N-D dims, one row, one class, 1-D logits, size-1 dims."""
    n_classes = shape[1] if len(shape) > 1 else shape[0]
    leaf, x_of = fenced(randn(shape, seed=len(shape)), torch.float32, grad=True)
    target = classes(target_shape, seed=8, n=n_classes, ignored=0.0).to(DEVICE)
    for grad in (True, False):
        compare(
            page["cross_entropy"],
            leaf if grad else leaf.detach(),
            x_of,
            target,
            grad=grad,
            what=str(shape),
            reduction=reduction,
        )


# ---- 3. dtypes ----

INTEGERS = (torch.int64, torch.uint8, torch.int32, torch.int16, torch.int8, torch.uint16, torch.uint32, torch.uint64)


@pytest.mark.parametrize("dtype", INTEGERS + (torch.bool, torch.float32, torch.float16), ids=str)
def test_target_dtypes_as_torch_takes_them(page, dtype):
    """int64 and uint8 targets give torch's answer, with weights, for every reduction, with and without a gradient,
    at ignore_index -100 (which no uint8 equals) and 200; every other dtype torch refuses is a clear TypeError."""
    ce = page["cross_entropy"]
    values = classes((6,), seed=9, ignored=0.0)
    values[2] = 200  # a class, or ignored with ignore_index=200
    leaf, x_of = fenced(randn((6, 250), seed=9), torch.float32, grad=True)
    try:
        F.cross_entropy(x_of(leaf).detach(), values.to(dtype).to(DEVICE))
        accepted = True
    except (RuntimeError, TypeError, ValueError):
        accepted = False
    assert accepted == (dtype in (torch.int64, torch.uint8)), f"torch's targets: int64 and uint8, not {dtype}"
    target = values.to(dtype).to(DEVICE)
    if not accepted:
        with pytest.raises(TypeError, match=f"cross_entropy: target has dtype {dtype}"):
            ce(x_of(leaf), target)
        return
    weight = torch.rand(250, generator=torch.Generator().manual_seed(9)).to(DEVICE) + 0.5
    for options in ({}, {"weight": weight, "ignore_index": 200}):
        for reduction in ("mean", "sum", "none"):
            compare(ce, leaf, x_of, target, what=str(dtype), reduction=reduction, **options)
        compare(ce, leaf.detach(), x_of, target, grad=False, what=str(dtype), **options)


def test_the_constants_kernel_with_uint8_targets():
    """Deep dive 61's constants kernel, given uint8 targets directly: its masked lanes never count as rows (a uint8
    cannot hold the -100 of ignore_index), at every ignore_index a uint8 target can or cannot equal."""
    page = load_tutorial("61_cross_entropy_split_rows")
    values = torch.tensor([3, 200, 7, 0, 255, 200, 9], dtype=torch.uint8)
    weight = torch.rand(300, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    for ignore_index in (-100, 200, 255, 456):
        for w in (None, weight):
            scale, consts = page["loss_constants"](
                values.to(DEVICE), None if w is None else w.float().to(DEVICE), ignore_index, True, 300
            )
            kept = values.long() != ignore_index
            counted = kept.sum().item() if w is None else w[values.long()][kept].sum().item()
            assert scale.item() == pytest.approx(1 / counted, rel=1e-6), (ignore_index, w is None)
    x = randn((7, 300), seed=1).float().to(DEVICE)
    for launch in ("core_rows", "ce_split_rows"):
        for w in (None, weight.float().to(DEVICE)):
            dx8, dx64 = torch.empty_like(x), torch.empty_like(x)
            losses8, scale8 = page[launch](x, values.to(DEVICE), w, 200, True, dx8)
            losses64, scale64 = page[launch](x, values.long().to(DEVICE), w, 200, True, dx64)
            assert torch.equal(losses8, losses64) and torch.equal(dx8, dx64) and torch.equal(scale8, scale64), launch


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_weights_of_every_floating_dtype(page, weight_dtype):
    """A weight of another floating dtype than the logits' (torch asks for the same one) is used as it is."""
    leaf, x_of = fenced(randn((6, V), seed=10), torch.float32, grad=True)
    weight = (torch.rand(V, generator=torch.Generator().manual_seed(10)) * 3 + 0.1).to(weight_dtype).to(DEVICE)
    target = classes((6,), seed=10).to(DEVICE)
    ce = page["cross_entropy"]
    for options in ({"reduction": "mean"}, {"reduction": "none", "label_smoothing": 0.3}):
        out = ce(x_of(leaf), target, weight=weight, **options)
        leaf64 = leaf.detach().double().requires_grad_(True)
        ref = F.cross_entropy(x_of(leaf64), target, weight=weight.double(), **options)
        assert_close(out, ref, TOL[torch.float32], f"weight {weight_dtype}")
        (g,) = torch.autograd.grad(out.sum(), leaf)
        (g64,) = torch.autograd.grad(ref.sum(), leaf64)
        assert_close(g, g64, TOL[torch.float32], f"weight {weight_dtype}: gradient")


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64], ids=str)
def test_dtypes_the_kernels_do_not_take_raise_a_clear_type_error(page, dtype):
    ce, target = page["cross_entropy"], torch.tensor([0, 1], device=DEVICE)
    with pytest.raises(TypeError, match=f"cross_entropy: logits have dtype {dtype}"):
        ce(torch.ones(2, 3, device=DEVICE).to(dtype), target)
    if dtype != torch.float64:
        with pytest.raises(TypeError, match=f"cross_entropy: weight must be a float tensor, got {dtype}"):
            ce(torch.ones(2, 3, device=DEVICE), target, weight=torch.ones(3, device=DEVICE).to(dtype))


def test_class_probabilities_are_refused_clearly(page):
    """torch takes a floating target of the logits' shape as class probabilities; the drop-in says to use torch's."""
    x = torch.randn(3, 5, device=DEVICE)
    with pytest.raises(TypeError, match="target has dtype torch.float32.*class probabilities"):
        page["cross_entropy"](x, torch.softmax(x, 1))


# ---- 4. values at the edges of each dtype ----


def extreme(case, dtype):
    """(logits, targets), in float64, of 4 rows of V: what the case puts at the edges of dtype, in different chunks."""
    big = torch.finfo(dtype).max
    x, t = randn((4, V), seed=len(case)), torch.tensor([3, 17, 39, 20])
    if case == "largest at the target":
        x[torch.arange(4), t] = big
    elif case == "largest elsewhere":
        x[torch.arange(4), torch.tensor([0, 16, 38, 33])] = big
    elif case == "largest and -largest":  # losses of 2 * largest: inf in the dtype, as in torch's
        x[:] = -big
        x[:, 37] = big
        t = torch.tensor([37, 0, 16, 37])
    elif case == "-largest":
        x[:, ::3] = -big
    elif case == "constant largest":
        x[:] = big
    elif case == "constant -largest":
        x[:] = -big
    elif case == "constant 1e20":
        x[:] = 1e20 if dtype != torch.float16 else 6e4
    elif case == "scaled by 1e20":
        x *= 1e20 / 3 if dtype != torch.float16 else 1e4 / 3
    elif case == "-inf":  # a masked vocabulary; the last row's target masked too: an infinite loss
        x[:, 10:30] = float("-inf")
        t = torch.tensor([3, 31, 9, 15])
    elif case == "a row of -inf":
        x[1] = float("-inf")
    elif case == "inf and nan":
        x[1, 5], x[2, 20] = float("inf"), float("nan")
    return x, t


EXTREMES = [
    "largest at the target",
    "largest elsewhere",
    "largest and -largest",
    "-largest",
    "constant largest",
    "constant -largest",
    "constant 1e20",
    "scaled by 1e20",
    "-inf",
    "a row of -inf",
    "inf and nan",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", EXTREMES)
def test_values_at_the_edges_of_the_dtype(page, case, dtype):
    x, t = extreme(case, dtype)
    leaf, x_of = fenced(x, dtype, grad=True)
    weight = torch.rand(V, generator=torch.Generator().manual_seed(2)).to(DEVICE) + 0.5
    runs(page, leaf, x_of, t.to(DEVICE), weight, case)
    compare(page["cross_entropy"], leaf, x_of, t.to(DEVICE), weight, what=case, reduction="none", label_smoothing=0.1)


@pytest.mark.parametrize("case", EXTREMES)
def test_the_split_kernels_merge_at_the_edges(case):
    """Deep dive 61's split kernel with three slices a row (the words of the other slices written beforehand: the
    interpreter runs one program at a time): the merge of their maxima and sums at the edges of float32."""
    import test_cross_entropy_split as split_tests

    page = load_tutorial("61_cross_entropy_split_rows")
    x, t = extreme(case, torch.float32)
    x, t = x.float().to(DEVICE), t.to(DEVICE)
    dx = torch.full_like(x, float("nan"))
    flags = split_tests.words(x, 3, 16) if not torch.cuda.is_available() else None
    losses, scale = page["ce_split_rows"](x, t, None, -100, False, dx, slices=3, flags=flags)
    x64 = x.double().requires_grad_(True)
    ref = F.cross_entropy(x64, t, reduction="none")
    (dx64,) = torch.autograd.grad(ref.sum(), x64)
    same = F.cross_entropy(x.requires_grad_(True), t, reduction="none")
    (dx_same,) = torch.autograd.grad(same.sum(), x)
    assert_close(losses, ref, TOL[torch.float32], f"{case}: loss", same)
    assert_close(dx, dx64, TOL[torch.float32], f"{case}: gradient", dx_same)


# ---- 5. gradients: the gradient of the gradient is refused ----


def test_a_gradient_of_the_gradient_is_refused_and_a_plain_one_still_works(page):
    ce = page["cross_entropy"]
    x = torch.randn(4, V, device=DEVICE, requires_grad=True)
    target = classes((4,), seed=11).to(DEVICE)
    for reduction in ("mean", "none"):
        with pytest.raises(RuntimeError, match=r"cross_entropy: a gradient of this gradient \(create_graph=True\)"):
            torch.autograd.grad(ce(x, target, reduction=reduction).sum(), x, create_graph=True)
    expected = torch.autograd.grad(F.cross_entropy(x, target), x)[0]
    assert_close(torch.autograd.grad(ce(x, target), x)[0], expected.double(), 1e-5, "autograd.grad")
    x.grad = None
    ce(x, target).backward()
    assert_close(x.grad, expected.double(), 1e-5, "backward()")


# ---- 6. arguments: odd types torch takes, and clear errors for what is refused ----

ACCEPTED = {
    "ignore_index numpy int64": {"ignore_index": np.int64(3)},
    "ignore_index 0-d tensor": {"ignore_index": torch.tensor(3)},
    "ignore_index 1-element tensor": {"ignore_index": torch.tensor([3])},
    "ignore_index past int32": {"ignore_index": 2**40},
    "label_smoothing int 0": {"label_smoothing": 0},
    "label_smoothing int 1": {"label_smoothing": 1},
    "label_smoothing True": {"label_smoothing": True},
    "label_smoothing numpy float32": {"label_smoothing": np.float32(0.25)},
    "label_smoothing 0-d tensor": {"label_smoothing": torch.tensor(0.25)},
    "label_smoothing 0-d int tensor": {"label_smoothing": torch.tensor(1)},
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_arguments_of_odd_types_torch_takes(page, name):
    leaf, x_of = fenced(randn((6, V), seed=12), torch.float32, grad=True)
    target = classes((6,), seed=12, ignored=0.0)
    target[1] = 3
    for reduction in ("mean", "none"):
        compare(page["cross_entropy"], leaf, x_of, target.to(DEVICE), what=name, reduction=reduction, **ACCEPTED[name])


REFUSED = {
    "ignore_index float": ({"ignore_index": 3.0}, TypeError, "ignore_index must be an int64, got 3.0"),
    "ignore_index 3.5": ({"ignore_index": 3.5}, TypeError, "ignore_index must be an int64"),
    "ignore_index bool": ({"ignore_index": True}, TypeError, "ignore_index must be an int64, got True"),
    "ignore_index None": ({"ignore_index": None}, TypeError, "ignore_index must be an int64, got None"),
    "ignore_index float tensor": ({"ignore_index": torch.tensor(3.0)}, TypeError, "ignore_index must be an int64"),
    "ignore_index past int64": ({"ignore_index": 2**63}, TypeError, "ignore_index must be an int64"),
    "label_smoothing str": ({"label_smoothing": "0.1"}, TypeError, "label_smoothing must be a float, got str"),
    "label_smoothing None": ({"label_smoothing": None}, TypeError, "label_smoothing must be a float, got NoneType"),
    "label_smoothing 1-element tensor": ({"label_smoothing": torch.tensor([0.1])}, TypeError, "label_smoothing"),
    "label_smoothing 1.5": ({"label_smoothing": 1.5}, ValueError, r"label_smoothing must be in \[0, 1\], got 1.5"),
    "label_smoothing -0.1": ({"label_smoothing": -0.1}, ValueError, r"label_smoothing must be in \[0, 1\]"),
    "label_smoothing nan": ({"label_smoothing": float("nan")}, ValueError, r"label_smoothing must be in \[0, 1\]"),
    "reduction None": ({"reduction": None}, ValueError, "reduction must be 'none', 'mean' or 'sum', got None"),
    "reduction 'elementwise_mean'": ({"reduction": "elementwise_mean"}, ValueError, "reduction must be"),
    "weight too short": ({"weight": torch.ones(V - 1)}, ValueError, rf"weight must be of shape \[{V}\]"),
    "weight 2-D": ({"weight": torch.ones(1, V)}, ValueError, rf"weight must be of shape \[{V}\]"),
    "weight 0-d": ({"weight": torch.tensor(1.0)}, ValueError, rf"weight must be of shape \[{V}\]"),
    "weight requiring a gradient": (
        {"weight": torch.ones(V, requires_grad=True)},
        ValueError,
        "weight .* must not require a gradient",
    ),
    "weight a list": ({"weight": [1.0] * V}, TypeError, "weight must be a float tensor, got <class 'list'>"),
    "weight on another device": ({"weight": "elsewhere"}, ValueError, rf"weight must be of shape \[{V}\] on"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_arguments_raise_errors_that_name_them(page, name):
    options, error, message = REFUSED[name]
    options = dict(options)
    if isinstance(options.get("weight"), torch.Tensor):
        options["weight"] = options["weight"].to(DEVICE).requires_grad_(options["weight"].requires_grad)
    elif options.get("weight") == "elsewhere":
        options["weight"] = torch.ones(V, device="cpu" if DEVICE == "cuda" else "meta")
    x, target = torch.randn(4, V, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    with pytest.raises(error, match=f"cross_entropy: {message}"):
        page["cross_entropy"](x, target, **options)


def test_refused_tensors_raise_errors_that_name_them(page):
    ce, x, target = page["cross_entropy"], torch.randn(4, V, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    elsewhere = "cpu" if DEVICE == "cuda" else "meta"
    with pytest.raises(ValueError, match=f"cross_entropy: logits on {DEVICE}.*, target on {elsewhere}"):
        ce(x, target.to(elsewhere))
    with pytest.raises(ValueError, match=r"cross_entropy: target has shape \[4, 1\], expected \[4\]"):
        ce(x, target[:, None])
    with pytest.raises(ValueError, match=r"cross_entropy: logits of shape \[\] have no classes"):
        ce(torch.tensor(1.0, device=DEVICE), torch.tensor(0, device=DEVICE))
    with pytest.raises(ValueError, match=r"cross_entropy: logits of shape \[4, 0\] have no classes"):
        ce(torch.randn(4, 0, device=DEVICE), target)
    with pytest.raises(IndexError, match=f"cross_entropy: target {V} is out of bounds for {V} classes"):
        ce(x, torch.tensor([0, V, 1, 2], device=DEVICE))
    with pytest.raises(IndexError, match="cross_entropy: target 250 is out of bounds"):
        ce(x, torch.tensor([0, 250, 1, 2], device=DEVICE, dtype=torch.uint8))


@pytest.mark.parametrize("smoothing", (0.0, 0.1), ids=("plain", "smoothed"))
@pytest.mark.parametrize("grad", (False, True), ids=("forward", "with gradient"))
def test_a_class_out_of_range_raises_in_a_compiled_model(page, grad, smoothing):
    """Compiled in one graph (AOTAutograd, as Inductor runs it), the drop-in still checks its targets: a class out of
    range raises the eager IndexError, never a NaN loss; in-range targets give the eager loss."""
    ce, x = page["cross_entropy"], torch.randn(4, V, device=DEVICE, requires_grad=grad)
    if smoothing and page.path.stem.startswith("06"):
        pytest.skip("06 hands label smoothing to F.cross_entropy, whose own check is torch's")

    def loss_of(x, target):
        return ce(x * 2, target, label_smoothing=smoothing)

    torch._dynamo.reset()
    compiled = torch.compile(loss_of, fullgraph=True, backend="aot_eager")
    good = torch.tensor([0, 1, V - 1, 3], device=DEVICE)
    torch.testing.assert_close(compiled(x, good), loss_of(x, good))
    for bad in (V, -1):
        with pytest.raises(IndexError, match=f"cross_entropy: target {bad} is out of bounds for {V} classes"):
            compiled(x, torch.tensor([0, bad, 1, 2], device=DEVICE))
