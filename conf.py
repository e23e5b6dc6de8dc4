"""Sphinx configuration for the Speed of Light tutorials.

The sources live in ``docs/``; the tutorials are sphinx-gallery scripts in ``tutorials/`` that are
executed at build time (``make html``) or only rendered (``make html-noplot``).
"""

import datetime
import gc
import html
import os
import pathlib
import re
import sys

from docutils import nodes
from docutils.utils.math import latex2mathml
from sphinx.util import logging

# Without a CUDA GPU the tutorials run their Triton kernels through Triton's interpreter on the CPU.
# The variable has to be set before Triton is first imported, so it is set here, before any tutorial.
# Each page runs in a forked child of this process (docs/_ext/sol_build.py), so this process must not start CUDA
# (a child cannot use CUDA its parent started): it asks NVML whether there is a GPU.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # html-noplot needs no torch
    torch = None
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:
    # JAX (tutorial 05) keeps compiled programs only where told: a later build reuses them, as Triton's and Inductor's
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(pathlib.Path.home() / ".cache" / "speed-of-light" / "jax"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")
# One Triton cache for all of a page's kernels, named before any page runs: where none is named, Inductor
# (torch.compile) and Helion each point Triton at a folder of their own when they compile their first kernel, so the
# folder a page's own kernels are stored in and looked up in changed within the page, with what ran before them, and
# the timed pass did not always find what the warm-up pass had compiled (docs/_ext/sol_build.py)
os.environ.setdefault("TRITON_CACHE_DIR", str(pathlib.Path.home() / ".triton" / "cache"))
# The Helion configs dev/helion_tune.py tuned for each GPU: a page that measures Helion runs each point at its stored
# config, and autotunes only the points stored for none (a page run alone, with no such file named, autotunes them all)
_HELION_CONFIGS = pathlib.Path(__file__).resolve().parent / "docs" / "helion_configs.json"
if _HELION_CONFIGS.is_file():
    os.environ.setdefault("SOL_HELION_CONFIGS", str(_HELION_CONFIGS))
# The hardware counters dev/counters.py measured with Nsight Compute on each GPU: the landing page shows them beside the
# rows that miss a target (docs/_ext/sol_results.py)
_COUNTERS = pathlib.Path(__file__).resolve().parent / "docs" / "counters.json"
if _COUNTERS.is_file():
    os.environ.setdefault("SOL_COUNTERS", str(_COUNTERS))

project = "Speed of Light"
author = "The Speed of Light authors"
copyright = f"{datetime.date.today().year}, {author}"

# docs/_ext: sol_build runs each page in its own process, after a pass that compiles every page in parallel (on
# a GPU); sol_results makes the landing page's table and figure of what the tutorials measured in this build;
# sol_notebooks gives each page's notebook a first cell that installs what that page imports and Markdown without
# Sphinx markup, publishes the notebooks with the site, and links each page to Colab and to its source
sys.path.insert(0, str(pathlib.Path(__file__).parent / "docs" / "_ext"))
extensions = ["sphinx_gallery.gen_gallery", "sol_build", "sol_results", "sol_notebooks"]
templates_path = ["docs/_templates"]
html_static_path = ["docs/_static"]
html_css_files = ["sol.css"]
exclude_patterns = ["_build", "_generated"]
# sphinx_gallery_conf holds functions (the GPU-memory reset, the peak-memory hook), so Sphinx cannot cache it between
# builds.
suppress_warnings = ["config.cache"]

html_math_renderer = "mathml"  # registered in setup() below

html_theme = "furo"
html_title = "Speed of Light"
html_favicon = "docs/_static/favicon.svg"


def _repository_url(env):
    """The URL of the repository this site is built from, or None where no one says.

    SOL_REPOSITORY_URL names it outright; otherwise GitHub Actions' GITHUB_SERVER_URL and GITHUB_REPOSITORY
    (owner/name) make it, as Actions sets them for the repository that runs the workflow (a fork's own).
    A local build has neither: its pages link to no repository rather than to a guessed one."""
    explicit = env.get("SOL_REPOSITORY_URL", "").strip()
    if explicit:
        return explicit.rstrip("/") + "/"
    repository = env.get("GITHUB_REPOSITORY", "").strip().strip("/")
    if not repository:
        return None
    server = env.get("GITHUB_SERVER_URL", "").strip().rstrip("/") or "https://github.com"
    return f"{server}/{repository}/"


def _site_url(env):
    """Where the built site is published, or "" where no one says. SOL_SITE_URL names it outright; otherwise, for a
    repository on github.com that GitHub Actions builds (GITHUB_REPOSITORY), GitHub Pages' address for it:
    https://<owner>.github.io/<name>/ (a custom domain redirects from there). A notebook links to another page of
    the site at this address; where there is none it names the page by its title."""
    explicit = env.get("SOL_SITE_URL", "").strip()
    if explicit:
        return explicit.rstrip("/") + "/"
    repository = env.get("GITHUB_REPOSITORY", "").strip().strip("/")
    server = env.get("GITHUB_SERVER_URL", "").strip().rstrip("/") or "https://github.com"
    if server != "https://github.com" or repository.count("/") != 1:
        return ""
    owner, name = repository.lower().split("/")[0], repository.split("/")[1]
    return f"https://{owner}.github.io/" + ("" if name.lower() == f"{owner}.github.io" else f"{name}/")


_REPOSITORY_URL = _repository_url(os.environ)
_SOURCE_BRANCH = "main"
# furo's "view source" and "edit" links, only where the repository is known (sol_notebooks points a tutorial's at
# its script under tutorials/, not at the generated .rst under docs/)
html_theme_options = (
    {"source_repository": _REPOSITORY_URL, "source_branch": _SOURCE_BRANCH, "source_directory": "docs/"}
    if _REPOSITORY_URL
    else {}
)
html_baseurl = _site_url(os.environ)
# docs/_ext/sol_notebooks.py: each tutorial page links to its script on the repository ("View source") and, for a
# repository on github.com, to Colab ("Run in Colab"), which opens the notebook the site publishes
# (notebooks/tutorials/<page>.ipynb) from the repository's branch that holds the published site
sol_repository_url = _REPOSITORY_URL
sol_source_branch = _SOURCE_BRANCH
sol_notebooks_branch = os.environ.get("SOL_NOTEBOOKS_BRANCH", "").strip() or "gh-pages"


def _free_gpu_memory(gallery_conf, fname, when=None):
    """Run between tutorials: drop what the last one left so the next starts with a clean GPU."""
    gc.collect()
    if torch is not None and _HAS_CUDA:
        torch.cuda.synchronize()
        torch.cuda.set_stream(torch.cuda.default_stream())  # a tutorial may have left its own stream current
        torch.cuda.empty_cache()


def _peak_gpu_memory(func):
    """sphinx-gallery's ``show_memory`` hook: it gets a function and returns (memory in MiB, the function's
    value). Here the memory is the GPU's: torch's caching allocator's peak while func ran (reset just before),
    plus, where JAX runs on the GPU (tutorial 05), JAX's peak. JAX's peak cannot be reset, but it counts from
    the first page that starts JAX, and sphinx-gallery reports each script's largest figure less the one it
    began with, so a later page does not inherit it. sphinx-gallery calls this around every code block; its
    execution-times page then shows each script's peak above what was allocated when the script began."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    value = func()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    if "jax" in sys.modules:
        try:  # None on JAX's CPU backend; a JAX that cannot answer must not stop the tutorial it measures
            peak += (sys.modules["jax"].local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use", 0)
        except Exception as err:
            logging.getLogger(__name__).info(f"JAX's GPU memory not counted: {type(err).__name__}: {err}")
    return peak / 2**20, value


# One tutorial only: make html TUTORIAL=01  (a regular expression matched against the file name)
_only = os.environ.get("SOL_TUTORIAL", "")

import sol_build  # noqa: E402  (docs/_ext, on the path above)
import sol_reading  # noqa: E402

# Pages this JAX is too old for (sol_build.JAX_NEEDED: deep dives 51 and 52 need 0.11.1) are shown, not run, and the
# build says so
_SHOWN_NOT_RUN = sorted(sol_build.shown_not_run())
for _stem in _SHOWN_NOT_RUN:
    logging.getLogger(__name__).info(f"{_stem}: shown, not run: it needs JAX {sol_build.JAX_NEEDED[_stem]} or newer")
_RUN = "".join(f"(?!{stem}\\.py)" for stem in _SHOWN_NOT_RUN) + r"\d\d_"

sphinx_gallery_conf = {
    "examples_dirs": ["../tutorials"],
    "gallery_dirs": ["tutorials"],
    "filename_pattern": re.escape(os.sep) + (_only if _only else _RUN),
    "within_subsection_order": "FileNameSortKey",
    "reset_modules": ("matplotlib", _free_gpu_memory),
    "reset_modules_order": "both",
    "capture_repr": ("_repr_html_", "__repr__"),
    "min_reported_time": 0,
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_signature": False,
    # Peak GPU memory per script on the execution-times page. Without a GPU there is none to measure:
    # sphinx-gallery's default stays (nothing measured, "0.0 MB"), and that page says why (_explain_memory).
    "show_memory": _peak_gpu_memory if _HAS_CUDA else False,
    # No cell common to every notebook: docs/_ext/sol_notebooks.py gives each its own, which installs what that page
    # imports
    "first_notebook_cell": None,
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
}


# Math is rendered to MathML when the page is built: no JavaScript and nothing fetched from a CDN,
# so pages read the same offline. Modern browsers draw MathML natively.
def _to_mathml(self, node, as_block):
    try:
        self.body.append(latex2mathml.tex2mathml(node.astext(), as_block=as_block))
    except latex2mathml.MathError as err:  # a warning, so that -W fails the build with the place
        logging.getLogger(__name__).warning(f"cannot render math {node.astext()!r}: {err}", location=node)
        self.body.append(f"<code>{html.escape(node.astext())}</code>")
    raise nodes.SkipNode


def _visit_math(self, node):
    _to_mathml(self, node, as_block=False)


def _visit_math_block(self, node):
    _to_mathml(self, node, as_block=True)


def _drop_cdn_scripts(app):
    """sphinx-gallery's run-time tables load jQuery and DataTables from CDNs to make them sortable.
    Keep the plain tables: the pages then need nothing from outside the site."""
    for path in pathlib.Path(app.srcdir).rglob("sg_execution_times.rst"):
        text = path.read_text(encoding="utf-8")
        cleaned = re.sub(r"\n  \.\. raw:: html\n.*?</script>\n(?=\n  \.\. list-table::)", "\n", text, flags=re.S)
        if cleaned != text:
            path.write_text(cleaned, encoding="utf-8")


_MEMORY_NOTE = (
    "The memory column: each script's peak GPU memory in MiB, as PyTorch's caching allocator counts it (and JAX's, "
    "for tutorial 05), above what was allocated when the script began."
    if _HAS_CUDA
    else "The memory column: this build had no GPU, so no GPU memory was measured; it shows 0.0."
)


def _explain_memory(app):
    """Say on the execution-times pages what their memory column holds (once, below their total)."""
    for path in pathlib.Path(app.srcdir).rglob("sg_execution_times.rst"):
        text = path.read_text(encoding="utf-8")
        if "The memory column:" in text:
            text = re.sub(r"The memory column:[^\n]*", _MEMORY_NOTE, text)
        else:
            text = re.sub(
                r"(\*\*[^\n]*total execution time for[^\n]*\n)",
                lambda m: m.group(1) + "\n" + _MEMORY_NOTE + "\n",
                text,
                count=1,
            )
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")


_TUTORIALS = pathlib.Path(__file__).parent / "tutorials"


def _page_facts(path, own=False):
    """(title, first sentence, minutes to read) of a gallery script, from its docstring and sol_reading. own: where
    the first sentence recalls the page before (it starts with a reference to it), the next one too, which says what
    this page adds."""
    text = path.read_text(encoding="utf-8")
    doc = text.split('"""')[1].strip().splitlines()
    title = doc[0].strip()
    sentences = " ".join(line.strip() for line in doc[2:] if line.strip()).split(". ")
    first = ". ".join(sentences[:2] if own and sentences[0].startswith(":ref:") else sentences[:1])
    return title, first.rstrip(".") + ".", sol_reading.reading_minutes(text)


_LEARN = re.compile(r"\*\*What\s+you\s+will\s+learn\*\*")  # a line may break between any two words


def _reading_time_in_header(app, docname, source):
    """A page's header gives its reading time by the landing page's formula (sol_reading.reading_minutes),
    computed from the script, never typed in it: 'What you will learn' gets '(about N min)'."""
    parts = docname.split("/")
    script = _TUTORIALS.joinpath(*parts[1:]).with_suffix(".py") if parts[0] == "tutorials" else None
    if script is not None and script.is_file():
        minutes = _page_facts(script)[2]
        source[0] = _LEARN.sub(f"**What you will learn** (about {minutes} min)", source[0], count=1)


def _write_reading_path(app):
    """The landing page's reading path: the core pages in order with their reading time, then the deep
    dives grouped under the core page they extend (deep dive NK_ extends core page 0N_)."""
    cores = sorted(_TUTORIALS.glob("[0-9][0-9]_*.py"))
    dives = sorted((_TUTORIALS / "deep_dives").glob("[0-9][0-9]_*.py"))
    lines = ["**First reading**: the core pages, in order. Each teaches one design, end to end.", ""]
    for path, before in zip(cores, [None, *cores]):  # labelled by their own numbers; a second page of a number
        companion = before is not None and before.stem[:2] == path.stem[:2]  # (02's backward) sits under the first
        title, first, minutes = _page_facts(path, own=companion)
        if companion:
            lines += ["", f"  * and :doc:`tutorials/{path.stem}` (about {minutes} min): {first}", ""]
        else:
            lines.append(f"* **{path.stem[:2]}** :doc:`tutorials/{path.stem}` (about {minutes} min): {first}")
    lines += ["", "**Deep dives**: one technique each, measured against the core page it extends.", ""]
    firsts = {}  # the first core page of each number (layer norm, 02, has two): its deep dives go there
    for core in cores:
        firsts.setdefault(core.stem[:2], core)
    for core in cores:
        own = [d for d in dives if d.stem[0] == core.stem[1]] if firsts[core.stem[:2]] == core else []
        if own:
            lines.append(f"* After :doc:`tutorials/{core.stem}`:")
            lines.append("")
            for path in own:
                title, first, minutes = _page_facts(path)
                lines.append(
                    f"  * **{path.stem[:2]}** :doc:`tutorials/deep_dives/{path.stem}` (about {minutes} min): {first}"
                )
            lines.append("")
    out = pathlib.Path(app.srcdir) / "_generated" / "reading_path.inc"
    out.parent.mkdir(exist_ok=True)
    text = "\n".join(lines) + "\n"
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        out.write_text(text, encoding="utf-8")


def _no_code_links(app):
    """sphinx-gallery's post-transform that links names in the pages' code to their documentation, removed: with no
    API documented here and no inventory of another site's it links nothing, yet it re-tokenizes every code block in
    Sphinx's main process, where pages are resolved one at a time (about half of a build's writing)."""
    try:
        from sphinx_gallery._doctree_links import CodeLinksTransform
    except ImportError:  # a sphinx-gallery without it
        return
    app.registry.post_transforms[:] = [t for t in app.registry.post_transforms if t is not CodeLinksTransform]


def setup(app):
    app.connect("builder-inited", _no_code_links)
    app.connect("builder-inited", _write_reading_path)
    app.connect("source-read", _reading_time_in_header)
    app.connect("builder-inited", _drop_cdn_scripts, priority=900)  # after sphinx-gallery wrote them
    app.connect("builder-inited", _explain_memory, priority=900)
    app.add_html_math_renderer(
        "mathml", inline_renderers=(_visit_math, None), block_renderers=(_visit_math_block, None)
    )
