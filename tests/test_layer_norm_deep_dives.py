"""The layer-norm deep dives 21 (wide forward: x read twice, the split forward) and 23 (wide backward:
the split backward, against the carried chunked kernel): every kernel against float64, poisoned outputs,
forced onto small rows, both ways of waiting, determinism. Without a CUDA GPU the kernels run through
Triton's interpreter, where a split row has one slice (programs run one at a time and must not wait)."""

import math

import pytest
import torch

from conftest import DEVICE, load_tutorial

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IDS = lambda d: str(d).replace("torch.", "")  # noqa: E731
# A few units of rounding of the output dtype (the interpreter truncates fp32 -> bf16: twice a GPU's).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def fwd():
    return load_tutorial("21_layer_norm_wide_forward")


@pytest.fixture(scope="module")
def bwd():
    return load_tutorial("23_layer_norm_wide_backward")


def ref_layer_norm(x, weight, bias, eps=1e-5):
    """The textbook formula over the last dim, float64."""
    mean = x.mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)
    return y * (1 if weight is None else weight) + (0 if bias is None else bias)


def rel_error(out, ref):
    norm = ref.norm()
    return ((out.double() - ref).norm() / (norm if norm > 0 else 1.0)).item()


def check_stats(mean, rstd, x, what):
    xf = x.double()
    assert torch.allclose(mean.double(), xf.mean(1), rtol=1e-6, atol=1e-5), what + ": mean"
    assert torch.allclose(rstd.double(), 1 / (xf.var(1, unbiased=False) + 1e-5).sqrt(), rtol=1e-4), what + ": rstd"


