"""Deep dive 51 (RMSNorm through Mosaic GPU: the forward) on a CPU: its kernel in Mosaic GPU's interpreter, with race
detection, against float64; the drop-in's shapes, gradient and errors; every launch its config gives an H100 lowered
for sm_90. Needs Python 3.12 and JAX >= 0.11.1 (no torch): ``tests/test_rms_norm_mosaic_gpu.py`` runs tests/mosaic in
a venv of its own from ``make test``."""

from interpreter import DTYPES, TOL, check_drop_in, jax, jnp, races  # noqa: I001 (first: it sets JAX's platform)
import numpy as np
import pytest

from conftest import data, float64_vjp, rel


@pytest.fixture(scope="module")
def page(page51):
    assert page51.MOSAIC_INTERPRET is not None, "these tests must run the kernel in the interpreter"
    return page51


@DTYPES
@pytest.mark.parametrize(
    "wgs, n_cols, chunk",
    [
        (2, 2048, 256),
        (2, 2048, 1024),
        (2, 4096, 512),
        (2, 6144, 1024),
        (3, 6144, 1024),
        (4, 4096, 512),
        (4, 8192, 1024),
        (6, 6144, 512),
        (8, 4096, 256),
        (8, 8192, 512),
    ],
)
def test_forward_a_row_a_program_against_float64_without_races(page, dtype, wgs, n_cols, chunk):
    """The forward that loads a row straight into registers, a program a row: two to eight warpgroups (the counts its
    config gives a GPU), 1-4 chunks a warpgroup (6144 over two: 3 chunks of 1024), every element of y written (the
    interpreter fills what is not with NaN)."""
    x, w, dy = data((5, n_cols), dtype, seed=n_cols + chunk + wgs)
    y = page.rms_norm_fwd(x, w, eps=1e-6, wgs=wgs, chunk=chunk)
    assert not np.isnan(np.asarray(y, np.float32)).any(), "an element of y was not written"
    assert rel(y, float64_vjp(x, w, dy)[0]) <= TOL[dtype]
    assert not races(), "the interpreter found a race between threads"


def test_drop_in_shapes_and_gradient(page):
    """y on a 3-D x against float64; jax.vjp through it (the gradient is XLA's here) against float64; no rows."""
    check_drop_in(page.rms_norm)


@pytest.mark.parametrize(
    "shape, dtype, weight_n, match",
    [
        ((4, 3072), jnp.float32, 3072, "multiples of 2048"),
        ((4, 1024), jnp.float32, 1024, "multiples of 2048"),
        ((4, 2048), jnp.int32, 2048, "dtype"),
        ((4, 2048), jnp.float32, 1024, "weight must be"),
        ((4, 67584), jnp.bfloat16, 67584, "to 65536"),
    ],
)
def test_bad_input_says_why(page, shape, dtype, weight_n, match):
    with pytest.raises((ValueError, TypeError), match=match):
        page.rms_norm(jnp.ones(shape, dtype), jnp.ones((weight_n,), dtype))


@pytest.fixture
def h100(page, monkeypatch):
    """The page as it configures itself on a GPU: no interpreter."""
    monkeypatch.setattr(page, "MOSAIC_INTERPRET", None)
    return page


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("n_cols", [8192, 16384, 24576, 32768])
def test_every_gpu_launch_lowers_for_an_h100(h100, dtype, n_cols):
    """The launches the config gives an H100 at the page's sizes, as measured fastest (dev/DESIGN.md), lowered
    for sm_90: a warpgroup for each 16 KB of row, at least two at bf16 and four at fp32; chunks of 2048 where each
    warpgroup keeps two."""
    page, itemsize = h100, jnp.dtype(dtype).itemsize
    x, w = jax.ShapeDtypeStruct((2**27 // n_cols, n_cols), dtype), jax.ShapeDtypeStruct((n_cols,), dtype)
    launch = page._config(n_cols, itemsize)
    wanted = {2: {8192: 2, 16384: 2, 24576: 3, 32768: 4}, 4: {8192: 4, 16384: 4, 24576: 6, 32768: 8}}
    assert launch["wgs"] == wanted[itemsize][n_cols]
    assert launch["chunk"] == (1024 if (itemsize, n_cols) == (4, 8192) else 2048)
    page.rms_norm_fwd.trace(x, w, eps=1e-6, **launch).lower(lowering_platforms=("cuda",))


@pytest.mark.parametrize("itemsize", [2, 4])
def test_every_row_gets_a_launch_that_splits_it(h100, itemsize):
    """Every row the drop-in takes (multiples of 2048 up to 64 K): a warpgroup count the kernel runs (2 to 8: at most
    1024 threads), at least one for each 16 KB of row up to eight where such a count splits the row into chunks of
    512, and a chunk that splits the row evenly over them, two or more a warpgroup where any does."""
    for n_cols in range(2048, 65536 + 1, 2048):
        launch = h100._config(n_cols, itemsize)
        wgs, chunk = launch["wgs"], launch["chunk"]
        assert 2 <= wgs <= 8 and chunk in (512, 1024, 2048) and n_cols % (wgs * chunk) == 0, (n_cols, launch)
        least = min(8, -(-n_cols * itemsize // 16384))
        assert wgs >= least or not any(n_cols % (g * 512) == 0 for g in range(least, 9)), (n_cols, launch)
        assert n_cols >= 2 * wgs * chunk or n_cols < 2 * wgs * 512, (n_cols, launch)
