"""The landing page's answer to "which kernel for my op and N", and each page's own results: tables and a figure.

The contract, a page's side. When the environment variable ``SOL_RESULTS`` names a folder, a tutorial
writes ``<that folder>/<its file's stem>.csv`` (``01_fused_softmax.csv``), one row per point of its
benchmark sweep, with exactly these columns (any order; an index written by pandas is one of them):

* ``direction``: ``forward`` or ``backward`` (cross-entropy: ``forward+backward``); for a sum, its kind
  (``sum of all elements``, ``row sums``, ``column sums``);
* ``dtype``: the tensors' dtype by its torch name (``float32``, ``bfloat16``);
* ``N``: the size of the point (a row length, or the elements of a vector);
* ``ours, % of light``: our kernel's GB/s as a percentage of the speed of light measured beside it (a copy
  of the same bytes; a read-only pass for a sum); empty where ours was not measured (a Gluon kernel
  without a GPU);
* ``ours / best peer``: our GB/s over the fastest peer's (PyTorch, ``torch.compile``, Liger-Kernel, quack,
  Helion, XLA: whichever ran) at the same point; empty where no peer ran;
* ``ours / Helion`` (optional: a page that measures Helion's kernel): our GB/s over Helion's tuned kernel's at the
  same point; empty where Helion did not run;
* ``recommended``: 1 where the site recommends this page's kernel for this direction, dtype and N, else 0.
  The page reads it from one constant beside its launch parameters, ``RANGE``: {(direction, dtype): the N
  its design is for, a ``range``}. A page that compares designs the site recommends elsewhere
  (24_layer_norm_backward_locks) has an empty ``RANGE``.

A page's block, where its summary table is indexed by direction, dtype and N (a page whose table lacks the
direction adds it with ``.assign(direction="forward", ...)``, and one whose kernel has another name renames the
two columns):

    if os.environ.get("SOL_RESULTS"):  # the site's build gathers each page's summary for its landing page
        table[["ours, % of light", "ours / best peer"]].assign(
            recommended=[int(n in RANGE.get((d, t), ())) for d, t, n in table.index]
        ).to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_fused_softmax.csv"))

Run alone (a downloaded notebook, ``python tutorials/...``) nothing sets ``SOL_RESULTS``, and the page
writes nothing.

The landing page. A page's *op* is the first digit of its number: core page ``0N`` and deep dives ``NK``
are op N (``OPS`` names them). First, for every (op, direction, dtype, N) that any page measured, the page
the site recommends there: the one whose ``recommended`` is 1; where two pages claim the same point, the
one with the higher % of light there, and a line in the build log (not a Sphinx warning: ``-W`` would
fail the build over a tuning disagreement that the table settles, and the row names both pages); where
none does, the page that measured the highest % of light there, labelled so. Consecutive N with the same
answer are one row. Then each page's own sweep, a row per direction and dtype (``summarize``), in which a
core page's points past its range (``recommended`` 0 where it recommends other N) are a row of their own
naming the page recommended there; and a figure of those rows.

Last, the rows of that table that miss a target (``TARGETS``, ``missed_targets``): ours / best peer at the row's worst N
and its median over the row's N; ours' lowest % of light over the row's N, higher for a core page inside its range
than for a deep dive or a core page's N past its range; ours / Helion at the row's worst N, where Helion ran. Beside
each, what the GPU's hardware counters measured at the row's N: ``dev/counters.py`` runs the pages' calls (ours, the
peers, a copy kernel as the streaming yardstick) under Nsight Compute and stores, per GPU, each call's kernels, time,
DRAM bytes, DRAM throughput, achieved occupancy and waves (``read_counters`` describes the file, which the build
names in ``SOL_COUNTERS``). A GPU for which the file holds nothing gets one sentence saying so instead.

The build's side (``setup`` below). sphinx-gallery runs the tutorials in its ``builder-inited`` handler;
before it, ``_ask_for_results`` empties ``<build>/results`` and names it in ``SOL_RESULTS`` (only when
the build runs the tutorials); after it, ``_write_landing_results`` reads the folder and writes
``docs/_generated/landing_results.inc`` and ``landing_results.png``, which ``docs/index.rst`` includes.
Sphinx reads ``index.rst`` after ``builder-inited``, so the landing page always sees this build's files.

sphinx-gallery does not rerun a script whose source has not changed since the build that ran it: it
keeps that page as it was, numbers and all. So that the landing page agrees with the pages, each
page's results are also kept in ``docs/_generated/results/`` and stay valid exactly as long as
sphinx-gallery leaves that page's generated ``.rst`` untouched (a newer ``.rst``: the page was made again,
by a run that wrote no results or by a build that did not run it, and the kept results are dropped; so are
kept results that break this contract, written under an older one). A build cut short before its end
leaves its pages' results in ``<build>/results``: the next build keeps those whose page's ``.rst`` was made
after them. The landing page says which rows come from such an earlier run. A build that runs no tutorial
at all (``make html-noplot``) shows one line saying that no results were measured in this build, and
nothing else.
"""

import math
import os
import pathlib
import re
import shutil
import statistics

from sphinx.util import logging

