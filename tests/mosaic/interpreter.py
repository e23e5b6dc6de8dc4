"""What the CPU files of tests/mosaic share: JAX on the CPU (Mosaic GPU's interpreter, also on a GPU machine) and new
enough for it, the interpreter's race log, the tolerances against float64. Imported before anything imports JAX."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

if tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 11, 1):
    pytest.skip("Mosaic GPU's interpreter needs JAX 0.11.1 or newer", allow_module_level=True)


def races():
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races

    return get_races().races_found


TOL = {jnp.float32: 1e-6, jnp.bfloat16: 4e-3}
DTYPES = pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])


def check_drop_in(rms_norm):
    """y, dx and dw of jax.vjp through a page's drop-in on a 3-D bf16 x against float64; the shapes and dtypes it
    gives; no rows in, no rows out."""
    from conftest import data, float64_vjp, rel

    x, w, dy = data((2, 3, 4096), jnp.bfloat16, seed=1)
    y, pullback = jax.vjp(rms_norm, x, w)
    dx, dw = pullback(dy)
    ref = float64_vjp(x.reshape(-1, 4096), w, dy.reshape(-1, 4096))
    assert y.shape == x.shape and dx.shape == x.shape and dw.dtype == w.dtype
    for out, r in zip((y.reshape(-1, 4096), dx.reshape(-1, 4096), dw), ref):
        assert rel(out, r) <= TOL[jnp.bfloat16]
    assert rms_norm(x[:0], w).shape == (0, 3, 4096)
