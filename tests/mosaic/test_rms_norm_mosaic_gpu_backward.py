"""Deep dive 52 (RMSNorm through Mosaic GPU: the backward) on a CPU: its kernels in Mosaic GPU's interpreter, with race
detection, against float64; dx and dw the same bits twice; the drop-in's gradient, both backward kernels, its errors;
every launch its config gives an H100 lowered for sm_90 (the lowering also checks SMEM). Needs Python 3.12 and JAX >=
0.11.1 (no torch): ``tests/test_rms_norm_mosaic_gpu.py`` runs tests/mosaic in a venv of its own from ``make test``."""

from interpreter import DTYPES, TOL, check_drop_in, jax, jnp, races  # noqa: I001 (first: it sets JAX's platform)
import pytest

from conftest import data, float64_vjp, rel


@pytest.fixture(scope="module")
def page(page52):
    assert page52.MOSAIC_INTERPRET is not None, "these tests must run the kernels in the interpreter"
    return page52


@DTYPES
@pytest.mark.parametrize(
    "wgs, chunk, slots, lag, programs", [(2, 512, 2, 0, 3), (2, 1024, 2, 1, 2), (2, 256, 12, 2, 9), (2, 512, 2, 0, 4)]
)
def test_backward_that_keeps_the_row_against_float64_without_races(page, dtype, wgs, chunk, slots, lag, programs):
    x, w, dy = data((7, 2048), dtype, seed=chunk + slots)
    dx, dw = page.rms_norm_bwd(x, w, dy, eps=1e-6, programs=programs, wgs=wgs, chunk=chunk, slots=slots, lag=lag)
    _, dx_ref, dw_ref = float64_vjp(x, w, dy)
    assert rel(dx, dx_ref) <= TOL[dtype] and rel(dw, dw_ref) <= TOL[jnp.float32]
    assert not races(), "the interpreter found a race between threads and TMA"


@DTYPES
@pytest.mark.parametrize(
    "wgs, parts, chunk, slots, programs", [(2, 2, 256, 3, 4), (2, 2, 1024, 2, 6), (2, 4, 256, 4, 8), (2, 2, 512, 2, 16)]
)
def test_backward_in_parts_against_float64_without_races(page, dtype, wgs, parts, chunk, slots, programs):
    """parts programs a row, each its own columns' dx and dw; more groups than rows in the last case."""
    x, w, dy = data((7, 4096 if wgs * parts * chunk > 2048 else 2048), dtype, seed=parts + slots)
    dx, dw = page.rms_norm_bwd_parts(
        x, w, dy, eps=1e-6, programs=programs, wgs=wgs, parts=parts, chunk=chunk, slots=slots
    )
    _, dx_ref, dw_ref = float64_vjp(x, w, dy)
    assert rel(dx, dx_ref) <= TOL[dtype] and rel(dw, dw_ref) <= TOL[jnp.float32]
    assert not races(), "the interpreter found a race between threads and TMA"


def test_dx_and_dw_are_the_same_bits_every_run(page):
    x, w, dy = data((9, 2048), jnp.float32, seed=5)
    for kernel, launch in (
        (page.rms_norm_bwd, dict(slots=4, lag=1)),
        (page.rms_norm_bwd_parts, dict(parts=2, slots=3)),
    ):
        runs = [kernel(x, w, dy, eps=1e-6, programs=4, wgs=2, chunk=512, **launch) for _ in range(2)]
        assert all(bool((a == b).all()) for a, b in zip(*runs)), kernel.__name__


@pytest.mark.parametrize("dw_columns", [None, 1024], ids=["row kept", "two programs a row"])
def test_drop_in_gradient_and_shapes(page, monkeypatch, dw_columns):
    """jax.vjp through the drop-in on a 3-D x; with fewer dw columns a warpgroup the backward takes the parts kernel."""
    if dw_columns:
        monkeypatch.setattr(page, "DW_COLUMNS", dw_columns)
        assert page._config(6, 4096, 2)[1] == 2
    check_drop_in(page.rms_norm)


@pytest.mark.parametrize(
    "shape, dtype, weight_n, match",
    [
        ((4, 3072), jnp.float32, 3072, "multiples of 2048"),
        ((4, 1024), jnp.float32, 1024, "multiples of 2048"),
        ((4, 2048), jnp.int32, 2048, "dtype"),
        ((4, 2048), jnp.float32, 1024, "weight must be"),
        ((4, 131072), jnp.float32, 131072, "no launch takes"),
        ((4, 18432), jnp.bfloat16, 18432, "no launch takes"),
    ],
)
def test_bad_input_says_why(page, shape, dtype, weight_n, match):
    with pytest.raises((ValueError, TypeError), match=match):
        page.rms_norm(jnp.ones(shape, dtype), jnp.ones((weight_n,), dtype))


@pytest.fixture
def h100(page, monkeypatch):
    """The page as it configures itself on an H100: 132 SMs, four warpgroups, no interpreter."""
    monkeypatch.setattr(page, "NUM_SMS", 132)
    monkeypatch.setattr(page, "WARPGROUPS", 4)
    monkeypatch.setattr(page, "MOSAIC_INTERPRET", None)
    return page


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("n_cols", [8192, 16384, 32768])
def test_every_gpu_launch_lowers_for_an_h100(h100, dtype, n_cols):
    """The launches the config gives an H100 (132 SMs) lowered for sm_90 (Mosaic GPU's lowering checks the SMEM asked
    for); rows of up to 16 K keep the row in SMEM, longer ones take a cluster of two programs a row that swap their
    sums through SMEM (run on a GPU by gpu_exchange.py)."""
    page = h100
    n_rows, itemsize, wgs = 2**27 // n_cols, jnp.dtype(dtype).itemsize, page.WARPGROUPS
    x, w = jax.ShapeDtypeStruct((n_rows, n_cols), dtype), jax.ShapeDtypeStruct((n_cols,), dtype)
    page.rms_norm_fwd.trace(x, w, eps=1e-6, **page._forward_config(n_cols, itemsize)).lower(
        lowering_platforms=("cuda",)
    )
    programs, parts, chunk, slots, lag = page._config(n_rows, n_cols, itemsize)
    assert parts == (1 if n_cols <= 16384 else 2) and programs <= 132 and lag is not None, "the row or its half in SMEM"
    page.rms_norm_bwd.trace(
        x, w, x, eps=1e-6, programs=programs, wgs=wgs, chunk=chunk, slots=slots, lag=lag, parts=parts
    ).lower(lowering_platforms=("cuda",))


def test_rows_past_32k_read_twice_on_an_h100(h100):
    """bf16 rows of 64 K: a quarter of dw a program, four programs a row, which read the row twice; lowered for
    sm_90."""
    page = h100
    x, w = jax.ShapeDtypeStruct((2048, 65536), jnp.bfloat16), jax.ShapeDtypeStruct((65536,), jnp.bfloat16)
    programs, parts, chunk, slots, lag = page._config(2048, 65536, 2)
    assert (parts, lag) == (4, None) and programs <= 132
    page.rms_norm_bwd_parts.trace(
        x, w, x, eps=1e-6, programs=programs, wgs=page.WARPGROUPS, parts=parts, chunk=chunk, slots=slots
    ).lower(lowering_platforms=("cuda",))


def test_the_interpreter_never_gets_the_exchange(page):
    """It has no cluster refs (``plgpu.cluster_ref``): on a CPU, 32 K rows take the kernel that reads them twice."""
    for itemsize in (2, 4):
        assert page._config(64, 32768, itemsize)[4] is None
