"""conf.py names no repository it was not told about: the theme's source links come from the build's
environment (GitHub Actions' GITHUB_SERVER_URL and GITHUB_REPOSITORY, or SOL_REPOSITORY_URL), and a
build without them (a local one) has none."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

_TOLD = ("SOL_REPOSITORY_URL", "GITHUB_REPOSITORY", "GITHUB_SERVER_URL")


CASES = {
    "local": ({}, None),
    "actions": ({"GITHUB_REPOSITORY": "someone/sol-fork", "GITHUB_SERVER_URL": "https://github.com"},
                "https://github.com/someone/sol-fork/"),
    "enterprise server": ({"GITHUB_REPOSITORY": "team/speed", "GITHUB_SERVER_URL": "https://ghe.example.com/"},
                          "https://ghe.example.com/team/speed/"),
    "repository only": ({"GITHUB_REPOSITORY": "someone/sol"}, "https://github.com/someone/sol/"),
    "explicit override": ({"SOL_REPOSITORY_URL": "https://git.example.org/me/sol", "GITHUB_REPOSITORY": "someone/sol"},
                          "https://git.example.org/me/sol/"),
    "empty": ({"GITHUB_REPOSITORY": "", "GITHUB_SERVER_URL": "https://github.com"}, None),
}


@pytest.fixture(scope="module")
def theme_options():
    """case -> conf.html_theme_options, conf.py imported afresh under exactly that case's variables (of the
    ones that name a repository; the rest of this environment is kept), in one new interpreter."""
    code = f"""
import importlib, json, os, sys
for name in {_TOLD!r}:
    os.environ.pop(name, None)
sys.path.insert(0, os.getcwd())
results = {{}}
for case, env in json.loads(sys.argv[1]).items():
    saved = dict(os.environ)
    os.environ.update(env)
    sys.modules.pop("conf", None)
    results[case] = importlib.import_module("conf").html_theme_options
    os.environ.clear()
    os.environ.update(saved)
print(json.dumps(results))
"""
    cases = json.dumps({case: env for case, (env, _) in CASES.items()})
    proc = subprocess.run([sys.executable, "-c", code, cases], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"importing conf.py failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_local_build_links_to_no_repository(theme_options):
    assert theme_options["local"] == {}, "with no repository named in the environment, the pages must link to none"


@pytest.mark.parametrize("case", list(CASES))
def test_the_repository_comes_from_the_environment(theme_options, case):
    env, url = CASES[case]
    options = theme_options[case]
    if url is None:
        assert options == {}, f"{env}: expected no source links, got {options}"
    else:
        assert options == {"source_repository": url, "source_branch": "main", "source_directory": "docs/"}, \
            f"{env}: expected links to {url}, got {options}"


def test_conf_names_no_repository_of_its_own():
    """No repository URL typed into conf.py (it named an organisation that does not exist)."""
    text = (ROOT / "conf.py").read_text(encoding="utf-8")
    assert "github.com/" not in text.replace('"https://github.com"', ""), "conf.py must not name a repository"


@pytest.fixture(scope="module")
def gallery_conf():
    """conf.sphinx_gallery_conf's notebook cell and memory hook, from conf.py imported in a new interpreter; where
    the hook is a function (a GPU), what it reports for a function that holds 64 MiB of GPU memory at its peak."""
    code = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import conf
hook = conf.sphinx_gallery_conf["show_memory"]
out = {"cell": conf.sphinx_gallery_conf["first_notebook_cell"], "hook": repr(hook) if not callable(hook) else "callable"}
if callable(hook):
    import torch
    def holds_64_mib():
        x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del x
        return "its value"
    out["measured"] = hook(holds_64_mib)
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"importing conf.py failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _top_level_imports(path):
    """The packages a tutorial imports unconditionally (at module level, outside try and if)."""
    import ast

    roots = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots - set(sys.stdlib_module_names)


def test_the_notebooks_first_cell_names_what_every_tutorial_imports(gallery_conf):
    """The pip line at the top of each downloaded notebook names each package a tutorial needs (jax: tutorial 05)."""
    from conftest import TUTORIALS

    pip_line = next(line for line in gallery_conf["cell"].splitlines() if "pip install" in line)
    named = set(pip_line.split("pip install", 1)[1].replace('"', " ").replace("[", " ").split())
    installed_with = {"jaxlib": "jax", "numpy": "pandas"}  # installed by a package the line names
    for path in TUTORIALS:
        for package in _top_level_imports(path):
            assert installed_with.get(package, package) in named, \
                f"{path.name} imports {package}, which the notebooks' first cell ({pip_line!r}) does not install"


def test_the_memory_column_is_the_gpus_peak_or_nothing(gallery_conf):
    """sphinx-gallery's show_memory: a function returning (MiB, the function's value) with a GPU, else off."""
    import torch

    if not torch.cuda.is_available():
        assert gallery_conf["hook"] == "False", "without a GPU there is no GPU memory to report"
        return
    mib, value = gallery_conf["measured"]
    assert value == "its value", "the hook must hand back the function's value"
    assert 64 <= mib < 64 + 256, f"a function holding 64 MiB at its peak was reported as {mib} MiB"


def test_every_tutorial_has_the_line_that_gets_its_reading_time():
    """conf.py writes '(about N min)' after the first '**What you will learn**' of each page's docstring: every page has
    one, however its lines break (a page reflowed into '**What you\\nwill learn**' once lost its reading time)."""
    import ast
    import re

    from conftest import TUTORIALS

    learn = re.search(r'^_LEARN = re.compile\((r".*?")\)', (ROOT / "conf.py").read_text(encoding="utf-8"), re.M)
    pattern = re.compile(ast.literal_eval(learn.group(1)))
    for path in TUTORIALS:
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
        assert len(pattern.findall(docstring)) == 1, f"{path.name}: no single '**What you will learn**' in its docstring"
    assert pattern.search("**What you\nwill learn**")