# ---- 21: the forward ----


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_forward_reading_x_twice_forced(fwd, dtype):
    """The twice-reading kernel and the carried one-read kernel, forced on small rows: odd and
    power-of-two widths, with and without w and b, a padded row stride, poisoned outputs."""
    torch.manual_seed(11)
    for m, n in [(9, 100), (4, 256), (3, 1), (17, 33)]:
        x = (torch.randn(m, n + 7, device=DEVICE) * 3 + 20).to(dtype)[:, :n]  # row stride n + 7
        w, b = torch.randn(n, device=DEVICE).to(dtype), torch.randn(n, device=DEVICE).to(dtype)
        for reload in (True, False):
            for wb in ((w, b), (w, None), (None, None)):
                y = torch.full_like(x, float("nan"))
                mean, rstd = torch.full((2, m), float("nan"), device=DEVICE)
                kernel, _ = fwd["layer_norm_wide_forward"](x, y, *wb, mean, rstd, 1e-5, reload=reload)
                what = f"{m}x{n}, reload={reload}, w={wb[0] is not None}, b={wb[1] is not None}"
                assert (kernel == "x read twice") == reload, what + f": ran {kernel}"
                ref = ref_layer_norm(x.double(), *(t if t is None else t.double() for t in wb))
                assert torch.isfinite(y).all(), what + ": y not written everywhere"
                assert rel_error(y, ref) <= TOL[dtype], what
                check_stats(mean, rstd, x, what)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [300, 301, 512], ids=["even", "odd", "exact"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_split_forward_forced(fwd, dtype, n, affine):
    """The split forward on small rows: 16-bit rows packed (even n) or not (odd n), two rows per block
    with a padded last block, several groups doing several blocks each, with and without weight and bias,
    a large mean against the spread; y's rows padded so that a write past a row's end shows."""
    torch.manual_seed(9)
    m = 11
    x = (torch.randn(m, n, device=DEVICE) * 2 + 30).to(dtype)
    w = torch.randn(n, device=DEVICE).to(dtype) if affine else None
    b = torch.randn(n, device=DEVICE).to(dtype) if affine else None
    split = {
        size: dict(MIN_N=1, SLICE_N=4096, MIN_SLICES=1, TILE=1024, BYTES_PER_THREAD=64, MIN_SLOTS=32) for size in (2, 4)
    }
    y_store = torch.full((m, n + 4), float("nan"), device=DEVICE, dtype=dtype)  # an even stride: packable
    y = y_store[:, :n]
    mean, rstd = torch.full((2, m), float("nan"), device=DEVICE)
    kernel, grid = fwd["layer_norm_wide_forward"](x, y, w, b, mean, rstd, 1e-5, split=split)
    # 6 blocks of 2 rows over 4 groups of one slice (the interpreter's 4 "SMs"); a GPU holds all 6 at once
    assert kernel == "split" and grid == min(6, fwd["NUM_SMS"])
    assert y_store[:, n:].isnan().all(), "the split forward wrote past the end of a row"
    ref = ref_layer_norm(x.double(), None if w is None else w.double(), None if b is None else b.double())
    assert torch.isfinite(y).all(), "split forward: some elements were never written"
    assert rel_error(y, ref) <= TOL[dtype], f"split y: error {rel_error(y, ref):.2e}"
    check_stats(mean, rstd, x, "split")


def test_forward_launcher_picks_each_kernel(fwd):
    """At the widths today's launcher gives them: x read twice for fp32 8192-32768 and 16-bit 8192-16384,
    split for fp32 past 32768, the core kernels elsewhere; all against float64."""
    torch.manual_seed(3)
    cases = [
        (torch.float32, 8192, "x read twice"),
        (torch.bfloat16, 16384, "x read twice"),
        (torch.float32, 40_000, "split"),
        (torch.bfloat16, 4096, "fused, one read (core)"),
        (torch.bfloat16, 40_000, "chunked (core)"),
        (torch.float32, 140_000, "chunked (core)"),
    ]
    for dtype, n, expected in cases:
        x = (torch.randn(2, n, device=DEVICE) * 3 + 10).to(dtype)
        w, b = torch.randn(n, device=DEVICE).to(dtype), torch.randn(n, device=DEVICE).to(dtype)
        y, (mean, rstd) = torch.full_like(x, float("nan")), torch.full((2, 2), float("nan"), device=DEVICE)
        kernel, _ = fwd["layer_norm_wide_forward"](x, y, w, b, mean, rstd, 1e-5)
        assert kernel == expected, f"{dtype} N = {n}: ran {kernel}, expected {expected}"
        assert rel_error(y, ref_layer_norm(x.double(), w.double(), b.double())) <= TOL[dtype], f"{dtype} N = {n}"
        check_stats(mean, rstd, x, f"{dtype} N = {n}")


def test_forward_drop_in_matches_torch(fwd):
    """Leading dims, a transposed (strided) x, no weight or bias, an empty tensor."""
    torch.manual_seed(4)
    x = torch.randn(2, 3, 8192, device=DEVICE)
    w, b = torch.randn(8192, device=DEVICE), torch.randn(8192, device=DEVICE)
    torch.testing.assert_close(
        fwd["layer_norm_forward"](x, w, b), torch.nn.functional.layer_norm(x, (8192,), w, b), atol=1e-5, rtol=1e-5
    )
    xt = torch.randn(33, 20, device=DEVICE).t()
    torch.testing.assert_close(
        fwd["layer_norm_forward"](xt), torch.nn.functional.layer_norm(xt, (33,)), atol=1e-5, rtol=1e-5
    )
    assert fwd["layer_norm_forward"](torch.empty(0, 5, device=DEVICE)).shape == (0, 5)


def test_forward_page_checks_passed(fwd):
    errors = fwd["errors"]
    assert (errors["ours y"] <= errors.dtype.map(fwd["TOLERANCE"])).all()
    assert {"x read twice", "split"} <= set(errors.kernel), "the page's check did not reach both kernels"


# ---- 23: the backward ----


def backward_refs(x, w, dy):
    ins = [t.double().requires_grad_(True) for t in (x, w)] if w is not None else [x.double().requires_grad_(True)]
    return torch.autograd.grad(ref_layer_norm(ins[0], ins[1] if w is not None else None, None), ins, dy.double())


@pytest.mark.parametrize("flag_words", [True, False], ids=["flag-words", "counter"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [300, 301, 512], ids=["even", "odd", "exact"])
def test_split_backward_forced(bwd, flag_words, dtype, n):
    """The split backward on small rows, both ways of waiting, 16-bit rows packed (even n) or not (odd
    n), two rows per block with a padded last block, several groups doing several blocks each, with and
    without dw and db; outputs poisoned first, dx's rows padded so that a write past a row's end shows."""
    torch.manual_seed(8)
    m = 11
    x = (torch.randn(m, n, device=DEVICE) * 2 + 30).to(dtype)
    w = torch.randn(n, device=DEVICE).to(dtype)
    dy = torch.randn(m, n, device=DEVICE).to(dtype)
    mean, rstd = bwd["row_statistics"](x)
    # rows of 300 -> blocks of 2 x 512; 1 byte per thread gives 32 warps (counter), 64 gives 4 (flags);
    # the shares are read as a tile of MIN_SLOTS words, padded past the row's slices (read as zeros)
    split = {
        size: dict(
            SLICE_N=4096,
            MIN_SLICES=1,
            TILE=1024,
            BYTES_PER_THREAD=64 if flag_words else 1,
            MIN_SLOTS=32 if flag_words else 4,
        )
        for size in (2, 4)
    }
    nan = float("nan")
    dx_store = torch.full((m, n + 4), nan, device=DEVICE, dtype=dtype)  # an even stride: packable
    dx, dw, db = dx_store[:, :n], torch.full_like(w, nan), torch.full_like(w, nan)
    plan = bwd["layer_norm_wide_backward"](x, dy, dx, w, mean, rstd, dw, db, programs=3, split_from=64, split=split)
    meta = plan["meta"]
    assert plan["kernel"] is bwd["layer_norm_bwd_split_kernel"] and meta["FLAG_WORDS"] == flag_words
    assert meta["PACK"] == (dtype != torch.float32 and n % 2 == 0) and meta["EVEN"] == (n == 512)
    assert plan["block_m"] == 2 and plan["lines"] == 3  # 6 blocks: 2 per group
    assert meta["SLOTS"] == (32 if flag_words else 4)
    assert dx_store[:, n:].isnan().all(), "the backward wrote past the end of a row"
    g64 = backward_refs(x, w, dy)
    for name, out, ref in (("dx", dx, g64[0]), ("dw", dw, g64[1]), ("db", db, dy.double().sum(0))):
        assert torch.isfinite(out).all(), f"split {name}: some elements were never written"
        assert rel_error(out, ref) <= TOL[dtype], f"split {name}: error {rel_error(out, ref):.2e}"
    dx2 = torch.full_like(x, nan)
    bwd["layer_norm_wide_backward"](x, dy, dx2, None, mean, rstd, programs=3, split_from=64, split=split)
    assert rel_error(dx2, backward_refs(x, None, dy)[0]) <= TOL[dtype], "split dx without a weight"


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_chunked_backward_matches_float64(bwd, dtype):
    """The carried core chunked kernel (3 chunks, a large mean), poisoned outputs, two programs."""
    torch.manual_seed(2)
    n = 2 * bwd["CHUNK_N"] + 123
    x = (torch.randn(5, n, device=DEVICE) * 2 + 50).to(dtype)
    w, dy = torch.randn(n, device=DEVICE).to(dtype), torch.randn(5, n, device=DEVICE, dtype=dtype)
    nan = float("nan")
    dx, dw, db = torch.full_like(x, nan), torch.full_like(w, nan), torch.full_like(w, nan)
    plan = bwd["layer_norm_wide_backward"](
        x, dy, dx, w, *bwd["row_statistics"](x), dw, db, programs=2, split_from=math.inf
    )
    assert plan["kernel"] is bwd["layer_norm_bwd_chunked_kernel"]
    g64 = backward_refs(x, w, dy)
    for name, out, ref in (("dx", dx, g64[0]), ("dw", dw, g64[1]), ("db", db, dy.double().sum(0))):
        assert torch.isfinite(out).all(), f"chunked {name}: some elements were never written"
        assert rel_error(out, ref) <= TOL[dtype], f"chunked {name}: error {rel_error(out, ref):.2e}"


@pytest.mark.parametrize("split_from", [None, math.inf], ids=["split", "chunked"])
def test_backward_writes_every_element(bwd, split_from, monkeypatch):
    """dx, dw, db and every scratch buffer torch.empty makes are poisoned with NaN before the backward
    (the split forced on every width with split_from=0), with forced programs too."""
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    torch.manual_seed(4)
    for m, n, programs in [(3, 8192, None), (5, 300, 2), (4, 1, None)]:
        x, w = torch.randn(m, n, device=DEVICE), torch.randn(n, device=DEVICE)
        dy = torch.randn(m, n, device=DEVICE)
        mean, rstd = bwd["row_statistics"](x)
        monkeypatch.setattr(torch, "empty", poisoned_empty)
        dx, dw, db = torch.empty(m, n, device=DEVICE), torch.empty(n, device=DEVICE), torch.empty(n, device=DEVICE)
        plan = bwd["layer_norm_wide_backward"](
            x, dy, dx, w, mean, rstd, dw, db, programs=programs, split_from=0 if split_from is None else split_from
        )
        monkeypatch.setattr(torch, "empty", real_empty)
        assert (plan["kernel"] is bwd["layer_norm_bwd_split_kernel"]) == (split_from is None)
        for name, t in (("dx", dx), ("dw", dw), ("db", db)):
            assert torch.isfinite(t).all(), f"{m} x {n}, programs={programs}: {name} not all written"
        g64 = backward_refs(x, w, dy)
        terms = (dy.double() * w.double() * rstd.double()[:, None]).norm()  # dx = 0 exactly when n = 1
        assert (dx.double() - g64[0]).norm() <= 1e-5 * max(g64[0].norm(), terms), f"{m} x {n}: dx"
        # dw when n = 1: x_hat = x * rstd - mean * rstd (one fma) is a rounding of 0, as large as x * rstd's ulp
        dw_terms = (dy.double() * x.double() * rstd.double()[:, None]).abs().sum(0).norm()
        assert (dw.double() - g64[1]).norm() <= 1e-5 * max(g64[1].norm(), dw_terms), f"{m} x {n}: dw"
        assert rel_error(db, dy.double().sum(0)) <= 1e-5


@pytest.mark.parametrize("split_from", [None, math.inf], ids=["split", "chunked"])
def test_backward_is_bitwise_deterministic(bwd, split_from):
    """Same inputs, five runs, identical bytes, through the page's drop-in backward."""
    torch.manual_seed(6)
    x = torch.randn(6, 8192, device=DEVICE, dtype=torch.bfloat16)
    w, dy = torch.randn(8192, device=DEVICE, dtype=torch.bfloat16), torch.randn_like(x)
    stats = bwd["row_statistics"](x)
    runs = [bwd["layer_norm_backward"](x, w, dy, *stats, split_from=split_from) for _ in range(5)]
    for i, grads in enumerate(runs[1:], start=2):
        for name, g, g0 in zip(("dx", "dw", "db"), grads, runs[0]):
            assert torch.equal(g.view(torch.int16), g0.view(torch.int16)), f"run {i}: {name} differs from run 1"


def test_backward_page_checks_passed(bwd):
    errors = bwd["errors"]
    worst = errors[["ours dx", "ours dw", "ours db"]].max(axis=1)
    assert (worst <= errors.dtype.map(bwd["TOLERANCE"])).all()
    assert "split" in set(errors.kernel), "the page's check did not reach the split kernel"


# ---- what the deep dives carry from the core page must be the core page's ----


def test_carried_core_kernels_are_the_core_pages():
    """21, 22 and 23 are measured against the core page's kernels and limits; the forward 21 and 22 carry (so that
    each runs alone as a notebook) is tutorial 02's, letter for letter: its kernel, config and tile size; their
    launchers give tutorial 02's bits (below)."""
    import inspect

    core = load_tutorial("02_layer_norm_backward")
    fwd, staged, bwd = (
        load_tutorial(f"2{i}_layer_norm_{name}")
        for i, name in enumerate(["wide_forward", "staged_gluon", "wide_backward"], 1)
    )
    for page, number in ((fwd, 21), (staged, 22)):
        for name in ("layer_norm_fwd_kernel", "_fwd_config", "min_tile_bytes"):  # a kernel's source: its .fn's
            ours, theirs = (inspect.getsource(getattr(p[name], "fn", p[name])) for p in (page, core))
            assert ours == theirs, f"{number} carries a {name} that is not tutorial 02's"
        for name in ("MAX_FUSED_N", "LATENCY"):
            assert page[name] == core[name], f"{number}'s {name} is not tutorial 02's"
    assert set(bwd["MAX_BWD_FUSED_N"].values()) == {core["MAX_BWD_FUSED_N"]}


@pytest.mark.parametrize("n", [100, 4096], ids=["short", "fused"])
def test_carried_core_forward_is_the_core_pages(fwd, n):
    """Deep dives 21's and 22's core_forward launch what tutorial 02's forward launcher does: the same bits."""
    core, staged = load_tutorial("02_layer_norm_backward"), load_tutorial("22_layer_norm_staged_gluon")
    torch.manual_seed(12)
    m = 3 if n > 10_000 else 9
    x = torch.randn(m, n, device=DEVICE) * 2 + 5
    w, b = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    outs = []
    for launch in (core["layer_norm_rows_forward"], fwd["core_forward"], staged["core_forward"]):
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device=DEVICE), torch.empty(m, device=DEVICE)
        launch(x, y, w, b, mean, rstd, 1e-5)
        outs.append((y, mean, rstd))
    for page, out in zip((21, 22), outs[1:]):
        for name, a, b_ in zip(("y", "mean", "rstd"), out, outs[0]):
            assert torch.equal(a, b_), f"N = {n}: {name} differs between {page}'s core_forward and tutorial 02"
