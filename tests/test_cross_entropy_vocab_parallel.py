"""Deep dive 62: cross-entropy with the vocabulary split over ranks. The page's drop-in on 1, 2 and 4 gloo ranks,
spawned by the page's own launcher (each rank imports the page's code for the ranks, written to a file), against
F.cross_entropy in float64 on the gathered logits, forward and backward, for every option; rows in blocks of a few,
so that several blocks' gathers overlap; rows all ignored; the two references; bad input that every rank refuses
alike, without leaving another rank waiting in a collective."""

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from conftest import TUTORIALS

# On a GPU machine the page's ranks take a GPU each (NCCL): the build runs the page's own check there
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="these cases run gloo ranks on CPU tensors")
STEM = "62_cross_entropy_vocab_parallel"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}  # a few roundings (the interpreter truncates fp32 -> bf16)


@pytest.fixture(scope="module")
def page():
    """The page's cells before its correctness check (which launches ranks of its own): its kernels, drop-in and
    launcher, run as a module."""
    (path,) = [p for p in TUTORIALS if p.stem == STEM]
    source = path.read_text(encoding="utf-8")
    module = types.ModuleType(f"tutorial_{STEM}_head")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(source[: source.index("# %%\n# Correctness")], str(path), "exec"), module.__dict__)
    return module.__dict__


def relative(out, ref):
    """The error of out against ref, relative to ref's norm (NaN where both are NaN in the same places)."""
    out, ref = out.double(), ref.double()
    if ref.isnan().any():
        return 0.0 if torch.equal(ref.isnan(), out.isnan()) else float("inf")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def cases(every=1):
    """(rows shape, V, dtype, weight, smoothing, reduction, ignore_index, share of rows ignored): every `every`-th
    combination of the options, then the shapes and targets that need a case of their own."""
    grid = [
        ((11,), 96, dtype, weight, smoothing, reduction, -100, 0.2)
        for dtype in (torch.float32, torch.bfloat16)
        for weight in (False, True)
        for smoothing in (0.0, 0.2)
        for reduction in ("none", "sum", "mean")
    ]
    return grid[::every] + [
        ((2, 5), 96, torch.float32, True, 0.1, "none", -100, 0.2),  # logits [2, 5, V / R], the classes last
        ((9,), 96, torch.float32, False, 0.0, "mean", 7, 0.3),  # an ignore_index that is a class
        ((6,), 96, torch.float32, True, 0.1, "mean", -100, 1.0),  # every row ignored: a NaN mean, as PyTorch's
        ((6,), 96, torch.float32, False, 0.0, "sum", -100, 1.0),
        ((0,), 96, torch.float32, False, 0.0, "sum", -100, 0.0),  # no rows
    ]


