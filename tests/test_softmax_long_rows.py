"""Deep dive 11 (tutorials/deep_dives/11_softmax_long_rows.py): the split kernels (one row shared by a
group of programs, with and without the lookahead), their launcher, and the carried core kernels.

Without a GPU these run through Triton's interpreter on the CPU, where programs run one at a time and
each row gets a single slice (a program must never wait for one that has not started); the forced
configurations below still exercise the flag words, the groups walking several rows and the padding.
"""

import math

import pytest
import torch

from conftest import DEVICE, LazyTutorial

T = LazyTutorial("11_softmax_long_rows")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Bounds on ||out - ref|| / ||ref||: a few roundings of the output dtype (the interpreter truncates
# fp32 -> bf16 rather than rounding, hence the bf16 margin).
TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp(min=1e-300)).item()


def references(x, dy):
    y64 = torch.softmax(x.double(), -1)
    return y64, y64 * (dy.double() - (y64 * dy.double()).sum(-1, keepdim=True))


def split_config(min_n=64, per_sm=None, lookahead=False):
    """Force the split kernels on rows of min_n columns or more, both directions and element sizes;
    the forward's lookahead kernel where lookahead is set."""
    cfg = dict(MIN_N=min_n, SLICE_N=128, num_warps=4, PER_SM=per_sm, LOOKAHEAD=lookahead)
    return {(direction, size): cfg for direction in ("forward", "backward") for size in (2, 4)}


def forward_split_kernel(lookahead):
    return T["softmax_fwd_lookahead_kernel" if lookahead else "softmax_fwd_split_kernel"]


def test_split_config_is_todays():
    """The launch parameters tuned on an H100 must not move."""
    cfg = T["_split_config"]
    assert cfg("forward", 2) == dict(MIN_N=32768, SLICE_N=8192, num_warps=4)
    assert cfg("forward", 4) == dict(MIN_N=65536, SLICE_N=2048, num_warps=2, LOOKAHEAD=True)
    assert cfg("backward", 2) == cfg("backward", 4) == dict(MIN_N=65536, SLICE_N=4096, num_warps=4)
    assert cfg("forward", 8) == cfg("forward", 4)  # min(element_size, 4), as before


@pytest.mark.parametrize("lookahead", [False, True], ids=["plain", "lookahead"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(13, 300), (3, 128), (9, 1000)])
def test_split_kernels_forced(shape, dtype, lookahead):
    """A padded slice (300 of 512 columns), rows walked by several groups, outputs poisoned with NaN
    first; against float64, and the backward bitwise repeatable."""
    split = split_config(lookahead=lookahead)
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 4
    y = torch.full_like(x, math.nan)
    kernel, grid, _, meta = T["launch"]("forward", (x, y), split)
    assert kernel is forward_split_kernel(lookahead)
    assert grid // meta["SLICES"] > 1, "several groups, each walking several rows"
    T["softmax_rows"]("forward", (x, y), split)
    dy = torch.randn_like(x)
    y64, _ = references(x, dy)
    assert rel_err(y, y64) < TOL[dtype], f"forward error {rel_err(y, y64):.2e} over {TOL[dtype]:.0e}"
    dx = torch.full_like(x, math.nan)
    assert T["launch"]("backward", (y, dy, dx), split)[0] is T["softmax_bwd_split_kernel"]
    assert T["softmax_rows"]("backward", (y, dy, dx), split) == "split"
    y_, dy_ = y.double(), dy.double()
    dx64 = y_ * (dy_ - (y_ * dy_).sum(-1, keepdim=True))
    assert rel_err(dx, dx64) < 2 * TOL[dtype], f"backward error {rel_err(dx, dx64):.2e}"
    first = dx.clone()
    T["softmax_rows"]("backward", (y, dy, dx), split)
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
    T["softmax_rows"]("forward", (x, y), split)
    torch.testing.assert_close(y, torch.softmax(x, -1), equal_nan=True)
    dy = torch.randn_like(x)
    dx = torch.full_like(x, 3.0)
    T["softmax_rows"]("backward", (y, dy, dx), split)
    torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), equal_nan=True)


def test_split_falls_back_when_a_group_cannot_fit(monkeypatch):
    """No room for one group (a GPU of 0 SMs here): the launcher takes the core page's kernels instead
    (for rows this short the fused forward, and the online backward this page carries)."""
    monkeypatch.setitem(T["split_grid"].__globals__, "NUM_SMS", 0)  # the page's own globals
    split = split_config()
    x = torch.randn(5, 300, device=DEVICE)
    y = torch.full_like(x, math.nan)
    assert T["launch"]("forward", (x, y), split)[0] is T["softmax_fwd_kernel"]
    assert T["launch"]("backward", (x, x, y), split)[0] is T["softmax_bwd_online_kernel"]
    assert T["softmax_rows"]("forward", (x, y), split) == "fused (core)"
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
    """Rows of _split_config's MIN_N columns and more take the split kernels by themselves (the
    forward's lookahead kernel where its entry says so), bitwise repeatable."""
    for size, dtype in ((4, torch.float32), (2, torch.bfloat16)):
        cfg = T["_split_config"]
        n = max(cfg("forward", size)["MIN_N"], cfg("backward", size)["MIN_N"]) + 33
        torch.manual_seed(size)
        x, dy = torch.randn(2, n, device=DEVICE, dtype=dtype) * 3, torch.randn(2, n, device=DEVICE, dtype=dtype)
        lookahead = cfg("forward", size).get("LOOKAHEAD", False)
        assert T["launch"]("forward", (x, x))[0] is forward_split_kernel(lookahead)
        assert T["launch"]("backward", (x, x, x))[0] is T["softmax_bwd_split_kernel"]
        y, dx = torch.full_like(x, math.nan), torch.full_like(x, math.nan)
        T["softmax_rows"]("forward", (x, y))
        T["softmax_rows"]("backward", (y, dy, dx))
        y64, _ = references(x, dy)
        y_, dy_ = y.double(), dy.double()
        assert rel_err(y, y64) < TOL[dtype]
        assert rel_err(dx, y_ * (dy_ - (y_ * dy_).sum(-1, keepdim=True))) < 2 * TOL[dtype]
        again = torch.empty_like(x)
        T["softmax_rows"]("forward", (x, again))
        assert torch.equal(again, y)


