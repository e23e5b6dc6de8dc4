"""conf.py names no repository it was not told about: the theme's source links come from the build's
environment (GitHub Actions' GITHUB_SERVER_URL and GITHUB_REPOSITORY, or SOL_REPOSITORY_URL), and a
build without them (a local one) has none; nor a site address (SOL_SITE_URL, or GitHub Pages' for a repository
on github.com that Actions builds)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

_TOLD = ("SOL_REPOSITORY_URL", "SOL_SITE_URL", "SOL_NOTEBOOKS_BRANCH", "GITHUB_REPOSITORY", "GITHUB_SERVER_URL")


CASES = {
    "local": ({}, None),
    "actions": (
        {"GITHUB_REPOSITORY": "someone/sol-fork", "GITHUB_SERVER_URL": "https://github.com"},
        "https://github.com/someone/sol-fork/",
    ),
    "enterprise server": (
        {"GITHUB_REPOSITORY": "team/speed", "GITHUB_SERVER_URL": "https://ghe.example.com/"},
        "https://ghe.example.com/team/speed/",
    ),
    "repository only": ({"GITHUB_REPOSITORY": "someone/sol"}, "https://github.com/someone/sol/"),
    "explicit override": (
        {"SOL_REPOSITORY_URL": "https://git.example.org/me/sol", "GITHUB_REPOSITORY": "someone/sol"},
        "https://git.example.org/me/sol/",
    ),
    "empty": ({"GITHUB_REPOSITORY": "", "GITHUB_SERVER_URL": "https://github.com"}, None),
}

# the site's address: where a notebook's link to another page goes (conf.html_baseurl; "" where unknown)
SITE_CASES = {
    "site, local": ({}, ""),
    "site, actions": (
        {"GITHUB_REPOSITORY": "Someone/sol-fork", "GITHUB_SERVER_URL": "https://github.com"},
        "https://someone.github.io/sol-fork/",
    ),
    "site, a user site": ({"GITHUB_REPOSITORY": "someone/Someone.github.io"}, "https://someone.github.io/"),
    "site, enterprise server": (
        {"GITHUB_REPOSITORY": "team/speed", "GITHUB_SERVER_URL": "https://ghe.example.com"},
        "",
    ),
    "site, explicit": (
        {"SOL_SITE_URL": "https://docs.example.org/sol", "GITHUB_REPOSITORY": "someone/sol"},
        "https://docs.example.org/sol/",
    ),
}


@pytest.fixture(scope="module")
def configured():
    """case -> conf.html_theme_options, conf.html_baseurl and the notebooks' settings, conf.py imported afresh under
    exactly that case's variables (of the ones that name a repository or a site; the rest of this environment is
    kept), in one new interpreter."""
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
    conf = importlib.import_module("conf")
    results[case] = {{"theme": conf.html_theme_options, "site": conf.html_baseurl,
                     "repository": conf.sol_repository_url, "notebooks_branch": conf.sol_notebooks_branch}}
    os.environ.clear()
    os.environ.update(saved)
print(json.dumps(results))
"""
    cases = json.dumps({case: env for case, (env, _) in {**CASES, **SITE_CASES}.items()})
    proc = subprocess.run([sys.executable, "-c", code, cases], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"importing conf.py failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_local_build_links_to_no_repository(configured):
    assert configured["local"]["theme"] == {}, "with no repository named in the environment, no page links to one"
    assert configured["local"]["repository"] is None, "nor Colab and source links (docs/_ext/sol_notebooks.py)"


@pytest.mark.parametrize("case", list(CASES))
def test_the_repository_comes_from_the_environment(configured, case):
    env, url = CASES[case]
    options = configured[case]["theme"]
    if url is None:
        assert options == {}, f"{env}: expected no source links, got {options}"
    else:
        assert options == {"source_repository": url, "source_branch": "main", "source_directory": "docs/"}, (
            f"{env}: expected links to {url}, got {options}"
        )
    assert configured[case]["repository"] == url, "the tutorials' Colab and source links name the same repository"
    assert configured[case]["notebooks_branch"] == "gh-pages"


@pytest.mark.parametrize("case", list(SITE_CASES))
def test_the_sites_address_comes_from_the_environment(configured, case):
    env, url = SITE_CASES[case]
    assert configured[case]["site"] == url, f"{env}: expected the site at {url!r}, got {configured[case]['site']!r}"


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
out = {"cell": conf.sphinx_gallery_conf["first_notebook_cell"], "extensions": conf.extensions,
       "hook": repr(hook) if not callable(hook) else "callable"}
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


def test_each_notebook_gets_its_own_pages_first_cell(gallery_conf):
    """No first cell common to every notebook (one cell spoke of every page's packages and needs): sphinx-gallery adds
    none, and docs/_ext/sol_notebooks.py gives each notebook one that installs what its page imports
    (tests/test_notebooks_markup.py)."""
    assert gallery_conf["cell"] is None, "sphinx-gallery's first_notebook_cell would be the same in every notebook"
    assert "sol_notebooks" in gallery_conf["extensions"]


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
        assert len(pattern.findall(docstring)) == 1, (
            f"{path.name}: no single '**What you will learn**' in its docstring"
        )
    assert pattern.search("**What you\nwill learn**")


def test_the_build_names_one_triton_cache_before_any_page_runs():
    """Inductor and Helion each set TRITON_CACHE_DIR at their first kernel where it is unset, moving a page's later
    kernels to another folder: conf.py names one first, and keeps one the caller named."""
    code = "import os, sys; sys.path.insert(0, os.getcwd()); import conf; print(os.environ['TRITON_CACHE_DIR'])"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
    unset = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert unset.returncode == 0, unset.stderr[-3000:]
    assert unset.stdout.strip().splitlines()[-1] == os.path.join(os.path.expanduser("~"), ".triton", "cache")
    named = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "TRITON_CACHE_DIR": "/tmp/mine"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert named.stdout.strip().splitlines()[-1] == "/tmp/mine", named.stderr[-3000:]
