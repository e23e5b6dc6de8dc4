"""Deep dive 61: cross-entropy with each row split across programs. The split kernel against float64 with one slice
and, through flag words written beforehand, with several (the interpreter runs one program at a time, so a slice
cannot wait for another there); every gradient written and nothing past the row; the fallbacks; the core kernel (its
options inside) is tutorial 06's and the drop-in it carries 06_cross_entropy_backward's (its operators named for this
page, checked by opcheck and compiled in a block as that page's are); its kernels compile for an H100 and an L4."""

import inspect
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import test_cross_entropy as dropin
from conftest import DEVICE, ROOT, load_tutorial

TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}  # a few roundings (the interpreter truncates fp32 -> bf16)


@pytest.fixture(scope="module")
def page():
    return load_tutorial("61_cross_entropy_split_rows")


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def make(shape, dtype, seed, ignored=0.2):
    gen = torch.Generator().manual_seed(seed)
    x = (3 * torch.randn(shape, generator=gen)).to(DEVICE, dtype)
    target = torch.randint(0, shape[1], (shape[0],), generator=gen)
    return x, target.masked_fill(torch.rand(shape[0], generator=gen) < ignored, -100).to(DEVICE)


def reference(x, target, weight=None, reduction="mean"):
    x64 = x.double().requires_grad_(True)
    loss = F.cross_entropy(x64, target, weight=None if weight is None else weight.double(), reduction=reduction)
    return loss.detach(), torch.autograd.grad(loss, x64)[0]


