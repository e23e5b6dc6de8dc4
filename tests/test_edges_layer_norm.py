"""Edge cases of tutorial 02's drop-in ``layer_norm`` and of the row statistics its deep dives compute (21's and
22's forwards, the ``row_statistics`` of 23 and 24_layer_norm_backward_locks), against torch and a float64
reference: every tensor argument as a view (sliced, transposed, expanded with stride 0, 1-d, a storage offset),
empty and size-1 shapes, every dtype torch takes (or a clear TypeError naming the argument), extreme values
(constant rows, rows scaled by 1e20, values near the dtype's largest, inf, tiny rows, a first value far from the
rest) in every kernel that computes a row's mean and rstd, gradients (and the refusal of a gradient of the
gradient), and clear errors for refused arguments. Where torch's fp32 answer is worse than float64's (it
overflows), float64's is the reference; rows whose squared deviations pass fp32's range, whatever constant scales
them, must be NaN, never a number. Sizes are tiny: without a GPU, Triton's interpreter runs the kernels."""

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, LazyTutorial

CORE = LazyTutorial("02_layer_norm_backward")
WIDE = LazyTutorial("21_layer_norm_wide_forward")
STAGED = LazyTutorial("22_layer_norm_staged_gluon")
WIDE_BWD = LazyTutorial("23_layer_norm_wide_backward")
LOCKS = LazyTutorial("24_layer_norm_backward_locks")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# a few roundings of the dtype (the interpreter truncates fp32 -> bf16 instead of rounding: twice a GPU's)
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
BIG = {torch.float32: 3e38, torch.bfloat16: 3e38, torch.float16: 6e4}  # near the dtype's largest finite value
ids = str


def _randn(shape, seed, scale=1.0, shift=0.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype).to(DEVICE)


def _err(out, ref):
    """||out - ref|| / ||ref|| over the finite elements, once the NaNs (and infinities) sit where ref's do."""
    out, ref = out.detach().double(), ref.detach().double()
    assert torch.equal(out.isnan(), ref.isnan()), (
        f"NaNs at {out.isnan().nonzero().tolist()}, float64's at {ref.isnan().nonzero().tolist()}"
    )
    assert torch.equal(out.isinf(), ref.isinf()), "infinities where float64 has none, or the other way"
    keep = ref.isfinite()
    out, ref = out[keep], ref[keep]
    norm = ref.norm().item()
    return (out - ref).norm().item() / (norm if norm > 0 else 1.0)


