"""The fused softmax of tutorials/01_fused_softmax.py against float64, on random shapes and layouts.

Without a GPU these run through Triton's interpreter on the CPU (exact, slow: sizes stay small).
"""

import math

import pytest
import torch

from conftest import DEVICE, load_tutorial

T = load_tutorial("01_fused_softmax")
softmax = T["softmax"]
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


def check(x, dim, dtype):
    x = x.requires_grad_(True)
    y = softmax(x, dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    dy = torch.randn_like(y)
    y64, dx64 = reference(x, dim, dy)
    (dx,) = torch.autograd.grad(y, x, dy)
    assert rel_err(y, y64) < TOL[dtype], f"forward error {rel_err(y, y64):.2e} over {TOL[dtype]:.0e}"
    if dx64.norm() > 0:
        assert rel_err(dx, dx64) < 2 * TOL[dtype], f"backward error {rel_err(dx, dx64):.2e}"
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


def test_online_kernels_match_float64():
    """Rows longer than the fused limit go through the online (two-pass) kernels."""
    n = T["MAX_FUSED_N"] + 4099
    assert n > T["MAX_FUSED_BWD_N"]
    for dtype in DTYPES:
        check(torch.randn(2, n, device=DEVICE, dtype=dtype) * 5, -1, dtype)


@pytest.mark.parametrize("kernel", ["fused", "online"])
@pytest.mark.parametrize("persistent", [False, True])
def test_every_element_written(kernel, persistent, monkeypatch):
    """Outputs start as NaN: any element a kernel skips would stay NaN."""
    if kernel == "online":  # force the online kernels on short rows, several chunks each
        page = T["forward_plan"].__globals__  # the page's own globals (T is runpy's copy of them)
        monkeypatch.setitem(page, "MAX_FUSED_N", 64)
        monkeypatch.setitem(page, "MAX_FUSED_BWD_N", 64)
        monkeypatch.setitem(page, "ONLINE_BLOCK_N", 128)
        assert T["forward_launch"](*[torch.empty(1, 1000, device=DEVICE)] * 2)[0] is T["softmax_fwd_online_kernel"]
    x = torch.randn(13, 1000, device=DEVICE)
    y = torch.full_like(x, math.nan)
    T["softmax_rows_forward"](x, y, persistent=persistent)
    assert not y.isnan().any()
    torch.testing.assert_close(y, torch.softmax(x, -1))
    dy = torch.randn_like(x)
    dx = torch.full_like(x, math.nan)
    T["softmax_rows_backward"](y, dy, dx, persistent=persistent)
    assert not dx.isnan().any()
    torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-5)


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


def split_config(min_n=64, per_sm=None, lookahead=False):
    """Force the split kernels on rows of min_n columns or more, both directions and element sizes;
    the forward's lookahead kernel where lookahead is set."""
    cfg = dict(MIN_N=min_n, SLICE_N=128, num_warps=4, PER_SM=per_sm, LOOKAHEAD=lookahead)
    return {(direction, size): cfg for direction in ("forward", "backward") for size in (2, 4)}


def forward_split_kernel(lookahead):
    return T["softmax_fwd_lookahead_kernel" if lookahead else "softmax_fwd_split_kernel"]


@pytest.mark.parametrize("lookahead", [False, True], ids=["plain", "lookahead"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(13, 300), (3, 128), (9, 1000)])
def test_split_kernels_forced(shape, dtype, lookahead):
    """The long-row (split) kernels on small rows: a padded slice (300 of 512 columns), rows walked by
    several groups, outputs poisoned with NaN first; against float64. Under the interpreter each row
    has one slice (programs run one at a time and must never wait for another)."""
    split = split_config(lookahead=lookahead)
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 4
    y = torch.full_like(x, math.nan)
    kernel, grid, _, meta = T["forward_launch"](x, y, split=split)
    assert kernel is forward_split_kernel(lookahead)
    assert grid // meta["SLICES"] > 1, "several groups, each walking several rows"
    T["softmax_rows_forward"](x, y, split=split)
    dy = torch.randn_like(x)
    y64, _ = reference(x, -1, dy)
    assert rel_err(y, y64) < TOL[dtype], f"forward error {rel_err(y, y64):.2e} over {TOL[dtype]:.0e}"
    dx = torch.full_like(x, math.nan)
    assert T["backward_launch"](y, dy, dx, split=split)[0] is T["softmax_bwd_split_kernel"]
    T["softmax_rows_backward"](y, dy, dx, split=split)
    y_, dy_ = y.double(), dy.double()
    dx64 = y_ * (dy_ - (y_ * dy_).sum(-1, keepdim=True))
    assert rel_err(dx, dx64) < 2 * TOL[dtype], f"backward error {rel_err(dx, dx64):.2e}"
    first = dx.clone()
    T["softmax_rows_backward"](y, dy, dx, split=split)
    assert torch.equal(dx, first)


