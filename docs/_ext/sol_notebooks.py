"""The notebooks a reader downloads, and the links that open a page's notebook in Colab or show its source.

sphinx-gallery makes a notebook of each gallery script (``docs/tutorials/<page>.ipynb``, offered for download
alone and zipped with the script). Once Sphinx has read the pages (``env-updated``, before the HTML builder
copies the downloads), this extension rewrites each notebook, and the page's zip with it:

* **Its first cell installs what that page imports.** ``install_cell``: a ``%pip install -q`` line naming each
  package the script imports at its top level (torch, Triton, pandas, matplotlib; JAX and NumPy on the JAX
  pages), each at least at the version ``requirements.txt`` asks for, so that where they are installed and new
  enough (Colab's torch and Triton) pip changes nothing and adds only what is missing; the versions the site is
  built with (``requirements-gpu.lock``); the peers the page imports only where present (Liger-Kernel, quack) as an
  optional line; and what the page does without a GPU.
* **Its Markdown cells carry no Sphinx markup.** ``to_markdown``: roles (``:func:`torch.softmax```,
  ``:class:``, ...) become code, ``:math:`` ``$...$``, ``.. math::`` ``$$...$$``, double-backtick literals
  single-backtick code, and a reference to another page (``:ref:`sphx_glr_...```, ``:doc:``) a link to that page
  on the published site where its address is known (``html_baseurl``: conf.py's SOL_SITE_URL), else its title in
  italics.

At the end of an HTML build the notebooks are also published with the site, at ``notebooks/<page>.ipynb``
(``html/notebooks/tutorials/01_fused_softmax.ipynb``): a fixed address, which Colab reaches through the
repository's branch that holds the published site (``sol_notebooks_branch``).

Where the repository is known (conf.py's ``sol_repository_url``), each gallery page gets "Run in Colab" (on
github.com: Colab opens a notebook from a GitHub repository only) and "View source" (the script in the
repository), at its top and beside its download buttons; and furo's "view" and "edit" icons point at the file
a page is made from (``tutorials/<page>.py`` for a gallery page, not the generated ``.rst``), or are left out
for a page the build generates (the run-time tables).
"""

import ast
import json
import os
import pathlib
import re
import shutil
import sys
import textwrap
import urllib.parse
import zipfile

from sphinx.util import logging

from sol_reading import APPENDIX_TITLE

_logger = logging.getLogger(__name__)

# ---- the first cell: what the page imports, and the versions ----

# Import name -> pip name, where they differ (jaxlib comes with jax, at the version jax asks for)
PIP_NAMES = {
    "liger_kernel": "liger-kernel",
    "quack": "quack-kernels",
    "jaxlib": "jax",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
}
# The order of the install line; packages not named here follow in alphabetical order
ORDER = ["torch", "triton", "jax", "numpy", "pandas", "matplotlib"]
SHOWN = {
    "torch": "torch",
    "triton": "Triton",
    "jax": "JAX",
    "numpy": "NumPy",
    "pandas": "pandas",
    "matplotlib": "matplotlib",
    "liger-kernel": "Liger-Kernel",
    "quack-kernels": "quack",
}


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text):
    return tuple(int(p) for p in re.findall(r"\d+", text))


def imported_modules(path):
    """[(dotted module name, whether imported only below a statement: in a try, an if, a def, ...)] of a script;
    ``from a.b import c`` counts as a.b.c."""
    found = []

    def visit(node, guarded):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, guarded) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.extend((f"{child.module}.{alias.name}", guarded) for alias in child.names)
            visit(child, guarded or isinstance(child, ast.stmt))

    visit(ast.parse(pathlib.Path(path).read_text(encoding="utf-8")), False)
    return found


# A page's functions that import a peer by name, its module the second argument: load_peer("quack", "quack")
PEER_LOADERS = ("load_peer", "peer_module")


