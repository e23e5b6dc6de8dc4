"""The core cross-entropy pages: tutorials/06_cross_entropy.py (the loss alone: the ladder's kernels, their launch
config and launcher, the forward's speed of light), tutorials/06_cross_entropy_and_gradient.py (the loss and its
gradient in one kernel, its config and launcher) and tutorials/06_cross_entropy_backward.py (the lazy backward, the
drop-in, and what it runs of the two pages before carried letter for letter). The drop-in against F.cross_entropy in
float64 for every option, rows of several chunks (the chunk shrunk so that small rows have many), the logits left
alone, the lazy backward, poisoned outputs, bad inputs, the ladder's kernels, and the kernels compiled for an H100
(no GPU needed); its PyTorch operators through torch.library.opcheck and in a block compiled with fullgraph=True; the
stages the launch config picks fit the shared memory of an A100, an L4 and an H100, compiled for each (no GPU
needed)."""

import inspect
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, ROOT, load_tutorial

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# a few units of rounding of the dtype (the interpreter truncates fp32 -> bf16: twice a GPU's error)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def tut():
    """The drop-in's page."""
    return load_tutorial("06_cross_entropy_backward")


@pytest.fixture(scope="module")
def forward():
    """The first page: the loss alone, the ladder's kernels, their config and launcher."""
    return load_tutorial("06_cross_entropy")


@pytest.fixture(scope="module")
def gradient():
    """The second page: the loss and its gradient in one kernel, its config and launcher."""
    return load_tutorial("06_cross_entropy_and_gradient")


@pytest.fixture
def small_chunks(tut, forward, gradient, monkeypatch):
    """Chunks of 64 logits (32 for a bf16 forward alone): rows of a few hundred have many, the last one ragged."""
    for page in (tut, forward, gradient):
        if "CHUNK_N" in page.data:
            monkeypatch.setitem(page.data, "CHUNK_N", 64)
        monkeypatch.setitem(page.data, "FORWARD_CHUNK_N", 32)


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def reference(x, target, dy, **options):
    """float64 loss and gradient of F.cross_entropy for upstream gradient dy."""
    if options.get("weight") is not None:
        options = options | dict(weight=options["weight"].double())
    x64 = x.detach().double().requires_grad_(True)
    loss = F.cross_entropy(x64, target, **options)
    return loss.detach(), torch.autograd.grad(loss, x64, dy.double().to(x64.device))[0]


def make(shape, dtype, seed, ignored=0.2, ignore_index=-100):
    gen = torch.Generator().manual_seed(seed)
    n_classes = shape[1] if len(shape) > 1 else shape[0]
    x = (3 * torch.randn(shape, generator=gen)).to(DEVICE, dtype).requires_grad_(True)
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = torch.randint(0, n_classes, target_shape, generator=gen)
    target = target.masked_fill(torch.rand(target_shape, generator=gen) < ignored, ignore_index).to(DEVICE)
    return x, target, gen


def check(tut, x, target, gen, reduction="mean", tol=None, **options):
    """Ours against float64: loss and gradient, for a random upstream gradient of the loss's shape."""
    loss = tut["cross_entropy"](x, target, reduction=reduction, **options)
    dy = torch.randn(loss.shape, generator=gen).to(DEVICE, x.dtype)
    (dx,) = torch.autograd.grad(loss, x, dy)
    loss64, dx64 = reference(x, target, dy, reduction=reduction, **options)
    assert loss.shape == loss64.shape and loss.dtype == x.dtype and dx.shape == x.shape and dx.dtype == x.dtype
    tol = tol or TOL[x.dtype]
    assert rel(loss, loss64) <= tol, f"loss: {rel(loss, loss64):.2e} > {tol:.0e} ({reduction}, {options})"
    assert rel(dx, dx64) <= tol, f"gradient: {rel(dx, dx64):.2e} > {tol:.0e} ({reduction}, {options})"
    return loss, dx


