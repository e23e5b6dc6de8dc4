"""Every PyTorch drop-in compiled with ``torch.compile(fullgraph=True, dynamic=True)``: its sizes symbolic, as a
model's batch and sequence dims become after a recompile. One graph serves three batch sizes, and its values and
gradients match torch's (Inductor on a GPU; without one, the aot_eager backend runs the kernels through Triton's
interpreter)."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, load_tutorial

N = 48  # columns: not a power of two
BACKEND = "inductor" if DEVICE == "cuda" else "aot_eager"


def _cases():
    """name -> (page, the drop-in's call, torch's call), each a function of (page, x, w, target)"""
    return {
        "softmax (01)": (
            "01_softmax_backward",
            lambda p, x, w, t: p["softmax"](x, dim=-1),
            lambda x, w, t: x.softmax(-1),
        ),
        "layer_norm (02)": (
            "02_layer_norm_drop_in",
            lambda p, x, w, t: p["layer_norm"](x, x.shape[-1:], w, w),
            lambda x, w, t: F.layer_norm(x, x.shape[-1:], w, w),
        ),
        "reduce_sum (03)": (
            "03_sum_of_all_elements",
            lambda p, x, w, t: p["reduce_sum"](x, dim=-1),
            lambda x, w, t: x.sum(-1),
        ),
        "rms_norm (04)": (
            "04_rms_norm_operator",
            lambda p, x, w, t: p["rms_norm"](x, (N,), w, eps=1e-6),
            lambda x, w, t: F.rms_norm(x, (N,), w, eps=1e-6),
        ),
        "cross_entropy (06)": (
            "06_cross_entropy_backward",
            lambda p, x, w, t: p["cross_entropy"](x, t, label_smoothing=0.1),
            lambda x, w, t: F.cross_entropy(x, t, label_smoothing=0.1),
        ),
        "cross_entropy (61)": (
            "61_cross_entropy_split_rows",
            lambda p, x, w, t: p["cross_entropy"](x, t),
            lambda x, w, t: F.cross_entropy(x, t),
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_a_drop_in_compiles_with_symbolic_sizes(name):
    stem, ours, theirs = CASES[name]
    page = load_tutorial(stem)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w, t: ours(page, x, w, t), fullgraph=True, dynamic=True, backend=BACKEND)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    for m in (5, 12, 33):
        x, w = torch.randn(m, N, device=DEVICE, generator=gen), torch.randn(N, device=DEVICE, generator=gen) + 1
        t = torch.randint(0, N, (m,), device=DEVICE, generator=gen)
        got, want = [], []
        for fn, out in ((compiled, got), (theirs, want)):
            xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
            y = fn(xi, wi, t)
            out += [y.detach(), *torch.autograd.grad(y.square().sum(), (xi, wi), allow_unused=True)]
        for what, a, b in zip(("value", "input's gradient", "weight's gradient"), got, want):
            if b is not None:
                torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda s, w=what: f"{name} m={m} {w}: {s}")