KEYS = ("direction", "dtype")
SIZE = "N"
METRICS = ("ours, % of light", "ours / best peer")
FLAG = "recommended"
COLUMNS = (*KEYS, SIZE, *METRICS, FLAG)
HELION = "ours / Helion"  # a column a page that measures Helion adds
OPS = {"1": "softmax", "2": "layer norm", "3": "reduction", "4": "RMSNorm", "5": "RMSNorm in JAX", "6": "cross-entropy"}
# What a row of the per-page table should reach (missed_targets() names what it does not): ours / best peer at the row's
# worst N and its median over the row's N; ours' lowest % of light over the row's N, on a core page inside its range
# ("lowest, core") and on every other row (a deep dive, a core page's N past its range); ours / Helion's tuned kernel at
# the row's worst N where it ran
TARGETS = {"worst ratio": 0.97, "median ratio": 1.0, "lowest, core": 93.0, "lowest": 90.0, "worst vs Helion": 0.98}
# pages whose timed calls dev/counters.py cannot profile, and where the page itself says why it misses
NOT_COUNTED = {
    "62_cross_entropy_vocab_parallel": "not counted: the page times its calls in rank processes of their own, which "
    "``dev/counters.py`` does not reach. The page measures the split's cost itself (its section \"Does the split "
    "pay?\": 06's one-pass kernel and a copy on a slice, the gathers) and bounds it: three passes over the logits "
    "where a copy makes two",
}
# the labels of a counted point's calls that are no peer: our kernel, and the streaming yardstick; and the figures
# of a call (read_counters)
OURS, COPY = "ours", "copy kernel"
COUNTED = (
    "kernels",
    "us",
    "dram_bytes",
    "x_bytes",
    "dram_pct",
    "warps_active_pct",
    "waves",
    "grid",
    "block",
    "registers",
)
INCLUDE = "landing_results.inc"
FIGURE = "landing_results.png"

_logger = logging.getLogger(__name__)


# ---- the contract, the reader's side ----


def read_results(folder):
    """{page stem: DataFrame of COLUMNS} of every ``<stem>.csv`` in folder (none: an empty dict).

    Raises ValueError naming the file where one breaks the contract."""
    return {path.stem: _read(path) for path in sorted(pathlib.Path(folder).glob("*.csv"))}


def _read(path):
    import pandas as pd

    frame = pd.read_csv(path, dtype={key: str for key in KEYS})
    lacking = [c for c in COLUMNS if c not in frame.columns]
    if lacking:
        raise ValueError(
            f"{path.name}: no column {', '.join(map(repr, lacking))}; a page's results have the columns "
            f"{', '.join(map(repr, COLUMNS))}"
        )
    optional, known = [HELION] if HELION in frame else [], (*COLUMNS, HELION)
    unknown = [c for c in frame.columns if c not in known]
    if unknown:
        raise ValueError(
            f"{path.name}: column {', '.join(map(repr, unknown))} is none of {', '.join(map(repr, known))} "
            "(an index without a name? write the summary indexed by direction, dtype and N)"
        )
    for column in (SIZE, *METRICS, FLAG, *optional):
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise ValueError(f"{path.name}: column {column!r} holds something other than numbers")
    if not frame[FLAG].isin([0, 1]).all():
        raise ValueError(f"{path.name}: column {FLAG!r} holds something other than 1 (recommended here) and 0")
    if frame[[*KEYS, SIZE]].isna().any().any() or frame.duplicated([*KEYS, SIZE]).any():
        raise ValueError(f"{path.name}: each row needs its own direction, dtype and N")
    return frame[[*COLUMNS, *optional]]


def op_of(stem):
    """The op of a page, a digit: core page 0N and deep dives NK are op N."""
    return stem[1] if stem[0] == "0" else stem[0]


def _stats(points):
    """Ours' best and lowest % of light (and where), the worst and median of ours / best peer over the points
    where a peer ran (and where the worst is), how many such points; points: (N, % of light, ratio)."""
    light = [(v, n) for n, v, _ in points if not math.isnan(v)]
    ratio = sorted((v, n) for n, _, v in points if not math.isnan(v))
    return {
        "best": max(light)[0] if light else math.nan,
        "best at": max(light)[1] if light else None,
        "lowest": min(light)[0] if light else math.nan,
        "lowest at": min(light)[1] if light else None,
        "light points": len(light),
        "worst ratio": ratio[0][0] if ratio else math.nan,
        "worst at": ratio[0][1] if ratio else None,
        "peer points": len(ratio),
        "median ratio": statistics.median(v for v, _ in ratio) if ratio else math.nan,
    }


def _size(n):
    return int(n) if float(n).is_integer() else n


def recommend(results):
    """(rows, notes). rows: one dict per run of consecutive N of one (op, direction, dtype) with one answer,
    in order (op, then direction and dtype as the pages first list them, then N): op, direction, dtype, the
    sizes, the recommended page (stem), claimed (by its range; False: no page that measured these N claims
    them, and this one measured the highest % of light), the other pages that claimed them (rivals), and the
    _stats of the recommended page's points. notes: a sentence for each row that two pages claim."""
    points = {}  # (op, direction, dtype) -> {N: [(stem, % of light, ratio, recommended)]}
    for stem in sorted(results, key=lambda s: (op_of(s), s)):
        for direction, dtype, n, light, ratio, flag in results[stem][list(COLUMNS)].itertuples(index=False):
            points.setdefault((op_of(stem), direction, dtype), {}).setdefault(_size(n), []).append(
                (stem, float(light), float(ratio), int(flag))
            )
    rows, notes = [], []
    rank = lambda entry: -math.inf if math.isnan(entry[1]) else entry[1]  # ties: the first page
    for (op, direction, dtype), by_n in points.items():
        for n in sorted(by_n):
            claims = [entry for entry in by_n[n] if entry[3]]
            chosen = max(claims or by_n[n], key=rank)
            answer = (chosen[0], bool(claims), tuple(e[0] for e in claims if e is not chosen))
            if rows and rows[-1]["key"] == (op, direction, dtype, *answer):
                rows[-1]["sizes"].append(n)
                rows[-1]["points"].append((n, chosen[1], chosen[2]))
            else:
                rows.append(
                    {
                        "key": (op, direction, dtype, *answer),
                        "op": op,
                        "direction": direction,
                        "dtype": dtype,
                        "sizes": [n],
                        "stem": answer[0],
                        "claimed": answer[1],
                        "rivals": answer[2],
                        "points": [(n, chosen[1], chosen[2])],
                    }
                )
    for row in rows:
        del row["key"]
        row.update(_stats(row.pop("points")))
        if row["rivals"]:
            notes.append(
                f"{' and '.join((row['stem'], *row['rivals']))} each write recommended = 1 for "
                f"{OPS.get(row['op'], 'op ' + row['op'])} {row['direction']}, {row['dtype']} at N = "
                f"{_span(row['sizes'])}; the landing page names {row['stem']}, the fastest there. "
                "Make their RANGE constants agree."
            )
    return rows, notes


