"""Deep dive 51's backward with two programs a row swapping sums through GMEM semaphores, run on a GPU (Mosaic GPU's
interpreter has no GMEM semaphores): against float64, the same bits twice, every row count from one row to more
rows than pairs, and through the drop-in's gradient. Not collected by ``tests/mosaic`` (CPU); run on a GPU by
``tests/test_rms_norm_mosaic_gpu.py::test_the_exchange_on_a_gpu``."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

if jax.default_backend() != "gpu":
    pytest.skip("needs a GPU: the exchange's semaphores do not run in the interpreter", allow_module_level=True)

from conftest import data, float64_vjp, rel  # noqa: E402


@pytest.fixture(scope="module")
def page(page51):
    assert page51.MOSAIC_INTERPRET is None, "these tests must run the kernels on the GPU"
    return page51


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n_rows", [1, 7, 66, 133, 300])
def test_the_exchange_against_float64_and_repeatable(page, dtype, n_rows):
    """One row, fewer rows than pairs, one row a pair, more rows than pairs (each pair several rows, some one more than
    others); every element of dx against float64; dx and dw the same bits on a second run."""
    x, w, dy = data((n_rows, 32768), dtype, seed=n_rows)
    launch = dict(eps=1e-6, programs=2 * min(n_rows, page.NUM_SMS // 2), wgs=page.WARPGROUPS, chunk=1024, slots=4, lag=0,
                  parts=2)
    dx, dw = page.rms_norm_bwd(x, w, dy, **launch)
    _, dx_ref, dw_ref = float64_vjp(x, w, dy)
    assert bool(jnp.isfinite(dx).all()) and rel(dx, dx_ref) <= (1e-6 if dtype == jnp.float32 else 4e-3)
    assert rel(dw, dw_ref) <= 1e-6
    dx2, dw2 = page.rms_norm_bwd(x, w, dy, **launch)
    assert bool((dx == dx2).all()) and bool((dw == dw2).all())


def test_the_drop_in_swaps_sums_at_fp32_32k(page):
    assert page._config(300, 32768, 4, backward=True)[4] == 0 and page._config(300, 32768, 2, backward=True)[4] is None
    x, w, dy = data((3, 100, 32768), jnp.float32, seed=3)
    dx, dw = jax.vjp(page.rms_norm, x, w)[1](dy)
    _, dx_ref, dw_ref = float64_vjp(x.reshape(-1, 32768), w, dy.reshape(-1, 32768))
    assert rel(dx.reshape(-1, 32768), dx_ref) <= 1e-6 and rel(dw, dw_ref) <= 1e-6
