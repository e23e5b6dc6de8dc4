"""Deep dive 51 (Mosaic GPU RMSNorm) on a CPU: its kernels in Mosaic GPU's interpreter, with race detection, against
float64; every launch its config gives lowered for an H100 (sm_90), the row split included (the interpreter cannot run
global semaphores); the drop-in's gradient and its errors. Needs Python 3.12 and JAX >= 0.11.1.

Run: python3.12 -m pytest tests/mosaic --confcutdir=tests/mosaic (no torch needed)."""

import importlib.util
import os
import pathlib

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

if tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 11, 1):
    pytest.skip("Mosaic GPU's interpreter needs JAX 0.11.1 or newer", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = pathlib.Path(os.environ.get("SOL_PAGE_51", ROOT / "tutorials" / "deep_dives" / "51_rms_norm_mosaic_gpu.py"))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The page's definitions: its text up to the correctness cell, as a module (jax.jit needs real source)."""
    source = PAGE.read_text(encoding="utf-8")
    head = tmp_path_factory.mktemp("page") / "page51.py"
    head.write_text(source[:source.index("# %%\n# Correctness")], encoding="utf-8")
    spec = importlib.util.spec_from_file_location("page51", head)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def races():
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races
    return get_races().races_found


def float64_vjp(x, w, dy, eps=1e-6):
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    r = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    return x * r * w, r * dy * w - x * r**3 * np.mean(dy * w * x, -1, keepdims=True), np.sum(dy * x * r, 0)


def rel(out, ref):
    return np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)


def data(shape, dtype, seed):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x, dy = (jax.random.normal(k, shape, jnp.float32).astype(dtype) for k in (kx, kd))
    return x, (1 + 0.1 * jax.random.normal(kw, (shape[-1],), jnp.float32)).astype(dtype), dy


TOL = {jnp.float32: 1e-6, jnp.bfloat16: 4e-3}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("chunk, slots, lag, programs", [(512, 4, 0, 3), (512, 8, 1, 2), (256, 12, 2, 4), (1024, 2, 1, 5)])
def test_kernels_against_float64_without_races(page, dtype, chunk, slots, lag, programs):
    """Rows of 1024: 1-4 chunks, rings of 1-3 rows, lag 0-2, more programs than rows and fewer."""
    x, w, dy = data((7, 1024), dtype, seed=chunk + slots)
    y = page.rms_norm_fwd(x, w, eps=1e-6, programs=programs, chunk=chunk, slots=slots, lag=lag, interpret=True)
    dx, dw = page.rms_norm_bwd(x, w, dy, eps=1e-6, groups=programs, split=1, chunk=chunk, slots=slots, lag=lag,
                               interpret=True)
    ref = float64_vjp(x, w, dy)
    for name, out, r in zip(("y", "dx", "dw"), (y, dx, dw), ref):
        assert rel(out, r) <= TOL[dtype], name
    assert not races(), "the interpreter found a race between threads and TMA"


@pytest.mark.parametrize("dtype, chunk, slots", [(jnp.float32, 512, 3), (jnp.bfloat16, 256, 2), (jnp.float32, 1024, 1)])
def test_the_forward_that_reads_each_row_twice(page, dtype, chunk, slots):
    """Rows whose w and one row do not fit SMEM: the chunks pass twice through a ring smaller than a row."""
    x, w, dy = data((7, 2048), dtype, seed=slots)
    y = page.rms_norm_fwd_reread(x, w, eps=1e-6, programs=3, chunk=chunk, slots=slots, interpret=True)
    assert rel(y, float64_vjp(x, w, dy)[0]) <= TOL[dtype]
    assert not races(), "the interpreter found a race between threads and TMA"


def test_dw_is_the_same_bits_every_run(page):
    x, w, dy = data((9, 1024), jnp.float32, seed=5)
    runs = [page.rms_norm_bwd(x, w, dy, eps=1e-6, groups=4, split=1, chunk=512, slots=4, lag=1, interpret=True)
            for _ in range(2)]
    assert all(bool((a == b).all()) for a, b in zip(*runs))


def test_drop_in_gradient_and_shapes(page):
    x, w, dy = data((2, 3, 2048), jnp.bfloat16, seed=1)
    y, pullback = jax.vjp(page.rms_norm, x, w)
    dx, dw = pullback(dy)
    ref = float64_vjp(x.reshape(-1, 2048), w, dy.reshape(-1, 2048))
    assert y.shape == x.shape and dx.shape == x.shape and dw.dtype == w.dtype
    for out, r in zip((y.reshape(-1, 2048), dx.reshape(-1, 2048), dw), ref):
        assert rel(out, r) <= TOL[jnp.bfloat16]
    assert page.rms_norm(x[:0], w).shape == (0, 3, 2048)


@pytest.mark.parametrize("shape, dtype, weight_n, match", [
    ((4, 1000), jnp.float32, 1000, "multiples of 256"), ((4, 1024), jnp.float32, 1024, "from 2048"),
    ((4, 2048), jnp.int32, 2048, "dtype"), ((4, 2048), jnp.float32, 1024, "weight must be")])
def test_bad_input_says_why(page, shape, dtype, weight_n, match):
    with pytest.raises((ValueError, TypeError), match=match):
        page.rms_norm(jnp.ones(shape, dtype), jnp.ones((weight_n,), dtype))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("n_cols", [8192, 16384, 32768])
def test_every_gpu_config_lowers_for_an_h100(page, monkeypatch, dtype, n_cols):
    """The launches the config gives on an H100 (132 SMs), the backward's row split included, lowered for sm_90: the
    lowering also checks that the SMEM asked for fits. Where nothing fits, the drop-in must say so."""
    monkeypatch.setattr(page, "NUM_SMS", 132)
    monkeypatch.setattr(page, "ON_GPU", True)
    n_rows = 2**27 // n_cols
    x, w = jax.ShapeDtypeStruct((n_rows, n_cols), dtype), jax.ShapeDtypeStruct((n_cols,), dtype)
    itemsize = jnp.dtype(dtype).itemsize
    fwd, bwd = page._config(n_rows, n_cols, itemsize), page._config(n_rows, n_cols, itemsize, backward=True)
    if fwd is not None:
        programs, chunk, slots, lag = fwd
        kernel = page.rms_norm_fwd if lag is not None else page.rms_norm_fwd_reread  # lag None: the row read twice
        kernel.trace(x, w, eps=1e-6, programs=programs, chunk=chunk, slots=slots, **({} if lag is None else {"lag": lag})
                     ).lower(lowering_platforms=("cuda",))
    if bwd is not None:
        groups, split, chunk, slots, lag = bwd
        assert groups * split <= 132, "a split group waits for its others: every program must be resident"
        page.rms_norm_bwd.trace(x, w, x, eps=1e-6, groups=groups, split=split, chunk=chunk, slots=slots, lag=lag).lower(
            lowering_platforms=("cuda",))
    assert fwd is not None, "every forward of 8-32 K has a launch"