def summarize(frame, stem="", chosen=None):
    """One dict per measured thing of one page's results (its direction and dtype), in the page's order: what,
    the sizes, and _stats over them. chosen: {(direction, dtype, N): (recommended stem, claimed)} of its op
    (from recommend()); given it, a core page that recommends itself somewhere gets a row of its own, right after
    each direction and dtype's, for the points past its range there (what ends "past its range"), with see:
    [(stem, claimed, its N)] recommended at them."""
    core = stem[:1] == "0" and chosen is not None and frame[FLAG].any()
    rows = []
    for (direction, dtype), part in frame.groupby(list(KEYS), sort=False):
        groups = [(False, part[part[FLAG] == 1]), (True, part[part[FLAG] == 0])] if core else [(False, part)]
        for past, points in groups:
            if not len(points):
                continue
            sizes = sorted(_size(n) for n in points[SIZE])
            row = {
                "what": f"{direction}, {dtype}" + (", past its range" if past else ""),
                "sizes": sizes,
                **_stats(list(zip(points[SIZE].map(_size), points[METRICS[0]], points[METRICS[1]]))),
            }
            helion = sorted((v, _size(n)) for n, v in zip(points[SIZE], points.get(HELION, [])) if not math.isnan(v))
            if helion:  # ours / Helion: its worst, where
                row["worst vs Helion"], row["worst vs Helion at"] = helion[0]
            if past:
                see = {}
                for n in (n for n in sizes if (direction, dtype, n) in chosen):
                    see.setdefault(chosen[direction, dtype, n], []).append(n)
                row["see"] = [(page, claimed, ns) for (page, claimed), ns in see.items()]
            rows.append(row)
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
    """(N = 4,096)": where a figure was reached."""
    if value is None:
        return ""
    return f" (N = {int(value):,})" if float(value).is_integer() else f" (N = {value})"


def _ends(sizes):
    """ "256 to 16,384", "65,536"."""
    show = lambda n: f"{n:,}" if float(n).is_integer() else f"{n}"
    return show(sizes[0]) if len(sizes) == 1 else f"{show(sizes[0])} to {show(sizes[-1])}"


def _span(sizes):
    """ "256 to 16,384 (7 points)", "65,536 (1 point)"."""
    return f"{_ends(sizes)} ({len(sizes)} point{'s' if len(sizes) > 1 else ''})"


def _ratio_cells(row):
    """ours / best peer: the worst (and where), the median (and over how many points)."""
    if not row["peer points"]:
        return ["no peer ran", "-"]
    points = f"{row['peer points']} point{'s' if row['peer points'] > 1 else ''}"
    return [f"{row['worst ratio']:.3f}x{_at(row['worst at'])}", f"{row['median ratio']:.3f}x (over {points})"]


def _unclaimed(sizes):
    """The label of a page recommended where no page that measured these N claims them."""
    one = len(sizes) == 1
    return f" (the fastest measured: {'this N is' if one else 'these N are'} outside every design's range)"


def _recommendation_cells(row, doc):
    """The recommendation table's cells for one row of recommend()."""
    page = doc(row["stem"]) + (_unclaimed(row["sizes"]) if not row["claimed"] else "")
    if row["rivals"]:
        page += f" (also claimed by {', '.join(doc(s) for s in row['rivals'])}, slower here)"
    cells = [OPS.get(row["op"], f"op {row['op']}"), f"{row['direction']}, {row['dtype']}", _span(row["sizes"]), page]
    if not row["light points"]:  # the page's kernel did not run here (a Gluon kernel without a GPU)
        return cells + ["not measured", "-", "-"]
    light = f"{row['best']:.3g}%" if row["best"] == row["lowest"] else f"{row['lowest']:.3g}% to {row['best']:.3g}%"
    if row["light points"] < len(row["sizes"]):
        light += f" (measured at {row['light points']} of {len(row['sizes'])} points)"
    return cells + [light, *_ratio_cells(row)]


def _see(stem, see, doc):
    """Where a core page's N past its range are recommended: "see 23 ..." (with their N where several pages)."""
    parts = []
    for page, claimed, sizes in see:
        where = f" (N = {_ends(sizes)})" if len(see) > 1 else ""
        if page == stem:  # no page that measured them claims them, and this page was the fastest
            parts.append(f"this page{where}{_unclaimed(sizes)}")
        else:
            parts.append(doc(page) + where + ("" if claimed else _unclaimed(sizes)))
    return "see " + ", ".join(parts)


def _page_cells(stem, doc, row):
    """The per-page table's cells for one row of summarize()."""
    what = row["what"] + (f": {_see(stem, row['see'], doc)}" if "see" in row else "")
    cells = [doc(stem), what, _ends(row["sizes"]) + (f" ({len(row['sizes'])})" if len(row["sizes"]) > 1 else "")]
    if math.isnan(row["best"]):  # ours did not run here (a Gluon kernel without a GPU)
        return cells + ["not measured", "-", "-", "-"]
    return cells + [
        f"{row['best']:.3g}%{_at(row['best at'])}",
        f"{row['lowest']:.3g}%{_at(row['lowest at'])}",
        *_ratio_cells(row),
    ]


