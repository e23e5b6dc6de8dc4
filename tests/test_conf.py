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