def loaded_peers(path):
    """The modules a script imports through its peer loaders (``PEER_LOADERS``), only where the peer is installed."""
    return [
        node.args[1].value
        for node in ast.walk(ast.parse(pathlib.Path(path).read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in PEER_LOADERS
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ]


def page_imports(path):
    """(required, optional): the pip names of the packages a script imports at its top level, unconditionally, and
    of those it imports only inside a ``try``, an ``if``, a function or a ``with``, or through its peer loaders (the
    peers it skips when absent). The standard library is left out."""
    required, optional = set(), set()
    for module, guarded in imported_modules(path) + [(m, True) for m in loaded_peers(path)]:
        top = module.split(".")[0]
        if top not in sys.stdlib_module_names:
            (optional if guarded else required).add(PIP_NAMES.get(top, top))
    return _ordered(required), _ordered(optional - required)


def _ordered(names):
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def floors(requirements):
    """{canonical name: the lowest version requirements.txt accepts}: for a package named on several lines (jax, one
    line per Python), the lowest of them."""
    found = {}
    for line in pathlib.Path(requirements).read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*)", line)
        if match:
            name, version = _canonical(match[1]), match[2]
            if name not in found or _version(version) < _version(found[name]):
                found[name] = version
    return found


def built_with(lock):
    """{canonical name: version} from requirements-gpu.lock (``name==version``), without a local label
    (torch's ``+cu130``)."""
    found = {}
    if pathlib.Path(lock).is_file():
        for line in pathlib.Path(lock).read_text(encoding="utf-8").splitlines():
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;+#]+)", line)
            if match:
                found[_canonical(match[1])] = match[2]
    return found


def _spec(name, floor):
    return f'"{name}>={floor}"' if floor else name


def _words(names):
    names = [SHOWN.get(n, n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _wrap(text):
    """Comment lines of at most 100 columns; a package's name and version stay on one line."""
    text = re.sub(r"(\w) (\d)", "\\1\u00a0\\2", text)
    return textwrap.fill(
        text, width=100, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False, break_long_words=False
    ).replace("\u00a0", " ")


def install_cell(script, requirements, lock, jax_needed=None):
    """The source of a notebook's first cell for the gallery script ``script``: what it says and installs is that
    page's only. ``jax_needed``: the JAX version this page needs, where it needs a newer one than requirements.txt's
    lowest (sol_build.JAX_NEEDED)."""
    required, optional = page_imports(script)
    low, built = floors(requirements), built_with(lock)
    if jax_needed:
        low["jax"] = ".".join(map(str, jax_needed))
    mosaic = any(".pallas.mosaic_gpu" in module for module, _ in imported_modules(script))
    versions = [f"{SHOWN.get(n, n)} {built[_canonical(n)]}" for n in required if _canonical(n) in built]
    says = f"This page needs {_words(required)}" + (
        f" (the site is built with {_words(versions)})." if versions else "."
    )
    if "torch" in required:
        says += (
            " On Colab torch and Triton are already installed: the line below keeps what is installed and new "
            "enough, and adds only what is missing."
        )
    elif "jax" in required:
        says += (
            " On Colab JAX is already installed (with its CUDA plugin on a GPU runtime): the line below keeps "
            "what is installed and new enough, and adds only what is missing. Where it upgrades JAX on a GPU, "
            'install the CUDA plugin of the same version: "jax[cuda12]" (or "jax[cuda13]" with a CUDA 13 '
            "driver)."
        )
    else:
        says += " The line below keeps what is installed and new enough, and adds only what is missing."
    lines = [_wrap(says), "%pip install -q " + " ".join(_spec(n, low.get(_canonical(n))) for n in required)]
    if optional:
        lines.append("# Optional, compared with where installed (the page skips them where absent):")
        lines.append("# %pip install -q " + " ".join(_spec(n, low.get(_canonical(n))) for n in optional))
    if "triton" in required:
        lines.append(
            _wrap(
                "Without a CUDA GPU the page runs its kernels through Triton's interpreter on the CPU: "
                "a correctness run at small sizes, not timings. Triton's interpreter before 3.8 needs NumPy "
                'older than 2.4 there: %pip install -q "numpy<2.4".'
            )
        )
    elif mosaic:
        lines.append(
            _wrap(
                "Mosaic GPU needs a Hopper GPU (H100, H200). Without a GPU the page runs its kernels "
                "through Mosaic GPU's interpreter on the CPU (JAX 0.11.1 or newer, Python 3.12): a "
                "correctness run at small sizes, not timings."
            )
        )
    elif "jax" in required:
        lines.append(
            _wrap(
                "Without a CUDA GPU the page runs its Pallas kernels through Pallas' interpreter on the "
                "CPU: a correctness run at small sizes, not timings."
            )
        )
    return "\n".join(lines)


# ---- Markdown cells: the Sphinx markup sphinx-gallery leaves in them ----

_FENCE = re.compile(r"(^```.*?^```[ \t]*$)", re.M | re.S)
_ALIGN = re.compile(r"\\begin\{align\}(.*?)\\end\{align\}", re.S)  # sphinx-gallery's rendering of .. math::
_MATH_DIRECTIVE = re.compile(r"^\.\. math::[ \t]*(.*)\n((?:[ \t]*\n|[ \t]+\S.*(?:\n|\Z))*)", re.M)
_LITERAL = re.compile(r"``(.+?)``(?!`)", re.S)
_ROLE = re.compile(r"(?<![\w:`]):(?:(?P<domain>[a-z]+):)?(?P<role>[a-z][a-z0-9-]*):`(?P<body>[^`]+)`")
_INTERPRETED = re.compile(r"(?<![`\w])`(?P<body>[^`\n]+(?:\n[^`\n]+)*)`(?P<under>_{0,2})(?![`\w])")
_ANONYMOUS = re.compile(r"(\[[^\]]*\]\([^)\s]*\))_")  # `text <url>`__, after sphinx-gallery took one underscore
_CODE_ROLES = {
    "func",
    "meth",
    "class",
    "mod",
    "attr",
    "data",
    "obj",
    "exc",
    "const",
    "code",
    "file",
    "samp",
    "envvar",
    "program",
    "option",
    "command",
    "type",
    "member",
    "var",
    "macro",
    "enum",
    "enumerator",
}
_CALLABLE_ROLES = {"func", "meth"}  # Sphinx shows them with "()" (add_function_parentheses)


def _display(body):
    """A role's visible text: ``title <target>`` shows the title, ``~a.b.c`` the last part, ``!x`` x."""
    match = re.fullmatch(r"(.*?)\s*<([^<>]*)>", body, re.S)
    if match and match[1]:
        return " ".join(match[1].split()), True
    text = body.strip().lstrip("!")
    return (text.rsplit(".", 1)[-1] if text.startswith("~") else text).lstrip("~"), False


def _target(body):
    match = re.fullmatch(r"(.*?)\s*<([^<>]*)>", body, re.S)
    return (match[2] if match else body).strip()


def _code(text):
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _display_math(content):
    """``$$...$$`` for each equation of a math block (equations are separated by blank lines); one with alignment
    marks (``&``, ``\\\\``) in an ``aligned`` environment."""
    lines = textwrap.dedent(content.strip("\n")).strip().splitlines()
    while lines and re.match(r"\s*:[a-z-]+:", lines[0]):  # the directive's options (:label:, :nowrap:)
        lines.pop(0)
    equations, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            equations.append("\n".join(current))
            current = []
    out = []
    for eq in equations:
        if "&" in eq or "\\\\" in eq:
            eq = f"\\begin{{aligned}}{eq}\\end{{aligned}}"
        out.append(f"$${eq}$$")
    return "\n\n".join(out)


def to_markdown(text, resolve, add_parentheses=True):
    """A notebook's Markdown cell with the Sphinx markup left in it made Markdown. ``resolve(kind, target)``, kind
    "ref" or "doc", gives (title, url or None) for a reference, or None where it knows no such target (the
    target's own text is then shown)."""
    parts = _FENCE.split(text)
    for i in range(0, len(parts), 2):  # the odd parts are fenced code, left as they are
        parts[i] = _inline(parts[i], resolve, add_parentheses)
    return "".join(parts)


def _inline(text, resolve, add_parentheses):
    kept = []  # finished Markdown (code spans, links) that later steps must not read again

    def keep(markdown):
        kept.append(markdown)
        return f"\x00{len(kept) - 1}\x00"

    def reference(kind, body, fallback):
        shown, titled = _display(body)
        found = resolve(kind, _target(body))
        if found is None:
            return keep(shown if titled else fallback)
        title, url = found
        title = shown if titled else title
        return keep(f"[{title}]({url})" if url else f"*{title}*")  # no address: the page's title, as a title

    text = _ALIGN.sub(lambda m: _display_math(m[1]), text)
    text = _MATH_DIRECTIVE.sub(lambda m: _display_math(m[1] + "\n" + m[2]) + re.search(r"\n*\Z", m[0])[0], text)
    text = _LITERAL.sub(lambda m: keep(_code(" ".join(m[1].split()))), text)

    def role(m):
        name, body = m["role"], m["body"]
        shown, titled = _display(body)
        if name == "math":
            return keep(f"${body}$")
        if name in ("ref", "doc"):
            return reference(name, body, shown)
        if name in _CODE_ROLES:
            if name in _CALLABLE_ROLES and add_parentheses and not titled and not shown.endswith(")"):
                shown += "()"
            return keep(_code(shown))
        if name == "abbr":
            return keep(re.sub(r"\s*\([^()]*\)\s*$", "", body))
        if name == "strong":
            return keep(f"**{body}**")
        if name in ("emphasis", "dfn"):
            return keep(f"*{body}*")
        if name in ("sub", "sup", "kbd"):
            return keep(f"<{name}>{body}</{name}>")
        if name == "term":
            return keep(shown)
        return keep(_code(shown))

    text = _ROLE.sub(role, text)

    def interpreted(m):
        body, under = m["body"], m["under"]
        link = re.fullmatch(r"(.*?)\s*<([^<>]*)>", body, re.S)
        if under and link:  # a hyperlink sphinx-gallery did not convert
            return keep(f"[{' '.join(link[1].split()) or link[2]}]({link[2]})")
        found = resolve("ref", _target(body))
        if found is None:  # interpreted text (no role) or an unknown label: left as it is (Markdown shows code)
            return m[0]
        return reference("ref", body, body)

    text = _INTERPRETED.sub(interpreted, text)  # :ref:`x` reaches here as `x`: sphinx-gallery drops ":ref:"
    text = _ANONYMOUS.sub(r"\1", text)
    return re.sub("\x00(\\d+)\x00", lambda m: kept[int(m[1])], text)


# ---- the notebooks of a build ----

INSTALL_TAG = "install"  # the first cell's tag: a later pass replaces that cell, never adds a second one


def _galleries(app):
    """(examples folder, gallery folder under the sources) of each sphinx-gallery gallery."""
    conf = app.config.sphinx_gallery_conf
    src = pathlib.Path(app.srcdir)
    examples, galleries = conf.get("examples_dirs", []), conf.get("gallery_dirs", [])
    examples, galleries = (
        [examples] if isinstance(examples, str) else examples,
        [galleries] if isinstance(galleries, str) else galleries,
    )
    return [((src / e).resolve(), src / g) for e, g in zip(examples, galleries)]


def notebooks(app):
    """[(notebook, its gallery script, its docname)] of every notebook sphinx-gallery wrote for this build."""
    found = []
    for examples, gallery in _galleries(app):
        for nb in sorted(gallery.rglob("*.ipynb")):
            script = examples / nb.relative_to(gallery).with_suffix(".py")
            if script.is_file():
                found.append((nb, script, nb.relative_to(app.srcdir).with_suffix("").as_posix()))
    return found


def _resolver(app, docname):
    """resolve(kind, target) for to_markdown, from the labels and titles of this build."""
    env = app.env
    labels = env.get_domain("std").labels
    site = app.config.html_baseurl.rstrip("/") + "/" if app.config.html_baseurl else ""

    def url(target_doc, anchor=""):
        if not site:
            return None
        uri = app.builder.get_target_uri(target_doc) if hasattr(app.builder, "get_target_uri") else target_doc
        return site + uri + (f"#{anchor}" if anchor else "")

    def title(target_doc):
        return env.titles[target_doc].astext() if target_doc in env.titles else target_doc

    def resolve(kind, target):
        if kind == "doc":
            path = (
                target.lstrip("/")
                if target.startswith("/")
                else os.path.normpath(os.path.join(os.path.dirname(docname), target)).replace(os.sep, "/")
            )
            return (title(path), url(path)) if path in env.all_docs else None
        if target.lower() not in labels:
            return None
        target_doc, anchor, section = labels[target.lower()]
        whole_page = section == title(target_doc)  # a page's own label: the link opens the page at its top
        return section or title(target_doc), url(target_doc, "" if whole_page else anchor)

    return resolve


def _rewritten(nb):
    cells = nb["cells"]
    return (
        bool(cells) and cells[0]["cell_type"] == "code" and INSTALL_TAG in cells[0].get("metadata", {}).get("tags", [])
    )


def rewrite_notebook(nb_path, cell, resolve, add_parentheses=True):
    """Give the notebook ``cell`` as its first cell and Markdown cells without Sphinx markup; rewrite the page's zip
    (beside it) with it. Returns whether the notebook changed.

    sphinx-gallery writes a page's notebook only when it makes the page again, so a later build may find this one
    already rewritten: the notebook as sphinx-gallery wrote it is kept beside it (``<name>.ipynb.orig``) and each
    build starts from that one, so that a reference becomes a link to the site this build is for (or a title)."""
    nb_path = pathlib.Path(nb_path)
    pristine = nb_path.with_name(nb_path.name + ".orig")
    text = nb_path.read_text(encoding="utf-8")
    nb = json.loads(text)
    if not _rewritten(nb):
        pristine.write_text(text, encoding="utf-8")
    elif pristine.is_file():
        nb = json.loads(pristine.read_text(encoding="utf-8"))
    cells = nb["cells"]
    if _rewritten(nb):
        cells.pop(0)
    for c in cells:
        if c["cell_type"] == "markdown":
            source = "".join(c["source"])
            converted = to_markdown(source, resolve, add_parentheses)
            if converted != source:
                c["source"] = [converted]
    cells.insert(
        0,
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {"tags": [INSTALL_TAG]},
            "outputs": [],
            "source": [line + "\n" for line in cell.splitlines()[:-1]] + cell.splitlines()[-1:],
        },
    )
    new = json.dumps(nb, indent=2)
    changed = new != text
    if changed:
        nb_path.write_text(new, encoding="utf-8")
    _rezip(nb_path.with_suffix(".zip"), nb_path)
    return changed


def _rezip(zip_path, nb_path):
    """The page's zip with this notebook in it, where it holds an older one."""
    if not zip_path.is_file():
        return
    data = nb_path.read_bytes()
    with zipfile.ZipFile(zip_path) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    if all(content == data for info, content in entries if pathlib.PurePath(info.filename).name == nb_path.name):
        return
    tmp = zip_path.with_suffix(".zip.new")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as new:
        for info, content in entries:
            new.writestr(info, data if pathlib.PurePath(info.filename).name == nb_path.name else content)
    os.replace(tmp, zip_path)


def _rewrite_notebooks(app, env):
    """env-updated: every notebook of this build gets its page's first cell and Markdown without Sphinx markup
    (before the HTML builder copies them into _downloads)."""
    import sol_build

    root = pathlib.Path(app.confdir)
    changed = 0
    for nb, script, docname in notebooks(app):
        cell = install_cell(
            script, root / "requirements.txt", root / "requirements-gpu.lock", sol_build.JAX_NEEDED.get(script.stem)
        )
        changed += rewrite_notebook(nb, cell, _resolver(app, docname), app.config.add_function_parentheses)
        leftover = leftover_markup(json.loads(nb.read_text(encoding="utf-8")))
        if leftover:
            _logger.warning(
                f"{nb.name}: Sphinx markup left in its Markdown cells: {', '.join(leftover[:5])}", location=docname
            )
    _logger.info(f"notebooks: {changed} rewritten (first cell, Markdown)")


LEFTOVER = re.compile(r"(?<![\w:`]):(?:[a-z]+:)?[a-z][a-z0-9-]*:`[^`]*`|sphx_glr_\w*|^\s*\.\. [a-z-]+::", re.M)


def leftover_markup(nb):
    """The Sphinx markup (roles, sphx_glr_ labels, directives) found in a notebook's Markdown cells."""
    return [m[0] for c in nb["cells"] if c["cell_type"] == "markdown" for m in LEFTOVER.finditer("".join(c["source"]))]


def _publish_notebooks(app, exception):
    """build-finished: each notebook also at notebooks/<docname>.ipynb in the built site, a fixed address."""
    if exception is not None or app.builder.format != "html":
        return
    out = pathlib.Path(app.outdir) / "notebooks"
    for nb, _, docname in notebooks(app):
        target = out / f"{docname}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(nb, target)


# ---- links from the pages: Colab, the source, furo's view and edit icons ----


def file_links(repository, branch, path):
    """(view, edit) URLs of a file of the repository, in the form its host uses (GitHub's, which GitHub Enterprise,
    Gitea and Forgejo share; GitLab's; Bitbucket's)."""
    host = urllib.parse.urlsplit(repository).netloc.lower()
    if host == "gitlab.com":
        return f"{repository}-/blob/{branch}/{path}", f"{repository}-/edit/{branch}/{path}"
    if host == "bitbucket.org":
        return f"{repository}src/{branch}/{path}", f"{repository}src/{branch}/{path}?mode=edit&at={branch}"
    return f"{repository}blob/{branch}/{path}", f"{repository}edit/{branch}/{path}"


def colab_link(repository, branch, path):
    """Colab's address for the notebook at ``path`` on ``branch`` of a github.com repository (Colab opens notebooks
    from github.com only: https://colab.research.google.com/github/<owner>/<name>/blob/<branch>/<path>); None for a
    repository elsewhere."""
    parts = urllib.parse.urlsplit(repository)
    owner_name = parts.path.strip("/").removesuffix(".git")
    if parts.netloc.lower() != "github.com" or owner_name.count("/") != 1:
        return None
    return f"https://colab.research.google.com/github/{owner_name}/blob/{branch}/{path}"


LINK_CLASSES = {"Run in Colab": "colab", "View source": "source"}


def page_links(config, docname, script_path):
    """[(label, url)] for a gallery page: Run in Colab (its published notebook) and View source (its script)."""
    repository = config.sol_repository_url
    if not repository:
        return []
    links = []
    colab = colab_link(repository, config.sol_notebooks_branch, f"notebooks/{docname}.ipynb")
    if colab:
        links.append(("Run in Colab", colab))
    links.append(("View source", file_links(repository, config.sol_source_branch, script_path)[0]))
    return links


def add_page_links(rst, links, script_name):
    """The gallery page's rst with ``links`` above its title and beside its download buttons."""
    if not links:
        return rst
    inline = " · ".join(f"`{label} <{url}>`__" for label, url in links)
    top = f".. only:: html\n\n    .. container:: sol-page-links\n\n        {inline}\n\n"
    at = re.search(r"^\.\. rst-class:: sphx-glr-example-title\s*$", rst, re.M) or re.search(
        r"^\.\. _sphx_glr_(?!download)\S+:\s*$", rst, re.M
    )
    if at:
        rst = rst[: at.start()] + top + rst[at.start() :]
    footer = re.search(r"^( *)\.\. container:: sphx-glr-footer[^\n]*\n(?:[ \t]*\n|\1 +\S[^\n]*\n?)*", rst, re.M)
    if footer:
        indent = footer[1] + "  "
        buttons = "".join(
            f"\n{indent}.. container:: sphx-glr-download sol-download-{LINK_CLASSES[label]}\n\n"
            f"{indent}  `{label}{': ' + script_name if label == 'View source' else ''} <{url}>`__\n"
            for label, url in links
        )
        rst = rst[: footer.end()].rstrip("\n") + "\n" + buttons + "\n" + rst[footer.end() :]
    return rst


def _script_of(app, docname):
    """The gallery script a docname is made from (a path under the repository), or None."""
    for examples, gallery in _galleries(app):
        try:
            rel = (pathlib.Path(app.srcdir) / docname).relative_to(gallery)
        except ValueError:
            continue
        script = examples / rel.with_suffix(".py")
        if script.is_file():
            return script
    return None


def _header_of(app, docname):
    """The file a gallery's index page is made from (its README.txt, README.rst or GALLERY_HEADER.rst), or None."""
    for examples, gallery in _galleries(app):
        index = (pathlib.Path(app.srcdir) / docname).parent
        if docname.endswith("/index") and index.is_relative_to(gallery):
            folder = examples / index.relative_to(gallery)
            for name in ("GALLERY_HEADER.rst", "README.txt", "README.rst", "README"):
                if (folder / name).is_file():
                    return folder / name
    return None


FOLD_FROM = 10  # lines of code: an appendix's shorter blocks stay open
_UNDERLINE = re.compile(r"^([-=~^\"'`#*+])\1*$")


def fold_appendix_code(rst):
    """A gallery page's rst with each code block of its appendix (the section titled ``APPENDIX_TITLE``) folded in an
    HTML ``<details>``, closed: the appendix's prose and printed output stay in view, its machinery's code opens on a
    click, and the results after it are a short scroll away. Other pages come back as they are."""
    lines = rst.split("\n")
    starts = [i for i in range(len(lines) - 1) if lines[i] == APPENDIX_TITLE and _UNDERLINE.match(lines[i + 1])]
    if not starts:
        return rst
    out, i = lines[: starts[0] + 2], starts[0] + 2
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and not line[0].isspace() and _UNDERLINE.match(nxt) and len(nxt) >= len(line.rstrip()):
            return "\n".join(out + lines[i:])  # the next section's title: the appendix ends
        if line.startswith(".. code-block::"):
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][0].isspace()):
                end += 1
            while end > i + 1 and not lines[end - 1].strip():  # the blank lines after it stay outside
                end -= 1
            code = sum(1 for text in lines[i + 1 : end] if text.strip() and not text.strip().startswith(":"))
            if code < FOLD_FROM:  # a few lines read faster than a click
                out += lines[i:end]
            else:
                summary = f"The measuring code, {code} lines (the results follow the appendix)"
                out += [".. raw:: html", "", f'   <details class="sol-fold"><summary>{summary}</summary>', ""]
                out += lines[i:end] + ["", ".. raw:: html", "", "   </details>", ""]
            i = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _fold_appendix(app, docname, source):
    """source-read: a gallery page's appendix code folded (``fold_appendix_code``)."""
    if _script_of(app, docname) is not None:
        source[0] = fold_appendix_code(source[0])