@pytest.mark.parametrize("n_sms", [1, 2, 4])
@pytest.mark.parametrize("n_rows", [1, 2, 3, 7, 16, 31])
def test_lookahead_every_row_count(n_rows, n_sms, monkeypatch):
    """The lookahead forward publishes each row's shares one row early and loads two rows ahead: the
    first row, the last, a group of one row, fewer rows than groups, odd counts and a single group
    walking every row must all come out whole (outputs poisoned with NaN) and bitwise repeatable."""
    monkeypatch.setitem(T["split_grid"].__globals__, "NUM_SMS", n_sms)  # the page's own globals
    # at most SLICES programs per SM (one group): n_sms groups at most, one walking every row when n_sms = 1
    slices = T["split_plan"]("forward", 300, 4, split_config(lookahead=True))[0]["SLICES"]
    split = split_config(per_sm=slices, lookahead=True)
    torch.manual_seed(n_rows)
    x = torch.randn(n_rows, 300, device=DEVICE) * 4
    y = torch.full_like(x, math.nan)
    kernel, grid, _, meta = T["launch"]("forward", (x, y), split)
    assert kernel is T["softmax_fwd_lookahead_kernel"]
    assert grid // meta["SLICES"] == min(n_rows, math.ceil(n_rows / math.ceil(n_rows / n_sms)))
    T["softmax_rows"]("forward", (x, y), split)
    assert not y.isnan().any(), "a row the lookahead kernel never wrote"
    torch.testing.assert_close(y, torch.softmax(x, -1))
    again = torch.full_like(x, math.nan)
    T["softmax_rows"]("forward", (x, again), split)
    assert torch.equal(again, y)


def test_lookahead_matches_the_plain_split_kernel():
    """Both forward split kernels combine the same shares in the same order: the same bits."""
    x = torch.randn(11, 700, device=DEVICE, dtype=torch.bfloat16) * 4
    plain, ahead = torch.empty_like(x), torch.empty_like(x)
    T["softmax_rows"]("forward", (x, plain), split_config(lookahead=False))
    T["softmax_rows"]("forward", (x, ahead), split_config(lookahead=True))
    assert torch.equal(plain, ahead)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_carried_core_kernels(dtype):
    """Without a split (``{}``) the launcher runs the core page's kernels: fused up to 32 K forward,
    online beyond (and always online backward), every element written, against float64."""
    for n in (1000, 32768 + 77):
        torch.manual_seed(n)
        x, dy = torch.randn(3, n, device=DEVICE, dtype=dtype) * 4, torch.randn(3, n, device=DEVICE, dtype=dtype)
        y, dx = torch.full_like(x, math.nan), torch.full_like(x, math.nan)
        assert T["softmax_rows"]("forward", (x, y), {}) == ("fused (core)" if n <= 32768 else "online (core)")
        assert T["softmax_rows"]("backward", (y, dy, dx), {}) == "online (core)"
        y64, _ = references(x, dy)
        y_, dy_ = y.double(), dy.double()
        assert rel_err(y, y64) < TOL[dtype]
        assert rel_err(dx, y_ * (dy_ - (y_ * dy_).sum(-1, keepdim=True))) < 2 * TOL[dtype]


def test_online_kernels_forced_on_short_rows(monkeypatch):
    """The carried online kernels with several chunks and a partial last one (chunks of 128 columns)."""
    page = T["core_launch"].__globals__
    real = page["core_launch"]

    def small_chunks(*args):
        kernel, grid, meta = real(*args)
        return kernel, grid, dict(meta, BLOCK_N=128) if "BLOCK_M" not in meta else meta

    monkeypatch.setitem(page, "core_launch", small_chunks)
    x = torch.randn(5, 33_000, device=DEVICE)  # past 32 K: the online forward
    y, dx, dy = torch.full_like(x, math.nan), torch.full_like(x, math.nan), torch.randn_like(x)
    assert T["softmax_rows"]("forward", (x, y), {}) == "online (core)"
    T["softmax_rows"]("backward", (y, dy, dx), {})
    torch.testing.assert_close(y, torch.softmax(x, -1))
    torch.testing.assert_close(dx, y * (dy - (y * dy).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-5)
