"""The landing page's summary of what the tutorials measured in this build: a table and a figure.

The contract, a page's side. When the environment variable ``SOL_RESULTS`` names a folder, a tutorial
writes ``<that folder>/<its file's stem>.csv`` (``01_fused_softmax.csv``), one row per point of its
benchmark sweep, with the columns

* any *key* columns (``direction``, ``dtype``, ``sweep``, ...): their values, joined by ", ", name
  what was measured ("forward, float32"); none is allowed;
* ``N``: the size of the point (a row length, or the elements of a vector);
* ``ours, % of light``: our kernel's GB/s as a percentage of the speed of light measured beside it (a copy
  of the same bytes; a read-only pass for a sum); empty where ours was not measured;
* ``ours / best peer``: our GB/s over the fastest peer's (PyTorch, ``torch.compile``, Liger-Kernel, quack,
  XLA: whichever ran) at the same point; empty where no peer ran.

Most pages already have these two columns in their summary table (``table``, indexed by direction, dtype
and N), so their block is

    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
        table[["ours, % of light", "ours / best peer"]].to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_fused_softmax.csv"))

and a page whose kernel has another name renames the two columns (``.set_axis([...], axis=1)``).

Run alone (a downloaded notebook, ``python tutorials/...``) nothing sets ``SOL_RESULTS``, and the page
writes nothing.

The build's side (``setup`` below). sphinx-gallery runs the tutorials in its ``builder-inited`` handler;
before it, ``_ask_for_results`` empties ``<build>/results`` and names it in ``SOL_RESULTS`` (only when
the build runs the tutorials); after it, ``_write_landing_results`` reads the folder and writes
``docs/_generated/landing_results.inc`` and ``landing_results.png``, which ``docs/index.rst`` includes.
Sphinx reads ``index.rst`` after ``builder-inited``, so the landing page always sees this build's files.

sphinx-gallery does not rerun a script whose source has not changed since the build that ran it: it
keeps that page as it was, numbers and all. So that the landing page agrees with the pages, each
page's results are also kept in ``docs/_generated/results/`` and stay valid exactly as long as
sphinx-gallery leaves that page's generated ``.rst`` untouched (a newer ``.rst``: the page was made again,
by a run that wrote no results or by a build that did not run it, and the kept results are dropped).
The landing page says which rows come from such an earlier run. A build that runs no tutorial at all
(``make html-noplot``) shows one line saying that no results were measured in this build, and nothing else.
"""

import math
import os
import pathlib
import shutil

from sphinx.util import logging

METRICS = ("ours, % of light", "ours / best peer")
SIZE = "N"
INCLUDE = "landing_results.inc"
FIGURE = "landing_results.png"

_logger = logging.getLogger(__name__)


# ---- the contract, the reader's side ----

def read_results(folder):
    """{page stem: DataFrame} of every ``<stem>.csv`` in folder (none: an empty dict).

    Raises ValueError naming the file where one breaks the contract."""
    import pandas as pd

    found = {}
    for path in sorted(pathlib.Path(folder).glob("*.csv")):
        frame = pd.read_csv(path)
        lacking = [c for c in (SIZE, *METRICS) if c not in frame.columns]
        if lacking:
            raise ValueError(f"{path.name}: no column {', '.join(map(repr, lacking))}; a page's results need "
                             f"{SIZE!r}, {METRICS[0]!r} and {METRICS[1]!r} (and any key columns)")
        for column in METRICS:
            if not pd.api.types.is_numeric_dtype(frame[column]):
                raise ValueError(f"{path.name}: column {column!r} holds something other than numbers")
        found[path.stem] = frame
    return found


