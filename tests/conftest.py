"""Shared fixtures. Without a CUDA GPU the kernels run through Triton's interpreter on the CPU."""

import collections
import os
import pathlib
import runpy
import subprocess
import sys

import filelock
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
# dev/sanitize.sh sets SOL_TESTS_UNTIMED=1: each page then runs only up to the cell that defines its timer
# (``def bench``), so kernels, configs, drop-ins and correctness checks run and nothing is timed (a sanitizer
# slows every kernel 10-100x, and with PyTorch's caching allocator off a benchmark cannot capture its CUDA
# graphs); a test that needs a name from a later cell is skipped and says so.
UNTIMED = os.environ.get("SOL_TESTS_UNTIMED", "") not in ("", "0")


def untimed_source(source):
    """A page's source up to the start of the cell that defines ``bench`` (all of it where none does)."""
    timer = source.find("\ndef bench(")
    return source if timer < 0 else source[: source.rindex("# %%\n", 0, timer)]


class _UntimedPage(collections.UserDict):
    """A page's globals from its untimed cells, the dict its functions see (``data``); a name defined later
    skips the test that asks for it."""

    def __missing__(self, name):
        pytest.skip(f"{name!r} is defined in a timed cell of the page, not run with SOL_TESTS_UNTIMED=1",
                    allow_module_level=True)


def load_tutorial(stem):
    """Run the tutorial <stem>.py (a core page or a deep dive) once per test session, as a reader would,
    and return its globals (with SOL_TESTS_UNTIMED=1: of its cells before the benchmark)."""
    if stem not in _loaded:
        (path,) = [p for p in TUTORIALS if p.stem == stem]
        if UNTIMED:
            scope = {"__name__": f"tutorial_{stem}", "__file__": str(path)}
            exec(compile(untimed_source(path.read_text(encoding="utf-8")), str(path), "exec"), scope)
            _loaded[stem] = _UntimedPage()
            _loaded[stem].data = scope  # the same dict, not a copy: a test's monkeypatch reaches the page
        else:
            _loaded[stem] = runpy.run_path(str(path), run_name=f"tutorial_{stem}")
    return _loaded[stem]


class LazyTutorial:
    """A page's globals, loaded by load_tutorial on first use (not when pytest collects the test module): with
    several test workers (pytest-xdist) a page then runs only in the workers whose tests use it."""

    def __init__(self, stem):
        self.stem = stem

    def __getitem__(self, name):
        return load_tutorial(self.stem)[name]


def pytest_xdist_auto_num_workers(config):
    """`make test` passes `-n auto`: one test worker per core on a CPU-only machine, where Triton's interpreter
    keeps one core busy per process; no workers (one process) where a CUDA GPU is present, so that nothing else
    runs on the GPU while the site's build times its pages."""
    return 0 if torch.cuda.is_available() else max(1, len(os.sched_getaffinity(0)))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The whole site built with `make html` (every tutorial executed) into a fresh directory, once per test
    run: with several workers (pytest-xdist) the first to ask builds it under a file lock, and the others wait
    for it and share it, or share its failure.

    Set SOL_BUILT_SITE=<dir> to reuse a build made beforehand (the directory holds html/).
    """
    reuse = os.environ.get("SOL_BUILT_SITE")
    if reuse:
        return pathlib.Path(reuse)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above each worker's own
    build, failed = shared / "site-build", shared / "site-build.failed"
    with filelock.FileLock(str(shared / "site-build.lock")):
        if not (build / "html" / "index.html").exists() and not failed.exists():
            proc = subprocess.run(
                ["make", "-C", str(ROOT), "html", f"PYTHON={sys.executable}", f"BUILD={build}"],
                capture_output=True, text=True, timeout=1800,
            )
            if proc.returncode != 0:
                failed.write_text(f"make html failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}", encoding="utf-8")
    assert not failed.exists(), failed.read_text(encoding="utf-8")
    return build
