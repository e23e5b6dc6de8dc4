"""Nsight Compute's counters at the points where the landing page's rows miss a target, stored per GPU for the
landing page to show beside those rows.

For each page, a child process runs the page as the build does, cell by cell, with two changes: the page's ``bench``
is replaced by one that runs the call once to warm it up, then once more inside an NVTX range that ``ncu`` profiles
(only calls at the points asked for: a tensor or array of the point's dtype and N among what the call holds), and the
page's lists of sizes (``SWEEP_N`` and the like: an upper-case list of ints holding an asked N) keep only the asked N.
Each profiled call starts with a marker kernel whose grid is the call's number, so the report's kernels fall to their
calls. A call is named by the page's own variable for it (``name``, or ``key``), with its ``direction`` where the page
has one; where a page labels two calls alike at a point, the last is kept (the sweep's, after its ladder). Each point
also gets an elementwise copy of its x (``x * 1`` into a new tensor): a streaming kernel as a yardstick.

Per call: the kernels, their summed duration, DRAM bytes read and written, DRAM throughput as % of its peak and
achieved occupancy (warps active, % of an SM's slots; both weighted by each kernel's time), the waves of its longest
kernel. Written into docs/counters.json under the GPU's name (``torch.cuda.get_device_name``); the build names the file
in ``SOL_COUNTERS`` and the landing page shows each row's points.

    python3 dev/counters.py --misses docs/_generated/results     # the points where a built page's rows miss a target
    python3 dev/counters.py 11_softmax_long_rows:bfloat16:131072 02_layer_norm:float32:16384   # these points
    python3 dev/counters.py --no-ncu 01_fused_softmax:float32:256  # the plumbing alone: which calls it would profile

The pages run one after another (counters are the device's, so nothing else may run beside a profiled kernel).
``ncu`` runs with ``--clock-control none`` (the clocks as the pages' timings had them).
"""

import argparse
import ast
import collections
import csv
import datetime
import functools
import glob
import io
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
STORE = ROOT / "docs" / "counters.json"
METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__waves_per_multiprocessor",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
]
MARKER = "counters_marker"
RANGE = "sol"
MIN_PAGE_SECONDS = 20  # no page starts with less of the budget left: a page's run takes 20-140 s
LABELS = ("name", "key", "provider")  # a page's variable that names the call it times
PASSED = ("<lambda>", "<listcomp>", "<dictcomp>", "<genexpr>")  # frames between a page's loop and its bench


