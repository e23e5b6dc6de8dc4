"""Each drop-in against the torch op it stands in for, walking that op's documented signature: every
argument and keyword, every floating dtype the kernels take (float64 and the rest: a clear TypeError),
0-d and empty tensors, non-contiguous (transposed, sliced) and expanded (stride 0) inputs; values and
gradients against torch in float64, with dtype-appropriate tolerances.

    softmax     (tutorial 01)  torch.softmax(input, dim, dtype=None)
    layer_norm  (tutorial 02)  torch.nn.functional.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)
    reduce_sum  (tutorial 03)  torch.sum(input, dim=None, keepdim=False, *, dtype=None)
    rms_norm    (tutorial 04)  torch.nn.functional.rms_norm(input, normalized_shape, weight=None, eps=None)

What the kernels cannot compute as precisely as torch (float64, integer and bool tensors, dtype=float64)
raises a clear TypeError. Sizes are tiny: Triton's interpreter runs the kernels on the CPU."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, load_tutorial

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Relative error (in norm) against float64: a few roundings of the dtype (Triton's interpreter truncates
# fp32 -> bf16 instead of rounding, so bf16 gets twice a GPU's).
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
PAGES = {
    "softmax": "01_softmax_backward",
    "layer_norm": "02_layer_norm_drop_in",
    "reduce_sum": "03_sum_of_all_elements",
    "rms_norm": "04_rms_norm_operator",
}
TORCH_OPS = {"softmax": torch.softmax, "layer_norm": F.layer_norm, "reduce_sum": torch.sum, "rms_norm": F.rms_norm}


def ours(name):
    return load_tutorial(PAGES[name])[name]


def _randn(shape, dtype, seed, scale=1.0, shift=0.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * scale + shift).to(dtype).to(DEVICE)


def _rel_error(out, ref, scale=0.0):
    """||out - ref|| / ||ref||, or / scale where that is larger (terms that cancel to a small ref)."""
    out, ref = out.detach().double(), ref.detach().double()
    norm = max(ref.norm().item(), scale)
    return (out - ref).norm().item() / (norm if norm > 0 else 1.0)


def _layouts(shape):
    """name -> a function of a leaf tensor giving the input: contiguous, transposed, sliced, expanded (the
    leaf then has size 1 where the input is broadcast, so the gradient sums over the broadcast)."""
    return {
        "contiguous": (shape, lambda t: t),
        "transposed": (shape[::-1], lambda t: t.transpose(0, -1)),  # the leaf reversed: the input has `shape`
        "sliced": ((shape[0] * 2, *shape[1:-1], shape[-1] + 3), lambda t: t[::2, ..., 1:-2]),
        "expanded": ((1, *shape[1:]), lambda t: t.expand(shape)),  # stride 0 along the first dim
    }


def compare(name, call, leaves, dtype, what, torch_call=None, grad_tol=None):
    """call(op, leaves) with our drop-in, torch's op on the same leaves and torch's op on float64 copies of
    them; output shape and dtype must be torch's, values and the gradients of every leaf that requires
    one within TOL of float64 (gradients in the leaves' dtypes, as torch's). The input's gradient is measured
    against the size of the gradient of the view passed in: summed over an expanded dim, its terms may cancel
    to almost 0 (softmax along that dim). grad_tol: the gradients' tolerance where they were computed in a
    coarser dtype than the leaves' (softmax's dtype=)."""
    torch_call = torch_call or call
    grad_leaves = [t for t in leaves if t is not None and t.requires_grad]
    out, expected = call(ours(name), leaves), torch_call(TORCH_OPS[name], leaves)
    assert out.shape == expected.shape and out.dtype == expected.dtype, (
        f"{what}: got {tuple(out.shape)} {out.dtype}, torch gives {tuple(expected.shape)} {expected.dtype}"
    )
    leaves64 = [None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in leaves]
    passed = []  # the float64 input as the op sees it (after the layout's view)
    out64 = torch_call(lambda *a, **k: (passed.append(a[0]), TORCH_OPS[name](*a, **k))[1], leaves64)
    err = _rel_error(out, out64)
    assert err <= TOL[out.dtype], f"{what}: forward relative error {err:.2e} > {TOL[out.dtype]:.0e}"
    if not grad_leaves:
        return
    dy = _randn(out.shape, out.dtype, seed=len(what))
    grads = torch.autograd.grad(out, grad_leaves, dy, allow_unused=True)
    grads_torch = torch.autograd.grad(expected, grad_leaves, dy, allow_unused=True)
    *grads64, g_passed = torch.autograd.grad(
        out64, [t for t in leaves64 if t is not None and t.requires_grad] + [passed[0]], dy.double(), allow_unused=True
    )
    scales = [g_passed.norm().item() if leaf is leaves[0] and g_passed is not None else 0.0 for leaf in grad_leaves]
    for i, (g, gt, g64, leaf, scale) in enumerate(zip(grads, grads_torch, grads64, grad_leaves, scales)):
        if gt is None:
            assert g is None or not g.any(), f"{what}: input {i} has a gradient where torch's has none"
            continue
        assert g is not None, f"{what}: input {i} has no gradient; torch gives one"
        assert g.shape == leaf.shape and g.dtype == gt.dtype, f"{what}: gradient {i} is {g.shape} {g.dtype}"
        err = _rel_error(g, g64, scale)
        tol = grad_tol or TOL[leaf.dtype]
        assert err <= tol, f"{what}: gradient {i} relative error {err:.2e} > {tol:.0e}"


# --- softmax: torch.softmax(input, dim, dtype=None) ---


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_softmax_dims_dtypes_layouts(dtype, layout, dim):
    shape, view = _layouts((3, 4, 9))[layout]
    leaf = _randn(shape, dtype, seed=dim + 7).requires_grad_(True)
    compare("softmax", lambda op, t: op(view(t[0]), dim), [leaf], dtype, f"softmax {layout} dim={dim} {dtype}")


@pytest.mark.parametrize(
    "shape,dim", [((), 0), ((), -1), ((0,), 0), ((0, 5), 1), ((0, 5), 0), ((5, 0), 1), ((2, 0, 3), 2)]
)
def test_softmax_zero_dim_and_empty(shape, dim):
    leaf = _randn(shape, torch.float32, seed=3).requires_grad_(True)
    compare("softmax", lambda op, t: op(t[0], dim), [leaf], torch.float32, f"softmax {shape} dim={dim}")


def test_softmax_by_keyword():
    x = _randn((3, 5), torch.float32, seed=4)
    torch.testing.assert_close(ours("softmax")(x, dim=0), torch.softmax(x, dim=0))


@pytest.mark.parametrize(
    "x_dtype,dtype",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float16),
        (torch.float32, torch.float32),
    ],
)
def test_softmax_dtype_keyword(x_dtype, dtype):
    leaf = _randn((4, 9), x_dtype, seed=5).requires_grad_(True)
    # the gradient is computed in dtype and cast back to x's: it is as precise as the coarser of the two
    compare(
        "softmax",
        lambda op, t: op(t[0], 1, dtype=dtype),
        [leaf],
        dtype,
        f"softmax {x_dtype} dtype={dtype}",
        grad_tol=max(TOL[x_dtype], TOL[dtype]),
    )


# --- layer norm: F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5) ---

NORMALIZED_SHAPES = {
    "int": 9,
    "tuple": (9,),
    "list": [9],
    "torch.Size": torch.Size([9]),
    "two dims": (4, 9),
    "two dims, list": [4, 9],
    "two dims, torch.Size": torch.Size([4, 9]),
}


def _as_torch_shape(normalized_shape):
    """F.layer_norm and F.rms_norm take a sequence (an int only through nn.LayerNorm / nn.RMSNorm)."""
    return (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape


def _norm_case(name, x_dtype, layout, normalized_shape, affine, eps, seed, w_dtype=None, torch_casts=False):
    shape, view = _layouts((3, 4, 9))[layout]
    x = _randn(shape, x_dtype, seed=seed, shift=2.0).requires_grad_(True)  # a mean far from 0
    p_shape = tuple(_as_torch_shape(normalized_shape))
    w = _randn(p_shape, w_dtype or x_dtype, seed + 1, shift=1.0).requires_grad_(True) if "w" in affine else None
    b = _randn(p_shape, w_dtype or x_dtype, seed + 2).requires_grad_(True) if "b" in affine else None
    kw = {} if eps == "default" else {"eps": eps}
    if name == "layer_norm":
        call = lambda op, t, ns: op(view(t[0]), ns, t[1], t[2], **kw)
        leaves = [x, w, b]
    else:
        call = lambda op, t, ns: op(view(t[0]), ns, t[1], **kw)
        leaves = [x, w]
    what = f"{name} {layout} normalized_shape={normalized_shape!r} {affine} eps={eps} {x_dtype} w {w_dtype}"
    cast = (lambda t: [t[0]] + [None if p is None else p.to(t[0].dtype) for p in t[1:]]) if torch_casts else list
    compare(
        name,
        lambda op, t: call(op, t, normalized_shape),
        leaves,
        x_dtype,
        what,
        torch_call=lambda op, t: call(op, cast(t), _as_torch_shape(normalized_shape)),
    )


@pytest.mark.parametrize("normalized_shape", list(NORMALIZED_SHAPES), ids=str)
@pytest.mark.parametrize("affine", ["none", "w", "b", "w+b"])
def test_layer_norm_normalized_shape_weight_bias(normalized_shape, affine):
    _norm_case("layer_norm", torch.float32, "contiguous", NORMALIZED_SHAPES[normalized_shape], affine, "default", 11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("eps", ["default", 1e-3, 0.5, 1])
def test_layer_norm_dtypes_layouts_eps(dtype, layout, eps):
    _norm_case("layer_norm", dtype, layout, (9,), "w+b", eps, 13)


@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32)])
def test_layer_norm_weight_in_another_dtype(x_dtype, w_dtype):
    """Ours takes the mix (as torch on the CPU); torch's CUDA kernel refuses it, so torch's own answer, the
    tolerance's yardstick, is taken there with weight and bias cast to x's dtype (float64 keeps them whole)."""
    _norm_case(
        "layer_norm", x_dtype, "contiguous", [4, 9], "w+b", "default", 17, w_dtype=w_dtype, torch_casts=DEVICE == "cuda"
    )


@pytest.mark.parametrize(
    "shape,normalized_shape", [((0, 9), (9,)), ((2, 0, 9), (9,)), ((3, 0), (0,)), ((0, 4, 9), (4, 9))]
)
@pytest.mark.parametrize("affine", ["none", "w+b"])
def test_layer_norm_empty(shape, normalized_shape, affine):
    x = torch.zeros(shape, device=DEVICE).requires_grad_(True)
    w, b = (
        (torch.ones(normalized_shape, device=DEVICE).requires_grad_(True) for _ in range(2))
        if affine != "none"
        else (None, None)
    )
    compare(
        "layer_norm",
        lambda op, t: op(t[0], normalized_shape, t[1], t[2]),
        [x, w, b],
        torch.float32,
        f"layer_norm empty {shape} {normalized_shape} {affine}",
    )


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_norms_of_zero_dim_tensors_are_refused_like_torch(name):
    """torch refuses a 0-d input (normalized_shape must name at least one dim): ours too, with a message."""
    x = torch.tensor(1.5, device=DEVICE)
    with pytest.raises(RuntimeError):
        TORCH_OPS[name](x, ())
    with pytest.raises(ValueError, match="normalized_shape"):
        ours(name)(x, ())


@pytest.mark.parametrize(
    "case",
    ["N = 1", "N = 1, weight", "constant rows", "constant rows, weight", "zero rows", "one constant row among others"],
)
def test_layer_norm_rows_of_zero_variance_give_torchs_gradient(case):
    """Rows whose variance is 0: x_hat is 0 and rstd = 1 / sqrt(eps), large. For N = 1 the gradient of x is 0
    exactly (torch's is 0 without a weight, a rounding of 0 with one); for constant rows of N > 1 it is
    rstd * (g - mean(g)), large, and torch's. CPU fp32 (the device's, on a GPU)."""
    x = {
        "N = 1": _randn((6, 1), torch.float32, seed=2),
        "constant rows": torch.full((4, 7), 0.1, device=DEVICE),
        "zero rows": torch.zeros(3, 16, device=DEVICE),
        "one constant row among others": torch.cat(
            [_randn((3, 33), torch.float32, seed=2), torch.full((1, 33), -2.5, device=DEVICE)]
        ),
    }[case.replace(", weight", "")]
    n = x.shape[-1]
    w = _randn((n,), torch.float32, seed=3, shift=1.0).requires_grad_(True) if "weight" in case else None
    b = _randn((n,), torch.float32, seed=4).requires_grad_(True) if "weight" in case else None
    dy = _randn(x.shape, torch.float32, seed=5)
    results = []
    for op in (ours("layer_norm"), F.layer_norm):
        leaf = x.clone().requires_grad_(True)
        y = op(leaf, (n,), w, b)
        results.append((y, *torch.autograd.grad(y, [t for t in (leaf, w, b) if t is not None], dy)))
    for i, (mine, theirs) in enumerate(zip(*results)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-4, msg=lambda m: f"{case}, output {i}: {m}")
    if n == 1:
        assert torch.equal(results[0][1], torch.zeros_like(x)), f"{case}: dx is not exactly 0: {results[0][1]}"


# --- RMSNorm: F.rms_norm(input, normalized_shape, weight=None, eps=None) ---


@pytest.mark.parametrize("normalized_shape", list(NORMALIZED_SHAPES), ids=str)
@pytest.mark.parametrize("affine", ["none", "w"])
@pytest.mark.parametrize("eps", ["default", None, 1e-3])
def test_rms_norm_normalized_shape_weight_eps(normalized_shape, affine, eps):
    _norm_case("rms_norm", torch.float32, "contiguous", NORMALIZED_SHAPES[normalized_shape], affine, eps, 19)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("eps", [None, 0.5])
def test_rms_norm_dtypes_layouts(dtype, layout, eps):
    _norm_case("rms_norm", dtype, layout, (9,), "w", eps, 23)


@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.bfloat16, torch.float32), (torch.float32, torch.float16)])
def test_rms_norm_weight_in_another_dtype(x_dtype, w_dtype):
    _norm_case("rms_norm", x_dtype, "contiguous", (4, 9), "w", None, 29, w_dtype=w_dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_default_eps_is_torchs_on_small_rows(dtype):
    """eps=None: torch adds the epsilon of the dtype it computes in (fp32 for 16-bit inputs). On rows of
    mean square near that epsilon the choice shows: compare with torch in the same dtype."""
    x = _randn((4, 16), dtype, seed=31, scale=3e-4)
    torch.testing.assert_close(ours("rms_norm")(x, (16,)), F.rms_norm(x, (16,)), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("shape,normalized_shape", [((0, 9), (9,)), ((3, 0), (0,)), ((0, 4, 9), (4, 9))])
@pytest.mark.parametrize("affine", ["none", "w"])
def test_rms_norm_empty(shape, normalized_shape, affine):
    x = torch.zeros(shape, device=DEVICE).requires_grad_(True)
    w = torch.ones(normalized_shape, device=DEVICE).requires_grad_(True) if affine == "w" else None
    compare(
        "rms_norm",
        lambda op, t: op(t[0], normalized_shape, t[1]),
        [x, w],
        torch.float32,
        f"rms_norm empty {shape} {normalized_shape} {affine}",
    )


# --- sum: torch.sum(input, dim=None, keepdim=False, *, dtype=None) ---

SUM_DIMS = [None, (), 0, -1, (1,), [0, 2], (2, 0), (-1, -2), (0, 1, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("dim", SUM_DIMS, ids=repr)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_dims_keepdim_dtypes_layouts(dtype, layout, dim, keepdim):
    shape, view = _layouts((3, 4, 9))[layout]
    leaf = _randn(shape, dtype, seed=37, shift=0.05).requires_grad_(True)
    compare(
        "reduce_sum",
        lambda op, t: op(view(t[0]), dim, keepdim),
        [leaf],
        dtype,
        f"sum {layout} dim={dim!r} keepdim={keepdim} {dtype}",
    )


@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_dtype_keyword(x_dtype, dtype):
    leaf = _randn((5, 12), x_dtype, seed=41, shift=0.05).requires_grad_(True)
    compare("reduce_sum", lambda op, t: op(t[0], 1, dtype=dtype), [leaf], dtype, f"sum {x_dtype} dtype={dtype}")
    compare("reduce_sum", lambda op, t: op(t[0], dtype=dtype), [leaf], dtype, f"sum all {x_dtype} dtype={dtype}")


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((), None),
        ((), 0),
        ((), (-1,)),
        ((), ()),
        ((0,), None),
        ((0, 5), 0),
        ((0, 5), (0, 1)),
        ((5, 0), 1),
        ((2, 0, 3), (0, 2)),
        ((2, 0, 3), ()),
    ],
)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_zero_dim_and_empty(shape, dim, keepdim):
    leaf = _randn(shape, torch.float32, seed=43).requires_grad_(True)
    compare(
        "reduce_sum",
        lambda op, t: op(t[0], dim, keepdim),
        [leaf],
        torch.float32,
        f"sum {shape} dim={dim!r} keepdim={keepdim}",
    )


def test_sum_by_keyword():
    x = _randn((3, 5, 2), torch.float32, seed=47)
    expected = torch.sum(input=x, dim=(0, 2), keepdim=True, dtype=torch.float16)
    got = ours("reduce_sum")(input=x, dim=(0, 2), keepdim=True, dtype=torch.float16)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=TOL[torch.float16], atol=TOL[torch.float16])


# --- every drop-in: torch's argument names, and what the kernels lack raises a clear TypeError ---


def _keyword_call(name):
    """Every argument of the torch op, passed by its torch name."""
    x, w, b = (_randn(shape, torch.float32, seed) for seed, shape in enumerate([(3, 5), (5,), (5,)]))
    return {
        "softmax": dict(input=x, dim=1),
        "reduce_sum": dict(input=x, dim=1, keepdim=True, dtype=torch.float32),
        "layer_norm": dict(input=x, normalized_shape=(5,), weight=w, bias=b, eps=1e-3),
        "rms_norm": dict(input=x, normalized_shape=(5,), weight=w, eps=1e-3),
    }[name]


@pytest.mark.parametrize("name", list(PAGES))
def test_every_argument_by_torchs_keyword(name):
    kwargs = _keyword_call(name)
    got, expected = ours(name)(**kwargs), TORCH_OPS[name](**kwargs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool])
def test_dtypes_the_kernels_lack_raise_a_clear_type_error(name, dtype):
    """torch takes float64 (and softmax and sum integers too); the kernels read fp32, fp16 and bf16 and add in
    fp32: a float64 result from them would be silently less precise than torch's, so they refuse it."""
    x = torch.ones(3, 5, device=DEVICE).to(dtype)
    args = {"softmax": (x, 1), "layer_norm": (x, (5,)), "reduce_sum": (x, 1), "rms_norm": (x, (5,))}[name]
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        ours(name)(*args)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_softmax_dtype_keyword_the_kernels_lack_raises(dtype):
    with pytest.raises(TypeError, match="dtype=torch.(float64|int32); these kernels support float32"):
        ours("softmax")(torch.ones(3, 5, device=DEVICE), 1, dtype=dtype)
