"""requirements-gpu.lock (what the GPU runner installs, at exact versions) against requirements.txt (the
ranges a reader installs): every package a reader's install asks for on the runner's Python (3.12, Linux
x86-64) is pinned in the lock, at a version inside requirements.txt's range, once. Checked on the text of the
two files: no network, no install. pip check on the runner checks the lock's transitive needs."""

import re

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

RUNNER = default_environment() | {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
}


def _pins():
    pins = {}
    for line in (ROOT / "requirements-gpu.lock").read_text().splitlines():
        if line.strip() and not line.startswith(("#", "-")):
            name, version = line.split("==")
            assert canonicalize_name(name) not in pins, f"{name} is pinned twice"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_requirement_is_pinned_inside_its_range():
    pins = _pins()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(RUNNER):
            continue  # for another Python
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (requirements.txt) is not in requirements-gpu.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"the lock pins {req.name}=={pins[name]}, outside requirements.txt's {req.specifier}"
        )


def test_the_gpu_build_gets_its_gpu_only_peers():
    """quack's kernels run only on the GPU and stay out of requirements.txt; the runner gets them from the lock,
    with the CUDA 13 libraries of the CuTe DSL (the driver's CUDA) and the JAX CUDA plugin."""
    pins = _pins()
    for name in ("quack-kernels", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13", "jax-cuda13-plugin"):
        assert name in pins, f"{name} is not in requirements-gpu.lock"
    assert re.fullmatch(r"\d+\.\d+\.\d+\+cu\d+", pins["torch"]), f"torch {pins['torch']} is not a CUDA build"