def _value_rows(name, n, dtype):
    """Three rows of n values of one family (float64, rounded to dtype by the caller)."""
    gen = torch.Generator().manual_seed(n)
    z = torch.randn(3, n, generator=gen, dtype=torch.float64)
    if name == "constant":
        return torch.full((3, n), 12345.678 if dtype != torch.float16 else 1234.5, dtype=torch.float64)
    if name == "1e20 scaled":
        return z * 1e20
    if name == "near the largest":  # all of one sign, then mixed signs, then mixed signs about a shifted mean
        big = BIG[dtype]
        return torch.stack([torch.full((n,), big) - z[0].abs() * big / 8, z[1].sign() * big, z[2].sign() * big * 0.9])
    if name == "inf":
        out = z * 3 + 10
        out[0, n // 2], out[1, 0] = float("inf"), float("-inf")  # rows 0, 1: NaN (as torch); row 2: finite
        return out
    if name == "tiny":
        return z * (1e-3 if dtype == torch.float16 else 1e-30)
    if name == "first far from the rest":  # a shift by the first value would cancel; the mean must not
        out = z.clone()
        out[:, 0] = 1e4 if dtype != torch.float16 else 300.0
        return out
    if name == "large mean":  # a mean 100 standard deviations out: its own rounding costs no more than fp32's
        return z * 100 + 1e4 if dtype == torch.float32 else z * 30 + 3e3
    raise ValueError(name)


VALUE_FAMILIES = ["constant", "1e20 scaled", "near the largest", "inf", "tiny", "first far from the rest", "large mean"]


def _applicable(name, dtype):
    return not (dtype == torch.float16 and name == "1e20 scaled")  # no fp16 value is near 1e20


def _beyond_squares(name, dtype):
    """Rows whose deviations are near the dtype's largest value: their squares pass fp32's range, whatever the
    scaling by a constant; the Triton kernels give NaN there, never a wrong number (torch's fp32 gives NaN or, for
    rows of one sign, 0); a GPU's staged kernel, which can afford a second look, float64's answer."""
    return name == "near the largest" and dtype != torch.float16


def _check_stats(name, x, y, mean, rstd, eps=1e-5, what=""):
    """y against float64's layer norm of x, and for constant rows: y exactly 0, mean exact, rstd torch's."""
    x64 = x.double()
    y64 = F.layer_norm(x64, x.shape[-1:], eps=eps)
    if _beyond_squares(name, x.dtype) and y.isnan().all():
        return
    tol = TOL[x.dtype] * (4 if name in ("first far from the rest", "large mean") and x.dtype != torch.float32 else 1)
    err = _err(y, y64)
    assert err <= tol, f"{what} {name} {x.dtype}: y error {err:.2e} > {tol:.0e}"
    if name == "constant":
        assert torch.equal(y, torch.zeros_like(y)), f"{what}: a constant row gives {y.flatten()[:4].tolist()}, not 0"
        assert torch.equal(mean, x64[:, 0].float()), f"{what}: mean {mean.tolist()} of a constant row"
        torch.testing.assert_close(rstd, torch.full_like(rstd, eps**-0.5), rtol=1e-6, atol=0)
    if mean is not None and name not in ("inf", "constant"):
        var64, mean64 = torch.var_mean(x64, dim=1, correction=0)
        scale = var64.sqrt().clamp_min(1e-300)
        assert ((mean.double() - mean64).abs() / scale).max() <= 10 * tol, f"{what} {name}: mean"
        assert ((rstd.double() - (var64 + eps).rsqrt()).abs() / (var64 + eps).rsqrt()).max() <= 10 * tol, (
            f"{what} {name}: rstd"
        )


def _check_grads(grads, grads64, leaves, dy, x_leaf, x_in, w_in, tol, what):
    """Each gradient against float64's, in its leaf's shape and dtype, relative to its natural size: dx to its
    terms' (dy * w * rstd over the input as the op sees it: they cancel), dw and db to dy's (they sum dy * x_hat and
    dy); plus the rounding of float64's answer to the leaf's dtype (16-bit gradients of 1e-38 are subnormal)."""
    rstd = (x_in.detach().double().var(-1, unbiased=False, keepdim=True) + 1e-5).rsqrt()
    wd = 1.0 if w_in is None else w_in.detach().double()
    for i, (g, g64, leaf) in enumerate(zip(grads, grads64, leaves)):
        assert g.shape == leaf.shape and g.dtype == leaf.dtype, f"{what}: gradient {i} is {g.shape} {g.dtype}"
        terms = (dy.double() * wd * rstd).norm() if leaf is x_leaf else dy.double().norm()
        allowed = tol * max(g64.norm(), terms) + 2 * (g64.to(g.dtype).double() - g64).norm()
        err = (g.double() - g64).norm()
        assert torch.isfinite(g).all() and err <= allowed, f"{what}: gradient {i} error {err:.2e} > {allowed:.2e}"


# ---- values: every kernel that computes a row's statistics ----


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("name", VALUE_FAMILIES)
@pytest.mark.parametrize("kernel", ["fused", "chunked"])
def test_core_forward_values(name, dtype, kernel):
    """Tutorial 02's fused kernel (a row in registers) on rows of 300, and deep dive 21's chunked kernel that it
    launches past MAX_FUSED_N (rows of 40 000)."""
    if not _applicable(name, dtype):
        pytest.skip("no such value in this dtype")
    x = _value_rows(name, 300 if kernel == "fused" else 40_000, dtype).to(dtype).to(DEVICE)
    y, mean, rstd = torch.empty_like(x), *(torch.empty(3, device=DEVICE) for _ in range(2))
    used = CORE["layer_norm_rows_forward"](x, y, None, None, mean, rstd, 1e-5)
    assert used is CORE["layer_norm_fwd_kernel" if kernel == "fused" else "layer_norm_fwd_chunked_kernel"], used
    _check_stats(name, x, y, mean, rstd, what=f"02 {kernel}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ids)
@pytest.mark.parametrize("name", ["constant", "1e20 scaled", "near the largest", "inf", "first far from the rest"])
@pytest.mark.parametrize("kernel", ["x read twice", "split", "chunked"])
def test_wide_forward_values(name, dtype, kernel):
    """Deep dive 21's kernels: the row read twice, split over programs (one slice under the interpreter; the
    shares still pass through the flag words and Chan's formula), and the chunked core kernel (rows of 40 000)."""
    n = 40_000 if kernel == "chunked" else 301
    x = _value_rows(name, n, dtype).to(dtype).to(DEVICE)
    y, mean, rstd = torch.empty_like(x), *(torch.empty(3, device=DEVICE) for _ in range(2))
    split = {k: dict(MIN_N=1, SLICE_N=128, MIN_SLICES=2, TILE=512, BYTES_PER_THREAD=16, MIN_SLOTS=4) for k in (2, 4)}
    if kernel == "chunked":  # the core page's launcher (fp32 rows of 40 000 would be split)
        used, _ = WIDE["core_forward"](x, y, None, None, mean, rstd, 1e-5)
    else:
        options = {"x read twice": dict(reload=True), "split": dict(split=split)}[kernel]
        used, _ = WIDE["layer_norm_wide_forward"](x, y, None, None, mean, rstd, 1e-5, **options)
    assert used.startswith(kernel), used
    _check_stats(name, x, y, mean, rstd, what=f"21 {kernel}")


@pytest.mark.parametrize("name", ["constant", "1e20 scaled", "near the largest", "first far from the rest"])
def test_staged_page_forward_values(name):
    """Deep dive 22's launcher: the staged Gluon kernel on a GPU (bf16 rows of 16 400, forced), the carried core
    kernel elsewhere."""
    dtype = torch.bfloat16
    x = _value_rows(name, 16_400 if DEVICE == "cuda" else 300, dtype).to(dtype).to(DEVICE)
    y, mean, rstd = torch.empty_like(x), *(torch.empty(3, device=DEVICE) for _ in range(2))
    cfg = dict(STAGED["_staged_config"](2), MIN_N=1)
    used = STAGED["layer_norm_staged_forward"](x, y, None, None, mean, rstd, 1e-5, cfg=cfg)
    assert used == ("staged (Gluon)" if DEVICE == "cuda" else "fused (core)"), used
    _check_stats(name, x, y, mean, rstd, what=f"22 {used}")


@pytest.mark.parametrize("page", ["23_layer_norm_wide_backward", "24_layer_norm_backward_locks"])
@pytest.mark.parametrize("name", ["constant", "1e20 scaled", "near the largest"])
def test_backward_pages_row_statistics(page, name):
    """The statistics these pages hand their backward kernels: float64's, rounded once (fp32 overflows)."""
    stats = {"23_layer_norm_wide_backward": WIDE_BWD, "24_layer_norm_backward_locks": LOCKS}[page]["row_statistics"]
    x = _value_rows(name, 257, torch.float32).float().to(DEVICE)
    mean, rstd = stats(x)
    var64, mean64 = torch.var_mean(x.double(), dim=1, correction=0)
    assert mean.dtype == rstd.dtype == torch.float32 and torch.isfinite(rstd).all() and (rstd > 0).all()
    torch.testing.assert_close(mean, mean64.float(), rtol=1e-6, atol=0)
    torch.testing.assert_close(rstd, (var64 + 1e-5).rsqrt().float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["1e20 scaled", "near the largest", "constant"])
def test_backward_pages_gradients_on_extreme_rows(name):
    """23's backward (chunked kernel) and the lock page's design 2, fed their row_statistics, against float64."""
    x = _value_rows(name, 300, torch.float32).float().to(DEVICE)
    w, dy = _randn(300, 1, shift=1.0), _randn((3, 300), 2)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    b64 = torch.zeros_like(w64, requires_grad=True)
    dx64, dw64, db64 = torch.autograd.grad(F.layer_norm(x64, (300,), w64, b64), (x64, w64, b64), dy.double())
    outs = {"23": WIDE_BWD["layer_norm_backward"](x, w, dy, *WIDE_BWD["row_statistics"](x), split_from=float("inf"))}
    dx, dwdb = torch.empty_like(x), torch.empty(2, 300, device=DEVICE)
    LOCKS["backward_persistent"](x, dy, dx, w, *LOCKS["row_statistics"](x), dwdb)
    outs["locks"] = (dx, *dwdb)
    for page, (dx, dw, db) in outs.items():
        scale = (dy.double() * w64.detach() * (x.double().var(1, unbiased=False, keepdim=True) + 1e-5).rsqrt()).norm()
        assert (dx.double() - dx64).norm() <= 1e-5 * scale, f"{page} {name}: dx"
        assert _err(dw, dw64) <= 1e-5 or name == "constant" and (dw.double() - dw64).norm() <= 1e-5 * dy.norm(), (
            f"{page} {name}: dw"
        )
        assert _err(db, db64) <= 1e-5, f"{page} {name}: db"


# ---- the drop-in, tutorial 02's layer_norm ----


def layer_norm(*args, **kwargs):
    return CORE["layer_norm"](*args, **kwargs)


def _grads_vs_float64(
    x_leaf, view, normalized_shape, w_leaf, w_view, b_leaf, b_view, dy_layout="contiguous", eps=1e-5, what=""
):
    """y, and the gradients of every leaf that requires one, against float64 autograd through the same views."""
    leaves = [t for t in (x_leaf, w_leaf, b_leaf) if t is not None and t.requires_grad]
    y = layer_norm(
        view(x_leaf),
        normalized_shape,
        None if w_leaf is None else w_view(w_leaf),
        None if b_leaf is None else b_view(b_leaf),
        eps,
    )
    leaves64 = [
        None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in (x_leaf, w_leaf, b_leaf)
    ]
    y64 = F.layer_norm(
        view(leaves64[0]),
        tuple(normalized_shape),
        None if w_leaf is None else w_view(leaves64[1]),
        None if b_leaf is None else b_view(leaves64[2]),
        eps,
    )
    assert y.shape == y64.shape and y.dtype == x_leaf.dtype, f"{what}: {y.shape} {y.dtype}"
    tol = TOL[x_leaf.dtype]
    assert _err(y, y64) <= tol, f"{what}: y error {_err(y, y64):.2e}"
    dy = _randn(y.shape, 7, dtype=y.dtype)
    if dy_layout == "transposed":
        dy = _randn(y.shape[::-1], 7, dtype=y.dtype).transpose(0, -1)
    elif dy_layout == "expanded":
        dy = _randn(y.shape[1:], 7, dtype=y.dtype).expand(y.shape)
    grads = torch.autograd.grad(y, leaves, dy)
    grads64 = torch.autograd.grad(y64, [t for t in leaves64 if t is not None and t.requires_grad], dy.double())
    w_in = None if w_leaf is None else w_view(w_leaf)
    _check_grads(grads, grads64, leaves, dy, x_leaf, view(x_leaf), w_in, tol, what)


X_VIEWS = {  # name -> (leaf shape, view giving the (4, 9) input)
    "contiguous": ((4, 9), lambda t: t),
    "transposed": ((9, 4), lambda t: t.t()),
    "sliced": ((8, 12), lambda t: t[::2, 1:-2]),
    "expanded rows": ((1, 9), lambda t: t.expand(4, 9)),
    "expanded scalar": ((), lambda t: t.expand(4, 9)),
    "storage offset": ((5, 10), lambda t: t[1:, 1:]),
    "1-d": ((9,), lambda t: t),
}
P_VIEWS = {  # weight and bias: name -> (leaf shape, view giving the (9,) parameter)
    "contiguous": ((9,), lambda t: t),
    "sliced": ((18,), lambda t: t[::2]),
    "expanded scalar": ((), lambda t: t.expand(9)),
    "storage offset": ((12,), lambda t: t[3:]),
    "row of a 2-d tensor": ((3, 9), lambda t: t[1]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("x_view", list(X_VIEWS))
def test_input_views(x_view, dtype):
    shape, view = X_VIEWS[x_view]
    x = _randn(shape, 11, scale=3, shift=5, dtype=dtype).requires_grad_()
    w, b = _randn(9, 12, shift=1, dtype=dtype).requires_grad_(), _randn(9, 13, dtype=dtype).requires_grad_()
    _grads_vs_float64(x, view, (9,), w, lambda t: t, b, lambda t: t, what=f"x {x_view} {dtype}")


@pytest.mark.parametrize("p_view", list(P_VIEWS))
@pytest.mark.parametrize("which", ["weight", "bias", "both"])
def test_weight_and_bias_views(p_view, which):
    shape, view = P_VIEWS[p_view]
    x = _randn((4, 9), 14, scale=2, shift=3).requires_grad_()
    w = _randn(shape if which != "bias" else (9,), 15, shift=1).requires_grad_()
    b = _randn(shape if which != "weight" else (9,), 16).requires_grad_()
    w_view = view if which != "bias" else (lambda t: t)
    b_view = view if which != "weight" else (lambda t: t)
    _grads_vs_float64(x, lambda t: t, (9,), w, w_view, b, b_view, what=f"{which} {p_view}")


@pytest.mark.parametrize("dy_layout", ["transposed", "expanded"])
def test_gradient_output_views(dy_layout):
    x = _randn((4, 9), 17, scale=2, shift=3).requires_grad_()
    w, b = _randn(9, 18, shift=1).requires_grad_(), _randn(9, 19).requires_grad_()
    _grads_vs_float64(x, lambda t: t, (9,), w, lambda t: t, b, lambda t: t, dy_layout=dy_layout, what=f"dy {dy_layout}")


@pytest.mark.parametrize(
    "shape,normalized_shape",
    [
        ((0, 9), (9,)),
        ((2, 0, 9), (9,)),
        ((3, 0), (0,)),
        ((1, 1, 9), (9,)),
        ((5, 1), (1,)),
        ((2, 3, 4), (3, 4)),
        ((1, 1), (1, 1)),
        ((9,), (9,)),
    ],
    ids=str,
)
def test_shapes(shape, normalized_shape):
    x = _randn(shape, 21, scale=2, shift=1).requires_grad_()
    w, b = _randn(normalized_shape, 22, shift=1).requires_grad_(), _randn(normalized_shape, 23).requires_grad_()
    y, y_torch = layer_norm(x, normalized_shape, w, b), F.layer_norm(x, normalized_shape, w, b)
    assert y.shape == y_torch.shape and y.dtype == y_torch.dtype
    torch.testing.assert_close(y, y_torch, rtol=1e-5, atol=1e-5)
    dy = _randn(shape, 24)
    ins64 = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = F.layer_norm(ins64[0], normalized_shape, ins64[1], ins64[2])
    # against float64: where N = 1, dx is 0 exactly, and torch's a rounding of 0 (with a weight)
    _check_grads(
        torch.autograd.grad(y, (x, w, b), dy),
        torch.autograd.grad(y64, ins64, dy.double()),
        (x, w, b),
        dy.reshape(-1, max(1, w.numel())),
        x,
        x.reshape(-1, max(1, w.numel())),
        w.reshape(-1),
        1e-5,
        str(shape),
    )


@pytest.mark.parametrize("x_dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("p_dtype", DTYPES, ids=ids)
def test_every_mix_of_the_dtypes(x_dtype, p_dtype):
    """torch on the CPU takes some mixes (16-bit x, fp32 weight) and refuses others; ours takes all three dtypes in
    every mix: y in x's dtype, each gradient in its leaf's, against float64 at the coarser dtype's tolerance."""
    x = _randn((4, 9), 25, scale=2, shift=3, dtype=x_dtype).requires_grad_()
    w, b = _randn(9, 26, shift=1, dtype=p_dtype).requires_grad_(), _randn(9, 27, dtype=p_dtype).requires_grad_()
    y = layer_norm(x, (9,), w, b)
    assert y.dtype == x_dtype
    ins64 = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = F.layer_norm(ins64[0], (9,), ins64[1], ins64[2])
    tol = max(TOL[x_dtype], TOL[p_dtype])
    assert _err(y, y64) <= tol
    dy = _randn((4, 9), 28, dtype=x_dtype)
    _check_grads(
        torch.autograd.grad(y, (x, w, b), dy),
        torch.autograd.grad(y64, ins64, dy.double()),
        (x, w, b),
        dy,
        x,
        x,
        w,
        tol,
        f"x {x_dtype}, weight and bias {p_dtype}",
    )


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8], ids=ids
)
@pytest.mark.parametrize("which", ["input", "weight", "bias"])
def test_dtypes_the_kernels_lack_raise_type_error_naming_the_argument(dtype, which):
    x, w, b = torch.ones(2, 5, device=DEVICE), torch.ones(5, device=DEVICE), torch.zeros(5, device=DEVICE)
    args = {"input": x, "weight": w, "bias": b}
    args[which] = args[which].to(dtype)
    with pytest.raises(TypeError, match=f"layer_norm: {which} is {dtype}"):
        layer_norm(args["input"], (5,), args["weight"], args["bias"])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("name", ["constant", "1e20 scaled", "near the largest", "tiny", "first far from the rest"])
def test_drop_in_values_and_gradients(name, dtype):
    """The drop-in end to end (forward and backward) on extreme rows, against float64 (torch's fp32 overflows on
    1e20-scaled rows, and its backward of a constant fp32 row is a few % off: dx = rstd (g - mean(g)), dw = 0)."""
    if not _applicable(name, dtype) or _beyond_squares(name, dtype):
        pytest.skip("no such value in this dtype, or NaN as torch's (test_squares_past_fp32_give_nan_as_torch)")
    x = _value_rows(name, 64, dtype).to(dtype).to(DEVICE).requires_grad_()
    w, b = _randn(64, 31, shift=1, dtype=dtype).requires_grad_(), _randn(64, 32, dtype=dtype).requires_grad_()
    y = layer_norm(x, (64,), w, b)
    dy = _randn((3, 64), 33, dtype=dtype)
    ins64 = [t.detach().double().requires_grad_() for t in (x, w, b)]
    y64 = F.layer_norm(ins64[0], (64,), ins64[1], ins64[2])
    tol = TOL[dtype] * (4 if name == "first far from the rest" and dtype != torch.float32 else 1)
    assert _err(y, y64) <= tol, f"y error {_err(y, y64):.2e}"
    if name == "constant":
        assert torch.equal(y, b.detach().expand_as(y)), "a constant row's y is not exactly the bias"
    _check_grads(
        torch.autograd.grad(y, (x, w, b), dy),
        torch.autograd.grad(y64, ins64, dy.double()),
        (x, w, b),
        dy,
        x,
        x,
        w,
        tol,
        f"{name} {dtype}",
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=ids)
def test_squares_past_fp32_give_nan_as_torch(dtype):
    """Deviations near the dtype's largest value: NaN in every row (torch's fp32 gives NaN, or the bias alone for
    rows of one sign), never a number."""
    x = _value_rows("near the largest", 64, dtype).to(dtype).to(DEVICE)
    y = layer_norm(x, (64,), None, _randn(64, 34, dtype=dtype))
    assert y.isnan().all(), y


def test_drop_in_rows_with_inf_are_nan_like_torchs():
    x = _value_rows("inf", 64, torch.float32).float().to(DEVICE)
    y, y_torch = layer_norm(x, (64,)), F.layer_norm(x, (64,))
    assert torch.equal(y.isnan(), y_torch.isnan()) and y[:2].isnan().all()
    torch.testing.assert_close(y[2], y_torch[2], rtol=1e-5, atol=1e-5)


# ---- gradients of gradients ----


def test_a_gradient_of_the_gradient_is_refused_and_plain_gradients_work():
    x = _randn((4, 9), 41, shift=2).requires_grad_()
    w, b = _randn(9, 42, shift=1).requires_grad_(), _randn(9, 43).requires_grad_()
    out = layer_norm(x, (9,), w, b)
    with pytest.raises(RuntimeError, match="layer_norm: a gradient of this gradient"):
        torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad((layer_norm(x.detach(), (9,), w) ** 2).sum(), w, create_graph=True)
    g = torch.autograd.grad(out.pow(2).sum(), (x, w, b))  # without create_graph
    ref = F.layer_norm(x, (9,), w, b)
    for a, a_t in zip(g, torch.autograd.grad(ref.pow(2).sum(), (x, w, b))):
        torch.testing.assert_close(a, a_t, rtol=1e-5, atol=1e-5)
    x.grad = None
    layer_norm(x, (9,), w, b).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, g[0], rtol=0, atol=0)


# ---- clear errors, and what torch accepts ----


@pytest.mark.parametrize("eps", [None, "1e-5", [1e-5]], ids=repr)
def test_eps_that_torch_refuses_raises_type_error_naming_eps(eps):
    with pytest.raises(TypeError, match="layer_norm: eps must be a float"):
        layer_norm(_randn((2, 5), 51), (5,), eps=eps)


@pytest.mark.parametrize("eps", [torch.tensor(1e-3), np.float32(1e-3), 1, True, 0.5], ids=repr)
def test_eps_that_torch_accepts(eps):
    x = _randn((3, 5), 52, shift=2)
    torch.testing.assert_close(layer_norm(x, (5,), eps=eps), F.layer_norm(x, (5,), eps=eps), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "normalized_shape,error,match",
    [
        ((True,), TypeError, "normalized_shape must be ints"),
        ((5.0,), TypeError, "normalized_shape must be ints"),
        ("5", TypeError, "normalized_shape must be ints"),
        ((4,), ValueError, "normalized_shape"),
        ((3, 5), ValueError, "normalized_shape"),
        ((), ValueError, "normalized_shape"),
    ],
    ids=repr,
)
def test_bad_normalized_shape(normalized_shape, error, match):
    with pytest.raises(error, match=match):
        layer_norm(_randn((2, 5), 53), normalized_shape)


def test_bad_tensors_raise_errors_naming_them():
    x = _randn((2, 5), 54)
    with pytest.raises(TypeError, match="layer_norm: input is"):
        layer_norm([[1.0] * 5] * 2, (5,))
    with pytest.raises(TypeError, match="layer_norm: weight is"):
        layer_norm(x, (5,), [1.0] * 5)
    with pytest.raises(ValueError, match="weight has shape"):
        layer_norm(x, (5,), torch.ones(4, device=DEVICE))
    with pytest.raises(ValueError, match="bias has shape"):
        layer_norm(x, (5,), None, torch.ones(1, 5, device=DEVICE))
    other = "meta" if DEVICE == "cpu" else "cpu"
    with pytest.raises(ValueError, match=f"weight has shape .* is on {other}; expected {DEVICE} tensors on one device"):
        layer_norm(x, (5,), torch.ones(5, device=other))


# ---- the deep dives carry the core page's statistics ----


def test_deep_dives_carry_the_core_statistics():
    """21 computes its rows' statistics with row_stats, the statistics of tutorial 02's fused kernel (which holds them
    inline; 22 carries that kernel itself, and tests/test_layer_norm_deep_dives.py compares both launchers with 02's
    bit for bit)."""
    for line in inspect.getsource(WIDE["row_stats"].fn).splitlines():
        if "rstd = tl.where(q < float" in line or "q = tl.sum(xc * xc" in line:
            assert line.split("#")[0].strip() in inspect.getsource(CORE["layer_norm_fwd_kernel"].fn), line
