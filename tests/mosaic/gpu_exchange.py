"""Deep dive 52's backward with a cluster of two programs a row that swap their sums through SMEM, run on a GPU
(Mosaic GPU's interpreter has no cluster refs): against float64, the same bits twice, every row count from one row to
more rows than pairs, rows whose half is not a whole number of rings, and through the drop-in's gradient. Not
collected by ``tests/mosaic`` (CPU); run on a GPU by
``tests/test_rms_norm_mosaic_gpu.py::test_the_exchange_on_a_gpu``."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

if jax.default_backend() != "gpu":
    pytest.skip("needs a GPU: the exchange's cluster refs do not run in the interpreter", allow_module_level=True)

from conftest import data, float64_vjp, rel  # noqa: E402


@pytest.fixture(scope="module")
def page(page52):
    assert page52.MOSAIC_INTERPRET is None, "these tests must run the kernels on the GPU"
    return page52


def launch(page, n_rows, n_cols, dtype):
    programs, parts, chunk, slots, lag = page._config(n_rows, n_cols, jnp.dtype(dtype).itemsize)
    assert (parts, lag) == (2, 0), "the config gives these rows the exchange"
    return dict(eps=1e-6, programs=programs, wgs=page.WARPGROUPS, chunk=chunk, slots=slots, lag=lag, parts=parts)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "n_rows, n_cols", [(1, 32768), (7, 32768), (66, 32768), (133, 32768), (300, 32768), (201, 24576)]
)
def test_the_exchange_against_float64_and_repeatable(page, dtype, n_rows, n_cols):
    """One row, fewer rows than pairs, one row a pair, more rows than pairs (each pair several rows, some one more than
    others), and 24 K (a warpgroup's 3 chunks a row in a ring of 4 or 8 slots); every element of dx against float64;
    dx and dw the same bits on a second run."""
    x, w, dy = data((n_rows, n_cols), dtype, seed=n_rows)
    kwargs = launch(page, n_rows, n_cols, dtype)
    dx, dw = page.rms_norm_bwd(x, w, dy, **kwargs)
    _, dx_ref, dw_ref = float64_vjp(x, w, dy)
    assert bool(jnp.isfinite(dx).all()) and rel(dx, dx_ref) <= (1e-6 if dtype == jnp.float32 else 4e-3)
    assert rel(dw, dw_ref) <= 1e-6
    dx2, dw2 = page.rms_norm_bwd(x, w, dy, **kwargs)
    assert bool((dx == dx2).all()) and bool((dw == dw2).all())


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
def test_the_drop_in_swaps_sums_at_32k(page, dtype):
    x, w, dy = data((3, 100, 32768), dtype, seed=3)
    launch(page, 300, 32768, dtype)
    dx, dw = jax.vjp(page.rms_norm, x, w)[1](dy)
    _, dx_ref, dw_ref = float64_vjp(x.reshape(-1, 32768), w, dy.reshape(-1, 32768))
    assert rel(dx.reshape(-1, 32768), dx_ref) <= (1e-6 if dtype == jnp.float32 else 4e-3)
    assert rel(dw, dw_ref) <= (1e-6 if dtype == jnp.float32 else 8e-3)