def _links_in_source(app, docname, source):
    """source-read: a gallery page gets its Colab and source links."""
    script = _script_of(app, docname)
    if script is not None:
        path = script.relative_to(pathlib.Path(app.confdir).resolve()).as_posix()
        source[0] = add_page_links(source[0], page_links(app.config, docname, path), script.name)


def _view_and_edit(app, pagename, templatename, context, doctree):
    """html-page-context: furo's view and edit icons point at the file the page is made from in the repository:
    a gallery page's script, a gallery index's header, a page's own source under docs/; none for a page the build
    generates (the run-time tables)."""
    repository = app.config.sol_repository_url
    if not repository or not context.get("page_source_suffix"):
        return
    root = pathlib.Path(app.confdir).resolve()
    source = _script_of(app, pagename) or _header_of(app, pagename)
    if source is None:
        candidate = pathlib.Path(app.srcdir, pagename + context["page_source_suffix"]).resolve()
        generated = any(candidate.is_relative_to(gallery.resolve()) for _, gallery in _galleries(app))
        if generated or pathlib.PurePath(pagename).name == "sg_execution_times" or not candidate.is_file():
            context["page_source_suffix"] = ""  # furo shows neither icon
            return
        source = candidate
    view, edit = file_links(repository, app.config.sol_source_branch, source.resolve().relative_to(root).as_posix())
    context["theme_source_view_link"] = view.replace("{", "{{").replace("}", "}}")  # furo formats it: {filename}
    context["theme_source_edit_link"] = edit.replace("{", "{{").replace("}", "}}")


def setup(app):
    app.add_config_value("sol_repository_url", None, "html")
    app.add_config_value("sol_source_branch", "main", "html")
    app.add_config_value("sol_notebooks_branch", "gh-pages", "html")
    app.connect("source-read", _links_in_source)
    app.connect("source-read", _fold_appendix)
    app.connect("env-updated", _rewrite_notebooks)
    app.connect("html-page-context", _view_and_edit)
    app.connect("build-finished", _publish_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
