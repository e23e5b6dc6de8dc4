"""The notebooks a reader downloads (docs/_ext/sol_notebooks.py): Markdown cells without Sphinx markup, a first cell
that installs what its own page imports, the same notebook in the page's zip and at its published address, and
tutorial pages that link to Colab and to their script where the build knows the repository."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, TUTORIALS

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import sol_notebooks  # noqa: E402

STEMS = [p.stem for p in TUTORIALS]
SCRIPT = {p.stem: p for p in TUTORIALS}
# where each page sits in the gallery: "01_fused_softmax" or "deep_dives/11_softmax_long_rows"
WHERE = {p.stem: p.relative_to(ROOT / "tutorials").with_suffix("").as_posix() for p in TUTORIALS}

# Sphinx markup as a notebook must not show it (written here afresh, not taken from the module under test)
ROLE = re.compile(r"(?<![\w`]):(?:[a-z]+:)?[a-z][a-z0-9-]*:`")
DIRECTIVE = re.compile(r"^\s*\.\. [a-z][a-z-]*::", re.M)


def _notebook(built_site, stem):
    downloads = sorted((built_site / "html" / "_downloads").glob(f"*/{stem}.ipynb"))
    assert len(downloads) == 1, f"{stem}: {len(downloads)} downloadable notebooks, expected one"
    return downloads[0]


def _top_level_imports(path):
    """The pip names of the packages a script imports unconditionally (module level, outside try, if and def)."""
    roots = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return {{"jaxlib": "jax"}.get(r, r) for r in roots - set(sys.stdlib_module_names)}


def _installed(cell):
    """The package names of the cell's one %pip line that is not a comment."""
    (line,) = [ln for ln in cell.splitlines() if ln.startswith("%pip install")]
    return {re.split(r"[<>=!~\[;]", word.strip("\"'"))[0] for word in line.split()[2:] if not word.startswith("-")}


def _floors():
    """{name: the lowest version requirements.txt accepts (of its lines for the name)}."""
    found = {}
    for name, version in re.findall(r"^([a-z][a-z0-9_-]*)>=([0-9.]+)", (ROOT / "requirements.txt").read_text(), re.M):
        key = tuple(map(int, version.split(".")))
        if name not in found or key < tuple(map(int, found[name].split("."))):
            found[name] = version
    return found


def _lock():
    found = {}
    for line in (ROOT / "requirements-gpu.lock").read_text(encoding="utf-8").splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s+;]+)", line)
        if match:
            found[match[1].lower().replace("_", "-")] = match[2]
    return found


# ---- the first cell, for every page (no build needed) ----


@pytest.mark.parametrize("stem", STEMS)
def test_the_first_cell_installs_what_its_page_imports_and_speaks_of_it_only(stem):
    import sol_build

    path = SCRIPT[stem]
    cell = sol_notebooks.install_cell(
        path, ROOT / "requirements.txt", ROOT / "requirements-gpu.lock", sol_build.JAX_NEEDED.get(stem)
    )
    imports, first_cell = _top_level_imports(path), cell
    assert _installed(cell) == imports, f"{stem}: the %pip line installs {_installed(cell)}, the page imports {imports}"
    assert "%pip install -q " in cell
    jax_page = "jax" in imports
    assert bool(re.search(r"\bjax\b", cell, re.I)) == jax_page, f"{stem}: JAX is named on JAX pages only:\n{cell}"
    assert not re.search(r"\b(tutorials?|pages?|deep dives?) \d\d\b", cell, re.I), f"{stem} names other pages:\n{cell}"
    assert all(len(line) <= 120 for line in cell.splitlines()), cell
    lock = _lock()
    cell = cell.replace("\n# ", " ")  # the comments' sentences, unwrapped
    if jax_page:
        assert f"JAX {lock['jax']}" in cell and "On Colab JAX is already installed" in cell, cell
        assert "interpreter" in cell and "not timings" in cell, cell
    else:
        for name, shown in (("torch", "torch"), ("triton", "Triton")):
            assert f"{shown} {lock[name].split('+')[0]}" in cell, f"{stem}: the cell does not name {shown}'s version"
        assert "On Colab torch and Triton are already installed" in cell, cell
        assert "Triton's interpreter" in cell and "not timings" in cell, cell
    # each at the lowest version requirements.txt accepts (the page's own, where it needs a newer JAX), so that
    # an installed package that is new enough (Colab's torch and Triton) is kept as it is
    (line,) = [ln for ln in cell.splitlines() if ln.startswith("%pip install")]
    for name in imports:
        floor = (
            ".".join(map(str, sol_build.JAX_NEEDED[stem]))
            if name == "jax" and stem in sol_build.JAX_NEEDED
            else _floors()[name]
        )
        assert f'"{name}>={floor}"' in line.split(), f"{stem}: {name} not at least {floor}: {line}"
    optional = {"liger_kernel": "liger-kernel", "quack": "quack-kernels", "helion": "helion"}
    text = path.read_text(encoding="utf-8")
    optional_line = re.search(r"^# %pip install -q (.*)$", first_cell, re.M)
    optional_names = (
        {re.split(r"[<>=\[]", t.strip('"'))[0] for t in optional_line[1].split()} if optional_line else set()
    )
    for module, name in optional.items():
        imported = re.search(rf"^\s+(import|from) {module}\b", text, re.M) or re.search(
            rf"\b({'|'.join(sol_notebooks.PEER_LOADERS)})\(\"[^\"]+\", \"{module}[.\"]", text
        )
        named = name in optional_names  # the commented install line's packages
        assert named == bool(imported), f"{stem}: the optional peer {name} named where the page loads it"