def page_rows(results, recommended):
    """[(stem, row of summarize())] of every page in results, its points past its range split off and naming
    the page recommended there (recommended: the rows of recommend())."""
    chosen = {
        (r["op"], r["direction"], r["dtype"], n): (r["stem"], r["claimed"]) for r in recommended for n in r["sizes"]
    }
    rows = []
    for stem, frame in results.items():
        mine = {key[1:]: answer for key, answer in chosen.items() if key[0] == op_of(stem)}
        rows += [(stem, row) for row in summarize(frame, stem, mine)]
    return rows


def _under(value, limit):
    """value, at 3 significant digits, or more where those would read as the limit it is under (92.96 under 93)."""
    for digits in range(3, 8):
        shown = f"{value:.{digits}g}"
        if float(shown) < limit:
            break
    return shown


def missed_targets(stem, row):
    """The targets (TARGETS) that one row of page_rows() misses, a short phrase each with its figure and where it
    was reached: none where ours was not measured, no ratio target where no peer ran."""
    if math.isnan(row["lowest"]):
        return []
    inside = stem[:1] == "0" and not row["what"].endswith("past its range")
    floor = TARGETS["lowest, core" if inside else "lowest"]
    worst, median = TARGETS["worst ratio"], TARGETS["median ratio"]
    found = []
    if row["lowest"] < floor:
        found.append(f"lowest {_under(row['lowest'], floor)}% of light{_at(row['lowest at'])}, under {floor:g}%")
    if row["peer points"] and row["worst ratio"] < worst:
        found.append(
            f"worst {_under(row['worst ratio'], worst)}x the best peer{_at(row['worst at'])}, under {worst:g}x"
        )
    if row["peer points"] and row["median ratio"] < median:
        found.append(f"median {_under(row['median ratio'], median)}x, under {median:g}x")
    helion = TARGETS["worst vs Helion"]
    if row.get("worst vs Helion", math.inf) < helion:
        found.append(
            f"worst {_under(row['worst vs Helion'], helion)}x Helion's tuned kernel{_at(row['worst vs Helion at'])}, "
            f"under {helion:g}x"
        )
    return found


def _targets_sentence():
    lowest, core = TARGETS["lowest"], TARGETS["lowest, core"]
    worst, median = TARGETS["worst ratio"], TARGETS["median ratio"]
    return (
        f"The targets of a row of the table above: ours / best peer at least {worst:g}x at its worst *N* and "
        f"{median:g}x at the median over its *N*, and ours' lowest % of light over its *N* at least {core:g}% on a "
        f"core page inside its range, {lowest:g}% on every other row (a deep dive, a core page past its range); "
        f"where Helion's kernel ran, ours at least {TARGETS['worst vs Helion']:g}x its speed at every *N*. A row "
        "where no peer ran has no ratio target; one where ours was not measured, none."
    )


# ---- the counters ----


def read_counters(path, gpu):
    """What the JSON file at path holds for the GPU named gpu (torch.cuda.get_device_name), or None: no path, no
    such file, no GPU, nothing stored for it. The file, written by dev/counters.py with Nsight Compute:

        {GPU name: {"measured": date, "ncu": Nsight Compute's version, "sms": the GPU's SMs (or none),
                    "points": [{"page": stem, "direction": ... or null (the page has one: any), "dtype": ..., "N": ...,
                                "calls": [{"label": ..., "kernels": ..., "us": ..., "dram_bytes": ..., "x_bytes": ...,
                                           "dram_pct": ..., "warps_active_pct": ..., "waves": ..., "grid": ...,
                                           "block": ..., "registers": ...}, ...]}, ...]}}

    A call's label: "ours", a peer's name (torch, torch.compile, Liger, quack, Helion, ...) or "copy kernel" (reads
    x and writes a tensor of x's size). kernels: how many kernels the call launched; us: their summed duration in
    microseconds; dram_bytes: the bytes they read and wrote in DRAM; x_bytes: the bytes of the point's input x;
    dram_pct: DRAM throughput as % of its peak and warps_active_pct: achieved occupancy (% of an SM's warp slots
    active), both weighted by each kernel's duration; waves, grid, block, registers: the waves per SM, blocks, threads
    a block and registers a thread of the call's longest kernel. Any of those may be missing or null (shown as "-");
    page, dtype, N and label may not. Raises ValueError naming the file where it breaks this."""
    if not gpu or not path or not os.path.isfile(path):
        return None
    import json

    with open(path, encoding="utf-8") as file:
        found = json.load(file)
    entry = found.get(gpu) if isinstance(found, dict) else None
    if entry is None:
        return None
    name = os.path.basename(path)
    if not isinstance(entry, dict) or not isinstance(entry.get("points", []), list):
        raise ValueError(f"{name}: {gpu!r} holds no {{'points': [...]}}")
    if entry.get("sms") is not None and (isinstance(entry["sms"], bool) or not isinstance(entry["sms"], int)):
        raise ValueError(f"{name}: sms of {gpu!r} is not a whole number of SMs")
    for point in entry.get("points", []):
        lacking = [key for key in ("page", "dtype", "N") if not isinstance(point, dict) or point.get(key) is None]
        if lacking or not isinstance(point["N"], (int, float)):
            raise ValueError(f"{name}: a point of {gpu!r} without its {', '.join(lacking) or 'N as a number'}")
        for call in point.get("calls") or []:
            if not isinstance(call, dict) or not call.get("label"):
                raise ValueError(f"{name}: a call without its label at {point['page']}, N = {point['N']}")
            for key in COUNTED:
                if not isinstance(call.get(key), (int, float, type(None))) or isinstance(call.get(key), bool):
                    raise ValueError(f"{name}: {key} of {call['label']} at {point['page']}, N = {point['N']}")
    return entry


