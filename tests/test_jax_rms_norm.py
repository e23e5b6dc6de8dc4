"""Tutorial 05's pages: RMSNorm in JAX with Pallas (the forward kernel, its two steps, its launch), its backward page
(the backward's kernels, the differentiable drop-in through jax.custom_vjp, the forward carried) and its sharded
page. The Pallas kernels (interpreted on the CPU) against the jnp formula and its jax.vjp in float64, masks and
padding, every output element written, dw repeatable, bad input, the launch configs, no Triton kernel pasted in;
the code the backward and sharded pages carry; the sharded function on two and four CPU devices.

Loading a page would run its benchmarks; these tests run its definitions only: the forward and backward pages up to
their "Correctness" sections (imports, kernels, configs, the drop-in, the appendix's helpers), the sharded page up
to "What crosses the links".

Two CPU devices need XLA_FLAGS=--xla_force_host_platform_device_count=2 before JAX is first imported. pytest
runs every test file in one process, so it is set below before `import jax`, but only takes effect if no
other test file imported JAX first. The sharded check therefore runs in a subprocess of its own, which
always has two CPU devices.
"""

import contextlib
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "tutorials" / "05_jax_rms_norm.py"  # the forward
BACKWARD = ROOT / "tutorials" / "05_jax_rms_norm_backward.py"  # the backward and the drop-in
SHARDED = ROOT / "tutorials" / "05_jax_rms_norm_sharded.py"
# where the definitions end
DEFINITIONS_END = {PAGE: "\n# Correctness\n", BACKWARD: "\n# Correctness\n", SHARDED: "\n# What crosses the links\n"}
# a few roundings of the output dtype (on a GPU, fp32 sums in another order: same bound)
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def load_definitions(path=PAGE):
    source, end = path.read_text(encoding="utf-8"), DEFINITIONS_END[path]
    assert end in source, f"{path.name} has no {end.strip()!r} section heading"
    namespace = {"__name__": "tutorial_05_definitions", "__file__": str(path)}
    exec(compile(source[: source.index(end)], str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def page():
    """The forward page's definitions."""
    return load_definitions()


@pytest.fixture(scope="module")
def backward_page():
    """The backward page's definitions: its kernels, the drop-in, the forward it carries."""
    return load_definitions(BACKWARD)


@pytest.fixture(scope="module")
def step(backward_page):
    """y, dx, dw of the drop-in, rms_norm, jitted once: each shape and dtype compiles once for all tests."""
    return jax.jit(lambda x, w, dy: gradients(lambda x, w: backward_page["rms_norm"](x, w, 1e-6), x, w, dy))


def gradients(fn, x, w, dy):
    y, pullback = jax.vjp(fn, x, w)
    return (y, *pullback(dy))


def inputs(shape, dtype, seed=0):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = (3 * jax.random.normal(kx, shape)).astype(dtype)
    w = (1 + 0.5 * jax.random.normal(kw, shape[-1:])).astype(dtype)
    return x, w, jax.random.normal(kd, shape).astype(dtype)


def float64_reference(page, x, w, dy, eps=1e-6):
    """y, dx, dw from jax.vjp of the page's jnp formula in float64, and the size of dx's terms, ||r g||."""

    def reference(x, w, dy):
        r_g = dy * w * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
        return gradients(lambda x, w: page["rms_norm_reference"](x, w, eps), x, w, dy), jnp.linalg.norm(r_g)

    with jax.enable_x64(True):
        outs, r_g = jax.jit(reference)(*(jnp.asarray(t, jnp.float64) for t in (x, w, dy)))
        return [np.asarray(t) for t in outs], float(r_g)


def rel(out, ref, scale):
    return float(np.linalg.norm(np.asarray(out, np.float64) - ref) / (scale or 1.0))


# Leading dims: none, one, three, and an empty one. N: 1, odd, non-powers of two, and rows past the kernels (the
# backward's past 8192 columns, the forward's past 16384), which take XLA's formulas inside the op. Each new shape
# and dtype compiles the interpreted kernels anew (seconds), hence a list rather than every combination.
CASES = [
    ((300,), "float32"),
    ((4, 1), "float32"),
    ((4, 1), "float16"),
    ((2, 3, 2, 33), "float32"),
    ((2, 3, 2, 33), "bfloat16"),
    ((2, 3, 2, 33), "float16"),
    ((0, 16), "float32"),
    ((2, 9000), "float32"),
    ((2, 9000), "bfloat16"),
    ((9, 20000), "float32"),
    ((2, 20000), "bfloat16"),
    ((2, 40000), "float32"),
]


@pytest.mark.parametrize("shape, dtype", CASES, ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else c)
def test_forward_backward_against_float64_grad(backward_page, step, shape, dtype):
    x, w, dy = inputs(shape, dtype)
    outs = step(x, w, dy)
    assert [o.shape for o in outs] == [x.shape, x.shape, w.shape]
    assert all(o.dtype == jnp.dtype(dtype) for o in outs), [o.dtype for o in outs]
    for name, out in zip(("y", "dx", "dw"), outs):  # interpreted outputs start as NaN: all were written
        assert bool(jnp.isfinite(out.astype(jnp.float32)).all()), f"{name} has elements never written"
    if x.size == 0:
        assert not np.asarray(outs[2], np.float32).any(), "dw over no rows must be zero"
        return
    (y64, dx64, dw64), r_g = float64_reference(backward_page, x, w, dy)
    # dx against the size of its terms r g: at N = 1 they cancel to ~0 and rounding is all that is left
    errors = {
        "y": rel(outs[0], y64, np.linalg.norm(y64)),
        "dx": rel(outs[1], dx64, r_g),
        "dw": rel(outs[2], dw64, np.linalg.norm(dw64)),
    }
    assert max(errors.values()) <= TOL[dtype], f"{shape} {dtype}: relative errors {errors} over {TOL[dtype]}"


# 2-D rows for the forward page's two steps: N = 1, odd, a power of two, a block of several rows, and rows past
# FWD_WHOLE_ROW_N (XLA's formula inside _forward; step 0 is not for them)
FORWARD_CASES = [((5, 1), "float32"), ((7, 33), "bfloat16"), ((9, 256), "float16"), ((3, 1000), "float32")]


@pytest.mark.parametrize("shape, dtype", [*FORWARD_CASES, ((2, 20000), "bfloat16")], ids=str)
def test_the_forward_pages_steps_against_float64(page, shape, dtype):
    """Step 0 (a row a program) and step 1 (the launch the drop-in uses) give y within a few roundings of the formula
    in float64, and rstd, one fp32 a row, as the formula has it; every element written (the interpreter's outputs
    start as NaN)."""
    x, w, _ = inputs(shape, dtype, seed=2)
    with jax.enable_x64(True):
        x64, w64 = jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64)
        y64 = np.asarray(page["rms_norm_reference"](x64, w64, 1e-6))
        rstd64 = np.asarray(jax.lax.rsqrt(jnp.mean(x64 * x64, axis=-1) + 1e-6))
    steps = {"step 1": lambda x, w: page["_forward"](x, w, 1e-6)}
    if shape[1] <= page["FWD_WHOLE_ROW_N"]:
        steps["step 0"] = page["one_row_a_program"]
    for name, launch in steps.items():
        y, rstd = launch(x, w)
        assert y.shape == x.shape and y.dtype == x.dtype and rstd.shape == x.shape[:1] and rstd.dtype == jnp.float32
        assert bool(jnp.isfinite(y.astype(jnp.float32)).all()), f"{name}: y has elements never written"
        assert rel(y, y64, np.linalg.norm(y64)) <= TOL[dtype], f"{name} {shape} {dtype}: y off"
        np.testing.assert_allclose(np.asarray(rstd), rstd64, rtol=1e-5, err_msg=name)


def test_the_backward_page_carries_the_forward_letter_for_letter(page, backward_page):
    """The backward page runs the forward that the forward page teaches: the same formula, kernel, helpers, launch
    and constants."""
    import inspect

    for name in ("rms_norm_reference", "_tile", "_load", "fwd_kernel", "_fwd_config", "_forward"):
        assert inspect.getsource(backward_page[name]) == inspect.getsource(page[name]), name
    for name in ("MIN_ELEMENTS", "FWD_WHOLE_ROW_N", "INTERPRET"):
        assert backward_page[name] == page[name], name
    source = BACKWARD.read_text(encoding="utf-8").splitlines()
    for name in ("_warps", "_params"):  # lambdas: their lines
        line = next(text for text in PAGE.read_text(encoding="utf-8").splitlines() if text.startswith(f"{name} = "))
        assert line in source, name


def test_each_page_claims_only_the_direction_it_measures(page, backward_page):
    """The forward page's RANGE is the forward's, the backward page's the backward's, each from N = 1."""
    assert {d for d, _ in page["RANGE"]} == {"forward"} and {d for d, _ in backward_page["RANGE"]} == {"backward"}
    assert all(r.start == 1 for r in [*page["RANGE"].values(), *backward_page["RANGE"].values()])


def test_rstd_saved_and_every_row_written(page):
    """The forward's second output, rstd, one fp32 a row (the shape rms_norm gave (2, 3, 2, 33): compiled)."""
    x, w, _ = inputs((12, 33), "float32")
    y, rstd = page["_forward"](x, w, 1e-6)
    expected = jax.lax.rsqrt(jnp.mean(x * x, axis=-1) + 1e-6)
    assert rstd.dtype == jnp.float32 and rstd.shape == (12,)
    np.testing.assert_allclose(np.asarray(rstd), np.asarray(expected), rtol=1e-6)
    assert bool(jnp.isfinite(y).all())


@pytest.mark.parametrize("shape", [(2, 3, 2, 33), (40, 300)], ids=["one block a program", "two blocks a program"])
def test_dw_bitwise_repeatable(step, shape):
    """dw's partials are summed in a fixed order: two runs give the same bits (dx too)."""
    x, w, dy = inputs(shape, "bfloat16", seed=3)
    first, second = step(x, w, dy), step(x, w, dy)
    for a, b in zip(first, second):
        assert np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_bad_input_raises_errors_that_name_the_limit(backward_page):
    rms_norm = backward_page["rms_norm"]
    x = jnp.ones((4, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"weight \(7,\).*weight that axis's length"):
        rms_norm(x, jnp.ones(7))  # N mismatch
    with pytest.raises(ValueError, match=r"weight \(8, 1\)"):
        rms_norm(x, jnp.ones((8, 1)))
    with pytest.raises(TypeError, match="x has dtype int32.*float32, float16 and bfloat16"):
        rms_norm(jnp.ones((4, 8), jnp.int32), jnp.ones(8))
    with pytest.raises(TypeError, match="weight has dtype int32"):
        rms_norm(x, jnp.ones(8, jnp.int32))
    with pytest.raises(ValueError, match="1 or more elements"):
        rms_norm(jnp.ones((4, 0)), jnp.ones(0))
    with pytest.raises(ValueError, match="1 or more elements"):
        rms_norm(jnp.ones(()), jnp.ones(()))
    with pytest.raises(TypeError, match="eps must be a Python float"):
        jax.jit(lambda x, w, eps: rms_norm(x, w, eps))(x, jnp.ones(8), 1e-6)


N_COLS = [1, 3, 257, 1024, 4096, 8192, 8193, 16384, 30000, 32768]


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("n_cols", N_COLS)
def test_forward_config(page, n_cols, itemsize):
    """Power-of-two tiles covering the row, 4 to 16 warps, a grid that covers every row, each program moving
    MIN_ELEMENTS or a whole row."""
    n_rows = 2**26 // n_cols
    if n_cols > page["FWD_WHOLE_ROW_N"]:  # past it the forward is XLA's
        return
    meta, grid, params = page["_fwd_config"](n_rows, n_cols, itemsize)
    assert set(meta) == {"BLOCK_M", "BLOCK_N"} and meta["BLOCK_N"] >= n_cols > meta["BLOCK_N"] // 2, meta
    assert grid * meta["BLOCK_M"] >= n_rows > (grid - 1) * meta["BLOCK_M"]
    assert meta["BLOCK_M"] * meta["BLOCK_N"] >= page["MIN_ELEMENTS"] or meta["BLOCK_M"] == 1, meta
    assert meta["BLOCK_N"] * 4 <= 32 * 32 * 4 * params.num_warps  # at most 32 fp32 a thread: no spills
    assert 4 <= params.num_warps <= 16


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("n_cols", N_COLS)
def test_backward_configs(backward_page, n_cols, itemsize):
    """Power-of-two tiles covering the row, 4 to 32 warps, each program moving MIN_ELEMENTS or a whole row, a
    persistent grid that depends on the shape only, and dw's sum in power-of-two strips."""
    if n_cols > backward_page["WHOLE_ROW_N"]:  # past it the backward is XLA's
        return
    n_rows = 2**26 // n_cols
    meta, grid, params = backward_page["_bwd_config"](n_rows, n_cols, itemsize)
    block_m, block_n = meta["BLOCK_M"], meta["BLOCK_N"]
    for size in (block_m, block_n, block_m * block_n):
        assert size & (size - 1) == 0, f"{meta} is not a power of two"
    assert block_n >= n_cols > block_n // 2, meta
    assert 4 <= params.num_warps <= 32 and params.num_stages >= 1
    assert block_m * block_n >= min(backward_page["MIN_ELEMENTS"], block_n), meta
    assert 1 <= grid <= -(-n_rows // block_m)
    assert backward_page["_bwd_config"](n_rows, n_cols, itemsize)[1] == grid  # fixed for a shape: so is dw's sum
    meta, _ = backward_page["_sum_config"](n_cols)
    assert meta["BLOCK_P"] & (meta["BLOCK_P"] - 1) == 0 and meta["BLOCK_N"] & (meta["BLOCK_N"] - 1) == 0


SHARDED_CHECK = r"""
import os, sys
DEVICES = int(sys.argv[2])
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}"
).strip()
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, sys.argv[1])
import functools
from test_jax_rms_norm import SHARDED, load_definitions, inputs, gradients
import jax, jax.numpy as jnp, numpy as np
page = load_definitions(SHARDED)
one_device = page["differentiable"](functools.partial(page["_forward"], eps=1e-6), page["_backward"])
assert jax.device_count() == DEVICES, jax.devices()
mesh = page["Mesh"](np.array(jax.devices()), (page["AXIS"],))
rows = page["NamedSharding"](mesh, page["P"](page["AXIS"]))
sharded = page["differentiable"](*page["sharded_parts"](mesh))
for shape, dtype in [((64, 300), "float32")]:
    x, w, dy = inputs(shape, dtype, seed=5)
    step = jax.jit(lambda x, w, dy: gradients(sharded, x, w, dy))
    compiled = step.lower(jax.device_put(x, rows), w, dy).compile()
    y_s, dx_s, dw_s = compiled(jax.device_put(x, rows), w, dy)
    y_1, dx_1, dw_1 = jax.jit(lambda x, w, dy: gradients(one_device, x, w, dy))(x, w, dy)
    assert dx_s.sharding.spec == page["P"](page["AXIS"]), dx_s.sharding
    # rows are computed one by one as on one device: y and dx are the same bits
    assert np.array_equal(np.asarray(y_s, np.float32), np.asarray(y_1, np.float32)), (shape, "y")
    assert np.array_equal(np.asarray(dx_s, np.float32), np.asarray(dx_1, np.float32)), (shape, "dx")
    # dw: each device sums its rows' partials, then the psum adds them: another grouping of the fp32
    # sums, so not bitwise but within fp32 rounding (about 1e-7 of the largest value)
    diff = np.max(np.abs(np.asarray(dw_s, np.float64) - np.asarray(dw_1, np.float64)))
    scale = np.max(np.abs(np.asarray(dw_1, np.float64)))
    assert diff <= 1e-6 * scale, (shape, diff, scale)
    hlo = compiled.as_text()
    assert any(" all-reduce(" in l and "f32[%d]" % shape[1] in l for l in hlo.splitlines()), "no all-reduce of N fp32"
    assert "psum" in str(jax.make_jaxpr(step)(x, w, dy))
# without the psum each device keeps its own dw: stacked, they sum to the psum's
x, w, dy = inputs((64, 300), "float32", seed=6)
xs = jax.device_put(x, rows)
forward, backward = page["sharded_parts"](mesh)
_, alone = page["sharded_parts"](mesh, psum=False)
rstd = forward(xs, w)[1]
dw, stacked = backward(xs, w, rstd, dy)[1], alone(xs, w, rstd, dy)[1]
assert stacked.shape == (300 * DEVICES,) and dw.shape == (300,)
np.testing.assert_allclose(np.asarray(stacked).reshape(DEVICES, 300).sum(0), np.asarray(dw), rtol=1e-6, atol=1e-6)
# the timed programs: chained(...) runs the steps in turn, each on the last one's output, as one loop on one device does
import ast
tree = ast.parse(SHARDED.read_text(encoding="utf-8"))
page["CHAIN"] = 3
exec(compile(ast.Module([n for n in tree.body if getattr(n, "name", "") == "chained"], []), str(SHARDED), "exec"), page)
forwards, backwards = page["chained"](forward, backward)
f1, b1 = functools.partial(page["_forward"], eps=1e-6), page["_backward"]
y, g, dw_total = x, dy, 0
for _ in range(3):
    y = f1(y, w)[0]
    g, part = b1(x, w, f1(x, w)[1], g)
    dw_total = dw_total + part
np.testing.assert_array_equal(np.asarray(forwards(xs, w)), np.asarray(y))
g_s, dw_s = backwards(xs, w, rstd, jax.device_put(dy, rows))
np.testing.assert_array_equal(np.asarray(g_s), np.asarray(g))
np.testing.assert_allclose(np.asarray(dw_s), np.asarray(dw_total), rtol=1e-5, atol=1e-5)
print("sharded ok")
"""


def test_the_sharded_page_carries_page_05s_kernels_and_drop_in(page, backward_page):
    """The sharded page measures tutorial 05's kernels: the same source, launch parameters and constants as the page
    that teaches each, the forward page or the backward page."""
    import inspect

    sharded = load_definitions(SHARDED)
    taught = [  # (the page that teaches them, names)
        (page, ("_tile", "_load", "fwd_kernel", "_fwd_config", "_forward", "MIN_ELEMENTS", "FWD_WHOLE_ROW_N")),
        (
            backward_page,
            (
                "bwd_kernel",
                "dw_sum_kernel",
                "_bwd_config",
                "_sum_config",
                "_backward",
                "differentiable",
                "WHOLE_ROW_N",
                "WARPS_PER_SM",
            ),
        ),
    ]
    for core, names in taught:
        for name in names:
            if callable(core[name]):
                assert inspect.getsource(sharded[name]) == inspect.getsource(core[name]), name
            else:
                assert sharded[name] == core[name], name
    source = SHARDED.read_text(encoding="utf-8")
    for name in ("_warps", "_params"):  # lambdas: their lines
        line = next(text for text in PAGE.read_text(encoding="utf-8").splitlines() if text.startswith(f"{name} = "))
        assert line in source.splitlines(), name


@pytest.mark.parametrize("devices", [2, 4])
def test_sharded_on_cpu_devices_equals_one_device(devices):
    """In a subprocess with 2 or 4 CPU devices (XLA_FLAGS set before JAX starts there): y and dx bit for bit the
    single-device results, dw within fp32 rounding (the psum groups the sums differently), the compiled
    HLO has an all-reduce of N fp32 values and the jaxpr a psum; the timed chains compute what a loop does."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_CHECK, str(ROOT / "tests"), str(devices)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and "sharded ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.mark.parametrize("path", [PAGE, BACKWARD], ids=["05", "05 backward"])
def test_no_triton_kernel_is_pasted_into_the_core_pages(path):
    """Page 05 teaches one idea in JAX; tutorial 04's Triton kernels stay on their own page."""
    source = path.read_text(encoding="utf-8")
    assert "@triton.jit" not in source and not re.search(r"^\s*(import triton|from triton)", source, re.M)


@pytest.mark.filterwarnings("ignore:The Pallas Triton backend is deprecated:DeprecationWarning")
def test_kernels_lower_to_triton_for_an_h100(page, backward_page, monkeypatch):
    """Without a GPU, lower the kernels' configs to Triton IR (the Pallas Triton backend, for an H100): the forward
    page's forward, the backward page's backward up to WHOLE_ROW_N, past which it is XLA's. Catches tile shapes
    Triton refuses and primitives its lowering lacks. JAX 0.11 and later ask which GPU (JAX internals, patched
    here); 0.10 assumes sm_90 by itself."""
    with contextlib.suppress(ImportError, AttributeError):
        from jax._src.pallas.triton import gpu_info, pallas_call_registration

        h100 = gpu_info._get_gpu_info_impl(gpu_info.GpuVersion.H100)
        monkeypatch.setattr(pallas_call_registration.gpu_info_lib, "get_gpu_info", lambda: h100)
    monkeypatch.setitem(page, "INTERPRET", False)
    monkeypatch.setitem(backward_page, "INTERPRET", False)
    monkeypatch.setitem(backward_page, "NUM_SMS", 132)
    for dtype, n_cols in [
        ("bfloat16", 16384),
        ("float32", 1024),
        ("bfloat16", 4096),
        ("float32", 8192),
        ("float32", 1000),
        ("bfloat16", 777),
    ]:
        x = jax.ShapeDtypeStruct((2**26 // n_cols, n_cols), jnp.dtype(dtype))
        w, rstd = jax.ShapeDtypeStruct((n_cols,), x.dtype), jax.ShapeDtypeStruct(x.shape[:1], jnp.float32)
        try:
            lowered = [
                jax.jit(lambda x, w: page["_forward"](x, w, 1e-6)).trace(x, w).lower(lowering_platforms=("cuda",)),
                jax.jit(backward_page["_backward"]).trace(x, w, rstd, x).lower(lowering_platforms=("cuda",)),
            ]
        except RuntimeError as err:
            if "GPU" in str(err):
                pytest.skip(f"this JAX ({jax.__version__}) cannot lower for a GPU it does not see: {err}")
            raise
        for module in lowered[: 1 if n_cols > backward_page["WHOLE_ROW_N"] else 2]:  # past it the backward is XLA's
            assert "__gpu$xla.gpu.triton" in module.as_text(), f"{dtype} {n_cols}: no Triton kernel"


def test_cpu_run_says_what_it_checks_and_names_the_absent_peer(capsys):
    """Without a GPU each page says that Pallas' interpreter checks values and measures no speed, and the forward
    page words the peer it cannot measure as "{peer}: not measured here ({why})."."""
    if jax.default_backend() == "gpu":
        pytest.skip("on a GPU the peer is measured")
    capsys.readouterr()
    page = load_definitions()
    assert "PyTorch copy: not measured here (no GPU).\n" in capsys.readouterr().out
    for defined in (page, load_definitions(BACKWARD)):
        assert defined["NO_SPEED"].startswith(
            "No GPU here: this run checks the kernels' values through Pallas' interpreter"
        )
        assert defined["NO_SPEED"].endswith("; it measures no speed.")


@pytest.mark.parametrize("path", [PAGE, BACKWARD, SHARDED], ids=["05", "05 backward", "05 sharded"])
def test_pages_refuse_gpus_older_than_compute_capability_8(path, monkeypatch):
    """Pallas' Triton backend needs compute capability 8.0 or newer: on an older GPU each page stops at once and says
    so, naming the GPU and its capability."""

    class OldGpu:
        device_kind, compute_capability = "Tesla T4", "7.5"

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda *a: [OldGpu()])
    monkeypatch.setattr(jax, "device_count", lambda *a: 1)
    source = path.read_text(encoding="utf-8")
    head = source[: source.index("\n# %%\n")]
    with pytest.raises(RuntimeError, match=r"compute capability 8\.0 or newer .*Tesla T4 has 7\.5"):
        exec(compile(head, str(path), "exec"), {"__name__": "tutorial_05_head"})
