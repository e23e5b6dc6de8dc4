"""Deep dive 41 (RMSNorm, wide rows): the chunked forward (values against float64, extreme rows, every row written),
the split backward forced on small rows (both ways of waiting, packed and not, poisoned outputs, dx only, no weight),
their configs, the chunked backward, determinism, and the page's own checks and measurements."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, load_tutorial

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def dive():
    return load_tutorial("41_rms_norm_wide_backward")


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def reference(x, w, dy, eps=1e-6):
    x64 = x.double().requires_grad_(True)
    w64 = None if w is None else w.double().requires_grad_(True)
    grads = torch.autograd.grad(
        F.rms_norm(x64, x.shape[-1:], w64, eps), [x64] + ([] if w is None else [w64]), dy.double()
    )
    return grads[0], (grads[1] if w is not None else None)


@pytest.mark.parametrize("n", [300, 301])
@pytest.mark.parametrize("flag_words", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_split_kernel_forced(dive, flag_words, dtype, n, monkeypatch):
    """The split backward on small rows, both ways of waiting, two rows per block with a padded last
    block, several groups (more blocks than two per group: the lookahead's loads past the end), with and
    without dw; outputs poisoned first. 16-bit rows of even length are loaded as 32-bit words (PACK), odd
    ones not. (Under the interpreter a row has one slice: programs run one at a time.)"""
    m = 19
    x = (2 * torch.randn(m, n, device=DEVICE)).to(dtype)
    w = torch.randn(n, device=DEVICE).to(dtype)
    dy = torch.randn(m, n, device=DEVICE).to(dtype)
    rstd = dive["rstd_of"](x)
    # rows of 300 -> blocks of 2 x 512; 1 byte per thread gives 32 warps (counter), 64 gives 4 (flags)
    options = dict(split_from=64, split=dict(TILE=1024, BYTES_PER_THREAD=64 if flag_words else 1))
    # dx with a padded row stride of the same parity as n: the padding is a guard that must stay NaN
    dx_store = torch.full((m, n + 4), float("nan"), device=DEVICE, dtype=dtype)
    dx, dw = dx_store[:, :n], torch.full_like(w, float("nan"))
    for n_sms in (1, 2, 3, 4):  # the page's SM count, so that 2 to 4 groups share the 10 blocks of 2 rows
        monkeypatch.setitem(dive["backward_plan"].__globals__, "NUM_SMS", n_sms)
        _, meta, grid, _ = dive["backward_plan"](x, w, rstd, dy, dx, True, **options)
        if 2 <= grid // meta["SLICES"] <= 4:
            break
    kernel, meta, grid, _ = dive["rms_norm_wide_backward"](x, w, rstd, dy, dx, dw, **options)
    assert kernel is dive["rms_norm_bwd_split_kernel"] and meta["FLAG_WORDS"] == flag_words
    assert meta["PACK"] == (dtype != torch.float32 and n % 2 == 0), meta
    assert meta["BLOCK_M"] == 2 and grid // meta["SLICES"] > 1
    assert -(-m // meta["BLOCK_M"]) > 2 * (grid // meta["SLICES"]), "some group should do 3 blocks or more"
    assert dx_store[:, n:].isnan().all(), "the backward wrote past the end of a row"
    dx64, dw64 = reference(x, w, dy)
    assert rel(dx, dx64) <= TOL[dtype] and rel(dw, dw64) <= TOL[dtype], (rel(dx, dx64), rel(dw, dw64))
    dx2 = torch.full_like(x, float("nan"))
    dive["rms_norm_wide_backward"](x, w, rstd, dy, dx2, None, **options)  # dx only: another compiled kernel,
    # whose arithmetic the compiler may contract otherwise (on an H100: fp32 and fp16, flag words, n = 300)
    torch.testing.assert_close(dx2, dx, rtol=TOL[dtype], atol=TOL[dtype] * dx.abs().max().item())
    dx2_again = torch.full_like(x, float("nan"))
    dive["rms_norm_wide_backward"](x, w, rstd, dy, dx2_again, None, **options)
    assert torch.equal(dx2_again, dx2), "the dx-only backward is not bitwise repeatable"
    dx3 = torch.full_like(x, float("nan"))  # no weight: g = dy
    dive["rms_norm_wide_backward"](x, None, rstd, dy, dx3, None, **options)
    assert rel(dx3, reference(x, None, dy)[0]) <= TOL[dtype]


def test_chunked_kernel_and_determinism(dive):
    """split_from=inf runs the chunked kernel (the 'chunked' column); both are bitwise repeatable."""
    x, w = torch.randn(5, 9000, device=DEVICE), torch.randn(9000, device=DEVICE)
    dy = torch.randn(5, 9000, device=DEVICE)
    rstd = dive["rstd_of"](x)
    dx64, dw64 = reference(x, w, dy)
    for split_from in (8192, float("inf")):
        kernel = dive["backward_plan"](x, w, rstd, dy, x, True, split_from)[0]
        assert kernel is dive["rms_norm_bwd_split_kernel" if split_from == 8192 else "rms_norm_bwd_chunked_kernel"]
        runs = [dive["rms_norm_backward"](x, w, rstd, dy, split_from) for _ in range(2)]
        assert rel(runs[0][0], dx64) <= 1e-5 and rel(runs[0][1], dw64) <= 1e-5
        assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("scale", [1e20, 1e-30, 0.0], ids=["1e20-scaled", "tiny", "zero rows"])
def test_chunked_kernel_extreme_values(dive, scale):
    """Rows whose sum of squares passes fp32 (rstd from float64, as the core page's forward saves it), tiny and zero
    rows, through the chunked kernel: dx and dw against float64, each against the size of its terms."""
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(4, 9000, generator=gen) * scale).to(DEVICE)
    w, dy = (torch.randn(9000, generator=gen) + 1).to(DEVICE), torch.randn(4, 9000, generator=gen).to(DEVICE)
    rstd64 = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    dx, dw = dive["rms_norm_backward"](x, w, rstd64.float(), dy, float("inf"))
    dx64, dw64 = reference(x, w, dy)
    x_hat = x.double() * rstd64[:, None]
    assert (dx.double() - dx64).norm() <= 1e-5 * (rstd64[:, None] * dy.double() * w.double()).norm()
    assert (dw.double() - dw64).norm() <= 1e-5 * max((dy.double() * x_hat).norm().item(), 1e-30)


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_values_and_every_row_written(dive, dtype, weighted, monkeypatch):
    """The chunked forward on rows of two whole chunks and a ragged third: y and rstd against float64 on the same
    rounded inputs, rows scaled by 1e20 (a sum of squares past fp32), 1e-30 and 0 among them; its outputs are poisoned
    with NaN where it allocates them, so that a row it did not write shows."""
    n, gen = 2 * 16384 + 5, torch.Generator().manual_seed(3)
    x = torch.randn(7, n, generator=gen) * torch.tensor([1, 1e20, 1, 1e-30, 0, 3, 1e20])[:, None]
    x, w = x.to(dtype).to(DEVICE), (torch.randn(n, generator=gen) + 1).to(dtype).to(DEVICE) if weighted else None

    def poisoned(allocate):  # torch.empty or torch.empty_like, whose floating-point tensors come filled with NaN
        def poisoned_allocate(*args, **kwargs):
            t = allocate(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t

        return poisoned_allocate

    for name in ("empty", "empty_like"):
        monkeypatch.setattr(torch, name, poisoned(getattr(torch, name)))
    y, rstd = dive["rms_norm_forward"](x, w, 1e-6)
    monkeypatch.undo()
    assert dive["_fwd_config"](len(x), x.element_size())[0]["CHUNK_N"] * 2 < n, "the rows should span three chunks"
    y64 = F.rms_norm(x.double(), (n,), None if w is None else w.double(), 1e-6)
    rstd64 = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    assert not y.isnan().any() and not rstd.isnan().any(), "the forward left a row unwritten"
    torch.testing.assert_close(rstd.double(), rstd64, rtol=1e-5, atol=0)
    torch.testing.assert_close(y.double(), y64, rtol=TOL[dtype], atol=TOL[dtype])
    again = dive["rms_norm_forward"](x, w, 1e-6)
    assert torch.equal(again[0], y) and torch.equal(again[1], rstd), "the forward is not bitwise repeatable"


def test_split_config_keeps_todays_parameters(dive):
    """The launch parameters tuned on an H100, moved unchanged into _split_config (slices only on a GPU)."""
    cfg = dive["_split_config"]
    gpu = DEVICE == "cuda"
    m = cfg(16384, torch.bfloat16, True, True)
    assert (m["SLICES"], m["BLOCK_M"], m["BLOCK_N"], m["num_warps"], m["FLAG_WORDS"]) == (
        (4, 1, 4096, 8, True) if gpu else (1, 1, 16384, 32, False)
    )
    m = cfg(65536, torch.float32, True, True)
    assert (m["SLICES"], m["BLOCK_N"], m["num_warps"]) == ((16, 4096, 16) if gpu else (1, 65536, 32))
    assert dive["MAX_FUSED_N"] == 8192 and dive["MAX_SPLIT_N"] == 131072 and dive["WARPS_PER_SM"] == 16
    assert dive["_chunked_config"](100, 20000, 2) == (dict(CHUNK_N=8192, num_warps=16), min(100, dive["NUM_SMS"]))
    for element_size in (2, 4):  # the chunked forward: a program a row, chunks of 16 K, 16 warps
        assert dive["_fwd_config"](100, element_size) == (dict(CHUNK_N=16384, num_warps=16), 100)


def test_range_claims_the_forward_past_the_core_page(dive):
    """Forward rows past 64 KB (fp32 from 16,385, bf16 from 32,769: 16 K-32 K bf16 rows are deep dive 42's), up to the
    widest N measured; the backward past the core page's 8 K."""
    widest = 65536  # the GPU sweep's widest N
    assert dive["RANGE"]["forward", "float32"] == range(16385, widest + 1)
    assert dive["RANGE"]["forward", "bfloat16"] == range(32769, widest + 1)
    assert all(dive["RANGE"]["backward", t].start == 8193 for t in ("float32", "bfloat16"))


def test_page_checked_and_measured(dive):
    errors, results, claims = dive["errors"], dive["results"], dive["RANGE"]
    assert len(errors) == 3 * len(dive["CHECK_SHAPES"]) and errors["same bits"].all()
    assert {"ours y", "torch y", "ours dx", "ours dw"} <= set(errors.columns)
    points = {(d, t, n) for d in ("forward", "backward") for t in ("float32", "bfloat16") for n in dive["SWEEP_N"]}
    points = {(d, t, n) for d, t, n in points if n in claims[d, t]}
    assert {d for d, _, _ in points} == {"forward", "backward"}, "the sweep should measure both directions"
    for name, directions in (("chunked", {"backward"}), ("this page", {"forward", "backward"})):
        ours = results[results.provider == name]
        assert set(zip(ours.direction, ours.dtype, ours.N)) == {p for p in points if p[0] in directions}
        assert len(ours) == len(set(zip(ours.direction, ours.dtype, ours.N))) and (ours["GB/s"] > 0).all()