def counted(stem, row, counters):
    """The points of counters (one GPU's, as read_counters) measured for one row of page_rows(): its page and dtype,
    its direction or none (a page with one direction), at one of its N; in the order of N."""
    direction, dtype = row["what"].split(", ")[:2]
    sizes = {float(n) for n in row["sizes"]}
    return sorted(
        (
            point
            for point in (counters or {}).get("points") or []
            if point["page"] == stem
            and point["dtype"] == dtype
            and float(point["N"]) in sizes
            and point.get("direction") in (None, direction)
        ),
        key=lambda point: float(point["N"]),
    )


def _figure(value, digits):
    """A counter at `digits` significant digits, never in exponent form; "-" where it was not measured."""
    if value is None:
        return "-"
    shown = f"{value:.{digits}g}"
    return f"{value:.0f}" if "e+" in shown else shown


def _percent(value):
    return "-" if value is None else f"{value:.0f}%"


def _call_text(call, first):
    """One call of a counted point: "quack 1 kernel, 41.2 us, 2.00x, 93%, 60%, 1 wave"; first: with what each
    figure is ("2.00x x's bytes in DRAM, DRAM 93% busy, 60% warps active")."""
    kernels, waves = _figure(call.get("kernels"), 3), _figure(call.get("waves"), 2)
    dram, x = call.get("dram_bytes"), call.get("x_bytes")
    traffic = f"{dram / x:.2f}x" if dram is not None and x else "-"
    busy, warps = (_percent(call.get(key)) for key in ("dram_pct", "warps_active_pct"))
    figures = [
        f"{kernels} kernel{'' if kernels == '1' else 's'}",
        f"{_figure(call.get('us'), 3)} us",
        f"{traffic} x's bytes in DRAM" if first else traffic,
        f"DRAM {busy} busy" if first else busy,
        f"{warps} warps active" if first else warps,
        f"{waves} wave{'' if waves == '1' else 's'}",
    ]
    return f"{_escape(call['label'])} {', '.join(figures)}"


def _escape(text):
    """Text from the counters' file, read as plain text in reST."""
    return "".join("\\" + c if c in "\\*`|_" else c for c in str(text))


def counters_line(point, sms=None):
    """One counted point in a line: "N = 131,072: ours ...; quack ...; copy kernel 40 us, 92% busy", then what those
    figures say (reading()). Ours first, then at most three other calls (not the unfused "naive" baseline), the fastest
    first, then the copy kernel."""
    calls = [call for call in point.get("calls") or [] if call["label"] not in (OURS, COPY, "naive")]
    calls = sorted(calls, key=lambda call: (call.get("us") is None, call.get("us") or 0))[:3]
    ours = [call for call in point.get("calls") or [] if call["label"] == OURS][:1]
    parts = [_call_text(call, first=i == 0) for i, call in enumerate(ours + calls)]
    copies = [call for call in point.get("calls") or [] if call["label"] == COPY][:1]
    for copy in copies:
        parts.append(f"{COPY} {_figure(copy.get('us'), 3)} us, {_percent(copy.get('dram_pct'))} busy")
    said = reading(ours[0], calls[0] if calls else None, copies[0] if copies else None, sms) if ours else ""
    return (
        f"N = {_ends([_size(point['N'])])}: " + ("; ".join(parts) or "no call measured") + (f". {said}" if said else "")
    )


def warps_an_sm(call, sms):
    """The warps of a call's longest kernel that an SM holds at once, from ncu's own figures (its waves are the grid
    over SMs x the blocks an SM holds: registers, shared memory and threads decide those); None where unmeasured."""
    grid, waves, block = call.get("grid"), call.get("waves"), call.get("block")
    if not (sms and grid and waves and block):
        return None
    return max(1, round(grid / (waves * sms))) * block / 32


def reading(ours, peer, copy, sms=None):
    """What a counted point's figures say, in a sentence: against the fastest other call where it ran faster than
    ours, else against the copy kernel. Each clause a measured difference past its noise: more kernels, 5% more DRAM
    bytes (than a peer), DRAM 3 points less busy, and (against a peer, the GPU's SM count given) a quarter fewer
    warps an SM, with each kernel's registers a thread; "" where none is."""

    def traffic(call):
        return call["dram_bytes"] / call["x_bytes"] if call.get("dram_bytes") and call.get("x_bytes") else None

    if peer is not None and None not in (peer.get("us"), ours.get("us")) and peer["us"] < ours["us"]:
        other, lead = peer, f"{_escape(peer['label'])} runs {ours['us'] / peer['us']:.2f}x as fast here"
    elif copy is not None:
        other, lead = copy, "against the copy kernel"
    else:
        return ""
    name, clauses = _escape(other["label"]), []
    if (ours.get("kernels") or 0) > (other.get("kernels") or math.inf):
        clauses.append(f"ours launches {ours['kernels']:.0f} kernels, {name} {other['kernels']:.0f}")
    # bytes against a peer only: the copy kernel moves 2x x's bytes, whatever the op's own count (3x for a backward)
    mine, theirs = traffic(ours), traffic(other) if other is peer else None
    more = mine is not None and theirs is not None and mine > 1.05 * theirs
    if more:
        clauses.append(f"ours moves {mine / theirs:.2f}x {name}'s DRAM bytes")
    busy, their_busy = ours.get("dram_pct"), other.get("dram_pct")
    if busy is not None and their_busy is not None and busy < their_busy - 3:
        same = "" if more or mine is None or theirs is None else "with as many bytes, "
        clauses.append(f"{same}ours keeps DRAM {busy:.0f}% busy, {name} {their_busy:.0f}%")
    held, their_held = warps_an_sm(ours, sms), warps_an_sm(other, sms) if other is peer else None
    if held and their_held and held <= 0.75 * their_held:
        regs = [
            f" ({call['registers']:.0f} registers a thread)" if call.get("registers") else "" for call in (ours, other)
        ]
        clauses.append(f"an SM holds {held:.0f} warps of ours{regs[0]}, {their_held:.0f} of {name}'s{regs[1]}")
    if not clauses:
        return f"Reading: {lead}; no counter here tells them apart." if other is peer else ""
    return f"Reading: {lead}: {'; '.join(clauses)}."