@pytest.mark.parametrize("lookahead", [False, True], ids=["plain", "lookahead"])
def test_split_kernels_special_values(lookahead):
    """NaN and +-inf rows through the split kernels behave as torch.softmax, NaNs whose bits are all
    ones too (the forward flag words' "not written" pattern: a published word must never look like it)."""
    split = split_config(lookahead=lookahead)
    x = torch.randn(7, 200, device=DEVICE)
    x[0, 1] = math.nan
    x[1, 2] = math.inf
    x[2] = -math.inf
    x[3, :150] = -math.inf
    x[4, 0], x[4, 1] = math.inf, -math.inf
    x[5, 7] = torch.tensor(-1, dtype=torch.int32).view(torch.float32)  # NaN, bits 0xFFFFFFFF
    x[6] = x[5, 7]  # a whole row of it
    y = torch.full_like(x, 3.0)
    T["softmax_rows_forward"](x, y, split=split)
    torch.testing.assert_close(y, torch.softmax(x, -1), equal_nan=True)
    dy = torch.randn_like(x)
    dx = torch.full_like(x, 3.0)
    T["softmax_rows_backward"](y, dy, dx, split=split)
    torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), equal_nan=True)


def test_split_falls_back_when_a_group_cannot_fit(monkeypatch):
    """No room for one group (a GPU of 0 SMs here): the launcher takes the one-program kernels
    instead (for rows this short the fused one; for long rows the online one)."""
    monkeypatch.setitem(T["split_grid"].__globals__, "NUM_SMS", 0)  # the page's own globals
    split = split_config()
    x = torch.randn(5, 300, device=DEVICE)
    y = torch.full_like(x, math.nan)
    assert T["forward_launch"](x, y, split=split)[0] is T["forward_plan"](300, 4)[0]
    assert T["backward_launch"](x, x, y, split=split)[0] is T["backward_plan"](300)[0]
    T["softmax_rows_forward"](x, y, split=split)
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_split_groups_walk_equal_numbers_of_rows():
    """The grid is whole groups, as few as give the fewest rows per group (no group walks one row more
    alone at the end), and never more programs than fit at once."""
    meta = dict(SLICES=4, BLOCK_N=128, num_warps=4)
    x = torch.empty(1, 512, device=DEVICE)
    args = (x, x, T["split_flags"]("forward", 1, meta, x.device), 1, 512, 512, 512)
    fit = T["programs_per_sm"](T["softmax_fwd_split_kernel"], args, meta)[0]
    for per_sm in (None, 2):
        most = min(fit, per_sm or fit) * T["NUM_SMS"] // 4
        for n_rows in (1, 2, 7, most, most + 1, 5 * most - 1, 1024):
            grid = T["split_grid"](T["softmax_fwd_split_kernel"], args, meta, per_sm, n_rows)
            groups = grid // 4
            assert grid % 4 == 0 and 1 <= groups <= most
            assert math.ceil(n_rows / groups) == math.ceil(n_rows / most) and groups <= n_rows


def test_long_rows_take_the_split_kernels_and_match_float64():
    """softmax() on rows of SPLIT's MIN_N columns and more picks the split kernels by itself (the
    forward's lookahead kernel where its SPLIT entry says so)."""
    for size, dtype in ((4, torch.float32), (2, torch.bfloat16)):
        n = max(T["SPLIT"][("forward", size)]["MIN_N"], T["SPLIT"][("backward", size)]["MIN_N"]) + 33
        x = torch.randn(2, n, device=DEVICE, dtype=dtype)
        lookahead = T["SPLIT"][("forward", size)].get("LOOKAHEAD", False)
        assert T["forward_launch"](x, x)[0] is forward_split_kernel(lookahead)
        assert T["backward_launch"](x, x, x)[0] is T["softmax_bwd_split_kernel"]
        check(x, -1, dtype)
        first = softmax(x)
        assert torch.equal(softmax(x), first)


@pytest.mark.parametrize("n_sms", [1, 2, 4])
@pytest.mark.parametrize("n_rows", [1, 2, 3, 7, 16, 31])
def test_lookahead_every_row_count(n_rows, n_sms, monkeypatch):
    """The lookahead forward publishes each row's shares one row early and loads two rows ahead: the
    first row, the last, a group of one row, fewer rows than groups, odd counts and a single group
    walking every row must all come out whole (outputs poisoned with NaN) and bitwise repeatable."""
    monkeypatch.setitem(T["split_grid"].__globals__, "NUM_SMS", n_sms)  # the page's own globals
    split = split_config(lookahead=True)
    torch.manual_seed(n_rows)
    x = torch.randn(n_rows, 300, device=DEVICE) * 4
    y = torch.full_like(x, math.nan)
    kernel, grid, _, meta = T["forward_launch"](x, y, split=split)
    assert kernel is T["softmax_fwd_lookahead_kernel"]
    assert grid // meta["SLICES"] == min(n_rows, math.ceil(n_rows / math.ceil(n_rows / n_sms)))
    T["softmax_rows_forward"](x, y, split=split)
    assert not y.isnan().any(), "a row the lookahead kernel never wrote"
    torch.testing.assert_close(y, torch.softmax(x, -1))
    again = torch.full_like(x, math.nan)
    T["softmax_rows_forward"](x, again, split=split)
    assert torch.equal(again, y)


def test_lookahead_matches_the_plain_split_kernel():
    """Both forward split kernels combine the same shares in the same order: the same bits."""
    x = torch.randn(11, 700, device=DEVICE, dtype=torch.bfloat16) * 4
    plain, ahead = torch.empty_like(x), torch.empty_like(x)
    T["softmax_rows_forward"](x, plain, split=split_config(lookahead=False))
    T["softmax_rows_forward"](x, ahead, split=split_config(lookahead=True))
    assert torch.equal(plain, ahead)