def words(x, slices, block):
    """The flag words the kernel's slices publish, computed here: (max, sum of exp(x - max)) of each slice of each
    row, the max's fp32 bits above, the sum's below; a slice past the row's end is all -inf (max -inf, sum 0)."""
    rows, n_cols = x.shape
    padded = torch.full((rows, slices * block), float("-inf"), dtype=torch.float32, device=x.device)
    padded[:, :n_cols] = x.float()
    parts = padded.view(rows, slices, block)
    m = parts.max(dim=2).values
    s = torch.exp(parts - torch.where(m == float("-inf"), 0.0, m)[..., None]).sum(dim=2)
    high = m.view(torch.int32).to(torch.int64) << 32
    return (high | (s.view(torch.int32).to(torch.int64) & 0xFFFFFFFF)).reshape(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("mean", [True, False], ids=["mean", "sum"])
def test_one_slice_against_float64(page, dtype, weighted, mean):
    x, target = make((9, 700), dtype, seed=3)
    weight = torch.rand(700, device=DEVICE) + 0.5 if weighted else None
    dx = torch.full_like(x, float("nan"))
    losses, scale = page["ce_split_rows"](x, target, weight, -100, mean, dx, slices=1)
    loss64, dx64 = reference(x, target, weight, "mean" if mean else "sum")
    assert rel(losses.sum() * scale, loss64) <= TOL[dtype] and rel(dx, dx64) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, slices", [((6, 1000), 2), ((5, 777), 4), ((3, 300), 8), ((4, 1000), 3), ((5, 777), 5)])
def test_several_slices_merge_their_words(page, dtype, shape, slices):
    """Every slice's part of the gradient and the loss, from all the slices' words (the others' written beforehand,
    each slice's own then written by the kernel): the merge of the slices' maxima and sums against float64; the last
    slice ragged; every gradient written, and nothing past the end of a row (a padded row stride)."""
    x, target = make(shape, dtype, seed=slices)
    block = 1 << (-(-shape[1] // slices) - 1).bit_length()  # next power of 2 of the columns a slice
    store = torch.full((shape[0], shape[1] + 9), float("nan"), device=DEVICE, dtype=dtype)
    dx = store[:, : shape[1]]
    losses, scale = page["ce_split_rows"](x, target, None, -100, True, dx, slices=slices, flags=words(x, slices, block))
    loss64, dx64 = reference(x, target)
    assert not dx.isnan().any() and store[:, shape[1] :].isnan().all(), "a gradient not written, or one past the row"
    assert rel(losses.sum() * scale, loss64) <= TOL[dtype] and rel(dx, dx64) <= TOL[dtype]


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
def test_the_forward_alone_takes_the_core_kernel(page, weighted, monkeypatch):
    """Without the gradient (dx None) the split would only make slices wait: the core kernel runs, even where the split
    is forced, and its losses are right; bad targets still give NaN."""
    x, target = make((6, 1000), torch.float32, seed=7)
    target[0] = 1004  # out of range
    weight = torch.rand(1000, device=DEVICE) + 0.5 if weighted else None
    monkeypatch.setitem(page.data, "ce_split_kernel", None)  # a launch of the split would fail
    alone, scale = page["ce_split_rows"](x, target, weight, -100, True, None, slices=2)
    assert alone[0].isnan() and not alone[1:].isnan().any()
    target[0] = -100
    loss64, _ = reference(x, target, weight)
    alone, scale = page["ce_split_rows"](x, target, weight, -100, True, None, slices=2)
    assert rel(alone.sum() * scale, loss64) <= TOL[torch.float32]


def test_every_row_ignored_and_a_bad_target(page):
    x, target = make((4, 500), torch.float32, seed=1, ignored=1.0)
    dx = torch.empty_like(x)
    losses, scale = page["ce_split_rows"](x, target, None, -100, True, dx, slices=1)
    assert (losses == 0).all() and (dx == 0).all() and scale.isinf()  # a 'mean' of nothing: NaN, as PyTorch's
    target = torch.tensor([0, 500, -3, 7], device=DEVICE)  # out of range, as under a CUDA graph (no host check)
    losses, _ = page["ce_split_rows"](x, target, None, -100, False, dx, slices=1)
    assert losses[[1, 2]].isnan().all() and dx[[1, 2]].isnan().all() and not losses[[0, 3]].isnan().any()


def test_short_rows_empty_batches_and_groups_that_cannot_fit_take_the_core_kernel(page, monkeypatch):
    x, target = make((7, 300), torch.float32, seed=4)
    loss64, dx64 = reference(x, target)
    dx = torch.empty_like(x)
    losses, scale = page["ce_split_rows"](x, target, None, -100, True, dx)  # 300 < MIN_N: the core kernel
    assert rel(losses.sum() * scale, loss64) <= 1e-5 and rel(dx, dx64) <= 1e-5
    empty = torch.empty((0, 300), device=DEVICE)
    assert page["ce_split_rows"](empty, target[:0], None, -100, False, empty, slices=2)[0].numel() == 0
    monkeypatch.setitem(page.data, "programs_per_sm", lambda kernel, args, meta: 0)  # no group fits at once
    dx.fill_(float("nan"))
    losses, scale = page["ce_split_rows"](x, target, None, -100, True, dx, slices=1)
    assert rel(losses.sum() * scale, loss64) <= 1e-5 and rel(dx, dx64) <= 1e-5


def test_split_config_and_range(page):
    """Rows are split from 32,000 logits (the shortest vocabulary measured), where the front page recommends this
    kernel for forward+backward; the core pages claim the forward only, so no two pages claim one point."""
    core, drop_in = load_tutorial("06_cross_entropy"), load_tutorial("06_cross_entropy_backward")
    for size, dtype in ((2, "bfloat16"), (4, "float32")):
        cfg = page["_split_config"](size)
        assert page["RANGE"][("forward+backward", dtype)].start == cfg["MIN_N"] == 32000
        assert ("forward+backward", dtype) not in core["RANGE"] and ("forward", dtype) not in page["RANGE"]
        assert ("forward+backward", dtype) not in drop_in["RANGE"]
        assert cfg["SLICE_N"] * size // (32 * cfg["num_warps"]) <= 128, "more than 128 bytes of a row a thread"


def test_carried_core_kernel_is_the_core_pages(page):
    """The deep dive is measured against tutorial 06's kernel and launch (06_cross_entropy_and_gradient's; here with
    its options inside: weights, smoothing, the forward alone reduced in one launch): the same constants, the same
    launch for every option the core kernel takes, the same losses and gradient bit for bit."""
    core = load_tutorial("06_cross_entropy_and_gradient")
    names = ("CHUNK_N", "FORWARD_CHUNK_N", "STAGES", "L2_SHARE", "MAX_PROGRAMS_PER_SM", "SMEM_PER_BLOCK", "SMEM_PER_SM")
    for name in (*names, "WARPS_PER_SM"):
        assert page[name] == core[name], name
    for n_rows, n_cols, size, step, grad in itertools.product(
        (3, 8192), (1, 1000, 32000, 262144), (2, 4), (1, 2), (0, 1)
    ):
        options = dict(step=step, grad=bool(grad))
        assert page["_config"](n_rows, n_cols, size, **options) == core["_config"](n_rows, n_cols, size, **options)
    x, target = make((5, 3000), torch.bfloat16, seed=5)
    dx_page, dx_core = torch.empty_like(x), torch.empty_like(x)
    losses, scale = page["core_rows"](x, target, None, -100, True, dx_page)
    core_losses, core_scale = core["cross_entropy_rows"](x, target, None, -100, True, dx_core)
    assert torch.equal(losses, core_losses) and torch.equal(dx_page, dx_core) and torch.equal(scale, core_scale)


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
import page
out = []
for dtype, meta, cap in json.loads(sys.argv[2]):
    kernel, num_warps = page.constants_kernel if dtype == "constants" else page.ce_split_kernel, meta.pop("num_warps")
    signature = {a: "constexpr" if a in meta else ("*" + dtype if a in ("x_ptr", "dx_ptr")
                                                   else "*i64" if a in ("target_ptr", "flags_ptr")
                                                   else "*fp32" if a.endswith("_ptr") else "i32")
                 for a in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature, meta), target=GPUTarget("cuda", cap, 32),
                              options=dict(num_warps=num_warps))
    ptx = compiled.asm["ptx"]
    stores = "st.global" in ptx if dtype == "constants" else "atom.global" in ptx and "ld.volatile.global" in ptx
    out.append([stores, compiled.metadata.shared])
print(json.dumps(out))
"""


def test_split_kernel_compiles_for_an_h100_and_an_l4(page, tmp_path):
    """The kernel the GPU runs (with the flags' atomic exchange and volatile loads in its PTX), compiled for sm_90 and
    sm_89 in a process without the interpreter, as the launcher configures it for 128 K to 256 K logits: it stages
    nothing in shared memory, which holds only its reductions' scratch (the core kernel it carries takes its stages
    from the device: tests/test_cross_entropy.py)."""
    source = (ROOT / "tutorials" / "deep_dives" / "61_cross_entropy_split_rows.py").read_text(encoding="utf-8")
    head = source[: source.index("# %%\n# Correctness")]
    (tmp_path / "page.py").write_text(head.replace('os.environ["TRITON_INTERPRET"] = "1"', "pass"), encoding="utf-8")
    cases = []
    for dtype, size, n_cols in (("bf16", 2, 262144), ("bf16", 2, 151936), ("fp32", 4, 131072)):
        cfg = page["_split_config"](size)
        slices = -(-n_cols // cfg["SLICE_N"])  # 32, 19 (a group of slots past its slices), 32
        block = 1 << (-(-n_cols // slices) - 1).bit_length()
        for weighted in (False, True):
            cases.append(
                [
                    dtype,
                    dict(
                        SLICES=slices,
                        SLOTS=1 << (slices - 1).bit_length(),
                        BLOCK_N=block,
                        num_warps=cfg["num_warps"],
                        HAS_WEIGHT=weighted,
                    ),
                ]
            )
    cases += [
        ["constants", dict(MEAN=mean, HAS_WEIGHT=weighted, BLOCK=8192, num_warps=8)]
        for mean in (True, False)
        for weighted in (True, False)
    ]  # the launch before the kernels
    cases = [case + [cap] for cap in (90, 89) for case in cases]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE, str(tmp_path), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"compiling for sm_90 and sm_89 failed:\n{proc.stderr[-3000:]}"
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(compiled) == len(cases) and all(flags for flags, _ in compiled), compiled
    # no chunk staged: at most the 1 KB the core kernel's config leaves for reductions, far under any target's limit
    assert all(shared <= min(1024, dropin.SHARED_PER_BLOCK[cap]) for (_, shared), (*_, cap) in zip(compiled, cases))


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("mean", [True, False], ids=["mean", "sum"])
def test_constants_in_one_launch(page, weighted, mean):
    """The launch before the kernels: the mean's factor over more rows, and W over more classes, than one block holds;
    out-of-range targets counted as the kernels clamp them."""
    gen = torch.Generator().manual_seed(3)
    n_rows, n_cols = 17000, 8200
    target = torch.randint(0, n_cols, (n_rows,), generator=gen).masked_fill(
        torch.rand(n_rows, generator=gen) < 0.3, -100
    )
    target[:3] = torch.tensor([n_cols, -5, n_cols - 1])
    weight = (torch.rand(n_cols, generator=gen) + 0.5) if weighted else None
    scale, consts = page["loss_constants"](
        target.to(DEVICE), None if weight is None else weight.to(DEVICE), -100, mean, n_cols
    )
    w = torch.ones(n_cols, dtype=torch.float64) if weight is None else weight.double()
    counted = torch.where(target != -100, w[target.clamp(0, n_cols - 1)], 0.0).sum()
    assert scale.item() == pytest.approx((1 / counted).item() if mean else 1.0, rel=1e-6)
    if weighted:
        assert consts[1].item() == pytest.approx(w.sum().item(), rel=1e-6)


def test_constants_set_every_flag_word(page):
    """The same launch sets every flag word to all ones, over several programs, and nothing past them."""
    buffer = torch.zeros(2 * 8192 + 5 + 7, dtype=torch.int64, device=DEVICE)
    page["loss_constants"](torch.zeros(4, dtype=torch.int64, device=DEVICE), None, -100, True, 10, buffer[:-7])
    assert (buffer[:-7] == -1).all() and (buffer[-7:] == 0).all()


def test_page_checked_and_measured(page):
    errors, results = page["errors"], page["results"]
    assert len(errors) == len(page["CHECK_SHAPES"]) * 4
    split, ours = results[results.provider == "split"], results[results.provider == "ours"]
    assert len(split) == 2 * len(page["SWEEP_V"]) and (split["GB/s"] > 0).all()  # 2 dtypes, with the gradient only
    assert set(split.direction) == {"forward+backward"} and set(ours.direction) == {"forward", "forward+backward"}
    assert len(ours) == 2 * 2 * len(page["SWEEP_V"]) and (ours["GB/s"] > 0).all()
    assert set(results.provider) >= {"core", "split", "ours", "torch"}
    table = page["table"]  # ours is the drop-in; the split against the core where it runs
    assert (table["ours, % of light"] == table["ours"] / table["speed of light"] * 100).all()
    assert (
        table.loc["forward", "split / core"].isna().all()
        and table.loc["forward+backward", "split / core"].notna().all()
    )


# The page's drop-in: the core page's, carried, around this page's launcher. With the split forced (every row, one
# slice in the interpreter), the core page's own checks of the drop-in, run against this page.


@pytest.fixture
def split_everywhere(page, monkeypatch):
    """Rows of any length through the split kernel; returns the smoothing of each call that took the core kernel."""
    monkeypatch.setitem(page.data, "_split_config", lambda size: dict(MIN_N=1, SLICE_N=8192, num_warps=4))
    core, calls = page["core_rows"], []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("smoothing", args[6] if len(args) > 6 else 0.0))
        return core(*args, **kwargs)

    monkeypatch.setitem(page.data, "core_rows", spy)
    return calls


def test_carried_drop_in_is_the_core_pages(page):
    """Letter for letter the drop-in page's checks, backward operator (named for this page: sol::cross_entropy_bwd_61)
    and lazy backward kernel, and the first core page's speeds of light; the forward operator has the core's name, and
    takes label smoothing and inplace_backward=True, which the core page hands to torch or leaves out."""
    core, first = load_tutorial("06_cross_entropy_backward"), load_tutorial("06_cross_entropy")
    assert inspect.getsource(page["scale_grad_kernel"].fn) == inspect.getsource(core["scale_grad_kernel"].fn)
    assert inspect.getsource(page["read_kernel"].fn) == inspect.getsource(first["read_kernel"].fn)
    assert inspect.getsource(page["light_gbs"]) == inspect.getsource(first["light_gbs"])
    for name in ("_need", "_check"):
        assert inspect.getsource(page[name]) == inspect.getsource(core[name]), name
    for op in ("ce_fwd_op", "ce_bwd_op"):
        assert page[op]._qualname == core[op]._qualname.replace("_06", "_61"), "the operators' names are the page's"
    for part in ("_init_fn", "_abstract_fn"):
        if getattr(core["ce_bwd_op"], part) is not None:
            assert inspect.getsource(getattr(page["ce_bwd_op"], part)).replace("_61", "_06") == inspect.getsource(
                getattr(core["ce_bwd_op"], part)
            ), part
    assert page["InPlaceGradient"].backward is page["_backward"]
    assert page["SUPPORTED_DTYPES"] == core["SUPPORTED_DTYPES"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("option", list(dropin.OPTIONS))
def test_drop_in_against_float64(page, split_everywhere, dtype, reduction, option):
    """Ragged rows (V = 300), some ignored, a random upstream gradient; the split kernel unless label smoothing."""
    options = dict(dropin.OPTIONS[option])
    x, target, gen = dropin.make(
        (7, 300), dtype, seed=len(option) + 10 * reduction.count("m"), ignore_index=options.get("ignore_index", -100)
    )
    if options.get("weight"):
        options["weight"] = (torch.rand(300, generator=gen) + 0.5).to(DEVICE)
    dropin.check(page, x, target, gen, reduction, **options)
    assert all(s > 0 for s in split_everywhere), "a call without label smoothing took the core kernel"
    assert len(split_everywhere) == int(options.get("label_smoothing", 0) > 0)


@pytest.mark.parametrize("shape", [(37,), (3, 11, 5), (4, 1), (2, 9, 3, 4)], ids=str)
def test_drop_in_one_dim_many_dims_and_one_class(page, split_everywhere, shape):
    x, target, gen = dropin.make(shape, torch.float32, seed=len(shape), ignored=0.0 if len(shape) == 1 else 0.2)
    if shape[-1] == 1 and len(shape) == 2:  # V = 1: loss and gradient exactly 0
        loss = page["cross_entropy"](x, target)
        assert loss.item() == 0 and not torch.autograd.grad(loss, x)[0].any()
        return
    dropin.check(page, x, target, gen, "none")
    assert not split_everywhere


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_drop_in_in_place_equals_the_default_which_leaves_the_logits_alone(page, split_everywhere, reduction):
    x, target, gen = dropin.make((6, 900), torch.bfloat16, seed=11)
    kept = x.detach().clone()
    dy = torch.randn(() if reduction == "mean" else (6,), generator=gen).to(DEVICE, x.dtype)
    loss = page["cross_entropy"](x, target, reduction=reduction)
    assert torch.equal(loss, page["cross_entropy"](x, target, reduction=reduction)), "the logits changed"
    (dx,) = torch.autograd.grad(loss, x, dy)
    assert torch.equal(x, kept), "the default wrote into the logits"
    x2 = kept.clone().requires_grad_(True)
    loss2 = page["cross_entropy"](x2, target, reduction=reduction, inplace_backward=True)
    (dx2,) = torch.autograd.grad(loss2, x2, dy)
    assert torch.equal(loss2, loss) and torch.equal(dx2, dx) and dx2.data_ptr() == x2.data_ptr()
    assert not split_everywhere


def test_drop_in_every_row_ignored_bad_input_and_a_second_backward(page, split_everywhere):
    """The core page's own tests of these, run against this page's drop-in (through the split where the row allows)."""
    for reduction in ("mean", "sum", "none"):
        dropin.test_every_row_ignored(page, reduction)
    dropin.test_bad_inputs_raise(page)
    for inplace in (False, True):
        dropin.test_backward_twice_says_why(page, inplace)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no grad", "requires grad"])
def test_operators_pass_opcheck(page, split_everywhere, requires_grad):
    """The core page's torch.library.opcheck of the drop-in's operators, run on this page's (the rows of its samples
    through the split kernel where they carry a gradient and no smoothing)."""
    dropin.test_operators_pass_opcheck(page, requires_grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(dropin.BLOCK_OPTIONS))
def test_compiled_block_matches_eager(page, split_everywhere, dtype, name):
    """The core page's block (a linear layer, the drop-in, a loss) compiled with fullgraph=True against eager, on this
    page's drop-in: its graph holds sol::cross_entropy_fwd_61, the split kernel under it where no smoothing."""
    dropin.test_compiled_block_matches_eager(page, dtype, name)