@functools.cache
def _loops(filename):
    """The loops and comprehensions of a page's file that bind a name of LABELS: (first line, last line, name)."""
    try:
        tree = ast.parse(pathlib.Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ()
    comprehensions = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    found = []
    for node in ast.walk(tree):
        targets = [node.target] if isinstance(node, ast.For) else []
        targets += [g.target for g in node.generators] if isinstance(node, comprehensions) else []
        found += [
            (node.lineno, node.end_lineno, n.id)
            for t in targets
            for n in ast.walk(t)
            if isinstance(n, ast.Name) and n.id in LABELS
        ]
    return tuple(found)


def _bound_here(frame, name):
    """Whether the frame's variable ``name`` names the call on its current line: any local of a function, but a page's
    global only inside a loop that binds it (after the loop it is a leftover: a later call is not that one's)."""
    if frame.f_code.co_name != "<module>":
        return True
    return any(first <= frame.f_lineno <= last and n == name for first, last, n in _loops(frame.f_code.co_filename))


# ---- which points ----


def page_path(stem):
    """tutorials/<stem>.py or tutorials/deep_dives/<stem>.py."""
    found = sorted((ROOT / "tutorials").rglob(f"{stem}*.py"))
    if not found:
        raise SystemExit(f"no page {stem} under tutorials/")
    return found[0]


def parse_point(text):
    """'11_softmax_long_rows:bfloat16:131072' -> (stem, dtype, N)."""
    stem, dtype, n = text.split(":")
    return page_path(stem).stem, dtype, int(n)


def _sol_results():
    """The landing page's module (docs/_ext/sol_results.py): its targets and the pages the counters cannot reach."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import sol_results

    return sol_results


def missed_points(folder):
    """{stem: {(dtype, N)}}: for each row of the landing page's per-page table that misses a target, the N of its
    lowest % of light, of its worst ours / best peer and of its worst ours / Helion (where Helion ran)."""
    sol_results = _sol_results()
    results = sol_results.read_results(folder)
    points = {}
    for stem, row in sol_results.page_rows(results, sol_results.recommend(results)[0]):
        missed = sol_results.missed_targets(stem, row)
        if not missed:
            continue
        dtype = row["what"].split(", ")[1]
        for n in {row["lowest at"], row["worst at"], row.get("worst vs Helion at")} - {None}:
            points.setdefault(stem, set()).add((dtype, int(n)))
    return points


# ---- the child: one page, its bench replaced ----


def _tensors(value, depth=0):
    """The tensors (or JAX arrays) a call holds: its arguments, its closure's cells and the globals it reads, and
    theirs."""
    if (
        hasattr(value, "shape")
        and hasattr(value, "dtype")
        and (hasattr(value, "element_size") or hasattr(value, "nbytes"))
    ):
        yield value
    elif isinstance(value, (list, tuple)) and depth < 3:
        for item in value:
            yield from _tensors(item, depth + 1)
    elif callable(value) and depth < 2:
        for cell in getattr(value, "__closure__", None) or ():
            try:
                yield from _tensors(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                pass
        for default in getattr(value, "__defaults__", None) or ():
            yield from _tensors(default, depth + 1)
        code, scope = getattr(value, "__code__", None), getattr(value, "__globals__", {})
        for name in code.co_names if code else ():  # a lambda at a page's top level reads its tensors as globals
            if not callable(scope.get(name)):
                yield from _tensors(scope.get(name), depth + 1)


def _dtype(t):
    return str(t.dtype).removeprefix("torch.")


def _nbytes(t):
    return int(t.nbytes) if hasattr(t, "nbytes") and not hasattr(t, "element_size") else t.numel() * t.element_size()


def _matches(t, points):
    n = t.shape[-1] if len(t.shape) else 1
    size = math.prod(t.shape)
    return next(((d, p) for d, p in points if _dtype(t) == d and (n == p or len(t.shape) == 1 and size == p)), None)


def _shrink(scope, sizes):
    """Each upper-case list or tuple of ints in the page's globals that holds an asked N keeps only those (and a dict
    of such lists, each of its lists)."""
    keep = lambda seq: type(seq)(n for n in seq if n in sizes)
    is_sizes = lambda v: isinstance(v, (list, tuple)) and len(v) > 1 and all(type(n) is int for n in v)
    for name, value in list(scope.items()):
        if not name.isupper():
            continue
        if is_sizes(value) and set(value) & sizes:
            scope[name] = keep(value)
        elif isinstance(value, dict) and value and all(is_sizes(v) for v in value.values()):
            if any(set(v) & sizes for v in value.values()):
                scope[name] = {k: keep(v) for k, v in value.items()}


class Profiler:
    """The page's bench, replaced: profiles the calls at the asked points, one NVTX range each, a marker first."""

    def __init__(self, points, use_range):
        import torch

        self.torch, self.points, self.use_range, self.calls, self.copied = torch, points, use_range, [], set()
        self.seen = {}  # a call timed again (a page's rounds): its function and arguments, held so ids stay theirs
        self.cuda = torch.cuda.is_available()
        self.marker = None
        if self.cuda:
            import triton
            import triton.language as tl

            @triton.jit
            def counters_marker(ptr):  # noqa: ARG001  a kernel that does nothing: its grid is the call's number
                tl.program_id(0)

            self.marker = counters_marker
            self.flag = torch.zeros(1, device="cuda")
            self.marker[(1,)](self.flag)

    def _sync(self, result):
        if hasattr(result, "block_until_ready"):
            result.block_until_ready()
        elif isinstance(result, (list, tuple)):
            for r in result:
                self._sync(r)
        if self.cuda:
            self.torch.cuda.synchronize()

    def _profiled(self, run, record):
        """run() once in the profiled range, after the marker of its number; record it."""
        record["call"] = len(self.calls) + 1
        self.calls.append(record)
        if self.use_range:
            self.torch.cuda.nvtx.range_push(RANGE)
        if self.marker is not None:
            self.marker[(record["call"],)](self.flag)
        self._sync(run())
        if self.use_range:
            self.torch.cuda.nvtx.range_pop()

    def bench(self, fn, *args, **kwargs):
        args = tuple(a for a in args if not isinstance(a, bool))  # bench(fn, False): a page's graph flag
        run = lambda: fn(*args)
        found = [(t, p) for t in _tensors([fn, *args]) if (p := _matches(t, self.points))]
        self._sync(run())  # compiles and warms up outside the range (and runs it once: a page may read its output)
        if not found:
            return 1.0 if self.cuda else math.nan
        x, (dtype, n) = max(found, key=lambda tp: _nbytes(tp[0]))
        caller = sys._getframe(1)  # the page's frame that names the call (past a lambda or comprehension)
        while caller.f_code.co_name in PASSED and caller.f_back and not set(LABELS) & set(caller.f_locals):
            caller = caller.f_back
        local = caller.f_locals
        label = next((local[k] for k in LABELS if isinstance(local.get(k), str) and _bound_here(caller, k)), None)
        if label is None and fn is caller.f_globals.get("copy"):  # the page's light, a copy it names copy (51, 52)
            label = "copy"
        outer, held = caller.f_back, {id(fn), *map(id, args)}
        while label is None and outer is not None and outer.f_code.co_filename == caller.f_code.co_filename:
            # a helper of the page that times what it is handed (51's and 52's beside_copy): named by the page's frame
            # that handed it over, one that holds the call's function or an argument, by its one name of LABELS; at
            # the top level only a comprehension's (Python 3.12 runs it in the page's frame), no global left by a loop
            top, scope = outer.f_code.co_name == "<module>", outer.f_locals
            names = [scope[k] for k in LABELS if isinstance(scope.get(k), str) and not (top and k in outer.f_globals)]
            if held & {id(v) for v in scope.values()} and len(names) == 1:
                label = names[0]
            outer = outer.f_back
        again = (caller.f_code, caller.f_lineno, label, id(fn), *map(id, args))
        if again in self.seen:  # the same call on the same arguments, timed once more (rounds): profiled once
            return 1.0 if self.cuda else math.nan
        self.seen[again] = (fn, args)
        record = {
            "dtype": dtype,
            "N": n,
            "x_bytes": _nbytes(x),
            "function": caller.f_code.co_name,
            "line": caller.f_lineno,
            "label": label,
            "direction": local["direction"] if isinstance(local.get("direction"), str) else None,
        }
        if (dtype, n, _nbytes(x)) not in self.copied and hasattr(x, "element_size"):  # the streaming yardstick
            self.copied.add((dtype, n, _nbytes(x)))
            self._profiled(lambda: self.torch.mul(x, 1), dict(record, label="copy kernel", direction=None))
        self._profiled(run, record)
        return 1.0 if self.cuda else math.nan


