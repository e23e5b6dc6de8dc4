"""Deep dives 51 and 52 (RMSNorm through Mosaic GPU: the forward, the backward). Their kernels run on a CPU only in
Mosaic GPU's interpreter, which needs JAX 0.11.1 or newer and so Python 3.12; this repo's CPU machines run Python
3.11, where requirements.txt gives JAX 0.10.2. So ``tests/mosaic`` runs in a Python 3.12 venv of its own
(``.venv-mosaic``, made here once, with the JAX that requirements-gpu.lock pins for the GPU), or in this interpreter
where its JAX is new enough."""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import filelock
import pytest

from conftest import ROOT, SHOWN_NOT_RUN, sol_build

PAGE = ROOT / "tutorials" / "deep_dives" / "51_rms_norm_mosaic_gpu.py"
BACKWARD = ROOT / "tutorials" / "deep_dives" / "52_rms_norm_mosaic_gpu_backward.py"
NEEDED = sol_build.JAX_NEEDED[PAGE.stem]
assert sol_build.JAX_NEEDED[BACKWARD.stem] == NEEDED, "tests/mosaic runs both pages with one JAX"
VENV = ROOT / ".venv-mosaic"


def _jax_pin():
    """The JAX that the GPU runs (requirements-gpu.lock), for the venv's CPU build."""
    lock = (ROOT / "requirements-gpu.lock").read_text(encoding="utf-8")
    return re.search(r"^jax==(\S+)$", lock, re.M).group(1)


def _new_enough(python):
    probe = f"import jax, re, sys; sys.exit(tuple(int(p) for p in re.findall(r'\\d+', jax.__version__)[:3]) < {NEEDED})"
    return subprocess.run([python, "-c", probe], capture_output=True, timeout=300).returncode == 0


def _python_312():
    """An interpreter of Python 3.12 or newer that runs: one that pyenv keeps, or one on PATH (a pyenv shim on PATH
    may name a version that is not selected, and fail)."""
    found = sorted(map(str, pathlib.Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python3")))
    found += [p for p in (shutil.which(f"python3.{minor}") for minor in (12, 13)) if p]
    ok = "import sys; sys.exit(sys.version_info < (3, 12))"
    return next(
        (p for p in found if subprocess.run([p, "-c", ok], capture_output=True, timeout=60).returncode == 0), None
    )


def mosaic_python():
    """A Python whose JAX runs Mosaic GPU's interpreter: this one, or .venv-mosaic (made here, once)."""
    if PAGE.stem not in SHOWN_NOT_RUN:
        return sys.executable
    python, pin = VENV / "bin" / "python", _jax_pin()
    wanted = [f"jax=={pin}", f"jaxlib=={pin}", "numpy", "pandas", "matplotlib", "pytest"]  # the page's imports
    marker = VENV / (".installed-" + "-".join(wanted).replace("=", ""))
    with filelock.FileLock(str(VENV) + ".lock"):
        if not (python.exists() and marker.exists()):
            base = _python_312()
            if base is None:
                pytest.fail(
                    "deep dives 51 and 52's tests need Python 3.12 or newer (JAX >= 0.11.1): none found on "
                    "PATH or in ~/.pyenv; install one (pyenv install 3.12) and run make test again"
                )
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([base, "-m", "venv", str(VENV)], check=True, timeout=600)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], check=True, timeout=1200)
            marker.touch()
    return str(python)


def test_the_mosaic_gpu_kernels_in_the_interpreter():
    """tests/mosaic: the kernels against float64 with race detection, the drop-in, every H100 launch lowered."""
    python = mosaic_python()
    assert _new_enough(python), f"{python} has no JAX >= {NEEDED}"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            str(ROOT / "tests" / "mosaic"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--confcutdir",
            str(ROOT / "tests" / "mosaic"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=2400,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout) and " skipped" not in proc.stdout.splitlines()[-1], proc.stdout[
        -2000:
    ]


def test_the_exchange_on_a_gpu():
    """tests/mosaic/gpu_exchange.py: the backward whose cluster of two programs a row swap sums through SMEM, which the
    interpreter cannot run, on this machine's GPU against float64 and bit for bit twice."""
    probe = "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"
    if (
        PAGE.stem in SHOWN_NOT_RUN
        or subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300).returncode
    ):
        pytest.skip(f"needs a GPU and a JAX that runs Mosaic GPU (>= {NEEDED})")
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "tests" / "mosaic" / "gpu_exchange.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--confcutdir",
            str(ROOT / "tests" / "mosaic"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=1200,
    )
    assert proc.returncode == 0 and " skipped" not in proc.stdout.splitlines()[-1], (
        proc.stdout[-6000:] + proc.stderr[-3000:]
    )


def _functions(path, rename=None):
    """{name: source} of a page's top-level functions and assignments, with names renamed as `rename` says."""
    source = path.read_text(encoding="utf-8")
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.Assign)):
            name = node.name if isinstance(node, ast.FunctionDef) else ast.unparse(node.targets[0])
            text = ast.get_source_segment(source, node)
            for old, new in (rename or {}).items():
                text = re.sub(rf"\b{old}\b", new, text)
            found[name] = text
    return found


FORWARD_05, BACKWARD_05 = (
    ROOT / "tutorials" / f"{stem}.py" for stem in ("05_jax_rms_norm", "05_jax_rms_norm_backward")
)
# 51 and 52 carry 05's design past 05's range (wide-row kernels 05 hands to XLA); what they share with 05 is 05's, each
# name as the 05 page that teaches it has it: the forward page's helpers and constants, the backward page's dw sum
CARRIED_05 = {
    PAGE: {FORWARD_05: ["_tile", "MIN_ELEMENTS", "_warps", "_params"]},
    BACKWARD: {
        FORWARD_05: ["_tile", "MIN_ELEMENTS", "_warps", "_params"],
        BACKWARD_05: ["dw_sum_kernel", "WHOLE_ROW_N", "WARPS_PER_SM", "_sum_config"],
    },
}


@pytest.mark.parametrize("page", list(CARRIED_05), ids=lambda p: p.stem[:2])
def test_the_carried_05_kernels_are_05s(page):
    """What 51 and 52 are measured against shares 05's helpers, constants and dw sum letter for letter (05 names
    Pallas' Triton backend plgpu; 51 and 52, which also use Mosaic GPU, name it pltriton)."""
    ours = _functions(page)
    for core_page, names in CARRIED_05[page].items():
        core = _functions(core_page, {"plgpu": "pltriton"})
        for name in names:
            assert ours.get(name) is not None and ours.get(name) == core.get(name), (
                f"{page.stem[:2]}'s {name} is not {core_page.stem}'s"
            )


def test_52_carries_51s_forward():
    """52's drop-in runs 51's forward as 51 has it: the kernel, the tile constant, the hand-over's scratch, the launch
    rule (52 names it _forward_config, and its WARPGROUPS is 51's count for the interpreter)."""
    ours = _functions(BACKWARD)
    theirs = _functions(PAGE, {"_config": "_forward_config", "INTERPRET_WARPGROUPS": "WARPGROUPS"})
    for name in ("rms_norm_fwd", "LANES", "_hand_over_scratch", "_config", "MOSAIC_INTERPRET", "INTERPRET"):
        mine = "_forward_config" if name == "_config" else name
        assert ours.get(mine) is not None and ours.get(mine) == theirs.get(name), f"52's {mine} is not 51's {name}"
    assert ours["WARPGROUPS"].endswith("else 2") and _functions(PAGE)["INTERPRET_WARPGROUPS"].endswith("= 2")