def options_task(ranks_code, rows_a_block, every):
    """On each rank: every case's errors (ours, PyTorch's in the logits' dtype) against float64 on the gathered logits,
    the loss and this rank's slice of the gradient; the gradient of the internal pipeline with each gather awaited at
    once, bit for bit the overlapped one's."""
    ranks_code.block_rows = lambda *args, **kwargs: rows_a_block  # several blocks, even of a few rows
    rank, ranks, out = torch.distributed.get_rank(), torch.distributed.get_world_size(), []
    for i, (shape, vocab, dtype, weighted, smoothing, reduction, ignore_index, ignored) in enumerate(cases(every)):
        gen, width, rows = torch.Generator().manual_seed(i), vocab // ranks, int(torch.tensor(shape).prod())
        target = torch.randint(0, vocab, (rows,), generator=gen)
        target = target.masked_fill(torch.rand(rows, generator=gen) < ignored, ignore_index).view(shape)
        weight = (torch.rand(vocab, generator=gen) + 0.5).to(dtype) if weighted else None
        dy = torch.randn(shape if reduction == "none" else (), generator=gen)
        shard = (3 * torch.randn(rows, width, generator=torch.Generator().manual_seed(100 * i + rank))).to(dtype)
        full = ranks_code.gather_logits(shard).view(*shape, vocab)
        options = dict(weight=weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
        runs = {}
        for who, fn, x in (
            ("ours", ranks_code.vocab_parallel_cross_entropy, shard.view(*shape, width)),
            ("torch", F.cross_entropy, full),
            ("ref", F.cross_entropy, full.double()),
        ):
            x = x.detach().requires_grad_(True)
            w = None if weight is None else weight.to(x.dtype)
            # F.cross_entropy takes the classes in dimension 1: [2, 5, V] goes as [2, V, 5]
            y = x if who == "ours" or len(shape) == 1 else x.movedim(-1, 1)
            loss = fn(y, target, **(options | {"weight": w}))
            grad = torch.autograd.grad(loss, x, dy.to(loss.dtype))[0] if rows else x.new_zeros(x.shape)
            runs[who] = (loss.detach(), grad if who == "ours" else grad[..., rank * width : (rank + 1) * width])
        case = f"{list(shape)} V={vocab} {str(dtype)[6:]} weight={weighted} eps={smoothing} {reduction}"
        answer = {"case": f"{case} ignore={ignore_index}", "dtype": str(dtype)[6:]}
        for who in ("ours", "torch"):
            answer |= {f"{who} {q}": relative(runs[who][j], runs["ref"][j]) for j, q in enumerate(("loss", "grad"))}
        out.append(answer)
    x = torch.randn(13, 40, generator=torch.Generator().manual_seed(rank))
    target = torch.randint(0, 40 * ranks, (13,), generator=torch.Generator().manual_seed(0))
    grads = []
    for overlap in (True, False):
        dx = torch.empty_like(x)
        ranks_code.shard_losses(x, target, None, -100, True, 0.0, None, dx, overlap=overlap)
        grads.append(dx)
    out.append({"case": "awaited at once", "same bits": torch.equal(grads[0], grads[1])})
    return out


@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_option_against_float64(page, world):
    """Every combination of the options on 2 ranks; on 1 and 4, every fifth (4 ranks share 2 cores)."""
    answers = page["launch"](world, options_task, 3, 1 if world == 2 else 5)
    for rank, answer in enumerate(answers):
        *errors, awaited = answer
        assert awaited["same bits"], f"rank {rank}: the gradient differs when each gather is awaited at once"
        for e in errors:
            tol = TOL[getattr(torch, e["dtype"])]
            for q in ("loss", "grad"):
                assert e[f"ours {q}"] <= max(tol, 2 * e[f"torch {q}"]), (
                    f"{world} ranks, rank {rank}, {e['case']}: {q} error {e[f'ours {q}']:.2e}, PyTorch's in the same "
                    f"dtype {e[f'torch {q}']:.2e}, expected at most {max(tol, 2 * e[f'torch {q}']):.2e}"
                )


def refusals_task(ranks_code):
    """On each rank, bad calls one after another: (the exception's type, its message) of each; then a good call, which
    must still work (no collective left half done); the references against float64."""
    rank, ranks = torch.distributed.get_rank(), torch.distributed.get_world_size()
    ce = ranks_code.vocab_parallel_cross_entropy
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(rank))
    target = torch.randint(0, 8 * ranks, (5,), generator=torch.Generator().manual_seed(0))  # the same on every rank
    calls = {
        "another target on each rank": lambda: ce(x, (target + rank) % (8 * ranks)),
        "a shard of another width": lambda: ce(torch.randn(5, 8 + rank), target),
        "other rows": lambda: ce(torch.randn(5 + rank, 8), torch.zeros(5 + rank, dtype=torch.int64)),
        "a target out of range": lambda: ce(x, target.clone().fill_(8 * ranks)),
        "a negative target": lambda: ce(x, target.clone().fill_(-3)),
        "a weight of another length": lambda: ce(x, target, weight=torch.ones(8 * ranks + 1)),
        "one rank's integer logits": lambda: ce(x.long() if rank == ranks - 1 else x, target),
        "a target of floats": lambda: ce(x, target.float()),
        "a bad reduction": lambda: ce(x, target, reduction="average"),
        "a smoothing past 1": lambda: ce(x, target, label_smoothing=1.5),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = ["none", ""]
        except Exception as err:
            out[name] = [type(err).__name__, str(err)]
    xg = x.clone().requires_grad_(True)
    loss = ce(xg, target)
    loss.backward(retain_graph=True)
    try:
        loss.backward()
        out["a second backward"] = ["none", ""]
    except RuntimeError as err:
        out["a second backward"] = ["RuntimeError", str(err)]
    full = ranks_code.gather_logits(x).double().requires_grad_(True)
    ref = F.cross_entropy(full, target)
    ref_grad = torch.autograd.grad(ref, full)[0][:, rank * 8 : (rank + 1) * 8]
    ref = ref.detach()
    out["good call after"] = [relative(loss.detach(), ref), relative(xg.grad, ref_grad)]
    xm = x.clone().requires_grad_(True)
    mega = ranks_code.MegatronStyle.apply(xm, target, None)
    mega.backward()
    gathered_loss, gathered_grad = ranks_code.gathered_cross_entropy(x, target)
    out["Megatron-style"] = [relative(mega.detach(), ref), relative(xm.grad, ref_grad)]
    out["gather + F.cross_entropy"] = [relative(gathered_loss.detach(), ref), relative(gathered_grad, ref_grad)]
    return out


def test_bad_input_is_refused_by_every_rank_and_the_references_are_right(page):
    answers = page["launch"](2, refusals_task)
    expected = {
        "a shard of another width": ("ValueError", "disagree"),
        "another target on each rank": ("ValueError", "disagree"),
        "other rows": ("ValueError", "disagree"),
        "a target out of range": ("IndexError", "out of bounds for 16 classes"),
        "a negative target": ("IndexError", "target -3"),
        "a weight of another length": ("ValueError", "expected [16]"),
        "a target of floats": ("ValueError", "class indices"),
        "a bad reduction": ("ValueError", "reduction"),
        "a smoothing past 1": ("ValueError", "label_smoothing"),
        "a second backward": ("RuntimeError", "already ran"),
    }
    for rank, answer in enumerate(answers):
        for name, (kind, words) in expected.items():
            assert answer[name][0] == kind and words in answer[name][1], f"rank {rank}, {name}: got {answer[name]}"
        for name in ("good call after", "Megatron-style", "gather + F.cross_entropy"):
            assert max(answer[name]) <= 1e-6, f"rank {rank}, {name}: errors (loss, grad) {answer[name]}"
    alone = [answer["one rank's integer logits"] for answer in answers]  # rank 1's logits are int64
    assert alone[1][0] == "ValueError" and "dtype" in alone[1][1], alone[1]
    assert alone[0][0] == "ValueError" and "rank 1 refused" in alone[0][1], alone[0]


@pytest.mark.parametrize("sms, l2_bytes", [(132, 60 * 2**20), (108, 40 * 2**20), (128, 72 * 2**20), (4, 2**14)])
def test_blocks_of_rows(page, monkeypatch, sms, l2_bytes):
    """A block is a multiple of the SMs, never smaller than the block that stays in L2 (two of them in 70% of L2), and
    the rows go in at most four blocks, several wherever a quarter of the rows is larger than that."""
    monkeypatch.setitem(page, "device_facts", lambda device: (sms, l2_bytes, 232448))
    block_rows = page["block_rows"]
    for n_rows, n_cols, size in [(16384, 128256, 2), (8192, 262144, 2), (37, 300, 4), (5, 300, 4), (40000, 32000, 4)]:
        in_l2, rows = block_rows(n_rows, n_cols, size, "cpu", fit_l2=True), block_rows(n_rows, n_cols, size, "cpu")
        assert in_l2 % sms == 0 and rows % sms == 0 and rows >= in_l2
        assert in_l2 == sms or 2 * in_l2 * n_cols * size <= 0.7 * l2_bytes
        assert -(-n_rows // rows) <= 4 and (rows == in_l2 or -(-n_rows // rows) >= 3)