def test_the_reader_requirements_are_the_versions_the_site_is_built_with():
    """requirements-reader.txt: torch, Triton, pandas, matplotlib at the lock's versions; NumPy below 2.4 where Triton
    is older than 3.8, whose interpreter (the pages on a CPU) converts a one-element array to an int, which NumPy 2.4
    refuses."""
    lock = _lock()
    pins = dict(re.findall(r"^([a-z][a-z0-9_-]*)==([^\s;]+)", (ROOT / "requirements-reader.txt").read_text(), re.M))
    assert set(pins) == {"torch", "triton", "numpy", "pandas", "matplotlib"}, pins
    for name, pin in pins.items():
        if name != "numpy":
            assert pin == lock[name].split("+")[0], f"{name}: {pin} in requirements-reader.txt, {lock[name]} locked"
    version = lambda name: tuple(int(p) for p in pins[name].split(".")[:2])  # noqa: E731
    if version("triton") < (3, 8):  # 3.8 squeezes the array first
        assert version("numpy") < (2, 4), f"NumPy {pins['numpy']} with Triton {pins['triton']}'s interpreter"


# ---- the Markdown converter ----


def _resolve(site=None):
    pages = {
        "sphx_glr_tutorials_deep_dives_13_launch_heuristics.py": ("Launch parameters", "tutorials/deep_dives/13"),
        "sphx_glr_tutorials_04_rms_norm.py": ("RMSNorm", "tutorials/04"),
    }

    def resolve(kind, target):
        if kind == "doc":
            return ("RMSNorm", site and f"{site}tutorials/04.html") if target.endswith("04") else None
        if target not in pages:
            return None
        title, doc = pages[target]
        return title, site and f"{site}{doc}.html"

    return resolve


SITE = "https://example.org/sol/"
CASES = [
    ("a drop-in for :func:`torch.softmax`, :meth:`Tensor.sum`", "a drop-in for `torch.softmax()`, `Tensor.sum()`"),
    (":class:`torch.autograd.Function` and :py:class:`~torch.nn.Module`", "`torch.autograd.Function` and `Module`"),
    (":func:`the softmax <torch.softmax>`", "`the softmax`"),
    ("For a row :math:`x` of length :math:`N`", "For a row $x$ of length $N$"),
    ("``torch.compile`` and ``a`b``", "`torch.compile` and `` a`b ``"),
    (
        "see :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py`.",
        f"see [Launch parameters]({SITE}tutorials/deep_dives/13.html).",
    ),
    ("see `sphx_glr_tutorials_04_rms_norm.py`.", f"see [RMSNorm]({SITE}tutorials/04.html)."),  # sphinx-gallery's form
    (":ref:`this one <sphx_glr_tutorials_04_rms_norm.py>`", f"[this one]({SITE}tutorials/04.html)"),
    (":doc:`../04`", f"[RMSNorm]({SITE}tutorials/04.html)"),
    ("a\n\n.. math::\n\n   y = x\n\nb", "a\n\n$$y = x$$\n\nb"),
    ("a\n\n\\begin{align}y = x\\end{align}\n\nb", "a\n\n$$y = x$$\n\nb"),  # sphinx-gallery's form
    ("\\begin{align}a &= b \\\\\n   c &= d\\end{align}", "$$\\begin{aligned}a &= b \\\\\nc &= d\\end{aligned}$$"),
    ("```python\n:func:`kept` in code\n```\n", "```python\n:func:`kept` in code\n```\n"),
    ("[text](https://example.org)_ and :abbr:`SM (streaming multiprocessor)`", "[text](https://example.org) and SM"),
    ("`plain interpreted text` stays", "`plain interpreted text` stays"),
]