OPTIONS = {
    "plain": {},
    "weight": {"weight": True},
    "smoothing": {"label_smoothing": 0.1},
    "weight and smoothing": {"weight": True, "label_smoothing": 0.3},
    "ignore_index 3": {"ignore_index": 3},
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_options_against_float64(tut, small_chunks, dtype, reduction, option):
    """Ragged rows of several chunks (V = 300), some rows ignored, a random upstream gradient (a vector for 'none')."""
    options = dict(OPTIONS[option])
    x, target, gen = make(
        (7, 300), dtype, seed=len(option) + 10 * DTYPES.index(dtype), ignore_index=options.get("ignore_index", -100)
    )
    if options.get("weight"):
        options["weight"] = (torch.rand(300, generator=gen) + 0.5).to(DEVICE)
    check(tut, x, target, gen, reduction, **options)


@pytest.mark.parametrize("n_classes", [1, 2, 33, 64, 65, 1000])
def test_ragged_vocabularies(tut, small_chunks, n_classes):
    """V = 1 (loss and gradient exactly 0), one chunk, exactly one, one more than one, many."""
    x, target, gen = make((5, n_classes), torch.float32, seed=n_classes, ignored=0.0)
    if n_classes == 1:
        loss = tut["cross_entropy"](x, target, label_smoothing=0.2)
        (dx,) = torch.autograd.grad(loss, x)
        assert loss.item() == 0 and torch.equal(dx, torch.zeros_like(dx))
        return
    check(tut, x, target, gen, "none", label_smoothing=0.05)


def test_a_long_row_through_the_default_chunks(tut):
    """The page's own chunk size: a row of 3 chunks of 8 K fp32 logits, the last ragged."""
    x, target, gen = make((2, 20000), torch.float32, seed=7, ignored=0.0)
    check(tut, x, target, gen, "mean")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_every_row_ignored(tut, reduction):
    """As PyTorch: 'mean' is NaN (0 / 0), 'sum' and 'none' are 0; the gradient is 0 everywhere, never NaN."""
    x = torch.randn(4, 50, device=DEVICE, requires_grad=True)
    target = torch.full((4,), -100, device=DEVICE)
    for options in ({}, {"weight": torch.rand(50, device=DEVICE), "label_smoothing": 0.1}):
        loss, expected = (
            tut["cross_entropy"](x, target, reduction=reduction, **options),
            F.cross_entropy(x, target, reduction=reduction, **options),
        )
        torch.testing.assert_close(loss, expected, equal_nan=True)
        assert reduction != "mean" or loss.isnan().item()
        (dx,) = torch.autograd.grad(loss.sum(), x)
        assert torch.equal(dx, torch.zeros_like(dx)), dx


@pytest.mark.parametrize("shape", [(37,), (3, 11, 5), (2, 9, 3, 4)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_one_dim_and_many_dims(tut, shape, reduction):
    """Classes along dim 1 (dim 0 of a 1-D input), as PyTorch; 'none' keeps the target's shape."""
    x, target, gen = make(shape, torch.float32, seed=len(shape), ignored=0.0 if len(shape) == 1 else 0.2)
    check(tut, x, target, gen, reduction, label_smoothing=0.1)


def test_non_contiguous_logits(tut, small_chunks):
    """Transposed (columns of unit stride nowhere: one copy) and sliced (rows with a gap: no copy)."""
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(200, 6, generator=gen).to(DEVICE).requires_grad_(True)
    target = torch.randint(0, 200, (6,), generator=gen).to(DEVICE)
    x = base.t()
    assert not x.is_contiguous()
    loss = tut["cross_entropy"](x, target, reduction="sum")
    (dx,) = torch.autograd.grad(loss, base)
    loss64, dx64 = reference(x, target, torch.ones(()), reduction="sum")
    assert rel(loss, loss64) <= 1e-5 and rel(dx.t(), dx64) <= 1e-5
    wide = torch.randn(6, 260, generator=gen).to(DEVICE).requires_grad_(True)
    x = wide[:, 30:230]
    loss = tut["cross_entropy"](x, target, label_smoothing=0.2)
    (dx,) = torch.autograd.grad(loss, wide)
    loss64, dx64 = reference(x, target, torch.ones(()), label_smoothing=0.2)
    assert rel(loss, loss64) <= 1e-5 and rel(dx[:, 30:230], dx64) <= 1e-5
    assert not dx[:, :30].any() and not dx[:, 230:].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_logits_are_left_alone(tut, dtype, reduction):
    """The gradient is a tensor of its own: the forward and the backward never write into the logits, and the same
    logits give the same loss again."""
    x, target, gen = make((6, 90), dtype, seed=11)
    kept = x.detach().clone()
    dy = torch.randn(() if reduction == "mean" else (6,), generator=gen).to(DEVICE, dtype)
    loss = tut["cross_entropy"](x, target, reduction=reduction)
    assert torch.equal(x, kept), "the forward wrote into the logits"
    assert torch.equal(loss, tut["cross_entropy"](x, target, reduction=reduction))
    (dx,) = torch.autograd.grad(loss, x, dy)
    assert torch.equal(x, kept) and dx.data_ptr() != x.data_ptr(), "the backward wrote into the logits"


@pytest.mark.parametrize("scale", [1.0, 0.125, 0.0, -3.0])
def test_upstream_scalar_gradient_lazily(tut, scale):
    """The backward multiplies by the upstream gradient unless it is exactly 1 (then it skips the row)."""
    x, target, gen = make((5, 70), torch.float32, seed=5)
    (dx,) = torch.autograd.grad(tut["cross_entropy"](x, target) * scale, x)
    _, dx64 = reference(x, target, torch.tensor(scale))
    if scale == 0.0:
        assert torch.equal(dx, torch.zeros_like(dx))
    else:
        assert rel(dx, dx64) <= 1e-5


def test_scale_grad_rows(tut):
    """The backward operator scales dx in place: by a scalar, and by one value a row, some exactly 1 (those rows left
    bitwise as they were), also broadcast from a 0-d (stride 0, as .sum() hands it over)."""
    dx = torch.randn(6, 77, device=DEVICE)
    g = torch.tensor([1.0, 2.0, 1.0, -0.5, 0.0, 1.0], device=DEVICE)
    for dloss, expected in (
        (g, dx * g[:, None]),
        (torch.tensor(1.5, device=DEVICE), dx * 1.5),
        (torch.tensor(-2.0, device=DEVICE).expand(6), dx * -2.0),
    ):
        out = dx.clone()
        tut["ce_bwd_op"](out, dloss)
        assert torch.equal(out, expected), dloss


@pytest.mark.parametrize("inplace", [False], ids=["operator"])
def test_backward_twice_says_why(tut, inplace):
    """A second backward through the handed-over gradient says why it cannot (deep dive 61 runs it in place too)."""
    x, target, _ = make((3, 20), torch.float32, seed=1)
    options = {"inplace_backward": True} if inplace else {}
    loss = tut["cross_entropy"](x, target, **options)
    torch.autograd.grad(loss, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="already ran"):
        torch.autograd.grad(loss, x)
    loss = tut["cross_entropy"](x.detach().clone().requires_grad_(True), target, **options)
    loss.backward()
    with pytest.raises(RuntimeError, match="already ran"):
        loss.backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("step", [1, 2])
def test_poisoned_gradient_fully_written_and_nothing_past_the_row(gradient, small_chunks, dtype, step):
    """dx filled with NaN in storage with a padded row stride: every logit's gradient written, the padding untouched."""
    x, target, gen = make((9, 150), dtype, seed=step, ignored=0.3)
    store = torch.full((9, 160), float("nan"), device=DEVICE, dtype=dtype)
    dx = store[:, :150]
    losses, scale = gradient["cross_entropy_rows"](x.detach(), target, None, -100, True, dx, step=step)
    assert not dx.isnan().any() and not losses.isnan().any()
    assert store[:, 150:].isnan().all(), "the kernel wrote past the end of a row"
    loss64, dx64 = reference(x, target, torch.ones(()))
    assert rel(losses.sum() * scale, loss64) <= 1e-5 and rel(dx, dx64) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_step_0_kernel(forward, dtype):
    """The ladder's plain design, the whole row in registers, against float64: each row's loss, rows read at a padded
    row stride."""
    store = torch.randn(8, 340, generator=torch.Generator().manual_seed(2)).to(DEVICE, dtype)
    x, target = store[:, :333], torch.randint(0, 333, (8,), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    loss64, _ = reference(x, target, torch.ones(8), reduction="none")
    assert rel(forward["step0_loss"](x, target), loss64) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("n_cols", [1, 40, 300])
def test_the_first_pages_loss_alone(forward, small_chunks, monkeypatch, dtype, step, n_cols):
    """The first page's chunked kernel, each row's loss, against float64: one logit, one chunk, several (the last
    ragged), rows at a padded row stride; with the page's own chunks too."""
    gen = torch.Generator().manual_seed(n_cols + step)
    store = (3 * torch.randn(37, n_cols + 5, generator=gen)).to(DEVICE, dtype)
    x, target = store[:, :n_cols], torch.randint(0, n_cols, (37,), generator=gen).to(DEVICE)
    loss64, _ = reference(x, target, torch.ones(37), reduction="none")
    if n_cols == 1:  # one class: every loss exactly 0
        assert torch.equal(forward["loss_rows"](x, target, step=step), torch.zeros(37, device=DEVICE))
        return
    assert rel(forward["loss_rows"](x, target, step=step), loss64) <= TOL[dtype]
    if n_cols == 300:
        monkeypatch.setitem(forward.data, "FORWARD_CHUNK_N", 1024)
        assert rel(forward["loss_rows"](x, target, step=step), loss64) <= TOL[dtype]


def test_the_first_pages_config_is_the_drop_ins_without_the_gradient(forward, gradient, monkeypatch):
    """loss_config, the first page's launch of the loss alone, is what the second page's _config gives without the
    gradient (the drop-in's forward alone), at every width and dtype, on each stand-in figure of an SM."""
    for warps, smem in ((64, 233472), (48, 102400), (64, 167936)):
        for page, name in itertools.product((forward, gradient), ("WARPS_PER_SM", "SMEM_PER_SM")):
            monkeypatch.setitem(page.data, name, warps if name == "WARPS_PER_SM" else smem)
        for n_rows, n_cols, size, step in itertools.product((3, 8192), (1, 100, 1000, 32000, 262144), (2, 4), (1, 2)):
            meta, grid = forward["loss_config"](n_rows, n_cols, size, step)
            full, full_grid = gradient["_config"](n_rows, n_cols, size, step, grad=False)
            assert grid == full_grid and meta == {k: full[k] for k in ("CHUNK", "num_warps", "STAGES")}, (warps, n_cols)


def test_minus_infinity_logits(tut, small_chunks):
    """A masked vocabulary: a first chunk of -inf, as PyTorch (a finite loss, a zero gradient there)."""
    x = torch.randn(3, 200, device=DEVICE)
    x[:, :100] = float("-inf")
    x.requires_grad_(True)
    target = torch.tensor([150, 199, 100], device=DEVICE)
    loss = tut["cross_entropy"](x, target, reduction="none")
    (dx,) = torch.autograd.grad(loss.sum(), x)
    expected = F.cross_entropy(x, target, reduction="none")
    (dx_t,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(dx, dx_t)


def test_a_target_out_of_range_in_the_kernel_is_nan_not_a_read(gradient):
    """Past the host's check (under a CUDA graph it cannot look), a bad target makes its row NaN; the rest is right."""
    x, _, _ = make((4, 40), torch.float32, seed=4, ignored=0.0)
    target = torch.tensor([3, 40, -7, 39], device=DEVICE)
    dx = torch.empty_like(x)
    losses, _ = gradient["cross_entropy_rows"](x.detach(), target, None, -100, False, dx)
    assert losses[1:3].isnan().all() and dx[1:3].isnan().all()
    ok = torch.tensor([0, 3])
    loss64, dx64 = reference(x[ok], target[ok], torch.ones(2, device=DEVICE), reduction="none")
    assert rel(losses[ok], loss64) <= 1e-5 and rel(dx[ok], dx64) <= 1e-5


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_the_forward_alone(tut, small_chunks, dtype, option):
    """No gradient asked: 'mean' and 'sum' equal the float64 loss, in the logits' dtype, with the same bits every
    run."""
    options = dict(OPTIONS[option])
    x, target, gen = make((37, 300), dtype, seed=len(option) + 3, ignore_index=options.get("ignore_index", -100))
    if options.get("weight"):
        options["weight"] = (torch.rand(300, generator=gen) + 0.5).to(DEVICE)
    for reduction in ("mean", "sum"):
        loss = tut["cross_entropy"](x.detach(), target, reduction=reduction, **options)
        loss64, _ = reference(x, target, torch.ones((), device=DEVICE), reduction=reduction, **options)
        assert loss.shape == () and loss.dtype == dtype and rel(loss, loss64) <= TOL[dtype], (
            reduction,
            rel(loss, loss64),
        )
        assert torch.equal(loss, tut["cross_entropy"](x.detach(), target, reduction=reduction, **options))


def test_the_forward_alone_on_the_most_programs(tut, monkeypatch):
    """A GPU of 300 SMs of 64 warp slots: a 16-bit forward alone on 4800 programs, 16 an SM, each walking its rows."""
    monkeypatch.setitem(tut.data, "NUM_SMS", 300)
    monkeypatch.setitem(tut.data, "WARPS_PER_SM", 64)  # 16 programs of 2 warps an SM (a forward alone): half its slots
    x, target, gen = make((5000, 16), torch.bfloat16, seed=11)
    assert tut["_config"](5000, 16, 2, grad=False)[1] == 4800
    loss64, _ = reference(x, target, torch.ones((), device=DEVICE), reduction="sum")
    assert rel(tut["cross_entropy"](x.detach(), target, reduction="sum"), loss64) <= TOL[torch.bfloat16]


def test_empty_batch(tut):
    x = torch.randn(0, 10, device=DEVICE, requires_grad=True)
    target = torch.zeros(0, dtype=torch.long, device=DEVICE)
    assert tut["cross_entropy"](x, target).isnan().item()
    loss = tut["cross_entropy"](x, target, reduction="sum")
    assert loss.item() == 0 and torch.autograd.grad(loss, x)[0].shape == (0, 10)


def test_bad_inputs_raise(tut):
    ce = tut["cross_entropy"]
    x, t = torch.randn(4, 8, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    with pytest.raises(IndexError, match="target 8 is out of bounds for 8 classes"):
        ce(x, torch.tensor([0, 8, 2, 3], device=DEVICE))
    with pytest.raises(IndexError, match="target -1 is out of bounds"):
        ce(x, torch.tensor([0, -1, 2, 3], device=DEVICE))
    with pytest.raises(TypeError, match="probabilities"):
        ce(x, torch.softmax(x, 1))
    with pytest.raises(TypeError, match="dtype"):
        ce(torch.ones(4, 8, dtype=torch.int32, device=DEVICE), t)
    with pytest.raises(TypeError, match="dtype"):
        ce(x.double(), t)
    with pytest.raises(TypeError, match="class indices"):
        ce(x, t > 1)
    with pytest.raises(ValueError, match=r"target has shape \[3\], expected \[4\]"):
        ce(x, t[:3])
    with pytest.raises(ValueError, match="expected \\[4, 5\\]"):
        ce(torch.randn(4, 8, 5, device=DEVICE), t)
    with pytest.raises(ValueError, match="weight must be"):
        ce(x, t, weight=torch.ones(7, device=DEVICE))
    with pytest.raises(ValueError, match="must not require a gradient"):
        ce(x, t, weight=torch.ones(8, device=DEVICE, requires_grad=True))
    with pytest.raises(ValueError, match="reduction"):
        ce(x, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        ce(x, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match="no classes"):
        ce(torch.randn(4, 0, device=DEVICE), t)
    with pytest.raises(TypeError, match="torch.Tensor"):
        ce([[1.0, 2.0]], t)
    if DEVICE == "cuda":
        with pytest.raises(ValueError, match="target on cpu"):
            ce(x, t.cpu())
    else:
        with pytest.raises(ValueError, match="target on meta"):
            ce(x, t.to("meta"))
        with pytest.raises(ValueError, match="logits on meta, target on meta; the kernels run on cpu"):
            ce(x.to("meta"), t.to("meta"))


def test_launch_parameters(gradient, forward):
    """Chunks of 8192 logits, 64 bytes a thread; step 2: rows in flight under L2_SHARE of L2, at least one program
    an SM, loads pipelined (with the gradient only where one program an SM); step 1: a program per row, without cache
    hints or pipelining."""
    config, sms, budget = gradient["_config"], gradient["NUM_SMS"], gradient["L2_SHARE"] * gradient["L2_BYTES"]
    meta, grid = config(8192, 128256, 2)
    assert (meta["CHUNK"], meta["num_warps"]) == (8192, 8) and meta["KEEP"] == "evict_last"
    assert meta["STAGES"] == (1 if grid // sms > 1 else gradient["STAGES"]), (meta, grid)
    assert (
        config(8192, 32000, 2)[0]["STAGES"] == 1
        and config(8192, 32000, 2, grad=False)[0]["STAGES"] == gradient["STAGES"] > 1
    )
    assert config(8192, 32000, 2, per_sm=1)[0]["STAGES"] == gradient["STAGES"]
    # the forward alone: 16 logits a thread, chunks of 1024 on 2 warps (16-bit) or 2048 on 4 (fp32), programs for half
    # the SM's warp slots (what its registers hold at 64 a thread); as many stages as all the programs' stages fit the
    # SM's shared memory, at most STAGES (an H100's 228 KB: 3)
    for size, chunk, warps in ((2, 1024, 2), (4, 2048, 4)):
        meta, grid = config(100_000, 262144, size, grad=False)
        per_sm = gradient["WARPS_PER_SM"] // 2 // warps
        assert (meta["CHUNK"], meta["num_warps"], grid) == (chunk, warps, per_sm * sms), (size, meta, grid)
        per_program = grid // sms * chunk * size  # one stage of every program on an SM
        assert meta["STAGES"] == min(gradient["STAGES"], 1 + gradient["SMEM_PER_SM"] // per_program) > 1, (size, meta)
        assert (meta["STAGES"] - 1) * per_program <= gradient["SMEM_PER_SM"] < meta["STAGES"] * per_program or (
            meta["STAGES"] == gradient["STAGES"]
        )
    assert config(8192, 32000, 4, grad=False)[0]["CHUNK"] == 2048
    assert (config(8192, 128256, 4)[0]["CHUNK"], config(8192, 128256, 4)[0]["num_warps"]) == (8192, 16)
    for n_cols, size in ((32000, 2), (50304, 2), (128256, 2), (262144, 2), (32000, 4), (151936, 4)):
        per_sm = config(100_000, n_cols, size)[1] // sms
        assert 1 <= per_sm <= gradient["MAX_PROGRAMS_PER_SM"], (n_cols, size, per_sm)
        assert per_sm == 1 or per_sm * sms * n_cols * size <= budget, (n_cols, size, per_sm)  # the second read hits L2
        assert per_sm == gradient["MAX_PROGRAMS_PER_SM"] or (per_sm + 1) * sms * n_cols * size > budget, (n_cols, size)
    meta, grid = config(8192, 128256, 2, step=1)
    assert grid == 8192 and (meta["KEEP"], meta["DROP"], meta["STREAM"], meta["STAGES"]) == ("", "", "", 1)
    assert config(3, 1, 4)[0]["CHUNK"] == 16 and config(3, 1000, 2) == (config(3, 1000, 2)[0], 3)
    assert all(r.start == 1 for r in forward["RANGE"].values())


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
import page
out = []
for name, dtype, meta, cap in json.loads(sys.argv[2]):
    kernel = getattr(page, name)
    num_warps = meta.pop("num_warps")
    signature = {}
    for arg in kernel.arg_names:
        if arg in meta:
            signature[arg] = "constexpr"
        elif arg in ("x_ptr", "dx_ptr"):
            signature[arg] = "*" + dtype
        elif arg == "target_ptr":
            signature[arg] = "*i64"
        elif arg == "ticket_ptr":
            signature[arg] = "*i32"
        elif arg.endswith("_ptr"):
            signature[arg] = "*fp32"
        else:
            signature[arg] = "fp32" if arg in ("smoothing", "scale") else "i32"
    compiled = triton.compile(ASTSource(kernel, signature, meta), target=GPUTarget("cuda", cap, 32),
                              options=dict(num_warps=num_warps))
    out.append([name, dtype, "ld.global" in compiled.asm["ptx"], compiled.metadata.shared])
print(json.dumps(out))
"""


def compile_page(tmp_path, cases, stem="06_cross_entropy"):
    """[name, dtype, has global loads, shared memory] of each case [kernel, dtype, meta, compute capability], compiled
    by Triton for that target from the page's cells before its correctness check, in a process without the
    interpreter."""
    source = (ROOT / "tutorials" / f"{stem}.py").read_text(encoding="utf-8")
    head = source[: source.index("# %%\n# Correctness")]
    (tmp_path / "page.py").write_text(head.replace('os.environ["TRITON_INTERPRET"] = "1"', "pass"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE, str(tmp_path), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"compiling failed:\n{proc.stderr[-3000:]}"
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(compiled) == len(cases)
    return compiled


def test_kernels_compile_for_an_h100(tut, forward, gradient, tmp_path):
    """Triton's interpreter runs what a GPU compiler may refuse (types changing in loops, strings as hints): every
    kernel of the three pages, in every variant the ladders and the drop-in launch, compiled for sm_90 in a process
    without the interpreter."""
    first, cases, backward = [], [], []
    for dtype, size in (("bf16", 2), ("fp32", 4)):
        for step in (1, 2):
            meta, _ = gradient["_config"](8192, 128256, size, step)
            cases.append(["cross_entropy_kernel", dtype, dict(meta, WRITE_GRAD=True)])
            first.append(["loss_kernel", dtype, forward["loss_config"](8192, 128256, size, step)[0]])
        alone = gradient["_config"](8192, 128256, size, grad=False)[0]  # the drop-in's forward alone
        cases.append(["cross_entropy_kernel", dtype, dict(alone, WRITE_GRAD=False)])
        first.append(["ce_row_kernel", dtype, dict(BLOCK_V=32768, num_warps=32)])  # step 0 at the ladder's 32 K
        chunk = tut["_config"](8192, 128256, size)[0]
        backward.append(["scale_grad_kernel", dtype, dict(CHUNK=chunk["CHUNK"], num_warps=chunk["num_warps"])])
    compiled = compile_page(tmp_path, [case + [90] for case in first])
    compiled += compile_page(tmp_path, [case + [90] for case in cases], "06_cross_entropy_and_gradient")
    compiled += compile_page(tmp_path, [case + [90] for case in backward], "06_cross_entropy_backward")
    assert all(loads for _, _, loads, _ in compiled)


# Shared memory a block may have (with opt-in): sm_80 (A100), sm_89 (L4, RTX 4090, L40S), sm_90 (H100, H200)
SHARED_PER_BLOCK = {80: 166912, 89: 101376, 90: 232448}


def test_stages_fit_the_shared_memory_of_each_gpu(gradient, monkeypatch, tmp_path):
    """The config takes its stages from the device's shared memory a block. On each target, for fp32 and bf16, with
    and without the gradient: the shared memory the tile stages, (1 + grad) loops x (STAGES - 1) chunks x the bytes of
    a logit, plus 1 KB for the reductions, fits the target; where it fits, 3 stages (an H100's fp32
    forward+backward), else fewer (an L4's: 2). Each launch compiled by Triton for its target takes no more shared
    memory than the estimate (plus the 1 KB) nor than the target has."""
    cases, estimates = [], []
    for cap, limit in SHARED_PER_BLOCK.items():
        monkeypatch.setitem(gradient.data, "SMEM_PER_BLOCK", limit)
        for dtype, size in (("fp32", 4), ("bf16", 2)):
            for grad in (True, False):
                for stages in (None, 4):  # the config's own choice, and more asked for than may fit
                    meta, _ = gradient["_config"](8192, 128256, size, per_sm=1, grad=grad, stages=stages)
                    estimate = (1 + grad) * (meta["STAGES"] - 1) * meta["CHUNK"] * size
                    assert 1 <= meta["STAGES"] <= (stages or gradient["STAGES"]) and estimate + 1024 <= limit, (
                        cap,
                        dtype,
                        grad,
                        meta,
                    )
                    if stages is None:
                        cases.append(["cross_entropy_kernel", dtype, meta | dict(WRITE_GRAD=grad), cap])
                        estimates.append((estimate, limit))
        fp32 = gradient["_config"](8192, 128256, 4, per_sm=1)[0]["STAGES"]
        assert fp32 == (2 if cap == 89 else gradient["STAGES"]), (cap, fp32)  # 3 would ask 2 x 2 x 32 KB of an L4
    compiled = compile_page(tmp_path, cases, "06_cross_entropy_and_gradient")
    for (name, dtype, _, shared), (estimate, limit), case in zip(compiled, estimates, cases):
        assert shared <= min(estimate + 1024, limit), (case, shared, estimate, limit)


def test_tutorial_checked_and_measured(forward):
    """The first page: each step checked on every shape and dtype (step 0 where its row fits registers), the ladder
    measured, the loss alone measured against every provider."""
    errors, results, ladder = forward["errors"], forward["results"], forward["ladder"]
    assert len(errors) == len(forward["CHECK_SHAPES"]) * 3  # each shape and dtype
    assert errors[["step 1", "step 2", "torch"]].notna().all().all()
    assert errors["step 0"].notna().tolist() == [int(n) <= 2**15 for n in errors["shape"].str.split(" x ").str[1]]
    ours = results[results.provider == "ours"]
    assert len(ours) == 2 * len(forward["SWEEP_V"])
    assert (ours["GB/s"] > 0).all() and ours["% of speed of light"].notna().all()
    assert list(ladder.step) == [0, 1, 1, 2, 2] and (ladder["GB/s"] > 0).all()
    short, middle = forward["SWEEP_V"][0], forward["LADDER_V"][1]
    assert list(ladder.N) == [short] + [short, middle] * 2  # step 0 at the short V
    assert set(forward["table"].index.get_level_values("direction")) == {"forward"}


def test_gradient_page_checked_and_measured(gradient):
    """The second page: steps 1 and 2 (the loss and its gradient) and the loss alone checked on every shape and
    dtype; both steps measured in bf16 and fp32 at every V of its sweep."""
    errors, steps = gradient["errors"], gradient["steps"]
    assert len(errors) == len(gradient["CHECK_SHAPES"]) * 3
    assert errors[["step 1", "step 2", "loss alone", "torch"]].notna().all().all()
    assert len(steps) == 2 * 2 * len(gradient["SWEEP_V"]) and (steps["GB/s"] > 0).all()
    assert sorted(set(steps.step)) == [1, 2] and steps["% of light"].notna().all()


def test_drop_ins_page_checked_and_measured(tut):
    """The drop-in's page: checked on every shape and dtype, without and with label smoothing; the loss and its
    gradient measured against every provider."""
    errors, results = tut["errors"], tut["results"]
    assert len(errors) == len(tut["CHECK_SHAPES"]) * 3 * 2  # each shape and dtype without and with label smoothing
    ours = results[results.provider == "ours"]
    assert len(ours) == 2 * len(tut["SWEEP_V"])
    assert (ours["GB/s"] > 0).all() and ours["% of speed of light"].notna().all()
    assert set(tut["table"].index.get_level_values("direction")) == {"forward+backward"}


def block(stem, first, last):
    """A page's lines from the one that starts with ``first`` to the end of the one that starts with ``last``."""
    text = (ROOT / "tutorials" / f"{stem}.py").read_text(encoding="utf-8")
    start = text.index("\n" + first) + 1
    return text[start : text.index("\n", text.index("\n" + last, start) + 1)]


def test_the_later_pages_carry_the_earlier_ones_letter_for_letter(tut, forward, gradient):
    """06_cross_entropy_and_gradient runs the first page's log_sum_exp, device figures and constants; the drop-in's
    page runs those and the second page's kernel, constants, config and launcher: the same source, the same values."""

    def jit_source(page, name):  # from its def: inspect gives the decorator's line with some of them, not others
        return inspect.getsource(page[name].fn).removeprefix("@triton.jit\n")

    for name in ("add_chunk", "log_sum_exp"):
        assert jit_source(gradient, name) == jit_source(forward, name) == jit_source(tut, name), name
    assert jit_source(tut, "cross_entropy_kernel") == jit_source(gradient, "cross_entropy_kernel")
    for name in ("_config", "cross_entropy_rows"):
        assert inspect.getsource(tut[name]) == inspect.getsource(gradient[name]), name
    for name in ("NUM_SMS", "SMEM_PER_SM", "WARPS_PER_SM", "FORWARD_CHUNK_N", "STAGES"):
        assert tut[name] == gradient[name] == forward[name], name
    for name in ("L2_BYTES", "SMEM_PER_BLOCK", "CHUNK_N", "L2_SHARE", "MAX_PROGRAMS_PER_SM"):
        assert tut[name] == gradient[name], name
    first = block("06_cross_entropy", "props = torch.cuda", "STAGES = ")
    second = block("06_cross_entropy_and_gradient", "L2_BYTES = ", "MAX_PROGRAMS_PER_SM = ")
    for stem in ("06_cross_entropy_and_gradient", "06_cross_entropy_backward"):
        assert block(stem, "props = torch.cuda", "STAGES = ") == first, stem
    assert block("06_cross_entropy_backward", "L2_BYTES = ", "MAX_PROGRAMS_PER_SM = ") == second


def test_the_pages_claim_apart(tut, forward, gradient):
    """The first page claims the loss alone at every V (the op's first page starts at 1); the second and the drop-in's
    page measure forward+backward, which the site recommends deep dive 61 for: they claim nothing."""
    assert set(forward["RANGE"]) == {("forward", "bfloat16"), ("forward", "float32")}
    assert all(r.start == 1 for r in forward["RANGE"].values()) and tut["RANGE"] == {}
    assert "RANGE" not in gradient.data


READ = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
import read
signature = {"words_ptr": "*i32", "out_ptr": "*i32", "n_words": "i32", "BLOCK": "constexpr"}
compiled = triton.compile(ASTSource(read.read_kernel, signature, {"BLOCK": 8192}), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=16))
print(json.dumps(["ld.global" in compiled.asm["ptx"], "st.global" in compiled.asm["ptx"]]))
"""


def test_the_forwards_light_reads_every_word(forward, tmp_path):
    """The forward's speed of light, a read pass: each program's xor of its 32-bit words is numpy's (every word read,
    a ragged last block masked); compiled for sm_90 as the page launches it."""
    import inspect

    import numpy as np

    words = torch.randint(-(2**31), 2**31 - 1, (3 * 512 + 77,), dtype=torch.int32, device=DEVICE)
    out = torch.full((4,), 7, dtype=torch.int32, device=DEVICE)
    forward["read_kernel"][(4,)](words, out, words.numel(), BLOCK=512)
    padded = np.concatenate([words.cpu().numpy(), np.zeros(4 * 512 - words.numel(), np.int32)]).reshape(4, 512)
    assert np.array_equal(out.cpu().numpy(), np.bitwise_xor.reduce(padded, axis=1))
    (tmp_path / "read.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n" + inspect.getsource(forward["read_kernel"].fn),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", READ, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, True]


# The drop-in's PyTorch operators: sol::cross_entropy_fwd_06 (the loss and, if asked, the gradient) and
# sol::cross_entropy_bwd_06 (the gradient scaled in place)


def takes_smoothing(tut):
    """Whether the page's forward operator takes label smoothing (deep dive 61's; tutorial 06's drop-in hands
    smoothing to torch and its operator takes none)."""
    return "smoothing" in str(tut["ce_fwd_op"]._opoverload._schema)


def operator_args(tut, x2d, target, weight, ignore_index, reduction, smoothing, grad):
    """A sample's arguments as the page's forward operator takes them."""
    return (x2d, target, weight, ignore_index, reduction) + ((smoothing,) if takes_smoothing(tut) else ()) + (grad,)


def operator_samples():
    """(x2d, target, weight, ignore_index, reduction, smoothing) as the drop-in hands them over: rows at unit stride,
    contiguous or with a row stride past V, fp32 and bf16; weights with and without smoothing, none; every reduction;
    rows ignored; an ignore_index of a class; no rows."""
    gen = torch.Generator().manual_seed(0)
    base = (3 * torch.randn(6, 50, generator=gen)).to(DEVICE)
    target = torch.tensor([3, -100, 39, 0, 7, 20], device=DEVICE)
    weight = (torch.rand(40, generator=gen) + 0.5).to(DEVICE)
    return [
        (base[:, :40], target, weight, -100, "mean", 0.1),
        (base[:, :40], target, weight, -100, "sum", 0.0),
        (base[:, :40].contiguous().bfloat16(), target, None, -100, "none", 0.2),
        (base[:, :40].contiguous(), target.clamp(min=3), None, 3, "mean", 0.0),
        (base[:0, :40], target[:0], None, -100, "sum", 0.0),
    ]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no grad", "requires grad"])
def test_operators_pass_opcheck(tut, requires_grad):
    """torch.library.opcheck on each operator: its schema, the fake (shape-only) implementation against the real one,
    the autograd registration, and a trace by AOT autograd with dynamic shapes. The backward operator with the
    upstream gradients autograd hands it: a scalar, a vector, one broadcast from a 0-d (stride 0), and 1 (rows
    skipped). Where the logits require a gradient, the forward's second output is the gradient that autograd hands
    back, scaled in place by the backward: opcheck's AOT trace returns it to its caller as well, where the backward's
    write would show, so that trace runs in test_compiled_block_matches_eager instead (the drop-in keeps it)."""
    fwd, bwd = tut["ce_fwd_op"], tut["ce_bwd_op"]
    checks = ("test_schema", "test_autograd_registration", "test_faketensor") + (
        ("test_aot_dispatch_dynamic",) if not requires_grad else ()
    )
    for x2d, *rest in operator_samples():
        for grad in (True,) if requires_grad else (False, True):
            args = operator_args(tut, x2d.detach().requires_grad_(requires_grad), *rest, grad)
            torch.library.opcheck(fwd, args, test_utils=checks)
        loss, dx = fwd(*operator_args(tut, x2d, *rest, True))
        for dloss in (
            torch.tensor(0.5, device=DEVICE),
            torch.randn(len(x2d), device=DEVICE),
            torch.tensor(2.0, device=DEVICE).expand(len(x2d)),
            torch.tensor(1.0, device=DEVICE),
        ):
            torch.library.opcheck(bwd, (dx.clone(), dloss))
    x2d, target, weight, ignore_index, reduction, smoothing = operator_samples()[1]  # no smoothing: the operator's
    loss, dx = fwd(*operator_args(tut, x2d, target, weight, ignore_index, reduction, smoothing, True))
    assert torch.equal(
        fwd(*operator_args(tut, x2d, target, weight, ignore_index, reduction, smoothing, False))[0], loss
    )
    assert torch.equal(loss, tut["cross_entropy"](x2d, target, weight, ignore_index, reduction, smoothing))
    x = x2d.detach().requires_grad_(True)
    (expected,) = torch.autograd.grad(tut["cross_entropy"](x, target, weight, ignore_index, reduction, smoothing), x)
    assert torch.equal(dx, expected), "the drop-in's gradient is the forward operator's second output"


def test_forward_operator_without_the_gradient_refuses_a_backward(tut):
    """Asked for no gradient (the drop-in asks exactly when autograd wants one), the operator has none to give: a
    backward through it fails, never returns a silent zero."""
    x, target, _ = make((4, 30), torch.float32, seed=2)
    loss, dx = tut["ce_fwd_op"](*operator_args(tut, x, target, None, -100, "mean", 0.0, False))
    assert dx.shape == (0, 30)
    with pytest.raises(RuntimeError, match="invalid gradient"):
        loss.backward()


BLOCK_OPTIONS = {
    "weights": dict(weight=True),
    "weights, smoothing": dict(label_smoothing=0.1, weight=True),
    "none, in place": dict(reduction="none", inplace_backward=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(BLOCK_OPTIONS))
def test_compiled_block_matches_eager(tut, dtype, name):
    """A linear layer, the drop-in and a loss compiled in one graph (fullgraph=True: no graph break) by AOT autograd
    (aot_eager: the CPU runs it) with dynamic shapes, against the same block run eagerly: the loss and the gradients of
    the layer's input and weight; the forward alone too (no_grad). Each graph, with the gradient and without, holds
    the forward operator where it takes the options (tutorial 06 hands label smoothing to torch, and has no
    inplace_backward); inplace_backward=True takes it there (eagerly, it writes over the logits)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    x = torch.randn(12, 16, device=DEVICE, dtype=dtype)
    linear = torch.nn.Linear(16, 300, device=DEVICE, dtype=dtype)
    target = torch.randint(0, 300, (12,), device=DEVICE).masked_fill_(torch.arange(12, device=DEVICE) % 5 == 0, -100)
    options = dict(BLOCK_OPTIONS[name])
    if "inplace_backward" not in inspect.signature(tut["cross_entropy"]).parameters:
        options.pop("inplace_backward", None)
    options = options | ({"weight": torch.rand(300, device=DEVICE, dtype=dtype) + 0.5} if options.get("weight") else {})
    ce = tut["cross_entropy"]

    def block(h):
        return ce(linear(h), target, **options).sum() * 0.5

    def run(fn):
        leaf = x.detach().clone().requires_grad_(True)
        linear.zero_grad(set_to_none=True)
        loss = fn(leaf)
        loss.backward()
        with torch.no_grad():
            alone = fn(leaf)
        return loss.detach(), alone, leaf.grad, linear.weight.grad

    torch._dynamo.reset()
    backend = CompileCounterWithBackend("aot_eager")
    eager, compiled = run(block), run(torch.compile(block, fullgraph=True, dynamic=True, backend=backend))
    for what, got, want in zip(("loss", "loss alone", "input's gradient", "weight's gradient"), compiled, eager):
        torch.testing.assert_close(got, want, msg=lambda m, w=what: f"compiled block, {w}: {m}")
    graphs = [[node.target for node in g.graph.nodes if node.op == "call_function"] for g in backend.graphs]
    graphs = [ops for ops in graphs if ops]  # (a frame with nothing to compute compiles to an empty graph)
    if options.get("label_smoothing") and not takes_smoothing(tut):
        return  # torch's own cross_entropy, traced into the graph
    assert len(graphs) >= 2 and all(tut["ce_fwd_op"]._opoverload in ops for ops in graphs), graphs
