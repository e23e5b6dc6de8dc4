"""Shared fixtures. Without a CUDA GPU the kernels run through Triton's interpreter on the CPU."""

import os
import pathlib
import runpy
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = pathlib.Path(__file__).resolve().parents[1]
# core pages in tutorials/, deep dives in tutorials/deep_dives/
TUTORIALS = sorted((ROOT / "tutorials").rglob("[0-9][0-9]_*.py"), key=lambda p: p.stem)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

_loaded = {}


def load_tutorial(stem):
    """Run the tutorial <stem>.py (a core page or a deep dive) once per test session, as a reader would,
    and return its globals."""
    if stem not in _loaded:
        (path,) = [p for p in TUTORIALS if p.stem == stem]
        _loaded[stem] = runpy.run_path(str(path), run_name=f"tutorial_{stem}")
    return _loaded[stem]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The whole site built with `make html` (every tutorial executed) into a fresh directory.

    Set SOL_BUILT_SITE=<dir> to reuse a build made beforehand (the directory holds html/).
    """
    reuse = os.environ.get("SOL_BUILT_SITE")
    if reuse:
        return pathlib.Path(reuse)
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        ["make", "-C", str(ROOT), "html", f"PYTHON={sys.executable}", f"BUILD={build}"],
        capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, f"make html failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return build