def _counters_sentence(counters, gpu):
    """What the counters' column shows, and where it comes from."""
    ncu = re.search(r"\d+(\.\d+)+", str(counters.get("ncu") or ""))  # "2025.3.1.0", or ncu --version's line
    version = f" (``ncu`` {ncu.group()})" if ncu else ""
    when = f" on {counters['measured']}" if counters.get("measured") else ""
    return (
        f"**What the counters say**: Nsight Compute's counters{version}, measured on {gpu}{when} by "
        "``dev/counters.py``, at each *N* of the row it measured: ours first, then at most three other calls the page "
        "times there (peers, or the page's other designs), the fastest first, and a copy kernel (it reads x and "
        "writes a tensor of x's size: the streaming yardstick). For each, "
        "how many kernels it launched and their summed time; the bytes they moved in DRAM, in units of x's bytes "
        "(reading x and writing a tensor of its size once is 2.00x); DRAM throughput as % of its peak (*busy*) and "
        "achieved occupancy (% of an SM's warp slots *active*), both weighted by each kernel's time; and the waves "
        "per SM of the longest kernel. A *reading* ends each point: against the fastest call where it beat ours (else "
        "the copy kernel), each difference past its noise: more kernels, 5% more DRAM bytes than the peer, DRAM 3 "
        "points less busy (the memory idles part of the time: too few bytes in flight, or the grid's last wave), a "
        "quarter fewer warps an SM than the peer's (ncu's waves: the blocks an SM holds at once, which registers a "
        "thread, shared memory and threads decide; each kernel's registers a thread beside)."
    )


def _misses_section(rows, doc, counters, gpu):
    """The landing page's last section: the rows of page_rows() that miss a target, with what the counters of this
    GPU say at their N."""
    missed = [(stem, row, found) for stem, row in rows if (found := missed_targets(stem, row))]
    lines = [*_heading("Where a row misses a target"), _targets_sentence(), ""]
    if not missed:
        return lines + ["Every row meets them.", ""]
    if counters is None:
        lines += [
            (
                f"No hardware counters are stored for {gpu}: ``dev/counters.py`` measures them with Nsight Compute, "
                "run on this GPU."
                if gpu
                else "No hardware counters: ``dev/counters.py`` measures them with Nsight Compute, on a GPU."
            ),
            "",
        ]
    else:
        lines += [_counters_sentence(counters, gpu or "this GPU"), ""]
    header = ["page", "measured", "what it missed"] + ([] if counters is None else ["what the counters say"])
    body = []
    for stem, row, found in missed:
        body.append([doc(stem), row["what"], "; ".join(found)])
        if counters is not None:  # a cell of several paragraphs, one a point
            body[-1].append(
                [counters_line(p, counters.get("sms")) for p in counted(stem, row, counters)]
                or NOT_COUNTED.get(stem, "no counters measured yet at this row's N")
            )
    return lines + _list_table(header, body, "sol-results sol-misses")


def _list_table(header, body, css):
    """A list-table; a cell is a line of reST, or a list of them: paragraphs of one cell."""
    lines = [".. list-table::", "   :header-rows: 1", f"   :class: {css}", ""]
    for cells in [header, *body]:
        for i, cell in enumerate(cells):
            first, *rest = cell if isinstance(cell, list) else [cell]
            lines.append(f"   {'*' if i == 0 else ' '} - {first}")
            for paragraph in rest:
                lines += ["", f"       {paragraph}"]
    return lines + [""]


def _heading(text):
    return [text, "~" * len(text), ""]


