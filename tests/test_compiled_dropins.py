"""Every PyTorch drop-in inside a model compiled with ``torch.compile(fullgraph=True)``: a linear layer, the drop-in,
a loss, compiled in one graph, against the same block run eagerly, in values and in the gradients of the layer's
input and weight. Inductor compiles Triton kernels for a GPU: without one these tests are skipped (the kernels'
values are tested through the interpreter elsewhere)."""

import pytest
import torch

from conftest import DEVICE, load_tutorial

pytestmark = pytest.mark.skipif(DEVICE != "cuda", reason="torch.compile's Inductor needs a CUDA GPU for Triton kernels")

M, K, N = 256, 512, 1024
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _dropin(page, name):
    return load_tutorial(page)[name]


def _blocks():
    """name -> (page, function of (h, target, extra) giving a scalar loss through the drop-in)"""

    def softmax(h, target, extra):
        return (_dropin("01_softmax_backward", "softmax")(h, dim=-1) * extra).sum()

    def layer_norm(h, target, extra):
        w, b = extra[0], extra[1]
        return _dropin("02_layer_norm_drop_in", "layer_norm")(h, (N,), w, b).square().mean()

    def reduce_sum(h, target, extra):
        return _dropin("03_sum_of_all_elements", "reduce_sum")(h, dim=-1).float().square().mean()

    def rms_norm(h, target, extra):
        return _dropin("04_rms_norm_operator", "rms_norm")(h, (N,), extra[0], eps=1e-6).square().mean()

    def cross_entropy(h, target, extra):
        return _dropin("06_cross_entropy_backward", "cross_entropy")(h, target, label_smoothing=0.1)

    def cross_entropy_61(h, target, extra):
        return _dropin("61_cross_entropy_split_rows", "cross_entropy")(h, target)

    return {
        "softmax (01)": softmax,
        "layer_norm (02)": layer_norm,
        "reduce_sum (03)": reduce_sum,
        "rms_norm (04)": rms_norm,
        "cross_entropy (06)": cross_entropy,
        "cross_entropy (61)": cross_entropy_61,
    }


BLOCKS = _blocks()


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=str)
@pytest.mark.parametrize("name", list(BLOCKS))
def test_compiled_fullgraph_matches_eager(name, dtype):
    loss_of = BLOCKS[name]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(M, K, device=DEVICE, dtype=dtype, generator=gen)
    linear = torch.nn.Linear(K, N, device=DEVICE, dtype=dtype)
    target = torch.randint(0, N, (M,), device=DEVICE, generator=gen)
    extra = [torch.randn(N, device=DEVICE, dtype=dtype, generator=gen) for _ in range(2)]

    def block(x):
        return loss_of(linear(x), target, extra if "softmax" not in name else extra[0])

    def run(fn):
        xi = x.detach().clone().requires_grad_()
        linear.zero_grad(set_to_none=True)
        loss = fn(xi)
        loss.backward()
        return loss.detach().float(), xi.grad.float(), linear.weight.grad.float()

    torch._dynamo.reset()
    eager = run(block)
    compiled = run(torch.compile(block, fullgraph=True))
    for what, got, want in zip(("loss", "input's gradient", "weight's gradient"), compiled, eager):
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda m, w=what: f"{name}, {dtype}, {w}: {m}")


# Forward-only drop-ins (no autograd of their own): a compiled block without gradients against eager
FORWARD_ONLY = {
    "sum_dim (31), rows": ("31_reduction_rows_and_columns", "sum_dim", lambda f, h: f(h, 1)),
    "sum_dim (31), columns": ("31_reduction_rows_and_columns", "sum_dim", lambda f, h: f(h, 0)),
}


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=str)
@pytest.mark.parametrize("name", list(FORWARD_ONLY))
def test_compiled_forward_only_matches_eager(name, dtype):
    page, function, call = FORWARD_ONLY[name]
    dropin = _dropin(page, function)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(M, K, device=DEVICE, dtype=dtype, generator=gen)
    linear = torch.nn.Linear(K, N, device=DEVICE, dtype=dtype)

    def block(x):
        return call(dropin, linear(x).relu()) * 0.5

    torch._dynamo.reset()
    with torch.no_grad():
        eager, compiled = block(x), torch.compile(block, fullgraph=True)(x)
    torch.testing.assert_close(compiled.float(), eager.float(), **TOL[dtype], msg=lambda m: f"{name}, {dtype}: {m}")