def summarize(frame):
    """One dict per measured thing (the key columns' values) of one page's results, in the page's order:
    what, the sizes, ours' best and lowest % of light (and where), the worst and median of ours / best peer
    over the points where a peer ran (and where the worst is), and how many such points."""
    keys = [c for c in frame.columns if c not in (SIZE, *METRICS)]
    groups = frame.groupby(keys, sort=False) if keys else [((), frame)]
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        light, ratio = part.set_index(SIZE)[METRICS[0]].dropna(), part.set_index(SIZE)[METRICS[1]].dropna()
        rows.append({
            "what": ", ".join(str(k) for k in key) or "all points",
            "sizes": sorted(int(n) if float(n).is_integer() else n for n in part[SIZE]),
            "best": light.max() if len(light) else math.nan, "best at": light.idxmax() if len(light) else None,
            "lowest": light.min() if len(light) else math.nan, "lowest at": light.idxmin() if len(light) else None,
            "worst ratio": ratio.min() if len(ratio) else math.nan, "worst at": ratio.idxmin() if len(ratio) else None,
            "median ratio": ratio.median() if len(ratio) else math.nan, "peer points": len(ratio),
        })
    return rows


# ---- the landing page ----

def _pages(tutorials):
    """{stem: (docname, short title, writes results)} of every gallery script under tutorials/."""
    pages = {}
    for path in sorted(pathlib.Path(tutorials).rglob("[0-9][0-9]_*.py")):
        text = path.read_text(encoding="utf-8")
        title = text.split('"""')[1].strip().splitlines()[0].strip()
        where = path.relative_to(tutorials).with_suffix("").as_posix()
        pages[path.stem] = (f"tutorials/{where}", title.split(":")[0], "SOL_RESULTS" in text)
    return pages


def _at(value):
    """ (N = 4,096)": where a figure was reached."""
    if value is None:
        return ""
    return f" (N = {int(value):,})" if float(value).is_integer() else f" (N = {value})"


def _cells(stem, docname, short, row):
    """The table's cells for one row of summarize()."""
    sizes = row["sizes"]
    span = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,} ({len(sizes)})"
    cells = [f":doc:`{stem[:2]} {short} <{docname}>`", row["what"], span]
    if math.isnan(row["best"]):  # ours did not run here (a Gluon kernel without a GPU)
        return cells + ["not measured", "-", "-", "-"]
    cells += [f"{row['best']:.3g}%{_at(row['best at'])}", f"{row['lowest']:.3g}%{_at(row['lowest at'])}"]
    if not row["peer points"]:
        return cells + ["no peer ran", "-"]
    return cells + [f"{row['worst ratio']:.3g}x{_at(row['worst at'])}", f"{row['median ratio']:.3g}x (of {row['peer points']})"]


def landing_rst(results, pages, device, kept=(), ran=True):
    """The reST of the landing page's section: results is {stem: DataFrame}, pages as _pages(), device a
    sentence naming where the numbers were measured, kept the stems whose results come from an earlier
    build's run (their pages were not made again), ran whether this build ran the tutorials."""
    doc = lambda stem: f":doc:`{stem[:2]} {pages[stem][1]} <{pages[stem][0]}>`"
    if not ran or not results:
        why = "it did not run the tutorials (``make html-noplot``)" if not ran else "no tutorial that writes results ran"
        return (f"No results were measured in this build: {why}. Each page's own tables hold its numbers, "
                "where a build ran it.\n")
    lines = [
        f"Measured by this build {device}", "",
        "Each row is one thing a page measured, over the sizes *N* it swept, with its kernel "
        "(*ours*: the one the page builds; where a page compares designs, the one it recommends). "
        "**ours, % of light**: our GB/s as a percentage of the speed of light measured beside it at the same *N* "
        "(a copy of the same bytes; for a sum, a pass that only reads them), the best and the lowest "
        "over *N*. **ours / best peer**: our GB/s over the fastest peer's at the same *N* (PyTorch, "
        "``torch.compile``, Liger-Kernel, quack; for JAX, XLA: whichever ran there), at the worst *N* and the median "
        "over the *N* where a peer ran; above 1, ours is faster. Each page's tables hold every point.", "",
        f".. figure:: /_generated/{FIGURE}",
        "   :alt: Bars, one per page and measurement: the best percentage of the speed of light that our kernel "
        "reached (a line at 100%), and the median of ours over the best peer (a line at 1).",
        "   :width: 100%", "",
        "   Left: our best % of the speed of light (bars) and lowest (dots) over the sizes each page swept. Right: "
        "ours / best peer, the median (bars) and the worst size (dots).", "",
        ".. list-table::", "   :header-rows: 1", "   :class: sol-results", "",
    ]
    header = ["page", "measured", "N (points)", "ours, % of light: best", "lowest", "ours / best peer: worst", "median"]
    lines += [f"   {'*' if i == 0 else ' '} - {cell}" for i, cell in enumerate(header)]
    for stem, frame in results.items():
        docname, short, _ = pages[stem]
        for row in summarize(frame):
            lines += [f"   {'*' if i == 0 else ' '} - {cell}" for i, cell in enumerate(_cells(stem, docname, short, row))]
    lines.append("")
    if kept:
        lines += ["Not rerun by this build (their scripts are unchanged, so their pages, like these rows, show the "
                  "run of an earlier build): " + ", ".join(doc(s) for s in kept) + ".", ""]
    missing = [s for s, (_, _, writes) in pages.items() if writes and s not in results]
    if missing:
        lines += ["Not measured in this build (not run, or run without results): "
                  + ", ".join(doc(s) for s in missing) + ".", ""]
    return "\n".join(lines) + "\n"