def landing_rst(results, pages, device, kept=(), ran=True, counters=None, gpu=None):
    """The reST of the landing page's section: results is {stem: DataFrame}, pages as _pages(), device a
    sentence naming where the numbers were measured, kept the stems whose results come from an earlier
    build's run (their pages were not made again), ran whether this build ran the tutorials, counters what
    read_counters gives for this GPU (None: nothing stored for it), gpu the GPU's name (None: a CPU)."""
    doc = lambda stem: f":doc:`{stem[:2]} {pages[stem][1]} <{pages[stem][0]}>`"
    if not ran or not results:
        why = (
            "it did not run the tutorials (``make html-noplot``)" if not ran else "no tutorial that writes results ran"
        )
        return (
            f"No results were measured in this build: {why}. Each page's own tables hold its numbers, "
            "where a build ran it.\n"
        )
    recommended, _ = recommend(results)
    rows = page_rows(results, recommended)
    lines = [
        f"Measured by this build {device}",
        "",
        *_heading("Which kernel for your op and N"),
        "For each op, direction (for a sum, its kind), dtype and size *N* that a page measured: the page whose kernel "
        "the site recommends there. *N* is a row's length (the hidden size; for cross-entropy the vocabulary; for a "
        "sum of all elements, their number). Each kernel is designed for a range of *N*, which its page states; where "
        "no design covers an *N*, the row names the fastest kernel measured there, and says so. **ours, % of light**: "
        "that kernel's GB/s as a percentage of the speed of light measured beside it at the same *N* (a copy of the "
        "same bytes; for a sum, a pass that only reads them), the lowest to the highest over the row's *N*; past 100%, "
        "the kernel outran that copy (each page's appendix says how it times both). **ours / best peer**: its GB/s "
        "over the fastest peer's at the same *N* (PyTorch, ``torch.compile``, Liger-Kernel, quack, an autotuned "
        "Helion kernel; for JAX, XLA: whichever ran there), at the worst *N* and the median over the *N* where a peer "
        "ran; above 1, ours is faster. Each page's tables name every peer's figure.",
        "",
        *_list_table(
            [
                "op",
                "measured",
                "N",
                "the site recommends",
                "ours, % of light",
                "ours / best peer: worst",
                "ours / best peer: median",
            ],
            [_recommendation_cells(row, doc) for row in recommended],
            "sol-results sol-recommended",
        ),
        *_heading("Each page's sweep"),
        "Each row is one thing a page measured, over the sizes *N* it swept, with its kernel (*ours*: the one the page "
        "builds; where a page compares designs, the one it recommends), the best and the lowest % of light over *N*, "
        "and ours / best peer as above. A core page's *N* past its range are a row of their own, naming the page "
        "recommended there. Each page's tables hold every point.",
        "",
        f".. figure:: /_generated/{FIGURE}",
        "   :alt: Bars, one per page and measurement: the best percentage of the speed of light that our kernel "
        "reached (a line at 100%), and the median of ours over the best peer (a line at 1).",
        "   :width: 100%",
        "",
        "   Left: our best % of the speed of light (bars) and lowest (dots) over the sizes each page swept. Right: "
        "ours / best peer, the median (bars) and the worst size (dots).",
        "",
        *_list_table(
            [
                "page",
                "measured",
                "N (points)",
                "ours, % of light: best",
                "lowest",
                "ours / best peer: worst",
                "ours / best peer: median",
            ],
            [_page_cells(stem, doc, row) for stem, row in rows],
            "sol-results",
        ),
    ]
    if kept:
        lines += [
            "Not rerun by this build (their scripts are unchanged, so their pages, like these rows, show the "
            "run of an earlier build): " + ", ".join(doc(s) for s in kept) + ".",
            "",
        ]
    missing = [s for s, (_, _, writes) in pages.items() if writes and s not in results]
    if missing:
        lines += [
            "Not measured in this build (not run, or run without results): " + ", ".join(doc(s) for s in missing) + ".",
            "",
        ]
    lines += _misses_section(rows, doc, counters, gpu)  # under a heading of its own: after the notes on the table
    return "\n".join(lines) + "\n"


def draw(results, pages, device, path):
    """The landing page's figure, a row per row of the per-page table (page_rows): on the left our best % of light
    (a bar) and lowest (a dot) over N, a line at 100%; on the right ours / best peer, the median (a bar) and the
    worst N (a dot), on a log scale, drawn from 1 (right of it, ours is faster)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    palette, stems = plt.get_cmap("tab10").colors, list(results)
    see = lambda row: f" (see {', '.join(dict.fromkeys(s[:2] for s, _, _ in row['see']))})" if "see" in row else ""
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", ", past its range": ", past range"}

    def row_label(stem, row):
        """ "01 softmax: forward, bf16, past range (see 12)": short, so that the figure's font reads."""
        what = row["what"]
        for word, abbreviation in short.items():
            what = what.replace(word, abbreviation)
        return f"{stem[:2]} {OPS.get(op_of(stem), pages[stem][1])}: {what}{see(row)}"

    rows = [
        (row_label(stem, row), palette[stems.index(stem) % len(palette)], row)
        for stem, row in page_rows(results, recommend(results)[0])
    ]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(8, 0.3 * len(rows) + 1.6), sharey=True, facecolor="white", gridspec_kw={"width_ratios": [3, 2]}
    )
    where = list(range(len(rows)))[::-1]  # first page on top
    best = [0 if math.isnan(r["best"]) else r["best"] for _, _, r in rows]
    left.barh(where, best, color=[c for _, c, _ in rows], height=0.7, label="best over N")
    left.plot([r["lowest"] for _, _, r in rows], where, "o", color="black", markersize=3, label="lowest over N")
    for y, (_, _, r) in zip(where, rows):
        left.text(
            max(r["best"], 0) + 1 if not math.isnan(r["best"]) else 1,
            y,
            "not measured" if math.isnan(r["best"]) else f"{r['best']:.3g}%",
            va="center",
            fontsize=7,
        )
    left.axvline(100, color="black", linewidth=1, label="speed of light")
    left.set_yticks(where, [label for label, _, _ in rows], fontsize=7)
    left.set_ylim(-0.7, len(rows) - 0.3)  # the rows from edge to edge (shared with the right panel)
    left.set_xlim(0, max(115, max(best) + 15))
    left.set_xlabel("ours, % of the speed of light", fontsize=8)
    ratios = [(y, c, r) for y, (_, c, r) in zip(where, rows) if r["peer points"] and not math.isnan(r["best"])]
    if ratios:
        right.barh(
            [y for y, _, _ in ratios],
            [r["median ratio"] - 1 for _, _, r in ratios],
            left=1,
            height=0.7,
            color=[c for _, c, _ in ratios],
            label="median over N",
        )
        right.plot(
            [r["worst ratio"] for _, _, r in ratios],
            [y for y, _, _ in ratios],
            "o",
            color="black",
            markersize=3,
            label="worst N",
        )
        values = [v for _, _, r in ratios for v in (r["worst ratio"], r["median ratio"])] + [1]
        low, high = min(values) / 1.2, max(values) * 1.2
        right.set_xscale("log")
        right.set_xlim(low, high)
        right.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if high / low < 20 else (1,)))
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        right.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    right.axvline(1, color="black", linewidth=1, label="as fast as the best peer")
    right.set_xlabel("ours / best peer (right of 1x: ours is faster)", fontsize=8)
    handles, labels = [], []
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
        ax_handles, ax_labels = ax.get_legend_handles_labels()
        handles, labels = handles + ax_handles, labels + ax_labels
    height = fig.get_figheight()  # inches: the legend below the panels and the title above, each in its own band
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(f"Measured by this build {device}".rstrip("."), fontsize=8, x=0.01, y=1 - 0.08 / height, ha="left")
    fig.tight_layout(rect=(0, 0.55 / height, 1, 1 - 0.35 / height))
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


