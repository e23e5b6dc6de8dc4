"""Tutorial 02, second page (layer-norm backward with spin locks, against the persistent design): both
designs against float64, poisoned outputs, the classic design's limit, and that the persistent design it
carries is tutorial 02's. Without a CUDA GPU the kernels run through Triton's interpreter (small sizes)."""

import inspect

import pytest
import torch

from conftest import DEVICE, load_tutorial

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def page():
    return load_tutorial("24_layer_norm_backward_locks")


def reference(x, w, dy, eps=1e-5):
    """(dx, dw, db) of F.layer_norm in float64."""
    x64, w64 = x.double().requires_grad_(True), w.double().requires_grad_(True)
    b64 = torch.zeros_like(w64, requires_grad=True)
    y64 = torch.nn.functional.layer_norm(x64, x.shape[1:], w64, b64, eps)
    return torch.autograd.grad(y64, (x64, w64, b64), dy.double())


@pytest.mark.parametrize("design", ["1: spin locks", "2: persistent"])
@pytest.mark.parametrize("dtype", list(TOL), ids=lambda d: str(d)[6:])
def test_both_designs_match_float64_and_write_everything(page, design, dtype):
    """dx, dw and db poisoned with NaN beforehand, against float64: short rows packed in a program, odd
    lengths, one column, more rows than lock groups (design 1 reuses its buffers)."""
    torch.manual_seed(1)
    backward = page["DESIGNS"][design]
    for m, n in [(300, 7), (37, 100), (9, 257), (5, 1)]:
        x = (torch.randn(m, n, device=DEVICE) * 2 + 10).to(dtype)
        w, dy = torch.randn(n, device=DEVICE).to(dtype), torch.randn(m, n, device=DEVICE, dtype=dtype)
        dx, dwdb = torch.full_like(x, float("nan")), torch.full((2, n), float("nan"), device=DEVICE)
        mean, rstd = page["row_statistics"](x)
        backward(x, dy, dx, w, mean, rstd, dwdb)
        outs = dx, *dwdb
        terms = (dy.double() * w.double() * rstd.double()[:, None]).norm()  # dx cancels entirely when n = 1
        for name, out, ref in zip(("dx", "dw", "db"), outs, reference(x, w, dy)):
            assert torch.isfinite(out).all(), f"{design}, {m} x {n}: {name} not all written"
            scale = max(ref.norm(), terms if name == "dx" else 1.0)  # dw, db: ~0 where n = 1
            err = ((out.double() - ref).norm() / scale).item()
            assert err <= TOL[dtype], f"{design}, {m} x {n}, {dtype}: {name} error {err:.2e}"


def test_classic_design_names_its_limit(page):
    x = torch.randn(2, 20_000, device=DEVICE)
    w, dy = torch.randn(20_000, device=DEVICE), torch.randn(2, 20_000, device=DEVICE)
    with pytest.raises(ValueError, match="exceeds its limit of 64 KB"):
        page["backward_classic"](
            x, dy, torch.empty_like(x), w, *page["row_statistics"](x), torch.empty(2, 20_000, device=DEVICE)
        )


def test_carried_persistent_design_is_tutorial_02s(page):
    """The page measures tutorial 02's backward: the same kernels, launch parameters and bits."""
    core = load_tutorial("02_layer_norm_backward")
    assert inspect.getsource(page["layer_norm_bwd_kernel"].fn) == inspect.getsource(core["layer_norm_bwd_kernel"].fn)
    assert inspect.getsource(page["_bwd_config"]) == inspect.getsource(core["_bwd_config"])
    for name in ("MAX_BWD_FUSED_N", "SMEM_PER_BLOCK", "SMEM_PER_SM", "IN_FLIGHT"):
        assert page[name] == core[name], name
    torch.manual_seed(2)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(70, 300, device=DEVICE, dtype=dtype)
        w, dy = torch.randn(300, device=DEVICE, dtype=dtype), torch.randn_like(x)
        mean, rstd = page["row_statistics"](x)
        ours, theirs = ([torch.empty_like(x), torch.empty(2, 300, device=DEVICE)] for _ in range(2))
        page["backward_persistent"](x, dy, *ours[:1], w, mean, rstd, *ours[1:])
        core["layer_norm_rows_backward"](x, dy, *theirs[:1], w, mean, rstd, *theirs[1:])
        for name, a, b in zip(("dx", "dw", "db"), (ours[0], *ours[1]), (theirs[0], *theirs[1])):
            assert torch.equal(a, b), f"{dtype}: {name} differs from tutorial 02's backward"


def test_page_checks_passed(page):
    """The tables the page shows: errors within tolerance, design 2 repeatable bit for bit, a full sweep."""
    errors = page["errors"]
    assert (errors.iloc[:, 2:].max(axis=1) <= errors.dtype.map(page["TOLERANCE"])).all()
    det = page["determinism"]
    assert (det[det.design.str.startswith("2")].filter(like="unlike") == 0).all().all(), det
    results = page["results"]
    # every point of both designs measured; a peer may miss a point of its own (NaN, shown as "-")
    designs = results[results.provider.isin(page["DESIGNS"])]
    assert len(results) == 2 * len(page["SWEEP_N"]) * (2 + len(page["peers"])) and designs["GB/s"].gt(0).all()
