"""What tests/mosaic's files share: deep dives 51's and 52's definitions as modules, and the float64 reference. JAX is
imported only inside, so that each file picks its platform first (the interpreter on a CPU, or a GPU)."""

import importlib.util
import pathlib

import numpy as np
import pytest

PAGES = pathlib.Path(__file__).resolve().parents[2] / "tutorials" / "deep_dives"


def _load(stem, tmp_path_factory):
    """A page's definitions: its text up to the correctness cell, as a module (jax.jit needs real source)."""
    source = (PAGES / f"{stem}.py").read_text(encoding="utf-8")
    head = tmp_path_factory.mktemp("page") / f"page{stem[:2]}.py"
    head.write_text(source[: source.index("# %%\n# Correctness")], encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"page{stem[:2]}", head)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page51(tmp_path_factory):
    return _load("51_rms_norm_mosaic_gpu", tmp_path_factory)


@pytest.fixture(scope="module")
def page52(tmp_path_factory):
    return _load("52_rms_norm_mosaic_gpu_backward", tmp_path_factory)


def float64_vjp(x, w, dy, eps=1e-6):
    """y, dx, dw of the formula in float64."""
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    r = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    return x * r * w, r * dy * w - x * r**3 * np.mean(dy * w * x, -1, keepdims=True), np.sum(dy * x * r, 0)


def rel(out, ref):
    return np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)


def data(shape, dtype, seed):
    import jax
    import jax.numpy as jnp

    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x, dy = (jax.random.normal(k, shape, jnp.float32).astype(dtype) for k in (kx, kd))
    return x, (1 + 0.1 * jax.random.normal(kw, (shape[-1],), jnp.float32)).astype(dtype), dy