@pytest.mark.parametrize("rst, markdown", CASES)
def test_markdown_without_sphinx_markup(rst, markdown):
    assert sol_notebooks.to_markdown(rst, _resolve(SITE)) == markdown


def test_a_reference_without_the_sites_address_is_the_pages_title():
    text = "see :ref:`sphx_glr_tutorials_deep_dives_13_launch_heuristics.py` and `sphx_glr_tutorials_04_rms_norm.py`"
    assert sol_notebooks.to_markdown(text, _resolve(None)) == "see *Launch parameters* and *RMSNorm*"


def test_rewriting_a_notebook_again_starts_from_sphinx_gallerys(tmp_path):
    """A second pass (a later build that did not make the page again) gives the same notebook, or, for a site at
    another address, the same notebook linking there; the page's zip holds the notebook as rewritten."""
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["see `sphx_glr_tutorials_04_rms_norm.py`"]},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": ["1"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 0,
    }
    path = tmp_path / "p.ipynb"
    path.write_text(json.dumps(nb, indent=2))
    with zipfile.ZipFile(tmp_path / "p.zip", "w") as z:
        z.writestr("p.py", "print(1)")
        z.writestr("p.ipynb", path.read_text())
    assert sol_notebooks.rewrite_notebook(path, "%pip install -q torch", _resolve(SITE))
    first = path.read_text()
    assert not sol_notebooks.rewrite_notebook(path, "%pip install -q torch", _resolve(SITE)), "a second pass changed it"
    assert path.read_text() == first
    cells = json.loads(first)["cells"]
    assert [c["cell_type"] for c in cells] == ["code", "markdown", "code"], "one first cell, added once"
    assert "".join(cells[0]["source"]) == "%pip install -q torch"
    assert "".join(cells[1]["source"]) == f"see [RMSNorm]({SITE}tutorials/04.html)"
    with zipfile.ZipFile(tmp_path / "p.zip") as z:
        assert z.read("p.ipynb").decode() == first and z.read("p.py") == b"print(1)"
    sol_notebooks.rewrite_notebook(path, "%pip install -q torch", _resolve(None))
    assert "".join(json.loads(path.read_text())["cells"][1]["source"]) == "see *RMSNorm*"


# ---- links ----


def test_colab_opens_notebooks_from_github_only():
    link = sol_notebooks.colab_link("https://github.com/someone/sol/", "gh-pages", "notebooks/tutorials/01_x.ipynb")
    assert link == "https://colab.research.google.com/github/someone/sol/blob/gh-pages/notebooks/tutorials/01_x.ipynb"
    assert sol_notebooks.colab_link("https://ghe.example.com/team/sol/", "gh-pages", "n.ipynb") is None
    assert sol_notebooks.colab_link("https://gitlab.com/team/sol/", "gh-pages", "n.ipynb") is None
    assert sol_notebooks.file_links("https://github.com/a/b/", "main", "tutorials/x.py") == (
        "https://github.com/a/b/blob/main/tutorials/x.py",
        "https://github.com/a/b/edit/main/tutorials/x.py",
    )
    assert (
        sol_notebooks.file_links("https://gitlab.com/a/b/", "main", "x.py")[0]
        == "https://gitlab.com/a/b/-/blob/main/x.py"
    )


def _page_links(text):
    """{label: href} of the page's Run in Colab and View source links (the top ones and the buttons at the end)."""
    return re.findall(r'<a class="reference external" href="([^"]+)">(Run in Colab|View source)', text)