def draw(results, pages, device, path):
    """The landing page's figure, a row per page and measurement: on the left our best % of light (a bar) and
    lowest (a dot) over N, a line at 100%; on the right ours / best peer, the median (a bar) and the worst N (a
    dot), on a log scale, drawn from 1 (right of it, ours is faster)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    rows, palette = [], plt.get_cmap("tab10").colors
    for i, (stem, frame) in enumerate(results.items()):
        rows += [(f"{stem[:2]} {pages[stem][1]}: {row['what']}", palette[i % len(palette)], row) for row in summarize(frame)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.3 * len(rows) + 1.6), sharey=True, facecolor="white",
                                      gridspec_kw={"width_ratios": [3, 2]})
    where = list(range(len(rows)))[::-1]  # first page on top
    best = [0 if math.isnan(r["best"]) else r["best"] for _, _, r in rows]
    left.barh(where, best, color=[c for _, c, _ in rows], height=0.7, label="best over N")
    left.plot([r["lowest"] for _, _, r in rows], where, "o", color="black", markersize=3, label="lowest over N")
    for y, (_, _, r) in zip(where, rows):
        left.text(max(r["best"], 0) + 1 if not math.isnan(r["best"]) else 1, y,
                  "not measured" if math.isnan(r["best"]) else f"{r['best']:.3g}%", va="center", fontsize=7)
    left.axvline(100, color="black", linewidth=1, label="speed of light")
    left.set_yticks(where, [label for label, _, _ in rows], fontsize=7)
    left.set_xlim(0, max(115, max(best) + 15))
    left.set_xlabel("ours, % of the speed of light at the same N")
    ratios = [(y, c, r) for y, (_, c, r) in zip(where, rows) if r["peer points"] and not math.isnan(r["best"])]
    if ratios:
        right.barh([y for y, _, _ in ratios], [r["median ratio"] - 1 for _, _, r in ratios], left=1, height=0.7,
                   color=[c for _, c, _ in ratios], label="median over N")
        right.plot([r["worst ratio"] for _, _, r in ratios], [y for y, _, _ in ratios], "o", color="black", markersize=3,
                   label="worst N")
        values = [v for _, _, r in ratios for v in (r["worst ratio"], r["median ratio"])] + [1]
        low, high = min(values) / 1.2, max(values) * 1.2
        right.set_xscale("log")
        right.set_xlim(low, high)
        right.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if high / low < 20 else (1,)))
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        right.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    right.axvline(1, color="black", linewidth=1, label="as fast as the best peer")
    right.set_xlabel("ours / best peer at the same N (right of 1x: ours is faster)")
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.8 / (0.3 * len(rows) + 1.6)), ncol=3, fontsize=7,
                  frameon=False)
    fig.suptitle(f"Measured by this build {device}".rstrip("."), fontsize=8, x=0.01, ha="left", wrap=True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    _write_if_changed(path, buffer.getvalue())


def _write_if_changed(path, data):
    """Write only what differs, so that Sphinx rereads the landing page only when its results changed."""
    path = pathlib.Path(path)
    data = data.encode("utf-8") if isinstance(data, str) else data
    if not path.exists() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _device():
    """Where this build measured: the GPU's name, or the CPU's caveat."""
    try:
        import torch

        if torch.cuda.is_available():
            return f"on {torch.cuda.get_device_name(0)}, every page beside its peers in the same run."
    except ImportError:
        pass
    return ("on a CPU, through Triton's interpreter (Pallas' for JAX): these are NOT GPU timings, they say nothing "
            "about GPU speed, and only peers that run on a CPU ran.")


# ---- the build ----

def _folders(app):
    """(this build's results folder, the kept results folder, the tutorials' sources)."""
    return (pathlib.Path(app.outdir).parent / "results", pathlib.Path(app.srcdir) / "_generated" / "results",
            pathlib.Path(app.confdir) / "tutorials")


def _ask_for_results(app):
    """Before sphinx-gallery runs the tutorials: an empty folder for their results, named in SOL_RESULTS."""
    fresh, _, _ = _folders(app)
    shutil.rmtree(fresh, ignore_errors=True)
    os.environ.pop("SOL_RESULTS", None)
    if app.config.sphinx_gallery_conf.get("plot_gallery"):
        fresh.mkdir(parents=True)
        os.environ["SOL_RESULTS"] = str(fresh)


def _write_landing_results(app):
    """After sphinx-gallery: this build's results (and those kept for pages it did not make again) as the
    landing page's table and figure."""
    fresh, kept_dir, tutorials = _folders(app)
    pages = _pages(tutorials)
    generated = pathlib.Path(app.srcdir) / "_generated"
    ran = bool(app.config.sphinx_gallery_conf.get("plot_gallery"))
    results, kept = {}, []
    if ran:
        try:
            found = read_results(fresh)
        except ValueError as err:
            _logger.warning(f"landing page: {err}")
            found = {}
        for stem in [s for s in found if s not in pages]:
            _logger.warning(f"landing page: results for {stem}, which is no page in tutorials/ (its file name?)")
            del found[stem]
        kept_dir.mkdir(parents=True, exist_ok=True)
        for stem in pages:
            page_rst = pathlib.Path(app.srcdir) / f"{pages[stem][0]}.rst"
            old = kept_dir / f"{stem}.csv"
            if stem in found:  # copied after sphinx-gallery wrote the page: newer than its .rst
                shutil.copyfile(fresh / f"{stem}.csv", old)
            elif old.exists() and page_rst.exists() and page_rst.stat().st_mtime_ns <= old.stat().st_mtime_ns:
                kept.append(stem)  # the page was not made again: its numbers and these are one run's
            elif old.exists():
                old.unlink()  # the page was made again without results: these no longer match it
        try:
            every = read_results(kept_dir)
        except ValueError as err:
            _logger.warning(f"landing page: {err}")
            every = {}
        results = {stem: every[stem] for stem in pages if stem in every}
    device = _device() if results else ""
    if results:
        draw(results, pages, device, generated / FIGURE)
    _write_if_changed(generated / INCLUDE, landing_rst(results, pages, device, kept=kept, ran=ran))


def setup(app):
    app.connect("builder-inited", _ask_for_results, priority=400)  # before sphinx-gallery's (500) runs them
    app.connect("builder-inited", _write_landing_results, priority=900)  # after it
    return {"parallel_read_safe": True, "parallel_write_safe": True}
