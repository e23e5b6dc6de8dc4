"""Shared fixtures. Without a CUDA GPU the kernels run through Triton's interpreter on the CPU."""

import collections
import math
import os
import pathlib
import subprocess
import sys
import types

import filelock
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = pathlib.Path(__file__).resolve().parents[1]
# as the site's build (conf.py): a page that measures Helion on a GPU runs each point at the config stored for it
os.environ.setdefault("SOL_HELION_CONFIGS", str(ROOT / "docs" / "helion_configs.json"))
# and never autotunes a point with no stored config (a quick search is tens of seconds a point): such a point is not
# measured, as in the build; the tests of the autotuning itself allow it where they need it
os.environ.setdefault("SOL_HELION_AUTOTUNE", "0")

# core pages in tutorials/, deep dives in tutorials/deep_dives/
TUTORIALS = sorted((ROOT / "tutorials").rglob("[0-9][0-9]_*.py"), key=lambda p: p.stem)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# tests/mosaic needs JAX >= 0.11.1 (Python 3.12): tests/test_rms_norm_mosaic_gpu.py runs it in a venv of its own
collect_ignore = ["mosaic"]

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import sol_build  # noqa: E402

# Pages the build shows without running them (this JAX is too old for them): the tests of what a page's run made
# skip them
SHOWN_NOT_RUN = sol_build.shown_not_run()

_loaded = {}
# A page loads in two steps: its cells up to the one that defines its timer (``def bench``: kernels, configs,
# drop-ins, correctness checks), then the rest (the benchmark, tables, plots) only when a test asks for a name
# that only the rest defines. Most tests need only the first step, so most pages' benchmarks do not run twice
# (the site's build runs them). dev/sanitize.sh sets SOL_TESTS_UNTIMED=1: the rest never runs (a sanitizer slows
# every kernel 10-100x, and with PyTorch's caching allocator off a benchmark cannot capture its CUDA graphs), and
# a test that needs a name from it is skipped and says so.
UNTIMED = os.environ.get("SOL_TESTS_UNTIMED", "") not in ("", "0")


def untimed_source(source):
    """A page's source up to the start of the cell that defines ``bench`` (all of it where none does)."""
    timer = source.find("\ndef bench(")
    return source if timer < 0 else source[: source.rindex("# %%\n", 0, timer)]


class _Page(collections.UserDict):
    """A page's globals (``data``: the dict its functions see) after its untimed cells; a name that only its
    timed cells define runs them first, into the same dict (with SOL_TESTS_UNTIMED=1 it skips the test)."""

    def __init__(self, path, scope, rest):
        super().__init__()
        self.data, self.path, self.rest, self.failed = scope, path, rest, None

    def __missing__(self, name):
        if UNTIMED:
            pytest.skip(
                f"{name!r} is defined in a timed cell of the page, not run with SOL_TESTS_UNTIMED=1",
                allow_module_level=True,
            )
        if self.failed is not None:  # the timed cells stopped: every later test says where, not a bare KeyError
            raise RuntimeError(f"{self.path.name}'s timed cells failed before defining {name!r}") from self.failed
        if self.rest is None:  # the whole page has run: the name is nowhere
            raise KeyError(name)
        rest, self.rest = self.rest, None
        try:
            exec(compile(rest, str(self.path), "exec"), self.data)  # padded: the file's own line numbers
        except BaseException as err:
            self.failed = err
            raise
        return self.data[name]


def load_tutorial(stem):
    """Run the tutorial <stem>.py (a core page or a deep dive) once per test session, as a reader would, up to
    its timer, and return its globals (``_Page``: the rest runs when a test asks for a name it defines)."""
    if stem not in _loaded:
        (path,) = [p for p in TUTORIALS if p.stem == stem]
        _loaded[stem] = load_page(path)
    return _loaded[stem]


def load_page(path):
    """A page's ``_Page``: its cells up to its timer run now, the rest when a test asks for a name they define."""
    source = path.read_text(encoding="utf-8")
    head = untimed_source(source)
    # the page's globals are a module's, registered as such: torch.compile looks a traced function's module up by name
    module = types.ModuleType(f"tutorial_{path.stem}")
    module.__file__, scope = str(path), module.__dict__
    sys.modules[module.__name__] = module
    exec(compile(head, str(path), "exec"), scope)
    rest = "\n" * head.count("\n") + source[len(head) :] if len(head) < len(source) else None
    return _Page(path, scope, rest)


# The edge-case tests (tests/test_edges_*.py) pass views of tensors fenced by NaNs: a kernel that reads outside a
# view's elements shows it in its result
def fenced(shape, dtype, seed=0, values=None, offset=7):
    """A leaf tensor of `shape` (values: given, or standard normal) whose storage starts `offset` elements into a
    buffer of NaNs that goes on past its end."""
    n = math.prod(shape)
    values = torch.randn(n, generator=torch.Generator().manual_seed(seed)) if values is None else values
    buffer = torch.full((n + offset + 64,), float("nan"), dtype=dtype)
    buffer[offset : offset + n] = values.reshape(-1).to(dtype)
    return buffer.to(DEVICE)[offset : offset + n].view(shape).detach()


class LazyTutorial:
    """A page's globals, loaded by load_tutorial on first use (not when pytest collects the test module): with
    several test workers (pytest-xdist) a page then runs only in the workers whose tests use it."""

    def __init__(self, stem):
        self.stem = stem

    def __getitem__(self, name):
        return load_tutorial(self.stem)[name]


def pytest_xdist_auto_num_workers(config):
    """`make test` passes `-n auto`: one test worker per core on a CPU-only machine, where Triton's interpreter
    keeps one core busy per process. Where a CUDA GPU is present, no workers (one process), so that nothing else
    runs on the GPU while the site's build times its pages; but 8 where the run builds no site (SOL_BUILT_SITE:
    no test times anything)."""
    cores = max(1, len(os.sched_getaffinity(0)))
    if torch.cuda.is_available():
        return min(8, cores) if os.environ.get("SOL_BUILT_SITE") else 0
    return cores


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
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if proc.returncode != 0:
                failed.write_text(f"make html failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}", encoding="utf-8")
    assert not failed.exists(), failed.read_text(encoding="utf-8")
    return build