def run_page(stem, points, use_range, log=print):
    """Runs the page cell by cell with its bench replaced; returns the profiled calls."""
    path = page_path(stem)
    source = path.read_text(encoding="utf-8")
    scope = {"__name__": "__main__", "__file__": str(path)}
    profiler = Profiler(points, use_range)
    sizes = {n for _, n in points}
    line = 0
    for cell in source.split("\n# %%"):
        text, start = ("\n" * line) + ("# %%" if line else "") + cell, line + 1
        line += cell.count("\n") + 1
        text = text.replace("\ndef bench(", "\ndef _page_bench(")  # the page's own timer, not called
        scope["bench"] = profiler.bench
        try:
            exec(compile(text, str(path), "exec"), scope)
        except Exception as err:  # a later cell that reads the (replaced) timings may fail: go on
            log(f"{stem}: the cell at line {start}: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
        _shrink(scope, sizes)
    return profiler.calls


# ---- the parent: ncu around each page, its report read back ----


def find_ncu():
    return shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))[::-1]), None)


SCALE = {
    "": 1,
    "register/thread": 1,
    "block": 1,
    "thread": 1,
    "byte": 1,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Tbyte": 1e12,
    "%": 1,
    "ns": 1,
    "nsecond": 1,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}


def read_report(text):
    """The kernels of ncu's raw CSV page, in launch order: dicts of the kernel's name and METRICS, as floats in bytes,
    nanoseconds, % or counts (the page's second row gives each column's unit)."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    header, units, kernels = rows[start], rows[start + 1], []
    unit = dict(zip(header, units))
    for r in rows[start + 2 :]:
        if len(r) != len(header) or not r[0].strip().isdigit():
            continue
        cells = dict(zip(header, r))
        kernel = {"name": cells.get("Kernel Name", "")}
        for m in METRICS:
            try:
                kernel[m] = float(cells.get(m, "nan").replace(",", "")) * SCALE.get(unit.get(m, ""), 1)
            except ValueError:
                kernel[m] = math.nan
            if unit.get(m, "") not in SCALE and m in unit:
                raise ValueError(f"ncu gave {m} in {unit[m]!r}, a unit this tool does not read")
        kernels.append(kernel)
    return kernels


def assign(kernels, calls):
    """{call number: [its kernels]}: each marker opens its call (grid size = the call's number)."""
    found, current = {}, None
    for k in kernels:
        if MARKER in k["name"]:
            current = int(k["launch__grid_size"])
            found[current] = []
        elif current is not None:
            found[current].append(k)
    return found


def summarize_call(record, kernels):
    """The stored figures of one call."""
    us = [k["gpu__time_duration.sum"] / 1e3 for k in kernels]  # ncu gives ns
    total = sum(us)
    weighted = lambda m: sum(k[m] * t for k, t in zip(kernels, us)) / total if total else math.nan
    longest = max(range(len(kernels)), key=lambda i: us[i]) if kernels else None
    round_ = lambda v, d=1: None if v is None or math.isnan(v) else round(v, d)
    return {
        "label": record["label"],
        "kernels": len(kernels),
        "names": sorted({k["name"] for k in kernels}),
        "us": round_(total, 2),
        "dram_bytes": int(sum(k["dram__bytes_read.sum"] + k["dram__bytes_write.sum"] for k in kernels)),
        "x_bytes": record["x_bytes"],
        "dram_pct": round_(weighted("dram__throughput.avg.pct_of_peak_sustained_elapsed")),
        "warps_active_pct": round_(weighted("sm__warps_active.avg.pct_of_peak_sustained_active")),
        "waves": round_(kernels[longest]["launch__waves_per_multiprocessor"], 2) if kernels else None,
        "grid": int(kernels[longest]["launch__grid_size"]) if kernels else None,
        "block": int(kernels[longest]["launch__block_size"]) if kernels else None,
        "registers": int(kernels[longest]["launch__registers_per_thread"]) if kernels else None,
    }


def ours_label(stem):
    """The page's name for the kernel its results call ours ("split" on 11), from the block that writes them: the
    provider its "<name>, % of light" column is computed from ("2: persistent" on 24, whose column says "design 2")."""
    text = page_path(stem).read_text(encoding="utf-8")
    found = 'set_axis(["ours, % of light"' in text and re.search(r'\[\["([^"]+), % of light", "[^"]+"\]\]', text)
    if not found:
        return "ours"
    column = re.escape(f'table["{found.group(1)}, % of light"]')
    source = re.search(column + r' = 100 \* table\["([^"]+)"\]', text)
    return source.group(1) if source else found.group(1)


def points_of(stem, calls, kernels_of, log=print):
    """The stored points of one page: its calls grouped by (direction, dtype, N), only those on the point's largest x
    (the sweep's tensors; a ladder or a check on fewer rows is another experiment), the last of each label kept (the
    page's name for ours, or a label ending "(ours)" as 05's "Pallas (ours)", stored as "ours"). A label timed twice
    from one line at one point on other arguments (rows and columns of one loop, or a ladder's steps timed where a
    loop before it left its label's variable set; the same call on the same arguments, a page's rounds, is profiled
    once) cannot be told apart: those calls are left out (the log names the page's labels), the label's calls from
    other lines and the point's other calls kept; a point left with none is left out. A call timed in a helper of the
    page with no variable naming it (03's light in ``yardsticks``, 06's steps in ``measure_ladder``) is no peer: left
    out. Where ours ran the very kernels of another call, the log says so: a fallback of ours, or a call of another
    profiled as ours, to check before its reading is trusted."""
    groups, ours = {}, ours_label(stem)
    for record in calls:
        kernels = kernels_of.get(record["call"], [])
        if kernels:  # none: a copy by the copy engine (cudaMemcpy), or a call that launched nothing
            groups.setdefault((record["direction"], record["dtype"], record["N"]), []).append((record, kernels))
    copies, out = {}, []
    for (direction, dtype, n), found in groups.items():
        found = [(record, kernels) for record, kernels in found if record["label"] is not None]  # named calls only
        largest = max((record["x_bytes"] for record, _ in found), default=0)
        entries = []  # ((label, function, line), raw label, entry) of the sweep's tensors
        for record, kernels in found:
            if record["x_bytes"] != largest:
                continue
            entry = summarize_call(record, kernels)
            label = entry["label"]
            entry["label"] = "ours" if label == ours or label.endswith(" (ours)") else label
            if entry["label"] == "copy kernel":
                copies[dtype, n] = entry
                continue
            entries.append(((entry["label"], record["function"], record["line"]), record["label"], entry))
        times = collections.Counter(where for where, _, _ in entries)
        by_label = {entry["label"]: entry for where, _, entry in entries if times[where] == 1}  # the last of each kept
        for where, named in dict.fromkeys((where, named) for where, named, _ in entries if times[where] > 1):
            log(f"{stem} {direction or ''} {dtype} N = {n:,}: {named} timed twice at line {where[2]}: left out")
        mine = by_label.get("ours")
        same = [k for k, e in by_label.items() if mine and k != "ours" and sorted(e["names"]) == sorted(mine["names"])]
        if same:  # ours' own fallback (05 past its range runs XLA's), or another call's kernels profiled as ours
            log(f"{stem} {direction or ''} {dtype} N = {n:,}: ours ran the same kernels as {', '.join(same)}: check")
        out.append({"page": stem, "direction": direction, "dtype": dtype, "N": n, "calls": list(by_label.values())})
    for point in out:
        copy = copies.get((point["dtype"], point["N"]))
        if copy and point["calls"] and copy["x_bytes"] == point["calls"][0]["x_bytes"]:
            point["calls"].append(copy)
    return [point for point in out if point["calls"]]


def child_main(args):
    import torch

    points = {tuple(p) for p in json.loads(args.child_points)}
    torch.autograd.set_multithreading_enabled(False)  # a backward runs on this thread, inside its NVTX range
    calls = run_page(
        args.child,
        points,
        use_range=torch.cuda.is_available() and not args.no_ncu,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    pathlib.Path(args.records).write_text(json.dumps(calls))


def profile_page(stem, points, ncu, work, timeout):
    """(records, kernels) of one page run under ncu (kernels None without ncu)."""
    records, report = work / f"{stem}.calls.json", work / f"{stem}"
    child = [
        sys.executable,
        __file__,
        "--child",
        stem,
        "--points",
        json.dumps(sorted(points)),
        "--records",
        str(records),
    ] + (["--no-ncu"] if not ncu else [])
    if ncu:
        child = [
            ncu,
            "--clock-control",
            "none",
            "--target-processes",
            "application-only",
            "--nvtx",
            "--nvtx-include",
            f"{RANGE}/",
            "--metrics",
            ",".join(METRICS),
            "--export",
            str(report),
            "--force-overwrite",
            *child,
        ]
    env = dict(os.environ, MPLBACKEND="Agg", XLA_PYTHON_CLIENT_PREALLOCATE="false", SOL_HELION_AUTOTUNE="0")
    env.setdefault("SOL_HELION_CONFIGS", str(ROOT / "docs" / "helion_configs.json"))
    env.pop("SOL_RESULTS", None)
    with open(work / f"{stem}.log", "w") as log:
        run = subprocess.Popen(child, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = run.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # ncu and the page it runs, together: no page left running on the GPU
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            raise RuntimeError(f"{stem}: cut at {timeout:.0f} s; see {work / (stem + '.log')}") from None
    if returncode or not records.exists():
        raise RuntimeError(f"{stem}: exit {returncode}; see {work / (stem + '.log')}")
    calls = json.loads(records.read_text())
    if not ncu:
        return calls, None
    text = subprocess.run(
        [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"], capture_output=True, text=True, check=True
    ).stdout
    (work / f"{stem}.csv").write_text(text)
    return calls, read_report(text)


def store(path, gpu, entry):
    """entry's points replace those stored for the GPU at the same page, direction, dtype and N; the others stay."""
    data = json.loads(path.read_text()) if path.exists() else {}
    where = lambda point: (point["page"], point.get("direction"), point["dtype"], point["N"])
    new = {where(point) for point in entry["points"]}
    kept = [point for point in data.get(gpu, {}).get("points", []) if where(point) not in new]
    data[gpu] = dict(
        entry,
        points=sorted(kept + entry["points"], key=lambda p: (p["page"], str(p.get("direction")), p["dtype"], p["N"])),
    )
    path.write_text(json.dumps(data, indent=1) + "\n")


def describe(point):
    """One line of a point's figures, for the log."""
    parts = []
    for c in point["calls"]:
        times = c["dram_bytes"] / c["x_bytes"] if c["x_bytes"] else math.nan
        parts.append(
            f"{c['label']}: {c['kernels']} kernel(s) {c['us']} us, {times:.2f}x x's bytes, DRAM "
            f"{c['dram_pct']}%, warps active {c['warps_active_pct']}%, {c['waves']} waves"
        )
    return f"{point['page']} {point['direction'] or ''} {point['dtype']} N = {point['N']:,}: " + "; ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*", help="stem:dtype:N, e.g. 11_softmax_long_rows:bfloat16:131072")
    parser.add_argument("--misses", help="a folder of the pages' results CSVs: the points where a row misses")
    parser.add_argument("--pages", nargs="*", help="only these pages (stems or their first digits)")
    parser.add_argument("--out", default=str(STORE))
    parser.add_argument("--no-ncu", action="store_true", help="no ncu: list the calls it would profile")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a page may take")
    parser.add_argument("--budget", type=float, default=math.inf, help="seconds for the run; a page gets what is left")
    parser.add_argument("--work", default="/tmp/sol-counters", help="logs, reports and the raw CSVs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--records", help=argparse.SUPPRESS)
    parser.add_argument("--points", dest="child_points", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    wanted = {}
    for text in args.points:
        stem, dtype, n = parse_point(text)
        wanted.setdefault(stem, set()).add((dtype, n))
    if args.misses:
        for stem, pts in missed_points(args.misses).items():
            wanted.setdefault(stem, set()).update(pts)
    if args.pages:
        wanted = {s: p for s, p in wanted.items() if any(s.startswith(q) for q in args.pages)}
    ncu = None if args.no_ncu else find_ncu()
    if not args.no_ncu and not ncu:
        raise SystemExit("no ncu (Nsight Compute) on PATH or under /opt/nvidia/nsight-compute")
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    stored, failed = [], []
    version = (
        subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines() if ncu else []
    )
    not_counted = _sol_results().NOT_COUNTED
    for stem in sorted(set(wanted) & set(not_counted)):
        print(f"{stem}: {not_counted[stem].replace('``', '')}", flush=True)
        del wanted[stem]
    began = time.time()
    for stem, pts in sorted(wanted.items(), key=lambda item: (not item[0].startswith("0"), item[0])):  # core first
        left = args.budget - (time.time() - began)
        if left < MIN_PAGE_SECONDS:
            print(f"{stem}: not run, past the budget of {args.budget:.0f} s", flush=True)
            failed.append(stem)
            continue
        start = time.time()
        try:
            calls, kernels = profile_page(stem, pts, ncu, work, min(args.timeout, left))
        except (RuntimeError, subprocess.SubprocessError) as err:
            print(f"{stem}: FAILED: {err}", flush=True)
            failed.append(stem)
            continue
        if kernels is None:
            for c in calls:
                print(
                    f"{stem}: call {c['call']}: {c['label']} {c['direction'] or ''} {c['dtype']} N = {c['N']:,} "
                    f"({c['function']}, line {c['line']})",
                    flush=True,
                )
            continue
        found = points_of(stem, calls, assign(kernels, calls))
        for point in found:
            print(describe(point), flush=True)
        print(f"{stem}: {len(found)} point(s) of {len(pts)} asked, {time.time() - start:.0f} s", flush=True)
        if found:  # stored page by page: a run cut short (a call's time limit) keeps the pages it finished
            import torch

            entry = {
                "measured": datetime.date.today().isoformat(),
                "ncu": version[-1] if version else "",
                "sms": torch.cuda.get_device_properties(0).multi_processor_count,  # the reading's warps an SM
            }
            store(
                pathlib.Path(args.out),
                torch.cuda.get_device_name(0),
                entry | {"torch": torch.__version__, "points": found},
            )
            stored += found
    if stored:
        print(f"stored {len(stored)} points in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