def _furo_icons(text):
    return re.findall(r'<div class="(view|edit)-this-page">\s*<a class="muted-link" href="([^"]+)"', text)


@pytest.fixture(scope="module")
def linked_site(tmp_path_factory):
    """A build without running the pages (html-noplot) of a copy of the repository with two pages, told its
    repository (SOL_REPOSITORY_URL) and the site's address (SOL_SITE_URL)."""
    root = tmp_path_factory.mktemp("linked")
    for name in ("conf.py", "requirements.txt", "requirements-gpu.lock"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(
        ROOT / "docs",
        root / "docs",
        ignore=shutil.ignore_patterns("tutorials", "_generated", "sg_execution_times.rst", "__pycache__"),
    )
    pages = ["README.rst", "01_fused_softmax.py", "deep_dives/README.txt", "deep_dives/13_launch_heuristics.py"]
    for page in pages:
        (root / "tutorials" / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tutorials" / page, root / "tutorials" / page)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOL_", "GITHUB_"))}
    env.update(SOL_REPOSITORY_URL="https://github.com/example/speed-of-light", SOL_SITE_URL="https://example.org/sol")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-c",
            str(root),
            "-D",
            "plot_gallery=0",
            str(root / "docs"),
            str(root / "_build" / "html"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root / "_build" / "html"


@pytest.mark.parametrize("where", ["01_fused_softmax", "deep_dives/13_launch_heuristics"])
def test_a_build_told_its_repository_links_each_page_to_colab_and_its_script(linked_site, where):
    text = (linked_site / "tutorials" / f"{where}.html").read_text(encoding="utf-8")
    colab = (
        "https://colab.research.google.com/github/example/speed-of-light/blob/gh-pages/notebooks/tutorials/"
        f"{where}.ipynb"
    )
    source = f"https://github.com/example/speed-of-light/blob/main/tutorials/{where}.py"
    links = _page_links(text)
    assert links.count((colab, "Run in Colab")) == 2, f"Run in Colab above the title and at the end: {links}"
    assert links.count((source, "View source")) == 2, f"View source above the title and at the end: {links}"
    assert dict(_furo_icons(text)) == {"view": source, "edit": source.replace("/blob/", "/edit/")}, (
        "furo's icons must open the page's script, not the generated .rst"
    )
    published = linked_site / "notebooks" / "tutorials" / f"{where}.ipynb"
    assert published.is_file(), "Colab's link opens the notebook the site publishes at notebooks/tutorials/"


def test_a_build_told_its_repository_points_other_pages_at_their_own_files(linked_site):
    icons = dict(_furo_icons((linked_site / "index.html").read_text(encoding="utf-8")))
    assert icons["view"] == "https://github.com/example/speed-of-light/blob/main/docs/index.rst"
    icons = dict(_furo_icons((linked_site / "tutorials" / "index.html").read_text(encoding="utf-8")))
    assert icons["view"] == "https://github.com/example/speed-of-light/blob/main/tutorials/README.rst"
    times = (linked_site / "sg_execution_times.html").read_text(encoding="utf-8")
    assert not _furo_icons(times), "a page the build generates has no source in the repository to open"


def test_a_notebook_links_another_page_on_the_sites_address(linked_site):
    nb = json.loads((linked_site / "notebooks" / "tutorials" / "01_fused_softmax.ipynb").read_text(encoding="utf-8"))
    markdown = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "](https://example.org/sol/tutorials/deep_dives/13_launch_heuristics.html)" in markdown


# ---- the built site's notebooks ----


@pytest.mark.parametrize("stem", STEMS)
def test_a_notebooks_markdown_cells_carry_no_sphinx_markup(built_site, stem):
    nb = json.loads(_notebook(built_site, stem).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # fenced code shows what it shows
        for name, pattern in (
            ("a role", ROLE),
            ("a label", re.compile("sphx_glr_")),
            ("a directive", DIRECTIVE),
            ("sphinx-gallery's align block", re.compile(r"\\begin\{align\}")),
        ):
            found = pattern.search(prose)
            where = prose[max(0, found.start() - 80) : found.end() + 80] if found else ""
            assert not found, f"{stem}: {name} left in a Markdown cell: ...{where}..."


@pytest.mark.parametrize("stem", STEMS)
def test_a_notebooks_first_cell_installs_what_its_page_imports(built_site, stem):
    nb = json.loads(_notebook(built_site, stem).read_text(encoding="utf-8"))
    first = nb["cells"][0]
    assert first["cell_type"] == "code", f"{stem}: the notebook does not open with its install cell"
    cell = "".join(first["source"])
    imports = _top_level_imports(SCRIPT[stem])
    assert _installed(cell) == imports, f"{stem}: installs {_installed(cell)}, imports {imports}"
    assert bool(re.search(r"\bjax\b", cell, re.I)) == ("jax" in imports), f"{stem}: JAX on JAX pages only:\n{cell}"
    installing = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and re.search(r"^%pip install", "".join(c["source"]), re.M)
    ]
    assert installing == [0], f"{stem}: one install cell, the first (cells {installing} install)"


@pytest.mark.parametrize("stem", STEMS)
def test_the_download_the_zip_and_the_published_notebook_are_one(built_site, stem):
    download = _notebook(built_site, stem)
    published = built_site / "html" / "notebooks" / "tutorials" / f"{WHERE[stem]}.ipynb"
    assert published.is_file(), f"{stem}: not published at {published.relative_to(built_site)}"
    assert published.read_bytes() == download.read_bytes()
    zips = sorted((built_site / "html" / "_downloads").glob(f"*/{stem}.zip"))
    assert zips, f"{stem}: no zip download"
    with zipfile.ZipFile(zips[0]) as z:
        assert z.read(f"{stem}.ipynb") == download.read_bytes(), f"{stem}: the zip holds another notebook"


def test_the_built_pages_link_to_colab_and_their_scripts_all_or_none(built_site):
    """Where the build knew its repository every tutorial page links to Colab and to its script (above its title
    and at its end), else none does; a build of this run (not SOL_BUILT_SITE) knew it from this environment."""
    linked = {}
    for stem in STEMS:
        text = (built_site / "html" / "tutorials" / f"{WHERE[stem]}.html").read_text(encoding="utf-8")
        links = _page_links(text)
        linked[stem] = bool(links)
        for url, label in links:
            assert url.endswith(
                f"tutorials/{WHERE[stem]}.ipynb" if label == "Run in Colab" else f"tutorials/{WHERE[stem]}.py"
            ), f"{stem}: {label} opens {url}"
    assert len(set(linked.values())) == 1, f"some pages link to Colab and their source, others do not: {linked}"
    if not os.environ.get("SOL_BUILT_SITE"):
        told = bool(os.environ.get("SOL_REPOSITORY_URL", "").strip() or os.environ.get("GITHUB_REPOSITORY", "").strip())
        assert set(linked.values()) == {told}, "the pages link to a repository if and only if the build was told one"


FOLDED_PAGE = """Title
=====

Intro.

.. code-block:: Python

    x = 1

Appendix: how this page measures
--------------------------------
What the page runs but does not teach.

.. code-block:: Python

    import os
{code}

.. rst-class:: sphx-glr-script-out

 .. code-block:: none

    quack: not measured here (not installed).

.. code-block:: Python

    short = 1

Correctness
-----------

.. code-block:: Python

{code}
"""


def test_the_appendix_folds_its_long_code_blocks_only():
    """In a page's appendix, each code block of FOLD_FROM lines or more sits in a closed <details>; its prose, its
    printed output, its short blocks and every section before and after it are left as they are."""
    code = "\n".join(f"    line_{i} = {i}" for i in range(sol_notebooks.FOLD_FROM))
    page = FOLDED_PAGE.format(code=code)
    folded = sol_notebooks.fold_appendix_code(page)
    opened = '   <details class="sol-fold"><summary>The measuring code, 11 lines'
    assert folded.count("sol-fold") == 1 and opened in folded, folded
    start, end = folded.index(opened), folded.index("   </details>")
    inside = folded[start:end]
    assert "import os" in inside and "line_0 = 0" in inside and "not measured" not in inside
    assert "short = 1" in folded[end:] and "What the page runs" in folded[:start], "prose or a short block folded"
    after = folded[folded.index("Correctness") :]
    assert after == page[page.index("Correctness") :], "the section after the appendix changed"
    assert sol_notebooks.fold_appendix_code(page.replace("Appendix: how", "Notes: how")) == page.replace(
        "Appendix: how", "Notes: how"
    ), "a page without the appendix changed"