def _cuda():
    """torch.cuda where this build has a GPU, else None (no GPU, or no torch)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda if torch.cuda.is_available() else None


def _gpu():
    """The name of this build's GPU (torch.cuda.get_device_name), or None on a machine without one."""
    cuda = _cuda()
    return cuda.get_device_name(0) if cuda else None


def _sms():
    """The SM count of this build's GPU, or None on a machine without one."""
    cuda = _cuda()
    return cuda.get_device_properties(0).multi_processor_count if cuda else None


def _device(gpu):
    """Where this build measured: the GPU's name (as _gpu gives it), or the CPU's caveat."""
    if gpu:
        return f"on {gpu}, every page beside its peers in the same run."
    return (
        "on a CPU, through Triton's interpreter (Pallas' for JAX): these are NOT GPU timings, they say nothing "
        "about GPU speed, and only peers that run on a CPU ran."
    )


# ---- the build ----


def _folders(app):
    """(this build's results folder, the kept results folder, the tutorials' sources)."""
    return (
        pathlib.Path(app.outdir).parent / "results",
        pathlib.Path(app.srcdir) / "_generated" / "results",
        pathlib.Path(app.confdir) / "tutorials",
    )


def _page_rst(app, pages, stem):
    """The .rst that sphinx-gallery makes of a page (its mtime: when the page was last made)."""
    return pathlib.Path(app.srcdir) / f"{pages[stem][0]}.rst"


def _ask_for_results(app):
    """Before sphinx-gallery runs the tutorials: an empty folder for their results, named in SOL_RESULTS. What an
    earlier build left there is kept first, for each page whose .rst was made after its results (its run ended), as
    that build's end would have kept it: a build cut short (a time limit) and run again loses no page's numbers."""
    fresh, kept_dir, tutorials = _folders(app)
    left = sorted(fresh.glob("*.csv"))
    pages = _pages(tutorials) if left else {}
    for path in [p for p in left if p.stem in pages]:
        page_rst, made, old = _page_rst(app, pages, path.stem), path.stat().st_mtime_ns, kept_dir / path.name
        ended = page_rst.exists() and page_rst.stat().st_mtime_ns > made
        if ended and not (old.exists() and old.stat().st_mtime_ns >= made):  # not kept yet by that build's end
            kept_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, old)  # copied now: newer than its .rst, as a build's end copies
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
        found = {}
        for path in sorted(fresh.glob("*.csv")):
            try:
                found[path.stem] = _read(path)
            except ValueError as err:  # the page breaks the contract: a Sphinx warning, so -W fails the build
                _logger.warning(f"landing page: {err}")
        for stem in [s for s in found if s not in pages]:
            _logger.warning(f"landing page: results for {stem}, which is no page in tutorials/ (its file name?)")
            del found[stem]
        kept_dir.mkdir(parents=True, exist_ok=True)
        for stem in pages:
            page_rst = _page_rst(app, pages, stem)
            old = kept_dir / f"{stem}.csv"
            if stem in found:  # copied after sphinx-gallery wrote the page: newer than its .rst
                shutil.copyfile(fresh / f"{stem}.csv", old)
                results[stem] = found[stem]
                continue
            if old.exists() and page_rst.exists() and page_rst.stat().st_mtime_ns <= old.stat().st_mtime_ns:
                try:  # the page was not made again: its numbers and these are one run's
                    results[stem] = _read(old)
                    kept.append(stem)
                    continue
                except ValueError as err:  # written under an older contract
                    _logger.info(f"landing page: kept results dropped, {err}")
            if old.exists():
                old.unlink()  # the page was made again without results: these no longer match it
        for note in recommend(results)[1] if results else ():
            _logger.info(f"landing page: two pages claim the same N: {note}", color="darkred")
    gpu = _gpu() if results else None
    device, counters = _device(gpu) if results else "", None
    if results:
        draw(results, pages, device, generated / FIGURE)
        try:
            counters = read_counters(os.environ.get("SOL_COUNTERS", ""), gpu)
        except ValueError as err:  # a broken file of counters: a Sphinx warning, so -W fails the build
            _logger.warning(f"landing page: {err}")
        if counters is not None and not counters.get("sms"):  # a file without the SM count: this GPU's, named alike
            counters["sms"] = _sms()
    text = landing_rst(results, pages, device, kept=kept, ran=ran, counters=counters, gpu=gpu)
    _write_if_changed(generated / INCLUDE, text)


def setup(app):
    app.connect("builder-inited", _ask_for_results, priority=400)  # before sphinx-gallery's (500) runs them
    app.connect("builder-inited", _write_landing_results, priority=900)  # after it
    return {"parallel_read_safe": True, "parallel_write_safe": True}
